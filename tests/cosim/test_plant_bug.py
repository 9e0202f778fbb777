"""scripts/plant_bug.py on a scratch git repository: a planted bug is caught or survives by
pytest's exit code, the tree is restored every time (also when interrupted), a dirty touched
file makes it refuse, and files a patch creates are removed."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "plant_bug.py"
sys.path.insert(0, str(SCRIPT.parent))
import plant_bug  # noqa: E402

GOOD = "def f():\n    return 1  # the answer\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q")
    (r / "mod.py").write_text(GOOD)
    (r / "test_mod.py").write_text("from mod import f\n\n\ndef test_f():\n    assert f() == 1\n")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "init")
    return r


def _patch(repo: Path, name: str, new_text: str, path: str = "mod.py") -> Path:
    """The diff that turns ``path`` into ``new_text``; the tree is left clean."""
    target = repo / path
    existed = target.exists()
    target.write_text(new_text)
    if not existed:
        _git(repo, "add", "-N", path)
    diff = _git(repo, "diff", "--", path)
    if existed:
        _git(repo, "checkout", "--", path)
    else:
        _git(repo, "rm", "-q", "--cached", path)
        target.unlink()
    out = repo.parent / name
    out.write_text(diff)
    return out


#: stands in for pytest (the script only reads the exit code): 1 if f() is wrong, 0 if not,
#: 4 (pytest's usage error) when asked to
CHECK = ("import sys\nsys.path.insert(0, '.')\nif 'usage' in sys.argv: sys.exit(4)\n"
         "import mod\nsys.exit(0 if mod.f() == 1 else 1)\n")


def _pytest(repo: Path, *args: str) -> list[str]:
    check = repo.parent / "check.py"
    check.write_text(CHECK)
    return [sys.executable, str(check), *args]


def test_caught_survived_and_always_restored(repo):
    bug = _patch(repo, "bug.diff", GOOD.replace("return 1", "return 2"))
    harmless = _patch(repo, "harmless.diff", GOOD.replace("the answer", "a comment"))
    assert plant_bug.plant(bug, _pytest(repo), quiet=True, root=repo)[:2] == ("caught", 1)
    assert (repo / "mod.py").read_text() == GOOD
    assert plant_bug.plant(harmless, _pytest(repo), quiet=True, root=repo)[:2] == \
        ("survived", 0)
    assert (repo / "mod.py").read_text() == GOOD and _git(repo, "status", "--porcelain") == ""
    # a usage error or an empty selection (pytest exit 4, 5) is an error, not "survived"
    assert plant_bug.plant(bug, _pytest(repo, "usage"), quiet=True, root=repo)[:2] == \
        ("error", 4)
    assert (repo / "mod.py").read_text() == GOOD


def test_refuses_a_dirty_touched_file_and_changes_nothing(repo):
    bug = _patch(repo, "bug.diff", GOOD.replace("return 1", "return 2"))
    work = GOOD + "# my unsaved work\n"
    (repo / "mod.py").write_text(work)
    with pytest.raises(plant_bug.PlantError, match="uncommitted changes"):
        plant_bug.plant(bug, _pytest(repo), quiet=True, root=repo)
    assert (repo / "mod.py").read_text() == work


def test_created_files_are_removed(repo):
    new = _patch(repo, "new.diff", "def g():\n    return 0\n", path="extra.py")
    assert plant_bug.plant(new, _pytest(repo), quiet=True, root=repo)[0] == "survived"
    assert not (repo / "extra.py").exists() and _git(repo, "status", "--porcelain") == ""


def test_interrupted_run_restores_the_tree(repo):
    """The 'pytest' here sends SIGTERM to the script (as ^C or a kill would end it)."""
    bug = _patch(repo, "bug.diff", GOOD.replace("return 1", "return 2"))
    killer = repo.parent / "killer.py"
    killer.write_text("import os, signal, time\nos.kill(os.getppid(), signal.SIGTERM)\n"
                      "time.sleep(5)\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--root", str(repo), "--pytest",
                          f"{sys.executable} {killer}", str(bug), "--"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "INTERRUPTED" in out.stderr, out
    assert (repo / "mod.py").read_text() == GOOD and _git(repo, "status", "--porcelain") == ""


def test_command_line_exit_codes(repo):
    bug = _patch(repo, "bug.diff", GOOD.replace("return 1", "return 2"))
    harmless = _patch(repo, "harmless.diff", GOOD.replace("the answer", "a comment"))
    base = [sys.executable, str(SCRIPT), "--root", str(repo), "--pytest",
            " ".join(_pytest(repo)), "--quiet"]
    caught = subprocess.run([*base, str(bug), "--"], capture_output=True, text=True,
                            timeout=120)
    assert caught.returncode == 0 and caught.stdout.startswith("CAUGHT"), caught
    both = subprocess.run([*base, str(bug), str(harmless), "--"], capture_output=True,
                          text=True, timeout=120)
    assert both.returncode == 1 and "SURVIVED" in both.stdout.splitlines()[1], both
    assert subprocess.run([*base, str(bug)], capture_output=True).returncode == 2  # no "--"
