"""The DRAM bursts a run's DMA issued, seen from the host side: :class:`BurstTap`.

The honest roofline (:mod:`cosim.bench.roofline`) needs the burst lengths a kernel's DMA
actually uses: with ``dma_outstanding`` reads in flight, the bytes in flight (and so the
bandwidth a read latency leaves, by Little's law) scale with the burst length, and each burst
costs the co-simulated DRAM one idle cycle (``cosim/tb/dram.sv``, see :mod:`sw.dram`).

:class:`BurstTap` wraps any :class:`sw.backend.Backend` (functional model, performance model,
RTL). It forwards every call unchanged and, from the host's own writes alone, keeps a copy of
each queue's command ring (``RING_BASE``/``RING_SIZE`` CSR writes, ``mem_write`` into the
ring); when the host writes ``TAIL`` (the doorbell) it decodes the commands published since
the previous doorbell with :func:`hw.isa.decode` and adds the bursts of each ``DMA_LOAD`` and
``DMA_STORE`` (:func:`hw.isa.timing.dma_bursts`, the DMA's own burst rule) to a
:class:`BurstProfile`. It never reads the device, so it adds no host access and no cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES, MAX_QUEUES, Csr, Opcode, decode, dma_bursts, queue_csr

__all__ = ["BurstProfile", "BurstTap"]


@dataclass
class BurstProfile:
    """DMA bursts of a stretch of a run (ring fetches of the command processor not included).

    Attributes
    ----------
    read_bursts, read_beats : int
        AXI read bursts of ``DMA_LOAD`` commands, and their beats (``ARLEN + 1`` summed).
    write_bursts, write_beats : int
        AXI write bursts of ``DMA_STORE`` commands, and their beats.
    loads, stores : int
        ``DMA_LOAD`` and ``DMA_STORE`` commands.
    """
    read_bursts: int = 0
    read_beats: int = 0
    write_bursts: int = 0
    write_beats: int = 0
    loads: int = 0
    stores: int = 0

    @property
    def mean_read_beats(self) -> float | None:
        """Mean beats per read burst; None without read bursts."""
        return self.read_beats / self.read_bursts if self.read_bursts else None

    @property
    def mean_write_beats(self) -> float | None:
        """Mean beats per write burst; None without write bursts."""
        return self.write_beats / self.write_bursts if self.write_bursts else None

    def __sub__(self, other: BurstProfile) -> BurstProfile:
        return BurstProfile(**{k: v - getattr(other, k) for k, v in asdict(self).items()})

    def copy(self) -> BurstProfile:
        return BurstProfile(**asdict(self))

    def to_dict(self) -> dict:
        return asdict(self) | {"mean_read_beats": self.mean_read_beats,
                               "mean_write_beats": self.mean_write_beats}

    @classmethod
    def from_dict(cls, d: dict) -> BurstProfile:
        return cls(**{k: d[k] for k in asdict(cls())})


_RING_REGS = {Csr.RING_BASE: "base", Csr.RING_SIZE: "size", Csr.TAIL: "tail"}


class _Ring:
    def __init__(self) -> None:
        self.base: int | None = None
        self.size: int | None = None
        self.tail: int | None = None      # the host's last doorbell
        self.slots: dict[int, bytes] = {}

    def contains(self, addr: int) -> bool:
        return (self.base is not None and self.size is not None
                and self.base <= addr < self.base + self.size * COMMAND_BYTES)


class BurstTap:
    """A :class:`sw.backend.Backend` that forwards to ``inner`` and counts DMA bursts.

    Parameters
    ----------
    inner : Backend
        Where the calls go (every attribute not defined here is ``inner``'s).
    config : NPUConfig
        The device's configuration (bus width and local row sizes for the burst rule).

    Attributes
    ----------
    profile : BurstProfile
        Bursts of every DMA command published so far; take differences of :meth:`snapshot`
        around a kernel.

    Notes
    -----
    A command is counted when the host publishes it (writes ``TAIL``), whether or not the
    device executes it successfully; a command the device rejects (bad address) counts as
    the transfer it asked for. Commands written into the ring but never published are not
    counted.
    """

    def __init__(self, inner, config: NPUConfig) -> None:
        self.inner = inner
        self.config = config
        self.name = inner.name
        self.timed = inner.timed
        self.profile = BurstProfile()
        self._rings = [_Ring() for _ in range(min(config.n_queues, MAX_QUEUES))]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def snapshot(self) -> BurstProfile:
        """A copy of :attr:`profile` now."""
        return self.profile.copy()

    # -- Backend interface -----------------------------------------------------------------

    def csr_read(self, offset: int) -> int:
        return self.inner.csr_read(offset)

    def csr_write(self, offset: int, value: int) -> None:
        self._observe_csr(offset, value)
        self.inner.csr_write(offset, value)

    def mem_write(self, addr: int, data: bytes) -> None:
        for ring in self._rings:
            if ring.contains(addr) or ring.contains(addr + len(data) - 1):
                self._observe_ring(ring, addr, bytes(data))
        self.inner.mem_write(addr, data)

    def mem_read(self, addr: int, size: int) -> bytes:
        return self.inner.mem_read(addr, size)

    def wait_irq(self, max_cycles: int) -> bool:
        return self.inner.wait_irq(max_cycles)

    # -- what the host writes --------------------------------------------------------------

    def _observe_csr(self, offset: int, value: int) -> None:
        for q, ring in enumerate(self._rings):
            for reg, field in _RING_REGS.items():
                if offset == queue_csr(q, reg):
                    if field == "tail":
                        self._publish(ring, value)
                    else:
                        setattr(ring, field, value)
                        ring.tail, ring.slots = None, {}
                    return

    def _observe_ring(self, ring: _Ring, addr: int, data: bytes) -> None:
        first = (addr - ring.base) // COMMAND_BYTES
        skip = (addr - ring.base) % COMMAND_BYTES
        if skip:            # not command-aligned: not the runtime's ring write; forget slots
            ring.slots = {}
            return
        for i in range(len(data) // COMMAND_BYTES):
            slot = first + i
            if slot < ring.size:
                ring.slots[slot] = data[i * COMMAND_BYTES:(i + 1) * COMMAND_BYTES]

    def _publish(self, ring: _Ring, tail: int) -> None:
        """The host rang the doorbell: count the commands from the last ``TAIL`` to ``tail``."""
        if ring.size and ring.tail is not None:
            slot = ring.tail
            while slot != tail % ring.size:
                raw = ring.slots.pop(slot, None)
                if raw is not None:
                    self._count(raw)
                slot = (slot + 1) % ring.size
        ring.tail = tail

    def _count(self, raw: bytes) -> None:
        cmd = decode(raw)
        op = cmd.header.opcode
        if op not in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            return
        b = cmd.body.dma
        bursts = dma_bursts(self.config, b.dram_addr, b.dram_stride, b.row_bytes, b.n_rows,
                            b.mem)
        beats = sum(x.beats for x in bursts)
        p = self.profile
        if op == Opcode.DMA_LOAD:
            p.loads += 1
            p.read_bursts += len(bursts)
            p.read_beats += beats
        else:
            p.stores += 1
            p.write_bursts += len(bursts)
            p.write_beats += beats
