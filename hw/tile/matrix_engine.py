"""Matrix engine: the systolic array and its MATMUL sequencer."""

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In

from hw.bus import EngineSignature
from hw.config import NPUConfig
from hw.isa import Command, ErrorCode, Opcode
from hw.local_mem import acc_shape, check_config, check_rows, spad_shape
from hw.tile.systolic_array import SystolicArray

__all__ = ["MatrixEngine"]


class MatrixEngine(wiring.Component):
    """MATMUL engine: the :class:`~hw.tile.systolic_array.SystolicArray` and its sequencer.

    ``acc[acc_row + i][0:cols] (+)= A[i] @ W`` for ``i < m`` (see :class:`hw.isa.MatmulBody`):
    ``W`` (int8, ``rows x cols``) is scratchpad rows ``w_row .. w_row + rows - 1`` (first
    ``cols`` bytes of each), ``A[i]`` (int8, ``rows``) the first ``rows`` bytes of scratchpad row
    ``a_row + i``. The products are summed exactly in the array; the accumulator update
    (``flags.accumulate``) wraps modulo 2**32 (two's complement int32). Accumulator elements
    ``j >= cols`` are written as 0.

    With ``flags.transpose`` (square arrays only, else ``BAD_SIZE``) scratchpad row
    ``w_row + n`` is written into array *column* ``n`` (see :class:`hw.isa.MatmulBody`): the
    same ``rows`` reads, the array's column-write mode, no extra cycles.

    Schedule of one command: load the weight tile into the array's shadow weights (one row per
    cycle), then stream the ``m`` activation rows back to back (one row per cycle; the first
    row carries the weight swap), then drain. Weight loading does *not* overlap the previous
    command's streaming: the engine takes a command only when idle and a command retires only
    after its last write, so there is no next command to preload from. (The array supports the
    overlap; a look-ahead command port would be needed to use it.)

    Each result row is written one cycle after the array produces it: the old accumulator row
    is read in the cycle the array output is valid, and written back (sum or overwrite) in the
    next. Each accumulator row is read and written once per command, so there is no
    read-after-write hazard for any ``m``.

    Latency: :func:`hw.isa.timing.matmul_busy_cycles` (the one definition, state by state:
    check, weight reads ``rows``, activation reads ``m``, read latency, array
    ``rows + cols - 1``, write-back, retire; ``done`` comes in the cycle after the last write;
    failing commands and ``m == 0`` check and retire). Steady state: one activation row per
    cycle.

    Errors (checked in this order, nothing is written): opcode other than MATMUL ->
    ``BAD_OPCODE`` (``error_addr`` 0); any of the rows ``a_row .. a_row + m - 1`` or
    ``w_row .. w_row + rows - 1`` outside the scratchpad, or ``acc_row .. acc_row + m - 1``
    outside the accumulator -> ``BAD_LOCAL_ADDR`` with ``error_addr`` the first out-of-range
    row. ``m == 0`` does nothing, checks nothing and retires without error.

    Members
    -------
    engine : ``In(EngineSignature())``
        Command port (see :class:`hw.bus.EngineSignature`).
    spad_rd : ``In(ReadPort.Signature(addr_width=log2(spad_rows), shape=spad_row_bytes * 8))``
    acc_rd : ``In(ReadPort.Signature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
    acc_wr : ``In(WritePort.Signature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
        Drive ports of the scratchpad and the accumulator.
    """

    def __init__(self, config: NPUConfig):
        check_config(self, config)
        self.config = config
        super().__init__({
            "engine": In(EngineSignature()),
            "spad_rd": In(ReadPort.Signature(**spad_shape(config))),
            "acc_rd": In(ReadPort.Signature(**acc_shape(config))),
            "acc_wr": In(WritePort.Signature(**acc_shape(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        rows, cols = cfg.rows, cfg.cols
        m.submodules.array = array = SystolicArray(rows, cols)

        cmd = Signal(Command)
        body = cmd.body.matmul
        error = Signal(ErrorCode)
        error_addr = Signal(32)
        count = Signal(17)      # reads issued in the current phase
        results = Signal(17)    # array output rows seen
        written = Signal(17)    # accumulator rows written

        # -- scratchpad read data into the array ------------------------------------------------
        spad = data.ArrayLayout(signed(8), cfg.spad_row_bytes)(self.spad_rd.data)
        w_ret = Signal()                    # a weight row returns this cycle
        w_ret_k = Signal(range(max(rows, cols)))
        a_ret = Signal()                    # an activation row returns this cycle
        a_ret_first = Signal()
        m.d.sync += [w_ret.eq(0), a_ret.eq(0)]
        m.d.comb += [
            array.w_en.eq(w_ret), array.w_addr.eq(w_ret_k),
            array.w_col.eq(cmd.header.flags.transpose),
            array.i_valid.eq(a_ret), array.i_swap.eq(a_ret & a_ret_first),
        ]
        m.d.comb += [array.w_data[n].eq(spad[n]) for n in range(cols)]
        m.d.comb += [array.i_a[k].eq(spad[k]) for k in range(rows)]

        # -- array output: read the old accumulator row, then write back ------------------------
        c = Signal(data.ArrayLayout(signed(32), cols))
        c_valid = Signal()
        c_addr = Signal.like(self.acc_wr.addr)
        m.d.comb += [self.acc_rd.en.eq(array.o_valid),
                     self.acc_rd.addr.eq(body.acc_row + results)]
        m.d.sync += [c.eq(array.o_c), c_valid.eq(array.o_valid),
                     c_addr.eq(body.acc_row + results)]
        with m.If(array.o_valid):
            m.d.sync += results.eq(results + 1)

        old = data.ArrayLayout(signed(32), cfg.acc_row_elems)(self.acc_rd.data)
        new = Signal(data.ArrayLayout(signed(32), cfg.acc_row_elems))
        for n in range(cols):
            with m.If(cmd.header.flags.accumulate):
                m.d.comb += new[n].eq(old[n] + c[n])    # wraps modulo 2**32
            with m.Else():
                m.d.comb += new[n].eq(c[n])
        m.d.comb += [self.acc_wr.en.eq(c_valid), self.acc_wr.addr.eq(c_addr),
                     self.acc_wr.data.eq(new)]
        with m.If(c_valid):
            m.d.sync += written.eq(written + 1)

        # -- sequencer --------------------------------------------------------------------------
        m.d.comb += [self.engine.error.eq(error), self.engine.error_addr.eq(error_addr),
                     self.spad_rd.en.eq(0)]
        bad_a, bad_a_row = check_rows(body.a_row, body.m, cfg.spad_rows)
        bad_w, bad_w_row = check_rows(body.w_row, rows, cfg.spad_rows)
        bad_acc, bad_acc_row = check_rows(body.acc_row, body.m, cfg.acc_rows)

        with m.FSM(name="matmul") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.engine.cmd.ready.eq(1)
                with m.If(self.engine.cmd.valid):
                    m.d.sync += [cmd.eq(self.engine.cmd.payload), error.eq(ErrorCode.NONE),
                                 error_addr.eq(0), count.eq(0), results.eq(0), written.eq(0)]
                    m.next = "CHECK"

            with m.State("CHECK"):
                with m.If(cmd.header.opcode != Opcode.MATMUL):
                    m.d.sync += error.eq(ErrorCode.BAD_OPCODE)
                    m.next = "RETIRE"
                with m.Elif(body.m == 0):
                    m.next = "RETIRE"
                with m.Elif(cmd.header.flags.transpose & int(rows != cols)):
                    m.d.sync += error.eq(ErrorCode.BAD_SIZE)
                    m.next = "RETIRE"
                with m.Elif(bad_a):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(bad_a_row)]
                    m.next = "RETIRE"
                with m.Elif(bad_w):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(bad_w_row)]
                    m.next = "RETIRE"
                with m.Elif(bad_acc):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR),
                                 error_addr.eq(bad_acc_row)]
                    m.next = "RETIRE"
                with m.Else():
                    m.next = "LOAD_WEIGHTS"

            with m.State("LOAD_WEIGHTS"):
                m.d.comb += [self.spad_rd.en.eq(1), self.spad_rd.addr.eq(body.w_row + count)]
                m.d.sync += [w_ret.eq(1), w_ret_k.eq(count), count.eq(count + 1)]
                with m.If(count == rows - 1):
                    m.d.sync += count.eq(0)
                    m.next = "STREAM_ROWS"

            with m.State("STREAM_ROWS"):
                m.d.comb += [self.spad_rd.en.eq(1), self.spad_rd.addr.eq(body.a_row + count)]
                m.d.sync += [a_ret.eq(1), a_ret_first.eq(count == 0), count.eq(count + 1)]
                with m.If(count + 1 == body.m):
                    m.next = "DRAIN"

            with m.State("DRAIN"):
                with m.If(c_valid & (written + 1 == body.m)):
                    m.next = "RETIRE"

            with m.State("RETIRE"):
                m.d.comb += self.engine.done.eq(1)
                m.next = "IDLE"

        m.d.comb += self.engine.busy.eq(~fsm.ongoing("IDLE"))
        return m
