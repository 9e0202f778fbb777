"""The whole all-MiniLM-L6-v2 forward pass as NPU command streams, up to the sentence embedding.

:func:`run_encoder_job` runs on any :class:`sw.backend.Backend` (the RTL under cocotb, the
performance model, the functional model) and returns JSON-serialisable figures;
:func:`format_encoder_report` prints them. The integer pipeline is
:func:`sw.models.encoder.golden_encoder`, bit for bit.

What runs where:

* host: tokenization, the embedding-table lookup and the quantization of its two parts (word,
  position + token type; :mod:`sw.models.encoder`), and at the end the mean pooling (exact
  integer column sums of the last layer's int8 output over the valid tokens, divided and
  dequantized) and the L2 normalisation;
* device, as launches on one stream (each ordered after the previous one by the stream's
  barrier; the host never drains the device between them, never resets it):
  the embedding LayerNorm (LAYERNORM adds the two parts); per layer the Q/K/V projections
  as one linear kernel (``N = 1152``: per-channel requantization, so the concatenation is
  bit-exact with three projections), the attention heads
  (:func:`sw.kernels.attention.attention_launch` on the projection's output buffer), the
  output projection, residual + LayerNorm (one LAYERNORM command on the two int8 inputs:
  the residual sum is never rounded to int8, as the golden model defines it), the FFN's
  first projection with a GELU epilogue, its second projection, residual + LayerNorm.
  Every tensor stays in device DRAM in the linear kernel's activation layout; the host
  reads the outputs back only at the end.

Weights: layer ``l + 1``'s weights (packed for their kernels) are written to device DRAM
after layer ``l``'s launches are queued; the host then waits (an :class:`~sw.runtime.Event`
recorded after layer ``l - 1``) for the layer before, frees that layer's weight buffers and
goes on, so the device computes while the host stages the next layer (DRAM holds two
layers' weights at most). Inside each linear kernel the double-buffered plan streams weight
tiles into the scratchpad while the array computes.

Per-operation cycles come from ``FENCE`` timestamps (:class:`hw.isa.FenceBody`) written
between the launches (no semaphore, no host wait): ``cycles`` of an operation is the
difference of the timestamps around it, i.e. the time from the previous operation's last
retirement to its own (barrier and fence included). 0 on the untimed functional model.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from hw.config import NPUConfig
from hw.isa import Opcode
from sw.backend import Backend
from sw.kernels.attention import attention_launch, pack_attention_params, plan_attention
from sw.kernels.eltwise import eltwise_fit, eltwise_launch, pack_layernorm_params
from sw.kernels.linear import linear_launch, pack_activations, pack_weights, plan_linear
from sw.models.attention_block import heads, tokens_for_length
from sw.models.encoder import (
    N_LAYERS,
    EncoderQuant,
    calibrate_encoder,
    embedding_parts,
    float_encoder,
    golden_encoder,
    sentence_embedding,
)
from sw.models.minilm import DEFAULT_EVAL_TEXT, load_minilm
from sw.quant import cosine, quantize, sqnr_db
from sw.runtime import Buffer, CommandList, Device, Stream, check_resources

__all__ = ["OPS", "encoder_quant", "run_encoder_job", "format_encoder_report",
           "encoder_embeddings", "check_config", "QUEUES", "SEMAPHORES"]

#: Operations of one layer, in order (the embedding LayerNorm ``ln0`` comes first).
OPS = ("qkv", "attention", "out_proj", "ln1", "ffn1_gelu", "ffn2", "ln2")
HIDDEN = 384
#: Hardware queues a forward pass uses: the device's default stream and the encoder's own.
QUEUES = 2
#: The semaphores every linear and LayerNorm launch shares (load, matmul, requant, store).
_KERNEL_SEMS = "LMRS"
#: Events of a forward pass: the last layer's and the one before (whose weights are freed).
_EVENTS = 2
#: Pool semaphores a forward pass holds at once: the kernels', the attention's, the events'.
SEMAPHORES = len(_KERNEL_SEMS) + 1 + _EVENTS


def check_config(config: NPUConfig, seq_len: int | None = None,
                 n_layers: int = N_LAYERS) -> None:
    """Refuse, before any work, a configuration the forward pass (of ``seq_len`` tokens and
    ``n_layers`` layers, if given) cannot run on: too few hardware queues or pool
    semaphores, a non-square array, ``L`` or the hidden size not a multiple of ``cols``,
    ``cols`` not dividing the head size (32, with layers), or tensors that do not fit the
    local memories (the kernels' own checks: :func:`sw.kernels.attention.plan_attention`,
    :func:`sw.kernels.eltwise.eltwise_fit`).

    Raises
    ------
    ValueError
        Saying what the encoder needs and what ``config`` gives.
    """
    check_resources(config, "the encoder", queues=QUEUES, semaphores=SEMAPHORES)
    if seq_len is None:
        return
    c = config
    if c.rows != c.cols:
        raise ValueError(f"the encoder needs a square array (the transposed K load), got "
                         f"{c.rows}x{c.cols}")
    if HIDDEN % c.cols:
        raise ValueError(f"the encoder needs cols to divide the hidden size {HIDDEN}, "
                         f"{c.spec} has cols={c.cols}")
    head_dim = heads(load_minilm())[1] if n_layers else None
    if n_layers and head_dim % c.cols:     # before L: no L helps then
        # the attention takes each head's Q, K, V blocks straight from the projections'
        # output, head h from block h * head_dim / cols on
        raise ValueError(f"the encoder needs cols to divide the head size {head_dim}, "
                         f"cols={c.cols} does not (the attention block alone runs on any "
                         "square array: npu run --block, sweep workload minilm-block:L)")
    if seq_len % c.cols:
        raise ValueError(f"the encoder needs a sequence length that is a multiple of "
                         f"cols={c.cols}, L={seq_len} is not")
    eltwise_fit(c, Opcode.LAYERNORM, seq_len, HIDDEN // c.cols)
    if n_layers:
        plan_attention(c, seq_len, head_dim)


@functools.lru_cache(maxsize=2)
def encoder_quant() -> EncoderQuant:
    """The six-layer encoder calibrated on :data:`sw.models.minilm.DEFAULT_CALIBRATION_TEXT`
    (cached; a prefix of ``n`` layers uses its first ``n``)."""
    return calibrate_encoder(load_minilm())


@functools.lru_cache(maxsize=64)
def _plan(config: NPUConfig, m: int, k: int, n: int, gelu: bool, dram):
    """The linear kernel's plan (cached: every layer and every sentence of one length
    reuses it)."""
    return plan_linear(config, m, k, n, double_buffer=True, dram=dram, gelu=gelu)


def _prefix(eq: EncoderQuant, n_layers: int) -> EncoderQuant:
    if not 0 <= n_layers <= len(eq.layers):
        raise ValueError(f"layers must be in 0..{len(eq.layers)}, got {n_layers}")
    return dataclasses.replace(eq, layers=eq.layers[:n_layers])


def _unpack(dev: Device, buf: Buffer, m: int, n: int) -> np.ndarray:
    """int8 ``(M, N)`` from a buffer in the activation layout ``(NB, M, spad_row_bytes)``."""
    c = dev.config
    nb = -(-n // c.cols)
    o = dev.download(buf, np.int8, (nb, m, c.spad_row_bytes))
    return np.ascontiguousarray(o[:, :, :c.cols].transpose(1, 0, 2).reshape(m, nb * c.cols)[:, :n])


class _Encoder:
    """One forward pass on a device: the launches, the timestamps, the buffers."""

    def __init__(self, dev: Device, eq: EncoderQuant, seq: int, kv_len: int,
                 stream: Stream) -> None:
        self.dev, self.eq, self.seq, self.kv = dev, eq, seq, kv_len
        c = self.c = dev.config
        check_config(c, seq, len(eq.layers))
        self.stream = stream
        self.sems = {x: dev.alloc_semaphore() for x in _KERNEL_SEMS}
        self.attn_sem = dev.alloc_semaphore()
        self.events = [dev.event() for _ in range(_EVENTS)]
        self.marks: list[tuple[int, str, str]] = []     # (word index, layer, op)
        self.stamp_buf = dev.alloc(4 * (2 + 8 * (len(eq.layers) + 1)))
        self.n_commands = 0
        self.weights: list[dict[str, Buffer]] = []
        self.keep: list[Buffer] = []
        self.outputs: dict = {}
        self._stamp("start", "")

    # -- bookkeeping --------------------------------------------------------------------------

    def _stamp(self, layer: str, op: str) -> None:
        """A FENCE writing the cycle counter once every earlier command retired."""
        cmds = CommandList()
        cmds.fence(addr=self.stamp_buf.addr + 4 * len(self.marks), timestamp=True)
        self.stream.launch(cmds, ordered=False)
        self.marks.append((len(self.marks), layer, op))

    def _alloc(self, n_blocks: int) -> Buffer:
        buf = self.stream.alloc(n_blocks * self.seq * self.c.spad_row_bytes)
        self.keep.append(buf)
        return buf

    def plan(self, k: int, n: int, gelu: bool = False):
        return _plan(self.c, self.seq, k, n, gelu, self.dev.dram_timing)

    def upload_weights(self, lay: int) -> dict[str, Buffer]:
        """Layer ``lay``'s weights and parameters into device DRAM (host writes)."""
        lq = self.eq.layers[lay]
        p = lq.attn.proj
        w_qkv = np.concatenate([p[x].w for x in ("query", "key", "value")], axis=1)
        up = self.stream.upload
        bufs = {"qkv": up(pack_weights(self.c, self.plan(HIDDEN, 3 * HIDDEN), w_qkv)),
                "out_proj": up(pack_weights(self.c, self.plan(HIDDEN, HIDDEN), p["output"].w)),
                "ffn1_gelu": up(pack_weights(self.c, self.plan(HIDDEN, 4 * HIDDEN, True),
                                             lq.ffn.w1)),
                "ffn2": up(pack_weights(self.c, self.plan(4 * HIDDEN, HIDDEN), lq.ffn.w2)),
                "attn_params": up(pack_attention_params(self.c, lq.attn.heads,
                                                         lq.attn.head_dim, lq.attn.pv_mult,
                                                         lq.attn.pv_shift))}
        for name, ln in (("ln1", lq.ln1), ("ln2", lq.ln2)):
            bufs[name] = up(pack_layernorm_params(self.c, ln.ma, ln.mb, ln.gamma, ln.beta))
        return bufs

    # -- operations ---------------------------------------------------------------------------

    def linear(self, x: Buffer, w_buf: Buffer, w: np.ndarray, bias, mult, shift,
               gelu=None) -> Buffer:
        k, n = w.shape
        job = linear_launch(self.stream, x, w, bias, mult, shift, m=self.seq,
                            plan=self.plan(k, n, gelu is not None), gelu=gelu, sems=self.sems,
                            w_buf=w_buf)
        self.keep.extend(b for b in job._buffers if b is not w_buf)
        self.n_commands += job.commands
        return job.out_buffer

    def layernorm(self, a: Buffer, b: Buffer, p_buf: Buffer, ln) -> Buffer:
        out = self._alloc(HIDDEN // self.c.cols)
        self.n_commands += eltwise_launch(self.stream, Opcode.LAYERNORM, a, b, p_buf, out,
                                          m=self.seq, n=HIDDEN, shift=ln.shift,
                                          g_shift=ln.g_shift, sems=self.sems)
        return out

    def run(self, word: np.ndarray, pos: np.ndarray) -> None:
        """Launch everything; the host waits only for the event of the layer before last
        (to free its weights) and at the end."""
        c, eq = self.c, self.eq
        up = self.stream.upload
        a = up(pack_activations(c, word))
        b = up(pack_activations(c, pos))
        p0 = up(pack_layernorm_params(c, eq.ln0.ma, eq.ln0.mb, eq.ln0.gamma, eq.ln0.beta))
        self.keep += [a, b, p0]
        nxt = self.upload_weights(0) if eq.layers else None
        x = self.layernorm(a, b, p0, eq.ln0)
        self._stamp("embed", "ln0")
        self.outputs["x0"] = x
        nb = HIDDEN // c.cols
        span = nb * self.seq * c.spad_row_bytes
        for lay, lq in enumerate(eq.layers):
            wb = nxt
            self.weights.append(wb)
            p = lq.attn.proj
            qkv_p = [p[n] for n in ("query", "key", "value")]
            w_qkv = np.concatenate([q.w for q in qkv_p], axis=1)
            qkv = self.linear(x, wb["qkv"], w_qkv,
                              *(np.concatenate([getattr(q, f) for q in qkv_p])
                                for f in ("bias", "multiplier", "shift")))
            self._stamp(str(lay), "qkv")
            q, k, v = (Buffer(self.dev, qkv.addr + i * span, span) for i in range(3))
            ctx = self._alloc(nb)
            self.n_commands += attention_launch(
                self.stream, q, k, v, wb["attn_params"], ctx, seq=self.seq,
                heads=lq.attn.heads, head_dim=lq.attn.head_dim, score_mult=lq.attn.score_mult,
                score_shift=lq.attn.score_shift, sem=self.attn_sem, kv_len=self.kv)
            self._stamp(str(lay), "attention")
            o = p["output"]
            attn = self.linear(ctx, wb["out_proj"], o.w, o.bias, o.multiplier, o.shift)
            self._stamp(str(lay), "out_proj")
            y1 = self.layernorm(x, attn, wb["ln1"], lq.ln1)
            self._stamp(str(lay), "ln1")
            f = lq.ffn
            g = self.linear(y1, wb["ffn1_gelu"], f.w1, f.b1, f.m1, f.s1, gelu=(f.m2, f.s2))
            self._stamp(str(lay), "ffn1_gelu")
            f2 = self.linear(g, wb["ffn2"], f.w2, f.b2, f.mult2, f.shift2)
            self._stamp(str(lay), "ffn2")
            y2 = self.layernorm(y1, f2, wb["ln2"], lq.ln2)
            self._stamp(str(lay), "ln2")
            self.outputs[lay] = {"attn": attn, "y1": y1, "g": g, "f2": f2, "y2": y2}
            x = y2
            ev = self.events[lay % 2]
            ev.record(self.stream)
            # stage the next layer's weights while this one computes, then let the layer
            # before finish and free its weights (DRAM holds two layers' at most)
            nxt = self.upload_weights(lay + 1) if lay + 1 < len(eq.layers) else None
            if lay >= 1:
                self.events[(lay - 1) % 2].synchronize()
                for buf in self.weights[lay - 1].values():
                    buf.free()
        self.outputs["x"] = x
        self.stream.synchronize()
        if eq.layers:
            for buf in self.weights[-1].values():
                if not buf.freed:
                    buf.free()

    def stamps(self) -> list[int]:
        raw = np.frombuffer(self.stamp_buf.read(4 * len(self.marks)), "<u4").astype(np.int64)
        return raw.tolist()

    def close(self) -> None:
        for buf in self.keep:
            if not buf.freed:
                buf.free()
        self.stamp_buf.free()
        for s in [*self.sems.values(), self.attn_sem]:
            s.free()
        for e in self.events:
            e.free()


def _op_macs(op: str, seq: int) -> int:
    h = HIDDEN
    return {"ln0": 0, "qkv": seq * h * 3 * h, "attention": 2 * seq * seq * h,
            "out_proj": seq * h * h, "ln1": 0, "ffn1_gelu": seq * h * 4 * h,
            "ffn2": seq * 4 * h * h, "ln2": 0}[op]


def encoder_embeddings(backend: Backend, texts: list[str], *, config: dict,
                       n_layers: int = N_LAYERS, pad_to: int | None = None) -> list[dict]:
    """Sentence embeddings of ``texts`` on ``backend`` (one forward pass each, padded with
    ``[PAD]`` tokens, masked as keys and left out of the pooling, to ``pad_to`` or the next
    multiple of ``cols``), with float32 and golden references.

    Returns
    -------
    list of dict
        Per text: ``embedding`` (NPU, float64 ``(384,)``), ``float`` (float32 weights,
        float64 arithmetic), ``bit_exact`` (NPU == golden), ``tokens``, ``kv_len``.
    """
    cfg = NPUConfig(**config)
    check_config(cfg)
    model = load_minilm()
    eq = _prefix(encoder_quant(), n_layers)
    dev = Device(backend, expected_config=cfg)
    stream = dev.create_stream()
    out = []
    for text in texts:
        ids = model.token_ids(text)
        seq = pad_to or -(-len(ids) // cfg.cols) * cfg.cols
        ids, kv = tokens_for_length(model, text, seq, "pad")
        r = _forward(dev, eq, model, ids, kv, stream)
        out.append({"embedding": r["embedding"], "float": r["float_embedding"],
                    "bit_exact": r["bit_exact"], "tokens": int(len(ids)), "kv_len": int(kv)})
    return out


def _forward(dev: Device, eq: EncoderQuant, model, ids: np.ndarray, kv: int,
             stream: Stream) -> dict:
    """One forward pass on ``dev``: outputs, golden comparison, embedding, timestamps."""
    seq = len(ids)
    word, pos = embedding_parts(model, ids)
    wq, pq = quantize(word, eq.word_scale), quantize(pos, eq.pos_scale)
    gold = golden_encoder(eq, model, ids, kv)
    enc = _Encoder(dev, eq, seq, kv, stream)
    try:
        enc.run(wq, pq)
        got = {"x0": _unpack(dev, enc.outputs["x0"], seq, HIDDEN)}
        exact = {"ln0": bool(np.array_equal(got["x0"], gold["x0"]))}
        for lay in range(len(eq.layers)):
            g = gold["layers"][lay]
            for name, buf in enc.outputs[lay].items():
                n = 4 * HIDDEN if name == "g" else HIDDEN
                exact[f"{lay}.{name}"] = bool(np.array_equal(_unpack(dev, buf, seq, n), g[name]))
        last = _unpack(dev, enc.outputs["x"], seq, HIDDEN)
        stamps, marks, n_cmds = enc.stamps(), enc.marks, enc.n_commands
    finally:
        enc.close()
    sums = last[:kv].astype(np.int64).sum(axis=0)            # host mean pooling (exact sums)
    e = sums * eq.out_scale / kv
    emb = e / np.linalg.norm(e)                               # host L2 normalisation
    n = len(eq.layers)
    ref = (float_encoder(model, ids, kv, n_layers=n)[-1]["y2"] if n
           else _float_ln0(model, ids))
    return {"embedding": emb, "float_embedding": sentence_embedding(ref, kv),
            "golden_embedding": gold["embedding"], "exact": exact,
            "bit_exact": all(exact.values()) and bool(np.array_equal(sums, gold["sums"])),
            "stamps": stamps, "marks": marks, "commands": n_cmds}


def _float_ln0(model, ids: np.ndarray) -> np.ndarray:
    from sw.models.attention_block import embed_ids
    return embed_ids(model, ids).astype(np.float64)


def run_encoder_job(backend: Backend, *, config: dict, text: str | None = None,
                    seq_len: int = 32, fill: str = "repeat", n_layers: int = N_LAYERS,
                    profile: bool = False) -> dict:
    """The encoder's forward pass (the first ``n_layers`` layers) on ``backend``.

    Parameters
    ----------
    config : dict
        The :class:`NPUConfig` fields the device is expected to have.
    text : str, optional
        Evaluation text (default :data:`sw.models.minilm.DEFAULT_EVAL_TEXT`); the scales are
        calibrated on :data:`sw.models.minilm.DEFAULT_CALIBRATION_TEXT`, never on it.
    seq_len : int
        Tokens ``L`` (a multiple of ``cols``; :func:`tokens_for_length` with ``fill``).
    n_layers : int
        Layers run (0..6; 0 runs the embedding LayerNorm only).
    profile : bool
        Also return ``"profile"`` (:class:`sw.runtime.profile.Profile`), with a region per
        layer and per operation built from the FENCE timestamps.

    Returns
    -------
    dict
        ``{"backend", "config", "config_name", "text", "tokens", "kv_len", "layers",
        "ops": [{"layer", "op", "cycles", "macs", "utilization"}], "per_layer": [{"layer",
        "cycles", "macs", "utilization"}], "total": {...}, "cosine" and "sqnr_db" (sentence
        embedding vs float32), "golden_cosine" (golden vs float32), "weight_bytes" (the
        layers' int8 weights), "bit_exact", "exact" (per tensor), "commands", "host"}``.
        Utilization is ``macs / (cycles * rows * cols)``, None without cycles.

    Raises
    ------
    ValueError
        ``seq_len`` not a multiple of ``cols``, a non-square array, ``n_layers`` out of range,
        or see :func:`check_config`.
    """
    cfg = NPUConfig(**config)
    check_config(cfg, seq_len, n_layers)
    text = text or DEFAULT_EVAL_TEXT
    model = load_minilm()
    t0 = time.perf_counter()
    eq = _prefix(encoder_quant(), n_layers)
    ids, kv = tokens_for_length(model, text, seq_len, fill)
    dev = Device(backend, expected_config=cfg, profile=profile)
    t1 = time.perf_counter()
    r = _forward(dev, eq, model, ids, kv, dev.create_stream())
    t2 = time.perf_counter()
    pes = cfg.n_pes
    stamps, marks = r["stamps"], r["marks"]

    def util(macs: int, cycles: int):
        return round(macs / (cycles * pes), 4) if cycles and macs else None
    ops = []
    for (i, layer, op), prev in zip(marks[1:], stamps, strict=False):
        cycles = (stamps[i] - prev) % (1 << 32)
        macs = _op_macs(op, len(ids))
        ops.append({"layer": layer, "op": op, "cycles": cycles, "macs": macs,
                    "utilization": util(macs, cycles), "start": prev, "end": stamps[i]})
    per_layer = []
    for layer in dict.fromkeys(o["layer"] for o in ops):
        sel = [o for o in ops if o["layer"] == layer]
        cy, ma = sum(o["cycles"] for o in sel), sum(o["macs"] for o in sel)
        per_layer.append({"layer": layer, "cycles": cy, "macs": ma, "utilization": util(ma, cy)})
    cy, ma = sum(o["cycles"] for o in ops), sum(o["macs"] for o in ops)
    result = {
        "backend": backend.name, "config": cfg.to_dict(), "config_name": cfg.spec,
        "text": text, "tokens": int(len(ids)), "kv_len": int(kv), "layers": len(eq.layers),
        "ops": ops, "per_layer": per_layer,
        "total": {"cycles": cy, "macs": ma, "utilization": util(ma, cy)},
        "cosine": round(float(cosine(r["float_embedding"], r["embedding"])), 6),
        "golden_cosine": round(float(cosine(r["float_embedding"], r["golden_embedding"])), 6),
        "sqnr_db": round(float(sqnr_db(r["float_embedding"], r["embedding"])), 3),
        "weight_bytes": sum(x.size for lq in eq.layers
                            for x in (*(lin.w for lin in lq.attn.proj.values()), lq.ffn.w1,
                                      lq.ffn.w2)),
        "bit_exact": r["bit_exact"], "exact": r["exact"], "commands": r["commands"],
        "host": {"calibration_seconds": round(t1 - t0, 2), "run_seconds": round(t2 - t1, 2),
                 "pooling": "host (exact integer column sums over the valid tokens)",
                 "l2_normalisation": "host"},
    }
    if dev.profiler is not None:
        from sw.runtime.profile import Region
        prof = dev.profiler
        base = prof._before["cycles"] - (prof._before["cycles"] % (1 << 32))
        for layer in dict.fromkeys(o["layer"] for o in ops):
            sel = [o for o in ops if o["layer"] == layer]
            name = "embedding" if layer == "embed" else f"layer {layer}"
            prof._regions.append(Region(name, 0, base + sel[0]["start"], base + sel[-1]["end"]))
            for o in sel:
                prof._regions.append(Region(o["op"], 1, base + o["start"], base + o["end"]))
        result["profile"] = prof.finish().to_dict()
    return result


def format_encoder_report(result: dict) -> str:
    """A fixed-width per-layer, per-operation table of :func:`run_encoder_job`'s figures."""
    def u(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"
    lines = [
        f"all-MiniLM-L6-v2 forward pass, {result['layers']} layer(s), L={result['tokens']} "
        f"(valid {result['kv_len']}): {result['text']!r}",
        f"NPU {result['config_name']} ({result['backend']} backend), {result['commands']:,} "
        "commands; pooling and L2 normalisation on the host",
        "",
        f"{'layer':<7}{'operation':<11}{'cycles':>12}{'MACs':>15}{'util':>8}",
    ]
    for o in result["ops"]:
        lines.append(f"{o['layer']:<7}{o['op']:<11}{o['cycles']:>12,}{o['macs']:>15,}"
                     f"{u(o['utilization']):>8}")
    lines += ["", f"{'layer':<18}{'cycles':>12}{'MACs':>15}{'util':>8}"]
    for p in result["per_layer"]:
        lines.append(f"{p['layer']:<18}{p['cycles']:>12,}{p['macs']:>15,}"
                     f"{u(p['utilization']):>8}")
    t = result["total"]
    lines.append(f"{'total':<18}{t['cycles']:>12,}{t['macs']:>15,}{u(t['utilization']):>8}")
    bad = [k for k, v in result["exact"].items() if not v]
    lines += ["", f"sentence embedding vs float32: cosine {result['cosine']:.5f} (golden "
              f"integer model {result['golden_cosine']:.5f}); bit-exact with the golden "
              f"model: {'yes' if result['bit_exact'] else 'NO (' + ', '.join(bad) + ')'}"]
    if "wall_seconds" in result:
        lines.append(f"wall time {result['wall_seconds']} s")
    return "\n".join(lines)
