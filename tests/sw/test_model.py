"""sw.model.ModelBackend: CSRs, every command, every error code, ring handling."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import (
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    Csr,
    ErrorCode,
    IrqBit,
    LocalMem,
    Opcode,
    error_stage,
    queue_csr,
    sem_csr,
)
from sw.backend import Backend, BackendError
from sw.golden import matmul_int
from sw.model import ModelBackend
from sw.quant import requantize
from sw.runtime import CommandList
from tests.support.error_jobs import WINDOW, error_cases
from tests.support.error_jobs import window_cases as error_window_cases

RING = 0x1000


class Host:
    """Drives a ModelBackend's queue directly through CSRs (no runtime)."""

    def __init__(self, config: NPUConfig, ring_size: int = 64, queue: int = 0) -> None:
        self.be = config if isinstance(config, ModelBackend) else ModelBackend(config)
        self.q = queue
        self.ring_size = ring_size
        self.base = RING + queue * 0x1000
        self.be.csr_write(queue_csr(queue, Csr.RING_BASE), self.base)
        self.be.csr_write(queue_csr(queue, Csr.RING_SIZE), ring_size)
        self.tail = 0

    def submit(self, cmds: CommandList) -> None:
        for c in cmds:
            self.be.mem_write(self.base + 32 * self.tail, c.raw)
            self.tail = (self.tail + 1) % self.ring_size
        self.be.csr_write(queue_csr(self.q, Csr.TAIL), self.tail)

    def head(self) -> int:
        return self.be.csr_read(queue_csr(self.q, Csr.HEAD))

    def err(self) -> tuple[int, int, int, int, int]:
        rd = self.be.csr_read
        word = rd(Csr.ERR_CODE)
        return word & 0xFF, (word >> 8) & 0xFF, word >> 16, rd(Csr.ERR_CMD), rd(Csr.ERR_ADDR)


def test_identity_and_config_csrs():
    cfg = NPUConfig(rows=4, cols=6, spad_rows=128, acc_rows=32, axi_data_bits=128,
                    n_queues=2, n_sems=8, dma_outstanding=3)
    be = ModelBackend(cfg)
    assert isinstance(be, Backend)
    rd = be.csr_read
    assert rd(Csr.ID) == CSR_ID_VALUE and rd(Csr.VERSION) == CSR_VERSION_VALUE
    assert rd(Csr.CFG_ARRAY) == 4 | 6 << 8 | 2 << 16 | 8 << 24
    assert rd(Csr.CFG_SPAD) == 128 and rd(Csr.CFG_ACC) == 32
    assert rd(Csr.CFG_BUS) == 16 | 3 << 8 | 8 << 16 | 8 << 24
    assert rd(Csr.CFG_DRAM) == cfg.dram_bytes
    assert rd(Csr.STATUS) == 0 and rd(Csr.CYCLES_LO) == 0 and rd(Csr.CYCLES_HI) == 0
    assert rd(0x3FC) == 0  # unmapped
    with pytest.raises(BackendError):
        rd(0x3)
    with pytest.raises(BackendError):
        be.mem_read(cfg.dram_bytes - 2, 4)
    with pytest.raises(BackendError):
        be.mem_write(-1, b"x")


