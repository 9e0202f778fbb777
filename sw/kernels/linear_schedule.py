"""The double-buffered schedule of the linear kernel: :func:`build_program` turns a
:class:`~sw.kernels.linear_plan.LinearPlan` into a typed list of operations
(:mod:`sw.kernels.linear_ops`) in stream order. The schedule itself is described in
:func:`sw.kernels.linear.build_linear_commands_double_buffered`; the terms:

* a *step* is one (M tile, N group): ``n_group`` N blocks of ``m_tile`` rows, each with its own
  accumulator tile; a *phase* is one K chunk of a step;
* the four semaphore names ``L`` (loads), ``M`` (phases), ``R`` (requantizations), ``S``
  (stores) count what the kernel has signalled; a wait ``(name, count)`` is on an earlier
  command of the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hw.config import NPUConfig
from hw.isa import DmaBody, LocalMem, field_max
from sw.kernels.linear_layout import (
    Infeasible,
    Layout,
    a_dram_offset,
    a_dram_rows,
    a_tile_rows,
    balanced,
    ceil_div,
)
from sw.kernels.linear_ops import (
    DmaOp,
    GeluOp,
    MatmulOp,
    Op,
    RequantOp,
    Wait,
    dma_cycles,
    gelu_cycles,
    matmul_cycles,
    requant_cycles,
)

if TYPE_CHECKING:
    from sw.kernels.linear_plan import LinearPlan


__all__ = ["build_program", "TAIL_PIECES"]

#: The last step's requantization and store are split into at most this many pieces per tile.
TAIL_PIECES = 8


def _w_row_blocks(config: NPUConfig, plan: LinearPlan, m_tile: int, n_blocks: int) -> int:
    """K blocks per DRAM row of a weight load of ``n_blocks`` blocks in a step of ``m_tile``
    rows: the largest divisor of ``n_blocks`` whose row is at most half a matmul's cycles of
    bus beats (at least one block; the matmul of ``n_blocks`` K blocks, as
    :meth:`_Program.emit_matmuls` emits them). The co-simulation DRAM answers reads in
    order, so a command fetch waits for the burst in progress; with short matmuls and long
    weight bursts the matrix engine would run out of commands."""
    c = config
    block_beats = -(-plan.w_tile(c) * c.spad_row_bytes // c.axi_data_bytes)
    most = max(1, matmul_cycles(c, m_tile, n_blocks, plan.w_fmt, plan.a_fmt) // 2 // block_beats)
    return max(d for d in range(1, min(most, n_blocks) + 1) if n_blocks % d == 0)


def build_program(config: NPUConfig, plan: LinearPlan, a_addr: int, w_addr: int, p_addr: int,
                  o_addr: int, relu: bool) -> list[Op]:
    """The double-buffered command stream of ``plan`` over buffers at DRAM addresses
    ``a_addr`` (activations), ``w_addr`` (weights), ``p_addr`` (parameters), ``o_addr``
    (output), as operations in stream order.

    Raises
    ------
    Infeasible
        If the out-tile dependency cannot be placed (planner candidates only).
    """
    return _Program(config, plan, (a_addr, w_addr, p_addr, o_addr), relu).build()


class _Program(Layout):
    """Builds the operations of a plan in stream order (see :func:`build_program`)."""

    def __init__(self, config: NPUConfig, plan: LinearPlan, addrs: tuple[int, int, int, int],
                 relu: bool) -> None:
        super().__init__(config, plan)
        self.c, self.p, self.relu = config, plan, relu
        self.a_addr, self.w_addr, self.p_addr, self.o_addr = addrs
        self.srb, self.rows = config.spad_row_bytes, config.rows
        self.wt = plan.w_tile(config)             # rows of a weight K block
        self.k_pad = plan.kb * self.wt            # weight rows per N block in DRAM
        self.m_x = a_dram_rows(config, plan)      # activation rows per K block in DRAM
        self.ops: list[Op] = []
        self.count = dict.fromkeys("LMRS", 0)
        self.p_op: dict[int, DmaOp] = {}          # parameter load of each step
        self.r_after: dict[int, int] = {}         # R count once step s is requantized
        self.s_after: dict[int, int] = {}         # S count once step s is stored
        self.s_pos: dict[int, int] = {}           # stream position after those stores
        self.r_free: dict[int, int] = {}          # R count once the rows overlap(s) are free
        self.step_matmuls: dict[int, list[MatmulOp]] = {}

    def add(self, op: Op) -> Op:
        """Append ``op``; a wait for a count of 0 or less is no wait."""
        if op.wait is not None and op.wait[1] <= 0:
            op.wait = None
        if op.signal is not None:
            self.count[op.signal] += 1
        self.ops.append(op)
        return op

    def build(self) -> list[Op]:
        """Stream order of phase p >= 1: its late loads, its first matmul, the requantization
        and stores of the step that ended with phase p - 1, the prefetch of phase p + 1, the
        rest of its matmuls: the first matmul is fetched right behind the previous phase's."""
        n_ph = len(self.phases)
        for ph in range(n_ph):
            s = self.phases[ph][0]

            def after_first(ph: int = ph, s: int = s) -> None:
                if ph == self.first[s] and s > 0:
                    self.emit_end(s - 1)
                if ph + 1 < n_ph:
                    self.emit_loads(ph + 1, late=False)
            if ph == 0:
                self.emit_first_phase(after_first)
            else:
                self.emit_loads(ph, late=True)
                self.emit_matmuls(ph, {0: self.count["L"]}, {}, {0: after_first})
            if ph == self.last[s]:
                self.wait_for_out_tile(s)
        self.emit_end(len(self.steps) - 1)
        return self.ops

    # -- loads --------------------------------------------------------------------------------

    def emit_p(self, s: int) -> None:
        """Parameters of the batch that starts with step ``s``, after the requantizations of
        the batch before the previous one (the same buffer)."""
        _, _, j0, _ = self.tile(s)
        acc_rb, pr = self.c.acc_row_bytes, self.p.p_rows
        wait = ("R", self.r_after[self.p_reuse[s]]) if s in self.p_reuse else None
        rows = pr * self.p_blocks[s]  # contiguous in DRAM: one DRAM row (long bursts) if fits
        one = rows * acc_rb <= field_max(DmaBody, "row_bytes")
        self.p_op[s] = self.add(DmaOp(
            store=False, tag="p", mem=LocalMem.ACC, dram_addr=self.p_addr + j0 * pr * acc_rb,
            dram_stride=acc_rb, row_bytes=acc_rb * (rows if one else 1),
            n_rows=1 if one else rows, local_row=self.p.param_rows[self.p_buf[s]],
            local_stride=1, wait=wait, signal="L"))

    def param_row(self, s: int, gg: int) -> int:
        """Accumulator row of the parameters of N block ``gg`` of step ``s``."""
        b = self.batch[s]
        return (self.p.param_rows[self.p_buf[b]]
                + (self.tile(s)[2] - self.tile(b)[2] + gg) * self.p.p_rows)

    def emit_a(self, ph: int, off: int = 0, n: int | None = None) -> None:
        """Activations of K blocks ``off .. off + n`` of phase ``ph``'s chunk."""
        s, ci = self.phases[ph]
        i0, mt, _, _ = self.tile(s)
        kb0, nk = self.chunks[ci]
        b, _, q = self.a_use[ph]
        srb, m_x = self.srb, self.m_x
        at = a_tile_rows(self.c, self.p, mt)
        row0 = a_dram_offset(self.c, self.p, i0)
        self.add(DmaOp(
            store=False, tag="a", mem=LocalMem.SPAD,
            dram_addr=self.a_addr + ((kb0 + off) * m_x + row0) * srb, dram_stride=m_x * srb,
            row_bytes=at * srb, n_rows=nk if n is None else n,
            local_row=self.p.a_bases[b] + off * at, local_stride=at, wait=("M", q + 1),
            signal="L"))

    def emit_w(self, ph: int, off: int = 0, n: int | None = None) -> None:
        """Weights of K blocks ``off .. off + n`` of phase ``ph``'s chunk for its N group. A
        DRAM row (so an AXI burst) stays shorter than half a matmul of the step: a command
        fetch queues behind the burst in progress, and the array must not run dry meanwhile
        (see :func:`_w_row_blocks`)."""
        s, ci = self.phases[ph]
        _, mt, j0, g = self.tile(s)
        kb0, nk = self.chunks[ci]
        b, _, q = self.w_use[ph]
        n = nk if n is None else n
        srb, wt, k_pad = self.srb, self.wt, self.k_pad
        block_bytes = wt * srb                # one weight block (K block x N block) in DRAM
        per_row = _w_row_blocks(self.c, self.p, mt, n)
        dram = self.w_addr + (j0 * k_pad + (kb0 + off) * wt) * srb
        local = self.p.w_bases[b] + off * wt
        if per_row == n:          # one DRAM row per N block
            self.add(DmaOp(store=False, tag="w", mem=LocalMem.SPAD, dram_addr=dram,
                           dram_stride=k_pad * srb, row_bytes=n * block_bytes, n_rows=g,
                           local_row=local, local_stride=nk * wt, wait=("M", q + 1),
                           signal="L"))
            return
        if n * wt == k_pad:       # the whole K: the group's blocks follow each other in DRAM
            self.add(DmaOp(store=False, tag="w", mem=LocalMem.SPAD, dram_addr=dram,
                           dram_stride=per_row * block_bytes, row_bytes=per_row * block_bytes,
                           n_rows=g * n // per_row, local_row=local,
                           local_stride=per_row * wt, wait=("M", q + 1), signal="L"))
            return
        for gg in range(g):       # per N block, rows of per_row K blocks
            self.add(DmaOp(store=False, tag="w", mem=LocalMem.SPAD,
                           dram_addr=dram + gg * k_pad * srb, dram_stride=per_row * block_bytes,
                           row_bytes=per_row * block_bytes, n_rows=n // per_row,
                           local_row=local + gg * nk * wt, local_stride=per_row * wt,
                           wait=("M", q + 1), signal="L"))

    def emit_loads(self, ph: int, late: bool) -> None:
        """The loads of phase ``ph`` into buffers the previous phase used (``late``: emitted
        after that phase's matmuls) or into the other buffer (prefetch: emitted before)."""
        if self.w_use[ph][1] and (self.w_use[ph][2] == ph - 1) == late:
            self.emit_w(ph)
        if self.a_use[ph][1] and (self.a_use[ph][2] == ph - 1) == late:
            self.emit_a(ph)
        if not late:
            for s in self.p_at.get(ph, []):
                self.emit_p(s)

    # -- matmuls ------------------------------------------------------------------------------

    def emit_matmuls(self, ph: int, block_waits: dict[int, int],
                     before: dict[int, Callable[[int], None]],
                     after: dict[int, Callable[[], None]]) -> None:
        """The matmuls of phase ``ph``: for each run of K blocks, every N block of the group,
        one MATMUL per run (``k_blocks``: the run's K blocks are consecutive in both buffers).
        A run starts at every K block ``i`` with a hook: the first matmul of K block ``i``
        waits ``L >= block_waits[i]`` (if given); ``before[i](i)`` runs before K block ``i``,
        ``after[i]()`` after its first matmul. The first K block of a step overwrites the
        accumulator; its rows that the previous step may still requantize (``overlap``) go
        last (a run of one block) and wait for those requantizations. The last matmul signals
        ``M``."""
        s, ci = self.phases[ph]
        nk = self.chunks[ci][1]
        starts = {0, *block_waits, *before, *after}
        if ph == self.first[s] and self._splits_first_block(s):
            starts.add(1)
        starts = sorted(i for i in starts if i < nk)
        emitted: list[MatmulOp] = []
        for i, end in zip(starts, [*starts[1:], nk], strict=True):
            if i in before:
                before[i](i)
            wait = ("L", block_waits[i]) if i in block_waits else None
            emitted += self._k_run(ph, i, end - i, wait, after)
        _, mt, _, g = self.tile(s)
        if ph == len(self.phases) - 1 and g > 1:
            # The last step's N blocks each signal M after their own last matmul, so that a
            # block's requantization and store overlap the array's work on the next blocks
            # (nothing after the last phase waits for M by phase count).
            acc0 = self.acc_rows_of(s)[0]
            final = {(op.acc_row - acc0) // mt: op for op in emitted}   # stream order
            for op in final.values():
                op.signal = "M"
                self.count["M"] += 1
        else:
            emitted[-1].signal = "M"
            self.count["M"] += 1
        self.step_matmuls.setdefault(s, []).extend(emitted)

    def _splits_first_block(self, s: int) -> bool:
        """Whether step ``s``'s first K block is cut around the rows of ``overlap(s)``."""
        ov = self.overlap(s)
        _, mt, _, g = self.tile(s)
        acc0 = self.acc_rows_of(s)[0]
        return ov is not None and any(ov[0] < acc0 + (gg + 1) * mt and acc0 + gg * mt < ov[1]
                                      for gg in range(g))

    def _k_run(self, ph: int, i: int, n: int, wait: Wait,
               after: dict[int, Callable[[], None]]) -> list[MatmulOp]:
        """The matmuls of K blocks ``i .. i + n - 1`` of phase ``ph``, one per N block (see
        :meth:`emit_matmuls`; a cut first block comes as a run of one)."""
        s, _ = self.phases[ph]
        _, mt, _, g = self.tile(s)
        nk = self.chunks[self.phases[ph][1]][1]
        a_base = self.p.a_bases[self.a_use[ph][0]]
        w_base = self.p.w_bases[self.w_use[ph][0]]
        acc0 = self.acc_rows_of(s)[0]
        overwrite = ph == self.first[s] and i == 0
        ov = self.overlap(s) if ph == self.first[s] else None
        emitted: list[MatmulOp] = []
        deferred = []
        at, wt, fmt = a_tile_rows(self.c, self.p, mt), self.wt, self._fmt()
        for gg in range(g):
            lo, hi = acc0 + gg * mt, acc0 + (gg + 1) * mt
            segs = [(lo, hi)]
            if overwrite and ov is not None and ov[0] < hi and lo < ov[1]:
                if self.p.a_fmt:
                    raise Infeasible("MXINT8 activations: an M tile's rows cannot be split")
                a, b = max(lo, ov[0]), min(hi, ov[1])
                segs = [sg for sg in ((lo, a), (b, hi)) if sg[0] < sg[1]]
                deferred.append((gg, a, b))
            for sl, sh in segs:
                op = MatmulOp(a_row=a_base + i * at + sl - lo,
                              w_row=w_base + (gg * nk + i) * wt, acc_row=sl, m=sh - sl,
                              accumulate=not overwrite, k_blocks=n, wait=wait, **fmt)
                self.ops.append(op)       # a wait on L is kept even for a count of 0
                emitted.append(op)
                wait = None
                if i in after:
                    after.pop(i)()
        if deferred and wait is not None:
            raise Infeasible("every row of the first K block overlaps the previous step")
        for gg, a, b in deferred:
            lo = acc0 + gg * mt
            emitted.append(self.add(MatmulOp(
                a_row=a_base + i * at + a - lo, w_row=w_base + (gg * nk + i) * wt,
                acc_row=a, m=b - a, accumulate=False, wait=("R", self.r_free[s]), **fmt)))
        return emitted

    def _fmt(self) -> dict:
        """The format fields of every MATMUL of the plan."""
        return {"w_fmt": self.p.w_fmt, "a_fmt": self.p.a_fmt, "x_base": self.p.x_base}

    # -- the first phase ----------------------------------------------------------------------

    def first_pieces(self, nk: int, w_whole: bool) -> tuple[int, list[int]]:
        """Estimated end and sizes (K blocks) of the first phase's load pieces, each as large
        as the timing model says still arrives before the array reaches it (at least one
        block). ``w_whole``: the weights of the whole chunk load with the first piece, else
        each piece loads its own; the parameters of the first batch load first (before any
        matmul writes the accumulator, where a DMA write would wait)."""
        c, wt, srb = self.c, self.wt, self.srb
        _, mt, _, g = self.tile(self.phases[0][0])
        per_block = g * matmul_cycles(c, mt, 1, self.p.w_fmt, self.p.a_fmt)
        at = a_tile_rows(c, self.p, mt)
        p_cycles = dma_cycles(c, c.acc_row_bytes * self.p.p_rows * self.p_blocks[0], 1)
        w_load, a_load = self.w_use[0][1], self.a_use[0][1]

        def dma(n: int, first_piece: bool) -> int:
            w = 0
            if w_load and (first_piece or not w_whole):
                w = dma_cycles(c, (nk if w_whole else n) * wt * srb, g)
            return (w + (dma_cycles(c, at * srb, n) if a_load else 0)
                    + (p_cycles if first_piece else 0))
        pieces = [1]
        t_dma = t_start = dma(1, True)       # loads done; compute start of the piece's block
        pos = 1
        while pos < nk:
            reach = t_start + pieces[-1] * per_block
            n = 1
            while pos + n < nk and t_dma + dma(n + 1, False) <= reach:
                n += 1
            t_dma += dma(n, False)
            t_start = max(reach, t_dma)
            pieces.append(n)
            pos += n
        return t_start + pieces[-1] * per_block, pieces

    def emit_first_phase(self, after_last: Callable[[], None]) -> None:
        """The first phase loads in pieces of K blocks, each followed by its matmuls, so that
        the array starts after one piece instead of the whole first chunk (the weights with
        the first piece or with each, whichever the timing model finds faster).
        ``after_last()`` runs after the first matmul of the last piece."""
        nk = self.chunks[self.phases[0][1]][1]
        (_, pieces), w_whole = min((self.first_pieces(nk, w), w) for w in (False, True))
        starts = [sum(pieces[:i]) for i in range(len(pieces))]
        waits: dict[int, int] = {}

        def load_piece(i: int) -> None:
            j = starts.index(i)
            if j == 0:      # before any matmul writes the accumulator (DMA writes to it wait)
                for q in self.p_at.get(0, []):
                    self.emit_p(q)
            if self.w_use[0][1] and (j == 0 or not w_whole):
                self.emit_w(0, i, nk if w_whole else pieces[j])
            if self.a_use[0][1]:
                self.emit_a(0, i, pieces[j])
            waits[i] = self.count["L"]
        self.emit_matmuls(0, waits, dict.fromkeys(starts, load_piece), {starts[-1]: after_last})

    # -- end of a step ------------------------------------------------------------------------

    def wait_for_out_tile(self, s: int) -> None:
        """Out tile reuse: a matmul of step ``s`` that waits for nothing else waits until the
        step that used the same output tile before was stored; if there is none, the step's
        last matmul gives up its last K block to a matmul of its own that waits; failing
        that, with two output tiles, the step's parameter load waits."""
        prev = s - len(self.p.o_bases)
        if prev < 0:
            return
        wait = ("S", self.s_after[prev])
        later = {id(o) for o in self.ops[self.s_pos[prev]:]}    # after those stores
        sig = [o for o in self.step_matmuls[s] if o.signal == "M"]
        if len(sig) > 1 and id(sig[0]) in later and (sig[0].wait is None
                                                      or sig[0].k_blocks > 1):
            # The last step's blocks signal M each: the block that signals first waits (its
            # own last K block, split off, if its matmul waits already), so every block's
            # requantization may start after its own signal (:meth:`_block_signals`).
            if sig[0].wait is not None:
                sig[0] = self._split_last_block(s, sig[0])
            sig[0].wait = wait
            return
        free_mm = [o for o in self.step_matmuls[s] if o.wait is None and id(o) in later]
        if not free_mm and self.step_matmuls[s][-1].k_blocks > 1:
            free_mm = [self._split_last_block(s)]
        if free_mm:
            free_mm[-1].wait = wait
        elif len(self.p.o_bases) == 2 and s in self.p_op and self.p.p_steps == 1:
            self.p_op[s].wait = wait
        else:
            raise Infeasible("no matmul can wait for the output tile")

    def _split_last_block(self, s: int, last: MatmulOp | None = None) -> MatmulOp:
        """Split the last K block off step ``s``'s last matmul (or off ``last``, placed right
        after it) and return it as a new matmul (with the signal), placed last in the stream
        so far (after the stores that step ``s - 1``'s first matmul brought along, which it
        may wait for)."""
        after = last
        last = self.step_matmuls[s][-1] if last is None else last
        k = last.k_blocks - 1
        op = MatmulOp(a_row=last.a_row + k * a_tile_rows(self.c, self.p, last.m),
                      w_row=last.w_row + k * self.wt, acc_row=last.acc_row, m=last.m,
                      accumulate=True, signal=last.signal, **self._fmt())
        last.k_blocks, last.signal = k, None
        if after is None:
            self.ops.append(op)
            self.step_matmuls[s].append(op)
        else:
            self.ops.insert(next(i for i, o in enumerate(self.ops) if o is after) + 1, op)
            mm = self.step_matmuls[s]
            mm.insert(next(i for i, o in enumerate(mm) if o is after) + 1, op)
        return op

    def _end_pieces(self, s: int) -> tuple[list, list]:
        """Requantization pieces ``(N block, first row, end row)`` of step ``s``: those whose
        rows the next step overwrites first (``early``), then the rest. The last step's tiles
        are cut into the pieces whose stores overlap the next piece's requantization best."""
        _, mt, _, g = self.tile(s)
        acc0 = self.acc_rows_of(s)[0]
        tiles = [(gg, acc0 + gg * mt, acc0 + (gg + 1) * mt) for gg in range(g)]
        if s == len(self.steps) - 1:
            return [], self._tail_pieces(tiles, mt, g)
        ov = self.overlap(s + 1)
        if ov is None:
            return [], tiles
        early, rest = [], []
        for gg, lo, hi in tiles:
            a, b = max(lo, ov[0]), min(hi, ov[1])
            if a < b:
                early.append((gg, a, b))
                rest.extend((gg, x, y) for x, y in ((lo, a), (b, hi)) if x < y)
            else:
                rest.append((gg, lo, hi))
        if len(early) + len(rest) > self.c.cmd_fifo_depth:   # whole tiles, overlapped first
            hit = {gg for gg, _, _ in early}
            early = [t for t in tiles if t[0] in hit]
            rest = [t for t in tiles if t[0] not in hit]
        return early, rest

    def _tail_pieces(self, tiles: list, mt: int, g: int) -> list:
        """The last step: nothing follows, so split each tile into the number of pieces whose
        stores overlap the next piece's requantization that the timing model says ends
        soonest."""
        c = self.c

        def tail(n: int) -> int:
            sizes = balanced(mt, ceil_div(mt, n))
            epi = gelu_cycles if self.p.gelu else requant_cycles
            return (g * sum(epi(c, x) for x in sizes)
                    + dma_cycles(c, sizes[-1] * self.srb, 1))
        n = min(range(1, min(mt, TAIL_PIECES) + 1), key=tail)
        pieces = []
        for gg, lo, _ in tiles:
            for size in balanced(mt, ceil_div(mt, n)):
                pieces.append((gg, lo, lo + size))
                lo += size
        return pieces

    def _block_signals(self, s: int) -> dict[int, int]:
        """The last step's N blocks that signal M each (:meth:`emit_matmuls`): the M count a
        block's requantization waits for, at least that of the first signal retired after
        the step's matmuls that wait for stores (the output tile must be free before it is
        written). Empty if the step signals once."""
        ops = self.step_matmuls[s]
        pos = {id(op): i for i, op in enumerate(self.ops)}
        sig = sorted((o for o in ops if o.signal == "M"), key=lambda o: pos[id(o)])
        if len(sig) < 2:
            return {}
        base = self.count["M"] - len(sig)
        held = max((pos[id(o)] for o in ops if o.wait is not None and o.wait[0] == "S"),
                   default=-1)
        guard = next(base + r + 1 for r, o in enumerate(sig) if pos[id(o)] >= held)
        acc0, mt = self.acc_rows_of(s)[0], self.tile(s)[1]
        return {(o.acc_row - acc0) // mt: max(base + r + 1, guard) for r, o in enumerate(sig)}

    def emit_end(self, s: int) -> None:
        """Requantize and store step ``s``; rows the next step overwrites first. One store per
        tile after its last piece, except for the last step's pieces (one store each)."""
        i0, mt, j0, _ = self.tile(s)
        acc0 = self.acc_rows_of(s)[0]
        o0 = self.p.o_bases[s % len(self.p.o_bases)]
        early, rest = self._end_pieces(s)
        wait: Wait = ("M", self.last[s] + 1)
        block_m = self._block_signals(s) if s == len(self.steps) - 1 else {}
        pieces: list[tuple[int, int, int, int]] = []
        for n_early, (gg, lo, hi) in enumerate(early + rest, start=1):
            if gg in block_m and (not pieces or pieces[-1][0] != gg):
                wait = ("M", block_m[gg])           # the last step: its block's own signal
            param_row = self.param_row(s, gg)
            if self.p.gelu:
                self.add(GeluOp(acc_row=lo, spad_row=o0 + lo - acc0, n_rows=hi - lo,
                                param_row=param_row, wait=wait, signal="R"))
            else:
                self.add(RequantOp(acc_row=lo, spad_row=o0 + lo - acc0, n_rows=hi - lo,
                                   param_row=param_row, relu=self.relu, wait=wait, signal="R"))
            wait = None
            pieces.append((gg, lo, hi, self.count["R"]))
            if n_early == len(early):
                self.r_free[s + 1] = self.count["R"]
        self.r_after[s] = self.count["R"]
        done_at = {gg: (gg, acc0 + gg * mt, acc0 + (gg + 1) * mt, r) for gg, _, _, r in pieces}
        last = s == len(self.steps) - 1
        srb, m = self.srb, self.p.m
        if last:
            stores = pieces
        elif mt == m and len(done_at) * mt * srb <= field_max(DmaBody, "row_bytes"):
            # One M tile: the step's blocks follow each other in DRAM, so one store after the
            # last requantization (the first block's store waits a block's requantization).
            gg0 = min(done_at)
            stores = [(gg0, acc0 + gg0 * mt, acc0 + (gg0 + len(done_at)) * mt,
                       max(x[3] for x in done_at.values()))]
        else:
            stores = sorted(done_at.values(), key=lambda x: x[3])
        for gg, lo, hi, r in stores:
            self.add(DmaOp(
                store=True, tag="out", mem=LocalMem.SPAD,
                dram_addr=self.o_addr + ((j0 + gg) * m + i0 + lo - acc0 - gg * mt) * srb,
                dram_stride=0, row_bytes=(hi - lo) * srb, n_rows=1, local_row=o0 + lo - acc0,
                local_stride=0, wait=("R", r), signal="S"))
        self.s_after[s] = self.count["S"]
        self.s_pos[s] = len(self.ops)
