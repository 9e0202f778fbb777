"""Matrix engine: the systolic array and its pipelined MATMUL sequencer."""

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, fifo, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In

from hw.bus import EngineSignature
from hw.config import NPUConfig
from hw.isa import (
    E8M0_BIAS,
    ActFormat,
    Command,
    ErrorCode,
    Opcode,
    WeightFormat,
    matmul_in_flight,
)
from hw.local_mem import acc_shape, check_config, check_rows, spad_shape
from hw.tile.systolic_array import SystolicArray

__all__ = ["MatrixEngine"]


class _Retire(data.Struct):
    """One entry of the retire FIFO: a command that left the next-command register, in order."""
    skip: 1             #: failed its checks or ``m == 0``: retires as soon as it is the oldest
    error: ErrorCode
    error_addr: 32


class _Tag(data.Struct):
    """What travels with an activation row through the array: where its result goes."""
    acc_row: 16
    accumulate: 1
    last: 1             #: the command's last row


class _Reads:
    """The issue stage's scratchpad reads, registered: each field is valid in the cycle the
    read data is on its port."""

    def __init__(self, config: NPUConfig):
        self.w_valid = Signal(name="w_ret")          # a weight row is on spad_w_rd.data
        self.w_k = Signal(range(max(config.rows, config.cols)), name="w_ret_k")
        self.w_col = Signal(name="w_ret_col")        # ... for the column-write mode
        self.w_nibble = Signal(name="w_ret_nibble")  # ... packed int4: the high nibble (1)
        self.w_int4 = Signal(name="w_ret_int4")      # ... int4 weights
        self.w_mx = Signal(name="w_ret_mx")          # ... of an MXINT8 weight tile
        self.w_x = Signal(name="w_ret_x")            # the weight exponent row is on the port
        self.a_valid = Signal(name="a_ret")          # an activation row is on spad_rd.data
        self.a_first = Signal(name="a_ret_first")    # ... the first of its command (swap)
        self.a_x = Signal(name="a_ret_x")            # an activation exponent row is on it
        self.a_sel = Signal(range(config.spad_row_bytes), name="a_ret_sel")  # exponent byte
        self.mode = Signal(2, name="a_ret_mode")     # 0 int8 cmd, 1 MX cmd, 2 MXINT8 acts
        self.x_base = Signal(10, name="a_ret_x_base")
        self.tag = Signal(_Tag, name="a_ret_tag")


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
    same ``rows`` reads, the array's column-write mode, no extra cycles. With ``k_len = B - 1
    > 0`` the command runs ``B`` tiles one after the other as back-to-back MATMULs would
    (weights ``w_row + j * rows``, activations ``a_row + j * m``), every one after the first
    accumulating onto the rows the one before wrote.

    Pipeline (back-to-back commands overlap; timing in :class:`hw.isa.timing.MatmulTimeline`)
    ----------------------------------------------------------------------------------------
    * **Next command**: the engine takes a command whenever this register is empty (also while
      earlier commands run) and checks it there, the checks registered (they leave the
      register's second cycle free of them: the next cycle's issue start does not wait on a
      17x17 product and the range compares). From then on a failing or empty command goes
      straight to the retire FIFO; any other moves on to the issue stage once that is free,
      or in the last cycle of the command it holds.
    * **Issue**: :func:`hw.isa.matmul_issue_cycles` cycles, ``max(m, rows, cols)`` per K
      block; in its cycle ``k`` of block ``j`` it reads weight row ``w_row + j * rows + k``
      (``k < rows``, on ``spad_w_rd``) and activation row ``a_row + j * m + k`` (``k < m``,
      on ``spad_rd``). The weights go to the array's
      *shadow* registers one row per cycle while the previous command's rows still stream; the
      activation register delays each activation row one cycle more, so the first row's weight
      swap follows its first weight row by one cycle and shadow row ``k`` is always written
      in time for the swap wavefront (:class:`SystolicArray`'s rules; the ``max`` keeps the
      previous wavefront safe). So consecutive commands enter the array every
      ``max(m, rows, cols)`` cycles: one row per cycle when ``m >= max(rows, cols)``, the
      weight load's pace (one weight row per cycle: a scratchpad row per cycle, as fast as the
      DMA fills it) when ``m`` is smaller.
    * **Write-back**: each result row carries its accumulator row and flags through the array
      (:class:`_Tag`); the old row is read in the cycle the array produces it and written
      (sum or overwrite) in the next. The accumulator read port is transparent for the write
      port (:class:`ComputeTile`), so a row written in the cycle it is read again (the last row
      of one command, the first of the next) is read new.
    * **Retire**: in order, one ``done`` per cycle: the oldest entry of the retire FIFO
      (:func:`hw.isa.matmul_in_flight` deep) retires once it is failing or empty, or once its
      last row is written (``done`` the cycle after the write).

    The command processor keeps at most :func:`hw.isa.matmul_in_flight` commands in the engine
    (taken, not retired); the engine relies on it (the retire FIFO never overflows; a full one
    holds the next-command register). ``busy`` is high while any command is in the engine.

    Number formats (``w_fmt``, ``a_fmt``, ``x_base``; layouts in :mod:`hw.isa.formats`):
    int4 weights are read as packed rows, row ``k >> 1`` in issue cycle ``k``, and the feed
    takes nibble ``k & 1`` sign-extended (same cycles as int8). With ``config.mx`` the array
    has its exponent stage (:class:`SystolicArray`): an MXINT8 weight tile's exponent row is
    read in cycle ``rows`` and written into the exponent shadows, other tiles write 127 there
    with their last weight row; every activation row carries an exponent term (``-127`` in an
    int8 command, so the stage passes the sum unchanged; ``127 - x_base`` for int8
    activations in an MX command; its byte of the group's exponent row minus ``x_base`` for
    MXINT8 activations, the exponent row read on the activation port before each group). An
    MX command's activations start one cycle later (:func:`hw.isa.matmul_lead`), so the
    exponent row written after the weight rows still precedes the swap wavefront; its issue
    stage takes :func:`hw.isa.matmul_issue_cycles` per K block.

    Latency of a command on an idle engine: :func:`hw.isa.timing.matmul_busy_cycles`
    (``m + rows + cols + 5`` for int8 and int4; failing commands and ``m == 0``: 3).

    Errors (checked in this order, nothing is written): opcode other than MATMUL ->
    ``BAD_OPCODE`` (``error_addr`` 0); ``m == 0``: nothing; a transposed MATMUL on a non-square
    array or a format the configuration does not have (:func:`hw.isa.format_error`) ->
    ``BAD_SIZE`` (0); any of the rows (tiles of :func:`hw.isa.weight_tile_rows` and
    :func:`hw.isa.act_tile_rows` rows) ``a_row .. a_row + B * m - 1`` or
    ``w_row .. w_row + B * rows - 1`` outside the scratchpad, or ``acc_row .. acc_row + m - 1``
    outside the accumulator -> ``BAD_LOCAL_ADDR`` with ``error_addr`` the first out-of-range
    row (one multiplier, ``B * m``, in the check). ``m == 0`` does nothing, checks nothing and
    retires without error.

    Members
    -------
    engine : ``In(EngineSignature())``
        Command port (see :class:`hw.bus.EngineSignature`).
    spad_rd, spad_w_rd : ``In(ReadPort.Signature(addr_width=log2(spad_rows),
    shape=spad_row_bytes * 8))``
        Scratchpad read ports for activations and for weights.
    acc_rd : ``In(ReadPort.Signature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
    acc_wr : ``In(WritePort.Signature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
        Drive ports of the accumulator (``acc_rd`` transparent for the write port).
    """

    def __init__(self, config: NPUConfig):
        check_config(self, config)
        self.config = config
        super().__init__({
            "engine": In(EngineSignature()),
            "spad_rd": In(ReadPort.Signature(**spad_shape(config))),
            "spad_w_rd": In(ReadPort.Signature(**spad_shape(config))),
            "acc_rd": In(ReadPort.Signature(**acc_shape(config))),
            "acc_wr": In(WritePort.Signature(**acc_shape(config))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.array = array = SystolicArray(cfg.rows, cfg.cols, mx=bool(cfg.mx))
        m.submodules.retire_fifo = retire = fifo.SyncFIFO(
            width=_Retire.as_shape().size, depth=matmul_in_flight(cfg))

        # -- next command: take, check (registered), move on -----------------------------------
        nxt, nxt_valid = Signal(Command), Signal()
        check = Signal(_Retire, reset_less=True)    # nxt's checks, from its second cycle
        checked = Signal()                          # ... check holds them
        issue_free = Signal()
        go = Signal()           # the next command leaves its register this cycle
        m.d.comb += [
            self.engine.cmd.ready.eq(~nxt_valid),
            go.eq(checked & retire.w_rdy & (check.skip | issue_free)),
            retire.w_en.eq(go), retire.w_data.eq(check),
        ]
        m.d.sync += [check.eq(self._check(m, nxt)), checked.eq(nxt_valid & ~go)]
        with m.If(self.engine.cmd.valid & ~nxt_valid):
            m.d.sync += [nxt.eq(self.engine.cmd.payload), nxt_valid.eq(1)]
        with m.If(go):
            m.d.sync += nxt_valid.eq(0)

        # -- issue: weight and activation reads ------------------------------------------------
        reads = self._issue(m, nxt, go & ~check.skip, issue_free)

        # -- into the array: shadow weights, activation register -------------------------------
        self._feed(m, array, reads)

        # -- write-back: the result rows with their tags ---------------------------------------
        last_written = self._write_back(m, array, reads.tag)

        # -- retire, in order ------------------------------------------------------------------
        self._retire(m, retire, last_written)
        m.d.comb += self.engine.busy.eq(nxt_valid | retire.r_rdy)
        return m

    def _check(self, m: Module, cmd) -> data.View:
        """The checks of ``cmd`` (the next-command register), combinational."""
        cfg = self.config
        body = cmd.body.matmul
        out = Signal(_Retire)
        blocks = body.k_len + 1
        w_int4 = body.w_fmt == WeightFormat.INT4
        w_mx = body.w_fmt == WeightFormat.MXINT8
        a_mx = body.a_fmt == ActFormat.MXINT8
        a_tile = Signal(17)             # activation tile rows: m (+ exponent rows)
        m.d.comb += a_tile.eq(body.m + Mux(a_mx, self._groups(body.m), 0))
        a_rows = Signal(34)             # activation rows of all K blocks: blocks * tile
        m.d.comb += a_rows.eq(blocks * a_tile)
        w_tile = Mux(w_int4, (cfg.rows + 1) // 2, Mux(w_mx, cfg.rows + 1, cfg.rows))
        w_rows = Signal(23)
        m.d.comb += w_rows.eq(blocks * w_tile)
        bad_fmt = ((body.w_fmt == 3) | ((w_mx | a_mx) & int(not cfg.mx))
                   | (cmd.header.flags.transpose & (body.w_fmt != WeightFormat.INT8)))
        bad_a, bad_a_row = check_rows(body.a_row, a_rows, cfg.spad_rows)
        bad_w, bad_w_row = check_rows(body.w_row, w_rows, cfg.spad_rows)
        bad_acc, bad_acc_row = check_rows(body.acc_row, body.m, cfg.acc_rows)
        m.d.comb += out.skip.eq(1)
        with m.If(cmd.header.opcode != Opcode.MATMUL):
            m.d.comb += out.error.eq(ErrorCode.BAD_OPCODE)
        with m.Elif(body.m == 0):
            pass
        with m.Elif((cmd.header.flags.transpose & int(cfg.rows != cfg.cols)) | bad_fmt):
            m.d.comb += out.error.eq(ErrorCode.BAD_SIZE)
        with m.Elif(bad_a):
            m.d.comb += [out.error.eq(ErrorCode.BAD_LOCAL_ADDR), out.error_addr.eq(bad_a_row)]
        with m.Elif(bad_w):
            m.d.comb += [out.error.eq(ErrorCode.BAD_LOCAL_ADDR), out.error_addr.eq(bad_w_row)]
        with m.Elif(bad_acc):
            m.d.comb += [out.error.eq(ErrorCode.BAD_LOCAL_ADDR),
                         out.error_addr.eq(bad_acc_row)]
        with m.Else():
            m.d.comb += out.skip.eq(0)
        return out

    def _groups(self, rows):
        """``ceil(rows / spad_row_bytes)``: the exponent rows of an MXINT8 activation tile."""
        g = self.config.spad_row_bytes
        return (rows + g - 1) >> (g.bit_length() - 1)

    def _issue(self, m: Module, nxt, start, issue_free) -> "_Reads":
        """The issue stage: loaded from the next-command register on ``start``; per K block
        it reads the weight rows (cycle ``k``: row ``k``, or packed row ``k >> 1`` for int4;
        MXINT8: the exponent row in cycle ``rows``) and the activation rows (cycle ``i``: row
        ``i``; MX commands one cycle later, MXINT8 activations with an exponent row before
        each group; :mod:`hw.isa.formats`). Returns the reads, registered (valid in the cycle
        their data is on the read ports)."""
        cfg = self.config
        g = cfg.spad_row_bytes
        body = nxt.body.matmul
        active = Signal()
        count = Signal(17)              # cycle in the block
        last = Signal(17)               # the block's issue cycles, minus one
        blocks_left = Signal(16)        # K blocks after this one
        a_base, w_base = Signal(17), Signal(17)     # the block's first rows
        acc_row = Signal(16)
        n_rows = Signal(17)
        accumulate, transpose = Signal(), Signal()
        w_int4, w_mx, a_mx, is_mx = Signal(), Signal(), Signal(), Signal()
        x_base = Signal(10)
        a_stride, w_stride = Signal(18), Signal(6)
        a_i = Signal(17)                # activation rows read in this block
        a_off = Signal(18)              # next activation-tile row (MXINT8: exponent rows too)
        pos = Signal(range(g + 1))      # MXINT8: place in the group, 0 = its exponent row
        end = count == last
        m.d.comb += issue_free.eq(~active | (end & (blocks_left == 0)))

        # issue cycles per block: max(lead + m + x_a, rows + x_w, cols + lead)
        n_w_mx = body.w_fmt == WeightFormat.MXINT8
        n_a_mx = body.a_fmt == ActFormat.MXINT8
        n_mx = n_w_mx | n_a_mx
        act = Signal(18)
        m.d.comb += act.eq(n_mx + body.m + Mux(n_a_mx, (body.m - 1) >> (g.bit_length() - 1), 0))
        period = Signal(18)
        wts = cfg.rows + n_w_mx
        cls = cfg.cols + n_mx
        m.d.comb += period.eq(Mux(act > wts, Mux(act > cls, act, cls), Mux(wts > cls, wts, cls)))
        # -- activation port: an MX command starts a cycle later; MXINT8 exponent rows
        # (the counters advance here; a block's end and a new command below reset them)
        a_go = active & (a_i < n_rows) & (a_mx | (count >= is_mx))
        a_row = a_go & ~(a_mx & (pos == 0))
        with m.If(a_go):
            m.d.sync += [a_off.eq(a_off + 1), pos.eq(Mux(pos == g, 0, pos + 1))]
        with m.If(a_row):
            m.d.sync += a_i.eq(a_i + 1)
        with m.If(start):
            m.d.sync += [
                active.eq(1), count.eq(0), last.eq(period - 1),
                blocks_left.eq(body.k_len),
                a_base.eq(body.a_row), w_base.eq(body.w_row), acc_row.eq(body.acc_row),
                n_rows.eq(body.m), accumulate.eq(nxt.header.flags.accumulate),
                transpose.eq(nxt.header.flags.transpose),
                w_int4.eq(body.w_fmt == WeightFormat.INT4), w_mx.eq(n_w_mx), a_mx.eq(n_a_mx),
                is_mx.eq(n_mx), x_base.eq(body.x_base),
                a_stride.eq(body.m + Mux(n_a_mx, self._groups(body.m), 0)),
                w_stride.eq(Mux(body.w_fmt == WeightFormat.INT4, (cfg.rows + 1) // 2,
                                Mux(n_w_mx, cfg.rows + 1, cfg.rows))),
                a_i.eq(0), a_off.eq(0), pos.eq(0),
            ]
        with m.Elif(active):
            m.d.sync += count.eq(count + 1)
            with m.If(end):
                m.d.sync += [count.eq(0), blocks_left.eq(blocks_left - 1),
                             a_base.eq(a_base + a_stride), w_base.eq(w_base + w_stride),
                             a_i.eq(0), a_off.eq(0), pos.eq(0),
                             accumulate.eq(1)]      # later blocks add to the earlier ones
                with m.If(blocks_left == 0):
                    m.d.sync += active.eq(0)

        r = _Reads(cfg)
        m.d.sync += [r.w_valid.eq(0), r.a_valid.eq(0), r.w_x.eq(0), r.a_x.eq(0)]
        # -- weight port: rows k < rows (int4: packed row k >> 1), then an exponent row
        with m.If(active & (count < cfg.rows)):
            m.d.comb += [self.spad_w_rd.en.eq(1),
                         self.spad_w_rd.addr.eq(w_base + Mux(w_int4, count >> 1, count))]
            m.d.sync += [r.w_valid.eq(1), r.w_k.eq(count), r.w_col.eq(transpose),
                         r.w_nibble.eq(count[0]), r.w_int4.eq(w_int4), r.w_mx.eq(w_mx)]
        with m.Elif(active & w_mx & (count == cfg.rows)):
            m.d.comb += [self.spad_w_rd.en.eq(1), self.spad_w_rd.addr.eq(w_base + cfg.rows)]
            m.d.sync += r.w_x.eq(1)
        with m.If(a_go):
            m.d.comb += [self.spad_rd.en.eq(1),
                         self.spad_rd.addr.eq(a_base + Mux(a_mx, a_off, a_i))]
        with m.If(a_go & ~a_row):
            m.d.sync += r.a_x.eq(1)
        with m.If(a_row):
            m.d.sync += [r.a_valid.eq(1), r.a_first.eq(a_i == 0),
                         r.a_sel.eq(pos - 1),
                         r.tag.acc_row.eq(acc_row + a_i), r.tag.accumulate.eq(accumulate),
                         r.tag.last.eq((a_i + 1 == n_rows) & (blocks_left == 0))]
        m.d.sync += [r.mode.eq(Mux(a_mx, 2, is_mx)), r.x_base.eq(x_base)]
        return r

    def _feed(self, m: Module, array, r: "_Reads") -> None:
        """Weight rows into the shadow registers as they return (int4: the nibble of the
        row, sign-extended); with the exponent stage the weight exponents (an MXINT8 tile's
        exponent row, else 127 with the last weight row); activation rows through one
        register into the array, the first one of a command with the swap, each with its
        exponent term (MXINT8: its byte of the group's exponent row, minus ``x_base``)."""
        cfg = self.config
        w = data.ArrayLayout(signed(8), cfg.spad_row_bytes)(self.spad_w_rd.data)
        a = data.ArrayLayout(signed(8), cfg.spad_row_bytes)(self.spad_rd.data)
        m.d.comb += [array.w_en.eq(r.w_valid), array.w_addr.eq(r.w_k), array.w_col.eq(r.w_col)]
        for n in range(cfg.cols):
            nib = Mux(r.w_nibble, w[n][4:8], w[n][0:4])
            with m.If(r.w_int4):
                m.d.comb += array.w_data[n].eq(nib.as_signed())
            with m.Else():
                m.d.comb += array.w_data[n].eq(w[n])
        a_reg = Signal(data.ArrayLayout(signed(8), cfg.rows))
        valid, swap = Signal(), Signal()
        m.d.sync += [a_reg[k].eq(a[k]) for k in range(cfg.rows)]
        m.d.sync += [valid.eq(r.a_valid), swap.eq(r.a_valid & r.a_first)]
        m.d.comb += [array.i_a.eq(a_reg), array.i_valid.eq(valid), array.i_swap.eq(swap)]
        if not cfg.mx:
            return
        # weight exponents: the MXINT8 exponent row, else 127 (2**0) with the last weight row
        with m.If(r.w_x):
            m.d.comb += array.w_x_en.eq(1)
            m.d.comb += [array.w_x_data[n].eq(self.spad_w_rd.data[8 * n:8 * n + 8])
                         for n in range(cfg.cols)]
        with m.Elif(r.w_valid & ~r.w_mx & (r.w_k == cfg.rows - 1)):
            m.d.comb += array.w_x_en.eq(1)
            m.d.comb += [array.w_x_data[n].eq(E8M0_BIAS) for n in range(cfg.cols)]
        # activation exponent terms: -127 (int8 command: d = 0), 127 - base, byte - base
        x_row = Signal(8 * cfg.spad_row_bytes, name="a_exp_row")
        with m.If(r.a_x):
            m.d.sync += x_row.eq(self.spad_rd.data)
        byte = x_row.word_select(r.a_sel, 8)
        term = Signal(signed(array.X_TERM_BITS), name="a_exp_term")
        with m.Switch(r.mode):
            with m.Case(0):
                m.d.comb += term.eq(-E8M0_BIAS)
            with m.Case(1):
                m.d.comb += term.eq(E8M0_BIAS - r.x_base)
            with m.Default():
                m.d.comb += term.eq(byte - r.x_base)
        x_reg = Signal(signed(array.X_TERM_BITS), name="a_exp_reg")
        m.d.sync += x_reg.eq(term)
        m.d.comb += array.i_x.eq(x_reg)

    def _write_back(self, m: Module, array, tag) -> Signal:
        """Read the old accumulator row when the array produces a row, write it back in the
        next cycle. Returns a strobe: the last row of a command is written this cycle."""
        cfg = self.config
        # the tag follows its row: one cycle in the activation register, then the array
        for i in range(1 + array.latency):
            reg = Signal(_Tag, name=f"tag_d{i + 1}")
            m.d.sync += reg.eq(tag)
            tag = reg
        m.d.comb += [self.acc_rd.en.eq(array.o_valid), self.acc_rd.addr.eq(tag.acc_row)]
        c = Signal(data.ArrayLayout(signed(32), cfg.cols))
        c_valid, c_tag = Signal(), Signal(_Tag)
        m.d.sync += [c.eq(array.o_c), c_valid.eq(array.o_valid), c_tag.eq(tag)]

        old = data.ArrayLayout(signed(32), cfg.acc_row_elems)(self.acc_rd.data)
        new = Signal(data.ArrayLayout(signed(32), cfg.acc_row_elems))
        for n in range(cfg.cols):
            with m.If(c_tag.accumulate):
                m.d.comb += new[n].eq(old[n] + c[n])    # wraps modulo 2**32
            with m.Else():
                m.d.comb += new[n].eq(c[n])
        m.d.comb += [self.acc_wr.en.eq(c_valid), self.acc_wr.addr.eq(c_tag.acc_row),
                     self.acc_wr.data.eq(new)]
        last_written = Signal()
        m.d.comb += last_written.eq(c_valid & c_tag.last)
        return last_written

    def _retire(self, m: Module, retire, last_written) -> None:
        """``done`` for the oldest command: at once if it is failing or empty, else once its
        last row was written (``finished`` counts commands whose last row is written and that
        have not retired)."""
        head = _Retire(retire.r_data)
        finished = Signal(range(matmul_in_flight(self.config) + 1))
        done = Signal()
        m.d.comb += [
            done.eq(retire.r_rdy & (head.skip | (finished != 0))),
            retire.r_en.eq(done),
            self.engine.done.eq(done),
            self.engine.error.eq(head.error),
            self.engine.error_addr.eq(head.error_addr),
        ]
        m.d.sync += finished.eq(finished + last_written - (done & ~head.skip))
