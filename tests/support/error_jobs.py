"""The table of error cases (one bad command per case, the error code, the reported address
and opcode), derived from an :class:`~hw.config.NPUConfig`, and a job that runs the whole
table in one simulation through CSRs only (no runtime), on any backend: the functional model,
the performance model or the RTL.

``error_cases(NPUConfig(rows=8, cols=8, spad_rows=64, acc_rows=16, n_sems=4,
axi_data_bits=64))`` is the table ``tests/sw/test_model.py`` has always checked."""

from __future__ import annotations

from collections.abc import Callable

from hw.config import NPUConfig
from hw.isa import (
    LN_MAX_ELEMS,
    MAX_RING_SIZE,
    REGISTER_STRUCTS,
    Csr,
    ErrorCode,
    IrqBit,
    LocalMem,
    Opcode,
    Pte,
    VmWord,
    pack_fields,
    queue_csr,
    sem_csr,
    unpack_fields,
)
from sw.runtime import CommandList

RING = 0x1000
RING_SLOTS = 64
DMA_ADDR = 0x2000

#: The fields of an :func:`error_table` report every implementation gives the same
#: (:mod:`hw.isa`, "Errors"); ``head`` may differ (the RTL fetches ahead, the model does not).
EXACT_FIELDS = ("irq", "irq_status", "code", "queue", "opcode", "index", "address", "q_code",
                "q_opcode", "q_index", "q_address", "status", "sem0", "sem1", "cleared")

#: name -> (build(CommandList), error code, reported address, reported opcode)
ErrorCase = tuple[Callable[[CommandList], None], ErrorCode, int, "Opcode | int"]


def _dma(c: CommandList, cfg: NPUConfig, **kw) -> None:
    args = dict(mem=LocalMem.SPAD, dram_addr=DMA_ADDR, dram_stride=cfg.spad_row_bytes,
                row_bytes=cfg.spad_row_bytes, n_rows=4, local_row=0, local_stride=1)
    args.update(kw)
    c.dma_load(**args)


