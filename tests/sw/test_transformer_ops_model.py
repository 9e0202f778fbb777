"""ADD, LAYERNORM and GELU through the runtime on the functional model and the performance
model (the corpus workload :func:`sw.perf.corpus.general._transformer_ops`: negative gammas, an
all-equal row, a DMA load beside the vector commands) against the golden model, and
LAYERNORM's row constants against a naive transcription of their definition."""

import math

import numpy as np
import pytest

from hw.config import NPUConfig
from sw.golden import layernorm_row_constants
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.perf.corpus import WORKLOADS
from sw.runtime import Device


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
@pytest.mark.parametrize("name", ["transformer_ops", "4x4_transformer_ops"])
def test_transformer_ops_are_bit_exact(backend, name):
    w = WORKLOADS[name]
    assert w.run(Device(backend(NPUConfig(**w.config))))["bit_exact"]


def test_layernorm_row_constants_by_definition():
    """``e`` puts ``D / 4**e`` in [2**28, 2**30), ``R = floor(N 2**32 / isqrt(D'))`` (isqrt by
    floats, checked), ``mu = round(S 2**8 / N)`` half up, over variances from 0 to the
    largest; and ``R / 2**(32 + e)`` is ``N / sqrt(D)`` within 2**-13."""
    rng = np.random.default_rng(2)
    rows = [np.zeros(384, np.int64), np.full(384, -7), np.r_[np.zeros(383), [1]].astype(int)]
    rows += [rng.integers(-(1 << 15), 1 << 15, n) >> int(rng.integers(0, 15))
             for n in rng.integers(1, 4097, 300)]
    rows.append(np.r_[np.full(2048, -(1 << 15)), np.full(2048, (1 << 15) - 1)])
    for x in rows:
        n, s, q = len(x), int(x.sum()), int((x * x).sum())
        r, e, mu = layernorm_row_constants(s, q, n)
        d = n * q - s * s
        assert mu == math.floor(s * 256 / n + 0.5) or abs(s * 256 / n) > 2**40
        assert mu == (s * 256 + n // 2) // n
        if d == 0:
            assert (r, e) == (0, 0)
            continue
        dn = d // 4**e if e >= 0 else d * 4**(-e)
        assert 2**28 <= dn < 2**30, (d, e)
        root = int(math.sqrt(dn))
        root -= root * root > dn
        root += (root + 1) ** 2 <= dn
        assert r == (n << 32) // root
        assert abs(r / 2.0 ** (32 + e) / (n / math.sqrt(d)) - 1) < 2**-13