def test_dma_2d_spad_and_acc_round_trip():
    cfg = NPUConfig(rows=8, cols=8, spad_rows=64, acc_rows=32)
    h = Host(cfg)
    src = np.arange(4 * 48, dtype=np.uint8).astype(np.int8).reshape(4, 48)
    h.be.mem_write(0x8000, src.tobytes())           # 4 DRAM rows, stride 48, 16 bytes used
    acc_src = np.arange(-20, 28, dtype="<i4").reshape(2, 24)
    h.be.mem_write(0x9000, acc_src.tobytes())       # 2 rows of 96 bytes, 64 used (2 acc rows)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=0x8000 + 8, dram_stride=48, row_bytes=16, n_rows=4,
               local_row=10, local_stride=3)
    c.dma_load(mem=LocalMem.ACC, dram_addr=0x9000, dram_stride=96, row_bytes=64, n_rows=2,
               local_row=5, local_stride=2)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=0xA000, dram_stride=24, row_bytes=16, n_rows=4,
                local_row=10, local_stride=3)
    c.dma_store(mem=LocalMem.ACC, dram_addr=0xB000, dram_stride=64, row_bytes=64, n_rows=2,
                local_row=5, local_stride=2)
    c.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=0, row_bytes=0, n_rows=5,
               local_row=9999, local_stride=0)   # zero-length: nothing, no checks
    h.submit(c)
    assert h.be.csr_read(Csr.STATUS) == 0 and h.head() == 5
    for r in range(4):
        np.testing.assert_array_equal(h.be.spad[10 + 3 * r:12 + 3 * r].ravel(), src[r, 8:24])
        got = np.frombuffer(h.be.mem_read(0xA000 + 24 * r, 16), np.int8)
        np.testing.assert_array_equal(got, src[r, 8:24])
    for r in range(2):
        np.testing.assert_array_equal(h.be.acc[5 + 2 * r:7 + 2 * r].ravel(), acc_src[r, :16])
    got = np.frombuffer(h.be.mem_read(0xB000, 128), "<i4").reshape(2, 16)
    np.testing.assert_array_equal(got, acc_src[:, :16])


