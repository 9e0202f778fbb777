"""The device: configuration discovery, DRAM, streams, the semaphore pool, events, barriers,
error checking and waiting."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    PAGE_FAULTS,
    Csr,
    ErrorCode,
    IrqBit,
    QueueErrorWord,
    queue_csr,
    unpack_fields,
)
from sw.backend import Backend
from sw.runtime.commands import Command, CommandList, describe_command
from sw.runtime.discovery import discover_config
from sw.runtime.errors import (
    DEFAULT_TIMEOUT_CYCLES,
    DeviceError,
    DeviceTimeoutError,
    NPUError,
    OutOfMemoryError,
    OutOfSemaphoresError,
    PageFaultError,
)
from sw.runtime.inspection import DeviceInspection
from sw.runtime.local import merge_clock
from sw.runtime.memory import Allocator, AllocatorStats, Buffer
from sw.runtime.profile import Profiler
from sw.runtime.streams import Stream, check_ring_commands
from sw.runtime.sync import Deferred, Event, Semaphore
from sw.runtime.vm import Context

__all__ = ["Device"]

class Device(DeviceInspection):
    """An NPU seen through a backend: configuration, memory, streams, semaphores, events.

    Parameters
    ----------
    backend : Backend
        The transport (:class:`sw.model.ModelBackend` or the RTL backend).
    expected_config : NPUConfig, optional
        If given, the configuration the caller built for; a difference on any field the
        ``CFG_*`` CSRs report raises :class:`ConfigMismatchError`. Fields the CSRs do not
        report (``axi_addr_bits``, ``axi_id_bits``, ``dma_max_burst_beats``,
        ``cmd_fifo_depth``, ``fetch_depth``, ``trace_depth``) are taken from it, unchecked
        (else from the :class:`NPUConfig` defaults): on hardware built with other values, the
        kernels' planners (which time command fetches and bursts with them) and the
        profiler's trace reads assume the wrong ones.
    queue : int
        The hardware queue of the default stream (:meth:`launch`, :meth:`synchronize`).
    ring_commands : int, optional
        Ring size of each stream in commands, a power of two from 2 to
        :data:`hw.isa.MAX_RING_SIZE` (holds one less).
        Default: 4096 (128 KiB), or 1/16 of DRAM if that is smaller.
    profile : bool
        Collect a profile of everything run from now on (:attr:`profiler`, a
        :class:`sw.runtime.profile.Profiler`: the engines' command trace, drained before it
        can overflow, and the regions); ``device.profiler.finish()`` returns it. Needs a
        timed backend.
    virtual_memory : bool
        Put the default stream in a new :class:`~sw.runtime.vm.Context`
        (:attr:`default_context`): the kernels' buffers (``stream.alloc``/``upload``) are then
        virtual and every DMA is translated (:mod:`hw.isa.vm`). Needs ``tlb_entries > 0``.

    Raises
    ------
    ConfigMismatchError
        If ``ID`` is not the NPU's, the version major differs, the CSRs are inconsistent or
        differ from ``expected_config``.
    OutOfMemoryError
        If the ring does not fit in DRAM.
    UntimedCounterError
        With ``profile`` on an untimed backend.

    Attributes
    ----------
    config : NPUConfig
        The configuration discovered from the CSRs.
    dram_timing : sw.dram.DramTiming or None
        The timing the backend's DRAM runs under (``backend.dram_timing``; None for an
        untimed backend): the kernels plan their tilings for it.
    allocator : Allocator
        The DRAM allocator.
    default_stream : Stream
        The stream of :meth:`launch` / :meth:`synchronize`.
    streams : dict of int to Stream
        The stream of each queue that has one, by queue; a destroyed stream
        (:meth:`Stream.destroy`) holds its queue until its work retired.
    default_context : Context or None
        The default stream's context (``virtual_memory=True``), else None.
    contexts : dict of int to Context
        The live contexts by address-space id.
    profiler : Profiler or None
        The profiler (``profile=True``) until its ``finish()``.

    Notes
    -----
    Creating a :class:`Device` resets the NPU (``CONTROL``): every queue, error and semaphore.
    Semaphore 0 is left to callers that manage semaphores by hand; the others form the pool of
    :meth:`alloc_semaphore` (events, kernels).
    """

    def __init__(self, backend: Backend, expected_config: NPUConfig | None = None, *,
                 queue: int = 0, ring_commands: int | None = None,
                 profile: bool = False, virtual_memory: bool = False) -> None:
        self.backend = backend
        self.dram_timing = getattr(backend, "dram_timing", None)
        self.config = discover_config(backend, expected_config)
        if ring_commands is None:
            fit = self.config.dram_bytes // 16 // COMMAND_BYTES
            ring_commands = min(4096, 1 << (fit.bit_length() - 1))
        if not 0 <= queue < self.config.n_queues:
            raise ValueError(f"queue {queue} does not exist (n_queues={self.config.n_queues})")
        check_ring_commands(ring_commands)
        self.ring_commands = ring_commands
        self.allocator = Allocator(0, self.config.dram_bytes)
        self._sem_pool = list(range(self.config.n_sems - 1, 0, -1))
        self._sems_live: dict[int, Semaphore] = {}
        self._barrier_sem: Semaphore | None = None
        self.streams: dict[int, Stream] = {}
        #: per queue, the commands the destroyed streams it served launched (a new stream on
        #: it counts on from there, Stream.commands_submitted)
        self._queue_commands: dict[int, int] = {}
        #: releases held back until the host saw commands retire (Event.free, LinearJob.free)
        self.deferred = Deferred()
        self.contexts: dict[int, Context] = {}
        backend.csr_write(Csr.CONTROL, 1)
        backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)
        backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
        if self.config.tlb_entries:         # every queue physical until a stream binds it
            for q in range(self.config.n_queues):
                backend.csr_write(queue_csr(q, Csr.Q_VM), 0)
        self.profiler: Profiler | None = None
        self.default_stream = self.create_stream(queue)
        self._tlbs_clean = False
        self.default_context = self.create_context() if virtual_memory else None
        if self.default_context is not None:
            self.default_stream.bind(self.default_context)
        if profile:
            self.profiler = Profiler(self)

    # -- configuration ----------------------------------------------------------------------------

    # -- streams, semaphores, events ---------------------------------------------------------

    def create_stream(self, queue: int | None = None, *, window_bytes: int | None = None,
                      ring_commands: int | None = None, context: Context | None = None,
                      timeout_cycles: int | None = None) -> Stream:
        """Create a :class:`Stream` on hardware queue ``queue`` (the lowest free one if None),
        in ``context`` if given (its DMA addresses are then the context's virtual addresses;
        :meth:`Stream.alloc` allocates in the context).

        A queue still held by a destroyed stream (:meth:`Stream.destroy`) is taken once that
        stream's work retired: the call waits for it, up to ``timeout_cycles`` (default
        :attr:`default_timeout_cycles`). With ``queue=None`` and no queue free, it takes the
        lowest such queue that is idle now (``Q_STATUS``, no wait), and waits only if none is.

        Raises
        ------
        ValueError
            If the queue does not exist or has a stream that is not destroyed, or no queue
            is free or held by a destroyed stream, or both a window and a context are given,
            or ``ring_commands`` is not a power of two from 2 to :data:`hw.isa.MAX_RING_SIZE`,
            or is smaller than the ``HEAD`` the queue kept (:class:`Stream`).
        OutOfMemoryError
            If the ring (or the window) does not fit in DRAM.
        DeviceError
            If the work of the destroyed stream that held the queue failed (the queue is
            reset; a second call takes it).
        DeviceTimeoutError
            If that work did not retire within ``timeout_cycles``.
        """
        if context is not None and window_bytes is not None:
            raise ValueError("a stream in a context has no window (its pages protect it)")
        if queue is None:
            free = ([q for q in range(self.config.n_queues) if q not in self.streams]
                    or sorted(q for q, s in self.streams.items() if s.destroyed))
            if not free:
                raise ValueError(f"every hardware queue has a stream (n_queues="
                                 f"{self.config.n_queues})")
            # a destroyed stream's queue whose work already retired before one still busy
            queue = next((q for q in free if q not in self.streams
                          or self.streams[q]._idle()), free[0])
        if not 0 <= queue < self.config.n_queues:
            raise ValueError(f"queue {queue} does not exist (n_queues={self.config.n_queues})")
        held = self.streams.get(queue)
        if held is not None and not held.destroyed:
            raise ValueError(f"queue {queue} already has a stream")
        if ring_commands is not None:
            check_ring_commands(ring_commands)
        if held is not None:
            held._wait_retired(timeout_cycles)
        stream = Stream(self, queue, ring_commands or self.ring_commands, window_bytes,
                        context=context)
        self.streams[queue] = stream
        return stream

    # -- virtual memory ----------------------------------------------------------------------

    def create_context(self, *, contiguous: bool = True) -> Context:
        """A new address space (:class:`~sw.runtime.vm.Context`) with the lowest free
        address-space id (``contiguous``: see :class:`~sw.runtime.vm.Context`).

        Raises
        ------
        NPUError
            If the device has no translation hardware (``tlb_entries == 0``) or all 256
            address-space ids are in use.
        OutOfMemoryError
            If its root table does not fit in DRAM.
        """
        if not self.config.tlb_entries:
            raise NPUError("this NPU has no virtual memory (tlb_entries=0)")
        free = [a for a in range(256) if a not in self.contexts]
        if not free:
            raise NPUError("all 256 address-space ids are in use")
        if not self._tlbs_clean:
            # the TLBs may hold translations of an earlier runtime's contexts (CONTROL does
            # not clear them), whose address-space ids this one reuses
            self.invalidate_tlb()
            self._tlbs_clean = True
        ctx = Context(self, free[0], contiguous=contiguous)
        self.contexts[ctx.asid] = ctx
        return ctx

    def _release_context(self, ctx: Context) -> None:
        self.contexts.pop(ctx.asid, None)

    def invalidate_tlb(self, context: Context | None = None, *,
                       stream: Stream | None = None) -> None:
        """Drop the TLB entries of ``context`` (every entry if None) and wait until it is
        done: a ``TLB_INVALIDATE`` on ``stream`` (default: the default stream), which waits
        for that stream's earlier work, then a synchronize of that stream.

        Raises
        ------
        DeviceError
            If the stream's queue reports an error meanwhile.
        """
        stream = self.default_stream if stream is None else stream
        cmds = CommandList()
        cmds.tlb_invalidate(asid=None if context is None else context.asid)
        stream.launch(cmds, ordered=False)
        stream.synchronize()

    def _reclaim(self) -> None:
        """Before running out: ask every stream whether it is idle (``Q_STATUS``, no wait),
        which releases what its retired work held back."""
        for s in list(self.streams.values()):
            if s._idle():       # (an error is reported elsewhere)
                s._all_done()

    def alloc_semaphore(self) -> Semaphore:
        """Take a semaphore from the pool (ids ``n_sems - 1`` down to 1). With the pool
        empty, it first releases what freed events and jobs held for work that retired (it
        reads each queue's ``Q_STATUS``, :meth:`_reclaim`).

        Raises
        ------
        OutOfSemaphoresError
            If all are in use (the message counts those freed events and jobs still hold).
        """
        if not self._sem_pool:
            self._reclaim()
        if not self._sem_pool:
            n = self.config.n_sems
            held = self.deferred.holding("theirs")
            raise OutOfSemaphoresError(
                f"every pool semaphore is in use (the pool is semaphores 1 to {n - 1}; an "
                f"event takes one, a double-buffered linear kernel four{held})" if n > 1 else
                "this configuration leaves no pool semaphores (n_sems=1: semaphore 0 is not "
                "pooled)")
        sem = Semaphore(self, self._sem_pool.pop())
        self._sems_live[sem.id] = sem
        return sem

    def event(self) -> Event:
        """A new, unrecorded :class:`Event`."""
        return Event(self)

    def barrier(self, streams: Iterable[Stream]) -> None:
        """Cross-stream barrier: work launched afterwards on any of ``streams`` starts only
        after all work launched before on all of them retired.

        Each stream appends a ``BARRIER`` that signals the device's barrier semaphore once
        the stream's earlier work retired, then a ``WAIT`` until the semaphore counts every
        such signal issued so far. The count is cumulative over all barriers, so a barrier
        also waits for the streams of earlier barriers to reach them (conservative, never
        deadlocks by itself). One pool semaphore is taken at the first barrier and kept.

        Raises
        ------
        TypeError
            If an item of ``streams`` is not a :class:`Stream`.
        StreamDestroyedError
            If one was destroyed (nothing is launched).
        """
        streams = list(streams)
        for s in streams:
            if not isinstance(s, Stream):
                raise TypeError(f"Device.barrier takes streams, got a {type(s).__name__}")
            s._check_live()
        # what each stream runs after from now on (sw.runtime.local): all their work so far
        clock: dict[int, int] = {}
        for s in streams:
            merge_clock(clock, {**s._after, s.queue: s.commands_submitted})
        for s in streams:
            merge_clock(s._after, clock)
        if self._barrier_sem is None:
            self._barrier_sem = self.alloc_semaphore()
        sem = self._barrier_sem
        target = sem.target(len(streams))
        for s in streams:
            c = CommandList()
            c.barrier(signal=sem.id)
            c.wait(sem.id, target)
            s._write([x.raw for x in c], None)
            s._barrier_end = s.commands_submitted
        sem.issued += len(streams)

    def _drop_barrier_semaphore(self, stream: Stream) -> None:
        """``stream``'s queue is being reset: if its last barrier's signal may not have
        executed (the host has not seen it retire), the barrier semaphore's cumulative count
        would never reach the targets of later barriers (every later barrier, on any
        streams, would wait for ever). Later barriers take a fresh semaphore; the old one is
        freed once the host has seen every other stream's work so far retire (streams that
        waited on the dropped signal wait on the reset stream's dropped work, as any wait on
        it does)."""
        old = self._barrier_sem
        if old is None or stream._barrier_end <= stream._done:
            return
        self._barrier_sem = None
        self.deferred.add(lambda now: old.free(),
                          [(s, s.commands_submitted) for s in self.streams.values()
                           if s is not stream])

    # -- memory -----------------------------------------------------------------------------------

    def alloc(self, nbytes: int, align: int = 64) -> Buffer:
        """Allocate ``nbytes`` bytes of device DRAM aligned to ``align`` bytes (out of room,
        first releasing what freed events and jobs held for retired work, as
        :meth:`alloc_semaphore`).

        Raises
        ------
        OutOfMemoryError
            If no free block is large enough.
        ValueError
            If ``nbytes < 1`` or ``align`` is not a power of two.
        """
        try:
            addr = self.allocator.alloc(nbytes, align)
        except OutOfMemoryError as e:
            if not self.deferred:
                raise
            self._reclaim()
            try:
                addr = self.allocator.alloc(nbytes, align)
            except OutOfMemoryError:
                raise OutOfMemoryError(f"{e}{self.deferred.holding('memory')}") from None
        return Buffer(self, addr, int(nbytes))

    def upload(self, array: npt.ArrayLike, align: int = 64) -> Buffer:
        """Allocate a buffer and copy the C-ordered raw bytes of ``array`` into it."""
        a = np.ascontiguousarray(array)
        buf = self.alloc(max(a.nbytes, 1), align)
        buf.write(a.tobytes())
        return buf

    def download(self, buffer: Buffer, dtype: npt.DTypeLike, shape: tuple[int, ...] | int,
                 offset: int = 0) -> np.ndarray:
        """Read an array of ``dtype`` and ``shape`` from ``buffer`` at byte ``offset``.

        Raises
        ------
        ValueError
            If the array does not fit in the buffer.
        """
        dt = np.dtype(dtype)
        shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
        n = math.prod(shape_t) * dt.itemsize
        return np.frombuffer(buffer.read(n, offset), dtype=dt).reshape(shape_t).copy()

    def memory_stats(self) -> AllocatorStats:
        """Allocator statistics (bytes)."""
        return self.allocator.stats()

    # -- errors and waiting -----------------------------------------------------------------

    def reset(self) -> None:
        """Reset the whole NPU (``CONTROL`` bit 0): every queue, error and semaphore.

        Commands not yet executed are dropped; command indices restart at 0; pool semaphores
        in use restart from 0.
        """
        if self.profiler is not None:
            self.profiler.queue_reset(self.streams)
        self.backend.csr_write(Csr.CONTROL, 1)
        self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE | IrqBit.ERROR)
        self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
        for stream in self.streams.values():
            stream._head = stream._tail = self.backend.csr_read(
                queue_csr(stream.queue, Csr.HEAD))
            stream._forget()
        for sem in self._sems_live.values():   # the semaphores restart from 0
            sem.base = sem.issued = 0
        self.deferred.release_all()     # their commands were dropped

    def _rearm_error_irq(self) -> None:
        if not self.backend.csr_read(Csr.QUEUE_ERRORS):
            self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.ERROR)
            self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)

    def _check_errors(self, streams: Iterable[Stream] | None = None) -> None:
        """Raise :class:`DeviceError` for the first of ``streams`` (default: all) whose queue
        has an error latched, after resetting that queue alone (not for a page fault of a
        stream that can resume it: :class:`PageFaultError`). A destroyed stream released
        from its queue is skipped: the queue may serve another stream."""
        rd = self.backend.csr_read
        bits = rd(Csr.QUEUE_ERRORS)
        if not bits:
            return
        check = self.streams.values() if streams is None else streams
        for stream in check:
            q = stream.queue
            if not bits >> q & 1 or self.streams.get(q) is not stream:
                continue
            word = unpack_fields(QueueErrorWord, rd(queue_csr(q, Csr.Q_ERR_CODE)))
            index, addr = rd(queue_csr(q, Csr.Q_ERR_CMD)), rd(queue_csr(q, Csr.Q_ERR_ADDR))
            code: ErrorCode | int = word.code
            opcode = word.opcode
            if index < len(stream._record):
                desc = describe_command(stream._record[index])
            else:
                desc = f"opcode {opcode:#04x}, not in this runtime's record"
            if code in PAGE_FAULTS and not stream.destroyed:
                # left stopped: the caller resumes, skips or resets
                self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE)
                raise PageFaultError(code, q, index, opcode, addr, desc, stream)
            stream._reset()
            raise DeviceError(code, q, index, opcode, addr, desc)
        # an error on a queue nobody waits for here: stop it from waking wait_irq
        self.backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE)

    @property
    def default_timeout_cycles(self) -> int:
        """The budget of a wait (:meth:`synchronize`, a full ring, an event) given no
        ``timeout_cycles``: :data:`DEFAULT_TIMEOUT_CYCLES` times the slowdown of the backend's
        DRAM timing (:meth:`sw.dram.DramTiming.slowdown`; 1 without one), so that work that
        fits the budget under ideal DRAM also fits it under a slow timing (cycles)."""
        slowdown = (1.0 if self.dram_timing is None
                    else self.dram_timing.slowdown(self.config.axi_data_bytes))
        return math.ceil(DEFAULT_TIMEOUT_CYCLES * slowdown)

    def _wait_until(self, done: Callable[[], bool], timeout_cycles: int | None, what: str,
                    streams: list[Stream], poll_cycles: int | None = None,
                    max_poll_cycles: int | None = None) -> None:
        """Wait for ``done()``, waking on interrupts or every ``poll_cycles`` (doubling up to
        ``max_poll_cycles`` after each wake-up if given); raise after ``timeout_cycles``
        (None: :attr:`default_timeout_cycles`)."""
        if timeout_cycles is None:
            timeout_cycles = self.default_timeout_cycles
        start = self.cycles()
        spent = 0  # lower bound of cycles waited, for backends whose counter does not move
        while True:
            if done():
                return
            self._check_errors(streams)
            elapsed = max(self.cycles() - start, spent)
            remaining = timeout_cycles - elapsed
            if remaining <= 0:
                blocked = self.diagnose()
                report = "; ".join(str(b) for b in blocked) or "no unsatisfied semaphore wait"
                raise DeviceTimeoutError(
                    f"{what}: no completion after {timeout_cycles:,} cycles (deadlocked, or "
                    "slower than that budget: give a larger timeout_cycles); deadlock "
                    f"report: {report}; "
                    + ", ".join(f"{k}={v:#x}" for k, v in self.status().items()), blocked)
            step = remaining if poll_cycles is None else min(remaining, poll_cycles)
            horizon = None if self.profiler is None else self.profiler.poll()
            if horizon is not None:
                step = min(step, horizon)
            if poll_cycles is not None and max_poll_cycles is not None:
                poll_cycles = min(2 * poll_cycles, max_poll_cycles)
            if self.backend.wait_irq(step):
                # A fence interrupt: fences are detected through their DRAM word, so clear it
                # to let wait_irq wait again. An error is picked up by _check_errors.
                self.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
                spent += 1
            else:
                spent += step

    def region(self, name: str) -> contextlib.AbstractContextManager:
        """Context manager marking a named stretch of work (a kernel, e.g. ``"query"``).

        A backend with a ``region(name)`` context manager gets the call (the RTL backend
        uses it to choose the waveform window by kernel, ``npu run --waves-kernel NAME``);
        while profiling, the :attr:`profiler` records its entry and exit cycles (regions
        nest: a layer around its kernels). Otherwise it does nothing.
        """
        hook = getattr(self.backend, "region", None)
        inner = hook(name) if hook is not None else contextlib.nullcontext()
        return inner if self.profiler is None else self.profiler.region(name, inner)

    # -- default stream -----------------------------------------------------------------------

    @property
    def queue(self) -> int:
        """The default stream's hardware queue."""
        return self.default_stream.queue

    @property
    def commands_submitted(self) -> int:
        return self.default_stream.commands_submitted

    def launch(self, commands: Iterable[Command | bytes], *,
               timeout_cycles: int | None = None) -> None:
        """:meth:`Stream.launch` on the default stream, unordered (as the single-queue runtime:
        the caller's semaphores order the work)."""
        self.default_stream.launch(commands, timeout_cycles=timeout_cycles, ordered=False)

    def synchronize(self, timeout_cycles: int | None = None, *,
                    timeout: int | None = None) -> int:
        """:meth:`Stream.synchronize` of the default stream; returns the cycles elapsed."""
        return self.default_stream.synchronize(timeout_cycles, timeout=timeout)

    def run(self, commands: Iterable[Command | bytes],
            timeout_cycles: int | None = None) -> int:
        """:meth:`launch` then :meth:`synchronize`; returns the cycles elapsed."""
        self.launch(commands, timeout_cycles=timeout_cycles)
        return self.synchronize(timeout_cycles)
