"""Streams: one hardware command queue each, with its ring buffer in device DRAM, in the idiom
of CUDA streams."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from hw.isa import (
    COMMAND_BYTES,
    MAX_RING_SIZE,
    Csr,
    IrqBit,
    ResumeWord,
    StatusWord,
    pack_fields,
    queue_csr,
    ring_is_bad,
    unpack_fields,
)
from sw.runtime.commands import Command, CommandList
from sw.runtime.errors import LocalMemoryConflictError, StreamDestroyedError
from sw.runtime.local import LocalUse, merge_clock
from sw.runtime.memory import Allocator, ArenaBuffer, Buffer
from sw.runtime.sync import Event
from sw.runtime.vm import free_unwaited

if TYPE_CHECKING:
    from sw.runtime.device import Device
    from sw.runtime.vm import Context

__all__ = ["Stream", "RING_POLL_CYCLES", "RING_POLL_MAX_CYCLES"]

RING_POLL_CYCLES = 256  #: first interval at which a host waiting for ring space reads HEAD
RING_POLL_MAX_CYCLES = 65536  #: the interval doubles after each poll that found too little space


def check_ring_commands(n: int) -> None:
    """A stream's ring size must be one the hardware takes (:func:`hw.isa.ring_is_bad`), else
    ValueError."""
    if ring_is_bad(n, 0, 0):
        raise ValueError(f"ring_commands must be a power of two from 2 to {MAX_RING_SIZE}, "
                         f"got {n}")


class Stream:
    """A hardware command queue seen as a stream of work, in the idiom of CUDA streams.

    Commands launched on one stream run in launch order as far as their semaphores say;
    every :meth:`launch` after the first starts with a ``BARRIER``, so a kernel starts only
    after the stream's previous kernels retired (within a kernel, DMA and compute overlap as
    its semaphores allow). Different streams run concurrently and are ordered against each
    other only through events (:meth:`record`, :meth:`wait_event`).

    Create streams with :meth:`Device.create_stream`; a device's default stream is
    :attr:`Device.default_stream`. :meth:`destroy` gives the queue back once the stream's work
    retired.

    Parameters
    ----------
    device : Device
    queue : int
        The hardware queue.
    ring_commands : int
        Ring size in commands (power of two >= 2; holds one less).
    window_bytes : int, optional
        If given, the stream gets a private DRAM window: one contiguous block holding its
        ring, its fence word and an arena of ``window_bytes`` bytes (:meth:`alloc`), and the
        hardware refuses (``WINDOW`` error) every ring fetch, fence or DMA of this queue
        outside it. Otherwise the window is the whole DRAM.
    context : Context, optional
        The address space of the stream (``Q_VM``, :mod:`hw.isa.vm`): its DMA commands, its
        ring and its fence word use the context's virtual addresses (the ring and the fence
        word are allocated in it, for the stream's lifetime); :meth:`alloc` and
        :meth:`upload` allocate in it. None: physical addresses.

    Attributes
    ----------
    commands_submitted : int
        Commands launched on the queue: by this stream, and before it by the destroyed
        streams the queue served in this :class:`Device` (a position on a queue names one
        command whichever stream launched it: events and the ordering of
        :mod:`sw.runtime.local` count so).
    destroyed : bool
        :meth:`destroy` was called; every later use raises
        :class:`~sw.runtime.errors.StreamDestroyedError`.

    Raises
    ------
    ValueError
        If the queue's ``HEAD`` (``TAIL`` after its reset) lies outside a ring of
        ``ring_commands``: a queue keeps them across devices on one backend, so a ring smaller
        than the last one on that queue cannot be set up (the hardware would report
        ``BAD_SIZE``, :func:`hw.isa.ring_is_bad`). What the stream allocated is freed, and
        the queue's ring registers are left as they were.
    """

    def __init__(self, device: Device, queue: int, ring_commands: int,
                 window_bytes: int | None = None, *, context: Context | None = None) -> None:
        self.device = device
        self.queue = queue
        self.context = context
        self.ring_size = ring_commands
        ring_bytes = ring_commands * COMMAND_BYTES
        self._arena: Allocator | None = None
        if window_bytes is None:
            self._region = None
            where = device if context is None else context
            self.ring = where.alloc(ring_bytes, align=64)
            self._fence_word = where.alloc(4, align=64)
            self.window = (0, device.config.dram_bytes)
        else:
            total = ring_bytes + 64 + int(window_bytes)
            self._region = device.alloc(total, align=4096)
            self.ring = Buffer(device, self._region.addr, ring_bytes)
            self._fence_word = Buffer(device, self._region.addr + ring_bytes, 4)
            self._arena = Allocator(self._region.addr + ring_bytes + 64, int(window_bytes))
            self.window = (self._region.addr, self._region.addr + total)
        self._fence_word.write(bytes(4))
        self._fence_seq = 0
        self._record: list[bytes] = []
        self._window_start: int | None = None
        self._need_barrier = False
        self.destroyed = False
        self._barrier_end = 0       # commands_submitted after its last Device.barrier
        self.commands_submitted = device._queue_commands.get(queue, 0)
        #: launches with a LocalUse not known complete: (commands_submitted after it, use)
        self._uses: list[tuple[int, LocalUse]] = []
        #: per other queue, how many of its commands this stream's later work runs after
        self._after: dict[int, int] = {}
        #: how many of this stream's commands the host knows retired
        self._done = self.commands_submitted
        try:
            self._setup()
        except ValueError:
            for block in (self._region,) if self._region else (self.ring, self._fence_word):
                block.free()
            raise

    # -- set-up -----------------------------------------------------------------------------

    def _setup(self) -> None:
        wr, q = self.device.backend.csr_write, self.queue
        wr(Csr.QUEUE_RESET, 1 << q)
        # HEAD = TAIL now; a queue keeps them across devices on one backend
        self._head = self.device.backend.csr_read(queue_csr(q, Csr.HEAD))
        if self._head >= self.ring_size:
            need = 1 << self._head.bit_length()
            fix = (f"use ring_commands of at least {need} or a new backend"
                   if need <= MAX_RING_SIZE else "use a new backend")
            raise ValueError(
                f"queue {q}'s HEAD is {self._head}, outside a ring of {self.ring_size} "
                f"commands (a queue keeps HEAD across its streams and across devices on one "
                f"backend, from an earlier ring or TAIL write): {fix}")
        base, limit = self.window
        wr(queue_csr(q, Csr.WINDOW_BASE), base)
        wr(queue_csr(q, Csr.WINDOW_LIMIT), 0 if self._region is None else limit)
        if self.context is not None:        # (the device cleared every queue's Q_VM)
            wr(queue_csr(q, Csr.Q_VM), self.context.vm_word)
        wr(queue_csr(q, Csr.RING_BASE), self.ring.addr)
        wr(queue_csr(q, Csr.RING_SIZE), self.ring_size)
        self._tail = self._head
        wr(queue_csr(q, Csr.TAIL), self._tail)
        self._forget()

    def _forget(self) -> None:
        # (the local-memory uses stay until the host sees the stream complete: a command
        # that was inside an engine at a reset still finishes; the waits were dropped, so
        # later work runs after nothing of the other streams)
        self._after.clear()
        self._record.clear()
        self._window_start = None
        self._need_barrier = False

    def alloc(self, nbytes: int, align: int = 64) -> Buffer:
        """Allocate device memory this stream may touch: from its private arena if it has a
        window, else from the device.

        Raises
        ------
        OutOfMemoryError
            If the arena (or DRAM) has no block large enough.
        StreamDestroyedError
            If the stream was destroyed (as every method of a destroyed stream).
        """
        self._check_live()
        if self.context is not None:
            return self.context.alloc(nbytes, align)
        if self._arena is None:
            return self.device.alloc(nbytes, align)
        return ArenaBuffer(self, self._arena.alloc(nbytes, align), int(nbytes))

    def upload(self, array: npt.ArrayLike, align: int = 64) -> Buffer:
        """:meth:`alloc` a buffer and copy ``array``'s raw bytes into it."""
        a = np.ascontiguousarray(array)
        buf = self.alloc(max(a.nbytes, 1), align)
        buf.write(a.tobytes())
        return buf

    # -- submission -------------------------------------------------------------------------

    def launch(self, commands: Iterable[Command | bytes], *,
               timeout_cycles: int | None = None, ordered: bool = True,
               local: LocalUse | None = None) -> None:
        """Append ``commands`` to the stream and ring the doorbell.

        With ``ordered`` (default), a ``BARRIER`` goes first if the stream has unsynchronized
        work, so these commands start after everything launched before on this stream.
        Handles ring wrap-around; when the ring is full, rings the doorbell for what is
        written and polls ``HEAD`` until a quarter of the ring (or all that is left to write)
        is free, at an interval that starts at ``RING_POLL_CYCLES`` and doubles after each poll
        (each poll is an MMIO round trip, and under co-simulation a Python one; the quarter
        refilled is at most a third of what is still queued, so the device is not starved).

        ``local``: the scratchpad and accumulator rows the commands use (a kernel's), checked
        against the launches of other streams that may run at the same time
        (:mod:`sw.runtime.local`).

        Raises
        ------
        TypeError, ValueError
            If a command is neither a :class:`Command` nor :data:`hw.isa.COMMAND_BYTES` bytes
            (nothing is written).
        LocalMemoryConflictError
            If ``local`` overlaps the rows of a launch on another stream that nothing orders
            this one after and that the host has not seen complete (nothing is written).
        DeviceError
            If this stream's queue reports an error while the runtime waits for ring space.
        DeviceTimeoutError
            If the ring stays full for ``timeout_cycles`` cycles (with a deadlock report).
        """
        self._check_live()
        raws = [_raw(i, c) for i, c in enumerate(commands)]
        if local is not None:
            self.check_local(local)
        if ordered and self._need_barrier and raws:
            barrier = CommandList()
            barrier.barrier()
            raws.insert(0, barrier[0].raw)
        if raws:
            self._need_barrier = True
        self._write(raws, timeout_cycles)
        if local is not None:
            if self._uses and self._uses[-1][1].same_rows(local):
                self._uses.pop()        # the later of two equal uses stands for both
            self._uses.append((self.commands_submitted, local))

    def check_local(self, use: LocalUse) -> None:
        """Raise :class:`~sw.runtime.errors.LocalMemoryConflictError` if a launch of ``use``
        now would overlap a launch of another stream that may run at the same time (see
        :mod:`sw.runtime.local`); kernels call it before they allocate or count anything, and
        :meth:`launch` again."""
        self._check_live()
        for q, other in self.device.streams.items():
            if other is self:
                continue
            after = self._after.get(q, 0)
            for pos, theirs in other._uses:
                hit = None if pos <= after else use.overlap(theirs)
                if hit:
                    how = (f"wait_event on an event recorded on stream {q} after it, "
                           f"Device.barrier, or synchronize stream {q} first")
                    if other.destroyed:     # (neither can be used any more)
                        how = (f"stream {q} was destroyed: wait_event on, or synchronize, an "
                               f"event recorded on it after that launch (before the destroy), "
                               f"or Device.create_stream(queue={q}), which waits for its work")
                    raise LocalMemoryConflictError(
                        f"{use.what} on stream {self.queue} and {theirs.what} launched on "
                        f"stream {q} may run at the same time on {hit}: give each its own "
                        f"spad_region/acc_region, or order them ({how}); nothing was launched")

    def _completed(self, clock: dict[int, int]) -> None:
        """The host saw every command before ``clock[q]`` of each queue ``q`` retire."""
        for q, pos in clock.items():
            s = self.device.streams.get(q)
            if s is not None and pos > s._done:
                s._done = pos
                s._uses = [u for u in s._uses if u[0] > pos]
        self.device.deferred.release_ready()

    def _all_done(self) -> None:
        """Every command launched here retired, and so did what this stream ran after."""
        self._completed({**self._after, self.queue: self.commands_submitted})

    def _write(self, raws: list[bytes], timeout_cycles: int | None) -> None:
        dev = self.device
        if dev.profiler is not None:      # drain the command trace if it could overflow
            dev.profiler.poll(raws)
        if self._window_start is None:
            self._window_start = dev.cycles()
        i = 0
        batch = max(1, self.ring_size // 4)
        while i < len(raws):
            free = self._ring_free()
            if free == 0:
                # no interrupt announces ring space: poll HEAD, backing off, until a batch fits
                want = min(batch, len(raws) - i)
                dev._wait_until(lambda want=want: self._refresh_head() >= want,
                                timeout_cycles, f"ring space of queue {self.queue}", [self],
                                poll_cycles=RING_POLL_CYCLES,
                                max_poll_cycles=RING_POLL_MAX_CYCLES)
                continue
            n = min(free, len(raws) - i, self.ring_size - self._tail)
            chunk = raws[i:i + n]
            self.ring.write(b"".join(chunk), self._tail * COMMAND_BYTES)
            self._record.extend(chunk)
            self._tail = (self._tail + n) % self.ring_size
            dev.backend.csr_write(queue_csr(self.queue, Csr.TAIL), self._tail)
            self.commands_submitted += n
            i += n

    def _ring_free(self) -> int:
        free = self.ring_size - 1 - (self._tail - self._head) % self.ring_size
        return free if free else self._refresh_head()

    def _refresh_head(self) -> int:
        self._head = self.device.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        return self.ring_size - 1 - (self._tail - self._head) % self.ring_size

    # -- events -------------------------------------------------------------------------------

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) here: it completes once every command launched
        on this stream so far retired; its timestamp is the cycle counter then.

        Raises
        ------
        OutOfSemaphoresError
            If a new event is needed and no semaphore is free.
        NPUError
            If ``event`` was freed.
        """
        self._check_live()
        ev = Event(self.device) if event is None else event
        ev._check_live()
        word = ev._word_for(self)
        cmds = CommandList()
        # irq: Event.synchronize sleeps in wait_irq until an interrupt, so the recording
        # must raise one (without it the host slept to the end of its timeout whenever no
        # other fence interrupted after the event completed)
        cmds.fence(addr=word.addr, timestamp=True, irq=True, signal=ev.sem.id)
        self._write([cmds[0].raw], None)
        ev.sem.issued += 1
        ev._last_word = word
        ev.recorded_on = self
        ev._clock = {**self._after, self.queue: self.commands_submitted}
        ev._pending[self] = self.commands_submitted
        for waiter in ev._waiters:      # their waits were for this, the first recording
            merge_clock(waiter._after, ev._clock)
        ev._waiters.clear()
        return ev

    def wait_event(self, event: Event) -> None:
        """Make every command launched on this stream from now on wait until ``event``
        completed (its latest recording, or its first if it was never recorded).

        Raises
        ------
        NPUError
            If ``event`` was freed.
        """
        self._check_live()
        event._check_live()
        cmds = CommandList()
        cmds.wait(event.sem.id, event.target)
        self._write([cmds[0].raw], None)
        event._pending[self] = self.commands_submitted
        if event.recorded_on is None:
            event._waiters.append(self)
        merge_clock(self._after, event._clock)

    def query(self) -> bool:
        """True if every command launched on this stream retired (``Q_STATUS.busy`` low).

        Raises
        ------
        DeviceError
            If the stream's queue has an error latched.
        """
        self._check_live()
        self._check_error()
        idle = self._idle()
        if idle:
            self._all_done()
        return idle

    def _idle(self) -> bool:
        """``Q_STATUS``: no unretired command and no error latched (no wait)."""
        status = unpack_fields(StatusWord, self.device.backend.csr_read(
            queue_csr(self.queue, Csr.Q_STATUS)))
        return not status.busy and not status.error

    def synchronize(self, timeout_cycles: int | None = None, *,
                    timeout: int | None = None) -> int:
        """Wait until every command launched on this stream retired.

        Appends a ``FENCE`` (with ``irq``) that writes a new sequence number to the stream's
        fence word and waits with :meth:`Backend.wait_irq` until the word holds it.

        Parameters
        ----------
        timeout_cycles, timeout : int, optional
            Budget in device clock cycles (``timeout`` is an alias); by default
            :attr:`Device.default_timeout_cycles` (scaled by the DRAM timing's slowdown).

        Returns
        -------
        int
            Cycles from the first launch since the previous synchronize to the completion
            (``CYCLES`` after minus before); 0 on the untimed model.

        Raises
        ------
        DeviceError
            If this stream's queue reported an error; that queue is reset first (its pending
            commands are dropped, the other queues go on).
        DeviceTimeoutError
            If the fence did not complete in time; the message and ``blocked`` say which
            queue waits on which semaphore and what last signalled it.
        """
        self._check_live()
        if timeout is not None:
            timeout_cycles = timeout
        seq = (self._fence_seq + 1) % (1 << 32) or 1
        self._fence_seq = seq
        fence = CommandList()
        fence.fence(addr=self._fence_word.addr, value=seq, irq=True)
        self._write([fence[0].raw], timeout_cycles)
        word = self._fence_word
        self.device._wait_until(lambda: int.from_bytes(word.read(4), "little") == seq,
                                timeout_cycles, f"synchronize of queue {self.queue}", [self])
        self.device.backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
        self._all_done()
        start = self._window_start or 0
        self._window_start = None
        self._need_barrier = False
        return self.device.cycles() - start

    def reset(self) -> None:
        """Reset this stream's queue alone (``QUEUE_RESET``): pending commands are dropped,
        its error is cleared; semaphores and other streams are not touched."""
        self._check_live()
        self._reset()

    def _reset(self) -> None:
        dev = self.device
        dev._drop_barrier_semaphore(self)
        if dev.profiler is not None:
            dev.profiler.queue_reset([self.queue])
        dev.backend.csr_write(Csr.QUEUE_RESET, 1 << self.queue)
        self._head = self._tail = dev.backend.csr_read(queue_csr(self.queue, Csr.HEAD))
        self._forget()
        dev._rearm_error_irq()

    def bind(self, context: Context) -> None:
        """Put this stream (with no work pending) in ``context`` from now on (``Q_VM``): its
        ring and fence word move into the context (the physical ones are freed) and the
        queue is set up again.

        Raises
        ------
        ValueError
            If the stream is already in a context or has a window.
        NPUError
            If ``context`` was destroyed (the stream is left as it was).
        """
        self._check_live()
        if self.context is not None:
            raise ValueError(f"stream of queue {self.queue} is already in a context")
        if self._region is not None:
            raise ValueError("a stream with a window cannot go into a context")
        context._check_live()           # (before the ring is freed)
        ring_bytes = self.ring.nbytes
        self.ring.free()
        self._fence_word.free()
        self.context = context
        self.ring = context.alloc(ring_bytes, align=64)
        self._fence_word = context.alloc(4, align=64)
        self._fence_word.write(bytes(4))
        self._fence_seq = 0
        self._setup()

    def destroy(self) -> None:
        """Destroy the stream, as ``cudaStreamDestroy``: return at once; the work launched on
        it still runs, and once the host has seen it retire, the queue is given back (a new
        stream may take it), the ring and the fence word (or the window, with the buffers
        of its arena) are freed and the stream leaves its context (which
        :meth:`~sw.runtime.vm.Context.destroy` can then free). The release goes through the
        device's deferred releases (:class:`~sw.runtime.sync.Deferred`, as
        :meth:`Event.free`): the host sees the work retire when something waits for it (an
        event recorded on the stream, or a stream ordered after it), when it runs out of
        memory or semaphores, and when :meth:`Device.create_stream` or
        :meth:`~sw.runtime.vm.Context.destroy` needs the queue or the binding: they wait for
        the work, and a device error in it (or a page fault: nobody can resume it any more)
        is raised there as a :class:`~sw.runtime.DeviceError`, the queue reset. Events
        recorded on the stream keep completing, and their :meth:`Event.query`,
        :meth:`Event.synchronize` and timestamps work on (but a timestamp word in the
        window is freed with it).

        Raises
        ------
        ValueError
            For the device's default stream (:meth:`Device.launch` and the runtime's TLB
            invalidations use it).
        StreamDestroyedError
            If the stream was already destroyed.
        """
        self._check_live()
        if self is self.device.default_stream:
            raise ValueError("the default stream cannot be destroyed (Device.launch, "
                             "Device.synchronize and the TLB invalidations use it)")
        self.destroyed = True
        self.device.deferred.add(self._release, [(self, self.commands_submitted)])

    def _release(self, now: bool) -> None:
        """The deferred release of :meth:`destroy`: every command of the stream retired."""
        dev, q = self.device, self.queue
        if self.context is not None:        # a queue without a stream is physical
            dev.backend.csr_write(queue_csr(q, Csr.Q_VM), 0)
        dev._queue_commands[q] = self.commands_submitted
        del dev.streams[q]
        if self._region is not None:
            self._region.free()
        else:       # (in a context: the unmap's TLB invalidate on the default stream, unwaited)
            for buf in (self.ring, self._fence_word):
                free_unwaited(buf, dev.default_stream, False)

    def _wait_retired(self, timeout_cycles: int | None = None) -> None:
        """Wait until the work of this destroyed stream retired (polling ``Q_STATUS``): its
        release runs then.

        Raises
        ------
        DeviceError
            If the queue reports an error (it is reset: the next wait finds it idle).
        DeviceTimeoutError
            If the work did not retire within ``timeout_cycles`` (default: the device's
            default budget).
        """
        self.device._wait_until(self._idle, timeout_cycles,
                                f"the work of the destroyed stream of queue {self.queue}",
                                [self], poll_cycles=RING_POLL_CYCLES,
                                max_poll_cycles=RING_POLL_MAX_CYCLES)
        self._all_done()

    def _check_live(self) -> None:
        if self.destroyed:
            raise StreamDestroyedError(
                f"the stream of queue {self.queue} was destroyed (Stream.destroy): create "
                "another with Device.create_stream")

    def resume(self) -> None:
        """After a :class:`~sw.runtime.PageFaultError` (once the page is mapped): run the
        faulted command again from its start, then the rest of the stream
        (``Q_RESUME.resume``)."""
        self._resume({"resume": 1})

    def skip(self) -> None:
        """After a :class:`~sw.runtime.PageFaultError`: retire the faulted command without
        moving data (it still signals its semaphore) and go on (``Q_RESUME.skip``)."""
        self._resume({"skip": 1})

    def _resume(self, fields: dict) -> None:
        self._check_live()
        dev = self.device
        dev.backend.csr_write(queue_csr(self.queue, Csr.Q_RESUME), pack_fields(ResumeWord,
                                                                              fields))
        dev._rearm_error_irq()

    def _check_error(self) -> None:
        self.device._check_errors([self])

    @property
    def next_index(self) -> int:
        """Index (in the queue's command count since its last reset, as in ``Q_ERR_CMD`` and
        the trace) that the next command launched on this stream will have."""
        return len(self._record)

    def __repr__(self) -> str:
        state = " destroyed" if self.destroyed else ""
        return (f"<Stream queue={self.queue} window=[{self.window[0]:#x}, "
                f"{self.window[1]:#x}){state}>")


def _raw(i: int, command: Command | bytes) -> bytes:
    """The encoded command ``i`` of a launch (see :meth:`Stream.launch`)."""
    if isinstance(command, Command):
        return command.raw
    if not isinstance(command, (bytes, bytearray, memoryview)):
        raise TypeError(f"command {i} of the launch is a {type(command).__name__}: a Command "
                        f"or {COMMAND_BYTES} encoded bytes is expected")
    raw = bytes(command)
    if len(raw) != COMMAND_BYTES:
        raise ValueError(f"command {i} of the launch is {len(raw)} bytes; a command is "
                         f"{COMMAND_BYTES}")
    return raw