@pytest.mark.parametrize("mem", [LocalMem.SPAD, LocalMem.ACC])
def test_dma_any_byte_address_and_length(mem):
    """Odd addresses, strides and lengths against a naive byte model, held to the byte: a
    load fills ceil(row_bytes / L) local rows and zero-fills the rest of a partial last one
    (no other local row changes); a store writes exactly the rows' bytes (DRAM elsewhere is
    unchanged). Rows whose local rows (load) or DRAM bytes (store) overlap land in row order,
    the last one on top; rows side by side (``local_stride == lrows``) too."""
    cfg = NPUConfig(rows=8, cols=8, spad_rows=64, acc_rows=32)
    L = cfg.spad_row_bytes if mem == LocalMem.SPAD else cfg.acc_row_bytes
    rng = np.random.default_rng(3)
    for addr, stride, row_bytes, n_rows, gap in [
            (0x8001, 13, 11, 3, 1), (0x8FFD, 5, 5, 2, 1), (0x8003, 0, 1, 1, 1),
            (0x9007, 4 * L + 1, 2 * L + 3, 2, 1), (0x8005, 3 * L, 3 * L - 1, 4, 0),
            (0x8002, 7, 2 * L + 9, 3, -1), (0x8010, 0, L + 4, 3, -2), (0x8000, L, L, 5, 0)]:
        h = Host(cfg)
        image = rng.integers(0, 256, 0x4000, dtype=np.uint8)
        h.be.mem_write(0x8000, image.tobytes())
        local = h.be.spad if mem == LocalMem.SPAD else h.be.acc
        local[:] = rng.integers(-100, 100, local.shape)
        before = local.copy().view(np.uint8).reshape(len(local), -1).copy()
        lrows = -(-row_bytes // L)
        local_stride = lrows + gap
        c = CommandList()
        c.dma_load(mem=mem, dram_addr=addr, dram_stride=stride, row_bytes=row_bytes,
                   n_rows=n_rows, local_row=1, local_stride=local_stride)
        c.dma_store(mem=mem, dram_addr=addr + 0x2000, dram_stride=stride, row_bytes=row_bytes,
                    n_rows=n_rows, local_row=1, local_stride=local_stride)
        h.submit(c)
        assert h.be.csr_read(Csr.STATUS) == 0 and h.head() == 2
        want_local = before.copy()
        want_dram = bytearray(image.tobytes())
        for r in range(n_rows):              # the load, row by row
            row = image[addr - 0x8000 + r * stride:][:row_bytes]
            first = 1 + r * local_stride
            padded = np.zeros(lrows * L, np.uint8)
            padded[:row_bytes] = row
            want_local[first:first + lrows] = padded.reshape(lrows, L)
        for r in range(n_rows):              # the store of what the load left, row by row
            first = 1 + r * local_stride
            o = addr + 0x2000 - 0x8000 + r * stride
            want_dram[o:o + row_bytes] = want_local[first:first + lrows].tobytes()[:row_bytes]
        got_local = local.view(np.uint8).reshape(len(local), -1)
        np.testing.assert_array_equal(got_local, want_local)
        assert h.be.mem_read(0x8000, 0x4000) == bytes(want_dram)


def test_matmul_overwrite_accumulate_and_requant():
    cfg = NPUConfig(rows=4, cols=3, spad_rows=64, acc_rows=32)  # acc row 4 elems, 1 unused
    h = Host(cfg)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (5, 4), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 3), dtype=np.int8)
    h.be.spad[0:4, :3] = w
    h.be.spad[0:4, 3] = 77                      # ignored: beyond cols
    h.be.spad[8:13, :4] = a
    h.be.acc[2:7] = 12345                       # old contents
    c = CommandList()
    c.matmul(a_row=8, w_row=0, acc_row=2, m=5)
    h.submit(c)
    ref = matmul_int(a, w)
    np.testing.assert_array_equal(h.be.acc[2:7, :3], ref)
    assert np.all(h.be.acc[2:7, 3] == 0)
    c = CommandList()
    c.matmul(a_row=8, w_row=0, acc_row=2, m=5, accumulate=True)
    c.matmul(a_row=8, w_row=0, acc_row=20, m=0)  # m = 0: nothing
    h.submit(c)
    np.testing.assert_array_equal(h.be.acc[2:7, :3], 2 * ref.astype(np.int64))
    # REQUANT with per-channel parameters at acc rows 10..12
    bias, mult, shift = [5, -7, 100000], [1 << 30, 1500000000, (1 << 31) - 1], [33, 34, 40]
    h.be.acc[10, :3], h.be.acc[11, :3], h.be.acc[12, :3] = bias, mult, shift
    h.be.spad[30:35] = 99
    for relu in (False, True):
        c = CommandList()
        c.requant(acc_row=2, spad_row=30, n_rows=5, param_row=10, relu=relu)
        h.submit(c)
        want = requantize(h.be.acc[2:7, :3], np.array(bias), np.array(mult), np.array(shift),
                          relu=relu)
        np.testing.assert_array_equal(h.be.spad[30:35, :3], want)
        assert np.all(h.be.spad[30:35, 3] == 0)


def test_matmul_k_blocks_sums_tiles_along_k():
    """A MATMUL of ``k_blocks = 3`` equals three one-tile MATMULs accumulating (tile ``j``
    at ``a_row + j * m`` and ``w_row + j * rows``)."""
    cfg = NPUConfig(rows=4, cols=3, spad_rows=64, acc_rows=32)
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (3, 5, 4), dtype=np.int8)          # 3 K blocks of 5 rows
    w = rng.integers(-128, 128, (3, 4, 3), dtype=np.int8)
    h = Host(cfg)
    h.be.spad[0:12, :3] = w.reshape(12, 3)
    h.be.spad[20:35, :4] = a.reshape(15, 4)
    h.be.acc[2:7] = 99
    c = CommandList()
    c.matmul(a_row=20, w_row=0, acc_row=2, m=5, accumulate=True, k_blocks=3)
    c.matmul(a_row=20, w_row=0, acc_row=10, m=5, k_blocks=1)
    h.submit(c)
    want = 99 + sum(matmul_int(a[j], w[j]).astype(np.int64) for j in range(3))
    np.testing.assert_array_equal(h.be.acc[2:7, :3], want)
    np.testing.assert_array_equal(h.be.acc[10:15, :3], matmul_int(a[0], w[0]))


