"""The README's Python example runs as written (on the functional model)."""

import re
from pathlib import Path


def test_readme_python_example_runs():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no Python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def _npu_commands(text: str) -> list[str]:
    """Every ``.venv/bin/npu ...`` line of the README's shell blocks (continuations joined,
    comments dropped)."""
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#(?:\s|$)", line)[0].strip()
            if line.startswith(".venv/bin/npu "):
                cmds.append(line[len(".venv/bin/npu "):])
    return cmds


def test_readme_npu_commands_parse():
    """Each ``npu`` command the README shows is accepted by the argument parser as written
    (a renamed option or a stale value fails here, not in a user's shell)."""
    import shlex

    import pytest

    from cosim.cli import build_parser

    text = (Path(__file__).parents[2] / "README.md").read_text()
    cmds = _npu_commands(text)
    assert len(cmds) >= 10, cmds
    parser = build_parser()
    for cmd in cmds:
        argv = shlex.split(cmd)
        if "--help" in argv:
            continue
        try:
            parser.parse_args(argv)
        except SystemExit as e:
            pytest.fail(f"README command does not parse: npu {cmd} (exit {e.code})")
