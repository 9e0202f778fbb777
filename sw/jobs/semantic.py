"""Semantic check of the NPU's sentence embeddings: cosine similarities of the project's
sentence pairs (:data:`PAIRS_FILE`, near-paraphrases to unrelated) on the NPU against
float32, and their Spearman rank correlation.

Each sentence runs through the whole encoder (:func:`sw.jobs.encoder.encoder_embeddings`,
``[PAD]`` tokens masked up to a multiple of ``cols``) on the given backend; the float32
reference is the float encoder on the same tokens. ``python -m sw.jobs.semantic`` prints the
table (perf or functional model).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from sw.backend import Backend
from sw.jobs.encoder import encoder_embeddings

__all__ = ["PAIRS_FILE", "load_pairs", "spearman", "run_semantic_check", "format_semantic"]

PAIRS_FILE = Path(__file__).with_name("sentence_pairs.tsv")


def load_pairs(path: Path = PAIRS_FILE) -> list[tuple[str, str, str]]:
    """``(kind, a, b)`` per non-comment line of the tab-separated file.

    Raises
    ------
    ValueError
        A line without exactly three fields.
    """
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split("\t")
        if len(f) != 3:
            raise ValueError(f"{path}:{i}: expected kind<TAB>sentence<TAB>sentence")
        out.append((f[0], f[1], f[2]))
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x), np.float64)
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tie = x == v
        if tie.sum() > 1:
            r[tie] = r[tie].mean()
    return r


def spearman(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Spearman's rank correlation: the Pearson correlation of the (average-tie) ranks
    (Spearman 1904; as ``scipy.stats.spearmanr``).

    Raises
    ------
    ValueError
        Lengths differ or fewer than two values.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(f"need two 1-D arrays of one length >= 2, got {a.shape}, {b.shape}")
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra @ rb) / np.sqrt((ra @ ra) * (rb @ rb)))


def run_semantic_check(backend: Backend, *, config: dict, pairs=None, n_layers: int = 6
                       ) -> dict:
    """Pair similarities on ``backend`` and in float32.

    Returns
    -------
    dict
        ``{"pairs": [{"kind", "a", "b", "npu", "float"}], "spearman", "max_abs_diff",
        "bit_exact" (every forward pass equal to the golden model)}``.
    """
    pairs = load_pairs() if pairs is None else pairs
    sentences = list(dict.fromkeys(s for _, a, b in pairs for s in (a, b)))
    embs = dict(zip(sentences, encoder_embeddings(backend, sentences, config=config,
                                                  n_layers=n_layers), strict=True))
    rows = []
    for kind, a, b in pairs:
        ea, eb = embs[a], embs[b]
        rows.append({"kind": kind, "a": a, "b": b,
                     "npu": float(ea["embedding"] @ eb["embedding"]),
                     "float": float(ea["float"] @ eb["float"])})
    npu = [r["npu"] for r in rows]
    flt = [r["float"] for r in rows]
    return {"pairs": rows, "spearman": spearman(npu, flt),
            "max_abs_diff": float(np.max(np.abs(np.subtract(npu, flt)))),
            "bit_exact": all(e["bit_exact"] for e in embs.values()),
            "sentences": len(sentences)}


def format_semantic(result: dict) -> str:
    lines = [f"{'kind':<11}{'NPU':>8}{'float32':>9}  pair"]
    for r in result["pairs"]:
        lines.append(f"{r['kind']:<11}{r['npu']:>8.4f}{r['float']:>9.4f}  {r['a']} | {r['b']}")
    lines.append(f"\nSpearman rho {result['spearman']:.4f} over {len(result['pairs'])} pairs "
                 f"({result['sentences']} sentences); max |NPU - float32| "
                 f"{result['max_abs_diff']:.4f}; every forward pass bit-exact with the golden "
                 f"model: {'yes' if result['bit_exact'] else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("perf", "model"), default="model")
    ap.add_argument("--config", default="8x8")
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args(argv)
    cfg = NPUConfig.parse(args.config)
    if args.backend == "perf":
        from sw.perf import PerfBackend
        be = PerfBackend(cfg)
    else:
        from sw.model import ModelBackend
        be = ModelBackend(cfg)
    r = run_semantic_check(be, config=cfg.to_dict(), n_layers=args.layers)
    print(format_semantic(r))
    return 0 if r["bit_exact"] and r["spearman"] >= 0.98 else 1


if __name__ == "__main__":
    raise SystemExit(main())
