"""GTKWave save file for a waveform (VCD or FST) of an NPU run (:func:`write_gtkw`).

The save file opens the file zoomed to its whole time range, with a named marker (A, B, ...)
at the start of each kernel region the run recorded (:meth:`sw.runtime.Device.region`, read
from the ``<name>.waves.json`` that :func:`cosim.tb.harness.run_job` writes beside the
waveform), and the NPU's signals in groups, in the order of :data:`GTKW_GROUPS`: its ports
(clock, reset, interrupt, the AXI DRAM port channel by channel, the host's CSR port), the
named probes of every engine (:data:`hw.top.PROBE_FIELDS`) and the counter sources the tools
read. Nothing from inside the blocks: those names are not a contract and change with the
hardware. A name of a group that the file lacks is reported, never an error.
"""

from __future__ import annotations

import errno
import json
import math
from fractions import Fraction
from pathlib import Path

from cosim.waves.signals import find_npu_scope
from cosim.waves.vcd import VcdHeader, VcdVar, read_header, time_range
from hw.isa import ENGINE_NAMES
from hw.top import PROBE_FIELDS, RESOURCE_STALLS, probe_name, stall_source_name

__all__ = ["GTKW_GROUPS", "GTKW_MARKERS", "gtkw_text", "write_gtkw", "refresh_gtkw", "npu_gtkw",
           "foreign_gtkw", "GtkwExistsError", "load_regions"]

_AXI = {"AR": ["arvalid", "arready", "arid", "araddr", "arlen", "arsize", "arburst"],
        "R": ["rvalid", "rready", "rid", "rdata", "rresp", "rlast"],
        "AW": ["awvalid", "awready", "awid", "awaddr", "awlen", "awsize", "awburst"],
        "W": ["wvalid", "wready", "wdata", "wstrb", "wlast"],
        "B": ["bvalid", "bready", "bid", "bresp"]}
_CSR = ["awvalid", "awready", "awaddr", "wvalid", "wready", "wdata", "wstrb", "bvalid",
        "bready", "bresp", "arvalid", "arready", "araddr", "rvalid", "rready", "rdata",
        "rresp"]

#: (group, [names relative to the NPU scope]), shown in this order, each group's signals in
#: the order given: ports and the signals the hardware declares for the tools only.
GTKW_GROUPS: list[tuple[str, list[str]]] = [
    ("Clock, reset, interrupt", ["clk", "rst", "irq"]),
    *[(f"Engine {e} (named probes)", [probe_name(e, f) for f in PROBE_FIELDS])
      for e in ENGINE_NAMES],
    *[(f"AXI {ch} (DRAM port)", [f"mem__{s}" for s in names]) for ch, names in _AXI.items()],
    ("Host CSR port (AXI4-Lite)", [f"csr__{s}" for s in _CSR]),
    ("Counter sources", ["csr.cycles", *[stall_source_name(e, r) for e, r in RESOURCE_STALLS]]),
]

#: Named markers GTKWave 3.3 has (A to Z).
GTKW_MARKERS = 26

# Window of the save file and its panes, pixels; the wave pane is what is left.
_SIZE, _SST, _SIGNALS = (1600, 900), 260, 320
_WAVE_PIXELS = _SIZE[0] - _SST - _SIGNALS - 40
# GTKWave 3.3.118 shows 2**-zoom / 200 time units per pixel (measured: a zoom of -10 shows
# 5017 units over its 980-pixel wave pane, whatever the timescale).
_UNITS_PER_PIXEL_AT_ZOOM_0 = 1 / 200
_GTKW_BIT, _GTKW_HEX = "@28", "@22"
_GTKW_GROUP_BEGIN, _GTKW_GROUP_END = "@800200", "@1000200"


def load_regions(waves: Path | str) -> tuple[list[dict], float | None]:
    """The kernel regions and the clock period (ns) from ``<stem>.waves.json`` beside a
    waveform; ``([], None)`` if there is none.

    Raises
    ------
    ValueError
        If the file is not JSON or not of the shape ``npu run`` writes (naming the file).
    """
    side = Path(waves).with_suffix(".waves.json")
    if not side.is_file():
        return [], None
    try:
        info = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{side}: not JSON ({e})") from None
    regions = info.get("regions") or [] if isinstance(info, dict) else None
    period = info.get("clock_period_ns") if isinstance(info, dict) else None
    if (not isinstance(regions, list)
            or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                       and isinstance(r.get("start_cycle"), int) for r in regions)
            or not (period is None or isinstance(period, (int, float)) and period > 0)):
        raise ValueError(f"{side}: expected what npu run writes beside a waveform: an object "
                         "with 'regions' (objects with 'name' and 'start_cycle') and "
                         "'clock_period_ns'")
    return regions, period


