"""The main job: layer 0's Q, K and V projections of all-MiniLM-L6-v2 on real text.

:func:`run_qkv_job` runs on any :class:`sw.backend.Backend` (the RTL under cocotb, or the
functional model) and returns JSON-serialisable figures; :func:`format_report` prints them.
"""

import time

import numpy as np

from hw.config import NPUConfig
from sw.backend import Backend
from sw.kernels.linear import check_mx, linear_with_stats
from sw.models.minilm import DEFAULT_EVAL_TEXT, PROJECTIONS, calibrate_qkv, evaluate, load_minilm
from sw.runtime import Device, check_resources

__all__ = ["run_qkv_job", "format_report", "run_attention_job", "format_attention_report",
           "check_config", "SEMAPHORES"]

#: Pool semaphores the projections and the attention block hold at once: a double-buffered
#: linear kernel's four (load, matmul, requant, store; the attention's one comes after).
SEMAPHORES = 4


def check_config(config: NPUConfig, seq_len: int | None = None, *, weights: str = "int8",
                 activations: str = "int8") -> None:
    """Refuse, before any work, a configuration the attention block of ``seq_len`` tokens
    (None: the Q/K/V projections alone) in these number formats cannot run on: too few pool
    semaphores, an attention that does not fit the local memories
    (:func:`sw.kernels.attention.plan_attention`, the kernel's own check), or MXINT8 on an
    array the linear kernel cannot run it on (:func:`sw.kernels.linear.check_mx`).

    Raises
    ------
    ValueError
        Saying what the job needs and what ``config`` gives.
    """
    from sw.kernels.attention import plan_attention
    from sw.models.attention_block import heads

    what = "each Q/K/V projection" if seq_len is None else "the attention block"
    check_resources(config, what, semaphores=SEMAPHORES)
    if "mxint8" in (weights, activations):
        check_mx(config)
    if seq_len is not None:
        plan_attention(config, seq_len, heads(load_minilm())[1])


def run_qkv_job(backend: Backend, *, config: dict, text: str | None = None,
                profile: bool = False) -> dict:
    """Quantize and run the three projections on ``backend``.

    Parameters
    ----------
    backend : Backend
        Where the commands execute.
    config : dict
        The :class:`NPUConfig` fields the device is expected to have (a mismatch with the
        device's CSRs raises :class:`sw.runtime.ConfigMismatchError`).
    text : str, optional
        Evaluation sentence (default :data:`sw.models.minilm.DEFAULT_EVAL_TEXT`). The quantization
        scales are calibrated on :data:`sw.models.minilm.DEFAULT_CALIBRATION_TEXT`, never on it.
    profile : bool
        Also return ``"profile"``: :meth:`sw.runtime.profile.Profile.to_dict` of the run
        (timed backends only).

    Returns
    -------
    dict
        ``{"backend", "config", "text", "tokens", "kernels": [{"name", "shape" (M, K, N),
        "cycles", "macs", "utilization", "sqnr_db", "cosine", "bit_exact", "commands",
        "host_seconds"}, ...]}``. Cycles are device clock cycles from the doorbell to the fence
        interrupt (0 on the untimed model, where utilization is ``None``).
    """
    cfg = NPUConfig(**config)
    check_config(cfg)
    text = text or DEFAULT_EVAL_TEXT
    model = load_minilm()
    quantized = calibrate_qkv(model)
    x = model.embed(text)
    device = Device(backend, expected_config=cfg, profile=profile)

    kernels = []
    for name in PROJECTIONS:
        q = quantized[name]
        x_int8 = q.quantize_input(x)
        start = time.perf_counter()
        with device.region(name):
            out, stats = linear_with_stats(device, x_int8, q.w, q.bias, q.multiplier, q.shift)
        host_seconds = time.perf_counter() - start
        weight, bias = model.projection(name)
        sqnr, cos = evaluate(q, x, weight, bias, out)
        kernels.append(_kernel_record(name, x_int8, q.w, stats, sqnr, cos,
                                      np.array_equal(out, q.golden(x_int8)))
                       | {"host_seconds": round(host_seconds, 3)})
    return {
        "backend": backend.name,
        "config": cfg.to_dict(),
        "config_name": cfg.spec,
        "text": text,
        "tokens": int(x.shape[0]),
        "kernels": kernels,
    } | _profile(device)


def _profile(device: Device) -> dict:
    """``{"profile": ...}`` of a profiling device (:class:`sw.runtime.profile.Profile`),
    else ``{}``."""
    return {} if device.profiler is None else {"profile": device.profiler.finish().to_dict()}


def _kernel_record(name: str, a, w, stats, sqnr: float, cos: float, exact: bool) -> dict:
    """One linear kernel's figures: shape (M, K, N), cycles, MACs, utilization, accuracy."""
    return {
        "name": name,
        "shape": [int(a.shape[0]), int(w.shape[0]), int(w.shape[1])],
        "cycles": stats.cycles,
        "macs": stats.macs,
        "utilization": stats.utilization,
        "sqnr_db": round(float(sqnr), 3),
        "cosine": round(float(cos), 6),
        "bit_exact": bool(exact),
        "commands": stats.n_commands,
    }


