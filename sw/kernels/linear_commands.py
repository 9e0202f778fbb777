"""The linear kernel's command streams: :func:`build_linear_commands` (the serialized plan)
and :func:`build_linear_commands_double_buffered` (the double-buffered schedule of
:mod:`sw.kernels.linear_schedule`), encoded over the kernel's DRAM buffers. See
:mod:`sw.kernels.linear` for the layouts and the schedule."""

from __future__ import annotations

from hw.config import NPUConfig
from hw.isa import LocalMem
from sw.kernels.linear_layout import a_dram_offset, a_dram_rows, a_tile_rows, ceil_div
from sw.kernels.linear_ops import command_fields
from sw.kernels.linear_plan import LinearPlan
from sw.kernels.linear_schedule import build_program
from sw.runtime import Buffer, CommandList, Semaphore

__all__ = ["build_linear_commands", "build_linear_commands_double_buffered"]

_SEM = 0           #: the semaphore used as the kernel's sequence counter


def build_linear_commands(config: NPUConfig, plan: LinearPlan, a_buf: Buffer, w_buf: Buffer,
                          p_buf: Buffer, o_buf: Buffer, relu: bool, sem_base: int,
                          sem: int = _SEM) -> CommandList:
    """The serialized command stream of one linear layer over buffers laid out as in the
    module docstring: command ``i`` waits for ``sem[sem] >= sem_base + i`` and signals
    ``sem``, so no two commands overlap."""
    c = config
    srb = c.spad_row_bytes
    cmds = CommandList()

    def seq() -> dict:
        i = len(cmds)
        return {"wait": (sem, (sem_base + i) & 0xFFFF_FFFF), "signal": sem}

    m, kb, nb, mt_max, kbc = plan.m, plan.kb, plan.nb, plan.m_tile, plan.k_chunk
    wt = plan.w_tile(c)
    k_pad = kb * wt
    m_x = a_dram_rows(c, plan)
    fmt = {"w_fmt": plan.w_fmt, "a_fmt": plan.a_fmt, "x_base": plan.x_base}
    n_chunks = ceil_div(kb, kbc)
    for i0 in range(0, m, mt_max):
        mt = min(mt_max, m - i0)
        at = a_tile_rows(c, plan, mt)

        def load_a(kb0: int, nk: int, i0: int = i0, at: int = at) -> None:
            cmds.dma_load(mem=LocalMem.SPAD,
                          dram_addr=a_buf.addr + (kb0 * m_x + a_dram_offset(c, plan, i0)) * srb,
                          dram_stride=m_x * srb, row_bytes=at * srb, n_rows=nk,
                          local_row=plan.a_base, local_stride=at, **seq())

        if n_chunks == 1:
            load_a(0, kb)
        for j in range(nb):
            for ch in range(n_chunks):
                kb0 = ch * kbc
                nk = min(kbc, kb - kb0)
                cmds.dma_load(mem=LocalMem.SPAD,
                              dram_addr=w_buf.addr + (j * k_pad + kb0 * wt) * srb,
                              dram_stride=wt * srb, row_bytes=wt * srb, n_rows=nk,
                              local_row=plan.w_base, local_stride=wt, **seq())
                if n_chunks > 1:
                    load_a(kb0, nk)
                for t in range(nk):
                    cmds.matmul(a_row=plan.a_base + t * at, w_row=plan.w_base + t * wt,
                                acc_row=plan.acc_row, m=mt, accumulate=(kb0 + t) > 0, **fmt,
                                **seq())
            pr = plan.p_rows
            cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr + j * pr * c.acc_row_bytes,
                          dram_stride=c.acc_row_bytes, row_bytes=c.acc_row_bytes, n_rows=pr,
                          local_row=plan.param_row, local_stride=1, **seq())
            if plan.gelu:
                cmds.gelu(acc_row=plan.acc_row, spad_row=plan.o_base, n_rows=mt,
                          param_row=plan.param_row, **seq())
            else:
                cmds.requant(acc_row=plan.acc_row, spad_row=plan.o_base, n_rows=mt,
                             param_row=plan.param_row, relu=relu, **seq())
            cmds.dma_store(mem=LocalMem.SPAD, dram_addr=o_buf.addr + (j * m + i0) * srb,
                           dram_stride=0, row_bytes=mt * srb, n_rows=1, local_row=plan.o_base,
                           local_stride=0, **seq())
    return cmds



