"""Vector engine: requantization of int32 accumulator rows to int8 scratchpad rows, and GELU."""

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.arith import saturate
from hw.bus import EngineSignature
from hw.config import NPUConfig
from hw.isa import (
    GELU_FRAC_BITS,
    GELU_TABLE_ENTRIES,
    GELU_TABLE_STEP_BITS,
    GELU_X_BITS,
    ROW_SCALE_SHIFT,
    Command,
    ErrorCode,
    Opcode,
    gelu_table,
)
from hw.local_mem import check_config, check_rows
from hw.vector.rounding_multiplier import MUL_LATENCY, mul_request_layout, mul_result_layout

__all__ = ["RequantEngine", "gelu_lane"]


def gelu_lane(m: Module, v, name: str):
    """Combinational GELU of one lane in the fixed-point domain (:func:`sw.golden.gelu_fixed`):
    ``y = clamp(v, -2**15, 2**15 - 1)``, ``g = max(y, 0) - C[(|y| + 4) >> 3]`` with the
    128-entry table :func:`hw.isa.gelu_table` (6-bit entries, a LUT ROM; 0 past its end).
    ``v`` is a signed value (the multiplier's result); returns a signed 18-bit Signal."""
    y = Signal(signed(GELU_X_BITS + 1), name=f"{name}_y")
    m.d.comb += y.eq(saturate(v, GELU_X_BITS))
    u = Signal(unsigned(GELU_X_BITS), name=f"{name}_u")
    m.d.comb += u.eq(Mux(y < 0, -y, y))
    k = GELU_FRAC_BITS - GELU_TABLE_STEP_BITS
    idx = Signal(unsigned(GELU_X_BITS), name=f"{name}_idx")
    m.d.comb += idx.eq((u + (1 << (k - 1))) >> k)
    table = Array(Const(c, 6) for c in gelu_table())
    bits = (GELU_TABLE_ENTRIES - 1).bit_length()
    corr = Signal(unsigned(6), name=f"{name}_c")
    m.d.comb += corr.eq(Mux(idx < GELU_TABLE_ENTRIES, table[idx[:bits]], 0))
    g = Signal(signed(GELU_X_BITS + 2), name=f"{name}_g")
    m.d.comb += g.eq(Mux(y < 0, 0, y) - corr)
    return g

#: Tag bit of a multiplier request: the first (row-scale) pass of a row, whose result goes
#: back into the multiplier; without it the result is the row's output.
_TAG_SCALED = 0

# With ``flags.row_scale`` a row's second pass enters the multiplier MUL_LATENCY + 1 cycles
# after its first (the clamp register in between). Rows are read every other cycle, so the
# first passes take every other cycle and the second passes the cycles in between only if that
# distance is odd.
assert (MUL_LATENCY + 1) % 2 == 1, "row-scale passes would collide in the multiplier"