def test_softmax_causal_groups_against_naive_model():
    """SOFTMAX of more rows than ``cols`` (three groups of scale rows), two key blocks, a
    causal mask with ``q_offset`` and ``kv_len``: P and every reciprocal as the scalar
    transcription of hw.isa.SoftmaxBody (:func:`tests.hw.test_softmax.naive_softmax`), where
    the causal limit of row ``i`` is ``q_offset + i`` over all rows, not per group."""
    from tests.hw.test_softmax import naive_softmax
    cfg = NPUConfig(rows=4, cols=4, spad_rows=64, acc_rows=64)
    c = cfg.cols
    rng = np.random.default_rng(11)
    n_rows, stride = 2 * c + 2, 2 * c + 2
    b = dict(acc_row=4, spad_row=8, n_rows=n_rows, n_blocks=2, stride=stride, scale_row=50,
             kv_len=2 * c - 1, mult=40000, shift=14, causal=1, q_offset=1)
    h = Host(cfg)
    h.be.acc[4:4 + 2 * stride, :c] = rng.integers(-20, 20, (2 * stride, c))
    acc = [list(map(int, r)) for r in h.be.acc]
    spad = [list(map(int, r)) for r in h.be.spad]
    naive_softmax(cfg, acc, spad, b)
    cmds = CommandList()
    cmds.softmax(**b)
    h.submit(cmds)
    assert h.err()[0] == ErrorCode.NONE.value
    rows = slice(b["spad_row"], b["spad_row"] + 2 * stride)
    np.testing.assert_array_equal(h.be.spad[rows], np.array(spad[rows], np.int64))
    scale = slice(b["scale_row"], b["scale_row"] + 3)
    np.testing.assert_array_equal(h.be.acc[scale], np.array(acc[scale], np.int64))
    # the mask shows: row i keeps keys 0 .. min(q_offset + i, kv_len - 1) and no more
    p = h.be.spad[b["spad_row"]:b["spad_row"] + n_rows, :c]
    p = np.concatenate([p, h.be.spad[b["spad_row"] + stride:b["spad_row"] + stride + n_rows,
                                     :c]], axis=1)
    kept = (p > 0).sum(axis=1)
    assert kept.tolist() == [min(b["q_offset"] + i, b["kv_len"] - 1) + 1 for i in range(n_rows)]


def test_fence_irq_w1c_and_semaphores():
    cfg = NPUConfig(spad_rows=64, acc_rows=16, n_sems=4)
    h = Host(cfg)
    be = h.be
    c = CommandList()
    c.signal(2)
    c.nop(signal=2)
    c.wait(2, 2)
    c.fence(addr=0x100, value=0xDEADBEEF, irq=False, wait=(2, 2), signal=3)
    h.submit(c)
    assert be.csr_read(sem_csr(2)) == 2 and be.csr_read(sem_csr(3)) == 1
    assert be.mem_read(0x100, 4) == (0xDEADBEEF).to_bytes(4, "little")
    assert be.csr_read(Csr.IRQ_STATUS) == 0
    c = CommandList()
    c.fence(addr=0x104, value=7, irq=True)
    h.submit(c)
    assert be.csr_read(Csr.IRQ_STATUS) == IrqBit.FENCE
    assert not be.wait_irq(100)                  # not enabled
    be.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE)
    assert be.wait_irq(100)
    be.csr_write(Csr.IRQ_STATUS, IrqBit.ERROR)   # W1C of another bit: no effect
    assert be.wait_irq(100)
    be.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
    assert not be.wait_irq(100) and be.csr_read(Csr.IRQ_STATUS) == 0