def _zoom(span: int) -> float:
    """The zoom that shows ``span`` time units over the wave pane."""
    return -math.log2(max(span, 1) / (_WAVE_PIXELS * _UNITS_PER_PIXEL_AT_ZOOM_0))


def _markers(regions: list[dict], span: tuple[int, int] | None, unit_s: Fraction,
             period_ns: float | None) -> tuple[list[tuple[int, str]], list[str]]:
    """(time, label) of the named markers: the regions whose start cycle is in the file, the
    first of each kernel first, then the others by time, at most :data:`GTKW_MARKERS`; and
    notes about those left out.

    Cycle ``c`` starts at time ``c * period``; a window traced from cycle ``c`` (``npu run
    --waves-kernel``) begins with the first step dumped in it, up to a period later, so a
    region starting in the file's first cycle gets its marker at the file's start."""
    if not regions or span is None or not period_ns:
        return [], []
    period = Fraction(period_ns) / 10**9 / unit_s
    many = {r["name"] for r in regions if r.get("occurrence", 1) > 1}
    inside = []
    for r in sorted(regions, key=lambda r: r["start_cycle"]):
        t = r["start_cycle"] * period
        if span[0] - period < t <= span[1]:
            t = max(math.ceil(t), span[0])
            label = r["name"] + (f":{r['occurrence']}" if r["name"] in many else "")
            inside.append((t, label, r["name"]))
    seen: set[str] = set()
    firsts, rest = [], []
    for t, label, name in inside:
        (rest if name in seen else firsts).append((t, label))
        seen.add(name)
    chosen = sorted(firsts[:GTKW_MARKERS] + rest[:max(0, GTKW_MARKERS - len(firsts))])
    left = len(inside) - len(chosen)
    notes = [f"{left} kernel regions without a marker (GTKWave has {GTKW_MARKERS} named "
             "markers)"] if left else []
    return chosen, notes


#: First line of the save files :func:`write_gtkw` writes (how :func:`refresh_gtkw` knows them).
_GTKW_HEAD = "[*] NPU signal groups, generated by cosim.waves.write_gtkw"


class GtkwExistsError(FileExistsError):
    """:func:`write_gtkw` would overwrite a save file it did not write (``path``: that
    file)."""

    def __init__(self, path: Path):
        super().__init__(f"{path} is a save file that npu waves gtkw did not write (saved "
                         "from GTKWave?)")
        self.path = path


def _gtkw_name(v: VcdVar) -> str:
    """The name GTKWave gives ``v``: a vector declared without a range (Amaranth's
    simulator writes ``$var wire 32 # mem__araddr $end``) gets ``[width-1:0]`` appended,
    as GTKWave 3.3 does; a save-file name it cannot find is dropped without a word."""
    if v.width > 1 and v.msb is None and v.kind not in ("string", "real"):
        return f"{v.path}[{v.width - 1}:0]"
    return v.path


def gtkw_text(header: VcdHeader, *, vcd_path: Path | str | None = None,
              scope: str | None = None, regions: list[dict] | None = None,
              clock_period_ns: float | None = None,
              span: tuple[int, int] | None = None) -> tuple[str, list[str]]:
    """Text of a GTKWave save file grouping the NPU's signals (see the module docstring).

    Parameters
    ----------
    header : VcdHeader
    vcd_path : Path or str, optional
        Written as ``[dumpfile]`` (default: the header's file).
    scope : str, optional
        NPU scope (found automatically by default).
    regions : list of dict, optional
        Kernel regions (``{"name", "occurrence", "start_cycle"}``, absolute cycles) to mark.
    clock_period_ns : float, optional
        Clock period, to place the markers (needed with ``regions``).
    span : (int, int), optional
        The file's first and last time (file units): the view. Default: the whole time
        axis at GTKWave's own zoom.

    Returns
    -------
    (str, list of str)
        The file text, and notes: names of :data:`GTKW_GROUPS` the file lacks, kernel
        regions left without a marker.
    """
    s = find_npu_scope(header) if scope is None else scope
    here: dict[str, VcdVar] = {}
    for v in header.vars:
        if v.path.startswith(s + "."):
            here.setdefault(v.base[len(s) + 1:], v)
    path = Path(vcd_path or header.file).resolve()
    lines = [_GTKW_HEAD,
             f'[dumpfile] "{path}"', f"[timestart] {span[0] if span else 0}",
             f"[size] {_SIZE[0]} {_SIZE[1]}", f"[signals_width] {_SIGNALS}",
             f"[sst_width] {_SST}", "[sst_expanded] 1"]
    markers, notes = _markers(regions or [], span, header.timescale_s, clock_period_ns)
    if span is not None:
        named = [str(t) for t, _ in markers] + ["-1"] * (GTKW_MARKERS - len(markers))
        lines.append(f"*{_zoom(span[1] - span[0]):.6f} -1 " + " ".join(named))
        lines += [f"[markername] {chr(65 + i)}{label}" for i, (_, label) in enumerate(markers)]
    missing = []
    for group, names in GTKW_GROUPS:
        chosen = [here[n] for n in names if n in here]
        lacks = [n for n in names if n not in here]
        if lacks:
            missing.append(f"{group}: no {', '.join(lacks)}")
        if not chosen:
            continue
        lines += [_GTKW_GROUP_BEGIN, f"-{group}"]
        fmt = None
        for v in chosen:
            want = _GTKW_BIT if v.width == 1 else _GTKW_HEX
            if want != fmt:
                lines.append(want)
                fmt = want
            lines.append(_gtkw_name(v))
        lines += [_GTKW_GROUP_END, f"-{group}"]
    return "\n".join(lines) + "\n", missing + notes