def _kernel_table(kernels: list[dict], title: str, width: int) -> list[str]:
    """Fixed-width lines for :func:`_kernel_record` entries, with a header."""
    lines = [f"{title:<{width}}{'M x K x N':>16}{'cycles':>10}{'util':>8}{'SQNR dB':>9}"
             f"{'cosine':>10}  bit-exact"]
    for k in kernels:
        util = "-" if k["utilization"] is None else f"{100 * k['utilization']:.1f}%"
        shape = "x".join(str(v) for v in k["shape"])
        lines.append(f"{k['name']:<{width}}{shape:>16}{k['cycles']:>10,}{util:>8}"
                     f"{k['sqnr_db']:>9.2f}{k['cosine']:>10.5f}  "
                     f"{'yes' if k['bit_exact'] else 'NO'}")
    return lines


def format_report(result: dict) -> str:
    """A fixed-width table of :func:`run_qkv_job`'s figures."""
    lines = [
        f"all-MiniLM-L6-v2 layer 0, {result['tokens']} tokens: {result['text']!r}",
        f"NPU {result['config_name']} ({result['backend']} backend)",
        "",
        *_kernel_table(result["kernels"], "kernel", 8),
    ]
    if "wall_seconds" in result:
        lines.append(f"\nwall time {result['wall_seconds']} s")
    return "\n".join(lines)


def run_attention_job(backend: Backend, *, config: dict, text: str | None = None,
                      seq_len: int | None = 32, causal: bool = False,
                      fill: str = "repeat", profile: bool = False, weights: str = "int8",
                      activations: str = "int8", virtual_memory: bool = False) -> dict:
    """The whole layer-0 self-attention block of all-MiniLM-L6-v2 on ``backend``.

    Q, K, V projections (linear kernels), per head ``Q K^T`` / integer softmax / ``P V``
    (:mod:`sw.kernels.attention`), the output projection (linear kernel). Scales are calibrated
    on :data:`sw.models.minilm.DEFAULT_CALIBRATION_TEXT` (see :mod:`sw.models.attention_block`).

    Parameters
    ----------
    seq_len : int, optional
        Tokens ``L`` (see :func:`sw.models.attention_block.tokens_for_length`); None: the
        text's own.
    causal : bool
        Causal mask.
    fill : str
        ``"repeat"`` the text or ``"pad"`` (masked ``[PAD]`` keys) to reach ``seq_len``.
    profile : bool
        Also return ``"profile"`` (as :func:`run_qkv_job`).
    weights, activations : str
        Number formats (:data:`sw.models.attention_block.WEIGHT_FORMATS`, ``ACT_FORMATS``):
        the four projections' weights (int8, int4, mxint8) and the Q/K/V projections' input
        (int8, mxint8; MXINT8 needs ``mx=1`` in ``config``).
    virtual_memory : bool
        Run in a context (:mod:`hw.isa.vm`): every buffer virtual, every DMA translated.

    Returns
    -------
    dict
        ``{"backend", "config", "config_name", "text", "tokens", "kv_len", "causal",
        "weights", "activations", "stages": [{"name", "cycles", "macs", "utilization",
        "launches"}], "kernels": [...] (per projection, as :func:`run_qkv_job`), "sqnr_db",
        "cosine", "bit_exact", "weight_bytes" (the four projections' weights in DRAM, packed),
        "dram_bytes" (read plus written at the DRAM port during the block)}``. Utilization is
        ``None`` for the softmax stage (no MACs) and on the untimed model.
    """
    from sw.kernels.attention import attention_with_stats
    from sw.kernels.linear import weight_dram_bytes
    from sw.models.attention_block import (
        calibrate_block,
        dequantize_output,
        embed_ids,
        float_block,
        golden_block,
        projection_operands,
        tokens_for_length,
    )
    from sw.quant import cosine, sqnr_db

    cfg = NPUConfig(**config)
    text = text or DEFAULT_EVAL_TEXT
    model = load_minilm()
    ids, kv_len = tokens_for_length(model, text, seq_len, fill)
    check_config(cfg, len(ids), weights=weights, activations=activations)
    bq = calibrate_block(model, weights=weights, activations=activations, tile_k=cfg.rows)
    x = embed_ids(model, ids)
    ref = float_block(model, x, kv_len, causal)
    gold = golden_block(bq, x, kv_len, causal)
    device = Device(backend, expected_config=cfg, profile=profile,
                    virtual_memory=virtual_memory)
    before = device.counters()
    weight_bytes = 0
    pes = cfg.n_pes

    def util(macs: int, cycles: int):
        return macs / (cycles * pes) if cycles and macs else None

    outs, kernels = {}, []
    proj_cycles = proj_macs = 0
    for name in ("query", "key", "value"):
        p = bq.proj[name]
        a, w, bias, mult, shift, fmt = projection_operands(bq, name, x)
        with device.region(name):
            out, st = linear_with_stats(device, a, w, bias, mult, shift, formats=fmt)
        outs[name] = out
        proj_cycles += st.cycles
        proj_macs += st.macs
        weight_bytes += weight_dram_bytes(cfg, st.plan)
        r = ref[name][:kv_len]
        t = out[:kv_len] * p.out_scale
        kernels.append(_kernel_record(name, a, w, st, sqnr_db(r, t), cosine(r, t),
                                      np.array_equal(out, gold[name])))
    ctx, ast = attention_with_stats(device, outs["query"], outs["key"], outs["value"],
                                    heads=bq.heads, score_mult=bq.score_mult,
                                    score_shift=bq.score_shift, out_mult=bq.pv_mult,
                                    out_shift=bq.pv_shift, kv_len=kv_len, causal=causal)
    a, w, bias, mult, shift, fmt = projection_operands(bq, "output", ctx)
    with device.region("output"):
        y, ost = linear_with_stats(device, a, w, bias, mult, shift, formats=fmt)
    weight_bytes += weight_dram_bytes(cfg, ost.plan)
    moved = device.counters() - before
    stages = [{"name": "projections", "cycles": proj_cycles, "macs": proj_macs,
               "utilization": util(proj_macs, proj_cycles), "launches": 3}]
    labels = {"scores": "Q.K^T", "softmax": "softmax", "context": "P.V"}
    for s, v in ast.stages.items():
        stages.append({"name": labels[s], "cycles": v["cycles"], "macs": v["macs"],
                       "utilization": util(v["macs"], v["cycles"]), "launches": v["launches"]})
    stages.append({"name": "out proj", "cycles": ost.cycles, "macs": ost.macs,
                   "utilization": ost.utilization, "launches": 1})
    total_c = sum(s["cycles"] for s in stages)
    total_m = sum(s["macs"] for s in stages)
    stages.append({"name": "total", "cycles": total_c, "macs": total_m,
                   "utilization": util(total_m, total_c), "launches": None})
    r, t = ref["output"][:kv_len], dequantize_output(bq, y)[:kv_len]
    rc, tc = ref["context"][:kv_len], (ctx * bq.ctx_scale)[:kv_len]
    tlb = {k: v for k, v in moved.items() if k.startswith("tlb.")} if virtual_memory else {}
    return {
        "backend": backend.name, "config": cfg.to_dict(), "config_name": cfg.spec,
        "text": text, "tokens": int(len(ids)), "kv_len": int(kv_len), "causal": causal,
        "weights": weights, "activations": activations, "stages": stages, "kernels": kernels,
        "weight_bytes": int(weight_bytes),
        "dram_bytes": int(moved["bytes_read"] + moved["bytes_written"]),
        "context_sqnr_db": round(float(sqnr_db(rc, tc)), 3),
        "sqnr_db": round(float(sqnr_db(r, t)), 3), "cosine": round(float(cosine(r, t)), 6),
        "bit_exact": bool(np.array_equal(ctx, gold["context"])
                          and np.array_equal(y, gold["output"])
                          and all(k["bit_exact"] for k in kernels)),
    } | _profile(device) | ({"tlb": tlb} if virtual_memory else {})


