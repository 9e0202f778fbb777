"""Performance counters: names, definitions, widths and their registers in the counter block."""

from hw.isa.commands import ENGINE_NAMES
from hw.isa.registers import Csr
from hw.isa.vm import TLB_CLIENTS

__all__ = ["STALL_REASONS", "ENGINE_STALLS", "TLB_COUNTERS", "COUNTER_NAMES",
           "TIMING_COUNTERS", "COUNTER_BITS", "SNAPSHOT_CYCLES", "counter_csr",
           "engine_counter_csr"]


#: Stall reasons, in register order (``Csr.CNT_STALL + 4 * index``):
#:
#: * ``sem``: the engine is idle (its ``busy`` is low) and cannot take a command although it
#:   has one: at least one queue that is neither stopped (error latched) nor being reset holds
#:   a command in this engine's FIFO, and the head command of every such queue waits on an
#:   unsatisfied semaphore (``flags.wait`` and ``sem[wait_sem] < wait_value``). Commands
#:   still in the command processor's stage or ring do not count.
#: * ``dram_read``, ``dram_write``, ``spad``, ``acc``: the engine is busy and its block
#:   reports that it waits for the DRAM read data / the DRAM write channel / a scratchpad port
#:   / an accumulator port (``DMA.stall``, ``ComputeTile.stall``). A cycle may count under
#:   several reasons if the block reports several at once.
STALL_REASONS = ("sem", "dram_read", "dram_write", "spad", "acc")

#: The (engine, stall reason) pairs that can happen and are counted. The other registers of
#: the regular map always read 0 and are not in :data:`COUNTER_NAMES`.
ENGINE_STALLS = {
    "load": ("sem", "dram_read", "spad", "acc"),
    "store": ("sem", "dram_write"),
    "matrix": ("sem",),
    "vector": ("sem", "acc"),
}


def _counter_names() -> tuple[str, ...]:
    names = ["bytes_read", "bytes_written", "dma_busy", "overlap"]
    for e in ENGINE_NAMES:
        names += [f"busy.{e}", f"retired.{e}"] + [f"stall.{e}.{r}" for r in ENGINE_STALLS[e]]
    for t in TLB_CLIENTS:
        names += [f"tlb.{t}.{k}" for k in TLB_COUNTERS]
    return tuple(names)


#: The counters of each TLB client (:data:`hw.isa.vm.TLB_CLIENTS`), in register order.
TLB_COUNTERS = ("hits", "misses", "walk_cycles", "faults")


#: Every 32-bit event counter of the counter block, by its stable dotted name (``cycles``, the
#: 64-bit ``CYCLES`` at the snapshot, comes on top). Units and definitions, per cycle ``c``:
#:
#: * ``bytes_read`` (bytes): ``axi_data_bytes`` per R handshake (``rvalid & rready``) on
#:   the NPU's ``mem`` port -- every read burst, ring fetches included, whole beats;
#: * ``bytes_written`` (bytes): the number of set ``wstrb`` bits per W handshake on ``mem``
#:   (DMA stores and fence writes);
#: * ``dma_busy`` (cycles): the load or the store channel is busy;
#: * ``overlap`` (cycles): a DMA channel and the matrix engine are both busy;
#: * ``busy.<engine>`` (cycles): the engine's ``busy`` is high: it holds at least one command
#:   (from the cycle after it took one to the ``done`` pulse of the last one it holds,
#:   inclusive). The matrix engine holds several MATMULs at once (it takes the next one while
#:   earlier ones stream and drain, :class:`hw.isa.timing.MatmulTimeline`); a cycle counts
#:   once however many overlap, so ``busy.matrix`` is the union of the commands' spans, not
#:   the sum of their :func:`hw.isa.matmul_busy_cycles`;
#: * ``retired.<engine>`` (commands): ``done`` pulses of the engine: every command it
#:   finished, with or without an error (also one whose queue was reset meanwhile);
#: * ``stall.<engine>.<reason>`` (cycles): see :data:`STALL_REASONS`; only the pairs of
#:   :data:`ENGINE_STALLS`;
#: * ``tlb.<client>.hits`` / ``.misses`` (bursts): per DMA channel (``load``, ``store``), the
#:   bursts of translated commands whose first TLB lookup found / did not find their page;
#:   a miss starts a walk (:mod:`hw.isa.vm`), so misses count walks (a burst whose walk a
#:   ``TLB_INVALIDATE`` dropped misses and walks again, a miss more); a lookup that faults on
#:   a permission counts as a hit;
#: * ``tlb.<client>.walk_cycles`` (cycles): the channel's walker is walking (from the cycle
#:   after the miss to the cycle its last entry arrives, inclusive);
#: * ``tlb.<client>.faults`` (commands): commands of the channel that ended with a page fault;
#: * ``tlb.fetch.*``: the same for the command fetch's TLB (client ``fetch``): its lookups are
#:   the ring's read bursts and the fence writes of translated queues, its faults the bursts
#:   and fences that faulted. They depend on timing (how many commands one burst reads, how
#:   far the fetch reads ahead of a ``TLB_INVALIDATE`` or a fault), so they are timing
#:   counters: the functional model has none of them.
COUNTER_NAMES = _counter_names()

