"""Checks shared by the waveform-kind tests: two independent readers agree, and GTKWave
opens the file with its save file.

* :func:`readers_agree`: the project's reader (fast and checked paths) against vcdvcd, a
  reader written by others, on the values and the clock edges of chosen signals;
* :func:`check_in_gtkwave`: ``xvfb-run -a gtkwave -S probe.tcl FILE SAVEFILE`` exits 0 with
  no "parse error"; GTKWave shows every signal of the save file, in its order, over the
  file's whole time range, with the named markers at the kernel regions.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import vcdvcd

from cosim.waves import write_gtkw
from cosim.waves.vcd import VcdHeader, VcdVar, canonical, changes, read_header, time_range

HAVE_GTKWAVE = bool(shutil.which("gtkwave") and shutil.which("xvfb-run"))
GTKWAVE_MISSING = ("gtkwave and xvfb-run are not installed "
                   "(apt-get install gtkwave xvfb xauth)")

_PROBE_TCL = """set f [open {out} w]
puts $f "window [gtkwave::getWindowStartTime] [gtkwave::getWindowEndTime]"
foreach m {{A B C D E F G H I J K L M N O P Q R S T U V W X Y Z}} {{
    puts $f "marker $m [gtkwave::getNamedMarker $m]"
}}
foreach s [gtkwave::getDisplayedSignals] {{ puts $f "signal $s" }}
close $f
gtkwave::/File/Quit
"""


def history(values: list[tuple[int, object]]) -> list[tuple[int, object]]:
    """A signal's values at the end of each time it changed (the last one of a time wins;
    repeats of the same value dropped)."""
    out: list[tuple[int, object]] = []
    for t, v in values:
        if out and out[-1][0] == t:
            out.pop()
        if not out or out[-1][1] != v:
            out.append((t, v))
    return out


def rising_edges(values: list[tuple[int, object]]) -> list[int]:
    h = history(values)
    return [t for (_, a), (t, b) in zip(h, h[1:], strict=False) if a == 0 and b == 1]


def ours(path: Path, header: VcdHeader, signals: list[VcdVar], *, fast: bool
         ) -> dict[str, list[tuple[int, object]]]:
    ids = list(dict.fromkeys(v.id for v in signals))
    got: dict[str, list] = {i: [] for i in ids}
    for batch in changes(path, header, ids, fast=fast):
        for i, (t, s) in enumerate(zip(batch.times.tolist(), batch.slots.tolist(),
                                       strict=True)):
            got[ids[s]].append((t, batch.value(i)))
    return {v.path: history(got[v.id]) for v in signals}


def theirs(path: Path, signals: list[VcdVar]) -> dict[str, list[tuple[int, object]]]:
    """The same through vcdvcd (its values, as written, made canonical). vcdvcd names a
    signal as written (``VcdVar.reference``: an escaped name keeps its backslash);
    vcdvcd ignores ``s`` (string) value changes, so strings come from :func:`naive_strings`.
    """
    words = [s for s in signals if s.kind != "string"]
    v = vcdvcd.VCDVCD(str(path), signals=[s.reference for s in words], store_tvs=True)
    out = naive_strings(path, [s for s in signals if s.kind == "string"])
    for s in words:
        tv = v[s.reference].tv
        out[s.path] = history([(t, canonical(s, x if s.width == 1 else "b" + x))
                               for t, x in tv])
    return out


def naive_strings(path: Path, signals: list[VcdVar]) -> dict[str, list[tuple[int, object]]]:
    """The changes of ``string`` variables, read line by line the simplest way (a time line
    ``#T``, a change ``sTEXT ID``); for the files the project writes, one change a line."""
    ids = {s.id for s in signals}
    got: dict[str, list] = {i: [] for i in ids}
    t = 0
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                t = int(line[1:])
            elif line.startswith("s") and ids:
                text, _, ident = line[1:].strip().rpartition(" ")
                if ident in ids:
                    got[ident].append((t, text))
    return {s.path: history(got[s.id]) for s in signals}


def readers_agree(path: Path, signals: list[VcdVar], clock: VcdVar,
                  vcd_twin: Path | None = None) -> int:
    """Assert that the project's reader (fast and checked) and vcdvcd read the same values
    and clock edges from ``path``, or, for an FST file, from its VCD twin (the same run
    traced to VCD). Returns how many value changes were compared."""
    header = read_header(path)
    mine = [header.find(s.path) for s in signals]
    fast = ours(path, header, mine, fast=True)
    if header.format == "vcd":
        assert fast == ours(path, header, mine, fast=False), "fast and checked paths differ"
    other = theirs(vcd_twin or path, signals)
    for s, m in zip(signals, mine, strict=True):
        assert fast[m.path] == other[s.path], f"{s.path}: the readers differ"
    tick = next(m.path for m in mine if m.id == header.find(clock.path).id)
    theirs_tick = next(s.path for s, m in zip(signals, mine, strict=True) if m.path == tick)
    edges = rising_edges(fast[tick])
    assert edges == rising_edges(other[theirs_tick]) and len(edges) > 2
    return sum(len(h) for h in fast.values())


def gtkwave_view(wave: Path, gtkw: Path, tmp: Path) -> dict:
    """What GTKWave shows for ``wave`` with ``gtkw``: window, named markers, signals."""
    out, tcl = tmp / f"{wave.name}.view", tmp / f"{wave.name}.tcl"
    tcl.write_text(_PROBE_TCL.format(out=out))
    r = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1600x900x24", "gtkwave", "-S",
                        str(tcl), str(wave), str(gtkw)], capture_output=True, text=True,
                       timeout=600, check=False)
    log = r.stdout + r.stderr
    assert r.returncode == 0, f"gtkwave exited {r.returncode}:\n{log[-3000:]}"
    assert "parse error" not in log.lower(), log[-3000:]
    view: dict = {"markers": {}, "signals": [], "log": log}
    for line in out.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "window":
            view["window"] = tuple(int(x) for x in rest.split())
        elif kind == "marker":
            name, at = rest.split()
            if int(at) >= 0:
                view["markers"][name] = int(at)
        elif kind == "signal":
            view["signals"].append(rest)
    return view


def check_in_gtkwave(wave: Path, tmp: Path, *, regions: list[dict] | None = None,
                     clock_period_ns: float | None = None) -> dict:
    """Write the save file of ``wave`` (:func:`cosim.waves.write_gtkw`), open both in
    GTKWave and check what it shows against the save file and the file's time range."""
    gtkw, _ = write_gtkw(wave, tmp / f"{wave.stem}.gtkw", regions=regions,
                         clock_period_ns=clock_period_ns)
    text = gtkw.read_text()
    view = gtkwave_view(wave, gtkw, tmp)
    listed = [ln for ln in text.splitlines() if re.match(r"^[A-Za-z_]", ln)]
    assert view["signals"] == listed and listed, "GTKWave does not show the save file's signals"
    first, last = time_range(wave, read_header(wave))
    start, end = view["window"]
    assert start == first and abs(end - last) <= 0.01 * (last - first), (view["window"],
                                                                          first, last)
    marks = next(ln for ln in text.splitlines() if ln.startswith("*")).split()[2:]
    want = {chr(65 + k): int(t) for k, t in enumerate(marks) if int(t) >= 0}
    assert view["markers"] == want
    return view
