"""Semaphores from the runtime's pool, events (a point in a stream's work) and the deadlock
report of a queue blocked on a semaphore.

Every "has the semaphore reached its target" decision is :func:`hw.isa.sem_reached`, the
serial-number comparison the hardware and the functional model make (``(value - target) mod
2**32 < 2**31``), so events and waits keep working when a semaphore wraps at 2**32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hw.isa import sem_reached
from sw.runtime.errors import NPUError

if TYPE_CHECKING:
    from sw.runtime.device import Device
    from sw.runtime.memory import Buffer
    from sw.runtime.streams import Stream

__all__ = ["BlockedCommand", "Semaphore", "Event", "Deferred", "SEM_MODULUS"]

SEM_MODULUS = 1 << 32  #: semaphores are 32-bit counters that wrap (:class:`hw.isa.Csr`)

@dataclass(frozen=True)
class BlockedCommand:
    """Diagnosis of a queue that does not progress: its first submitted command whose
    semaphore wait is not satisfied.

    Attributes
    ----------
    queue, command_index : int
        Where the command is.
    description : str
        :func:`describe_command` of it.
    sem, value, current : int
        It waits for ``sem[sem]`` to reach ``value`` (:func:`hw.isa.sem_reached`); the
        semaphore holds ``current``.
    last_signal : tuple of (int, int) or None
        ``(queue, command index)`` of the command that last incremented the semaphore
        (``SEM_LAST``), or None if nothing did since the last ``CONTROL`` clear.
    """
    queue: int
    command_index: int
    description: str
    sem: int
    value: int
    current: int
    last_signal: tuple[int, int] | None

    def __str__(self) -> str:
        last = ("never signalled" if self.last_signal is None else
                f"last signalled by queue {self.last_signal[0]} command #{self.last_signal[1]}")
        return (f"queue {self.queue} waits at command #{self.command_index} "
                f"({self.description}) on semaphore {self.sem} >= {self.value}: it holds "
                f"{self.current}, {last}")


class Semaphore:
    """A device semaphore taken from the runtime's pool (:meth:`Device.alloc_semaphore`).

    Attributes
    ----------
    id : int
        The semaphore index.
    base : int
        Its value when it was allocated, or as :meth:`Device.set_semaphore` moved it (nothing
        else signals it while it is owned).
    issued : int
        Signals enqueued by the owner since allocation; ``base + issued`` (modulo 2**32) is
        the value once all of them executed.
    """

    def __init__(self, device: Device, sem_id: int) -> None:
        self.device = device
        self.id = sem_id
        self.base = device.semaphore(sem_id)
        self.issued = 0
        self._freed = False

    @property
    def freed(self) -> bool:
        """True once :meth:`free` returned it to the pool."""
        return self._freed

    def target(self, n: int = 0) -> int:
        """The value after the first ``issued + n`` signals (32-bit)."""
        return (self.base + self.issued + n) % SEM_MODULUS

    def value(self) -> int:
        """The semaphore's current value (CSR read)."""
        return self.device.semaphore(self.id)

    def free(self) -> None:
        """Return the semaphore to the pool (its owner must not signal it any more)."""
        if not self._freed:
            self._freed = True
            self.device._sem_pool.append(self.id)
            self.device._sems_live.pop(self.id, None)

    def __repr__(self) -> str:
        return f"<Semaphore {self.id} base={self.base} issued={self.issued}>"


