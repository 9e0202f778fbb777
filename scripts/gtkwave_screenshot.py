"""Screenshot of GTKWave showing a kernel's waveform window, for the README.

    .venv/bin/python scripts/gtkwave_screenshot.py [--kernel scores] [--vcd FILE]
                                                   [-o docs/gtkwave-scores.png]

Without ``--vcd`` it traces the kernel's window first (``npu run --block --seq-len 8
--waves-kernel NAME``), then writes the save file (``npu waves gtkw``), opens both in GTKWave
on a virtual X display (Xvfb, 1600x900) and saves what the screen shows as a PNG.

Needs gtkwave and Xvfb (Debian: ``apt-get install gtkwave xvfb``); the PNG is taken with
Pillow (installed with matplotlib), which reads the X display directly.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZE = (1600, 900)


def _trace(kernel: str) -> Path:
    """Run the attention block with a waveform of the first ``kernel`` region; return the
    VCD."""
    npu = Path(sys.executable).with_name("npu")
    subprocess.run([str(npu), "run", "--block", "--seq-len", "8", "--waves-kernel", kernel],
                   cwd=ROOT, check=True)
    from cosim.tb.harness import waves_dir
    return waves_dir() / "npu_run.vcd"


def _free_display() -> int:
    n = 90
    while Path(f"/tmp/.X{n}-lock").exists():
        n += 1
    return n


def screenshot(vcd: Path, out: Path, *, settle_s: float = 4.0) -> Path:
    """Open ``vcd`` and its save file in GTKWave on a new Xvfb display and save the screen
    as ``out`` (PNG). Raises ``RuntimeError`` if a tool is missing or GTKWave fails."""
    for tool in ("gtkwave", "Xvfb"):
        if not shutil.which(tool):
            raise RuntimeError(f"{tool} is not installed (apt-get install gtkwave xvfb)")
    from PIL import ImageGrab

    from cosim.waves import write_gtkw

    gtkw, notes = write_gtkw(vcd)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    display = _free_display()
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        tcl = Path(tmp) / "ready.tcl"
        tcl.write_text(f"set f [open {ready} w]\nputs $f ok\nclose $f\n")
        xvfb = subprocess.Popen(["Xvfb", f":{display}", "-screen", "0",
                                 f"{SIZE[0]}x{SIZE[1]}x24", "-nolisten", "tcp"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        viewer = None
        try:
            time.sleep(1.0)
            env = dict(os.environ, DISPLAY=f":{display}")
            viewer = subprocess.Popen(["gtkwave", "-S", str(tcl), str(vcd), str(gtkw)],
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 300
            while not ready.exists():
                if viewer.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gtkwave did not come up: {viewer.stdout.read()}")
                time.sleep(0.2)
            time.sleep(settle_s)                 # let it draw the waves
            out.parent.mkdir(parents=True, exist_ok=True)
            ImageGrab.grab(xdisplay=f":{display}").save(out)
        finally:
            for p in (viewer, xvfb):
                if p is not None:
                    p.terminate()
                    p.wait(timeout=30)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", default="scores", help="kernel window to trace")
    p.add_argument("--vcd", type=Path, help="an existing waveform (skips the run)")
    p.add_argument("-o", "--out", type=Path, default=ROOT / "docs" / "gtkwave-scores.png")
    args = p.parse_args(argv)
    vcd = args.vcd or _trace(args.kernel)
    print(screenshot(vcd, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
