"""Accuracy/area study of the vector unit's GELU and LayerNorm methods: a measured co-design
decision (issue 14).

GELU (fixed-point domain, 8 fraction bits, :func:`sw.golden.gelu_fixed`):

* ``table K``: ``max(y, 0) - C[round(|y| / 2**(8 - K))]`` with a ``4 * 2**K``-entry table of
  ``u Phi(-u)`` (the ISA's choice is ``K = 5``, 128 entries of 6 bits);
* ``i-GELU``: I-BERT's second-order polynomial (Kim et al. 2021, arXiv:2101.01321, Alg. 2:
  ``erf(z) ~ sgn(z) [a (min(|z|, -b) + b)**2 + 1]``, ``a = -0.2888``, ``b = -1.769``) in the same
  domain, in integers (two more products per element on the shared multiplier).

LayerNorm reciprocal standard deviation (the row unit, :func:`sw.golden.layernorm_row_constants`):

* ``isqrt``: the ISA's digit-by-digit square root of the normalised variance and a restoring
  division (exact floors, 15 significant bits);
* ``table K``: ``R`` from a ``2**K``-entry table over the normalised variance ``D'`` in
  ``[2**28, 2**30)`` (no Newton step), the "small table" alternative.

Measured: the error of the operation alone (GELU on a grid of its domain against the exact
erf GELU; the reciprocal against ``N / sqrt(D)`` over random variances), the cosine of the
whole six-layer encoder's sentence embedding against float32 (three evaluation sentences, L =
32 and 128, :mod:`sw.models.encoder`), and Yosys cell counts (``synth -flatten``) of ``cols``
GELU lanes (the part that differs between table sizes; i-GELU's extra work is two more passes
per row through the shared multiplier, which costs cycles, not multipliers).

Usage::

    python -m cosim.bench.transformer_ops_cost [--config 8x8] [--json out/ops_cost.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.config import NPUConfig

__all__ = ["main"]

EVAL_TEXTS = (
    "Engineers test the new accelerator chip with a small language model before tape-out.",
    "A cat sleeps on the warm windowsill while rain taps against the glass.",
    "Interest rates rose again, and the central bank signalled more increases this year.",
)


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_table_variant(step_bits: int):
    """``gelu_fixed`` with a ``4 * 2**step_bits``-entry table (F = 8)."""
    from hw.isa import gelu_table
    entries = 4 << step_bits
    table = np.asarray(gelu_table(step_bits=step_bits, entries=entries), np.int64)
    k = 8 - step_bits

    def g(y):
        y = np.asarray(y, np.int64)
        idx = (np.abs(y) + ((1 << k) >> 1)) >> k
        c = np.where(idx < entries, table[np.minimum(idx, entries - 1)], 0)
        return np.maximum(y, 0) - c
    return g


def igelu(y):
    """I-BERT's i-GELU in the Q.8 domain, in integers: ``v = min(|y|, cb) - cb`` with ``cb =
    round(-b sqrt(2) 2**8)``; ``L = round(a * 2**16 * v**2 / 2**17) + 2**16`` (erf in Q.16);
    ``g = round(y * (2**16 + sgn(y) L) / 2**17)``."""
    a, b = -0.2888, -1.769
    cb = round(-b * math.sqrt(2) * 256)
    qa = round(a * (1 << 16))
    y = np.asarray(y, np.int64)
    v = np.minimum(np.abs(y), cb) - cb
    erf_q = ((qa * v * v + (1 << 16)) >> 17) + (1 << 16)
    return (y * ((1 << 16) + np.sign(y) * erf_q) + (1 << 16)) >> 17


def rsqrt_table_variant(bits: int):
    """``layernorm_row_constants`` with ``R`` from a ``2**bits``-entry table over ``D'``."""
    from hw.isa import LN_MEAN_FRAC_BITS, LN_RECIP_SHIFT, LN_VAR_BITS
    lo = 1 << (LN_VAR_BITS - 2)
    span = (3 * lo) >> bits          # [2**28, 2**30) in 2**bits equal steps

    def row_constants(s, q, n):
        s, q, n = int(s), int(q), int(n)
        d = n * q - s * s
        mu = ((s << LN_MEAN_FRAC_BITS) + n // 2) // n
        if d == 0:
            return 0, 0, mu
        e = (d.bit_length() - (LN_VAR_BITS - 1)) // 2
        dn = d >> (2 * e) if e >= 0 else d << (-2 * e)
        i = (dn - lo) // span
        mid = lo + i * span + span // 2
        return math.floor((n << LN_RECIP_SHIFT) / math.sqrt(mid) + 0.5), e, mu
    return row_constants


@contextmanager
def _patched(gelu=None, row_constants=None):
    """Swap the golden model's GELU table or LayerNorm row constants for a variant, in the
    modules that call them (``sw.golden.gelu.gelu_fixed`` for :func:`sw.golden.gelu_int`,
    ``sw.golden.eltwise._row_constants`` for :func:`sw.golden.layernorm_int`: replacing the
    names on the ``sw.golden`` package changed nothing)."""
    import sw.golden.eltwise as eltwise
    import sw.golden.gelu as gelu_mod
    old = gelu_mod.gelu_fixed, eltwise._row_constants
    if gelu is not None:
        gelu_mod.gelu_fixed = gelu
    if row_constants is not None:
        eltwise._row_constants = row_constants
    try:
        yield
    finally:
        gelu_mod.gelu_fixed, eltwise._row_constants = old


def encoder_cosines(seq_lens=(32, 128)) -> dict:
    """Sentence-embedding cosine vs float32 of the integer encoder, per text and length."""
    from sw.models.attention_block import tokens_for_length
    from sw.models.encoder import (
        calibrate_encoder,
        float_encoder,
        golden_encoder,
        sentence_embedding,
    )
    from sw.models.minilm import load_minilm
    from sw.quant import cosine
    model = load_minilm()
    eq = calibrate_encoder(model)
    out = {}
    for seq in seq_lens:
        vals = []
        for text in EVAL_TEXTS:
            ids, kv = tokens_for_length(model, text, seq)
            ref = sentence_embedding(float_encoder(model, ids, kv)[-1]["y2"], kv)
            vals.append(cosine(ref, golden_encoder(eq, model, ids, kv)["embedding"]))
        out[f"L{seq}"] = [round(v, 5) for v in vals]
    return out


_FLOAT_CACHE: dict = {}


def gelu_error(g) -> dict:
    y = np.arange(-(1 << 12), 1 << 12)                   # |x| < 16, every Q.8 point
    err = np.abs(g(y) / 256 - _gelu_exact(y / 256))
    return {"max_abs": round(float(err.max()), 5), "rms": round(float(np.sqrt((err**2).mean())), 6)}


def rsqrt_error(row_constants) -> dict:
    """Relative error of ``R / 2**(32 + e)`` against ``N / sqrt(D)`` over random rows."""
    from hw.isa import LN_RECIP_SHIFT
    rng = np.random.default_rng(0)
    errs = []
    for _ in range(3000):
        n = 384
        x = rng.integers(-(1 << 15), 1 << 15, n) >> int(rng.integers(0, 14))
        s, q = int(x.sum()), int((x * x).sum())
        d = n * q - s * s
        if d == 0:
            continue
        r, e, _ = row_constants(s, q, n)
        errs.append(abs(r / 2.0 ** (LN_RECIP_SHIFT + e) / (n / math.sqrt(d)) - 1))
    return {"max_rel": float(f"{max(errs):.3g}"), "mean_rel": float(f"{np.mean(errs):.3g}")}


class GeluLanes(wiring.Component):
    """``lanes`` registered GELU lanes with a ``4 * 2**step_bits``-entry table."""

    def __init__(self, lanes: int, step_bits: int):
        self.lanes, self.step_bits = lanes, step_bits
        super().__init__({"y": In(data.ArrayLayout(signed(17), lanes)),
                          "g": Out(data.ArrayLayout(signed(18), lanes))})

    def elaborate(self, platform):
        from amaranth.hdl import Array, Const, Mux

        from hw.isa import gelu_table
        m = Module()
        entries = 4 << self.step_bits
        k = 8 - self.step_bits
        table = Array(Const(c, 8) for c in gelu_table(step_bits=self.step_bits,
                                                       entries=entries))
        for j in range(self.lanes):
            y = self.y[j]
            u = Mux(y < 0, -y, y)
            idx = Signal(17, name=f"idx{j}")
            m.d.comb += idx.eq((u + ((1 << k) >> 1)) >> k)
            c = Mux(idx < entries, table[idx[:(entries - 1).bit_length()]], 0)
            r = Signal(signed(18), name=f"g{j}")
            m.d.sync += r.eq(Mux(y < 0, 0, y) - c)
            m.d.comb += self.g[j].eq(r)
        return m


def main(argv: list[str] | None = None) -> int:
    from cosim.bench.softmax_cost import yosys_cells
    from cosim.cli.args import parse_config
    from hw.isa import GELU_TABLE_STEP_BITS
    from sw.golden import layernorm_row_constants

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=parse_config, default=NPUConfig())
    ap.add_argument("--json", default="out/transformer_ops_cost.json")
    ap.add_argument("--no-encoder", action="store_true", help="skip the encoder cosines")
    args = ap.parse_args(argv)
    cols = args.config.cols
    doc = {"config": args.config.to_dict(), "gelu": [], "layernorm": []}
    t0 = time.perf_counter()
    for k in (3, 4, 5, 6):
        row = {"method": f"table {4 << k} entries", "step_bits": k,
               "chosen": k == GELU_TABLE_STEP_BITS, "op": gelu_error(gelu_table_variant(k)),
               "lane_cells": yosys_cells(GeluLanes(cols, k))["cells"]}
        if not args.no_encoder:
            with _patched(gelu=gelu_table_variant(k)):
                row["encoder"] = encoder_cosines()
        doc["gelu"].append(row)
    row = {"method": "i-GELU (I-BERT)", "op": gelu_error(igelu), "lane_cells": None,
           "note": "2 more passes per row through the shared multiplier"}
    if not args.no_encoder:
        with _patched(gelu=igelu):
            row["encoder"] = encoder_cosines()
    doc["gelu"].append(row)
    for name, fn in (("isqrt + division", layernorm_row_constants),
                     ("table 64", rsqrt_table_variant(6)), ("table 256", rsqrt_table_variant(8))):
        row = {"method": name, "chosen": fn is layernorm_row_constants, "op": rsqrt_error(fn)}
        if not args.no_encoder:
            with _patched(row_constants=fn):
                row["encoder"] = encoder_cosines()
        doc["layernorm"].append(row)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"GELU ({cols} lanes for the cell counts)")
    print(f"{'method':<22}{'max |err|':>10}{'rms':>10}{'cells':>8}  encoder cosine L32 | L128")
    for r in doc["gelu"]:
        enc = r.get("encoder", {})
        cos = " | ".join(" ".join(f"{v:.4f}" for v in enc.get(k, [])) for k in ("L32", "L128"))
        mark = "  <- chosen" if r.get("chosen") else ""
        print(f"{r['method']:<22}{r['op']['max_abs']:>10.4f}{r['op']['rms']:>10.5f}"
              f"{str(r['lane_cells'] or '-'):>8}  {cos}{mark}")
    print("LayerNorm 1/std")
    print(f"{'method':<22}{'max rel':>10}{'mean rel':>10}          encoder cosine L32 | L128")
    for r in doc["layernorm"]:
        enc = r.get("encoder", {})
        cos = " | ".join(" ".join(f"{v:.4f}" for v in enc.get(k, [])) for k in ("L32", "L128"))
        mark = "  <- chosen" if r.get("chosen") else ""
        print(f"{r['method']:<22}{r['op']['max_rel']:>10.2g}{r['op']['mean_rel']:>10.2g}"
              f"{'':>10}{cos}{mark}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