def format_attention_report(result: dict) -> str:
    """A fixed-width per-stage table of :func:`run_attention_job`'s figures."""
    lines = [
        f"all-MiniLM-L6-v2 layer-0 self-attention block, L={result['tokens']} "
        f"(valid keys {result['kv_len']}{', causal' if result['causal'] else ''}): "
        f"{result['text']!r}",
        f"NPU {result['config_name']} ({result['backend']} backend); weights "
        f"{result.get('weights', 'int8')}, activations {result.get('activations', 'int8')}: "
        f"{result.get('weight_bytes', 0):,} weight bytes, {result.get('dram_bytes', 0):,} DRAM "
        "bytes moved",
        "",
        *_kernel_table(result["kernels"], "projection", 11),
    ]
    lines += ["", f"{'stage':<13}{'cycles':>10}{'MACs':>12}{'util':>8}{'launches':>10}"]
    for s in result["stages"]:
        u = "n/a" if s["utilization"] is None else f"{100 * s['utilization']:.1f}%"
        la = "" if s["launches"] is None else str(s["launches"])
        lines.append(f"{s['name']:<13}{s['cycles']:>10,}{s['macs']:>12,}{u:>8}{la:>10}")
    lines += ["", f"context SQNR {result['context_sqnr_db']:.2f} dB; block output vs float32: "
              f"SQNR {result['sqnr_db']:.2f} dB, cosine {result['cosine']:.5f}; "
              f"bit-exact with the golden model: {'yes' if result['bit_exact'] else 'NO'}"]
    if "wall_seconds" in result:
        lines.append(f"wall time {result['wall_seconds']} s")
    return "\n".join(lines)
