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
    The whole forward pass of all-MiniLM-L6-v2 on ``L`` tokens of real text
    (:func:`sw.jobs.encoder.run_encoder_job`: embedding LayerNorm, six layers of attention,
    residual + LayerNorm and the GELU feed-forward network, all on the NPU; SQNR and cosine of
    the sentence embedding against float32). Needs a square array and ``L`` a multiple of
    ``cols``; int8 only.

Every workload runs in :func:`workload_job`, which takes any :class:`sw.backend.Backend` (so the
same function is the RTL job, ``cosim.bench.workloads:workload_job``, and the performance
model's) and returns :func:`measure`-style figures: cycles of the kernels (launch to
completion, summed over the block's kernels or the forward pass's operations), MACs,
utilization, accuracy, bit-exactness against the golden model, every counter over the
workload and the DMA bursts
(:class:`cosim.bench.bursts.BurstProfile`).

Number formats: a name may end in ``@WEIGHTS`` or ``@WEIGHTS+ACTIVATIONS`` (``FORMATS``):
``gemm:1x384x1536@int4`` (int4 weights, per channel), ``gemm:64x64x64@mxint8`` (OCP MXINT8
weights, int8 activations), ``minilm-block:32@mxint8+mxint8`` (MXINT8 weights and Q/K/V input;
MXINT8 needs a configuration with ``mx=1``). No suffix is int8 x int8, and its name (and cache
key) is the one it had before the format axis. ``npu sweep --weights ... --activations ...``
applies formats to every ``--workload``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from cosim.bench.bursts import BurstTap
from hw.config import NPUConfig
from sw.kernels.linear import check_mx
from sw.runtime import Device

__all__ = ["Workload", "WorkloadError", "parse_workload", "workload_job", "FORMATS",
           "WEIGHT_FORMATS", "ACT_FORMATS", "GEMM_CALIBRATION_ROWS", "with_format"]

