"""Named workloads of ``npu sweep``: what runs at each point, on any backend.

Names
-----
``gemm:MxKxN``
    One int8 linear layer ``(M, K) @ (K, N)`` with the double-buffered kernel
    (:func:`sw.kernels.linear.linear_with_stats`), e.g. ``gemm:64x64x64`` or
    ``gemm:1x384x1536`` (one token through MiniLM's feed-forward up-projection). The operands
    are float32 draws (seeded): ``A ~ N(0, 1)``, ``W ~ N(0, 1/K)``; ``A`` is quantized per
    tensor and ``W`` per output channel (:mod:`sw.quant`), the output scale is calibrated on a
    *separate* draw of activations (64 rows of the same distribution), so the SQNR is that of
    int8 inference on unseen data: the dequantized int8 output against the float32 product.
``minilm-block:L``
    The layer-0 self-attention block of all-MiniLM-L6-v2 on ``L`` tokens of real text
    (:func:`sw.jobs.minilm_block.run_attention_job`: Q/K/V projections, Q.K^T, integer softmax,
    P.V, output projection; SQNR of the block output against float32). Needs a square array.
``minilm:L``
    Reserved for the full six-layer forward pass (it needs the transformer layer in the vector
    unit, DESIGN.md); rejected with a clear message until then.

Every workload runs in :func:`workload_job`, which takes any :class:`sw.backend.Backend` (so the
same function is the RTL job, ``cosim.bench.workloads:workload_job``, and the performance
model's) and returns :func:`measure`-style figures: cycles of the kernels (launch to
completion, summed over the block's kernels), MACs, utilization, accuracy, bit-exactness against
the golden model, every counter over the workload and the DMA bursts
(:class:`cosim.bench.bursts.BurstProfile`).

The number format is int8 for every workload (``FORMATS``); the format is part of each point's
identity so that a later format axis (int4 weights, MXINT8) adds points without renaming these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from cosim.bench.bursts import BurstTap
from hw.config import NPUConfig
from sw.runtime import Device

__all__ = ["Workload", "WorkloadError", "parse_workload", "workload_job", "FORMATS",
           "GEMM_CALIBRATION_ROWS"]

#: Number formats a workload runs in (this generation of the tile: int8 only).
FORMATS = ("int8",)
#: Rows of the separate activation draw the GEMM's output scale is calibrated on.
GEMM_CALIBRATION_ROWS = 64
#: Largest GEMM extent a sweep accepts (elements per dimension; keeps a point below minutes).
MAX_GEMM_DIM = 4096

_GEMM = re.compile(r"(\d+)[xX](\d+)[xX](\d+)")


class WorkloadError(ValueError):
    """A workload name that does not parse, or a workload a configuration cannot run; the
    message names the workload and says why."""


@dataclass(frozen=True)
class Workload:
    """A parsed workload name.

    Attributes
    ----------
    kind : str
        ``"gemm"`` or ``"minilm-block"``.
    dims : tuple of int
        ``(M, K, N)`` of a GEMM, ``(L,)`` of the MiniLM block.
    fmt : str
        Number format (``"int8"``).
    """
    kind: str
    dims: tuple[int, ...]
    fmt: str = "int8"

    @property
    def name(self) -> str:
        """The canonical name, e.g. ``gemm:64x64x64``, ``minilm-block:128``."""
        return f"{self.kind}:{'x'.join(map(str, self.dims))}"

    @property
    def macs(self) -> int | None:
        """Useful MACs of a GEMM (None for the block: the job reports them)."""
        return self.dims[0] * self.dims[1] * self.dims[2] if self.kind == "gemm" else None

    def unsupported(self, config: NPUConfig) -> str | None:
        """Why ``config`` cannot run this workload, or None."""
        if self.kind == "minilm-block" and config.rows != config.cols:
            return (f"{self.name} needs a square array (the transposed K load), got "
                    f"{config.rows}x{config.cols}")
        return None


def parse_workload(text: str) -> Workload:
    """Read ``gemm:MxKxN`` or ``minilm-block:L`` (see the module docstring).

    Raises
    ------
    WorkloadError
        On an unknown kind, a malformed or out-of-range size, or ``minilm:L`` (not yet).
    """
    kind, sep, arg = text.strip().partition(":")
    kind = kind.lower()
    if not sep or not arg:
        raise WorkloadError(f"workload {text!r}: expected KIND:ARGS, e.g. gemm:64x64x64 or "
                            "minilm-block:128")
    if kind == "gemm":
        m = _GEMM.fullmatch(arg)
        if not m:
            raise WorkloadError(f"workload {text!r}: expected gemm:MxKxN, e.g. gemm:1x384x1536")
        dims = tuple(int(v) for v in m.groups())
        if not all(1 <= d <= MAX_GEMM_DIM for d in dims):
            raise WorkloadError(f"workload {text!r}: each of M, K, N must be in "
                                f"1..{MAX_GEMM_DIM}")
        return Workload("gemm", dims)
    if kind in ("minilm-block", "minilm"):
        if not arg.isdigit() or not 1 <= int(arg) <= 512:
            raise WorkloadError(f"workload {text!r}: L must be an integer in 1..512 "
                                "(MiniLM's positions)")
        if kind == "minilm":
            raise WorkloadError(
                f"workload {text!r}: the full six-layer forward pass is not available yet (it "
                "needs residual, LayerNorm and GELU in the vector unit); use "
                f"minilm-block:{arg}, the layer-0 self-attention block")
        return Workload("minilm-block", (int(arg),))
    raise WorkloadError(f"workload {text!r}: unknown kind {kind!r}; kinds: gemm:MxKxN, "
                        "minilm-block:L (minilm:L later)")


# -- running ---------------------------------------------------------------------------------

def _gemm_operands(m: int, k: int, n: int, seed: int):
    """Float operands, their int8 quantization and the requantization of ``gemm:MxKxN``."""
    from sw.quant import channel_scales, quantize, quantize_multipliers, tensor_scale

    rng = np.random.default_rng(seed)
    a_f = rng.standard_normal((m, k), dtype=np.float32)
    w_f = (rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k)))
    a_cal = rng.standard_normal((GEMM_CALIBRATION_ROWS, k), dtype=np.float32)
    sa = tensor_scale(a_cal)
    sw = channel_scales(w_f, axis=1)
    so = tensor_scale(a_cal @ w_f)
    a = quantize(a_f, sa)
    w = quantize(w_f, sw, axis=1)
    mult, shift = quantize_multipliers(sa * sw / so)
    return a_f @ w_f, a, w, np.zeros(n, dtype=np.int32), mult, shift, so


def _run_gemm(device: Device, wl: Workload, seed: int) -> dict:
    from sw.golden import linear_int
    from sw.kernels.linear import linear_with_stats
    from sw.quant import cosine, sqnr_db

    ref, a, w, bias, mult, shift, so = _gemm_operands(*wl.dims, seed)
    out, st = linear_with_stats(device, a, w, bias, mult, shift)
    test = out.astype(np.float64) * so
    return {"cycles": st.cycles, "macs": st.macs, "commands": st.n_commands,
            "sqnr_db": round(float(sqnr_db(ref, test)), 3),
            "cosine": round(float(cosine(ref, test)), 6),
            "bit_exact": bool(np.array_equal(out, linear_int(a, w, bias, mult, shift)))}


def _run_block(backend, config: NPUConfig, wl: Workload) -> dict:
    from sw.jobs.minilm_block import run_attention_job

    res = run_attention_job(backend, config=config.to_dict(), seq_len=wl.dims[0])
    total = res["stages"][-1]
    return {"cycles": total["cycles"], "macs": total["macs"], "sqnr_db": res["sqnr_db"],
            "cosine": res["cosine"], "bit_exact": res["bit_exact"],
            "stages": [{k: s[k] for k in ("name", "cycles", "macs")} for s in res["stages"]]}


def workload_job(backend, *, workload: str, seed: int = 0) -> dict:
    """Run ``workload`` (a name, :func:`parse_workload`) on ``backend``; its figures.

    Returns
    -------
    dict
        ``workload``, ``backend``, ``config`` (spec), ``cycles`` (the kernels' cycles, launch
        to completion, summed), ``macs``, ``utilization`` (``macs / (cycles * PEs)``, None
        untimed), ``sqnr_db`` and ``cosine`` against float32, ``bit_exact`` (against the golden
        integer model), ``counters`` (every counter over the whole workload, host time between
        kernels included), ``bursts`` (:meth:`BurstProfile.to_dict`), and per stage
        ``stages`` (the MiniLM block).

    Raises
    ------
    WorkloadError
        For a bad name or a workload ``backend``'s configuration cannot run.
    """
    wl = parse_workload(workload)
    config = backend.config
    why = wl.unsupported(config)
    if why:
        raise WorkloadError(why)
    tap = BurstTap(backend, config)
    device = Device(tap, expected_config=config)
    before, b0 = device.counters(), tap.snapshot()
    res = _run_gemm(device, wl, seed) if wl.kind == "gemm" else _run_block(tap, config, wl)
    counters = device.counters() - before
    cycles = res["cycles"]
    return {"workload": wl.name, "format": wl.fmt, "backend": backend.name,
            "config": config.spec, **res,
            "utilization": res["macs"] / (cycles * config.n_pes) if cycles else None,
            "counters": dict(counters), "bursts": (tap.snapshot() - b0).to_dict()}
