"""Engine timing, in cycles, as functions of a command and the :class:`~hw.config.NPUConfig`:
the one definition that the planner, the tests and the performance model use.

Pure Python (integer arithmetic only, no Amaranth at call time); every formula is derived
from the engine's FSM, named state by state, and checked for exact equality against the RTL
block in Amaranth's simulator over ranges of sizes on several array sizes
(``tests/hw/test_timing.py``; the DMA on a register-exact transcription of the co-simulation
DRAM, ``tests/hw/test_dma_timing.py``) and, one command of each kind, against the
``busy.<engine>`` counters of the Verilator NPU with ``cosim/tb/dram.sv`` on 8x8 and 4x4
(``tests/cosim/test_npu_rtl.py::test_engine_timing_on_rtl``).

What is counted
---------------
Every ``*_busy_cycles`` function returns the cycles an engine's ``busy`` is high for one
command: **from the cycle after the command handshake (``cmd.valid & cmd.ready``) to its
``done`` pulse, inclusive** -- exactly what the ``busy.<engine>`` counter adds
(:data:`hw.isa.COUNTER_NAMES`). An engine takes a command only in its idle state, which it
enters in the cycle after ``done``; so a command that is waiting when the previous one
finishes is accepted :data:`ACCEPT_CYCLES` cycle later, and back-to-back commands start every
``busy + ACCEPT_CYCLES`` cycles. ``done`` comes one cycle after the command's last write
(engines) or two cycles after its last bus beat (DMA). Every formula covers three cases:

* a successful command;
* a command of size zero (``m``, ``n_rows``, ``n_blocks`` or ``row_bytes`` 0): it checks nothing
  else and retires without error;
* a failing command (``error`` given): it retires without moving data.

DMA timing is given under the *ideal* DRAM of the co-simulation (``cosim/tb/dram.sv``): read
bursts queued (up to 16, never fewer than ``dma_outstanding``) and answered in order, the first
beat 3 cycles after the AR handshake, then one beat per cycle, one idle cycle between bursts
unless the last beat of a burst is held; writes one burst at a time (AW accepted in the idle
state, then the W beats, then B for one cycle). On the NPU the DMA reaches that DRAM through
:class:`hw.bus.arbiter.AXI4Arbiter`, which adds no cycle on an idle port (its write grant
overlaps the DRAM's response state); but it shares the port with the command fetch, and an
interleaved fetch burst delays the DMA, which these functions do not model; neither do they
model a local write denied by a higher-priority writer (``stall.load_spad`` /
``stall.load_acc``, one cycle each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hw.isa.commands import CommandView, ErrorCode, LocalMem, Opcode, decode
from hw.isa.numerics import SOFTMAX_RECIP_BITS

if TYPE_CHECKING:
    from hw.config import NPUConfig

__all__ = [
    "ACCEPT_CYCLES", "PAGE_BYTES", "MAX_BURST_BEATS", "DRAM_READ_LATENCY",
    "matmul_busy_cycles", "matmul_issue_cycles", "matmul_in_flight", "engine_in_flight",
    "MatmulTimes", "MatmulTimeline", "requant_busy_cycles", "softmax_busy_cycles",
    "softmax_row_cycles",
    "Burst", "dma_bursts", "dma_load_busy_cycles", "dma_store_busy_cycles", "dma_busy_cycles",
    "dma_error_busy_cycles", "command_busy_cycles", "dma_estimate_cycles",
]

#: Cycles from an engine's ``done`` to the handshake of a command that is already waiting (the
#: idle state, in which ``cmd.ready`` is high): back-to-back commands start every
#: ``busy + ACCEPT_CYCLES`` cycles.
ACCEPT_CYCLES = 1
#: An AXI4 burst must not cross a 4 KiB address boundary (ARM IHI 0022, A3.4.1).
PAGE_BYTES = 4096
#: Longest AXI4 INCR burst (AxLEN is 8 bits; ARM IHI 0022, A3.4.1).
MAX_BURST_BEATS = 256
#: ``cosim/tb/dram.sv``: cycles from a read burst's AR handshake to its first R beat when the
#: DRAM is idle (the AR is queued at the handshake edge, moved to the beat generator at the
#: next edge, whose ``RVALID`` register is loaded at the one after).
DRAM_READ_LATENCY = 3

#: Busy cycles of a compute command that retires without running: the check state, then the
#: retire state (``done``), in every engine (matrix, requant, softmax).
_CHECK_RETIRE = 2


# -- matrix engine --------------------------------------------------------------------------------

#: Cycles from an activation row's scratchpad read to its entry into the array: the read port's
#: latency and the activation register (which puts the weight swap one cycle after the first
#: weight row is written, as :class:`hw.tile.SystolicArray` needs).
_MATMUL_TO_ARRAY = 2


def _matmul_first_write(config: NPUConfig, a: int) -> int:
    """Cycle of the first accumulator write of a MATMUL whose issue starts in cycle ``a``: its
    first activation row enters the array ``_MATMUL_TO_ARRAY`` cycles after its read, leaves
    it ``rows + cols - 1`` later (:attr:`hw.tile.SystolicArray.latency`), and is written in
    the cycle after (the old row is read meanwhile)."""
    return a + _MATMUL_TO_ARRAY + (config.rows + config.cols - 1) + 1


def matmul_busy_cycles(config: NPUConfig, m: int, *, k_blocks: int = 1,
                       error: bool = False) -> int:
    """Busy cycles of one MATMUL of ``m`` activation rows and ``k_blocks >= 1`` K blocks
    (``k_len + 1``, :class:`hw.isa.MatmulBody`) on an idle matrix engine
    (:class:`hw.tile.MatrixEngine`): from the cycle after its handshake to its ``done``.

    Stages (``hw/tile/matrix_engine.py``): ``CHECK`` 1 (the command in the next-command
    register); the issue stage from the next cycle, :func:`matmul_issue_cycles` ``P`` per K
    block, which reads weight row ``k`` and activation row ``k`` of the block in its cycle
    ``k``; for the last block's rows, 2 cycles to the array (scratchpad read latency, the
    activation register), the array ``rows + cols - 1``, the accumulator write of each row
    1; ``done`` 1 cycle after the last write. Total ``(B - 1) * P + m + rows + cols + 4``
    for ``B`` blocks; ``flags.accumulate`` and ``flags.transpose`` change nothing.

    ``m == 0`` and a failing command (``error``: ``BAD_OPCODE``, ``BAD_SIZE``,
    ``BAD_LOCAL_ADDR``) take ``CHECK`` and their retire cycle: 2.

    Back-to-back MATMULs overlap (:class:`MatmulTimeline`): this is the latency of one
    command, not the cycles between two.
    """
    if error or m == 0:
        return _CHECK_RETIRE
    blocks = k_blocks
    # CHECK, then the issue stage from t + 2: the last block's last write, then done
    last_block = 2 + (blocks - 1) * _matmul_period(config, m)
    return _matmul_first_write(config, last_block) + m - 1 + 1


def _matmul_period(config: NPUConfig, m: int) -> int:
    return max(m, config.rows, config.cols)


def matmul_issue_cycles(config: NPUConfig, m: int, k_blocks: int = 1) -> int:
    """Cycles one MATMUL of ``m >= 1`` rows and ``k_blocks >= 1`` K blocks holds
    the matrix engine's issue stage: ``max(m, rows, cols)`` per block. Back-to-back MATMULs
    (the next one taken in time, :class:`MatmulTimeline`) and the blocks of one enter the
    array every this many cycles, so that the steady state is one activation row per cycle
    for ``m >= max(rows, cols)``.

    The bounds: ``m`` activation reads and ``rows`` weight reads per block (one per cycle
    each, on two scratchpad read ports), and the shadow-weight rule of
    :class:`hw.tile.SystolicArray` (shadow row ``k`` may be rewritten only once the previous
    swap has passed all ``cols`` PEs of row ``k``; by columns, all ``rows`` PEs of the
    column). ``m == 0`` and failing commands do not use the issue stage: 0.
    """
    if m == 0:
        return 0
    return k_blocks * _matmul_period(config, m)


def matmul_in_flight(config: NPUConfig) -> int:
    """Most MATMULs the matrix engine holds at once (taken, not yet retired), the depth of its
    retire FIFO and of the command processor's in-flight records for it:
    ``3 + (rows + cols + 2) // max(rows, cols)`` (5 on 8x8).

    Enough that the limit never delays a handshake of back-to-back MATMULs: command ``i`` is
    taken when command ``i - 1`` enters the issue stage, ``(D - 1) * P`` cycles after command
    ``i - D`` did, which retires ``m + rows + cols + 2 <= P + rows + cols + 2`` cycles after
    that (``P = matmul_issue_cycles >= max(m, rows, cols)``).
    """
    return 3 + (config.rows + config.cols + 2) // max(config.rows, config.cols)


def engine_in_flight(config: NPUConfig, engine: str) -> int:
    """Most commands engine ``engine`` (a name of :data:`hw.isa.ENGINE_NAMES`) holds at once:
    :func:`matmul_in_flight` for ``matrix``, 1 for the others (they take a command only when
    idle)."""
    return matmul_in_flight(config) if engine == "matrix" else 1


@dataclass(frozen=True)
class MatmulTimes:
    """When one MATMUL happens (absolute cycles, :meth:`MatmulTimeline.take`).

    Attributes
    ----------
    take : int
        Its handshake.
    done : int
        Its ``done`` pulse.
    writes : tuple of (int, int)
        Accumulator write cycles, one span ``[first, end)`` of ``m`` cycles per K block
        (empty: none).
    accept_from : int
        First cycle the engine can take the next command (its ``cmd.ready`` and the in-flight
        limit :func:`matmul_in_flight`).
    """
    take: int
    done: int
    writes: tuple[tuple[int, int], ...]
    accept_from: int


class MatmulTimeline:
    """Cycle-exact schedule of the MATMULs of one matrix engine (:class:`hw.tile.MatrixEngine`),
    command by command in the order it takes them; the one definition of its back-to-back
    timing (the performance model, the planner and the tests use it).

    Rules (cycle ``t`` the handshake of a command):

    * the next-command register holds it from ``t + 1`` (``cmd.ready`` is low meanwhile) and
      checks it in every cycle there; it leaves in cycle ``x``: a failing or empty command at
      once (``x = t + 1``), any other once the issue stage is free or in the last cycle of
      the previous command's issue (``x = max(t + 1, a' + P' - 1)``); the engine takes the next
      command from ``x + 1``;
    * a command that runs enters the issue stage at ``a = x + 1`` for
      :func:`matmul_issue_cycles` cycles, ``P = max(m, rows, cols)`` per K block, and K block
      ``j`` writes accumulator row ``i`` in cycle ``a + j * P + rows + cols + 2 + i``;
    * commands retire in order, one ``done`` per cycle: ``done = max(r, done' + 1)`` with
      ``r = x + 1`` (failing or empty) or the cycle after its last write;
    * at most :func:`matmul_in_flight` commands are taken and not retired; a retirement in
      cycle ``d`` frees a place from ``d + 1``.

    Alone, a command takes :func:`matmul_busy_cycles`; back to back, commands enter the
    array every ``P`` cycles.
    """

    def __init__(self, config: NPUConfig) -> None:
        self.config = config
        self._issue_last: int | None = None     # last issue cycle of the latest command run
        self._ready = 0                         # cmd.ready from this cycle
        self._done: list[int] = []              # done of the commands taken, newest last
        self._limit = matmul_in_flight(config)

    def accept_from(self) -> int:
        """First cycle in which the engine can take the next command."""
        slot = self._done[-self._limit] + 1 if len(self._done) >= self._limit else 0
        return max(self._ready, slot)

    def take(self, t: int, m: int, *, k_blocks: int = 1, error: bool = False) -> MatmulTimes:
        """The command of ``m`` rows and ``k_blocks >= 1`` K blocks (``error``: it fails its
        checks) taken in cycle ``t``.

        Raises
        ------
        ValueError
            If ``t`` is before :meth:`accept_from`.
        """
        if t < self.accept_from():
            raise ValueError(f"MATMUL taken in cycle {t}, the engine takes one from "
                             f"{self.accept_from()}")
        c = self.config
        prev_done = self._done[-1] if self._done else -1
        x = t + 1
        writes: tuple[tuple[int, int], ...] = ()
        if error or m == 0:
            ready = x + 1
        else:
            if self._issue_last is not None:
                x = max(x, self._issue_last)
            a = x + 1
            self._issue_last = a + matmul_issue_cycles(c, m, k_blocks) - 1
            period = _matmul_period(c, m)
            firsts = [_matmul_first_write(c, a + j * period) for j in range(k_blocks)]
            writes = tuple((f, f + m) for f in firsts)
            ready = firsts[-1] + m
        done = max(ready, prev_done + 1)
        self._ready = x + 1
        self._done = [*self._done[1 - self._limit:], done]
        return MatmulTimes(take=t, done=done, writes=writes, accept_from=self.accept_from())


# -- vector unit ----------------------------------------------------------------------------------

#: REQUANT pipeline after the last accumulator read: read latency, bias add, row scale,
#: multiply, round/shift/clamp (one register each); the last scratchpad write is in the last.
_REQUANT_DRAIN = 5


def requant_busy_cycles(config: NPUConfig, n_rows: int, *, row_scale: bool = False,
                        error: bool = False) -> int:
    """Busy cycles of one REQUANT of ``n_rows`` rows (:class:`hw.vector.RequantEngine`).

    FSM states (``hw/vector/requant_engine.py``): ``CHECK`` 1; ``READ_PARAMS`` 3 (bias,
    multiplier, shift rows); ``READ_ROWS`` ``n_rows``, plus ``ceil(n_rows / cols)`` scale-row
    reads with ``flags.row_scale`` (one before each group of ``cols`` rows); ``DRAIN``
    :data:`_REQUANT_DRAIN` = 5; ``RETIRE`` 1. Total ``n_rows + 10`` (``+ ceil(n_rows / cols)``).

    ``n_rows == 0`` and a failing command (``error``) take ``CHECK`` and ``RETIRE``: 2.
    """
    if error or n_rows == 0:
        return _CHECK_RETIRE
    scale_reads = -(-n_rows // config.cols) if row_scale else 0
    return 1 + 3 + n_rows + scale_reads + _REQUANT_DRAIN + 1


def softmax_row_cycles(config: NPUConfig, n_blocks: int) -> int:
    """Cycles of one score row of a SOFTMAX of ``n_blocks`` blocks when its reciprocal write
    does not wait: ``2 * n_blocks + 43``.

    FSM states (``hw/vector/softmax_engine.py``): ``ROW_START`` 1; ``MAX_READ``
    ``n_blocks + 2`` (a read per cycle, the last block's data, then the max register);
    ``EXP_READ`` ``n_blocks + 4`` (a read per cycle and the 4-stage exponent pipeline:
    read latency, difference, multiply/shift, table/shift, the last P write in the last);
    ``DIV_START`` 1; ``DIVIDE`` ``SOFTMAX_RECIP_BITS + 2`` (one quotient bit per cycle of the
    ``SOFTMAX_RECIP_BITS + 1``-bit restoring divider, then the reciprocal latch); ``ROW_END``
    1 (plus one per cycle its reciprocal-row write waits for the accumulator port).
    """
    return 1 + (n_blocks + 2) + (n_blocks + 4) + 1 + (SOFTMAX_RECIP_BITS + 2) + 1


def softmax_busy_cycles(config: NPUConfig, n_rows: int, n_blocks: int, *, error: bool = False,
                        acc_write_waits: int = 0) -> int:
    """Busy cycles of one SOFTMAX of ``n_rows`` score rows of ``n_blocks`` blocks
    (:class:`hw.vector.SoftmaxEngine`): ``CHECK`` 1, :func:`softmax_row_cycles` per row,
    ``RETIRE`` 1, so ``2 + n_rows * (2 * n_blocks + 43)``.

    ``acc_write_waits`` is the number of cycles the reciprocal-row writes (one after every
    ``cols`` rows and after the last) wait in ``ROW_END`` because the matrix engine writes the
    accumulator in the same cycle (``stall.vector.acc``; 0 when no MATMUL runs alongside).
    ``n_rows == 0``, ``n_blocks == 0`` and a failing command (``error``) take 2.
    """
    if error or n_rows == 0 or n_blocks == 0:
        return _CHECK_RETIRE
    return 1 + n_rows * softmax_row_cycles(config, n_blocks) + acc_write_waits + 1


# -- DMA: bursts ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Burst:
    """One AXI4 INCR burst of a DMA transfer (:func:`dma_bursts`).

    The DMA moves data in chunks of ``G = min(local_row_bytes, axi_data_bytes)`` bytes, one
    per cycle; a beat carries ``axi_data_bytes / G`` chunks of its row, fewer in a partial
    first or last beat of the row.

    Attributes
    ----------
    addr : int
        Address of its first beat (bytes, aligned to the beat: ``AxADDR``).
    beats : int
        Beats (``AxLEN + 1``), 1..256.
    row : int
        DRAM row of the transfer it belongs to.
    first_chunks, last_chunks : int
        Chunks of the row in its first and last beat (the same beat when ``beats == 1``).
    beat_chunks : int
        Chunks of a full beat (``axi_data_bytes / G``; 1 when the local row is at least a
        beat wide); every beat between the first and the last is full.
    """
    addr: int
    beats: int
    row: int
    first_chunks: int
    last_chunks: int
    beat_chunks: int

    @property
    def chunks(self) -> int:
        """Chunks of the row in the burst: cycles the DMA spends on its data."""
        if self.beats == 1:
            return self.first_chunks
        return self.first_chunks + (self.beats - 2) * self.beat_chunks + self.last_chunks

    def chunks_per_beat(self) -> list[int]:
        """Chunks of each beat, in order."""
        if self.beats == 1:
            return [self.first_chunks]
        return [self.first_chunks, *[self.beat_chunks] * (self.beats - 2), self.last_chunks]


def _local_row_bytes(config: NPUConfig, mem) -> int:
    return config.acc_row_bytes if LocalMem(mem) == LocalMem.ACC else config.spad_row_bytes


def dma_bursts(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
               n_rows: int, mem: LocalMem = LocalMem.SPAD) -> list[Burst]:
    """The AXI4 bursts of a checked DMA transfer, in bus order (:class:`hw.dma.DMA`, "Bus";
    ``_BurstGen`` in ``hw/dma``).

    DRAM row ``r`` is ``row_bytes`` bytes at ``dram_addr + r * dram_stride``; rows are never
    merged. Each row is cut into as few INCR bursts as the rules allow: at most
    :data:`MAX_BURST_BEATS` beats, never across a :data:`PAGE_BYTES` boundary (ARM IHI 0022,
    A3.4.1); burst = min(256, beats to the next 4 KiB boundary, beats left in the row). A row
    may start or end mid-beat (``dram_addr`` and ``dram_stride`` are multiples of
    ``G = min(local_row_bytes, axi_data_bytes)``): its first beat address is aligned down, and
    the partial first and last beats count in ``beats`` but carry fewer ``chunks``.

    Parameters
    ----------
    dram_addr, dram_stride, row_bytes : int
        Bytes, as in :class:`hw.isa.DmaBody` (the transfer passed the DMA's checks).
    n_rows : int
    mem : LocalMem
        Local memory, for the chunk size ``G``.

    Returns
    -------
    list of Burst
        Empty when ``n_rows == 0`` or ``row_bytes == 0``.
    """
    beat = config.axi_data_bytes
    g = min(_local_row_bytes(config, mem), beat)
    out = []
    for r in range(n_rows if row_bytes else 0):
        start = dram_addr + r * dram_stride
        end = start + row_bytes
        a = start - start % beat
        while a < end:
            to_page = (PAGE_BYTES - a % PAGE_BYTES) // beat
            n = min(MAX_BURST_BEATS, to_page, -(-(end - a) // beat))
            last = a + (n - 1) * beat          # address of its last beat
            first_chunks = (min(a + beat, end) - max(a, start)) // g
            last_chunks = (min(last + beat, end) - max(last, start)) // g
            out.append(Burst(addr=a, beats=n, row=r, first_chunks=first_chunks,
                             last_chunks=last_chunks, beat_chunks=beat // g))
            a += n * beat
    return out


# -- DMA: cycles ----------------------------------------------------------------------------------

#: DMA control states before the transfer starts: ``Check-shape``, ``Check-range`` (the
#: movers start at its edge; ``ARVALID``/``AWVALID`` are high in the next cycle).
_DMA_CHECKS = 2
#: ``done`` comes 2 cycles after the last R beat / B response: the in-flight FIFO empties at
#: that edge, ``finished`` is seen in the ``Transfer`` state one cycle later, then ``Done``.
_DMA_TAIL = 2


def dma_load_busy_cycles(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
                         n_rows: int, mem: LocalMem = LocalMem.SPAD) -> int:
    """Busy cycles of a successful DMA_LOAD under the ideal DRAM (``cosim/tb/dram.sv``), with
    every local write granted (no ``stall.load_spad``/``load_acc``).

    Derivation, cycle 0 being the first ``Transfer`` cycle (handshake + 3), over the bursts of
    :func:`dma_bursts`, ``D = dma_outstanding``:

    * AR of burst ``b`` (``_BurstGen``: one per cycle while the in-flight FIFO of depth ``D``
      has room; a slot frees the cycle after the last beat of burst ``b - D`` was taken):
      ``ar[b] = max(ar[b-1] + 1, c[b-D] + 1)``, ``ar[0] = 0``;
    * the DRAM moves burst ``b`` from its queue to the beat generator in cycle
      ``ld[b] = max(v_last[b-1], ar[b] + 1)`` (the generator is free from the cycle in which
      the previous burst's last beat is shown);
    * its first beat is shown in ``v[b] = max(c[b-1], ld[b] + 1) + 1`` (the ``RVALID``
      register reloads when its beat is taken or none is shown), so one idle cycle separates
      bursts unless the previous last beat was held;
    * the DMA takes one chunk per cycle and a beat with its last chunk (``RREADY``), so the
      burst's last beat is shown in ``v_last[b] = v[b] + chunks - last_chunks`` and taken in
      ``c[b] = v[b] + chunks - 1``.

    Busy = ``3 + c[last] + 2`` (checks, then :data:`_DMA_TAIL`). For local rows at least a
    beat wide and bursts of ``n`` beats this is one beat per cycle plus one cycle per burst.
    A size-zero transfer takes 2 (:func:`dma_error_busy_cycles`).
    """
    bursts = dma_bursts(config, dram_addr, dram_stride, row_bytes, n_rows, mem)
    if not bursts:
        return _DMA_CHECKS
    d = config.dma_outstanding
    ar: list[int] = []
    c: list[int] = []
    c_prev = v_last_prev = None
    for b, burst in enumerate(bursts):
        a = 0 if b == 0 else ar[-1] + 1
        if b >= d:
            a = max(a, c[b - d] + 1)
        ar.append(a)
        if c_prev is None:
            v = a + DRAM_READ_LATENCY
        else:
            ld = max(v_last_prev, a + 1)
            v = max(c_prev, ld + 1) + 1
        v_last_prev = v + burst.chunks - burst.last_chunks
        c_prev = v + burst.chunks - 1
        c.append(c_prev)
    return _DMA_CHECKS + 1 + c_prev + _DMA_TAIL


#: Depth of the store channel's W beat FIFO and the level up to which it reads a local chunk
#: (``_W_BUFFER_DEPTH`` in ``hw/dma``: a read is issued only if the FIFO is sure to have room).
_W_BUFFER_DEPTH = 4
_W_READ_LEVEL = _W_BUFFER_DEPTH - 2


def dma_store_busy_cycles(config: NPUConfig, dram_addr: int, dram_stride: int, row_bytes: int,
                          n_rows: int, mem: LocalMem = LocalMem.SPAD) -> int:
    """Busy cycles of a successful DMA_STORE under the ideal DRAM (``cosim/tb/dram.sv``).

    Derivation, cycle 0 being the first ``Transfer`` cycle (handshake + 3):

    * the DRAM takes one write burst at a time: AW in its idle state, the burst's beats in
      its data state (``WREADY``), B in its response state (one cycle: the DMA's ``BREADY`` is
      always high), idle again; so the AW of burst ``b + 1`` is accepted 2 cycles after the
      last W beat of burst ``b`` (the DMA's ``AWVALID`` is already high: at most one burst
      waits for B, fewer than ``dma_outstanding``), and the AW of burst 0 in cycle 0;
    * the DMA reads one local chunk per cycle from cycle 0 while its W FIFO holds at most
      :data:`_W_READ_LEVEL` beats; a beat whose last chunk is read in cycle ``x`` is in the
      FIFO (``WVALID``) from ``x + 2``;
    * W beat ``j`` goes in ``max(its FIFO cycle, previous W + 1, AW of its burst + 1)``.

    Busy = ``3 + (last W + 1) + 2`` (B one cycle after the last W, then
    :data:`_DMA_TAIL`). When the local row is at least a beat wide (one chunk per beat) the
    data never waits after the first beat, and this is ``beats + 2 * bursts + 5``: one beat
    per cycle plus 2 cycles per burst (B and AW), computed in closed form. Otherwise the
    chunks are walked one by one (``O(beats)``). A size-zero transfer takes 2.
    """
    bursts = dma_bursts(config, dram_addr, dram_stride, row_bytes, n_rows, mem)
    if not bursts:
        return _DMA_CHECKS
    if all(b.beat_chunks == 1 for b in bursts):
        beats = sum(b.beats for b in bursts)
        # last W = 1 + beats + 2 * (bursts - 1): the first beat is in the FIFO in cycle 2
        last_w = 1 + beats + 2 * (len(bursts) - 1)
    else:
        last_w = _store_last_w(bursts)
    return _DMA_CHECKS + 1 + last_w + 1 + _DMA_TAIL


def _store_last_w(bursts: list[Burst]) -> int:
    """Cycle of the last W beat of a store (cycle 0: first ``Transfer`` cycle), chunk by chunk
    (see :func:`dma_store_busy_cycles`)."""
    landed: list[int] = []     # cycle each beat enters the FIFO's level
    w: list[int] = []          # cycle each beat is taken on W
    x = 0                      # next cycle a chunk may be read
    aw = 0                     # AW cycle of the current burst
    w_prev = -1
    consumed = 0               # beats taken on W before cycle x (monotone pointer)
    for burst in bursts:
        for j, k in enumerate(burst.chunks_per_beat()):
            for _ in range(k):
                while True:
                    while consumed < len(w) and w[consumed] < x:
                        consumed += 1
                    level = sum(1 for t in landed[consumed:] if t <= x)
                    if level <= _W_READ_LEVEL:
                        break
                    x += 1
                x += 1
            landed.append(x + 1)                 # last chunk read in x - 1
            start = aw + 1 if j == 0 else w_prev + 1
            w_prev = max(landed[-1], start)
            w.append(w_prev)
        aw = w_prev + 2
    return w_prev


def dma_error_busy_cycles(config: NPUConfig, error: ErrorCode, dram_addr: int,
                          dram_stride: int, row_bytes: int, n_rows: int, local_row: int = 0,
                          local_stride: int = 0, mem: LocalMem = LocalMem.SPAD, *,
                          window: tuple[int, int] = (0, 0)) -> int:
    """Busy cycles of a DMA command (load or store) that moves nothing: size zero
    (``error`` ``NONE`` with ``n_rows == 0`` or ``row_bytes == 0``) or failing with ``error``.

    Control FSM (``_Control`` in ``hw/dma``): size zero, ``BAD_SIZE`` and ``MISALIGNED``
    are decided in ``Check-shape`` and retire through ``Done``: 2. ``BAD_DRAM_ADDR``,
    ``WINDOW`` and ``BAD_LOCAL_ADDR`` are decided in ``Check-range`` from the extent of the
    whole transfer; ``Find-bad-row`` then visits rows ``0 .. j`` (one per cycle), ``j`` being
    the first row that fails that check, and retires through ``Done``: ``4 + j``.
    ``AXI_ERROR`` transfers run to the end: use :func:`dma_load_busy_cycles` /
    :func:`dma_store_busy_cycles`.

    Parameters
    ----------
    window : (int, int)
        The issuing queue's DRAM window ``(base, limit)`` (``limit == 0``: no limit), for
        ``WINDOW``.

    Raises
    ------
    ValueError
        If ``error`` is ``NONE`` for a transfer that moves data, ``AXI_ERROR``, or a range
        error that no row of the transfer has.
    """
    error = ErrorCode(error)
    if error == ErrorCode.NONE:
        if n_rows and row_bytes:
            raise ValueError("the transfer moves data: use dma_load/store_busy_cycles")
        return _DMA_CHECKS
    if error in (ErrorCode.BAD_SIZE, ErrorCode.MISALIGNED):
        return _DMA_CHECKS
    base, limit = window
    limit = limit or 1 << 32
    rows_per = row_bytes // _local_row_bytes(config, mem)
    depth = config.acc_rows if LocalMem(mem) == LocalMem.ACC else config.spad_rows
    bad = {
        ErrorCode.BAD_DRAM_ADDR: lambda a, _: a + row_bytes > config.dram_bytes,
        ErrorCode.WINDOW: lambda a, _: a < base or a + row_bytes > limit,
        ErrorCode.BAD_LOCAL_ADDR: lambda _, lrow: lrow + rows_per > depth,
    }.get(error)
    if bad is None:
        raise ValueError(f"{error.name} does not retire early: the transfer runs to its end")
    for j in range(n_rows):
        if bad(dram_addr + j * dram_stride, local_row + j * local_stride):
            return _DMA_CHECKS + (j + 1) + 1
    raise ValueError(f"no row of the transfer fails the {error.name} check")


def dma_busy_cycles(config: NPUConfig, opcode: Opcode, body, error: ErrorCode = ErrorCode.NONE,
                    *, window: tuple[int, int] = (0, 0)) -> int:
    """Busy cycles of a DMA_LOAD or DMA_STORE whose body ``body`` has the
    :class:`hw.isa.DmaBody` field names as attributes (a :class:`hw.isa.CommandView`, a
    dataclass, a namespace); ``error`` is the error it retires with (``NONE``: success or
    size zero). Dispatches to :func:`dma_load_busy_cycles`, :func:`dma_store_busy_cycles` or
    :func:`dma_error_busy_cycles`.

    Raises
    ------
    ValueError
        For an opcode other than DMA_LOAD / DMA_STORE, or as :func:`dma_error_busy_cycles`.
    """
    args = (body.dram_addr, body.dram_stride, body.row_bytes, body.n_rows)
    error = ErrorCode(error)
    if error not in (ErrorCode.NONE, ErrorCode.AXI_ERROR) or not (body.n_rows and body.row_bytes):
        return dma_error_busy_cycles(config, error, *args, body.local_row, body.local_stride,
                                     body.mem, window=window)
    if Opcode(opcode) == Opcode.DMA_LOAD:
        return dma_load_busy_cycles(config, *args, body.mem)
    if Opcode(opcode) == Opcode.DMA_STORE:
        return dma_store_busy_cycles(config, *args, body.mem)
    raise ValueError(f"{opcode!r} is not a DMA opcode")


def command_busy_cycles(config: NPUConfig, command: bytes | CommandView,
                        error: ErrorCode = ErrorCode.NONE, *, window: tuple[int, int] = (0, 0),
                        acc_write_waits: int = 0) -> int:
    """Busy cycles of one encoded command (``bytes`` or a decoded :class:`hw.isa.CommandView`)
    on its engine, given the error it retires with: MATMUL, REQUANT, SOFTMAX, DMA_LOAD,
    DMA_STORE (see the per-engine functions).

    Raises
    ------
    ValueError
        For an opcode that no engine runs (NOP, FENCE, WAIT, SIGNAL, BARRIER: the command
        processor's own) or an unknown opcode.
    """
    view = decode(command) if isinstance(command, bytes | bytearray) else command
    op, flags, failed = view.header.opcode, view.header.flags, ErrorCode(error) != ErrorCode.NONE
    if op == Opcode.MATMUL:
        b = view.body.matmul
        return matmul_busy_cycles(config, b.m, k_blocks=b.k_len + 1, error=failed)
    if op == Opcode.REQUANT:
        return requant_busy_cycles(config, view.body.requant.n_rows,
                                   row_scale=bool(flags.row_scale), error=failed)
    if op == Opcode.SOFTMAX:
        b = view.body.softmax
        return softmax_busy_cycles(config, b.n_rows, b.n_blocks, error=failed,
                                   acc_write_waits=acc_write_waits)
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        return dma_busy_cycles(config, op, view.body.dma, error, window=window)
    raise ValueError(f"opcode {op!r} does not run on an engine")


# -- the planner's address-free estimate ----------------------------------------------------------

#: Cycles the planner adds to the beats of each DMA command (:func:`dma_estimate_cycles`):
#: its checks and tail (5), the AR latency (3) and about as many cycles again until the next
#: command of the engine arrives (its fetch shares the read channel with the previous
#: transfer's bursts), as measured on the co-simulation.
_DMA_ESTIMATE_OVERHEAD = 12


def dma_estimate_cycles(config: NPUConfig, row_bytes: int, n_rows: int) -> int:
    """The linear planner's estimate of one DMA command of ``n_rows`` rows of ``row_bytes``,
    load or store, without addresses: ``12 + n_rows * (beats + bursts)`` with the beats and
    bursts of a page-aligned row (:func:`dma_bursts` at address 0): one beat per cycle, one
    idle cycle per burst (the ideal DRAM's gap between read bursts), a fixed overhead.

    It ranks tilings; it is *not* the timing of a command (loads of rows at least a beat wide
    take ``dma_load_busy_cycles + 6`` of it, other commands differ by their address, their
    local row size and the store handshakes).
    """
    bursts = dma_bursts(config, 0, 0, row_bytes, 1)
    return _DMA_ESTIMATE_OVERHEAD + n_rows * sum(b.beats + 1 for b in bursts)