#: The counters that depend on timing; the untimed functional model has none of them.
TIMING_COUNTERS = ("cycles", "dma_busy", "overlap",
                   *(n for n in COUNTER_NAMES if n.startswith(("busy.", "stall."))),
                   *(f"tlb.{t}.walk_cycles" for t in TLB_CLIENTS if t != "fetch"),
                   *(n for n in COUNTER_NAMES if n.startswith("tlb.fetch.")))

#: Cycles a snapshot takes to write (:class:`hw.counters.PerfCounters` registers its inputs, then
#: folds one counter a cycle into its snapshot memory): a ``CNT_SNAPSHOT`` write that takes effect
#: in cycle ``s`` (the snapshot's instant) has its write response (B) ``SNAPSHOT_CYCLES`` cycles
#: later than another register's write, when the snapshot is complete; a read issued meanwhile is
#: held (AR not accepted) until then.
SNAPSHOT_CYCLES = 1 + len(COUNTER_NAMES)

#: Width of each counter in bits: they wrap modulo ``2 ** COUNTER_BITS[name]``.
COUNTER_BITS = {"cycles": 64, **dict.fromkeys(COUNTER_NAMES, 32)}


def engine_counter_csr(engine: int, reg: int) -> int:
    """Byte offset of counter register ``reg`` (:attr:`Csr.CNT_BUSY`, :attr:`Csr.CNT_RETIRED`,
    ``Csr.CNT_STALL + 4 * r``) of engine ``engine`` (index in :data:`ENGINE_NAMES`)."""
    return Csr.CNT_ENGINE_BASE + engine * Csr.CNT_ENGINE_STRIDE + reg


def counter_csr(name: str) -> int:
    """Byte offset of the snapshot register of counter ``name`` (one of
    :data:`COUNTER_NAMES`).

    Raises
    ------
    KeyError
        For an unknown name (the message lists the valid ones).
    """
    try:
        return _COUNTER_CSRS[name]
    except KeyError:
        raise KeyError(f"unknown counter {name!r}; counters: {', '.join(COUNTER_NAMES)}"
                       ) from None


def _counter_csrs() -> dict[str, int]:
    out = {"bytes_read": Csr.CNT_BYTES_READ, "bytes_written": Csr.CNT_BYTES_WRITTEN,
           "dma_busy": Csr.CNT_DMA_BUSY, "overlap": Csr.CNT_OVERLAP}
    for e, name in enumerate(ENGINE_NAMES):
        out[f"busy.{name}"] = engine_counter_csr(e, Csr.CNT_BUSY)
        out[f"retired.{name}"] = engine_counter_csr(e, Csr.CNT_RETIRED)
        for reason in ENGINE_STALLS[name]:
            out[f"stall.{name}.{reason}"] = engine_counter_csr(
                e, Csr.CNT_STALL + 4 * STALL_REASONS.index(reason))
    for t, client in enumerate(TLB_CLIENTS):
        for k, what in enumerate(TLB_COUNTERS):
            out[f"tlb.{client}.{what}"] = Csr.CNT_TLB_BASE + Csr.CNT_TLB_STRIDE * t + 4 * k
    assert list(out) == list(COUNTER_NAMES)
    assert max(out.values()) < Csr.CNT_END
    assert engine_counter_csr(len(ENGINE_NAMES), 0) == Csr.CNT_TLB_BASE
    assert Csr.CNT_TLB_BASE + Csr.CNT_TLB_STRIDE * len(TLB_CLIENTS) == Csr.CNT_END
    assert Csr.CNT_STALL + 4 * len(STALL_REASONS) <= Csr.CNT_ENGINE_STRIDE
    return out


_COUNTER_CSRS = _counter_csrs()
