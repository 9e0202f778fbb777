"""The contract between the NPU's hardware and its software, defined once:

* :mod:`hw.isa.commands`: command layouts (:class:`Command` and its bodies), opcodes, error
  codes, :func:`encode` / :func:`decode`;
* :mod:`hw.isa.registers`: the CSR map and the layout of every packed register and trace entry;
* :mod:`hw.isa.counters`: performance counter names, definitions and registers;
* :mod:`hw.isa.numerics`: numerics constants (vector unit, int4, OCP MX);
* :mod:`hw.isa.formats`: the MATMUL operand formats (int8, int4, MXINT8) and their tile layouts;
* :mod:`hw.isa.timing`: engine timing, in cycles, as functions of a command and the
  :class:`~hw.config.NPUConfig` (the DMA's in :mod:`hw.isa.dma_timing`).

Everything is re-exported here: ``from hw.isa import Opcode, Csr, COUNTER_NAMES``.

Concurrency: what is guaranteed when work runs at the same time
------------------------------------------------------------------
Engines and queues run concurrently, so some results depend on timing. Every implementation
(the RTL, :mod:`sw.model`, :mod:`sw.perf`) gives the same results where the following says
so; the differential fuzzer (:mod:`cosim.fuzz`) compares exactly that and no more.

*Happens-before.* Command ``a`` happens before ``b`` when: both are in one queue and on one
engine (an engine runs its commands of a queue in order, one at a time); ``a`` is a processor
command (NOP, WAIT, SIGNAL, BARRIER, FENCE) and ``b`` comes later in its queue (the stage
holds later commands back until it completes); ``b`` is a BARRIER or FENCE and ``a`` is
earlier in its queue; ``b`` waits for ``sem[s]`` to reach ``v`` and ``a`` made one of the
first ``v`` increments counted from the value before (when the increments of ``s`` come from
commands that are themselves ordered, that is the ``v``-th of them); or transitively. Nothing
else orders commands: two engines of one queue, and two queues, are not ordered.

*Memory.* If every two accesses to the same DRAM byte or local row, one of them a write, are
ordered by happens-before, DRAM, the scratchpad and the accumulator end the same on every
implementation and under every DRAM timing. Unordered conflicting accesses leave the
result unspecified (it may change with timing). A failing command writes nothing, except
the documented partial effects of ``AXI_ERROR`` (:class:`ErrorCode`). A FENCE with
``timestamp`` writes the cycle counter: a timing result.

*Semaphores.* Each ends at its value plus one per command that signalled it and retired
without error (modulo ``2**32``; a host write sets it). ``SEM_LAST`` names the last
increment: the same everywhere when the signalling commands of that semaphore are ordered,
else any of them that was not ordered before another.

*Errors.* An error stops its queue only: no command of that queue starts after the error is
latched; a command already in an engine runs to its end. Commands of the queue that were
fetched ahead but had not started are dropped. So, in general, which of the failing
command's neighbours ran depends on timing. When the failing command ``i`` has a BARRIER
(or FENCE) before it and after it, everything before it retired, nothing after it started,
and the queue's report (``Q_ERR_*``: code, opcode, index ``i``, address) is exact; ``HEAD``
is then ``i`` for an error found at fetch (``BAD_OPCODE``, ``BAD_SEM``, the ring checks, an
``AXI_ERROR`` of the fetch), ``i + 1`` for a FENCE, and ``i + 1`` or ``i + 2`` for an
engine's error (the BARRIER after it may or may not have been taken into the stage when the
queue stopped; so ``Q_FETCHED`` too). ``bytes_read`` depends on timing around an error: the
command processor reads up to ``fetch_depth`` commands of a queue ahead of its stage (several
per burst), a failing burst of several commands is read again one command per burst, and a
fetch burst under way when the queue stopped still completes on the bus (counters read just
then may hold part of its beats).
``ERR_*`` holds the first error latched:
when several queues fail in the same window, which one depends on timing, and it is always
one of the queues' reports. ``QUEUE_ERRORS`` and ``IRQ_STATUS.ERROR`` do not depend on it.

*Traces and counters.* Each engine's trace holds its retired commands (failing ones
included); the entries of one queue are in that queue's order, the interleaving of queues
and all cycles are timing. With more than ``trace_depth`` retirements the first
``trace_depth`` are kept (so, per queue, a prefix) and ``overflow`` is set. The retired
counters and ``bytes_written`` count what ran; cycles, busy and stall counters are timing.
``IRQ_STATUS.FENCE`` is set if any fence with ``flags.irq`` wrote its word.
"""

from hw.isa.commands import *  # noqa: F403
from hw.isa.commands import __all__ as _commands
from hw.isa.counters import *  # noqa: F403
from hw.isa.counters import __all__ as _counters
from hw.isa.formats import *  # noqa: F403
from hw.isa.formats import __all__ as _formats
from hw.isa.numerics import *  # noqa: F403
from hw.isa.numerics import __all__ as _numerics
from hw.isa.registers import *  # noqa: F403
from hw.isa.registers import __all__ as _registers
from hw.isa.timing import *  # noqa: F403
from hw.isa.timing import __all__ as _timing

__all__ = [*_commands, *_registers, *_counters, *_numerics, *_formats, *_timing]
