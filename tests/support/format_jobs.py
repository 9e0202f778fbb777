"""Jobs of the number-format tests (int4 and MXINT8 linear layers), for any backend: the RTL
through :func:`cosim.tb.harness.run_job`, the functional and performance models directly."""

from __future__ import annotations

import hashlib

import numpy as np

from hw.isa import WeightFormat
from sw.golden import linear_formats
from sw.kernels.linear import Formats, linear_with_stats
from sw.perf.corpus import format_golden, format_operands
from sw.quant import quantize_multipliers
from sw.runtime import Device

#: (weights, activations) of the format tests
COMBOS = [("int8", "int8"), ("int4", "int8"), ("mxint8", "int8"), ("mxint8", "mxint8"),
          ("int8", "mxint8"), ("int4", "mxint8")]

def linear_format_cases(backend, *, cases: list, seed: int = 0) -> dict:
    """Run each ``[M, K, N, weights, activations, edge]`` case on ``backend``; per case: bit
    exactness against :func:`sw.golden.linear_formats`, an output digest, cycles, saturated
    outputs."""
    device = Device(backend, backend.config)
    c = device.config
    rng = np.random.default_rng(seed)
    out = []
    for m, k, n, weights, activations, edge in cases:
        a, w, bias, mult, shift, fmt = format_operands(rng, c, m, k, n, weights, activations,
                                                       edge)
        got, stats = linear_with_stats(device, a, w, bias, mult, shift, formats=fmt)
        want = format_golden(c, a, w, bias, mult, shift, fmt)
        out.append({"case": [m, k, n, weights, activations, edge],
                    "bit_exact": bool(np.array_equal(got, want)),
                    "digest": hashlib.sha256(got.tobytes()).hexdigest()[:16],
                    "cycles": stats.cycles, "x_base": fmt.x_base,
                    "saturated": int(np.sum((want == 127) | (want == -128))),
                    "distinct": int(np.unique(want).size)})
    return {"cases": out}


def gemv_formats(backend, *, k: int = 384, n: int = 1536, seed: int = 0) -> dict:
    """The batch-1 GEMV ``(1, k) @ (k, n)`` with int8 and with int4 weights (weights streamed
    from DRAM): cycles and DRAM bytes read of each, bit-exact flags."""
    device = Device(backend, backend.config)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (1, k), dtype=np.int8)
    w = rng.integers(-8, 8, (k, n), dtype=np.int8)
    bias = np.zeros(n, np.int64)
    mult, shift = quantize_multipliers(np.full(n, 1 / 3000))
    out = {}
    for name, wf in (("int8", WeightFormat.INT8), ("int4", WeightFormat.INT4)):
        before = device.counters()
        got, stats = linear_with_stats(device, a, w, bias, mult, shift,
                                       formats=Formats(weights=wf))
        d = device.counters() - before
        out[name] = {"cycles": stats.cycles, "bytes_read": d["bytes_read"],
                     "bit_exact": bool(np.array_equal(
                         got, linear_formats(a, w, bias, mult, shift,
                                             tile_k=device.config.rows, weights=wf)))}
    return out
