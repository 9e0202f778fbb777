"""Layer-0 self-attention block of all-MiniLM-L6-v2, quantized for the NPU.

The block: Q, K, V projections of the embeddings; per head (12 of 32) scores ``Q K^T / sqrt(32)``
with an optional key-padding and causal mask; softmax; context ``P V``; the output projection
``attention.output.dense`` (no LayerNorm/residual). :func:`float_block` is the float
reference, :func:`calibrate_block` the integer operands, :func:`golden_block` the bit-exact
integer pipeline the NPU runs (what the functional model and the RTL must reproduce).

Quantization (every scale from :data:`sw.models.minilm.DEFAULT_CALIBRATION_TEXT`, sentences run
separately; never from the evaluation text):

* embeddings: per-tensor ``s_x``; weights: per output channel (as :mod:`sw.models.minilm`);
* Q and K outputs: one scale per head (a per-head scale factors out of that head's ``Q K^T``);
* V output: per channel ``s_v[j]`` (factors out of ``P V`` column by column);
* scores -> base-2 exponent units: per head, ``mult / 2**shift = s_q s_k log2(e) 2**F /
  sqrt(d)`` (16-bit ``mult``), the whole of ``1/sqrt(d)`` and the dequant scales folded in;
* context: per channel ``s_c[j] = s_v[j]`` (no saturation possible); the P.V requantization
  folds ``s_v[j] / s_c[j]`` and the
  ``2**-16`` of the row reciprocal into one per-channel multiplier;
* output projection: the per-channel ``s_c[j]`` is folded into the weight rows
  (``W'[n, j] = W[n, j] s_c[j]``, then per-output-channel int8), so its int8 input needs no
  scale (SmoothQuant-style folding, Xiao et al. 2023); per-channel output scales.

Per-channel activation scales and a base-2 exponent with deferred normalization are what
TOOLCHAIN.md measured at 25-27 dB on this workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hw.isa import (
    E8M0_BIAS,
    MXINT8_FRAC_BITS,
    ROW_SCALE_SHIFT,
    SOFTMAX_EXP_FRAC_BITS,
    ActFormat,
    WeightFormat,
)
from sw.golden import attention_head_int, exp2_int, linear_formats
from sw.kernels.linear import Formats
from sw.models.minilm import DEFAULT_CALIBRATION_TEXT, MiniLM
from sw.quant import INT8_MAX, quantize, quantize_multipliers
from sw.quant_formats import int4_channel_scales, mx_alignment_base, quantize_int4, quantize_mxint8

__all__ = ["ATTN_OUTPUT", "BlockQuant", "heads", "tokens_for_length", "embed_ids", "float_block",
           "calibrate_block", "golden_block", "golden_block_int", "score_multiplier",
           "dequantize_output", "attn_output_name", "WEIGHT_FORMATS", "ACT_FORMATS",
           "projection_operands"]

#: Weight formats of the block's four projections (``npu run --weights``).
WEIGHT_FORMATS = {"int8": WeightFormat.INT8, "int4": WeightFormat.INT4,
                  "mxint8": WeightFormat.MXINT8}
#: Activation formats of the Q/K/V projections' input (``npu run --activations``); the output
#: projection's input (the context, computed on the device) is int8 in every case.
ACT_FORMATS = {"int8": ActFormat.INT8, "mxint8": ActFormat.MXINT8}

ATTN_OUTPUT = "encoder.layer.0.attention.output.dense"


def attn_output_name(layer: int = 0) -> str:
    """Tensor-name prefix of ``layer``'s attention output projection."""
    return f"encoder.layer.{layer}.attention.output.dense"
#: Output-projection range headroom over the calibration max: calibration sentences are short,
#: longer sequences reach larger outputs (measured at L=128: 1.0 -> 22.2 dB with 749 saturated
#: values, 1.25 -> 25.2 dB, 1.5 -> 26.0 dB, 2.0 -> 26.0 dB).
OUTPUT_HEADROOM = 1.5
_NAMES = ("query", "key", "value")


MAX_POSITIONS = 512  #: all-MiniLM-L6-v2's max_position_embeddings


