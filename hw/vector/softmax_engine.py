"""Integer softmax engine (SOFTMAX) and the vector unit that hosts it beside REQUANT.

The softmax is the base-2, deferred-normalization integer softmax of :class:`hw.isa.SoftmaxBody`:
row max, ``2**-x`` from a ``2**F``-entry table plus a shift (Softermax, Stevens et al., DAC
2021; I-BERT's range reduction, Kim et al., ICML 2021, with a table instead of a polynomial),
exact row sum of the quantized values, one reciprocal per row by a restoring divider; the
division by the row sum is applied later by REQUANT ``flags.row_scale`` on ``P @ V`` (as
FlashAttention-style deferred normalization; TOOLCHAIN.md measured 25-27 dB this way).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.arith import below
from hw.bus import ArbitratedWriteSignature, EngineSignature
from hw.config import NPUConfig
from hw.isa import (
    SOFTMAX_EXP_FRAC_BITS,
    SOFTMAX_EXP_GUARD_BITS,
    SOFTMAX_EXP_MAX_SHIFT,
    SOFTMAX_RECIP_BITS,
    Command,
    ErrorCode,
    Opcode,
    softmax_exp_table,
)
from hw.isa.timing import softmax_max_folds
from hw.local_mem import check_config, check_rows
from hw.vector.rounding_multiplier import mul_request_layout, mul_result_layout

__all__ = ["exp2_lane", "SoftmaxEngine"]

#: Bits of the base-2 exponent ``n`` kept from the multiplier's result: ``d * mult < 2**48``
#: for a valid key, so ``n < 2**49`` for every shift.
_EXP_BITS = 49


def exp2_lane(n, frac_bits: int = SOFTMAX_EXP_FRAC_BITS, guard_bits: int = SOFTMAX_EXP_GUARD_BITS,
              max_shift: int = SOFTMAX_EXP_MAX_SHIFT):
    """Combinational ``round(127 * 2**(-n / 2**F))`` of one lane (see :func:`sw.golden.exp2_int`).

    ``n`` is an unsigned value; its low ``F`` bits index a ``2**F``-entry table, the integer
    part ``q`` shifts; ``q >= max_shift`` gives 0 (never the last table entry). Returns an
    unsigned 7-bit value.
    """
    table = Array(Const(v, 8 + guard_bits) for v in softmax_exp_table(frac_bits, guard_bits))
    f = n[:frac_bits]
    q = n[frac_bits:]
    qs = q[:max_shift.bit_length() - 1] + guard_bits
    one = Const(1, 8 + guard_bits + max_shift)
    rounded = (table[f] + (one << (qs - 1).as_unsigned())) >> qs
    return Mux(below(q, max_shift), rounded[:7], 0)


class SoftmaxEngine(wiring.Component):
    """SOFTMAX engine: the integer softmax of :class:`hw.isa.SoftmaxBody`, row by row.

    Per score row ``i``:

    1. ``MAX``: read the ``n_blocks`` accumulator rows of the row (one per cycle), mask each
       lane (key ``k = b * cols + j`` is valid if ``k < kv_len`` and, if causal,
       ``k <= q_offset + i``) and keep a running max per lane of the valid scores, then fold
       the lanes into one row max (:func:`hw.isa.timing.softmax_max_folds` steps);
    2. ``EXP``: read them again; per lane (``cols`` parallel lanes): ``d = max - s`` (33 bits),
       ``n = (d * mult + rnd) >> shift`` (on the vector unit's shared
       :class:`~hw.vector.RoundingMultiplier`: ``o_mul`` / ``i_mul``), ``p = exp2(n)``
       (:func:`exp2_lane`); write the block's ``p`` to the scratchpad and add the lanes into the
       exact row sum;
    3. ``DIVIDE``: ``r = floor((2**32 + sum // 2) / sum)`` by a restoring divider, one quotient
       bit per cycle (33 cycles; ``sum == 0`` -> ``r = 0``), collected in a ``cols``-entry
       register; after every ``cols`` rows (and after the last row) the collected reciprocals
       are written as one accumulator row. That write goes through the accumulator's shared
       write port (``acc_wr.ready``, see :class:`hw.bus.ArbitratedWriteSignature`): the engine
       stays in its row-end state, with the write request held, until ``ready`` is high (the
       matrix engine has priority and never waits).

    Two passes over the scores (instead of buffering a row) keep the engine's storage at a few
    registers for any row length; the accumulator read port gives one block per cycle.

    Latency: :func:`hw.isa.timing.softmax_busy_cycles` (per row the start, the max pass, the
    exponent pass, the divider and the row end, :func:`hw.isa.timing.softmax_row_cycles`; per
    command check and retire), plus one cycle for every cycle a reciprocal row write waits for
    ``acc_wr.ready`` (none when no MATMUL writes the accumulator at the same time). The
    exponent pipeline from a block's read to its P write is
    :data:`hw.isa.timing.SOFTMAX_EXP_LATENCY` cycles: the read, the multiplier
    (:data:`~hw.vector.rounding_multiplier.MUL_LATENCY`, its operand registers take the
    difference), table/shift and mask (one register), then the write and the sum. The P
    writes to the scratchpad never wait (the vector unit has the scratchpad's write port
    first).

    Errors (in this order, nothing written): opcode other than SOFTMAX -> ``BAD_OPCODE``;
    ``n_rows == 0`` or ``n_blocks == 0`` does nothing; overlapping P blocks (``n_blocks >= 2``
    and ``stride < n_rows``) -> ``BAD_SIZE`` (``error_addr`` = ``stride``); then the score
    rows, the P rows and the scale rows outside their memory -> ``BAD_LOCAL_ADDR``
    (``error_addr`` ``max(start, depth)``).

    Parameters
    ----------
    config : NPUConfig
    exp_frac_bits : int
        Table size ``2**F`` of the exponent. The ISA fixes :data:`hw.isa.SOFTMAX_EXP_FRAC_BITS`;
        other values exist for the area/accuracy study (``cosim/softmax_cost.py``) only.

    Members
    -------
    engine : ``In(EngineSignature())``
    acc_rd : ``In(ReadPort.Signature(...))``
        Reads score blocks.
    acc_wr : ``In(ArbitratedWriteSignature(...))``
        Writes the reciprocal rows; waits while ``ready`` is low.
    spad_wr : ``In(WritePort.Signature(...))``
        Writes P blocks.
    o_mul : ``Out(stream.Signature(mul_request_layout(cols, cols), always_ready=True))``
        Requests to the shared multiplier; the tag holds the lane mask (bit ``j``: key valid).
    i_mul : ``In(stream.Signature(mul_result_layout(cols, cols), always_ready=True))``
        Its results.
    """

    def __init__(self, config: NPUConfig, exp_frac_bits: int = SOFTMAX_EXP_FRAC_BITS):
        check_config(self, config)
        if not isinstance(exp_frac_bits, int) or not 0 <= exp_frac_bits <= 10:
            self._MustUse__silence = True
            raise ValueError(f"exp_frac_bits must be an integer in 0..10, not {exp_frac_bits!r}")
        self.config = config
        self.exp_frac_bits = exp_frac_bits
        acc = {"addr_width": exact_log2(config.acc_rows), "shape": config.acc_row_bytes * 8}
        spad = {"addr_width": exact_log2(config.spad_rows), "shape": config.spad_row_bytes * 8}
        super().__init__({
            "engine": In(EngineSignature()),
            "acc_rd": In(ReadPort.Signature(**acc)),
            "acc_wr": In(ArbitratedWriteSignature(**acc)),
            "spad_wr": In(WritePort.Signature(**spad)),
            "o_mul": Out(stream.Signature(mul_request_layout(config.cols, config.cols),
                                          always_ready=True)),
            "i_mul": In(stream.Signature(mul_result_layout(config.cols, config.cols),
                                         always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        cols = cfg.cols
        frac = self.exp_frac_bits

        cmd = Signal(Command)
        body = cmd.body.softmax
        error = Signal(ErrorCode)
        error_addr = Signal(32)

        row = Signal(16)                 # current score row
        row_pos = Signal(range(cols))    # row modulo cols (slot in the reciprocal register)
        scale_addr = Signal(16)          # next reciprocal row
        issued = Signal(17)              # block reads issued in this pass
        rd_addr = Signal(16)             # next block read address
        wr_addr = Signal(16)             # next P write address
        written = Signal(17)             # P blocks written in this pass

        # -- pass 1: masked running max ----------------------------------------------------------
        acc = data.ArrayLayout(signed(32), cfg.acc_row_elems)(self.acc_rd.data)
        ret = Signal()                   # a score block returns this cycle
        iss_key = Signal(22)             # key index of lane 0 of the block read this cycle
        m.d.sync += ret.eq(0)
        kv_len = body.kv_len
        limit = Signal.like(body.q_offset + row, name="limit")     # causal: keys <= limit
        m.d.comb += limit.eq(body.q_offset + row)
        # The key mask of a block is registered when its read is issued, so that it is ready
        # when the data returns: the adders and comparators stay off the path from the
        # accumulator's read data through the max tree (the board build's critical path).
        valid = [Signal(name=f"valid{j}") for j in range(cols)]
        for j in range(cols):
            k = iss_key + j
            m.d.sync += valid[j].eq((k < kv_len) & (~body.causal | (k <= limit)))
        # Running max per lane, then fold steps (hw.isa.timing.softmax_max_folds): the read
        # data meets one compare (an invalid lane counts as INT32_MIN, which never exceeds
        # its lane's max), not a tree over the lanes (the 4x4's routed critical path, 34.9 ns).
        # A fold step sets lane j < cols / 2 to max(lane 2j, lane 2j + 1) (the lanes past
        # that half are left as they are); after the last, lane 0 holds the row max.
        lmx = Signal(data.ArrayLayout(signed(32), cols))
        fold = Signal()                  # MAX_READ: a fold step (no block returns)
        for j in range(cols):
            x, y = Signal(signed(32), name=f"max_x{j}"), Signal(signed(32), name=f"max_y{j}")
            m.d.comb += [x.eq(lmx[j]), y.eq(Mux(valid[j], acc[j], -(1 << 31)))]
            if 2 * j < cols:
                with m.If(fold):
                    m.d.comb += [x.eq(lmx[2 * j]), y.eq(lmx[min(2 * j + 1, cols - 1)])]
            # (the exponent pass's blocks come back here too: the same scores, none above
            # the row max, so lane 0 keeps it)
            with m.If(ret | (fold & (2 * j < cols))):
                m.d.sync += lmx[j].eq(Mux(y > x, y, x))
        mx = lmx[0]
        folds = softmax_max_folds(cfg)
        fold_step = Signal(range(folds + 1))

        # -- pass 2: exponent pipeline -------------------------------------------------------------
        # The returning block goes straight into the shared multiplier: d = max - s (33 bits,
        # >= 0 for a valid key) times mult, rounding shift; the lane mask rides in the tag.
        exp_phase = Signal()             # returning blocks are for the exponent pass
        req = self.o_mul.payload
        m.d.comb += [self.o_mul.valid.eq(ret & exp_phase),
                     req.tag.eq(Cat(*valid))]
        for j in range(cols):
            m.d.comb += [req.lane[j].a.eq(mx - acc[j]), req.lane[j].b.eq(body.mult),
                         req.lane[j].shift.eq(body.shift)]
        # table and shift of the exponent, masked (one register), then the write and the sum
        res = self.i_mul.payload
        e_valid = Signal()
        p = Signal(data.ArrayLayout(unsigned(7), cols))
        m.d.sync += e_valid.eq(self.i_mul.valid)
        for j in range(cols):
            n = Signal(unsigned(_EXP_BITS), name=f"exp_n{j}")
            m.d.comb += n.eq(res.y[j][:_EXP_BITS])
            m.d.sync += p[j].eq(Mux(res.tag[j], exp2_lane(n, frac), 0))
        row_sum = Signal(32)
        block_sum = 0
        for j in range(cols):
            block_sum = block_sum + p[j]
        out = Signal(data.ArrayLayout(unsigned(8), cfg.spad_row_bytes))
        m.d.comb += [out[j].eq(p[j]) for j in range(cols)]
        m.d.comb += [self.spad_wr.en.eq(e_valid), self.spad_wr.addr.eq(wr_addr),
                     self.spad_wr.data.eq(out)]
        with m.If(e_valid):
            m.d.sync += [row_sum.eq(row_sum + block_sum), wr_addr.eq(wr_addr + body.stride),
                         written.eq(written + 1)]

        # -- reciprocal: restoring divider ---------------------------------------------------------
        dividend = Signal(SOFTMAX_RECIP_BITS + 1)
        rem = Signal(SOFTMAX_RECIP_BITS + 2)
        quo = Signal(SOFTMAX_RECIP_BITS + 1)
        div_bit = Signal(range(SOFTMAX_RECIP_BITS + 2))
        recips = Signal(data.ArrayLayout(unsigned(32), cfg.acc_row_elems))
        trial = Signal(SOFTMAX_RECIP_BITS + 2)
        next_bit = dividend.bit_select((div_bit - 1).as_unsigned()[:6], 1)
        m.d.comb += trial.eq(Mux(div_bit == 0, 0, (rem << 1) | next_bit))

        m.d.comb += [self.acc_wr.en.eq(0), self.acc_wr.addr.eq(scale_addr),
                     self.acc_wr.data.eq(recips)]

        # -- range checks --------------------------------------------------------------------------
        span = (body.n_blocks - 1) * body.stride + body.n_rows
        bad_s, bad_s_row = check_rows(body.acc_row, span, cfg.acc_rows)
        bad_p, bad_p_row = check_rows(body.spad_row, span, cfg.spad_rows)
        bad_r, bad_r_row = check_rows(body.scale_row, (body.n_rows - 1) // cols + 1,
                                      cfg.acc_rows)

        # -- sequencer -----------------------------------------------------------------------------
        m.d.comb += [self.engine.error.eq(error), self.engine.error_addr.eq(error_addr),
                     self.acc_rd.en.eq(0), self.acc_rd.addr.eq(rd_addr)]
        with m.FSM(name="softmax") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.engine.cmd.ready.eq(1)
                with m.If(self.engine.cmd.valid):
                    m.d.sync += [cmd.eq(self.engine.cmd.payload), error.eq(ErrorCode.NONE),
                                 error_addr.eq(0), row.eq(0), row_pos.eq(0), recips.eq(0)]
                    m.next = "CHECK"

            with m.State("CHECK"):
                m.d.sync += scale_addr.eq(body.scale_row)
                with m.If(cmd.header.opcode != Opcode.SOFTMAX):
                    m.d.sync += error.eq(ErrorCode.BAD_OPCODE)
                    m.next = "RETIRE"
                with m.Elif((body.n_rows == 0) | (body.n_blocks == 0)):
                    m.next = "RETIRE"
                with m.Elif((body.n_blocks > 1) & (body.stride < body.n_rows)):
                    # overlapping P blocks: rejected (hw.isa.SoftmaxBody)
                    m.d.sync += [error.eq(ErrorCode.BAD_SIZE), error_addr.eq(body.stride)]
                    m.next = "RETIRE"
                with m.Elif(bad_s):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(bad_s_row)]
                    m.next = "RETIRE"
                with m.Elif(bad_p):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(bad_p_row)]
                    m.next = "RETIRE"
                with m.Elif(bad_r):
                    m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(bad_r_row)]
                    m.next = "RETIRE"
                with m.Else():
                    m.next = "ROW_START"

            with m.State("ROW_START"):
                m.d.sync += [issued.eq(0), rd_addr.eq(body.acc_row + row), iss_key.eq(0),
                             fold_step.eq(0), *(lmx[j].eq(-(1 << 31)) for j in range(cols))]
                m.next = "MAX_READ"

            with m.State("MAX_READ"):
                with m.If(issued != body.n_blocks):
                    m.d.comb += self.acc_rd.en.eq(1)
                    m.d.sync += [issued.eq(issued + 1), rd_addr.eq(rd_addr + body.stride),
                                 ret.eq(1), iss_key.eq(iss_key + cols)]
                # every block returned: the fold steps, the last one in the state's last
                # cycle (hw.isa.timing.softmax_max_cycles)
                returned = (issued == body.n_blocks) & ~ret
                with m.If(returned & (fold_step != folds)):
                    m.d.comb += fold.eq(1)
                    m.d.sync += fold_step.eq(fold_step + 1)
                with m.If(returned & (fold_step == folds - 1)):     # folds >= 1: cols >= 2
                    m.d.sync += [issued.eq(0), rd_addr.eq(body.acc_row + row), iss_key.eq(0),
                                 wr_addr.eq(body.spad_row + row), written.eq(0), row_sum.eq(0),
                                 exp_phase.eq(1)]
                    m.next = "EXP_READ"

            with m.State("EXP_READ"):
                with m.If(issued != body.n_blocks):
                    m.d.comb += self.acc_rd.en.eq(1)
                    m.d.sync += [issued.eq(issued + 1), rd_addr.eq(rd_addr + body.stride),
                                 ret.eq(1), iss_key.eq(iss_key + cols)]
                with m.If(e_valid & (written + 1 == body.n_blocks)):
                    m.d.sync += exp_phase.eq(0)
                    m.next = "DIV_START"

            with m.State("DIV_START"):
                m.d.sync += [dividend.eq((1 << SOFTMAX_RECIP_BITS) + (row_sum >> 1)),
                             rem.eq(0), quo.eq(0), div_bit.eq(SOFTMAX_RECIP_BITS + 1)]
                m.next = "DIVIDE"

            with m.State("DIVIDE"):
                with m.If(div_bit != 0):
                    with m.If(trial >= row_sum):
                        m.d.sync += [rem.eq(trial - row_sum), quo.eq((quo << 1) | 1)]
                    with m.Else():
                        m.d.sync += [rem.eq(trial), quo.eq(quo << 1)]
                    m.d.sync += div_bit.eq(div_bit - 1)
                with m.Else():
                    m.d.sync += recips[row_pos].eq(Mux(row_sum == 0, 0, quo[:32]))
                    m.next = "ROW_END"

            with m.State("ROW_END"):
                last = row + 1 == body.n_rows
                flush = (row_pos == cols - 1) | last
                # the reciprocal row write waits here for the accumulator's write port
                with m.If(flush):
                    m.d.comb += self.acc_wr.en.eq(1)
                with m.If(~flush | self.acc_wr.ready):
                    with m.If(flush):
                        m.d.sync += [recips.eq(0), scale_addr.eq(scale_addr + 1)]
                    m.d.sync += [row.eq(row + 1),
                                 row_pos.eq(Mux(row_pos == cols - 1, 0, row_pos + 1))]
                    with m.If(last):
                        m.next = "RETIRE"
                    with m.Else():
                        m.next = "ROW_START"

            with m.State("RETIRE"):
                m.d.comb += self.engine.done.eq(1)
                m.next = "IDLE"

        m.d.comb += self.engine.busy.eq(~fsm.ongoing("IDLE"))
        return m