def build_linear_commands_double_buffered(
        config: NPUConfig, plan: LinearPlan, a_buf: Buffer, w_buf: Buffer, p_buf: Buffer,
        o_buf: Buffer, relu: bool, sems: dict[str, Semaphore]) -> tuple[CommandList, dict]:
    """The double-buffered command stream of one linear layer (``plan.double_buffer``).

    A *step* is one (M tile, N group): ``n_group`` N blocks of ``m_tile`` rows, each with its
    own accumulator tile. A *phase* is one K chunk of a step: the activation chunk (M tile x
    K chunk), the weight chunk (K chunk x N group) and ``nk * n_group`` MATMULs, each
    streaming all ``m_tile`` rows. Phases run M tiles, then N groups, then K chunks; with
    ``plan.snake`` the K chunks of every other step run backwards, so the chunks still
    resident from the previous step are not reloaded. Four pool semaphores order the engines:
    ``L`` counts retired loads, ``M`` finished phases (the last MATMUL of a phase signals),
    ``R`` requantizations, ``S`` stores.

    * Loads of phase ``p + 1`` go to the buffers phase ``p`` does not use, waiting ``M`` for
      the phase that used the buffer before; they are issued during phase ``p`` (prefetch).
      A load into a buffer phase ``p`` itself used (a single activation buffer) is issued
      after phase ``p``'s matmuls. Content already in a buffer is not reloaded.
    * Parameters of a batch of ``plan.p_steps`` steps (consecutive N groups of one M tile;
      2 buffers) load with phase ``min(first(s - 1) + 2, first(s))`` of its first step ``s``
      and wait ``R`` for the requantizations of the batch before the previous one; the first
      matmul of every phase waits ``L`` for the phase's loads. With one step per batch that
      makes the accumulator tile of step ``s - 2`` free before step ``s`` overwrites it; with
      more, a matmul of step ``s - 1`` waits ``S`` for the stores of step ``s - 2`` instead.
    * Accumulator tiles of consecutive steps sit at opposite ends of the accumulator region;
      if they overlap (two full tiles do not fit), step ``s`` requantizes the overlapped rows
      first and the overwriting matmuls of those rows in step ``s + 1`` run last in their K
      block, waiting ``R`` for them.
    * Output tiles (``len(plan.o_bases)`` buffers): the last matmul of step ``s`` that has no
      other wait waits ``S`` for the store of the step that used the output tile before (or,
      with two output tiles and no such matmul, the step's parameter load does).
    * Requantization of step ``s`` waits ``M`` for its last phase; each store waits ``R``.
    * Stream order of phase ``p >= 1``: its late loads, its first matmul, the
      requantizations and stores of the step that ended with phase ``p - 1``, the prefetch of
      phase ``p + 1``, the rest of its matmuls. The first matmul is thus fetched right behind
      the previous phase's (a command fetch shares the read channel with DMA bursts).
    * The first phase loads in pieces of K blocks (sized by the timing model), each followed by
      its matmuls, so the array starts after one K block; the last step's requantization and
      stores are split into pieces that overlap.

    Every wait is on a command earlier in the stream, so the stream cannot deadlock and the
    in-order functional model runs it too. Returns the commands and the number of signals
    issued per semaphore name.
    """
    ops = build_program(config, plan, a_buf.addr, w_buf.addr, p_buf.addr, o_buf.addr, relu)
    cmds = CommandList()
    issued = dict.fromkeys("LMRS", 0)
    for op in ops:
        wait = None
        if op.wait is not None:
            sem = sems[op.wait[0]]
            wait = (sem.id, sem.target(op.wait[1]))
        signal = None
        if op.signal is not None:
            signal = sems[op.signal].id
            issued[op.signal] += 1
        getattr(cmds, op.method)(**command_fields(op), wait=wait, signal=signal)
    return cmds, issued