def tokens_for_length(model: MiniLM, text: str, seq_len: int | None, fill: str = "repeat"
                      ) -> tuple[np.ndarray, int]:
    """Token ids of ``text`` brought to ``seq_len`` tokens.

    ``[CLS] text [SEP]``; longer: truncated (keeping ``[SEP]`` last). Shorter: ``fill="repeat"``
    repeats the text's word pieces between ``[CLS]`` and ``[SEP]`` (every key is real text);
    ``fill="pad"`` appends ``[PAD]`` tokens that are masked as keys (key-padding mask).

    Returns
    -------
    ids : numpy.ndarray
        int64, shape ``(seq_len,)`` (or the natural length if ``seq_len`` is None).
    kv_len : int
        Number of valid (unpadded) keys.
    """
    ids = model.token_ids(text)
    if seq_len is None:
        return ids, len(ids)
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if seq_len > MAX_POSITIONS:
        raise ValueError(f"seq_len must be <= {MAX_POSITIONS} (MiniLM's position embeddings), "
                         f"got {seq_len}")
    cls, body, sep = ids[:1], ids[1:-1], ids[-1:]
    if len(body) == 0:
        raise ValueError(f"text {text!r} has no tokens besides [CLS] and [SEP]")
    if seq_len <= len(ids):
        out = np.concatenate([ids[:seq_len - 1], sep]) if seq_len > 1 else ids[:1]
        return out, seq_len
    if fill == "pad":
        return np.concatenate([ids, np.zeros(seq_len - len(ids), np.int64)]), len(ids)
    if fill != "repeat":
        raise ValueError(f"fill must be 'repeat' or 'pad', got {fill!r}")
    reps = -(-(seq_len - 2) // max(len(body), 1))
    mid = np.tile(body, reps)[:seq_len - 2]
    return np.concatenate([cls, mid, sep]), seq_len


def embed_ids(model: MiniLM, ids: np.ndarray) -> np.ndarray:
    """Embedding-layer output (float32, ``(T, 384)``) for token ids (as :meth:`MiniLM.embed`)."""
    t = model.tensors
    pos = np.arange(len(ids))
    x = (t["embeddings.word_embeddings.weight"][ids]
         + t["embeddings.position_embeddings.weight"][pos]
         + t["embeddings.token_type_embeddings.weight"][np.zeros_like(ids)]).astype(np.float64)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    eps = float(model.config["layer_norm_eps"])
    return ((x - mu) / np.sqrt(var + eps) * t["embeddings.LayerNorm.weight"]
            + t["embeddings.LayerNorm.bias"]).astype(np.float32)


def heads(model: MiniLM) -> tuple[int, int]:
    """``(heads, head size)`` of ``model`` (12 and 32 for MiniLM-L6)."""
    h = int(model.config["num_attention_heads"])
    return h, model.hidden // h


def float_block(model: MiniLM, x: npt.ArrayLike, kv_len: int | None = None,
                causal: bool = False, layer: int = 0) -> dict[str, np.ndarray]:
    """Float reference of the block (BERT self-attention + output dense) of ``layer``,
    computed in float64 on the float32 weights and returned as float32: the scales are
    calibrated on it, and float64 keeps them independent of the summation order (NumPy's BLAS
    sums float32 products in an order that depends on its thread count, and the calibrated
    multipliers then differ in a few roundings).

    Parameters
    ----------
    x : array_like of float
        Embeddings, shape ``(L, 384)``.
    kv_len : int, optional
        Keys ``>= kv_len`` are masked (additive ``-inf``, as BERT's attention mask).
    causal : bool
        Query ``i`` attends to keys ``<= i`` only.

    Returns
    -------
    dict
        ``query``, ``key``, ``value``, ``context`` (``(L, 384)``), ``output`` (``(L, 384)``),
        all float32.
    """
    t = model.tensors
    f64 = np.float64
    x = np.asarray(x, np.float32).astype(f64)
    n_heads, dh = heads(model)
    out = {}
    for name in _NAMES:
        w, b = model.projection(name, layer)
        out[name] = x @ w.T.astype(f64) + b
    seq = x.shape[0]
    kv = seq if kv_len is None else kv_len
    mask = np.zeros((seq, seq), f64)
    mask[:, kv:] = -np.inf
    if causal:
        mask[np.triu_indices(seq, 1)] = -np.inf
    ctx = np.zeros((seq, model.hidden), f64)
    for h in range(n_heads):
        sl = slice(h * dh, (h + 1) * dh)
        s = out["query"][:, sl] @ out["key"][:, sl].T / math.sqrt(dh) + mask
        m = s.max(axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        e = np.exp(s - m)
        den = e.sum(axis=1, keepdims=True)
        p = np.where(den > 0, e / np.where(den > 0, den, 1), 0)
        ctx[:, sl] = p @ out["value"][:, sl]
    out["context"] = ctx
    o = attn_output_name(layer)
    out["output"] = ctx @ t[o + ".weight"].T.astype(f64) + t[o + ".bias"]
    return {k: v.astype(np.float32) for k, v in out.items()}


def score_multiplier(s_q: float, s_k: float, d: int, frac_bits: int = SOFTMAX_EXP_FRAC_BITS
                     ) -> tuple[int, int]:
    """SOFTMAX ``(mult, shift)`` with ``mult / 2**shift ~= s_q s_k log2(e) 2**F / sqrt(d)``.

    ``mult`` is normalised to ``[2**15, 2**16)`` (relative error <= 2**-16); base-2 exponent:
    ``exp(y) = 2**(y log2 e)`` (Softermax, Stevens et al. 2021).

    Raises
    ------
    ValueError
        If the real multiplier needs a shift outside 0..63.
    """
    real = s_q * s_k * math.log2(math.e) * (1 << frac_bits) / math.sqrt(d)
    f, e = math.frexp(real)
    mult = math.floor(f * (1 << 16) + 0.5)
    shift = 16 - e
    if mult == 1 << 16:
        mult, shift = mult >> 1, shift - 1
    if not 0 <= shift <= 63:
        raise ValueError(f"score multiplier {real!r} needs shift {shift} outside 0..63")
    return mult, shift


@dataclass(frozen=True)
class _Linear:
    """Integer operands of one linear layer: ``(K, N)`` weight elements (int8, int4 values or
    MXINT8 elements with ``w_exp``), per-channel requantization (for an MX product with MXINT8
    activations :func:`projection_operands` derives it per input: its ``x_base`` depends on the
    activations' scales)."""
    w: np.ndarray
    bias: np.ndarray
    multiplier: np.ndarray
    shift: np.ndarray
    out_scale: np.ndarray   #: (N,) real value of one output step
    w_format: WeightFormat = WeightFormat.INT8
    w_exp: np.ndarray | None = None       #: MXINT8 block scales, ``(ceil(K / 32), N)``
    x_base: int = 0                       #: MX alignment base (int8 activations)
    float_bias: np.ndarray | None = None  #: the real bias (MX with MXINT8 activations)


@dataclass(frozen=True)
class BlockQuant:
    """Integer operands of the whole block (see the module docstring).

    Attributes
    ----------
    x_scale : float or numpy.ndarray
        Input scale: per tensor (the embeddings of layer 0), or per channel ``(384,)`` (a
        LayerNorm's int8 output, folded into the projection weights).
    proj : dict of str to _Linear
        ``query``, ``key``, ``value``, ``output``.
    score_mult, score_shift : numpy.ndarray
        int64, ``(heads,)``: SOFTMAX conversion per head.
    pv_mult, pv_shift : numpy.ndarray
        int64, ``(384,)``: P.V requantization per context channel (row-scaled REQUANT).
    ctx_scale : numpy.ndarray
        float64, ``(384,)``.
    heads, head_dim : int
    """
    x_scale: float | np.ndarray
    proj: dict
    score_mult: np.ndarray
    score_shift: np.ndarray
    pv_mult: np.ndarray
    pv_shift: np.ndarray
    ctx_scale: np.ndarray
    heads: int
    head_dim: int
    w_format: WeightFormat = WeightFormat.INT8
    act_format: ActFormat = ActFormat.INT8
    tile_k: int = 8         #: the array's rows (MX alignment is per K tile)


def _per_group_scale(y: np.ndarray, group: int) -> np.ndarray:
    m = np.abs(y).max(axis=0).reshape(-1, group).max(axis=1)
    return np.repeat(np.where(m > 0, m / INT8_MAX, 1.0), group)


def _linear(x_scale: float | np.ndarray, w: np.ndarray, b: np.ndarray, out_scale: np.ndarray,
            w_format: WeightFormat = WeightFormat.INT8, act_mx: bool = False,
            tile_k: int = 8) -> _Linear:
    """Quantize ``y = (x_int * x_scale) @ w.T + b`` with per-channel weights and output scales;
    ``x_scale`` may be per input channel (folded into the weight columns). ``w_format``:
    int8 (``max|w| / 127`` per output channel), int4 (``max|w| / 7``), or MXINT8 (OCP MX
    blocks of 32 along K; with ``act_mx`` the activations are MXINT8 too and no ``x_scale``
    is folded)."""
    if w_format == WeightFormat.MXINT8:
        return _linear_mx(x_scale, w, b, out_scale, act_mx, tile_k)
    wt = np.asarray(w, np.float64) * np.asarray(x_scale, np.float64)  # per-input-channel fold
    if w_format == WeightFormat.INT4:
        w_scale = int4_channel_scales(wt, axis=0)
        w_q = quantize_int4(wt, w_scale, axis=0).T.copy()
    else:
        w_scale = np.abs(wt).max(axis=1)
        w_scale = np.where(w_scale > 0, w_scale / INT8_MAX, 1.0)
        w_q = quantize(wt, w_scale, axis=0).T.copy()
    b_q = np.clip(np.floor(np.asarray(b, np.float64) / w_scale + 0.5), -(1 << 31),
                  (1 << 31) - 1).astype(np.int32)
    mult, shift = quantize_multipliers(w_scale / out_scale)
    return _Linear(w=w_q, bias=b_q, multiplier=mult, shift=shift, out_scale=out_scale,
                   w_format=w_format)


def _mx_requant(b: np.ndarray, out_scale: np.ndarray, unit: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bias in accumulator units of ``unit`` (real value of one accumulator step) and the
    per-channel multiplier ``unit / out_scale``."""
    b_q = np.clip(np.floor(np.asarray(b, np.float64) / unit + 0.5), -(1 << 31),
                  (1 << 31) - 1).astype(np.int32)
    mult, shift = quantize_multipliers(unit / np.asarray(out_scale, np.float64))
    return b_q, mult, shift


def _linear_mx(x_scale, w, b, out_scale, act_mx: bool, tile_k: int) -> _Linear:
    """MXINT8 weights (blocks of 32 along K, :func:`sw.quant_formats.quantize_mxint8`). With int8
    activations their scale is folded into the weights and the accumulator step is ``2**(x_base
    - 127 - 127 - 6)`` (the activation at exponent 127, ``2**0``); with MXINT8 activations the
    requantization depends on the input (:func:`projection_operands`)."""
    wt = np.asarray(w, np.float64)
    if not act_mx:
        wt = wt * np.asarray(x_scale, np.float64)
    w_q, w_exp = quantize_mxint8(wt.T, axis=0)                  # (K, N), (K / 32, N)
    if act_mx:
        zero = np.zeros(len(out_scale), np.int64)
        return _Linear(w=w_q, bias=zero, multiplier=zero, shift=zero, out_scale=out_scale,
                       w_format=WeightFormat.MXINT8, w_exp=w_exp,
                       float_bias=np.asarray(b, np.float64))
    x_base = mx_alignment_base(None, w_exp, k=w_q.shape[0], tile_k=tile_k, a_max=128)
    unit = 2.0 ** (x_base - 2 * E8M0_BIAS - MXINT8_FRAC_BITS)
    b_q, mult, shift = _mx_requant(b, out_scale, unit)
    return _Linear(w=w_q, bias=b_q, multiplier=mult, shift=shift, out_scale=out_scale,
                   w_format=WeightFormat.MXINT8, w_exp=w_exp, x_base=x_base)


def projection_operands(bq: BlockQuant, name: str, x: npt.ArrayLike):
    """The linear kernel's operands of projection ``name`` for input ``x``: float embeddings
    for ``query``/``key``/``value`` (quantized here: int8 with ``bq.x_scale``, or MXINT8 with
    its own block scales), the int8 context for ``output``.

    Returns
    -------
    (a, w, bias, multiplier, shift, formats)
        As :func:`sw.kernels.linear.linear_with_stats` takes them.
    """
    p = bq.proj[name]
    act_mx = bq.act_format == ActFormat.MXINT8 and name != "output"
    if name == "output":
        a, a_exp = np.asarray(x, np.int8), None
    elif act_mx:
        a, a_exp = quantize_mxint8(x, axis=1)
    else:
        a, a_exp = quantize(x, bq.x_scale), None
    if not act_mx:
        fmt = Formats(weights=p.w_format, w_exp=p.w_exp, x_base=p.x_base)
        return a, p.w, p.bias, p.multiplier, p.shift, fmt
    w_mx = p.w_format == WeightFormat.MXINT8
    w_max = {WeightFormat.INT8: 128, WeightFormat.INT4: 8, WeightFormat.MXINT8: 127}[p.w_format]
    x_base = mx_alignment_base(a_exp, p.w_exp if w_mx else None, k=a.shape[1],
                               tile_k=bq.tile_k, w_max=w_max)
    if w_mx:
        unit = 2.0 ** (x_base - 2 * E8M0_BIAS - 2 * MXINT8_FRAC_BITS)
        bias, mult, shift = _mx_requant(p.float_bias, p.out_scale, unit)
    else:
        raise ValueError("MXINT8 activations are used with MXINT8 weights in this block")
    fmt = Formats(weights=p.w_format, activations=ActFormat.MXINT8, w_exp=p.w_exp, a_exp=a_exp,
                  x_base=x_base)
    return a, p.w, bias, mult, shift, fmt


def calibrate_block(model: MiniLM,
                    calibration_text: tuple[str, ...] = DEFAULT_CALIBRATION_TEXT,
                    frac_bits: int = SOFTMAX_EXP_FRAC_BITS, *, weights: str = "int8",
                    activations: str = "int8", tile_k: int = 8, layer: int = 0,
                    inputs: list[np.ndarray] | None = None,
                    x_scale: float | np.ndarray | None = None) -> BlockQuant:
    """Calibrate every scale of the block of ``layer`` on ``calibration_text`` (sentences run
    separately, float32 activations, max-abs ranges).

    ``weights`` (:data:`WEIGHT_FORMATS`) is the format of all four projections' weights;
    ``activations`` (:data:`ACT_FORMATS`) that of the Q/K/V projections' input (MXINT8 needs
    MXINT8 weights; the output projection's input stays int8); ``tile_k`` is the array's
    ``rows`` (MX alignment). ``inputs`` (float ``(T, 384)`` per calibration sentence) and
    ``x_scale`` (per tensor or per channel) give a deeper layer's inputs and their int8 scale;
    by default the inputs are the embeddings of ``calibration_text`` with a per-tensor scale
    (layer 0).

    Raises
    ------
    ValueError
        For an unknown format or MXINT8 activations without MXINT8 weights.
    """
    if weights not in WEIGHT_FORMATS or activations not in ACT_FORMATS:
        raise ValueError(f"formats must be weights in {list(WEIGHT_FORMATS)} and activations "
                         f"in {list(ACT_FORMATS)}, got {weights!r}, {activations!r}")
    wf, af = WEIGHT_FORMATS[weights], ACT_FORMATS[activations]
    if af == ActFormat.MXINT8 and wf != WeightFormat.MXINT8:
        raise ValueError("MXINT8 activations are used with MXINT8 weights (--weights mxint8)")
    n_heads, dh = heads(model)
    xs = inputs if inputs is not None else [model.embed(s) for s in calibration_text]
    refs = [float_block(model, x, layer=layer) for x in xs]
    cat = {k: np.concatenate([r[k] for r in refs]).astype(np.float64) for k in refs[0]}
    if x_scale is None:
        x_scale = float(np.abs(np.concatenate(xs)).max()) / INT8_MAX
    out_scales = {"query": _per_group_scale(cat["query"], dh),
                  "key": _per_group_scale(cat["key"], dh),
                  "value": _per_group_scale(cat["value"], 1)}
    proj = {name: _linear(x_scale, *model.projection(name, layer), out_scales[name], wf,
                          af == ActFormat.MXINT8, tile_k)
            for name in _NAMES}
    # The context is a convex combination of V rows, so |ctx[:, j]| <= max |V[:, j]|: V's own
    # scale never saturates. (Measured at L=128: calibrated per-channel context ranges from
    # short sentences saturate 1052 values and give 16.4 dB; V's scale gives 26.0 dB.)
    ctx_scale = out_scales["value"]
    t = model.tensors
    o = attn_output_name(layer)
    proj["output"] = _linear(ctx_scale, t[o + ".weight"], t[o + ".bias"],
                             OUTPUT_HEADROOM * _per_group_scale(cat["output"], 1), wf, False,
                             tile_k)
    sm = [score_multiplier(out_scales["query"][h * dh], out_scales["key"][h * dh], dh,
                           frac_bits) for h in range(n_heads)]
    pv_mult, pv_shift = quantize_multipliers(out_scales["value"] / ctx_scale
                                             / (1 << ROW_SCALE_SHIFT))
    return BlockQuant(x_scale=x_scale, proj=proj,
                      score_mult=np.array([m for m, _ in sm], np.int64),
                      score_shift=np.array([s for _, s in sm], np.int64),
                      pv_mult=pv_mult, pv_shift=pv_shift, ctx_scale=ctx_scale,
                      heads=n_heads, head_dim=dh, w_format=wf, act_format=af, tile_k=tile_k)


def golden_block(bq: BlockQuant, x: npt.ArrayLike, kv_len: int | None = None,
                 causal: bool = False, exp=exp2_int) -> dict[str, np.ndarray]:
    """The integer block, bit-exact with the NPU: int8 ``query``/``key``/``value``/``context``/
    ``output`` (each ``(L, 384)``) for float embeddings ``x``."""
    out = {name: _golden_linear(bq, name, x) for name in bq.proj if name != "output"}
    return _attention_and_output(bq, out, kv_len, causal, exp)


def golden_block_int(bq: BlockQuant, x_q: npt.ArrayLike, kv_len: int | None = None,
                     causal: bool = False, exp=exp2_int) -> dict[str, np.ndarray]:
    """:func:`golden_block` on int8 inputs ``x_q`` ``(L, 384)`` already at ``bq.x_scale``
    (int8 activations; any weight format).

    Raises
    ------
    ValueError
        If the block was calibrated for MXINT8 activations.
    """
    if bq.act_format == ActFormat.MXINT8:
        raise ValueError("golden_block_int takes int8 inputs; this block has MXINT8 activations")
    x_q = np.asarray(x_q, np.int8)
    out = {name: _golden_linear(bq, name, x_q, quantized=True)
           for name in bq.proj if name != "output"}
    return _attention_and_output(bq, out, kv_len, causal, exp)


def _attention_and_output(bq: BlockQuant, out: dict, kv_len: int | None, causal: bool,
                          exp) -> dict[str, np.ndarray]:
    """Heads and output projection of :func:`golden_block`, from its int8 Q, K, V."""
    dh = bq.head_dim
    ctx = np.zeros_like(out["query"])
    for h in range(bq.heads):
        sl = slice(h * dh, (h + 1) * dh)
        ctx[:, sl] = attention_head_int(
            out["query"][:, sl], out["key"][:, sl], out["value"][:, sl],
            score_mult=int(bq.score_mult[h]), score_shift=int(bq.score_shift[h]),
            out_mult=bq.pv_mult[sl], out_shift=bq.pv_shift[sl], kv_len=kv_len, causal=causal,
            exp=exp)
    out["context"] = ctx
    out["output"] = _golden_linear(bq, "output", ctx)
    return out


def _golden_linear(bq: BlockQuant, name: str, x, quantized: bool = False) -> np.ndarray:
    """Projection ``name`` of float ``x`` (or, ``quantized``, of int8 ``x`` at
    ``bq.x_scale``, as the output projection takes the context)."""
    a, w, bias, mult, shift, f = projection_operands(bq, "output" if quantized else name, x)
    if quantized:
        p = bq.proj[name]
        w, bias, mult, shift = p.w, p.bias, p.multiplier, p.shift
        f = Formats(weights=p.w_format, w_exp=p.w_exp, x_base=p.x_base)
    return linear_formats(a, w, bias, mult, shift, tile_k=bq.tile_k, weights=f.weights,
                          activations=f.activations, w_exp=f.w_exp, a_exp=f.a_exp,
                          x_base=f.x_base)


def dequantize_output(bq: BlockQuant, out_int8: npt.ArrayLike) -> np.ndarray:
    """Real values (float64) of the block's int8 output."""
    return np.asarray(out_int8, np.float64) * bq.proj["output"].out_scale
