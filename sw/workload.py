"""The main job: layer 0's Q, K and V projections of all-MiniLM-L6-v2 on real text.

:func:`run_qkv_job` runs on any :class:`sw.backend.Backend` (the RTL under cocotb, or the
functional model) and returns JSON-serialisable figures; :func:`format_report` prints them.
"""

import time

import numpy as np

from hw.config import NPUConfig

from .backend import Backend
from .kernels.linear import linear_with_stats
from .minilm import DEFAULT_EVAL_TEXT, PROJECTIONS, calibrate_qkv, evaluate, load_minilm
from .runtime import Device

__all__ = ["run_qkv_job", "format_report"]


def run_qkv_job(backend: Backend, *, config: dict, text: str | None = None) -> dict:
    """Quantize and run the three projections on ``backend``.

    Parameters
    ----------
    backend : Backend
        Where the commands execute.
    config : dict
        The :class:`NPUConfig` fields the device is expected to have (a mismatch with the
        device's CSRs raises :class:`sw.runtime.ConfigMismatchError`).
    text : str, optional
        Evaluation sentence (default :data:`sw.minilm.DEFAULT_EVAL_TEXT`). The quantization
        scales are calibrated on :data:`sw.minilm.DEFAULT_CALIBRATION_TEXT`, never on it.

    Returns
    -------
    dict
        ``{"backend", "config", "text", "tokens", "kernels": [{"name", "shape" (M, K, N),
        "cycles", "macs", "utilization", "sqnr_db", "cosine", "bit_exact", "commands",
        "host_seconds"}, ...]}``. Cycles are device clock cycles from the doorbell to the fence
        interrupt (0 on the untimed model, where utilization is ``None``).
    """
    cfg = NPUConfig(**config)
    text = text or DEFAULT_EVAL_TEXT
    model = load_minilm()
    quantized = calibrate_qkv(model)
    x = model.embed(text)
    device = Device(backend, expected_config=cfg)

    kernels = []
    for name in PROJECTIONS:
        q = quantized[name]
        x_int8 = q.quantize_input(x)
        start = time.perf_counter()
        out, stats = linear_with_stats(device, x_int8, q.w, q.bias, q.multiplier, q.shift)
        host_seconds = time.perf_counter() - start
        weight, bias = model.projection(name)
        sqnr, cos = evaluate(q, x, weight, bias, out)
        kernels.append({
            "name": name,
            "shape": [int(x_int8.shape[0]), int(q.w.shape[0]), int(q.w.shape[1])],
            "cycles": stats.cycles,
            "macs": stats.macs,
            "utilization": stats.utilization,
            "sqnr_db": round(float(sqnr), 3),
            "cosine": round(float(cos), 6),
            "bit_exact": bool(np.array_equal(out, q.golden(x_int8))),
            "commands": stats.n_commands,
            "host_seconds": round(host_seconds, 3),
        })
    return {
        "backend": backend.name,
        "config": cfg.to_dict(),
        "config_name": cfg.name,
        "text": text,
        "tokens": int(x.shape[0]),
        "kernels": kernels,
    }


def format_report(result: dict) -> str:
    """A fixed-width table of :func:`run_qkv_job`'s figures."""
    lines = [
        f"all-MiniLM-L6-v2 layer 0, {result['tokens']} tokens: {result['text']!r}",
        f"NPU {result['config_name']} ({result['backend']} backend)",
        "",
        f"{'kernel':<8}{'M x K x N':>16}{'cycles':>10}{'util':>8}{'SQNR dB':>9}"
        f"{'cosine':>10}  bit-exact",
    ]
    for k in result["kernels"]:
        util = "-" if k["utilization"] is None else f"{100 * k['utilization']:.1f}%"
        shape = "x".join(str(v) for v in k["shape"])
        lines.append(f"{k['name']:<8}{shape:>16}{k['cycles']:>10}{util:>8}"
                     f"{k['sqnr_db']:>9.2f}{k['cosine']:>10.5f}  "
                     f"{'yes' if k['bit_exact'] else 'NO'}")
    if "wall_seconds" in result:
        lines.append(f"\nwall time {result['wall_seconds']} s")
    return "\n".join(lines)
