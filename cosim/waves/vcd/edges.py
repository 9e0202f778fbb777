"""Values at the rising edges of a clock, from batches of changes (:class:`EdgeSampler`), and
the absolute numbering of those edges (:func:`edge_cycles`)."""

from __future__ import annotations

import numpy as np

from cosim.waves.vcd.scan import Changes

__all__ = ["EdgeSampler", "edge_cycles", "UNKNOWN"]

#: The sampled value of a signal that is x/z, never set, or not a 63-bit integer.
UNKNOWN = -1


class EdgeSampler:
    """The rising edges of one signal (``0`` -> ``1`` between the ends of two timestamps; an
    edge from or to x is none) and, at each, every tracked signal's value at the end of the
    previous timestamp: what a flip-flop clocked by that edge sees.

    Feed :class:`cosim.waves.vcd.Changes` batches in order (each holding whole timestamps,
    as :func:`cosim.waves.vcd.changes` delivers them). Values are the batches' ``ints``
    (:data:`UNKNOWN` for x/z, never set, or wider than 63 bits).

    Parameters
    ----------
    n_slots : int
        Signals tracked (the batches' slots).
    clock : int
        Slot of the clock.
    """

    def __init__(self, n_slots: int, clock: int):
        self.state = np.full(n_slots, UNKNOWN, np.int64)
        self.clock = clock

    def feed(self, ch: Changes) -> tuple[np.ndarray, np.ndarray]:
        """``(times, samples)`` of the rising edges in ``ch``: int64 ``(n,)`` and
        ``(n, n_slots)``."""
        t, s, v = ch.times, ch.slots, ch.ints
        n_slots = len(self.state)
        on_clock = s == self.clock
        ct, cv = t[on_clock], v[on_clock]
        if len(ct):
            last = np.ones(len(ct), bool)               # the value at the end of each time
            last[:-1] = ct[1:] != ct[:-1]
            ct, cv = ct[last], cv[last]
            before = np.empty_like(cv)
            before[0] = self.state[self.clock]
            before[1:] = cv[:-1]
            edges = ct[(before == 0) & (cv == 1)]
        else:
            edges = ct
        samples = np.repeat(self.state[None, :], len(edges), axis=0)
        order = np.argsort(s, kind="stable")
        counts = np.bincount(s, minlength=n_slots)
        at = 0
        for slot in np.flatnonzero(counts).tolist():
            idx = order[at:at + counts[slot]]
            at += counts[slot]
            ts, vs = t[idx], v[idx]
            if len(edges):
                k = np.searchsorted(ts, edges, "left") - 1
                samples[:, slot] = np.where(k >= 0, vs[np.maximum(k, 0)], self.state[slot])
            self.state[slot] = vs[-1]
        return edges, samples


def edge_cycles(times: np.ndarray, period: int) -> np.ndarray:
    """Absolute cycle of each rising edge: the cycle the edge ends, ``ceil(t / period) - 1``.

    With the co-simulation's clock (rising at every multiple of the period), that is the
    value :attr:`cosim.tb.rtl_backend.RtlBackend.cycle` has just before the edge (simulated
    time / period), whatever window of the run the file holds; the ``--waves-from`` and
    ``--waves-to`` cycles of ``npu run`` count the same way.
    """
    return -(-times // period) - 1