class Event:
    """A point in a stream's work, in the idiom of CUDA events, backed by one semaphore.

    :meth:`record` on a stream appends a ``FENCE`` that, once every earlier command of the
    stream retired, writes the cycle counter to a DRAM word (the event's timestamp),
    increments the event's semaphore and raises the fence interrupt (:meth:`synchronize`
    sleeps until an interrupt). :meth:`Stream.wait_event` appends a ``WAIT`` for that
    value. Unlike CUDA, waiting on an event that was never recorded waits for its *first*
    recording (a never-recorded event is a bug the watchdog then reports, not a no-op).

    After :meth:`free` the event's semaphore may back another event: every use of a freed
    event raises :class:`~sw.runtime.errors.NPUError`.

    Raises
    ------
    OutOfSemaphoresError
        If no semaphore is free.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        self.sem = device.alloc_semaphore()
        #: per stream, the timestamp word its recordings write (:meth:`Stream.alloc`'d there)
        self._words: dict[Stream, Buffer] = {}
        self._last_word: Buffer | None = None
        self.recorded_on: Stream | None = None
        #: per queue, the commands the latest recording completes after (sw.runtime.local)
        self._clock: dict[int, int] = {}
        #: streams that waited for the first recording before it happened
        self._waiters: list[Stream] = []
        #: per stream, its commands_submitted after its last recording's FENCE or WAIT on it
        self._pending: dict[Stream, int] = {}
        self._freed = False

    def _check_live(self) -> None:
        if self._freed:
            raise NPUError(f"the event on semaphore {self.sem.id} was freed (its semaphore "
                           "may back another event now)")

    @property
    def target(self) -> int:
        """Semaphore value that marks the latest recording (or the first, if never
        recorded)."""
        return self.sem.target(0 if self.sem.issued else 1)

    def record(self, stream: Stream) -> Event:
        """Record the event at the current end of ``stream`` (see the class docstring)."""
        return stream.record(self)

    def query(self) -> bool:
        """True once the latest recording has completed (False if never recorded).

        Raises
        ------
        NPUError
            If the event was freed.
        """
        self._check_live()
        if not self.sem.issued:
            return False
        if self.recorded_on is not None:
            self.recorded_on._check_error()
        done = sem_reached(self.sem.value(), self.target)
        if done and self.recorded_on is not None:
            self.recorded_on._completed(self._clock)
        return done

    def synchronize(self, timeout_cycles: int | None = None) -> None:
        """Wait until the event completed.

        Raises
        ------
        DeviceTimeoutError
            With a deadlock report (:class:`BlockedCommand` list in ``blocked``).
        DeviceError
            If the recording stream failed.
        NPUError
            If the event was freed.
        """
        self._check_live()
        streams = [self.recorded_on] if self.recorded_on is not None else []
        self.device._wait_until(lambda: sem_reached(self.sem.value(), self.target),
                                timeout_cycles, f"event on semaphore {self.sem.id}", streams)
        if self.recorded_on is not None:
            self.recorded_on._completed(self._clock)

    def timestamp(self) -> int:
        """Low 32 bits of ``CYCLES`` when the latest recording completed (0 on the model).

        Raises
        ------
        NPUError
            If the event has not completed, or its latest recording was on a stream with a
            window that was destroyed since (the word was freed with the window).
        """
        if not self.query() or self._last_word is None:
            raise NPUError(f"event on semaphore {self.sem.id} has not completed")
        return int.from_bytes(self._last_word.read(4), "little")

    def elapsed_cycles(self, end: Event) -> int:
        """Cycles from this event's completion to ``end``'s (both must have completed; 32-bit
        wrapping difference, so intervals up to 2**32 cycles)."""
        return (end.timestamp() - self.timestamp()) % (1 << 32)

    def free(self) -> None:
        """Release the semaphore and the timestamp words (a second call does nothing). A
        recording (its ``FENCE`` signals the semaphore and writes a word) or a wait on the
        event that the host has not seen retire keeps them until it has (as
        ``cudaEventDestroy`` does): reused earlier, the semaphore would release the wait or
        complete another event, and the word would be written over another buffer."""
        if self._freed:
            return
        self._freed = True
        words = [(s, w) for s, w in self._words.items() if not w.freed]
        self._words.clear()

        def release(now: bool) -> None:
            from sw.runtime.vm import free_unwaited
            for stream, word in words:
                if not word.freed:
                    free_unwaited(word, stream, now)
            self.sem.free()
        self.device.deferred.add(release, list(self._pending.items()))

    def _word_for(self, stream: Stream) -> Buffer:
        if stream not in self._words:
            self._words[stream] = stream.alloc(4)
        return self._words[stream]


class Deferred:
    """Releases held back until the host knows some commands retired (:meth:`Event.free`,
    ``LinearJob.free``: a semaphore or buffer handed out again earlier could be signalled or
    written by them; :meth:`Stream.destroy`: its queue, ring and binding). Each release
    waits for ``(stream, position)`` pairs: the stream's first ``position`` commands
    retired, as the stream's ``_done`` tells (host synchronizations advance it,
    ``Stream._completed``). Releases take ``now``: True when called from the freeing call
    itself (it may wait on the device), False from inside a host call that learned of the
    completion (it must not wait, :func:`sw.runtime.vm.free_unwaited`)."""

    def __init__(self) -> None:
        self._items: list[tuple[Callable[[bool], None], list[tuple[Stream, int]]]] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, release: Callable[[bool], None], pending: list[tuple[Stream, int]]) -> None:
        """Release now if everything ``pending`` is known retired, else hold it."""
        if all(s._done >= pos for s, pos in pending):
            release(True)
        else:
            self._items.append((release, list(pending)))

    def release_ready(self) -> None:
        """Release what is known retired by now (taken off the list first: a release may
        launch a command, and learn of more completions)."""
        ready, keep = [], []
        for item in self._items:
            (ready if all(s._done >= pos for s, pos in item[1]) else keep).append(item)
        self._items = keep
        for release, _ in ready:
            release(False)

    def release_all(self) -> None:
        """Release everything (after a ``CONTROL`` reset dropped the commands)."""
        items, self._items = self._items, []
        for release, _ in items:
            release(True)

    def holding(self, what: str) -> str:
        """``"; N freed event(s), job(s) or destroyed stream(s) hold <what> ..."`` for an
        out-of-resource error, or "" if nothing is held."""
        if not self._items:
            return ""
        streams = {s for _, pending in self._items for s, _ in pending}
        live = sorted(s.queue for s in streams if not s.destroyed)
        dead = sorted(s.queue for s in streams if s.destroyed)
        how = [f"synchronize stream(s) {', '.join(map(str, live))}"] if live else []
        if dead:    # (a destroyed stream cannot be synchronized)
            queues = ", ".join(map(str, dead))
            take = f"queue={dead[0]}" if len(dead) == 1 else "queue=q"
            how.append(f"for the destroyed stream(s) of queue(s) {queues}, synchronize an "
                       f"event recorded there before the destroy, or Device.create_stream("
                       f"{take}), which waits for that work")
        return (f"; {len(self._items)} freed event(s), job(s) or destroyed stream(s) hold "
                f"{what} until the host sees their work retire ({'; '.join(how)})")
