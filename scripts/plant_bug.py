"""Planted-bug audit: apply a bug from a unified diff, run tests, always restore the tree.

    .venv/bin/python scripts/plant_bug.py BUG.diff [BUG2.diff ...] -- PYTEST_ARGS...

For each patch, one at a time: check that every file it touches is clean in git (no staged or
unstaged change; otherwise refuse to start, so that restoring cannot lose work), apply it with
``git apply``, run ``pytest PYTEST_ARGS`` (``-p no:cacheprovider`` added), and restore the
touched files from ``HEAD`` (and delete files the patch created) -- also on an error, ^C or
SIGTERM. A patch is **caught** when pytest fails (exit code 1), **survived** when it passes
(0); any other exit code (usage error, no tests collected, interrupted) is reported as an
error. Write the patch with ``git diff > bug.diff`` after editing, then ``git checkout`` the
file.

Exit code: 0 if every patch was caught, 1 if one survived, 2 on an error.

Options: ``--pytest CMD`` (default ``.venv/bin/pytest``), ``--nice N`` (run pytest under
``nice -n N``), ``--quiet`` (hide pytest's output), ``--root DIR`` (another git work tree).
A patch to ``hw/`` invalidates the cached Verilator builds of the RTL tests it selects: each
run then rebuilds them (minutes).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST_CAUGHT, PYTEST_PASSED = 1, 0


class PlantError(RuntimeError):
    """A patch that cannot be planted (dirty tree, does not apply, bad file)."""


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=check)


def touched_files(root: Path, patch: Path) -> tuple[list[str], list[str]]:
    """``(existing, created)``: the repository paths ``patch`` modifies and those it creates."""
    out = _git(root, "apply", "--numstat", "--summary", str(patch), check=False)
    if out.returncode:
        raise PlantError(f"{patch}: not a patch git can read: {out.stderr.strip()}")
    existing, created = [], []
    for line in out.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            existing.append(parts[2])
        elif line.strip().startswith("create mode"):
            created.append(line.split()[-1])
    existing = [p for p in existing if p not in created]
    if not existing and not created:
        raise PlantError(f"{patch}: touches no file")
    return existing, created


def check_clean(root: Path, paths: list[str], created: list[str]) -> None:
    """Raise :class:`PlantError` if any of ``paths`` has an uncommitted change, or a file the
    patch would create already exists."""
    status = _git(root, "status", "--porcelain", "--", *paths).stdout.strip() if paths else ""
    if status:
        raise PlantError("refusing to plant: uncommitted changes in touched files:\n" + status)
    there = [p for p in created if (root / p).exists()]
    if there:
        raise PlantError(f"refusing to plant: files the patch creates exist: {there}")


def restore(root: Path, paths: list[str], created: list[str]) -> None:
    """Put the touched files back as in ``HEAD`` and delete the created ones."""
    if paths:
        _git(root, "checkout", "HEAD", "--", *paths)
    for p in created:
        (root / p).unlink(missing_ok=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def plant(patch: Path, pytest_cmd: list[str], *, quiet: bool = False,
          root: Path = ROOT) -> tuple[str, int, float]:
    """Apply ``patch`` to the git work tree ``root``, run ``pytest_cmd`` there, restore.

    Returns
    -------
    (verdict, exit code, seconds)
        verdict ``"caught"`` (pytest exit 1), ``"survived"`` (0) or ``"error"`` (other).

    Raises
    ------
    PlantError
        If the patch cannot be read or applied, or a file it touches is not clean.
    """
    paths, created = touched_files(root, patch)
    check_clean(root, paths, created)
    applied = _git(root, "apply", "--check", str(patch), check=False)
    if applied.returncode:
        raise PlantError(f"{patch} does not apply: {applied.stderr.strip()}")
    t0 = time.perf_counter()
    try:
        _git(root, "apply", str(patch))
        out = subprocess.DEVNULL if quiet else None
        rc = subprocess.run(pytest_cmd, cwd=root, stdout=out, stderr=out).returncode
    finally:
        restore(root, paths, created)
    verdict = {PYTEST_CAUGHT: "caught", PYTEST_PASSED: "survived"}.get(rc, "error")
    return verdict, rc, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("usage: plant_bug.py [options] BUG.diff [...] -- PYTEST_ARGS...", file=sys.stderr)
        return 2
    split = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("patches", nargs="+", type=Path)
    p.add_argument("--pytest", default=str(ROOT / ".venv" / "bin" / "pytest"))
    p.add_argument("--nice", type=int, default=None)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--root", type=Path, default=ROOT, help="git work tree (default: this one)")
    args = p.parse_args(argv[:split])
    cmd = ([] if args.nice is None else ["nice", "-n", str(args.nice)]) \
        + args.pytest.split() + ["-p", "no:cacheprovider", *argv[split + 1:]]
    signal.signal(signal.SIGTERM, _raise_interrupt)
    worst = 0
    for patch in args.patches:
        try:
            verdict, rc, secs = plant(patch.resolve(), cmd, quiet=args.quiet,
                                      root=args.root.resolve())
        except PlantError as e:
            print(f"ERROR     {patch}: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"INTERRUPTED {patch}: tree restored", file=sys.stderr)
            return 2
        print(f"{verdict.upper():9s} {patch} (pytest exit {rc}, {secs:.0f} s)", flush=True)
        worst = max(worst, {"caught": 0, "survived": 1, "error": 2}[verdict])
    return worst


if __name__ == "__main__":
    sys.exit(main())
