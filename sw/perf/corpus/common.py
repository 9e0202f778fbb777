"""What the workloads of the validation corpus share: the :class:`Workload` record, result
digests and random operands."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sw.runtime import Device


@dataclass(frozen=True)
class Workload:
    """One validation workload: ``run(device) -> dict`` of its own results."""
    name: str
    group: str
    run: Callable[[Device], dict]
    config: dict = field(default_factory=dict)   #: NPUConfig fields (default configuration)


def digest(*arrays) -> str:
    """The first 16 hex digits of the SHA-256 of ``arrays``' bytes (C order)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def linear_operands(rng: np.random.Generator, m: int, k: int, n: int):
    """int8 A ``(m, k)``, W ``(k, n)``, int32 bias ``(n,)``, per-channel multiplier and shift
    whose outputs use the int8 range."""
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, n, dtype=np.int32)
    mult = rng.integers(1 << 30, 1 << 31, n, dtype=np.int64)
    shift = np.full(n, 26 + int(np.log2(64 * 64 * np.sqrt(k))), dtype=np.int64)
    return a, w, bias, mult, shift


def attention_operands(rng: np.random.Generator, seq: int, heads: int, d: int):
    """int8 Q, K, V ``(seq, heads * d)`` and per-head / per-channel scales giving softmax rows
    with a few dominant keys."""
    q, k, v = (rng.integers(-128, 128, (seq, heads * d), dtype=np.int8) for _ in range(3))
    score_mult = rng.integers(1 << 15, 1 << 16, heads)
    score_shift = np.full(heads, 16 + int(np.log2(128 * 128 * np.sqrt(d) / 3 / 16 / 16)))
    out_mult = rng.integers(1 << 30, 1 << 31, heads * d)
    out_shift = np.full(heads * d, 31 + 16 - 1)
    return q, k, v, score_mult, score_shift, out_mult, out_shift