def write_gtkw(vcd: Path | str, out: Path | str | None = None, *,
               regions: list[dict] | None = None,
               clock_period_ns: float | None = None,
               force: bool = False) -> tuple[Path, list[str]]:
    """Write ``<stem>.gtkw`` (or ``out``) beside a waveform of an NPU run, zoomed to its time
    range, with markers at the kernel regions (``regions``, default those of
    ``<stem>.waves.json`` if it is there). A save file there that this function did not
    write (saved from GTKWave, a layout of one's own) is overwritten only with ``force``.

    Returns
    -------
    (Path, list of str)
        The save file, and the notes of :func:`gtkw_text`.

    Raises
    ------
    VcdFormatError, VcdSignalError
    GtkwExistsError
        If ``out`` is a save file of another origin and ``force`` is false (nothing is
        written).
    IsADirectoryError
        If ``out`` is a folder (before the waveform is read).
    """
    vcd = Path(vcd)
    out = vcd.with_suffix(".gtkw") if out is None else Path(out)
    if out.is_dir():                # before reading the waveform
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(out))
    if not force and foreign_gtkw(out):
        raise GtkwExistsError(out)
    header = read_header(vcd)
    if regions is None:
        regions, side_period = load_regions(vcd)
        clock_period_ns = clock_period_ns or side_period
    text, notes = gtkw_text(header, vcd_path=vcd, regions=regions,
                            clock_period_ns=clock_period_ns, span=time_range(vcd, header))
    out.write_text(text)
    return out, notes


def npu_gtkw(wave: Path | str) -> Path:
    """``<stem>.npu.gtkw``: where the NPU's signal groups go beside a waveform whose
    ``<stem>.gtkw`` is a save file of one's own (what a traced run suggests for ``npu waves
    gtkw -o``, and what :func:`refresh_gtkw` rewrites with ``<stem>.gtkw``)."""
    return Path(wave).with_suffix(".npu.gtkw")


def refresh_gtkw(wave: Path | str) -> list[Path]:
    """Rewrite the save files beside a newly written waveform (``<stem>.gtkw`` and
    :func:`npu_gtkw`'s ``<stem>.npu.gtkw``) that :func:`write_gtkw` made, for an earlier file
    of that name (GTKWave would open the new file with the old run's view, markers and
    signals); a save file written otherwise (saved from GTKWave, a layout of one's own) is
    left as it is.

    Returns
    -------
    list of Path
        The rewritten save files (none if there was none of :func:`write_gtkw`'s).
    """
    ours = [g for g in (Path(wave).with_suffix(".gtkw"), npu_gtkw(wave)) if _ours(g)]
    return [write_gtkw(wave, g)[0] for g in ours]


def foreign_gtkw(path: Path | str) -> bool:
    """Whether ``path`` is a save file that :func:`write_gtkw` did not write (saved from
    GTKWave, a layout of one's own): one that :func:`write_gtkw` overwrites only with
    ``force`` and :func:`refresh_gtkw` leaves as it is. False if there is no such file."""
    return _ours(Path(path)) is False


def _ours(gtkw: Path) -> bool | None:
    """Whether :func:`write_gtkw` wrote the save file ``gtkw`` (its first line); None if there
    is none (no such file, or a folder of that name: writing it fails then)."""
    try:
        with gtkw.open() as f:
            return f.readline().rstrip("\n") == _GTKW_HEAD
    except (FileNotFoundError, IsADirectoryError):
        return None
    except UnicodeDecodeError:
        return False