def test_unsatisfied_wait_blocks_until_another_queue_signals():
    cfg = NPUConfig(spad_rows=64, acc_rows=16, n_queues=2)
    be = ModelBackend(cfg)
    q0, q1 = Host(be, queue=0), Host(be, queue=1)
    c = CommandList()
    c.nop(signal=0)
    c.fence(addr=0x200, value=1, wait=(1, 1))
    c.nop(signal=0)
    q0.submit(c)
    assert q0.head() == 1 and be.csr_read(Csr.STATUS) & 1   # blocked, busy
    assert be.mem_read(0x200, 4) == bytes(4)
    q0.submit(CommandList())                                   # another doorbell: still blocked
    assert q0.head() == 1
    c = CommandList()
    c.signal(1)
    q1.submit(c)                                               # queue 1 releases queue 0
    assert q0.head() == 3 and be.csr_read(Csr.STATUS) == 0
    assert be.mem_read(0x200, 4) == (1).to_bytes(4, "little")
    assert be.csr_read(sem_csr(0)) == 2


def test_ring_wraps_around():
    cfg = NPUConfig(spad_rows=64, acc_rows=16)
    h = Host(cfg, ring_size=4)
    for i in range(10):  # 10 batches of up to 3 commands through a 4-slot ring
        c = CommandList()
        for _ in range(1 + i % 3):
            c.signal(0)
        h.submit(c)
    assert h.be.csr_read(sem_csr(0)) == sum(1 + i % 3 for i in range(10))
    assert h.head() == h.tail == sum(1 + i % 3 for i in range(10)) % 4


def _error_case(cfg: NPUConfig, build, code: ErrorCode, addr: int, opcode: Opcode | int,
                window: tuple[int, int] = (0, 0)):
    h = Host(cfg)
    h.be.csr_write(queue_csr(0, Csr.WINDOW_BASE), window[0])
    h.be.csr_write(queue_csr(0, Csr.WINDOW_LIMIT), window[1])
    c = CommandList()
    c.signal(0)
    c.signal(0)
    build(c)
    c.signal(1)             # must not run: the queue stopped
    h.submit(c)
    be = h.be
    assert be.csr_read(Csr.STATUS) == 0b11
    op = opcode.value if isinstance(opcode, Opcode) else opcode
    assert h.err() == (code.value, 0, op, 2, addr)
    assert be.csr_read(Csr.IRQ_STATUS) & IrqBit.ERROR
    # HEAD on the failing command for an error found at fetch, one past it otherwise (the
    # model does not fetch ahead; hw.isa, Errors)
    assert be.csr_read(sem_csr(1)) == 0
    assert h.head() == (2 if error_stage(code.value, op) == "fetch" else 3)
    be.csr_write(Csr.IRQ_ENABLE, IrqBit.ERROR)
    assert be.wait_irq(10)
    # clear: error gone, queue flushed, semaphores zero, device works again
    be.csr_write(Csr.CONTROL, 1)
    be.csr_write(Csr.IRQ_STATUS, IrqBit.ERROR)
    assert be.csr_read(Csr.STATUS) == 0 and h.head() == h.tail
    assert be.csr_read(sem_csr(0)) == 0 and not be.wait_irq(10)
    c = CommandList()
    c.signal(1)
    c.append_raw(bytes([0xEE]) + bytes(31))
    h.submit(c)
    assert be.csr_read(sem_csr(1)) == 1
    assert h.err()[0] == ErrorCode.BAD_OPCODE.value and h.err()[3] == 1  # index since reset


CFG = NPUConfig(rows=8, cols=8, spad_rows=64, acc_rows=16, n_sems=4, axi_data_bits=64)
D = CFG.dram_bytes


#: the table of error cases, derived from CFG (tests.support.error_jobs; the same table runs on
#: the RTL in tests/cosim/test_error_table_rtl.py)
ERROR_CASES = error_cases(CFG)


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_error_codes(case):
    build, code, addr, opcode = ERROR_CASES[case]
    _error_case(CFG, build, code, addr, opcode)