def error_cases(cfg: NPUConfig) -> dict[str, ErrorCase]:
    """Every error a single command can raise, with its expected report (``ERR_CODE``,
    ``ERR_ADDR``, opcode), for the memories, semaphores and DRAM of ``cfg``; the bad command
    is the third of its queue (index 2). The DMA takes any byte address and length, so no DMA
    case is ``MISALIGNED`` or ``BAD_SIZE``; ``spad_rows >= 3 * rows + 15``."""
    d, sp, ac = cfg.dram_bytes, cfg.spad_rows, cfg.acc_rows
    row = cfg.spad_row_bytes
    return {
        "bad_opcode": (lambda c: c.append_raw(bytes([0x42]) + bytes(31)),
                       ErrorCode.BAD_OPCODE, RING + 2 * 32, 0x42),
        "bad_wait_sem": (lambda c: c.nop(wait=(cfg.n_sems, 0)), ErrorCode.BAD_SEM, cfg.n_sems,
                         Opcode.NOP),
        "bad_signal_sem": (lambda c: c.matmul(a_row=0, w_row=0, acc_row=0, m=1,
                                              signal=cfg.n_sems + 5),
                           ErrorCode.BAD_SEM, cfg.n_sems + 5, Opcode.MATMUL),
        "bad_signal_sem_first": (lambda c: c.matmul(a_row=0, w_row=0, acc_row=0, m=1,
                                                    signal=cfg.n_sems),
                                 ErrorCode.BAD_SEM, cfg.n_sems, Opcode.MATMUL),
        "bad_dram_addr_odd": (lambda c: _dma(c, cfg, dram_addr=d - row + 1, n_rows=1),
                              ErrorCode.BAD_DRAM_ADDR, d - row + 1, Opcode.DMA_LOAD),
        "bad_local_partial_row": (lambda c: _dma(c, cfg, dram_addr=DMA_ADDR + 3,
                                                 row_bytes=row + 1, n_rows=1,
                                                 local_row=sp - 1),
                                  ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.DMA_LOAD),
        "bad_dram_addr": (lambda c: _dma(c, cfg, dram_addr=d - 2 * row),
                          ErrorCode.BAD_DRAM_ADDR, d, Opcode.DMA_LOAD),
        "bad_local_dma": (lambda c: _dma(c, cfg, local_row=sp - 2, local_stride=1),
                          ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.DMA_LOAD),
        "bad_local_matmul_w": (lambda c: c.matmul(a_row=0, w_row=sp - cfg.rows // 2, acc_row=0,
                                                  m=1),
                               ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.MATMUL),
        "bad_local_matmul_acc": (lambda c: c.matmul(a_row=0, w_row=0, acc_row=ac - 6, m=7),
                                 ErrorCode.BAD_LOCAL_ADDR, ac, Opcode.MATMUL),
        "bad_local_matmul_k_blocks_a": (lambda c: c.matmul(a_row=sp - 14, w_row=0, acc_row=0,
                                                           m=5, k_blocks=3),
                                        ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.MATMUL),
        "bad_local_matmul_k_blocks_w": (lambda c: c.matmul(a_row=0, w_row=sp - 3 * cfg.rows,
                                                           acc_row=0, m=1, k_blocks=4),
                                        ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.MATMUL),
        "bad_local_requant": (lambda c: c.requant(acc_row=0, spad_row=0, n_rows=1,
                                                  param_row=ac - 2),
                              ErrorCode.BAD_LOCAL_ADDR, ac, Opcode.REQUANT),
        "bad_dram_row": (lambda c: c.dma_store(mem=LocalMem.SPAD, dram_addr=d - 3 * row,
                                               dram_stride=2 * row, row_bytes=row, n_rows=3,
                                               local_row=0, local_stride=1),
                         ErrorCode.BAD_DRAM_ADDR, d + row, Opcode.DMA_STORE),  # first bad row
        "bad_local_requant_order": (lambda c: c.requant(acc_row=ac - 1, spad_row=sp - 1,
                                                        n_rows=2, param_row=ac - 1),
                                    ErrorCode.BAD_LOCAL_ADDR, ac, Opcode.REQUANT),  # acc first
        "bad_local_gelu_param": (lambda c: c.gelu(acc_row=0, spad_row=0, n_rows=1,
                                                  param_row=ac - 3),     # the fourth row
                                 ErrorCode.BAD_LOCAL_ADDR, ac, Opcode.GELU),
        "bad_size_add_blocks": (lambda c: c.add(a_row=0, b_row=10, out_row=20, n_rows=4,
                                                n_blocks=2, stride=3, param_row=0, shift=0),
                                ErrorCode.BAD_SIZE, 3, Opcode.ADD),
        "bad_size_add_overlap": (lambda c: c.add(a_row=0, b_row=8, out_row=9, n_rows=2,
                                                 n_blocks=1, stride=0, param_row=0, shift=0),
                                 ErrorCode.BAD_SIZE, 9, Opcode.ADD),
        "bad_size_layernorm_elems": (lambda c: c.layernorm(
            a_row=0, b_row=sp - 1, out_row=sp - 2, n_rows=1,
            n_blocks=LN_MAX_ELEMS // cfg.cols + 1, stride=1, param_row=0, shift=0, g_shift=0),
            ErrorCode.BAD_SIZE, LN_MAX_ELEMS // cfg.cols + 1, Opcode.LAYERNORM),
        "bad_local_layernorm_param": (lambda c: c.layernorm(
            a_row=0, b_row=2, out_row=4, n_rows=1, n_blocks=2, stride=1, param_row=ac - 7,
            shift=0, g_shift=0), ErrorCode.BAD_LOCAL_ADDR, ac, Opcode.LAYERNORM),
        "bad_local_add_out": (lambda c: c.add(a_row=0, b_row=4, out_row=sp - 1, n_rows=2,
                                              n_blocks=1, stride=0, param_row=0, shift=0),
                              ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.ADD),
        "bad_local_add_order": (lambda c: c.add(a_row=sp - 1, b_row=0, out_row=8, n_rows=2,
                                                n_blocks=1, stride=0, param_row=ac - 1,
                                                shift=0),
                                ErrorCode.BAD_LOCAL_ADDR, sp, Opcode.ADD),   # a first
        "fence_misaligned": (lambda c: c.fence(addr=0x102, value=1), ErrorCode.MISALIGNED,
                             0x102, Opcode.FENCE),
        "fence_bad_addr": (lambda c: c.fence(addr=d, value=1), ErrorCode.BAD_DRAM_ADDR, d,
                           Opcode.FENCE),
    }


#: the DRAM window ``[base, limit)`` of queue 0 while a :func:`window_cases` case runs (it holds
#: the ring and ``DMA_ADDR``)
WINDOW = (RING, 0x4000)


def window_cases(cfg: NPUConfig) -> dict[str, ErrorCase]:
    """Accesses just outside queue 0's :data:`WINDOW` (half-open: the limit is outside, the
    base inside), as :func:`error_cases`: a DMA row starting at the limit, a row ending one row
    below the base, a store's second row at the limit, a fence word at the limit. Each is a
    ``WINDOW`` error at the first address outside (the row's start)."""
    base, limit = WINDOW
    row = cfg.spad_row_bytes
    return {
        "window_load_at_limit": (lambda c: _dma(c, cfg, dram_addr=limit - 2 * row, n_rows=3),
                                 ErrorCode.WINDOW, limit, Opcode.DMA_LOAD),
        "window_load_below_base": (lambda c: _dma(c, cfg, dram_addr=base - row, n_rows=1),
                                   ErrorCode.WINDOW, base - row, Opcode.DMA_LOAD),
        "window_store_at_limit": (lambda c: c.dma_store(mem=LocalMem.SPAD, dram_addr=limit - row,
                                                        dram_stride=row, row_bytes=row,
                                                        n_rows=2, local_row=0, local_stride=1),
                                  ErrorCode.WINDOW, limit, Opcode.DMA_STORE),
        "window_fence_at_limit": (lambda c: c.fence(addr=limit, value=1), ErrorCode.WINDOW,
                                  limit, Opcode.FENCE),
    }


#: Page tables of the :func:`vm_cases` (physical pages): the root, two level-0 tables, and the
#: context queue 0 runs in; virtual page ``VM_VA`` maps ``DMA_ADDR``'s page read-write,
#: ``VM_VA + 0x1000`` it read-only, ``VM_VA + 0x2000`` is not mapped; the ring's page is
#: mapped at its own address, read-only (its ring is virtual too).
VM_ROOT, VM_TABLE, VM_TABLE0, VM_VA = 0x6000, 0x7000, 0x8000, 0x40_0000
VM_WORD = pack_fields(VmWord, {"enable": 1, "asid": 5, "root": VM_ROOT >> 12})


def vm_tables() -> dict[int, int]:
    """The words (physical address -> 32-bit value) of the :func:`vm_cases`' page tables."""
    def pte(ppn, write=1):
        return pack_fields(Pte, {"valid": 1, "read": 1, "write": write, "ppn": ppn})
    return {VM_ROOT + 4 * (VM_VA >> 22): pte(VM_TABLE >> 12),
            VM_TABLE + 4 * ((VM_VA >> 12) & 0x3FF): pte(DMA_ADDR >> 12),
            VM_TABLE + 4 * (((VM_VA >> 12) + 1) & 0x3FF): pte(DMA_ADDR >> 12, write=0),
            VM_ROOT + 4 * (RING >> 22): pte(VM_TABLE0 >> 12),
            VM_TABLE0 + 4 * ((RING >> 12) & 0x3FF): pte(RING >> 12, write=0)}


def vm_cases(cfg: NPUConfig) -> dict[str, ErrorCase]:
    """Page faults (:mod:`hw.isa.vm`) of queue 0 in the context of :func:`vm_tables`: a load
    whose second row lies on an unmapped page (``ERR_ADDR`` that row's virtual address), a store
    to the read-only page (its first byte), a translated row that wraps past ``2**32``
    (``BAD_DRAM_ADDR``, checked before any translation), and fences whose (virtual) word is on
    the unmapped and on the read-only page."""
    row = cfg.spad_row_bytes
    return {
        "vm_load_not_mapped": (lambda c: _dma(c, cfg, dram_addr=VM_VA + 0x1000 + 8,
                                              dram_stride=0x1000, n_rows=2),
                               ErrorCode.PAGE_NOT_MAPPED, VM_VA + 0x2008, Opcode.DMA_LOAD),
        "vm_store_read_only": (lambda c: c.dma_store(mem=LocalMem.SPAD, dram_addr=VM_VA + 0xFF8,
                                                     dram_stride=0, row_bytes=16,
                                                     n_rows=1, local_row=0, local_stride=0),
                               ErrorCode.PAGE_PERMISSION, VM_VA + 0x1000, Opcode.DMA_STORE),
        "vm_wrap": (lambda c: _dma(c, cfg, dram_addr=(1 << 32) - row + 1, n_rows=1),
                    ErrorCode.BAD_DRAM_ADDR, (1 << 32) - row + 1, Opcode.DMA_LOAD),
        "vm_fence_not_mapped": (lambda c: c.fence(addr=VM_VA + 0x2004, value=1),
                                ErrorCode.PAGE_NOT_MAPPED, VM_VA + 0x2004, Opcode.FENCE),
        "vm_fence_read_only": (lambda c: c.fence(addr=VM_VA + 0x1010, value=1),
                               ErrorCode.PAGE_PERMISSION, VM_VA + 0x1010, Opcode.FENCE),
    }


def ring_cases(cfg: NPUConfig, first_slot: int) -> dict[str, tuple[dict, ErrorCode, int, int]]:
    """Errors of the ring itself, found at fetch (opcode 0), for a queue whose next slot is
    ``first_slot``: ``{name: (registers, code, ERR_ADDR, ERR_CMD)}``, ``registers`` the queue
    CSRs (:class:`hw.isa.Csr` offsets) the case writes over the ring's (``RING_BASE`` =
    :data:`RING`, ``RING_SIZE`` = :data:`RING_SLOTS`, ``TAIL`` = ``first_slot + 3``). A
    misaligned ring base fails the first fetch; a ring running past the end of DRAM fails at
    the slot that lies there (the third command); a ``RING_SIZE`` that is not a power of two
    in ``[2, MAX_RING_SIZE]``, or a ``TAIL`` or ``HEAD`` outside the ring, fails the first
    fetch with ``BAD_SIZE`` at ``RING_BASE`` (:func:`hw.isa.ring_is_bad`; ``HEAD``: the
    ring shrinks to 2 slots under ``HEAD == TAIL == first_slot``, which must be >= 2, and
    nothing happens until ``TAIL`` is written)."""
    past = cfg.dram_bytes - 32 * (first_slot + 2)
    bad = {"ring_size_zero": {Csr.RING_SIZE: 0}, "ring_size_one": {Csr.RING_SIZE: 1},
           "ring_size_not_pow2": {Csr.RING_SIZE: RING_SLOTS + 8},
           "ring_size_too_large": {Csr.RING_SIZE: 2 * MAX_RING_SIZE},
           "ring_tail_outside": {Csr.TAIL: RING_SLOTS + first_slot + 3},
           "ring_head_outside": {Csr.RING_SIZE: 2, Csr.TAIL: 1}}
    out = {"ring_misaligned": ({Csr.RING_BASE: RING + 8}, ErrorCode.MISALIGNED, RING + 8, 0),
           "ring_beyond_dram": ({Csr.RING_BASE: past}, ErrorCode.BAD_DRAM_ADDR,
                                cfg.dram_bytes, 2)}
    out |= {name: (regs, ErrorCode.BAD_SIZE, RING, 0) for name, regs in bad.items()}
    if cfg.tlb_entries:     # a virtual ring (queue 0 in vm_tables' context) on a page not mapped
        base = VM_VA + 0x2000
        out["ring_not_mapped"] = ({Csr.RING_BASE: base}, ErrorCode.PAGE_NOT_MAPPED,
                                  base + 32 * first_slot, 0)
    return out


def _ring_errors(backend, max_cycles: int) -> dict:
    """Run :func:`ring_cases` (three SIGNALs each), then put the ring back."""
    cfg, rd, wr = backend.config, backend.csr_read, backend.csr_write
    out = {}
    for name in ring_cases(cfg, 0):
        head0 = rd(queue_csr(0, Csr.HEAD))
        if head0 + 3 >= RING_SLOTS or (name == "ring_head_outside" and head0 < 2):
            raise ValueError(f"ring case {name} needs 3 slots from {head0} and TAIL after "
                             "them without a wrap (and HEAD >= 2 for ring_head_outside)")
        regs = ring_cases(cfg, head0)[name][0]
        base = regs.get(Csr.RING_BASE, RING)
        virtual = name == "ring_not_mapped"
        if virtual:
            wr(queue_csr(0, Csr.Q_VM), VM_WORD)
        for reg, value in regs.items():
            if reg != Csr.TAIL:
                wr(queue_csr(0, reg), value)
        c = CommandList()
        for _ in range(3):
            c.signal(0)
        for k, cmd in enumerate(c):
            if not virtual and base + 32 * (head0 + k + 1) <= cfg.dram_bytes:
                backend.mem_write(base + 32 * (head0 + k), cmd.raw)
        wr(queue_csr(0, Csr.TAIL), regs.get(Csr.TAIL, head0 + 3))
        irq = backend.wait_irq(max_cycles)
        err = unpack_fields(REGISTER_STRUCTS["ERR_CODE"], rd(Csr.ERR_CODE))
        out[name] = {"irq": irq, "code": ErrorCode(err.code).name, "queue": err.queue,
                     "opcode": err.opcode, "index": rd(Csr.ERR_CMD), "address": rd(Csr.ERR_ADDR),
                     "status": rd(Csr.STATUS), "sem0": rd(sem_csr(0)),
                     "head": rd(queue_csr(0, Csr.HEAD)) - head0, "first_slot": head0}
        # the clear (HEAD := TAIL) is for good, whatever the ring registers: HEAD == TAIL
        wr(Csr.CONTROL, 1)
        wr(Csr.IRQ_STATUS, IrqBit.ERROR)
        cleared = rd(Csr.STATUS) == 0 and not backend.wait_irq(10)
        # the ring back, from slot 2: TAIL there (a doorbell on the case's ring, which fails
        # before it runs anything), a clear (HEAD := TAIL), then its size and base
        wr(queue_csr(0, Csr.TAIL), 2)
        wr(Csr.CONTROL, 1)
        wr(queue_csr(0, Csr.RING_SIZE), RING_SLOTS)
        wr(Csr.IRQ_STATUS, IrqBit.ERROR)
        wr(queue_csr(0, Csr.RING_BASE), RING)
        wr(queue_csr(0, Csr.Q_VM), 0)
        out[name]["cleared"] = cleared and rd(Csr.STATUS) == 0 and not backend.wait_irq(10)
    return out


def error_table(backend, *, max_cycles: int = 20_000) -> dict:
    """Run every case of :func:`error_cases` and :func:`window_cases` (with queue 0's window
    set to :data:`WINDOW` for those) for the backend's configuration, one after the other on
    queue 0, each as ``SIGNAL 0, SIGNAL 0, <bad>, BARRIER, SIGNAL 1`` (so that the
    report is exact on every implementation, see :mod:`hw.isa`), and clear the error with
    ``CONTROL`` before the next case.

    Returns ``{name: report}`` with the latched ``ERR_CODE`` fields, ``ERR_CMD``,
    ``ERR_ADDR``, the queue's own ``Q_ERR_*`` report, ``STATUS``, the two semaphores, how far
    ``HEAD`` moved from the case's first ring slot (``first_slot``: the ring position goes on
    from case to case, so a fetch error's address is that of slot ``first_slot + 2``),
    whether the error interrupt was raised, and whether the device was idle and silent after
    the clear. Then the :func:`ring_cases` (named ``ring_*``), reported likewise.
    """
    cfg = backend.config
    rd, wr = backend.csr_read, backend.csr_write
    wr(queue_csr(0, Csr.RING_BASE), RING)
    wr(queue_csr(0, Csr.RING_SIZE), RING_SLOTS)
    wr(Csr.IRQ_ENABLE, IrqBit.ERROR)
    out = {}
    windowed = window_cases(cfg)
    translated = vm_cases(cfg) if cfg.tlb_entries else {}
    for addr, word in vm_tables().items():
        if translated:
            backend.mem_write(addr, word.to_bytes(4, "little"))
    for name, (build, _, _, _) in sorted((error_cases(cfg) | windowed | translated).items()):
        if name in windowed:
            wr(queue_csr(0, Csr.WINDOW_BASE), WINDOW[0])
            wr(queue_csr(0, Csr.WINDOW_LIMIT), WINDOW[1])
        if name in translated:
            wr(queue_csr(0, Csr.Q_VM), VM_WORD)
        c = CommandList()
        c.signal(0)
        c.signal(0)
        build(c)
        c.barrier()
        c.signal(1)             # must not run: the queue stopped
        head0 = rd(queue_csr(0, Csr.HEAD))
        for k, cmd in enumerate(c):
            backend.mem_write(RING + 32 * ((head0 + k) % RING_SLOTS), cmd.raw)
        wr(queue_csr(0, Csr.TAIL), (head0 + len(c)) % RING_SLOTS)
        irq = backend.wait_irq(max_cycles)
        err = unpack_fields(REGISTER_STRUCTS["ERR_CODE"], rd(Csr.ERR_CODE))
        q_err = unpack_fields(REGISTER_STRUCTS["Q_ERR_CODE"], rd(queue_csr(0, Csr.Q_ERR_CODE)))
        out[name] = {
            "irq": irq, "irq_status": rd(Csr.IRQ_STATUS) & IrqBit.ERROR,
            "code": ErrorCode(err.code).name, "queue": err.queue, "opcode": err.opcode,
            "index": rd(Csr.ERR_CMD), "address": rd(Csr.ERR_ADDR),
            "q_code": ErrorCode(q_err.code).name, "q_opcode": q_err.opcode,
            "q_index": rd(queue_csr(0, Csr.Q_ERR_CMD)),
            "q_address": rd(queue_csr(0, Csr.Q_ERR_ADDR)),
            "status": rd(Csr.STATUS), "sem0": rd(sem_csr(0)), "sem1": rd(sem_csr(1)),
            "head": (rd(queue_csr(0, Csr.HEAD)) - head0) % RING_SLOTS, "first_slot": head0,
        }
        wr(Csr.CONTROL, 1)
        wr(Csr.IRQ_STATUS, IrqBit.ERROR)
        out[name]["cleared"] = (rd(Csr.STATUS) == 0 and rd(sem_csr(0)) == 0
                                and rd(Csr.ERR_CODE) == 0 and not backend.wait_irq(10))
        wr(queue_csr(0, Csr.WINDOW_BASE), 0)
        wr(queue_csr(0, Csr.WINDOW_LIMIT), 0)
        wr(queue_csr(0, Csr.Q_VM), 0)
    out.update(_ring_errors(backend, max_cycles))
    return out
