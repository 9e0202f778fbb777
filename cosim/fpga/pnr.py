"""Place and route with nextpnr-ecp5, the bitstream with ecppack, and nextpnr's reports.

:func:`place_route` places and routes a ``synth_ecp5`` netlist on an ECP5 part (default the
ULX3S' LFE5U-85F) and reads Fmax, utilisation and the critical path from nextpnr's
``--report`` JSON (:func:`parse_nextpnr_report`) or, failing that, from its log
(:func:`parse_nextpnr_log`); :func:`pack_bitstream` runs ``ecppack``. Outputs go to
``pnr.log, pnr_report.json, npu.config`` and ``congestion/`` beside the netlist (``out_dir``
to put them elsewhere; :func:`cosim.fpga.area` uses a folder per placement seed).
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cosim.fpga.blocks import block_of, net_blocks
from cosim.fpga.tools import FpgaToolError, find_tool, run_tool

__all__ = ["ECP5_DEVICE", "ECP5_DEVICES", "ECP5_PACKAGE", "PNR_FREQ_MHZ", "PNR_SEED", "PathStep",
           "PnrResult", "RoutingFailed", "place_route", "pack_bitstream", "parse_nextpnr_report",
           "parse_nextpnr_log", "parse_congestion", "format_congestion", "nextpnr_progress"]

#: Default ECP5 part: LFE5U-85F in the CABGA381 package, as on the ULX3S 85F.
ECP5_DEVICE = "85k"
#: nextpnr-ecp5's device options (LFE5U, LFE5UM and LFE5UM5G parts).
ECP5_DEVICES = ("12k", "25k", "45k", "85k", "um-25k", "um-45k", "um-85k", "um5g-25k",
                "um5g-45k", "um5g-85k")
ECP5_PACKAGE = "CABGA381"
#: Default place-and-route target clock in MHz: the ULX3S's 25 MHz oscillator. Routing does not
#: fail when it is missed (``--timing-allow-fail``); it steers nextpnr's timing-driven placement.
PNR_FREQ_MHZ = 25.0
#: nextpnr's placement seed unless one is given (``npu area --seed``).
PNR_SEED = 1


@dataclass(frozen=True)
class PathStep:
    """One cell on a critical path."""
    cell: str
    block: str
    delay_ns: float


class RoutingFailed(FpgaToolError):
    """nextpnr did not finish routing (it failed, or ``timeout`` stopped it).

    Attributes
    ----------
    congestion : dict or None
        :func:`parse_congestion` of router2's last heatmap (None if it wrote none).
    """

    def __init__(self, message: str, log_path: Path | None, congestion: dict | None):
        RuntimeError.__init__(self, message)     # ``message`` names the log already
        self.log_path = log_path
        self.congestion = congestion


@dataclass(frozen=True)
class PnrResult:
    """Outcome of place and route.

    Attributes
    ----------
    fmax_mhz : float or None
        Achieved maximum frequency of ``clk`` after routing; without routing, nextpnr's
        estimate after placement (``routed`` False).
    constraint_mhz : float
        The frequency target given to nextpnr.
    utilization : dict[str, tuple[int, int]]
        ``{bel type: (used, available)}``.
    critical_path : dict
        ``from``/``to`` cells, their blocks, total delay in ns, logic and routing delay, and
        the block that holds the most logic delay (``block``); ``{}`` without routing
        (nextpnr reports paths only after routing).
    log : Path
    seconds : float
    routed : bool
    """
    fmax_mhz: float | None
    constraint_mhz: float
    utilization: dict[str, tuple[int, int]]
    critical_path: dict
    log: Path
    seconds: float
    routed: bool = True


def place_route(netlist: Path, *, device: str = ECP5_DEVICE, package: str = ECP5_PACKAGE,
                freq_mhz: float = PNR_FREQ_MHZ, out_dir: Path | None = None,
                lpf: Path | None = None, seed: int = PNR_SEED, timeout: float | None = None,
                route: bool = True,
                progress: Callable[[str], None] | None = None) -> PnrResult:
    """Place and route an ECP5 netlist with nextpnr-ecp5; estimate Fmax.

    Without ``lpf`` the design's ports are left to nextpnr (no pin constraints); Fmax is then
    an estimate of the core, not of a board. The run is deterministic for a given ``seed``.
    Routing uses nextpnr's ``router2`` (router1, the ECP5 default, had routed 10% of the 4x4
    NPU's 176k arcs after 4.5 minutes), which writes a congestion heatmap per iteration into
    ``congestion/`` beside the log: when routing does not finish, :class:`RoutingFailed`
    says which blocks' nets the overused wires were on (:func:`parse_congestion`).

    Parameters
    ----------
    netlist : Path
        Yosys JSON of a ``synth_ecp5`` run.
    device, package : str
        nextpnr's device option (``25k``, ``45k``, ``85k``, ``um5g-85k``...) and package.
    freq_mhz : float
        Target clock; the run does not fail when it is missed (``--timing-allow-fail``).
    out_dir : Path, optional
        Default: the netlist's folder.
    lpf : Path, optional
        Pin constraints.
    seed : int
    timeout : float, optional
    route : bool
        False: stop after placement (``--no-route``); Fmax is then nextpnr's post-placement
        estimate (delays predicted from distances) and there is no critical path.
    progress : callable, optional
        Called with a short line at each step of the run (:func:`nextpnr_progress`: the
        placer's phases, each router2 iteration's overused wires, Fmax), while it runs.

    Raises
    ------
    ToolMissingError
        If nextpnr-ecp5 is not installed.
    FpgaToolError
        If the design does not fit the device (the message names the log).
    RoutingFailed
        If routing fails or ``timeout`` stops it after placement (the message names the log
        and the blocks with the most overuse).
    """
    nextpnr = find_tool("nextpnr-ecp5")
    netlist = Path(netlist).resolve()
    out_dir = (Path(out_dir) if out_dir is not None else netlist.parent).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "pnr.log"
    report = out_dir / "pnr_report.json"
    # the WebAssembly tool reads relative to its working directory: run in out_dir
    src = netlist.name
    if netlist.parent != out_dir:
        src = "pnr_in.json"
        shutil.copyfile(netlist, out_dir / src)
    cmd = [nextpnr, f"--{device}", "--package", package, "--json", src,
           "--textcfg", "npu.config", "--report", report.name, "--freq", str(freq_mhz),
           "--timing-allow-fail", "--seed", str(seed), "-l", log.name, "--router", "router2"]
    if lpf is not None:
        shutil.copyfile(lpf, out_dir / "pins.lpf")
        cmd += ["--lpf", "pins.lpf"]
    else:
        cmd += ["--lpf-allow-unconstrained"]
    heatmaps = out_dir / "congestion"
    shutil.rmtree(heatmaps, ignore_errors=True)
    if route:
        heatmaps.mkdir()
        cmd += ["--router2-heatmap", f"{heatmaps.name}/iter"]
    else:
        cmd += ["--no-route"]
    try:
        seconds = run_tool(cmd, out_dir / "nextpnr.out", cwd=out_dir, what="nextpnr-ecp5",
                           timeout=timeout, progress=progress and _filtered(progress))
    except FpgaToolError as e:
        congestion = parse_congestion(heatmaps, netlist) if route else None
        if congestion is None:
            raise
        raise RoutingFailed(f"{e}\n{format_congestion(congestion)}", e.log_path,
                            congestion) from e
    if not report.is_file():
        raise FpgaToolError("nextpnr wrote no report", log)
    parsed = parse_nextpnr_report(json.loads(report.read_text()))
    fmax = parsed["fmax_mhz"]
    if fmax is None and log.is_file():
        fmax = parse_nextpnr_log(log.read_text(errors="replace"))["fmax_mhz"]
    return PnrResult(fmax, freq_mhz, parsed["utilization"], parsed["critical_path"], log,
                     seconds, route)


def pack_bitstream(textcfg: Path, bitstream: Path) -> float:
    """Pack nextpnr's text configuration into an ECP5 bitstream with ``ecppack``.

    Returns
    -------
    float
        Wall seconds.

    Raises
    ------
    ToolMissingError, FpgaToolError
    """
    ecppack = find_tool("ecppack")
    textcfg, bitstream = Path(textcfg).resolve(), Path(bitstream).resolve()
    if textcfg.parent != bitstream.parent:
        raise ValueError("textcfg and bitstream must be in the same folder")
    return run_tool([ecppack, "--compress", textcfg.name, bitstream.name],
                    bitstream.with_suffix(".ecppack.log"), cwd=bitstream.parent,
                    what="ecppack")


# -- nextpnr reports --------------------------------------------------------------------------

def parse_nextpnr_report(report: dict) -> dict:
    """Fmax, utilisation and the critical path from nextpnr's ``--report`` JSON.

    Returns
    -------
    dict
        ``fmax_mhz`` (float or None: the lowest achieved Fmax over the clocks),
        ``utilization`` (``{bel: (used, available)}``) and ``critical_path`` (``{}`` when the
        report has none; else ``from``, ``to``, ``from_block``, ``to_block``, ``delay_ns``,
        ``logic_ns``, ``routing_ns``, ``block`` = the block with the most logic delay, and
        ``blocks`` = logic delay per block in ns).
    """
    fmax = report.get("fmax") or {}
    achieved = [v["achieved"] for v in fmax.values() if "achieved" in v]
    util = {k: (int(v["used"]), int(v["available"]))
            for k, v in (report.get("utilization") or {}).items()}
    paths = report.get("critical_paths") or []
    crit: dict = {}
    if paths:
        # the worst path: largest total delay
        def total(p):
            return sum(step.get("delay", 0.0) for step in p.get("path", []))
        worst = max(paths, key=total)
        steps = worst.get("path", [])
        logic = Counter()
        routing = 0.0
        for step in steps:
            if step.get("type") == "routing":
                routing += step.get("delay", 0.0)
            else:
                logic[block_of(step.get("to", {}).get("cell", "")
                               or step.get("from", {}).get("cell", ""))] += step.get("delay", 0.0)
        first = steps[0]["from"]["cell"] if steps else ""
        last = steps[-1]["to"]["cell"] if steps else ""
        crit = {
            "from": first, "to": last,
            "from_block": block_of(first), "to_block": block_of(last),
            "delay_ns": round(total(worst), 3),
            "logic_ns": round(sum(logic.values()), 3),
            "routing_ns": round(routing, 3),
            "block": logic.most_common(1)[0][0] if logic else block_of(last),
            "blocks": {k: round(v, 3) for k, v in logic.most_common()},
            "clock": f"{worst.get('from', '')} -> {worst.get('to', '')}",
        }
    return {"fmax_mhz": round(min(achieved), 2) if achieved else None,
            "utilization": util, "critical_path": crit}


_RE_FMAX = re.compile(r"Max frequency for clock\s+'(?P<clk>[^']+)':\s+(?P<mhz>[0-9.]+) MHz")
_RE_UTIL = re.compile(r"^Info:\s+(?P<bel>[A-Za-z0-9_]+):\s+(?P<used>\d+)/\s*(?P<avail>\d+)\s",
                      re.M)


def parse_nextpnr_log(log: str) -> dict:
    """Fmax and utilisation from a nextpnr log (for runs without ``--report``).

    The log prints Fmax several times (after placement, after routing); the last one per
    clock counts.

    Returns
    -------
    dict
        ``fmax_mhz`` (float or None; the minimum over clocks), ``fmax_by_clock``
        (``{clock: MHz}``) and ``utilization`` (``{bel: (used, available)}``, last report).
    """
    by_clock: dict[str, float] = {}
    for m in _RE_FMAX.finditer(log):
        by_clock[m["clk"]] = float(m["mhz"])
    util: dict[str, tuple[int, int]] = {}
    for m in _RE_UTIL.finditer(log):
        util[m["bel"]] = (int(m["used"]), int(m["avail"]))
    return {"fmax_mhz": min(by_clock.values()) if by_clock else None,
            "fmax_by_clock": by_clock, "utilization": util}


_PROGRESS = [
    (re.compile(r"Running main analytical placer"), lambda m: "placing (HeAP)"),
    (re.compile(r"HeAP Placer Time: ([\d.]+)s"), lambda m: f"HeAP done in {float(m[1]):.0f} s"),
    (re.compile(r"Running simulated annealing placer"),
     lambda m: "refining the placement (simulated annealing)"),
    (re.compile(r"SA placement time ([\d.]+)s"),
     lambda m: f"placement refined in {float(m[1]):.0f} s"),
    (re.compile(r"Running router2"), lambda m: "routing (router2)"),
    (re.compile(r"iter=(\d+) wires=\d+ overused=(\d+)"),
     lambda m: f"router2 iteration {m[1]}: {int(m[2]):,} overused wires"),
    (re.compile(r"Router\d time ([\d.]+)s"), lambda m: f"routed in {float(m[1]):.0f} s"),
    (re.compile(r"Max frequency for clock .*?: ([\d.]+) MHz \((?:PASS|FAIL) at ([\d.]+) MHz"),
     lambda m: f"Fmax {float(m[1]):.1f} MHz (target {float(m[2]):.1f})"),
    (re.compile(r"^ERROR: (.*)"), lambda m: f"error: {m[1]}"),
]


def nextpnr_progress(line: str) -> str | None:
    """A short progress line for a line of nextpnr-ecp5's log, or None for the lines that
    are not a step of the run: ``"Info:     iter=12 wires=791805 overused=5527 ..."`` gives
    ``"router2 iteration 12: 5,527 overused wires"``; the placer's phases and their times,
    the start and end of routing, Fmax and errors likewise."""
    for pattern, say in _PROGRESS:
        m = pattern.search(line)
        if m:
            return say(m)
    return None


def _filtered(progress: Callable[[str], None]) -> Callable[[str], None]:
    def report(line: str) -> None:
        said = nextpnr_progress(line)
        if said:
            progress(said)
    return report


# -- router2's congestion heatmaps --------------------------------------------------------------

def parse_congestion(folder: Path, netlist: dict | Path | None = None) -> dict | None:
    """Per-block overuse of router2's last congestion heatmap in ``folder``.

    nextpnr's ``--router2-heatmap PREFIX`` writes, after each routing iteration ``i``,
    ``PREFIX_congestion_by_net_<i>.csv``: per net, how many of the wires it uses are overused
    (used by more than one net). With ``netlist`` (the Yosys JSON that nextpnr placed), each
    net counts for the block of the cell that drives it (:func:`~cosim.fpga.blocks.
    net_blocks`): a net's name is often another block's (the CSR block's read multiplexer
    is named after the memories it selects from). Otherwise, and for a net the netlist does
    not name (or a ``netlist`` that cannot be read as one), it counts for the Amaranth block
    of its name (:func:`~cosim.fpga.blocks.block_of`, after the bit index and Yosys' ``$<n>``
    suffixes). Nets outside the NPU (the P&R harness' ``ins``/``outs`` shift registers) count
    as ``harness``. The sum over nets counts an overused wire once per net on it.

    Returns
    -------
    dict or None
        ``iteration`` (the last one with a heatmap), ``overuse`` (the sum over nets) and
        ``blocks`` (``{block: overuse}``, largest first); None if there is no heatmap or it
        shows no overuse.
    """
    files = {}
    for f in Path(folder).glob("*congestion_by_net_*.csv"):
        m = re.search(r"_(\d+)\.csv$", f.name)
        if m:
            files[int(m.group(1))] = f
    if not files:
        return None
    last = max(files)
    driven = {}
    if netlist is not None:
        try:
            driven = net_blocks(netlist, "ecp5")
        except (OSError, ValueError, KeyError):     # not Yosys' netlist: by names alone
            driven = {}
    blocks: Counter = Counter()
    for line in files[last].read_text(errors="replace").splitlines():
        name, _, count = line.rpartition(",")
        if not name or not count.strip().isdigit():
            continue
        if not name.startswith(("dut.", "npu.")):
            block = "harness"
        elif name in driven:
            block = driven[name]
        else:
            block = block_of(re.sub(r"\$\d+|\[\d+\]$", "", name))
        blocks[block] += int(count)
    total = sum(blocks.values())
    if not total:
        return None
    return {"iteration": last, "overuse": total, "blocks": dict(blocks.most_common())}


def format_congestion(congestion: dict, *, depth: int = 2, top: int = 6) -> str:
    """One line: the blocks ``depth`` levels below the NPU with the most overuse, in per cent
    of :func:`parse_congestion`'s ``overuse``, each with its largest sub-blocks; e.g. ``"router2
    overuse at iteration 12 (11,396 net-wires) by block: cmdproc 62% (fetch 25%, semaphores
    11%), csr 19%, ..."``."""
    total = congestion["overuse"]

    def rollup(level: int, under: str = "npu") -> Counter:
        out: Counter = Counter()
        for block, n in congestion["blocks"].items():
            parts = block.split(".")
            if block.startswith(under + ".") or (under == "npu" and block in ("npu", "harness")):
                out[".".join(parts[:level]) if len(parts) >= level else block] += n
        return out

    def pct(n: int) -> str:
        return f"{100 * n / total:.0f}%"

    items = []
    for block, n in rollup(depth).most_common(top):
        nested = rollup(depth + 1, block).most_common(3) if block.startswith("npu.") else []
        subs = [f"{b.split('.')[-1]} {pct(k)}" for b, k in nested if 100 * k / total >= 1]
        label = "top level" if block == "npu" else block.removeprefix("npu.")
        items.append(f"{label} {pct(n)}" + (f" ({', '.join(subs)})" if subs else ""))
    return (f"router2 overuse at iteration {congestion['iteration']} ({total:,} net-wires) "
            f"by block: {', '.join(items)}")