@pytest.mark.parametrize("case", sorted(error_window_cases(CFG)))
def test_window_error_codes(case):
    build, code, addr, opcode = error_window_cases(CFG)[case]
    _error_case(CFG, build, code, addr, opcode, window=WINDOW)


@pytest.mark.parametrize("mem", [LocalMem.SPAD, LocalMem.ACC])
def test_window_is_half_open_for_dma_and_fence(mem):
    """A queue's DRAM window is ``[WINDOW_BASE, WINDOW_LIMIT)``: a DMA row or fence word that
    ends exactly at the limit, or starts exactly at the base, is inside; one beat further is a
    ``WINDOW`` error at the first row outside (the RTL's rule, ``hw/cmdproc``)."""
    base, limit = RING, 0x4000
    row = CFG.acc_row_bytes if mem == LocalMem.ACC else CFG.spad_row_bytes

    def run(build) -> tuple:
        h = Host(CFG)
        h.be.csr_write(queue_csr(0, Csr.WINDOW_BASE), base)
        h.be.csr_write(queue_csr(0, Csr.WINDOW_LIMIT), limit)
        h.be.mem_write(limit - 2 * row, bytes(range(1, 2 * row + 1)))
        c = CommandList()
        build(c)
        h.submit(c)
        return h, h.err()

    def load(addr, n_rows):
        return lambda c: c.dma_load(mem=mem, dram_addr=addr, dram_stride=row, row_bytes=row,
                                    n_rows=n_rows, local_row=0, local_stride=1)

    h, err = run(load(limit - 2 * row, 2))              # the last row ends at the limit
    assert err[0] == 0 and h.head() == h.tail
    got = h.be.acc[:2].tobytes() if mem == LocalMem.ACC else h.be.spad[:2].tobytes()
    assert got[:2 * row] == bytes(range(1, 2 * row + 1))
    h, err = run(lambda c: c.dma_store(mem=mem, dram_addr=limit - row, dram_stride=row,
                                       row_bytes=row, n_rows=1, local_row=0, local_stride=1))
    assert err[0] == 0 and h.be.mem_read(limit - row, row) == bytes(row)
    _, err = run(load(limit - 2 * row, 3))              # its third row starts at the limit
    assert (err[0], err[4]) == (ErrorCode.WINDOW.value, limit)
    _, err = run(load(base - row, 1))                   # one row below the base
    assert (err[0], err[4]) == (ErrorCode.WINDOW.value, base - row)
    _, err = run(load(base, 1))
    assert err[0] == 0
    h, err = run(lambda c: c.fence(addr=limit - 4, value=7))
    assert err[0] == 0 and h.be.mem_read(limit - 4, 4) == (7).to_bytes(4, "little")
    _, err = run(lambda c: c.fence(addr=limit, value=7))
    assert (err[0], err[4]) == (ErrorCode.WINDOW.value, limit)


def test_bad_dram_row_reports_first_bad_row_and_writes_nothing():
    h = Host(CFG)
    c = CommandList()
    c.dma_store(mem=LocalMem.SPAD, dram_addr=D - 24, dram_stride=16, row_bytes=8, n_rows=3,
                local_row=0, local_stride=1)
    h.be.spad[:] = 5
    h.submit(c)
    assert h.err()[0] == ErrorCode.BAD_DRAM_ADDR.value and h.err()[4] == D + 8
    assert h.be.mem_read(D - 24, 24) == bytes(24)   # nothing written (no partial transfer)


def test_requant_error_order_and_bad_ring():
    h = Host(CFG)
    c = CommandList()
    c.requant(acc_row=15, spad_row=63, n_rows=2, param_row=15)  # acc rows first
    h.submit(c)
    assert h.err()[0] == ErrorCode.BAD_LOCAL_ADDR.value and h.err()[4] == 16
    be = ModelBackend(CFG)
    be.csr_write(queue_csr(0, Csr.RING_BASE), RING + 8)
    be.csr_write(queue_csr(0, Csr.RING_SIZE), 8)
    be.csr_write(queue_csr(0, Csr.TAIL), 1)
    assert be.csr_read(Csr.ERR_CODE) == ErrorCode.MISALIGNED.value
    assert be.csr_read(Csr.ERR_ADDR) == RING + 8


