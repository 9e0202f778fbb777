"""The ``npu`` console command (``[project.scripts]`` in pyproject.toml): :func:`main`.

It imports nothing before :func:`main` runs, so that a ^C while ``npu`` loads
(:mod:`cosim.cli` and the hardware and runtime packages it imports, about half a second)
prints one line and exits 130, as a ^C later does, instead of a traceback.
"""

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Import :mod:`cosim.cli` and run :func:`cosim.cli.main` with ``argv`` (default
    ``sys.argv[1:]``); return its exit status, or 130 on a ^C while importing."""
    try:
        from cosim.cli import main as cli_main
    except KeyboardInterrupt:
        print("npu: interrupted", file=sys.stderr)
        return 130
    return cli_main(argv)
