"""Vector engine for the element-wise work of a transformer layer: ADD (residual addition with
rescaling) and LAYERNORM (:class:`hw.isa.EltwiseBody`)."""

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.arith import saturate
from hw.bus import EngineSignature
from hw.config import NPUConfig
from hw.isa import (
    ELTWISE_OUT_FRAC_BITS,
    ELTWISE_X_BITS,
    LN_MAX_ELEMS,
    LN_MEAN_FRAC_BITS,
    LN_VAR_BITS,
    Command,
    ErrorCode,
    Opcode,
    ln_norm_shift,
)
from hw.isa.timing import (
    LN_DIV_MU_CYCLES,
    LN_DIV_R_CYCLES,
    LN_MUL_NQ_CYCLES,
    LN_MUL_SS_CYCLES,
    LN_NORMALIZE_CYCLES,
    LN_SQRT_CYCLES,
)
from hw.local_mem import check_config, check_rows
from hw.vector.rounding_multiplier import MUL_LATENCY, mul_request_layout, mul_result_layout

__all__ = ["EltwiseEngine"]

# Kinds of multiplier passes (carried beside the multiplier in a delay line of MUL_LATENCY).
_K_NONE, _K_A, _K_B, _K_SQ, _K_R, _K_G, _K_SPAN = range(7)

_P_BITS = (LN_MAX_ELEMS * 2 - 1).bit_length()      # N = n_blocks * cols <= LN_MAX_ELEMS
_S_BITS = ELTWISE_X_BITS + _P_BITS                  # |S| <= N * 2**15
_Q_BITS = 2 * (ELTWISE_X_BITS - 1) + _P_BITS        # Q <= N * 2**30
_D_BITS = _Q_BITS + _P_BITS + 2                     # N * Q and S**2, with a sign
_MU_BITS = _S_BITS + LN_MEAN_FRAC_BITS + 1          # |S * 2**P + N // 2|
_SQRT_BITS = LN_VAR_BITS // 2                       # isqrt of D' < 2**30: 15 bits