def test_bad_ring_size():
    be = ModelBackend(CFG)
    be.csr_write(queue_csr(0, Csr.RING_BASE), RING)
    be.csr_write(queue_csr(0, Csr.RING_SIZE), 6)
    be.csr_write(queue_csr(0, Csr.TAIL), 1)
    assert be.csr_read(Csr.ERR_CODE) & 0xFF == ErrorCode.BAD_SIZE.value


def test_untimed_counters_count_commands_and_dram_bytes():
    """The model's counter block (Csr.CNT_*): snapshot on CNT_SNAPSHOT, timing counters read
    0, retired per engine, ring fetches, whole-beat DMA reads, strobed bytes written; and
    the runtime's view of it (no timing counters, a typed error for them)."""
    from hw.isa import counter_csr
    from sw.runtime import Counters, Device, UntimedCounterError

    cfg = NPUConfig(rows=4, cols=4, axi_data_bits=64)       # spad rows of 4 bytes, 8-byte beats
    h = Host(cfg)
    rd = h.be.csr_read
    c = CommandList()
    # 3 rows of 12 bytes at 4-byte offsets: beats [0x8004, 0x8010) -> 2, [0x8018, 0x8024) -> 2,
    # [0x802C, 0x8038) -> 2 (row starts aligned down, ends aligned up)
    c.dma_load(mem=LocalMem.SPAD, dram_addr=0x8004, dram_stride=20, row_bytes=12, n_rows=3,
               local_row=0, local_stride=3)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=0x9004, dram_stride=12, row_bytes=12, n_rows=3,
                local_row=0, local_stride=3)
    c.matmul(a_row=0, w_row=0, acc_row=0, m=2)
    c.fence(addr=0x7000, value=1)
    c.dma_load(mem=LocalMem.SPAD, dram_addr=0x8000, dram_stride=0, row_bytes=4, n_rows=1,
               local_row=10**4, local_stride=0)             # BAD_LOCAL_ADDR: still retired
    h.submit(c)
    assert rd(counter_csr("retired.load")) == 0             # nothing before a snapshot
    h.be.csr_write(Csr.CNT_SNAPSHOT, 1)
    assert [rd(counter_csr(f"retired.{e}")) for e in ("load", "store", "matrix", "vector")] \
        == [2, 1, 1, 0]
    assert rd(counter_csr("bytes_read")) == 5 * 32 + 3 * 2 * 8
    assert rd(counter_csr("bytes_written")) == 3 * 12 + 4
    assert rd(counter_csr("busy.load")) == rd(Csr.CNT_CYCLES_LO) == 0

    dev = Device(ModelBackend(cfg))
    before = dev.counters()
    assert set(before) == {"bytes_read", "bytes_written", "retired.load", "retired.store",
                           "retired.matrix", "retired.vector",
                           *(f"tlb.{t}.{k}" for t in ("load", "store")
                             for k in ("hits", "misses", "faults"))} and not before.timed
    with pytest.raises(UntimedCounterError, match="untimed"):
        before["busy.matrix"]
    with pytest.raises(KeyError):
        before["no.such.counter"]
    assert before.get("cycles") is None and "cycles" not in before
    wrapped = Counters({"cycles": 5, "busy.load": 3}) - Counters({"cycles": 10,
                                                                  "busy.load": 2**32 - 1})
    assert wrapped == {"cycles": 2**64 - 5, "busy.load": 4} and wrapped.timed
    timed = Counters({"cycles": 5, **before})
    for a, b in ((timed, before), (before, timed)):     # not two snapshots of one device
        with pytest.raises(ValueError, match="cannot subtract a snapshot from an? (un)?timed"):
            a - b
