"""Validation workloads of the number formats: int4 and MXINT8 linear layers and back-to-back
MATMULs in random formats."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hw.isa import ActFormat, LocalMem, WeightFormat
from sw.perf.corpus.common import Workload, digest
from sw.runtime import CommandList, Device

_W = {"int8": WeightFormat.INT8, "int4": WeightFormat.INT4, "mxint8": WeightFormat.MXINT8}
_A = {"int8": ActFormat.INT8, "mxint8": ActFormat.MXINT8}


def _mx(rng, shape, axis, edge: str | None):
    """MXINT8 elements and scales along ``axis``: quantized random data (``edge`` None), or
    scales drawn from the ends of the E8M0 range with extreme elements (``"limits"``), or data
    with all-zero blocks of both signs (``"zeros"``)."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-3, 4, shape[1 - axis]))[
        (None, slice(None)) if axis == 0 else (slice(None), None)]
    if edge == "zeros":
        blocks = -(-shape[axis] // 32)
        for b in rng.choice(blocks, size=max(1, blocks // 2), replace=False):
            sl = [slice(None), slice(None)]
            sl[axis] = slice(32 * b, 32 * b + 32)
            x[tuple(sl)] = rng.choice([0.0, -0.0])
    from sw.quant_formats import quantize_mxint8
    q, e = quantize_mxint8(x, axis=axis)
    if edge == "limits":
        e = rng.choice(np.array([0, 1, 2, 126, 127, 128, 252, 253, 254], np.uint8), size=e.shape)
        q = rng.choice(np.array([-127, -126, -1, 0, 1, 126, 127], np.int8), size=q.shape)
    return q, e


def format_operands(rng, config, m: int, k: int, n: int, weights: str, activations: str,
                    edge: str | None = None):
    """Quantized operands of an ``(M, K) @ (K, N)`` layer in the given formats, requantization
    parameters that map each column onto about +-100 (``saturate``: onto +-300, so a third of
    the outputs saturate), and the :class:`Formats`."""
    from sw.golden import matmul_formats, matmul_int
    from sw.kernels.linear import Formats
    from sw.quant import quantize_multipliers
    from sw.quant_formats import mx_alignment_base
    wf, af = _W[weights], _A[activations]
    if af == ActFormat.MXINT8:
        a, a_exp = _mx(rng, (m, k), 1, edge)
    else:
        a, a_exp = rng.integers(-128, 128, (m, k), dtype=np.int8), None
    if wf == WeightFormat.MXINT8:
        w, w_exp = _mx(rng, (k, n), 0, edge)
    elif wf == WeightFormat.INT4:
        w, w_exp = rng.integers(-8, 8, (k, n), dtype=np.int8), None
    else:
        w, w_exp = rng.integers(-128, 128, (k, n), dtype=np.int8), None
    mx = wf == WeightFormat.MXINT8 or af == ActFormat.MXINT8
    amax = 127 if af == ActFormat.MXINT8 else 128
    wmax = {WeightFormat.INT8: 128, WeightFormat.INT4: 8, WeightFormat.MXINT8: 127}[wf]
    x_base = mx_alignment_base(a_exp, w_exp, k=k, tile_k=config.rows, a_max=amax,
                               w_max=wmax) if mx else 0
    fmt = Formats(weights=wf, activations=af, w_exp=w_exp, a_exp=a_exp, x_base=x_base)
    acc = matmul_formats(a, w, tile_k=config.rows, xa=a_exp if af else None,
                         xw=w_exp if wf == WeightFormat.MXINT8 else None,
                         x_base=x_base) if mx else matmul_int(a, w)
    peak = np.maximum(np.abs(acc).max(axis=0), 1)
    target = 300 if edge == "saturate" else 100
    bias = (rng.integers(-20, 20, n) * peak / 100).astype(np.int64)
    mult, shift = quantize_multipliers(target / peak)
    return a, w, bias, mult, shift, fmt


def format_golden(config, a, w, bias, mult, shift, fmt) -> np.ndarray:
    """:func:`sw.golden.linear_formats` of :func:`format_operands`' layer."""
    from sw.golden import linear_formats
    return linear_formats(a, w, bias, mult, shift, tile_k=config.rows, weights=fmt.weights,
                          activations=fmt.activations, w_exp=fmt.w_exp, a_exp=fmt.a_exp,
                          x_base=fmt.x_base)


def _formats_gemm(cases: list) -> Callable[[Device], dict]:
    """Linear layers in number formats: ``(M, K, N, weights, activations, edge)`` each."""
    def run(device: Device) -> dict:
        from sw.kernels.linear import linear_with_stats
        rng = np.random.default_rng(15)
        out = []
        for m, k, n, wf, af, edge in cases:
            a, w, bias, mult, shift, fmt = format_operands(rng, device.config, m, k, n, wf, af,
                                                           edge)
            got, stats = linear_with_stats(device, a, w, bias, mult, shift, formats=fmt)
            out.append({"cycles": stats.cycles, "digest": digest(got), "bit_exact": bool(
                np.array_equal(got, format_golden(device.config, a, w, bias, mult, shift,
                                                  fmt)))})
        return {"cases": out}
    return run


def _formats_back_to_back(device: Device, seed: int = 3, n_commands: int = 40) -> dict:
    """MATMULs in random formats (int8, int4, MXINT8 weights; int8, MXINT8 activations) with
    no wait between them over random scratchpad bytes, random ``x_base``; then the
    accumulator rows are stored. Digest of the stored rows."""
    from hw.isa import act_tile_rows, weight_tile_rows
    cfg = device.config
    rng = np.random.default_rng(seed)
    srb, arb = cfg.spad_row_bytes, cfg.acc_row_bytes
    rows, acc_rows = 256, 48
    g = srb
    src = device.upload(rng.integers(0, 256, rows * srb, dtype=np.uint8))
    out = device.alloc(acc_rows * arb)
    cmds = CommandList()
    sem = device.semaphore(0)
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=rows, local_row=0, local_stride=1, signal=0)
    for i in range(n_commands):
        w_fmt = int(rng.integers(0, 3))
        a_fmt = int(rng.integers(0, 2))
        m = int(rng.choice([1, 2, g - 1, g, g + 1, 2 * g + 3]))
        blocks = int(rng.integers(1, 4))
        a_n, w_n = act_tile_rows(cfg, m, a_fmt), weight_tile_rows(cfg, w_fmt)
        cmds.matmul(a_row=int(rng.integers(0, rows - blocks * a_n)),
                    w_row=int(rng.integers(0, rows - blocks * w_n)),
                    acc_row=int(rng.integers(0, acc_rows - m)), m=m, accumulate=i > 0,
                    k_blocks=blocks, w_fmt=w_fmt, a_fmt=a_fmt,
                    x_base=int(rng.choice([254, 245, 262, int(rng.integers(0, 1024))])),
                    wait=(0, sem + 1) if i == 0 else None,
                    signal=0 if i == n_commands - 1 else None)
    cmds.dma_store(mem=LocalMem.ACC, dram_addr=out.addr, dram_stride=arb, row_bytes=arb,
                   n_rows=acc_rows, local_row=0, local_stride=1, wait=(0, sem + 2))
    device.run(cmds)
    return {"digest": digest(np.frombuffer(out.read(), np.uint8)), "commands": len(cmds)}


#: The format workloads' layers: every combination, K not a multiple of 32, edge cases.
FORMAT_CASES = [(20, 100, 24, "int4", "int8", None), (37, 70, 20, "mxint8", "mxint8", "zeros"),
                (9, 64, 17, "mxint8", "int8", "limits"), (33, 100, 8, "int8", "mxint8", None),
                (5, 40, 30, "int4", "mxint8", "saturate")]



def workloads() -> list[Workload]:
    """The ``formats`` workloads, on NPUs with the MX stage (8x8 and 4x4)."""
    mx = {"mx": 1}
    return [Workload("formats_gemv_int4_1x384x1536", "formats",
                     _formats_gemm([(1, 384, 1536, "int4", "int8", None)]), mx),
            Workload("formats_gemm_mixed", "formats", _formats_gemm(FORMAT_CASES), mx),
            Workload("formats_matmul_back_to_back", "formats", _formats_back_to_back, mx),
            Workload("mx4_formats_gemm_mixed", "formats", _formats_gemm(FORMAT_CASES),
                     {"rows": 4, "cols": 4, "mx": 1}),
            Workload("mx4_formats_matmul_back_to_back", "formats", _formats_back_to_back,
                     {"rows": 4, "cols": 4, "mx": 1})]