#: Weight and activation number formats (:mod:`hw.isa.formats`).
WEIGHT_FORMATS = ("int8", "int4", "mxint8")
ACT_FORMATS = ("int8", "mxint8")
#: Every format name: ``WEIGHTS`` (int8 activations) or ``WEIGHTS+ACTIVATIONS``.
FORMATS = tuple(w if a == "int8" else f"{w}+{a}" for a in ACT_FORMATS for w in WEIGHT_FORMATS)
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
        ``"gemm"``, ``"minilm-block"`` or ``"minilm"``.
    dims : tuple of int
        ``(M, K, N)`` of a GEMM, ``(L,)`` of the MiniLM block or forward pass.
    fmt : str
        Number format (:data:`FORMATS`: ``"int8"``, ``"int4"``, ``"mxint8+mxint8"``, ...).
    """
    kind: str
    dims: tuple[int, ...]
    fmt: str = "int8"

    @property
    def name(self) -> str:
        """The canonical name, e.g. ``gemm:64x64x64``, ``minilm-block:128@int4``."""
        base = f"{self.kind}:{'x'.join(map(str, self.dims))}"
        return base if self.fmt == "int8" else f"{base}@{self.fmt}"

    @property
    def weights(self) -> str:
        return self.fmt.partition("+")[0]

    @property
    def activations(self) -> str:
        return self.fmt.partition("+")[2] or "int8"

    @property
    def macs(self) -> int | None:
        """Useful MACs of a GEMM (None for the block and the forward pass: the job reports
        them)."""
        return self.dims[0] * self.dims[1] * self.dims[2] if self.kind == "gemm" else None

    def format_refused(self) -> str | None:
        """Why this workload cannot run in its number format on any configuration, or None."""
        if self.kind == "minilm" and self.fmt != "int8":
            return "the forward pass runs int8 weights and activations only"
        return None

    def unsupported(self, config: NPUConfig) -> str | None:
        """Why ``config`` cannot run this workload, or None."""
        if self.kind != "gemm" and config.rows != config.cols:
            return (f"{self.name} needs a square array (the transposed K load), got "
                    f"{config.rows}x{config.cols}")
        if self.kind == "minilm":
            if self.format_refused():   # (a format axis of a sweep, see with_format)
                return f"{self.name}: {self.format_refused()}"
            from sw.jobs import encoder
            try:
                encoder.check_config(config, self.dims[0])
            except ValueError as e:
                return f"{self.name}: {e}"
        if "mxint8" in self.fmt:
            try:
                check_mx(config)
            except ValueError as e:
                return f"{self.name}: {e}"
        if (self.kind == "minilm-block" and self.activations == "mxint8"
                and self.weights != "mxint8"):
            return f"{self.name}: the block uses MXINT8 activations with MXINT8 weights only"
        return None


def with_format(wl: Workload, weights: str, activations: str = "int8") -> Workload:
    """``wl`` in another number format.

    Raises
    ------
    WorkloadError
        For an unknown format.
    """
    fmt = weights if activations == "int8" else f"{weights}+{activations}"
    if fmt not in FORMATS:
        raise WorkloadError(f"format {fmt!r} unknown; formats: {', '.join(FORMATS)}")
    return Workload(wl.kind, wl.dims, fmt)


def parse_workload(text: str) -> Workload:
    """Read ``gemm:MxKxN``, ``minilm-block:L`` or ``minilm:L``, optionally ``@FORMAT`` (see
    the module docstring).

    Raises
    ------
    WorkloadError
        On an unknown kind or format, or a malformed or out-of-range size.
    """
    text, at, fmt = text.strip().partition("@")
    if at:
        fmt = fmt.strip().lower().removesuffix("+int8")     # int8 activations are the default
        if fmt not in FORMATS:
            raise WorkloadError(f"workload {text}@{fmt}: unknown format {fmt!r}; formats: "
                                f"{', '.join(FORMATS)}")
        wl = parse_workload(text)
        wl = Workload(wl.kind, wl.dims, fmt)
        if why := wl.format_refused():
            raise WorkloadError(f"workload {text}@{fmt}: {why}")
        return wl
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
        return Workload(kind, (int(arg),))
    raise WorkloadError(f"workload {text!r}: unknown kind {kind!r}; kinds: gemm:MxKxN, "
                        "minilm-block:L, minilm:L")


# -- running ---------------------------------------------------------------------------------

def _gemm_operands(m: int, k: int, n: int, seed: int, weights: str = "int8",
                   activations: str = "int8", tile_k: int = 8):
    """Float operands, their quantization in the given formats (int8: per tensor / per
    channel; int4: per channel; MXINT8: OCP MX blocks along K) and the requantization of
    ``gemm:MxKxN``; also the :class:`sw.kernels.linear.Formats`."""
    from hw.isa import E8M0_BIAS, MXINT8_FRAC_BITS, ActFormat, WeightFormat
    from sw.kernels.linear import Formats
    from sw.quant import channel_scales, quantize, quantize_multipliers, tensor_scale
    from sw.quant_formats import (
        int4_channel_scales,
        mx_alignment_base,
        quantize_int4,
        quantize_mxint8,
    )

    rng = np.random.default_rng(seed)
    a_f = rng.standard_normal((m, k), dtype=np.float32)
    w_f = (rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k)))
    a_cal = rng.standard_normal((GEMM_CALIBRATION_ROWS, k), dtype=np.float32)
    so = tensor_scale(a_cal @ w_f)
    a_exp = w_exp = None
    if activations == "mxint8":
        a, a_exp = quantize_mxint8(a_f, axis=1)
        sa, a_max = 2.0 ** -MXINT8_FRAC_BITS, 127
    else:
        sa, a_max = tensor_scale(a_cal), 128
        a = quantize(a_f, sa)
    if weights == "mxint8":
        w, w_exp = quantize_mxint8(w_f, axis=0)
        sw, w_max = np.full(n, 2.0 ** -MXINT8_FRAC_BITS), 127
    elif weights == "int4":
        sw, w_max = int4_channel_scales(w_f, axis=1), 8
        w = quantize_int4(w_f, sw, axis=1)
    else:
        sw, w_max = channel_scales(w_f, axis=1), 128
        w = quantize(w_f, sw, axis=1)
    mx = weights == "mxint8" or activations == "mxint8"
    x_base = mx_alignment_base(a_exp, w_exp, k=k, tile_k=tile_k, a_max=a_max,
                               w_max=w_max) if mx else 0
    unit = 2.0 ** (x_base - 2 * E8M0_BIAS) if mx else 1.0
    mult, shift = quantize_multipliers(unit * sa * sw / so)
    fmt = Formats(weights=WeightFormat[weights.upper()], activations=ActFormat[
        activations.upper()], w_exp=w_exp, a_exp=a_exp, x_base=x_base)
    return a_f @ w_f, a, w, np.zeros(n, dtype=np.int32), mult, shift, so, fmt


def _run_gemm(device: Device, wl: Workload, seed: int) -> dict:
    from sw.golden import linear_formats
    from sw.kernels.linear import linear_with_stats, weight_dram_bytes
    from sw.quant import cosine, sqnr_db

    c = device.config
    ref, a, w, bias, mult, shift, so, fmt = _gemm_operands(
        *wl.dims, seed, wl.weights, wl.activations, c.rows)
    out, st = linear_with_stats(device, a, w, bias, mult, shift, formats=fmt)
    test = out.astype(np.float64) * so
    gold = linear_formats(a, w, bias, mult, shift, tile_k=c.rows, weights=fmt.weights,
                          activations=fmt.activations, w_exp=fmt.w_exp, a_exp=fmt.a_exp,
                          x_base=fmt.x_base)
    return {"cycles": st.cycles, "macs": st.macs, "commands": st.n_commands,
            "sqnr_db": round(float(sqnr_db(ref, test)), 3),
            "cosine": round(float(cosine(ref, test)), 6),
            "weight_bytes": weight_dram_bytes(c, st.plan),
            "bit_exact": bool(np.array_equal(out, gold))}


def _run_block(backend, config: NPUConfig, wl: Workload) -> dict:
    from sw.jobs.minilm_block import run_attention_job

    res = run_attention_job(backend, config=config.to_dict(), seq_len=wl.dims[0],
                            weights=wl.weights, activations=wl.activations)
    total = res["stages"][-1]
    return {"cycles": total["cycles"], "macs": total["macs"], "sqnr_db": res["sqnr_db"],
            "cosine": res["cosine"], "bit_exact": res["bit_exact"],
            "weight_bytes": res["weight_bytes"],
            "stages": [{k: s[k] for k in ("name", "cycles", "macs")} for s in res["stages"]]}


def _run_encoder(backend, config: NPUConfig, wl: Workload) -> dict:
    from sw.jobs.encoder import run_encoder_job

    res = run_encoder_job(backend, config=config.to_dict(), seq_len=wl.dims[0])
    total = res["total"]
    return {"cycles": total["cycles"], "macs": total["macs"], "sqnr_db": res["sqnr_db"],
            "cosine": res["cosine"], "bit_exact": res["bit_exact"],
            "weight_bytes": res["weight_bytes"], "commands": res["commands"],
            "stages": [{"name": "embedding" if p["layer"] == "embed" else f"layer {p['layer']}",
                        "cycles": p["cycles"], "macs": p["macs"]} for p in res["per_layer"]]}


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
        ``stages`` (the MiniLM block's stages, the forward pass's layers).

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
    if wl.kind == "gemm":
        res = _run_gemm(device, wl, seed)
    elif wl.kind == "minilm-block":
        res = _run_block(tap, config, wl)
    else:
        res = _run_encoder(tap, config, wl)
    counters = device.counters() - before
    cycles = res["cycles"]
    return {"workload": wl.name, "format": wl.fmt, "backend": backend.name,
            "config": config.spec, **res,
            "utilization": res["macs"] / (cycles * config.n_pes) if cycles else None,
            "counters": dict(counters), "bursts": (tap.snapshot() - b0).to_dict()}
