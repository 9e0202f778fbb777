"""Vector engine: requantization of int32 accumulator rows to int8 scratchpad rows."""

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In
from amaranth.utils import exact_log2

from hw.bus import EngineSignature
from hw.config import NPUConfig
from hw.isa import ROW_SCALE_SHIFT, Command, ErrorCode, Opcode
from hw.local_mem import check_config, check_rows

__all__ = ["RequantEngine"]


class RequantEngine(wiring.Component):
    """REQUANT engine: ``spad[spad_row + i] = requant(acc[acc_row + i])`` (see
    :class:`hw.isa.RequantBody`), one row per cycle in steady state.

    Per output channel ``j < cols`` the parameters come from three accumulator rows:
    ``bias = acc[param_row][j]`` (int32), ``multiplier = acc[param_row + 1][j]`` (its low 31
    bits, 0 .. 2**31-1) and ``shift = acc[param_row + 2][j]`` (its low 6 bits, 0..63). Then::

        x = acc[acc_row + i][j] + bias                 33-bit signed, exact (no wrap)
        y = (x * multiplier + round) >> shift          round = 1 << (shift - 1), or 0 if shift == 0
        out = clamp(y, -128, 127); out = max(out, 0) if flags.relu

    ``>>`` is an arithmetic shift (floor), so this is round to nearest with ties toward
    +infinity, computed exactly (65-bit intermediate, never saturating before the clamp).
    Source of the scheme: gemmlowp/TFLite requantize with a Q31 fixed-point multiplier
    (``SaturatingRoundingDoublingHighMul``) followed by ``RoundingDivideByPOT`` (ties away from
    zero), i.e. two roundings. Ours is a single rounding shift of the exact product with ties
    toward +infinity (the project's one rounding rule, see :class:`hw.isa.RequantBody`); a
    TFLite multiplier ``M0 * 2**-31`` with right shift ``s`` corresponds to
    ``multiplier = M0``, ``shift = 31 + s`` (equal results except where TFLite's first rounding
    or its tie rule differs). Output bytes ``j >= cols`` of the scratchpad row are written as 0.

    With ``flags.row_scale`` (deferred softmax normalization, see :class:`hw.isa.RequantBody`)
    ``x`` is first multiplied by the row's reciprocal ``r_i`` from the scale rows written by
    SOFTMAX: ``x = clamp((x * r_i + 2**15) >> 16, -2**32, 2**32 - 1)``. One scale row (the
    reciprocals of ``cols`` consecutive rows) is read before each group of ``cols`` rows.

    Pipeline per row: accumulator read (1 cycle), bias add, row scale, multiply,
    round/shift/clamp (one register each), scratchpad write. Latency:
    :func:`hw.isa.timing.requant_busy_cycles` (check, parameter reads, one row read per cycle
    plus a scale-row read per ``cols`` rows with ``flags.row_scale``, pipeline drain, retire;
    ``done`` comes after the last write).

    Errors (checked in this order, nothing is read or written): opcode other than REQUANT ->
    ``BAD_OPCODE`` (``error_addr`` 0); any of the rows ``acc_row .. acc_row + n_rows - 1``,
    ``spad_row .. spad_row + n_rows - 1`` or ``param_row .. param_row + 2`` outside its memory
    -> ``BAD_LOCAL_ADDR`` with ``error_addr`` the first out-of-range row; with
    ``flags.row_scale`` then the scale rows ``scale_row .. scale_row + (n_rows - 1) // cols``.
    ``n_rows == 0`` does nothing, checks nothing and retires without error.

    Members
    -------
    engine : ``In(EngineSignature())``
        Command port (see :class:`hw.bus.EngineSignature`).
    acc_rd : ``In(ReadPort.Signature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
        Drives a read port of the accumulator.
    spad_wr : ``In(WritePort.Signature(addr_width=log2(spad_rows), shape=spad_row_bytes * 8))``
        Drives a write port of the scratchpad.
    """

    def __init__(self, config: NPUConfig):
        check_config(self, config)
        self.config = config
        super().__init__({
            "engine": In(EngineSignature()),
            "acc_rd": In(ReadPort.Signature(addr_width=exact_log2(config.acc_rows),
                                            shape=config.acc_row_bytes * 8)),
            "spad_wr": In(WritePort.Signature(addr_width=exact_log2(config.spad_rows),
                                              shape=config.spad_row_bytes * 8)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        cols = cfg.cols

        cmd = Signal(Command)
        body = cmd.body.requant
        error = Signal(ErrorCode)
        error_addr = Signal(32)
        count = Signal(17)      # reads issued in the current phase
        written = Signal(17)    # rows written
        group = Signal(16)      # scale rows read
        group_pos = Signal(range(cols))
        need_scale = Signal()

        # -- parameters, latched per command -----------------------------------------------------
        bias = Signal(data.ArrayLayout(signed(32), cols))
        mult = Signal(data.ArrayLayout(unsigned(31), cols))
        shift = Signal(data.ArrayLayout(unsigned(6), cols))
        rnd = Signal(data.ArrayLayout(unsigned(63), cols))

        # -- stage 1: accumulator read data returns; latch a parameter or add the bias ---------
        ret_param = Signal(3)   # one-hot: bias, multiplier, shift row returns this cycle
        ret_row = Signal()      # a data row returns this cycle
        ret_scale = Signal()    # a scale row (row reciprocals) returns this cycle
        acc = data.ArrayLayout(signed(32), cfg.acc_row_elems)(self.acc_rd.data)
        x0 = Signal(data.ArrayLayout(signed(33), cols))
        x0_valid = Signal()
        x0_pos = Signal(range(cols))        # row index modulo cols
        ret_pos = Signal(range(cols))
        recip = Signal(data.ArrayLayout(unsigned(31), cols))
        m.d.sync += [ret_param.eq(0), ret_row.eq(0), ret_scale.eq(0), x0_valid.eq(ret_row),
                     x0_pos.eq(ret_pos)]
        with m.If(ret_row):
            m.d.sync += ret_pos.eq(Mux(ret_pos == cols - 1, 0, ret_pos + 1))
        with m.If(ret_scale):
            m.d.sync += [recip[j].eq(acc[j][:31]) for j in range(cols)]
        for j in range(cols):
            m.d.sync += x0[j].eq(acc[j] + bias[j])

        # -- stage 1b: row scale (deferred softmax normalization) -------------------------------
        x = Signal(data.ArrayLayout(signed(33), cols))
        x_valid = Signal()
        m.d.sync += x_valid.eq(x0_valid)
        # Shared subexpressions go through named signals: Amaranth's lowering copies an
        # expression at each of its uses (``scaled`` three times: three multipliers per lane).
        r_sel = Signal(unsigned(31), name="r_sel")
        m.d.comb += r_sel.eq(recip[x0_pos])
        lo, hi = -(1 << 32), (1 << 32) - 1
        for j in range(cols):
            scaled_value = (x0[j] * r_sel + (1 << (ROW_SCALE_SHIFT - 1))) >> ROW_SCALE_SHIFT
            scaled = Signal.like(scaled_value, name=f"scaled{j}")
            m.d.comb += scaled.eq(scaled_value)
            sat = Mux(scaled > hi, hi, Mux(scaled < lo, lo, scaled))
            m.d.sync += x[j].eq(Mux(cmd.header.flags.row_scale, sat, x0[j]))
        for j in range(cols):
            with m.If(ret_param[0]):
                m.d.sync += bias[j].eq(acc[j])
            with m.If(ret_param[1]):
                m.d.sync += mult[j].eq(acc[j][:31])
            with m.If(ret_param[2]):
                s = acc[j][:6]
                # round = 1 << (s - 1), or 0 when s == 0: bits 63..1 of 1 << s
                m.d.sync += [shift[j].eq(s), rnd[j].eq((Const(1, 64) << s)[1:])]

        # -- stage 2: multiply ------------------------------------------------------------------
        p = Signal(data.ArrayLayout(signed(64), cols))
        p_valid = Signal()
        m.d.sync += p_valid.eq(x_valid)
        for j in range(cols):
            m.d.sync += p[j].eq(x[j] * mult[j])

        # -- stage 3: round, shift, saturate, ReLU ----------------------------------------------
        y = Signal(data.ArrayLayout(signed(8), cfg.spad_row_bytes))
        y_valid = Signal()
        m.d.sync += y_valid.eq(p_valid)
        for j in range(cols):
            shifted_value = (p[j] + rnd[j]) >> shift[j]
            shifted = Signal.like(shifted_value, name=f"shifted{j}")
            m.d.comb += shifted.eq(shifted_value)
            clamped = Mux(shifted > 127, 127, Mux(shifted < -128, -128, shifted))
            m.d.sync += y[j].eq(Mux(cmd.header.flags.relu & (shifted < 0), 0, clamped))

        # -- stage 4: scratchpad write ----------------------------------------------------------
        m.d.comb += [
            self.spad_wr.en.eq(y_valid),
            self.spad_wr.addr.eq(body.spad_row + written),
            self.spad_wr.data.eq(y),
        ]
        with m.If(y_valid):
            m.d.sync += written.eq(written + 1)

        # -- sequencer --------------------------------------------------------------------------
        m.d.comb += [self.engine.error.eq(error), self.engine.error_addr.eq(error_addr),
                     self.acc_rd.en.eq(0)]
        bad_acc, bad_acc_row = check_rows(body.acc_row, body.n_rows, cfg.acc_rows)
        bad_spad, bad_spad_row = check_rows(body.spad_row, body.n_rows, cfg.spad_rows)
        bad_param, bad_param_row = check_rows(body.param_row, 3, cfg.acc_rows)
        bad_scale, bad_scale_row = check_rows(body.scale_row, (body.n_rows - 1) // cols + 1,
                                              cfg.acc_rows)

        with m.FSM(name="requant") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.engine.cmd.ready.eq(1)
                with m.If(self.engine.cmd.valid):
                    m.d.sync += [cmd.eq(self.engine.cmd.payload), error.eq(ErrorCode.NONE),
                                 error_addr.eq(0), count.eq(0), written.eq(0), group.eq(0),
                                 group_pos.eq(0), need_scale.eq(1), ret_pos.eq(0)]
                    m.next = "CHECK"

            with m.State("CHECK"):
                with m.If(cmd.header.opcode != Opcode.REQUANT):
                    m.d.sync += error.eq(ErrorCode.BAD_OPCODE)
                    m.next = "RETIRE"
                with m.Elif(body.n_rows == 0):
                    m.next = "RETIRE"
                with m.Elif(bad_acc):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(bad_acc_row)]
                    m.next = "RETIRE"
                with m.Elif(bad_spad):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR),
                                 error_addr.eq(bad_spad_row)]
                    m.next = "RETIRE"
                with m.Elif(bad_param):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR),
                                 error_addr.eq(bad_param_row)]
                    m.next = "RETIRE"
                with m.Elif(cmd.header.flags.row_scale & bad_scale):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR),
                                 error_addr.eq(bad_scale_row)]
                    m.next = "RETIRE"
                with m.Else():
                    m.next = "READ_PARAMS"

            with m.State("READ_PARAMS"):
                m.d.comb += [self.acc_rd.en.eq(1), self.acc_rd.addr.eq(body.param_row + count)]
                m.d.sync += [ret_param.eq(1 << count[:2]), count.eq(count + 1)]
                with m.If(count == 2):
                    m.d.sync += count.eq(0)
                    m.next = "READ_ROWS"

            with m.State("READ_ROWS"):
                m.d.comb += self.acc_rd.en.eq(1)
                with m.If(cmd.header.flags.row_scale & need_scale):
                    m.d.comb += self.acc_rd.addr.eq(body.scale_row + group)
                    m.d.sync += [ret_scale.eq(1), need_scale.eq(0), group.eq(group + 1)]
                with m.Else():
                    m.d.comb += self.acc_rd.addr.eq(body.acc_row + count)
                    m.d.sync += [ret_row.eq(1), count.eq(count + 1),
                                 group_pos.eq(Mux(group_pos == cols - 1, 0, group_pos + 1)),
                                 need_scale.eq(group_pos == cols - 1)]
                    with m.If(count + 1 == body.n_rows):
                        m.next = "DRAIN"

            with m.State("DRAIN"):
                with m.If(y_valid & (written + 1 == body.n_rows)):
                    m.next = "RETIRE"

            with m.State("RETIRE"):
                m.d.comb += self.engine.done.eq(1)
                m.next = "IDLE"

        m.d.comb += self.engine.busy.eq(~fsm.ongoing("IDLE"))
        return m
