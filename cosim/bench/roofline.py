"""The roofline of the NPU: the bound of one kernel under the DRAM timing it ran with, the
measured points and the plot.

The roofline model (Williams, Waterman, Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 52(4), 2009) bounds the performance of a kernel of
operational intensity ``I`` (work per byte moved to and from DRAM) by
``min(peak, bandwidth * I)``. Here work is counted in multiply-accumulates (MACs) and time in
cycles: ``peak`` is ``rows * cols`` MACs/cycle (one MAC per processing element per cycle).
:func:`attainable` is that formula, used by the bench's bound (:func:`roofline`) and by the
plot (:func:`roofline_png`).

The memory roof: what the run's DRAM allowed
--------------------------------------------
``bandwidth`` is not the bus width alone but what the memory of the run (a
:class:`sw.dram.DramTiming`) delivers, :func:`memory_roof`. For ``R`` bytes read and ``W``
written, the memory needs at least ``t_mem = max(t_R, t_W, t_DRAM)`` cycles and the roof's
slope is ``(R + W) / t_mem`` bytes/cycle, where (``B`` = ``axi_data_bytes``, bytes per beat):

* ``t_DRAM = (R + W) / min(B, bw)``: the peak, the bus or the DRAM's token-bucket bandwidth
  ``bw`` (``DramTiming.bytes_per_cycle``, shared by reads and writes as one DRAM data bus is),
  whichever is lower; without a DRAM limit reads and writes are counted against the one bus
  budget ``B`` (conservative if the bus could read and write at once);
* ``t_R = (R / B) * max((b + 1) / (1 - p_R), (L + b - 1) / o) / b``: per read burst of ``b``
  beats, the R channel needs ``b`` beats plus the model's idle cycle between bursts
  (``cosim/tb/dram.sv``; stretched by random R backpressure ``p_R`` = ``r_stall``, in
  expectation), and each burst holds one of the DMA's ``o`` = ``dma_outstanding`` read slots
  from its AR handshake to its last beat, at least ``L + b - 1`` cycles for a read latency
  ``L``. The second term is Little's law (Little, "A proof for the queuing formula
  L = lambda W", Operations Research 9(3), 1961): throughput = bytes in flight / time in the
  system, ``o * b * B / (L + b - 1)`` bytes/cycle, the latency-bound bandwidth. With a
  burst profile, the read traffic beyond the profile's DMA beats is the command fetch's: it
  shares the R channel (the first term counts all reads) but has a read slot of its own, so
  the DMA's bytes and the commands' (one burst of up to ``fetch_depth * 32 / B`` beats in
  flight) are bounded by Little's law apart, ``t_R = max(R / channel, R_dma / latency_dma,
  R_cmd / latency_fetch)``;
* ``t_W = (W / B) * (w + 1) / (1 - p_W) / w`` for write bursts of ``w`` beats (one idle
  cycle per burst between the last W beat and the next AW).

The burst lengths ``b`` and ``w`` are the kernel's own (a :class:`cosim.bench.bursts.BurstProfile`
of the run) when known: this is the bound of *this* kernel's DMA pattern on *this* memory, and
a short-burst kernel under a long latency gets the low roof it really has. Without a profile
the bursts are as long as the DMA makes them (``MAX_BURST_BEATS`` beats, never across 4 KiB)
and the inter-burst cycle is left out: the machine's roof, which is the plain
``min(B, bw)`` roof unless the latency is long.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES, MAX_BURST_BEATS, PAGE_BYTES
from sw.dram import DramTiming

__all__ = ["attainable", "gemm_min_dram_bytes", "roofline", "memory_roof", "Roof",
           "RooflinePoint", "gemm_point", "roofline_png", "max_burst_beats"]


def attainable(intensity: float, peak: float, bytes_per_cycle: float) -> float:
    """Roofline bound in MACs/cycle: ``min(peak, bytes_per_cycle * intensity)``.

    Parameters
    ----------
    intensity : float
        Operational intensity in MACs per DRAM byte.
    peak : float
        Compute roof in MACs/cycle (``rows * cols`` for the systolic array).
    bytes_per_cycle : float
        Memory roof's slope: DRAM bytes per cycle.
    """
    return min(peak, bytes_per_cycle * intensity)


def gemm_min_dram_bytes(m: int, k: int, n: int) -> int:
    """The least DRAM traffic of an int8 ``(m, k) @ (k, n)`` GEMM in bytes: ``A`` (``m*k``),
    ``W`` (``k*n``) and the int8 output (``m*n``), each moved once, unpadded; per-channel
    parameters (bias, multiplier, shift) and commands not counted."""
    return m * k + k * n + m * n


def max_burst_beats(config: NPUConfig) -> int:
    """The longest burst the DMA issues: ``MAX_BURST_BEATS`` (256) beats, at most 4 KiB."""
    return min(MAX_BURST_BEATS, PAGE_BYTES // config.axi_data_bytes)


def memory_roof(config: NPUConfig, read_bytes: float, write_bytes: float,
                dram: DramTiming | str | None = None, bursts=None) -> dict:
    """The memory roof of ``read_bytes`` + ``write_bytes`` of traffic on ``config`` under
    ``dram`` (see the module docstring for the formula and its sources).

    Parameters
    ----------
    config : NPUConfig
    read_bytes, write_bytes : float
        DRAM traffic, bytes.
    dram : DramTiming or str, optional
        The run's DRAM timing (a preset name or ``key=value`` text); default ideal.
    bursts : cosim.bench.bursts.BurstProfile, optional
        The kernel's DMA bursts (their mean lengths are used); None: the machine's roof.

    Returns
    -------
    dict
        ``bus_bytes_per_cycle`` (B), ``dram_bytes_per_cycle`` (``bw`` or None),
        ``peak_bytes_per_cycle`` (``min(B, bw)``), ``read_latency`` (L),
        ``read_burst_beats``/``write_burst_beats`` (b, w), ``bytes_in_flight`` (``o * b * B``),
        ``latency_bytes_per_cycle`` (Little's law), ``read_bytes_per_cycle``
        (``R / t_R``), ``write_bytes_per_cycle``, ``memory_cycles`` (``t_mem``),
        ``bytes_per_cycle`` (the slope ``(R + W) / t_mem``) and ``limit``: which term set
        ``t_mem`` (``"bandwidth"``, ``"read"`` or ``"write"``; ``"read"`` with
        ``latency_limited`` True when Little's law is the binding part).
    """
    dram = DramTiming.parse(dram)
    bus = config.axi_data_bytes
    peak = bus if dram.bytes_per_cycle is None else min(bus, dram.bytes_per_cycle)
    gap = 1 if bursts is not None else 0
    b = _mean(bursts, "mean_read_beats", config)
    w = _mean(bursts, "mean_write_beats", config)
    lat = dram.read_latency
    in_flight = config.dma_outstanding * b * bus
    channel_bw, latency_bw = (bus * b / t
                              for t in dram.read_burst_terms(b, config.dma_outstanding, gap))
    read_bw = min(channel_bw, latency_bw)
    # the command fetch reads beside the DMA, in bursts of up to fetch_depth commands with a
    # read slot of its own: its bytes (the reads beyond the profile's DMA beats) share the R
    # channel but not the DMA's slots
    cmd_bytes = 0.0 if bursts is None else max(0.0, read_bytes - bursts.read_beats * bus)
    fb = config.fetch_depth * COMMAND_BYTES / bus
    fetch_bw = bus * fb / dram.read_burst_terms(fb, 1, gap)[1]
    t_read = max(read_bytes / channel_bw, (read_bytes - cmd_bytes) / latency_bw,
                 cmd_bytes / fetch_bw)
    write_bw = bus * w / dram.write_burst_cycles(w, gap)
    terms = {"bandwidth": (read_bytes + write_bytes) / peak, "read": t_read,
             "write": write_bytes / write_bw}
    limit = max(terms, key=lambda k: terms[k])
    t_mem = terms[limit]
    total = read_bytes + write_bytes
    return {"bus_bytes_per_cycle": bus, "dram_bytes_per_cycle": dram.bytes_per_cycle,
            "peak_bytes_per_cycle": peak, "read_latency": lat, "dram": dram.spec(),
            "read_burst_beats": b, "write_burst_beats": w, "bytes_in_flight": in_flight,
            "latency_bytes_per_cycle": latency_bw, "read_bytes_per_cycle": read_bw,
            "write_bytes_per_cycle": write_bw, "memory_cycles": t_mem,
            "bytes_per_cycle": total / t_mem if t_mem else peak, "limit": limit,
            "latency_limited": limit == "read" and latency_bw < channel_bw,
            "burst_profile": bursts is not None}


def _mean(bursts, attr: str, config: NPUConfig) -> float:
    value = getattr(bursts, attr) if bursts is not None else None
    return float(value) if value else float(max_burst_beats(config))


def roofline(config: NPUConfig, m: int, k: int, n: int, *, dram: DramTiming | str | None = None,
             bursts=None) -> dict:
    """Roofline bound of an ``(m, k) @ (k, n)`` int8 GEMM on ``config``, as a fraction of peak.

    ``bound = attainable(OI, PEs, bw) / PEs = min(1, bw * OI / PEs)`` with
    ``OI = MACs / gemm_min_dram_bytes`` and ``bw`` the slope of :func:`memory_roof` for that
    traffic (reads ``A + W``, writes the output) under ``dram`` and the kernel's ``bursts``.
    With the ideal DRAM and no burst profile, ``bw`` is ``config.axi_data_bytes`` per cycle.

    Returns
    -------
    dict
        ``macs``, ``min_dram_bytes`` (A + W + output, int8), ``bus_bytes_per_cycle``,
        ``bytes_per_cycle`` (the memory roof's slope), ``memory`` (:func:`memory_roof`),
        ``operational_intensity`` (MACs per byte), ``bound`` (utilization, <= 1) and
        ``bound_kind`` (``"compute"`` or ``"memory"``: which roof is the lower).
    """
    macs = m * k * n
    min_bytes = gemm_min_dram_bytes(m, k, n)
    mem = memory_roof(config, m * k + k * n, m * n, dram, bursts)
    bw = mem["bytes_per_cycle"]
    oi = macs / min_bytes
    bound = attainable(oi, config.n_pes, bw) / config.n_pes
    return {"macs": macs, "min_dram_bytes": min_bytes, "bus_bytes_per_cycle": config.axi_data_bytes,
            "bytes_per_cycle": bw, "memory": mem, "operational_intensity": oi, "bound": bound,
            "bound_kind": "compute" if bound >= 1.0 else "memory"}


@dataclass(frozen=True)
class Roof:
    """The two roofs of one configuration under one DRAM timing.

    Attributes
    ----------
    label : str
        E.g. ``"8x8, ddr"``.
    peak : float
        Compute roof, MACs/cycle.
    bytes_per_cycle : float
        Memory roof's slope, bytes/cycle (:func:`memory_roof`).
    """
    label: str
    peak: float
    bytes_per_cycle: float

    @property
    def ridge(self) -> float:
        """Operational intensity (MACs/byte) where the roofs meet."""
        return self.peak / self.bytes_per_cycle


@dataclass(frozen=True)
class RooflinePoint:
    """One measured kernel on the roofline.

    Attributes
    ----------
    name : str
    macs : int
        Useful multiply-accumulates.
    dram_bytes : int
        Bytes moved between DRAM and the NPU (AXI R + W).
    cycles : int
        Cycles the kernel took.
    roof : Roof, optional
        The roofs of the configuration and DRAM timing it ran on (the plot draws each roof
        once, its points in its colour); None: the plot's default roof.
    """
    name: str
    macs: int
    dram_bytes: int
    cycles: int
    roof: Roof | None = None

    @property
    def intensity(self) -> float:
        """Operational intensity, MACs per DRAM byte (``inf`` without DRAM traffic)."""
        return self.macs / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def performance(self) -> float:
        """Achieved MACs per cycle."""
        return self.macs / self.cycles if self.cycles else 0.0


def gemm_point(name: str, m: int, k: int, n: int, dram_bytes: int, cycles: int,
               roof: Roof | None = None) -> RooflinePoint:
    """Roofline point of an ``(M, K) x (K, N)`` GEMM: ``M*K*N`` MACs over ``dram_bytes``."""
    return RooflinePoint(name, m * k * n, dram_bytes, cycles, roof)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def roofline_png(path: Path | str, points: Iterable[RooflinePoint], *, rows: int | None = None,
                 cols: int | None = None, bytes_per_cycle: float | None = None,
                 title: str = "NPU roofline") -> Path:
    """Draw the roofline in cycle units (matplotlib's Agg backend, no display needed).

    Each roof (a :class:`Roof`: compute ``peak`` MACs/cycle, memory ``bytes_per_cycle * I``
    for operational intensity ``I`` in MACs/byte, meeting at the ridge ``I = peak /
    bytes_per_cycle``, :func:`attainable`) is drawn once in its own colour, with the points
    that ran under it. A point without a roof uses the default roof ``rows * cols`` MACs/cycle
    and ``bytes_per_cycle``. Each point sits at ``(macs / dram_bytes, macs / cycles)``.

    Parameters
    ----------
    path : Path or str
    points : iterable of RooflinePoint
    rows, cols : int, optional
        Systolic array size of the default roof.
    bytes_per_cycle : float, optional
        Memory roof of the default roof, bytes/cycle (e.g. :func:`memory_roof`'s slope).
    title : str

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If a point has no roof and the default roof is missing or not positive, or a roof is
        not positive.
    """
    pts = list(points)
    default = None
    if rows is not None or cols is not None or bytes_per_cycle is not None:
        if not (rows and cols and rows > 0 and cols > 0 and bytes_per_cycle
                and bytes_per_cycle > 0):
            raise ValueError(f"rows, cols and bytes_per_cycle must be positive, got {rows}, "
                             f"{cols}, {bytes_per_cycle}")
        default = Roof(f"{rows}x{cols}", rows * cols, bytes_per_cycle)
    groups: dict[Roof, list[RooflinePoint]] = {}
    for p in pts:
        roof = p.roof or default
        if roof is None:
            raise ValueError(f"point {p.name!r} has no roof and no default roof was given")
        if not (roof.peak > 0 and roof.bytes_per_cycle > 0):
            raise ValueError(f"roof {roof} must have a positive peak and bandwidth")
        groups.setdefault(roof, []).append(p)
    if default is not None and not groups:
        groups[default] = []
    if not groups:
        raise ValueError("nothing to plot: no points and no default roof")
    plt = _pyplot()
    xs = [p.intensity for p in pts if math.isfinite(p.intensity) and p.intensity > 0]
    xs += [r.ridge for r in groups]
    lo, hi = min(xs) / 8, max(xs) * 8
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>ph*"
    for gi, (roof, members) in enumerate(groups.items()):
        colour = colours[gi % len(colours)]
        roof_x = [lo, roof.ridge, hi]
        ax.loglog(roof_x, [attainable(x, roof.peak, roof.bytes_per_cycle) for x in roof_x],
                  "-", color=colour, lw=2, alpha=0.7,
                  label=f"roof {roof.label}: {roof.peak:g} MACs/cycle, "
                        f"{roof.bytes_per_cycle:.3g} B/cycle")
        ax.axvline(roof.ridge, color=colour, ls=":", lw=1, alpha=0.5)
        for pi, p in enumerate(members):
            if not (math.isfinite(p.intensity) and p.performance > 0):
                continue
            ax.loglog([p.intensity], [p.performance], markers[pi % len(markers)], ms=7,
                      color=colour,
                      label=f"{p.name}: {p.performance:.2f} MACs/cycle "
                            f"({p.performance / roof.peak:.0%} of peak), I={p.intensity:.2f}")
    ax.set_xlabel("operational intensity (MACs / DRAM byte)")
    ax.set_ylabel("performance (MACs / cycle)")
    single = default is not None and len(groups) == 1
    ax.set_title(f"{title} ({default.label} array)" if single else title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