class RequantEngine(wiring.Component):
    """REQUANT engine: ``spad[spad_row + i] = requant(acc[acc_row + i])`` (see
    :class:`hw.isa.RequantBody`), one row per cycle in steady state, one row per two cycles
    with ``flags.row_scale``.

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

    The products go through the vector unit's shared :class:`~hw.vector.RoundingMultiplier`
    (``o_mul`` / ``i_mul``, one multiplier and one rounding shifter per lane). A row takes
    one pass (``x * multiplier``); with ``flags.row_scale`` two: the row-scale pass
    ``x * r_i`` first, its result clamped to 33 bits and fed back as the second pass. Rows are
    then read every other cycle (the scale-row reads take cycles in between), so that the
    first passes and the second passes, :data:`~hw.vector.rounding_multiplier.MUL_LATENCY` + 1
    cycles (odd) later, take alternate cycles of the multiplier.

    Pipeline per row: accumulator read (1 cycle), bias add into the multiplier's operand
    registers, the multiplier (:data:`~hw.vector.rounding_multiplier.MUL_LATENCY` registers:
    operands, partial products, product, rounding shift), clamp and ReLU (one register; for a
    row-scale pass, the 33-bit clamp and the second pass), scratchpad write. No cycle holds
    more than one of multiply, round and saturate. Latency:
    :func:`hw.isa.timing.requant_busy_cycles` (check, parameter reads, the row reads, pipeline
    drain, retire; ``done`` comes after the last write).

    GELU (opcode ``GELU``, :class:`hw.isa.RequantBody`): the same engine with a fourth
    parameter row (``m2``; the shift row holds ``s1`` in bits 0..5 and ``s2`` in bits 8..13)
    and two passes per row as with ``flags.row_scale`` (rows read every other cycle): the
    first pass ``x * m1 >> s1`` into the GELU domain, then in the register between the passes
    :func:`gelu_lane` (16-bit clamp, the 128-entry correction table, ReLU minus the
    correction), the second pass ``g * m2 >> s2``, the int8 clamp. ``flags.relu`` and
    ``flags.row_scale`` are ignored. Latency :func:`hw.isa.timing.gelu_busy_cycles`.

    Errors (checked in this order, nothing is read or written): opcode other than REQUANT or
    GELU ->
    ``BAD_OPCODE`` (``error_addr`` 0); any of the rows ``acc_row .. acc_row + n_rows - 1``,
    ``spad_row .. spad_row + n_rows - 1`` or ``param_row .. param_row + 2`` (GELU: ``+ 3``)
    outside its memory
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
    o_mul : ``Out(stream.Signature(mul_request_layout(cols, cols), always_ready=True))``
        Requests to the shared multiplier (tag bit 0: a row-scale pass).
    i_mul : ``In(stream.Signature(mul_result_layout(cols, cols), always_ready=True))``
        Its results, :data:`~hw.vector.rounding_multiplier.MUL_LATENCY` cycles later.
    """

    def __init__(self, config: NPUConfig):
        check_config(self, config)
        self.config = config
        cols = config.cols
        super().__init__({
            "engine": In(EngineSignature()),
            "acc_rd": In(ReadPort.Signature(addr_width=exact_log2(config.acc_rows),
                                            shape=config.acc_row_bytes * 8)),
            "spad_wr": In(WritePort.Signature(addr_width=exact_log2(config.spad_rows),
                                              shape=config.spad_row_bytes * 8)),
            "o_mul": Out(stream.Signature(mul_request_layout(cols, cols), always_ready=True)),
            "i_mul": In(stream.Signature(mul_result_layout(cols, cols), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        cols = cfg.cols

        cmd = Signal(Command)
        body = cmd.body.requant
        # GELU (opcode GELU) passes every row twice, as row_scale does; it ignores row_scale
        gelu = Signal()
        row_scale = Signal()
        two_pass = Signal()
        m.d.comb += [gelu.eq(cmd.header.opcode == Opcode.GELU),
                     row_scale.eq(cmd.header.flags.row_scale & ~gelu),
                     two_pass.eq(row_scale | gelu)]
        error = Signal(ErrorCode)
        error_addr = Signal(32)
        count = Signal(17)      # data rows read
        written = Signal(17)    # rows written
        group = Signal(16)      # scale rows read
        group_pos = Signal(range(cols))
        need_scale = Signal()
        odd = Signal()          # row_scale: a data-row read cycle (else a scale-row/idle one)

        # -- parameters, latched per command -----------------------------------------------------
        bias = Signal(data.ArrayLayout(signed(32), cols))
        mult = Signal(data.ArrayLayout(unsigned(31), cols))
        shift = Signal(data.ArrayLayout(unsigned(6), cols))
        mult2 = Signal(data.ArrayLayout(unsigned(31), cols))    # GELU's second pass
        shift2 = Signal(data.ArrayLayout(unsigned(6), cols))
        recip = Signal(data.ArrayLayout(unsigned(31), cols))

        # -- accumulator read data returns: latch a parameter or scale row, or a data row ------
        ret_param = Signal(4)   # one-hot: bias, multiplier, shift, (GELU) m2 row returns
        ret_row = Signal()      # a data row returns this cycle
        ret_scale = Signal()    # a scale row (row reciprocals) returns this cycle
        ret_pos = Signal(range(cols))       # row index modulo cols of the returning row
        acc = data.ArrayLayout(signed(32), cfg.acc_row_elems)(self.acc_rd.data)
        m.d.sync += [ret_param.eq(0), ret_row.eq(0), ret_scale.eq(0)]
        with m.If(ret_row):
            m.d.sync += ret_pos.eq(Mux(ret_pos == cols - 1, 0, ret_pos + 1))
        with m.If(ret_scale):
            m.d.sync += [recip[j].eq(acc[j][:31]) for j in range(cols)]
        for j in range(cols):
            with m.If(ret_param[0]):
                m.d.sync += bias[j].eq(acc[j])
            with m.If(ret_param[1]):
                m.d.sync += mult[j].eq(acc[j][:31])
            with m.If(ret_param[2]):
                m.d.sync += [shift[j].eq(acc[j][:6]), shift2[j].eq(acc[j][8:14])]
            with m.If(ret_param[3]):
                m.d.sync += mult2[j].eq(acc[j][:31])

        # -- multiplier requests: the first pass of a returning row, or a second pass ----------
        scaled = Signal(data.ArrayLayout(signed(33), cols))     # row-scale pass, clamped
        scaled_valid = Signal()
        # One named signal for the row's reciprocal: Amaranth's lowering copies an expression
        # at each of its uses.
        r_sel = Signal(unsigned(31), name="r_sel")
        m.d.comb += r_sel.eq(recip[ret_pos])
        req = self.o_mul.payload
        with m.If(scaled_valid):
            m.d.comb += self.o_mul.valid.eq(1)
            for j in range(cols):
                m.d.comb += [req.lane[j].a.eq(scaled[j]),
                             req.lane[j].b.eq(Mux(gelu, mult2[j], mult[j])),
                             req.lane[j].shift.eq(Mux(gelu, shift2[j], shift[j]))]
        with m.Else():
            m.d.comb += [self.o_mul.valid.eq(ret_row), req.tag.eq(two_pass << _TAG_SCALED)]
            for j in range(cols):
                m.d.comb += req.lane[j].a.eq(acc[j] + bias[j])
                with m.If(row_scale):
                    m.d.comb += [req.lane[j].b.eq(r_sel), req.lane[j].shift.eq(ROW_SCALE_SHIFT)]
                with m.Else():
                    m.d.comb += [req.lane[j].b.eq(mult[j]), req.lane[j].shift.eq(shift[j])]

        # -- multiplier results: clamp (row scale, back to the multiplier) or clamp and ReLU ---
        res = self.i_mul.payload
        res_scaled = self.i_mul.valid & res.tag[_TAG_SCALED]
        y = Signal(data.ArrayLayout(signed(8), cfg.spad_row_bytes))
        y_valid = Signal()
        m.d.sync += [scaled_valid.eq(res_scaled), y_valid.eq(self.i_mul.valid & ~res_scaled)]
        for j in range(cols):
            v = res.y[j]
            g = gelu_lane(m, v, f"gelu{j}")
            m.d.sync += scaled[j].eq(Mux(gelu, g, saturate(v, 33)))
            m.d.sync += y[j].eq(Mux(cmd.header.flags.relu & ~gelu & v[-1], 0, saturate(v, 8)))

        # -- scratchpad write -------------------------------------------------------------------
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
        bad_param, bad_param_row = check_rows(body.param_row, Mux(gelu, 4, 3), cfg.acc_rows)
        bad_scale, bad_scale_row = check_rows(body.scale_row, (body.n_rows - 1) // cols + 1,
                                              cfg.acc_rows)

        with m.FSM(name="requant") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.engine.cmd.ready.eq(1)
                with m.If(self.engine.cmd.valid):
                    m.d.sync += [cmd.eq(self.engine.cmd.payload), error.eq(ErrorCode.NONE),
                                 error_addr.eq(0), count.eq(0), written.eq(0), group.eq(0),
                                 group_pos.eq(0), need_scale.eq(1), ret_pos.eq(0), odd.eq(0)]
                    m.next = "CHECK"

            with m.State("CHECK"):
                with m.If((cmd.header.opcode != Opcode.REQUANT) & ~gelu):
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
                with m.Elif(row_scale & bad_scale):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR),
                                 error_addr.eq(bad_scale_row)]
                    m.next = "RETIRE"
                with m.Else():
                    m.next = "READ_PARAMS"

            with m.State("READ_PARAMS"):
                m.d.comb += [self.acc_rd.en.eq(1), self.acc_rd.addr.eq(body.param_row + count)]
                m.d.sync += [ret_param.eq(1 << count[:2]), count.eq(count + 1)]
                with m.If(count == Mux(gelu, 3, 2)):
                    m.d.sync += count.eq(0)
                    m.next = "READ_ROWS"

            with m.State("READ_ROWS"):
                m.d.sync += odd.eq(~odd)
                # row_scale: even cycles read a scale row before each group of cols rows (or
                # idle), odd cycles a data row (GELU: even cycles idle); without them every
                # cycle reads a data row
                with m.If(two_pass & ~odd):
                    with m.If(need_scale & row_scale):
                        m.d.comb += [self.acc_rd.en.eq(1),
                                     self.acc_rd.addr.eq(body.scale_row + group)]
                        m.d.sync += [ret_scale.eq(1), need_scale.eq(0), group.eq(group + 1)]
                with m.Else():
                    m.d.comb += [self.acc_rd.en.eq(1), self.acc_rd.addr.eq(body.acc_row + count)]
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
