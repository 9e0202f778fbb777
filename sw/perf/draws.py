"""The DRAM model's random backpressure as a function of the cycle, for the performance model.

``cosim/tb/dram.sv`` withholds ARREADY, RVALID, AWREADY, WREADY or BVALID in cycle ``k`` when
the ``k``-th draw of that channel's xorshift32 generator is below its threshold
(:func:`sw.dram.stall_draws` is the sequence in Python). The draws depend on the cycle only, so
the model asks :meth:`StallDraws.next_free` -- the first cycle ``>= c`` in which a channel is not
withheld -- and stays event-driven: no per-cycle loop.

The draws are made in numpy blocks of :data:`BLOCK` cycles, lazily, as the simulation reaches
them. xorshift32 is linear over GF(2) (Marsaglia, "Xorshift RNGs", J. Stat. Softw. 8(14),
2003): ``state_k = M^k state_0`` for a 32x32 bit matrix ``M``. A block is filled by doubling:
from the states of positions ``[0, n)`` of the block, ``M^n`` gives those of ``[n, 2n)``; a
linear map is applied to a numpy array of states with four 256-entry tables, one per byte.
"""

from __future__ import annotations

import numpy as np

from sw.dram import DramTiming, _xorshift32, channel_seed

__all__ = ["StallDraws", "BLOCK", "LOG_BLOCK"]

#: Cycles per block of draws (a power of two).
BLOCK = 1 << 14
LOG_BLOCK = _LOG_BLOCK = BLOCK.bit_length() - 1


class _Linear:
    """A GF(2)-linear map of 32-bit words, given by the images of the 32 unit vectors."""

    def __init__(self, cols: list[int]) -> None:
        self.cols = cols
        v = np.arange(256, dtype=np.uint32)
        self.tables = []
        for q in range(4):
            t = np.zeros(256, dtype=np.uint32)
            for bit in range(8):
                t ^= np.where((v >> np.uint32(bit)) & np.uint32(1), np.uint32(cols[8 * q + bit]),
                              np.uint32(0)).astype(np.uint32)
            self.tables.append(t)

    def scalar(self, x: int) -> int:
        out = 0
        for b in range(32):
            if x >> b & 1:
                out ^= self.cols[b]
        return out

    def then(self, other: _Linear) -> _Linear:
        """``other`` after ``self``."""
        return _Linear([other.scalar(c) for c in self.cols])

    def apply(self, x: np.ndarray) -> np.ndarray:
        t0, t1, t2, t3 = self.tables
        i = x.astype(np.intp)
        return t0[i & 0xFF] ^ t1[(i >> 8) & 0xFF] ^ t2[(i >> 16) & 0xFF] ^ t3[i >> 24]


#: The block is made as ``_LANES`` runs of ``_STEPS`` consecutive positions each: the run
#: starts by doubling (``M^(_STEPS * 2^j)``), then all runs step together.
_STEPS = 16
_LANES = BLOCK // _STEPS
_POWERS: list[_Linear] | None = None


def _powers() -> list[_Linear]:
    """``M^(_STEPS * 2^j)`` for ``2^j < _LANES``, ``M`` the xorshift32 step."""
    m = _Linear([_xorshift32(1 << b) for b in range(32)])
    p = m
    for _ in range(_STEPS.bit_length() - 1):
        p = p.then(p)                          # M^_STEPS (a power of two)
    out = [p]
    while (1 << len(out)) < _LANES:
        out.append(out[-1].then(out[-1]))
    return out


def _states(first: int) -> np.ndarray:
    """The generator's states at ``BLOCK`` consecutive positions from one in state ``first``."""
    global _POWERS
    if _POWERS is None:
        _POWERS = _powers()
    x = np.array([first], dtype=np.uint32)
    for p in _POWERS:
        x = np.concatenate((x, p.apply(x)))
    out = np.empty((_LANES, _STEPS), dtype=np.uint32)
    out[:, 0] = x
    s13, s17, s5 = np.uint32(13), np.uint32(17), np.uint32(5)
    for j in range(1, _STEPS):
        x ^= x << s13
        x ^= x >> s17
        x ^= x << s5
        out[:, j] = x
    return out.reshape(-1)


class StallDraws:
    """Whether one channel of the DRAM model is withheld, cycle by cycle from reset.

    Parameters
    ----------
    timing : DramTiming
        Its ``<channel>_stall`` and ``seed``.
    channel : str
        One of :data:`sw.dram.CHANNELS`.

    Cycle ``k`` is the ``k``-th cycle after reset (the NPU's ``CYCLES`` then); cycle 0 is never
    withheld (:func:`sw.dram.stall_draws`).
    """

    def __init__(self, timing: DramTiming, channel: str) -> None:
        self.threshold = timing.stall_fixed(channel)
        self.channel = channel
        self.active = self.threshold > 0
        self._next_state = channel_seed(timing.seed, channel)   # state of position 0
        #: per block of cycles, one byte per cycle: 1 if the channel is withheld then, else 0
        #: (:meth:`next_free` reads it with ``bytes.find`` and extends it; a hot loop may read
        #: it directly)
        self.blocks: list[bytes] = []

    def _extend(self) -> None:
        states = _states(self._next_state)
        self._next_state = _xorshift32(int(states[-1]))
        stalled = states < np.uint32(self.threshold)
        if not self.blocks:
            stalled[0] = False                 # the decision register comes out of reset clear
        self.blocks.append(stalled.tobytes())

    def stalled(self, c: int) -> bool:
        """Whether the channel is withheld in cycle ``c`` (``c >= 0``)."""
        return self.next_free(c) != c

    def next_free(self, c: int) -> int:
        """The first cycle ``>= c`` in which the channel is not withheld."""
        if not self.active:
            return c
        if c < 0:
            c = 0
        while True:
            blk = c >> _LOG_BLOCK
            while blk >= len(self.blocks):
                self._extend()
            i = self.blocks[blk].find(0, c & (BLOCK - 1))
            if i >= 0:
                return (blk << _LOG_BLOCK) + i
            c = (blk + 1) << _LOG_BLOCK