class EltwiseEngine(wiring.Component):
    """ADD and LAYERNORM (:class:`hw.isa.EltwiseBody`), bit for bit :func:`sw.golden.add_int`
    and :func:`sw.golden.layernorm_int`.

    Every product goes through the vector unit's shared
    :class:`~hw.vector.RoundingMultiplier` (``o_mul`` / ``i_mul``): no multiplier of its own.
    An element block ``(i, b)`` (``cols`` lanes) is read from the scratchpad (``a``, then
    ``b``, on ``spad_rd``) with its block's parameters from the accumulator (``acc_rd``); the
    passes ``A = a * ma`` and ``B = b * mb`` (rounding shift ``shift``) enter the multiplier in
    consecutive cycles; ``x = clamp16(A + B)`` is formed when ``B`` returns.

    * ADD: a block every 2 cycles over all element blocks in row-major order (reads of ``a``
      and ``ma``, then ``b`` and ``mb``); ``clamp8((x + 2**7) >> 8)`` is registered and
      written :data:`hw.isa.timing.ADD_LATENCY` cycles after the block's first read.
    * LAYERNORM, row by row, three phases:

      1. *statistics*, a block every 3 cycles: ``A``, ``B``, and two periods later the square
         ``|x| * |x|`` (the third pass, in the cycle left free); ``S += sum x`` when ``x`` is
         formed, ``Q += sum x**2`` when the square returns;
      2. *row unit*, a fixed sequence of iterative steps, one bit per cycle, no multiplier:
         ``D = N * Q - S**2`` by shift-and-add, its normalisation to ``[2**28, 2**30)`` by
         shifts of two bits, the digit-by-digit square root, the restoring division ``R =
         floor(N * 2**32 / s)``, the restoring division for the mean (see
         :func:`sw.golden.layernorm_row_constants` and :data:`hw.isa.timing.LN_ROW_UNIT_CYCLES`);
      3. *normalisation*, a block every 4 cycles, four passes per block: ``A`` and ``B``
         again, ``t = ((x << 8) - mu) * R`` (the row's shift), ``t * gamma``; the
         accumulator reads per period are ``ma``, ``mb`` (of this period's block) and
         ``beta``, ``gamma`` (of earlier blocks, read when their passes need them); the
         output ``clamp8((t * gamma + beta + 2**7) >> 8)`` is written
         :data:`hw.isa.timing.LN_NORM_LATENCY` cycles after the block's first read.

      In each phase the passes of a block enter the multiplier at fixed offsets from its
      first read, so the schedule never collides (the pass kinds ride in a delay line beside
      the multiplier). Every output of a row is written before the next row's first read.

    Latency: :func:`hw.isa.timing.eltwise_busy_cycles`. Errors: as :class:`hw.isa.EltwiseBody`
    says, checked before anything is read: ``CHECK`` retires a command of size zero, else it
    sends ``(n_blocks - 1) * stride`` to the shared multiplier (lane 0; the engine has no
    multiplier of its own, and address arithmetic uses running offsets and shifts), ``SPAN``
    waits :data:`~hw.vector.rounding_multiplier.MUL_LATENCY` cycles for it, ``CHECK_RANGES``
    makes every check in the ISA's order.

    Members
    -------
    engine : ``In(EngineSignature())``
    spad_rd : ``In(ReadPort.Signature(...))``
        The engine's own scratchpad read port (inputs ``a``, ``b``).
    acc_rd : ``In(ReadPort.Signature(...))``
        Parameter reads (shared with the other vector engines by the vector unit).
    spad_wr : ``In(WritePort.Signature(...))``
        Output writes.
    o_mul, i_mul
        The shared multiplier (as :class:`~hw.vector.RequantEngine`); the tag carries the
        pass kind's low bits, for waveforms (the engine tracks kinds in its own delay line).
    """

    def __init__(self, config: NPUConfig):
        check_config(self, config)
        self.config = config
        cols = config.cols
        spad = {"addr_width": exact_log2(config.spad_rows), "shape": config.spad_row_bytes * 8}
        acc = {"addr_width": exact_log2(config.acc_rows), "shape": config.acc_row_bytes * 8}
        super().__init__({
            "engine": In(EngineSignature()),
            "spad_rd": In(ReadPort.Signature(**spad)),
            "acc_rd": In(ReadPort.Signature(**acc)),
            "spad_wr": In(WritePort.Signature(**spad)),
            "o_mul": Out(stream.Signature(mul_request_layout(cols, cols), always_ready=True)),
            "i_mul": In(stream.Signature(mul_result_layout(cols, cols), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        cols = cfg.cols

        cmd = Signal(Command)
        body = cmd.body.eltwise
        is_ln = Signal()
        m.d.comb += is_ln.eq(cmd.header.opcode == Opcode.LAYERNORM)
        error = Signal(ErrorCode)
        error_addr = Signal(32)

        nb = body.n_blocks
        n_elems = Signal(_P_BITS + 16)       # N = n_blocks * cols (checked <= LN_MAX_ELEMS)
        # nb * cols as shifts and adds (a constant product; no DSP block)
        m.d.comb += n_elems.eq(sum(nb << i for i in range(cols.bit_length()) if cols >> i & 1))
        per_shift = Mux(is_ln, 2, 1)         # parameter rows per block: 4 or 2

        # -- counters of the read side -------------------------------------------------------
        row = Signal(16)        # current row (LAYERNORM) / row of the next read (ADD)
        pc = Signal(17)         # period (block) counter within a phase
        k = Signal(2)           # cycle within the period
        rd_blk = Signal(16)     # ADD: block of the next read
        wr_row = Signal(16)     # output write position
        wr_blk = Signal(16)
        wr_off = Signal(33)     # wr_blk * stride
        rd_off = Signal(33)     # (block of the next read) * stride

        # -- read data returning ------------------------------------------------------------
        spad_in = data.ArrayLayout(signed(8), cfg.spad_row_bytes)(self.spad_rd.data)
        acc_in = data.ArrayLayout(signed(32), cfg.acc_row_elems)(self.acc_rd.data)

        # -- multiplier requests ------------------------------------------------------------
        req_kind = Signal(3)    # kind of the request this cycle (_K_NONE: none)
        kinds = [Signal(3, name=f"kind{i}") for i in range(MUL_LATENCY)]
        m.d.sync += kinds[0].eq(req_kind)
        m.d.sync += [kinds[i + 1].eq(kinds[i]) for i in range(MUL_LATENCY - 1)]
        res_kind = kinds[-1]
        req = self.o_mul.payload
        m.d.comb += [self.o_mul.valid.eq(req_kind != _K_NONE),
                     req.tag.eq(req_kind)]   # the kind's low bits, for waveforms only

        # row constants (LAYERNORM)
        mu = Signal(signed(_MU_BITS))
        recip = Signal(unsigned(31))
        norm_shift = Signal(6)

        x_reg = Signal(data.ArrayLayout(signed(ELTWISE_X_BITS), cols))     # stats: x
        c_reg = Signal(data.ArrayLayout(signed(ELTWISE_X_BITS + LN_MEAN_FRAC_BITS + 2), cols))
        t_reg = Signal(data.ArrayLayout(signed(21), cols))                  # x_hat * 2**12
        beta_hold = Signal(data.ArrayLayout(signed(32), cols))

        def request(kind, a, b, shift):
            m.d.comb += req_kind.eq(kind)
            for j in range(cols):
                m.d.comb += [req.lane[j].a.eq(a(j)), req.lane[j].b.eq(b(j)),
                             req.lane[j].shift.eq(shift)]

        # -- multiplier results --------------------------------------------------------------
        res = self.i_mul.payload
        ra = Signal(data.ArrayLayout(signed(40), cols))     # the A pass of the block
        out_reg = Signal(data.ArrayLayout(signed(8), cfg.spad_row_bytes))
        out_valid = Signal()
        x_valid = Signal()      # stats: x_reg was formed in the previous cycle
        c_valid = Signal()
        sum_phase = Signal()    # the FSM is in the statistics phase
        sum_s = Signal(signed(_S_BITS + 1))
        sum_q = Signal(unsigned(_Q_BITS + 1))
        f = ELTWISE_OUT_FRAC_BITS
        m.d.sync += [out_valid.eq(0), x_valid.eq(0), c_valid.eq(0)]
        xs = []
        for j in range(cols):
            y = res.y[j]
            s = Signal(signed(41), name=f"xsum{j}")
            m.d.comb += s.eq(ra[j] + y[:40].as_signed())
            x = Signal(signed(ELTWISE_X_BITS), name=f"x{j}")
            m.d.comb += x.eq(saturate(s, ELTWISE_X_BITS))
            xs.append(x)
        with m.Switch(res_kind):
            with m.Case(_K_A):
                m.d.sync += [ra[j].eq(res.y[j][:40].as_signed()) for j in range(cols)]
            with m.Case(_K_B):
                with m.If(~is_ln):                  # ADD: round to the output and write
                    m.d.sync += out_valid.eq(1)
                    for j in range(cols):
                        o = (xs[j] + (1 << (f - 1))) >> f
                        m.d.sync += out_reg[j].eq(saturate(o, 8))
                with m.Elif(sum_phase):
                    m.d.sync += [x_valid.eq(1), *(x_reg[j].eq(xs[j]) for j in range(cols))]
                with m.Else():
                    m.d.sync += [c_valid.eq(1),
                                 *(c_reg[j].eq((xs[j] << LN_MEAN_FRAC_BITS) - mu)
                                   for j in range(cols))]
            with m.Case(_K_SQ):
                total = 0
                for j in range(cols):
                    total = total + res.y[j][:2 * (ELTWISE_X_BITS - 1) + 1]
                m.d.sync += sum_q.eq(sum_q + total)
            with m.Case(_K_R):
                m.d.sync += [t_reg[j].eq(res.y[j][:21].as_signed()) for j in range(cols)]
            with m.Case(_K_G):
                m.d.sync += out_valid.eq(1)
                for j in range(cols):
                    v = Signal(signed(53), name=f"lnout{j}")
                    m.d.comb += v.eq(res.y[j][:52].as_signed() + beta_hold[j] + (1 << (f - 1)))
                    o = v >> f
                    m.d.sync += out_reg[j].eq(saturate(o, 8))
        with m.If(x_valid):
            total = 0
            for j in range(cols):
                total = total + x_reg[j]
            m.d.sync += sum_s.eq(sum_s + total)

        # -- output writes ------------------------------------------------------------------------
        m.d.comb += [self.spad_wr.en.eq(out_valid),
                     self.spad_wr.addr.eq(body.out_row + wr_off + wr_row),
                     self.spad_wr.data.eq(out_reg)]
        last_write = Signal()
        m.d.comb += last_write.eq(out_valid & (wr_blk + 1 == nb)
                                  & (is_ln | (wr_row + 1 == body.n_rows)))
        with m.If(out_valid):
            with m.If(wr_blk + 1 == nb):
                m.d.sync += [wr_blk.eq(0), wr_off.eq(0), wr_row.eq(wr_row + 1)]
            with m.Else():
                m.d.sync += [wr_blk.eq(wr_blk + 1), wr_off.eq(wr_off + body.stride)]

        # -- read addresses
        # Addresses without multipliers (each would be a DSP block): the current block's
        # scratchpad offset ``blk * stride`` is a register stepped by ``stride``, parameter
        # rows are ``blk << 1`` or ``blk << 2``.
        def spad_read(base):
            m.d.comb += [self.spad_rd.en.eq(1), self.spad_rd.addr.eq(base + rd_off + row)]

        def acc_read(blk, which):
            m.d.comb += [self.acc_rd.en.eq(1),
                         self.acc_rd.addr.eq(body.param_row + (blk << per_shift) + which)]

        # operand helpers
        def a_in(j):
            return spad_in[j]

        def m_in(j):
            return acc_in[j][:31]

        # -- the row unit (LAYERNORM) --------------------------------------------------------------
        d = Signal(signed(_D_BITS + 1))
        mcand = Signal(unsigned(_D_BITS))
        mplier = Signal(unsigned(_S_BITS))
        step = Signal(7)
        e = Signal(signed(6))
        root = Signal(unsigned(_SQRT_BITS))
        rem = Signal(unsigned(_MU_BITS + 2))
        quo = Signal(unsigned(_MU_BITS))
        num = Signal(signed(_MU_BITS + 1))
        normalized = Signal(unsigned(_D_BITS))
        qr = Signal(unsigned(LN_DIV_R_CYCLES))
        num_c = Signal(signed(_MU_BITS + 1))
        m.d.comb += num_c.eq((sum_s << LN_MEAN_FRAC_BITS) + (n_elems >> 1))
        abs_s = Signal(unsigned(_S_BITS))
        m.d.comb += abs_s.eq(Mux(sum_s < 0, -sum_s, sum_s))

        # -- checks
        span = Signal(34)       # (n_blocks - 1) * stride + n_rows, from the shared multiplier
        bad_a, bad_a_row = check_rows(body.a_row, span, cfg.spad_rows)
        bad_b, bad_b_row = check_rows(body.b_row, span, cfg.spad_rows)
        bad_o, bad_o_row = check_rows(body.out_row, span, cfg.spad_rows)
        bad_p, bad_p_row = check_rows(body.param_row, nb << per_shift, cfg.acc_rows)

        def overlaps(start):
            return (body.out_row < start + span) & (start < body.out_row + span)

        m.d.comb += [self.engine.error.eq(error), self.engine.error_addr.eq(error_addr),
                     self.spad_rd.en.eq(0), self.acc_rd.en.eq(0)]

        m.d.comb += sum_phase.eq(0)
        with m.FSM(name="eltwise") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.engine.cmd.ready.eq(1)
                with m.If(self.engine.cmd.valid):
                    m.d.sync += [cmd.eq(self.engine.cmd.payload), error.eq(ErrorCode.NONE),
                                 error_addr.eq(0), row.eq(0), pc.eq(0), k.eq(0), rd_blk.eq(0),
                                 wr_row.eq(0), wr_blk.eq(0), wr_off.eq(0), rd_off.eq(0),
                                 sum_s.eq(0), sum_q.eq(0)]
                    m.next = "CHECK"

            with m.State("CHECK"):
                with m.If((body.n_rows == 0) | (nb == 0)):
                    m.next = "RETIRE"
                with m.Else():      # the span's product on lane 0 of the shared multiplier
                    m.d.comb += [req_kind.eq(_K_SPAN), req.lane[0].a.eq(nb - 1),
                                 req.lane[0].b.eq(body.stride), req.lane[0].shift.eq(0)]
                    m.next = "SPAN"

            with m.State("SPAN"):
                with m.If(res_kind == _K_SPAN):
                    m.d.sync += span.eq(res.y[0][:33] + body.n_rows)
                    m.next = "CHECK_RANGES"

            with m.State("CHECK_RANGES"):
                with m.If((nb > 1) & (body.stride < body.n_rows)):
                    m.d.sync += [error.eq(ErrorCode.BAD_SIZE), error_addr.eq(body.stride)]
                    m.next = "RETIRE"
                with m.Elif(is_ln & (n_elems > LN_MAX_ELEMS)):
                    m.d.sync += [error.eq(ErrorCode.BAD_SIZE), error_addr.eq(nb)]
                    m.next = "RETIRE"
                with m.Elif(overlaps(body.a_row) | overlaps(body.b_row)):
                    m.d.sync += [error.eq(ErrorCode.BAD_SIZE), error_addr.eq(body.out_row)]
                    m.next = "RETIRE"
                for bad, addr in ((bad_a, bad_a_row), (bad_b, bad_b_row), (bad_o, bad_o_row),
                                  (bad_p, bad_p_row)):
                    with m.Elif(bad):
                        m.d.sync += [error.eq(ErrorCode.BAD_LOCAL_ADDR), error_addr.eq(addr)]
                        m.next = "RETIRE"
                with m.Elif(is_ln):
                    m.next = "STATS"
                with m.Else():
                    m.next = "ADD"

            # ---- ADD: a block every 2 cycles over all rows ------------------------------------
            with m.State("ADD"):
                more = row != body.n_rows
                m.d.sync += k.eq(~k[0])
                with m.If(k[0] == 0):
                    with m.If(more):
                        spad_read(body.a_row)
                        acc_read(rd_blk, 0)
                    with m.If(pc != 0):         # B of the block read in the previous period
                        request(_K_B, a_in, m_in, body.shift)
                with m.Else():
                    with m.If(more):
                        spad_read(body.b_row)
                        acc_read(rd_blk, 1)
                        m.d.sync += pc.eq(1)
                        with m.If(rd_blk + 1 == nb):
                            m.d.sync += [rd_blk.eq(0), rd_off.eq(0), row.eq(row + 1)]
                        with m.Else():
                            m.d.sync += [rd_blk.eq(rd_blk + 1), rd_off.eq(rd_off + body.stride)]
                        request(_K_A, a_in, m_in, body.shift)
                    with m.Else():
                        m.d.sync += pc.eq(0)    # no B request in the next cycle
                with m.If(last_write):
                    m.next = "RETIRE"

            # ---- LAYERNORM statistics: a block every 3 cycles ---------------------------------
            with m.State("STATS"):
                m.d.comb += sum_phase.eq(1)
                m.d.sync += k.eq(Mux(k == 2, 0, k + 1))
                with m.If(k == 2):
                    m.d.sync += [pc.eq(pc + 1), rd_off.eq(rd_off + body.stride)]
                with m.Switch(k):
                    with m.Case(0):
                        with m.If(pc < nb):
                            spad_read(body.a_row)
                            acc_read(pc, 0)
                        with m.If((pc >= 3) & (pc < nb + 3)):
                            request(_K_SQ, lambda j: Mux(x_reg[j] < 0, -x_reg[j], x_reg[j]),
                                    lambda j: Mux(x_reg[j] < 0, -x_reg[j], x_reg[j]), 0)
                    with m.Case(1):
                        with m.If(pc < nb):
                            spad_read(body.b_row)
                            acc_read(pc, 1)
                            request(_K_A, a_in, m_in, body.shift)
                        with m.If(pc == nb + 3):        # the last square returns now
                            m.next = "ROW_START"
                    with m.Case(2):
                        with m.If(pc < nb):
                            request(_K_B, a_in, m_in, body.shift)

            # ---- row unit ---------------------------------------------------------------------
            with m.State("ROW_START"):
                m.d.sync += [step.eq(0), d.eq(0), mcand.eq(sum_q), mplier.eq(n_elems)]
                m.next = "MUL_NQ"
            with m.State("MUL_NQ"):                 # d = N * Q
                m.d.sync += [mcand.eq(mcand << 1), mplier.eq(mplier >> 1), step.eq(step + 1)]
                with m.If(mplier[0]):
                    m.d.sync += d.eq(d + mcand)
                with m.If(step == LN_MUL_NQ_CYCLES - 1):
                    m.d.sync += [step.eq(0), mcand.eq(abs_s), mplier.eq(abs_s)]
                    m.next = "MUL_SS"
            with m.State("MUL_SS"):                 # d -= S * S
                m.d.sync += [mcand.eq(mcand << 1), mplier.eq(mplier >> 1), step.eq(step + 1)]
                with m.If(mplier[0]):
                    m.d.sync += d.eq(d - mcand)
                with m.If(step == LN_MUL_SS_CYCLES - 1):
                    m.d.sync += [step.eq(0), e.eq(0)]
                    m.next = "NORMALIZE"
            with m.State("NORMALIZE"):              # d' in [2**28, 2**30), d = d' * 4**e
                m.d.sync += step.eq(step + 1)
                with m.If(d >= (1 << LN_VAR_BITS)):
                    m.d.sync += [d.eq(d >> 2), e.eq(e + 1)]
                with m.Elif((d != 0) & (d < (1 << (LN_VAR_BITS - 2)))):
                    m.d.sync += [d.eq(d << 2), e.eq(e - 1)]
                m.d.comb += normalized.eq(Mux(d >= (1 << LN_VAR_BITS), d >> 2,
                                              Mux((d != 0) & (d < (1 << (LN_VAR_BITS - 2))),
                                                  d << 2, d)))
                with m.If(step == LN_NORMALIZE_CYCLES - 1):
                    m.d.sync += [step.eq(0), rem.eq(0), root.eq(0)]
                    # the last shift, if any, happens now: load the shift register from it
                    m.d.sync += mcand.eq(normalized)
                    m.next = "SQRT"
            with m.State("SQRT"):                   # root = isqrt(d'), digit by digit
                pair = mcand[LN_VAR_BITS - 2:LN_VAR_BITS]
                m.d.sync += mcand.eq(mcand << 2)
                cur = Signal(unsigned(_SQRT_BITS + 3), name="sqrt_cur")
                trial = Signal(unsigned(_SQRT_BITS + 3), name="sqrt_trial")
                m.d.comb += [cur.eq((rem << 2) | pair), trial.eq((root << 2) | 1)]
                with m.If(cur >= trial):
                    m.d.sync += [rem.eq(cur - trial), root.eq((root << 1) | 1)]
                with m.Else():
                    m.d.sync += [rem.eq(cur), root.eq(root << 1)]
                m.d.sync += step.eq(step + 1)
                with m.If(step == LN_SQRT_CYCLES - 1):
                    m.d.sync += [step.eq(0), rem.eq(n_elems), qr.eq(0)]
                    m.next = "DIV_R"
            with m.State("DIV_R"):                  # R = floor(N * 2**32 / root)
                divisor = Mux(d == 0, 1, root)
                cur = Signal(unsigned(_SQRT_BITS + 2), name="r_cur")
                m.d.comb += cur.eq(rem << 1)
                with m.If(cur >= divisor):
                    m.d.sync += [rem.eq(cur - divisor), qr.eq((qr << 1) | 1)]
                with m.Else():
                    m.d.sync += [rem.eq(cur), qr.eq(qr << 1)]
                m.d.sync += step.eq(step + 1)
                with m.If(step == LN_DIV_R_CYCLES - 1):
                    m.d.sync += [step.eq(0), rem.eq(0), quo.eq(0), num.eq(num_c),
                                 mcand.eq(Mux(num_c < 0, -num_c, num_c).as_unsigned()
                                          << (_D_BITS - LN_DIV_MU_CYCLES))]
                    m.next = "DIV_MU"
            with m.State("DIV_MU"):                 # mu = floor(num / N), num signed
                bit = mcand[_D_BITS - 1]
                m.d.sync += mcand.eq(mcand << 1)
                cur = Signal(unsigned(_MU_BITS + 2), name="mu_cur")
                m.d.comb += cur.eq((rem << 1) | bit)
                with m.If(cur >= n_elems):
                    m.d.sync += [rem.eq(cur - n_elems), quo.eq((quo << 1) | 1)]
                with m.Else():
                    m.d.sync += [rem.eq(cur), quo.eq(quo << 1)]
                m.d.sync += step.eq(step + 1)
                with m.If(step == LN_DIV_MU_CYCLES - 1):
                    m.next = "ROW_CONST"
            with m.State("ROW_CONST"):
                m.d.sync += [
                    mu.eq(Mux(num < 0, -(quo + (rem != 0)), quo)),
                    recip.eq(Mux(d == 0, 0, qr)),
                    norm_shift.eq(ln_norm_shift(0) + e),
                    pc.eq(0), k.eq(0), rd_off.eq(0)]
                m.next = "NORM"

            # ---- LAYERNORM normalisation: a block every 4 cycles
            with m.State("NORM"):
                m.d.sync += k.eq(k + 1)
                with m.If(k == 3):
                    m.d.sync += [pc.eq(pc + 1), rd_off.eq(rd_off + body.stride)]
                with m.Switch(k):
                    with m.Case(0):
                        with m.If(pc < nb):
                            spad_read(body.a_row)
                            acc_read(pc, 0)
                        with m.If((pc >= 3) & (pc < nb + 3)):   # gamma returns from the read
                            g_neg = [acc_in[j][31] for j in range(cols)]
                            request(_K_G, lambda j: Mux(g_neg[j], -t_reg[j], t_reg[j]),
                                    lambda j: acc_in[j][:31], body.g_shift)
                    with m.Case(1):
                        with m.If(pc < nb):
                            spad_read(body.b_row)
                            acc_read(pc, 1)
                            request(_K_A, a_in, m_in, body.shift)
                    with m.Case(2):
                        with m.If(pc < nb):
                            request(_K_B, a_in, m_in, body.shift)
                        with m.If((pc >= 3) & (pc < nb + 3)):
                            acc_read(pc - 3, 3)
                    with m.Case(3):
                        m.d.sync += [beta_hold[j].eq(acc_in[j]) for j in range(cols)]
                        with m.If((pc >= 1) & (pc <= nb)):
                            request(_K_R, lambda j: c_reg[j], lambda j: recip, norm_shift)
                        with m.If((pc >= 2) & (pc < nb + 2)):
                            acc_read(pc - 2, 2)
                with m.If(last_write):
                    with m.If(row + 1 == body.n_rows):
                        m.next = "RETIRE"
                    with m.Else():
                        m.d.sync += [row.eq(row + 1), pc.eq(0), k.eq(0), sum_s.eq(0),
                                     sum_q.eq(0), rd_off.eq(0)]
                        m.next = "STATS"

            with m.State("RETIRE"):
                m.d.comb += self.engine.done.eq(1)
                m.next = "IDLE"

        m.d.comb += self.engine.busy.eq(~fsm.ongoing("IDLE"))
        return m
