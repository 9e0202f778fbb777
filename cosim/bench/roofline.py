"""The roofline of the NPU: the bound of one GEMM, measured points and the plot.

The roofline model (Williams, Waterman, Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 52(4), 2009) bounds the performance of a kernel of
operational intensity ``I`` (work per byte moved to and from DRAM) by
``min(peak, bandwidth * I)``. Here work is counted in multiply-accumulates (MACs) and time in
cycles: ``peak`` is ``rows * cols`` MACs/cycle (one MAC per processing element per cycle) and
``bandwidth`` the DRAM bytes per cycle of the AXI port (one beat of ``axi_data_bytes`` per
cycle, reads and writes against the same budget). :func:`attainable` is that formula, used by
the bench's bound (:func:`roofline`) and by the plot (:func:`roofline_png`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hw.config import NPUConfig

__all__ = ["attainable", "gemm_min_dram_bytes", "roofline", "RooflinePoint", "gemm_point",
           "roofline_png"]


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


def roofline(config: NPUConfig, m: int, k: int, n: int) -> dict:
    """Roofline bound of an ``(m, k) @ (k, n)`` int8 GEMM on ``config``, as a fraction of peak.

    ``bound = attainable(OI, PEs, bw) / PEs = min(1, bw * OI / PEs)`` with ``bw`` =
    ``config.axi_data_bytes`` per cycle and ``OI = MACs / gemm_min_dram_bytes``.

    Returns
    -------
    dict
        ``macs``, ``min_dram_bytes`` (A + W + output, int8), ``bus_bytes_per_cycle``,
        ``operational_intensity`` (MACs per byte), ``bound`` (utilization, <= 1) and
        ``bound_kind`` (``"compute"`` or ``"memory"``: which roof is the lower).
    """
    macs = m * k * n
    min_bytes = gemm_min_dram_bytes(m, k, n)
    bw = config.axi_data_bytes
    oi = macs / min_bytes
    bound = attainable(oi, config.n_pes, bw) / config.n_pes
    return {"macs": macs, "min_dram_bytes": min_bytes, "bus_bytes_per_cycle": bw,
            "operational_intensity": oi, "bound": bound,
            "bound_kind": "compute" if bound >= 1.0 else "memory"}


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
    """
    name: str
    macs: int
    dram_bytes: int
    cycles: int

    @property
    def intensity(self) -> float:
        """Operational intensity, MACs per DRAM byte (``inf`` without DRAM traffic)."""
        return self.macs / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def performance(self) -> float:
        """Achieved MACs per cycle."""
        return self.macs / self.cycles if self.cycles else 0.0


def gemm_point(name: str, m: int, k: int, n: int, dram_bytes: int, cycles: int
               ) -> RooflinePoint:
    """Roofline point of an ``(M, K) x (K, N)`` GEMM: ``M*K*N`` MACs over ``dram_bytes``."""
    return RooflinePoint(name, m * k * n, dram_bytes, cycles)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def roofline_png(path: Path | str, points: Iterable[RooflinePoint], *, rows: int, cols: int,
                 bytes_per_cycle: float, title: str = "NPU roofline") -> Path:
    """Draw the roofline in cycle units (matplotlib's Agg backend, no display needed).

    Roofs: compute ``rows * cols`` MACs/cycle; memory ``bytes_per_cycle * I`` for operational
    intensity ``I`` (MACs/byte); they meet at the ridge ``I = rows * cols / bytes_per_cycle``
    (:func:`attainable`). Each point sits at ``(macs / dram_bytes, macs / cycles)``.

    Parameters
    ----------
    path : Path or str
    points : iterable of RooflinePoint
    rows, cols : int
        Systolic array size.
    bytes_per_cycle : float
        Peak DRAM bandwidth in bytes/cycle (e.g. AXI data width / 8 for one direction).
    title : str

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If a size or the bandwidth is not positive.
    """
    if rows <= 0 or cols <= 0 or not bytes_per_cycle > 0:
        raise ValueError(f"rows, cols and bytes_per_cycle must be positive, got {rows}, "
                         f"{cols}, {bytes_per_cycle}")
    plt = _pyplot()
    pts = list(points)
    peak = rows * cols
    ridge = peak / bytes_per_cycle
    xs = [p.intensity for p in pts if p.intensity != float("inf")] + [ridge]
    lo, hi = min(xs) / 8, max(xs) * 8
    fig, ax = plt.subplots(figsize=(7, 5))
    roof_x = [lo, ridge, hi]
    ax.loglog(roof_x, [attainable(x, peak, bytes_per_cycle) for x in roof_x], "k-", lw=2,
              label=f"roof: {peak} MACs/cycle, {bytes_per_cycle:g} B/cycle")
    ax.axvline(ridge, color="0.6", ls=":", lw=1)
    for p in pts:
        ax.loglog([p.intensity], [p.performance], "o", ms=7,
                  label=f"{p.name}: {p.performance:.2f} MACs/cycle "
                        f"({p.performance / peak:.0%} of peak), I={p.intensity:.2f}")
    ax.set_xlabel("operational intensity (MACs / DRAM byte)")
    ax.set_ylabel("performance (MACs / cycle)")
    ax.set_title(f"{title} ({rows}x{cols} array)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
