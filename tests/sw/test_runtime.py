"""sw.runtime: allocator, configuration discovery, launch/synchronize, typed errors."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import Csr, ErrorCode, LocalMem, Opcode, queue_csr
from sw.golden import linear_int
from sw.kernels.linear import linear_launch, linear_with_stats
from sw.model import ModelBackend
from sw.perf.backend import PerfBackend
from sw.runtime import (
    Allocator,
    CommandList,
    ConfigMismatchError,
    Device,
    DeviceError,
    DeviceTimeoutError,
    LocalMemoryConflictError,
    NPUError,
    OutOfMemoryError,
)

SMALL = NPUConfig(spad_rows=64, acc_rows=16, dram_bytes=1 << 16)


def naive_first_fit(occupied: np.ndarray, nbytes: int, align: int) -> int | None:
    """First-fit over the free runs of a byte-occupancy map."""
    padded = np.concatenate(([True], occupied, [True]))
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    for start, end in zip(edges[0::2], edges[1::2], strict=True):
        addr = -(-int(start) // align) * align
        if addr + nbytes <= end:
            return addr
    return None


def test_allocator_random_against_naive_model():
    size = 1 << 14
    alloc = Allocator(0, size)
    occupied = np.zeros(size, dtype=bool)
    live: dict[int, int] = {}
    rng = np.random.default_rng(7)
    n_oom = 0
    for _ in range(10_000):
        if live and rng.random() < 0.45:
            addr = list(live)[rng.integers(len(live))]
            alloc.free(addr)
            occupied[addr:addr + live.pop(addr)] = False
        else:
            nbytes = int(rng.choice([1, 3, 8, 32, 100, 256, 1000, 3000]))
            align = int(rng.choice([1, 4, 32, 64, 256]))
            want = naive_first_fit(occupied, nbytes, align)
            if want is None:
                with pytest.raises(OutOfMemoryError):
                    alloc.alloc(nbytes, align)
                n_oom += 1
                continue
            addr = alloc.alloc(nbytes, align)
            assert addr == want and addr % align == 0
            assert not occupied[addr:addr + nbytes].any()
            occupied[addr:addr + nbytes] = True
            live[addr] = nbytes
        s = alloc.stats()
        assert s.used_bytes == int(occupied.sum()) and s.free_bytes == size - s.used_bytes
        # coalescing: free blocks are exactly the maximal free runs
        blocks = alloc.free_blocks()
        assert all(a + n < b for (a, n), (b, _) in zip(blocks, blocks[1:], strict=False))
    assert n_oom > 0
    for addr in list(live):
        alloc.free(addr)
    assert alloc.free_blocks() == [(0, size)]
    with pytest.raises(ValueError):
        alloc.free(0)
    with pytest.raises(ValueError):
        alloc.alloc(0)
    with pytest.raises(ValueError):
        alloc.alloc(8, align=3)


def test_device_discovers_config_and_refuses_mismatch():
    cfg = NPUConfig(rows=4, cols=4, spad_rows=128, acc_rows=64, n_sems=256)
    dev = Device(ModelBackend(cfg))
    assert dev.config == cfg
    with pytest.raises(ConfigMismatchError, match="cols: device 4, expected 8"):
        Device(ModelBackend(cfg), NPUConfig(rows=4, cols=8, spad_rows=128, acc_rows=64,
                                            n_sems=256))

    class NotAnNpu(ModelBackend):
        def csr_read(self, offset: int) -> int:
            return 0x12345678 if offset == Csr.ID else super().csr_read(offset)

    with pytest.raises(ConfigMismatchError, match="not an NPU"):
        Device(NotAnNpu(cfg))


def test_device_docstring_names_every_field_the_csrs_do_not_report():
    """The fields taken from ``expected_config`` unchecked: the docstring said four, and
    ``fetch_depth`` and ``dma_max_burst_beats`` (which the planners use) were missing."""
    import dataclasses
    import re

    from sw.runtime.discovery import _REPORTED_FIELDS
    doc = re.sub(r"\s+", " ", Device.__doc__)
    listed = re.search(r"Fields the CSRs do not report \(([^)]*)\)", doc).group(1)
    assert set(re.findall(r"``(\w+)``", listed)) == {
        f.name for f in dataclasses.fields(NPUConfig) if f.name not in _REPORTED_FIELDS}


def test_memory_upload_download_free():
    dev = Device(ModelBackend(SMALL), SMALL)
    before = dev.memory_stats()
    x = np.arange(-50, 50, dtype=np.int32).reshape(10, 10)
    buf = dev.upload(x)
    assert buf.addr % 64 == 0 and buf.nbytes == 400
    np.testing.assert_array_equal(dev.download(buf, np.int32, (10, 10)), x)
    with pytest.raises(ValueError):
        dev.download(buf, np.int32, (11, 10))
    buf.free()
    with pytest.raises(NPUError):
        buf.free()
    assert dev.memory_stats() == before
    with pytest.raises(OutOfMemoryError, match="cannot allocate"):
        dev.alloc(1 << 16)


def test_launch_more_commands_than_the_ring_holds():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=4)
    c = CommandList()
    for _ in range(50):
        c.signal(3)
    dev.launch(c)
    assert dev.synchronize() == 0
    assert dev.semaphore(3) == 50


@pytest.mark.parametrize("ring", [2, 4, 8])
def test_every_command_through_a_full_ring_runs_once_in_order(ring):
    """Commands that all differ (a FENCE writing ``i + 1`` to word ``i``), many more than the
    ring holds: each slot is written where the device reads it, wrap-around included, so
    every word gets its own value (identical commands would hide a stale slot run again)."""
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=ring)
    n = 3 * ring + 2
    words = dev.alloc(4 * n)
    words.write(bytes(4 * n))
    c = CommandList()
    for i in range(n):
        c.fence(addr=words.addr + 4 * i, value=i + 1)
    dev.launch(c)
    dev.synchronize()
    got = np.frombuffer(words.read(4 * n), "<u4")
    assert got.tolist() == list(range(1, n + 1))


def test_full_ring_with_blocked_queue_times_out_then_recovers():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=4)
    c = CommandList()
    c.wait(1, 1)          # never satisfied in a single in-order queue
    for _ in range(5):
        c.nop()
    with pytest.raises(DeviceTimeoutError, match="HEAD=0x0, TAIL=0x3"):
        dev.launch(c, timeout_cycles=1000)
    dev.reset()
    c = CommandList()
    c.signal(1)
    dev.run(c)
    assert dev.semaphore(1) == 1


def test_synchronize_timeout_names_state():
    dev = Device(ModelBackend(SMALL), SMALL)
    c = CommandList()
    c.nop(wait=(2, 5))
    dev.launch(c)
    with pytest.raises(DeviceTimeoutError) as e:
        dev.synchronize(timeout_cycles=100)
    assert "STATUS=0x1" in str(e.value) and "sem2=0x0" in str(e.value)
    dev.reset()
    assert dev.run(CommandList()) == 0


def test_unknown_opcode_raises_device_error_naming_the_command_then_works():
    dev = Device(ModelBackend(SMALL), SMALL)
    c = CommandList()
    c.signal(0)
    c.signal(0)
    dev.launch(c)
    dev.synchronize()                       # 3 commands so far (2 + fence)
    c = CommandList()
    c.nop()
    c.append_raw(bytes([0x7F]) + bytes(31))
    c.signal(0)
    dev.launch(c)
    with pytest.raises(DeviceError) as e:
        dev.synchronize()
    err = e.value
    assert err.code == ErrorCode.BAD_OPCODE and err.command_index == 4 and err.opcode == 0x7F
    assert "command #4 (opcode 0x7f (unknown)" in str(err) and "BAD_OPCODE" in str(err)
    # the device keeps working
    buf = dev.upload(np.arange(8, dtype=np.int8))
    out = dev.alloc(8)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=8, row_bytes=8, n_rows=1,
               local_row=0, local_stride=1)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr, dram_stride=8, row_bytes=8, n_rows=1,
                local_row=0, local_stride=1)
    dev.run(c)
    np.testing.assert_array_equal(dev.download(out, np.int8, 8), np.arange(8))


def test_device_error_names_a_bad_matmul():
    dev = Device(ModelBackend(SMALL), SMALL)
    c = CommandList()
    c.matmul(a_row=0, w_row=0, acc_row=15, m=2, wait=(0, 0), signal=0)
    dev.launch(c)
    with pytest.raises(DeviceError, match=r"command #0 \(MATMUL a_row=0 w_row=0 acc_row=15 m=2 "
                                          r"k_len=0 "
                                          r"\[wait sem0>=0, signal sem0\]\) failed: "
                                          r"BAD_LOCAL_ADDR at 0x10"):
        dev.synchronize()
    assert dev.status()["STATUS"] == 0


def test_command_field_ranges_are_checked():
    c = CommandList()
    with pytest.raises(ValueError, match="row_bytes"):
        c.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=0, row_bytes=1 << 16, n_rows=1,
                   local_row=0, local_stride=1)
    with pytest.raises(ValueError, match="wait value"):
        c.nop(wait=(0, -1))


# -- streams, events, barriers, semaphore pool (functional model) ------------------------------

def test_streams_events_and_barrier_on_the_model():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    s0, s1 = dev.default_stream, dev.create_stream()
    assert s1.queue == 1 and dev.create_stream().queue == 2
    dev.create_stream()
    with pytest.raises(ValueError, match=r"^every hardware queue has a stream \(n_queues=4\)$"):
        dev.create_stream()
    ev = dev.event()
    assert not ev.query()
    s1.wait_event(ev)              # before the record: waits for the first recording
    c = CommandList()
    c.signal(0)
    s1.launch(c)
    assert dev.semaphore(0) == 0   # blocked
    c0 = CommandList()
    c0.nop()
    s0.launch(c0)
    s0.record(ev)
    s1.synchronize()
    assert ev.query() and dev.semaphore(0) == 1
    assert ev.elapsed_cycles(s0.record()) == 0      # the untimed model
    dev.barrier([s0, s1])
    s0.synchronize()
    s1.synchronize()
    ev.free()


def test_semaphore_pool_exhaustion_is_typed():
    from sw.runtime import OutOfSemaphoresError
    dev = Device(ModelBackend(SMALL), SMALL)
    sems = [dev.alloc_semaphore() for _ in range(SMALL.n_sems - 1)]
    assert sorted(s.id for s in sems) == list(range(1, SMALL.n_sems))
    with pytest.raises(OutOfSemaphoresError, match="^every pool semaphore is in use "
                                                   r"\(the pool is semaphores 1 to 15; "):
        dev.alloc_semaphore()
    sems[0].free()
    assert dev.alloc_semaphore().id == sems[0].id
    none = NPUConfig(n_sems=1)          # semaphore 0 only: no pool at all, said as such
    with pytest.raises(OutOfSemaphoresError, match="leaves no pool semaphores"):
        Device(ModelBackend(none), none).alloc_semaphore()


def test_error_in_one_stream_leaves_the_other_running():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    s1 = dev.create_stream()
    bad = CommandList()
    bad.nop()
    bad.matmul(a_row=0, w_row=0, acc_row=15, m=2)
    s1.launch(bad)
    good = CommandList()
    good.signal(0)
    dev.launch(good)
    assert dev.synchronize() == 0 and dev.semaphore(0) == 1
    with pytest.raises(DeviceError) as e:
        s1.synchronize()
    assert e.value.queue == 1 and e.value.command_index == 1
    assert e.value.code == ErrorCode.BAD_LOCAL_ADDR and e.value.address == 16
    s1.launch(good)
    s1.synchronize()
    assert dev.semaphore(0) == 2


def test_command_field_errors_name_command_argument_value_and_range():
    from sw.runtime import CommandFieldError

    c = CommandList()
    with pytest.raises(CommandFieldError, match=r"DMA_LOAD: row_bytes=65536 does not fit in 16 "
                                                r"unsigned bits \(field 'row_bytes': 0 \.\. "
                                                r"65535\)"):
        c.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=0, row_bytes=1 << 16, n_rows=1,
                   local_row=0, local_stride=1)
    with pytest.raises(CommandFieldError, match=r"NOP: wait value=-1 .* 0 \.\. 4294967295"):
        c.nop(wait=(0, -1))
    with pytest.raises(CommandFieldError, match=r"SOFTMAX: shift=64 does not fit in 6 unsigned"):
        c.softmax(acc_row=0, spad_row=0, n_rows=1, n_blocks=1, stride=1, scale_row=0,
                  kv_len=1, mult=1, shift=64)
    with pytest.raises(CommandFieldError, match=r"MATMUL: signal sem=256 .* 0 \.\. 255"):
        c.matmul(a_row=0, w_row=0, acc_row=0, m=1, signal=256)
    assert len(c) == 0                      # nothing half-built was appended


# -- semaphores across the 2**32 wrap (functional model) ---------------------------------------

WRAP = 1 << 32


def _marker_stream(dev, sem: int, targets: list[int], marker: int):
    """A stream that waits for each of ``targets`` on ``sem`` in turn and signals ``marker``
    after each: the marker counts the waits released so far."""
    s = dev.create_stream()
    c = CommandList()
    for t in targets:
        c.wait(sem, t)
        c.signal(marker)
    s.launch(c)
    return s


def test_waits_released_exactly_when_the_semaphore_reaches_them_across_the_wrap():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    sem, marker = dev.alloc_semaphore(), dev.alloc_semaphore()
    dev.set_semaphore(sem.id, WRAP - 2)
    assert dev.semaphore(sem.id) == WRAP - 2 and dev.last_signal(sem.id) is None
    targets = [WRAP - 1, 0, 1, 3]
    waiter = _marker_stream(dev, sem.id, targets, marker.id)
    released = [dev.semaphore(marker.id) - marker.base]
    for _ in range(5):                                  # WRAP-1, 0, 1, 2, 3
        c = CommandList()
        c.signal(sem.id)
        dev.launch(c)
        sem.issued += 1
        released.append(dev.semaphore(marker.id) - marker.base)
    assert dev.semaphore(sem.id) == sem.target() == 3
    assert released == [0, 1, 2, 3, 3, 4]
    waiter.synchronize()
    assert dev.last_signal(sem.id) == (dev.queue, 4)    # SEM_LAST: the signals, not the write
    dev.set_semaphore(sem.id, 9)
    assert dev.semaphore(sem.id) == sem.target() == 9 and dev.last_signal(sem.id) == (0, 4)


def test_wait_boundary_is_half_the_semaphore_range():
    """``(value - target) mod 2**32 < 2**31``: a target 2**31 - 1 behind is reached, one 2**31
    behind counts as 2**31 ahead and is not (each case across the wrap)."""
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    sem, marker = dev.alloc_semaphore(), dev.alloc_semaphore()
    dev.set_semaphore(sem.id, 5)
    _marker_stream(dev, sem.id, [(5 - (1 << 31) + 1) % WRAP], marker.id)
    assert dev.semaphore(marker.id) - marker.base == 1
    behind = _marker_stream(dev, sem.id, [(5 - (1 << 31)) % WRAP], marker.id)
    assert dev.semaphore(marker.id) - marker.base == 1
    with pytest.raises(DeviceTimeoutError, match=rf"semaphore {sem.id} >= {2**31 + 5}"):
        behind.synchronize(timeout_cycles=100)
    dev.set_semaphore(sem.id, 2**31 + 5)               # the host write releases it
    assert dev.semaphore(marker.id) - marker.base == 2


def test_events_and_synchronize_across_the_wrap():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    s0, s1 = dev.default_stream, dev.create_stream()
    s1._fence_seq = WRAP - 2                  # synchronize's fence sequence wraps too
    ev, gate, marker = dev.event(), dev.alloc_semaphore(), dev.alloc_semaphore()
    dev.set_semaphore(ev.sem.id, WRAP - 1)
    dev.set_semaphore(gate.id, WRAP - 1)
    assert ev.target == 0 and not ev.query()
    s1.wait_event(ev)                         # its first recording takes the semaphore to 0
    c = CommandList()
    c.signal(marker.id)
    s1.launch(c)
    assert dev.semaphore(marker.id) == marker.base
    c = CommandList()
    c.wait(gate.id, gate.target(1))           # 0: after the wrap
    s0.launch(c)
    s0.record(ev)
    assert not ev.query()                     # recorded, not completed: sem WRAP-1, target 0
    with pytest.raises(DeviceTimeoutError) as e:
        s1.synchronize(timeout_cycles=100)
    report = {(b.queue, b.sem, b.value, b.current) for b in e.value.blocked}
    assert report == {(s0.queue, gate.id, 0, WRAP - 1), (s1.queue, ev.sem.id, 0, WRAP - 1)}
    c = CommandList()
    c.signal(gate.id)
    dev.create_stream().launch(c)
    gate.issued += 1
    assert ev.query() and dev.semaphore(ev.sem.id) == 0
    ev.synchronize()
    for _ in range(3):                        # and on past the wrap
        assert s1.synchronize() == 0
    assert dev.semaphore(marker.id) == marker.target(1)
    ev.record(s0)
    s1.wait_event(ev)
    s1.launch(c)
    s1.synchronize()
    assert ev.target == 1 and ev.query()


def test_barrier_across_the_wrap():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    s0, s1 = dev.default_stream, dev.create_stream()
    dev.barrier([s0, s1])
    s0.synchronize()
    s1.synchronize()
    barrier_sem = dev._barrier_sem
    dev.set_semaphore(barrier_sem.id, WRAP - 2)  # the next barrier waits for 0
    gate, marker = dev.alloc_semaphore(), dev.alloc_semaphore()
    c = CommandList()
    c.wait(gate.id, gate.target(1))
    s0.launch(c)                               # s0 reaches the barrier only after the gate
    dev.barrier([s0, s1])
    c = CommandList()
    c.signal(marker.id)
    s1.launch(c)
    assert dev.semaphore(barrier_sem.id) == WRAP - 1      # s1 arrived, s0 not yet
    assert dev.semaphore(marker.id) == marker.base        # so s1 waits at the barrier
    c = CommandList()
    c.signal(gate.id)
    dev.create_stream().launch(c)
    assert dev.semaphore(barrier_sem.id) == 0 and dev.semaphore(marker.id) == marker.base + 1
    s0.synchronize()
    s1.synchronize()


def test_set_semaphore_refuses_to_lose_pending_signals():
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    sem = dev.alloc_semaphore()
    c = CommandList()
    c.wait(0, 1)
    c.signal(sem.id)
    dev.launch(c)
    sem.issued += 1
    with pytest.raises(NPUError, match=f"semaphore {sem.id} has signals pending"):
        dev.set_semaphore(sem.id, 7)
    with pytest.raises(ValueError, match="not in 0 .. 4294967295"):
        dev.set_semaphore(0, WRAP)
    dev.set_semaphore(0, 1)                  # not a pool semaphore: written as is
    assert dev.semaphore(sem.id) == sem.target() == 1
    dev.set_semaphore(sem.id, WRAP - 1)
    assert sem.target() == WRAP - 1 and sem.target(1) == 0


# -- register structs: what the model packs, the runtime unpacks field by field ----------------

def test_register_fields_from_model_to_runtime():
    from hw.isa import REGISTER_STRUCTS, Opcode, unpack_fields

    cfg = NPUConfig(rows=2, cols=6, n_queues=3, n_sems=12, axi_data_bits=128,
                    dma_outstanding=5, spad_rows=64, acc_rows=32, dram_bytes=1 << 16)
    be = ModelBackend(cfg)
    dev = Device(be, cfg, ring_commands=8)
    assert dev.config == cfg                             # CFG_ARRAY, CFG_BUS
    arr = unpack_fields(REGISTER_STRUCTS["CFG_ARRAY"], be.csr_read(Csr.CFG_ARRAY))
    assert (arr.rows, arr.cols, arr.n_queues, arr.n_sems) == (2, 6, 3, 12)
    s1, s2 = dev.create_stream(), dev.create_stream()
    c = CommandList()
    for _ in range(3):
        c.nop()
    c.signal(9)                                         # SEM_LAST: queue 2, index 3
    c.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=0, row_bytes=0, n_rows=0,
               local_row=0, local_stride=0)             # TRACE_INFO: load, queue 2, index 4
    c.matmul(a_row=0, w_row=0, acc_row=0, m=2, transpose=True)   # ERR_CODE: BAD_SIZE (2x6)
    s2.launch(c)
    s1.wait_event(dev.event())                          # STATUS / Q_STATUS busy: queue 1 waits
    assert dev.last_signal(9) == (2, 3)
    trace = dev.read_trace()
    # failing engine commands are traced too (hw.isa: "failing ones included")
    assert [(t.engine, t.queue, t.index) for t in trace] == [("load", 2, 4), ("matrix", 2, 5)]
    first = unpack_fields(REGISTER_STRUCTS["ERR_CODE"], be.csr_read(Csr.ERR_CODE))
    assert (first.code, first.queue, first.opcode) == (ErrorCode.BAD_SIZE, 2,
                                                       Opcode.MATMUL.value)
    status = unpack_fields(REGISTER_STRUCTS["STATUS"], be.csr_read(Csr.STATUS))
    assert status.busy and status.error
    assert not s1.query()
    with pytest.raises(DeviceError) as e:
        s2.synchronize()
    assert (e.value.queue, e.value.command_index, e.value.opcode, e.value.code) == \
        (2, 5, Opcode.MATMUL.value, ErrorCode.BAD_SIZE)
    status = unpack_fields(REGISTER_STRUCTS["STATUS"], be.csr_read(Csr.STATUS))
    assert status.busy and not status.error


def test_the_default_wait_budget_grows_with_a_slow_dram():
    """A wait without ``timeout_cycles`` has DEFAULT_TIMEOUT_CYCLES times the DRAM timing's
    slowdown: a 64x256x128 GEMM at 0.001 B/cycle (about 63.6M cycles, more than the ideal
    DRAM's 50M budget) completes (it raised DeviceTimeoutError after 50M cycles); an explicit
    budget is kept as given."""
    from sw.dram import DramTiming
    from sw.kernels.linear import linear_with_stats
    from sw.perf import PerfBackend
    from sw.runtime import DEFAULT_TIMEOUT_CYCLES

    cfg = NPUConfig()
    assert Device(PerfBackend(cfg)).default_timeout_cycles == DEFAULT_TIMEOUT_CYCLES
    assert Device(ModelBackend(cfg), cfg).default_timeout_cycles == DEFAULT_TIMEOUT_CYCLES
    slow = DramTiming.parse("bw=0.001")
    assert slow.slowdown(cfg.axi_data_bytes) == cfg.axi_data_bytes / 0.001
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (64, 256), dtype=np.int8)
    w = rng.integers(-128, 128, (256, 128), dtype=np.int8)
    params = (np.zeros(128, np.int32), np.full(128, 1 << 20, np.int32),
              np.full(128, 24, np.int32))
    dev = Device(PerfBackend(cfg, dram=slow))
    assert dev.default_timeout_cycles == 8_000 * DEFAULT_TIMEOUT_CYCLES
    _, stats = linear_with_stats(dev, a, w, *params)
    assert stats.cycles > DEFAULT_TIMEOUT_CYCLES
    dev = Device(PerfBackend(cfg, dram=slow))
    with pytest.raises(DeviceTimeoutError, match="no completion after 1,000,000 cycles"):
        linear_with_stats(dev, a, w, *params, timeout_cycles=1_000_000)


@pytest.mark.parametrize("backend", ["model", "perf"])
def test_stream_refuses_a_ring_smaller_than_the_queue_kept(backend):
    """A queue keeps HEAD and TAIL across devices on one backend: a stream whose ring is
    smaller than that HEAD is refused with a clear error before the ring registers are
    written (the hardware would report ``BAD_SIZE``), its allocations freed; a ring that
    holds HEAD works from there and wraps."""
    from sw.perf import PerfBackend

    be = ModelBackend(NPUConfig()) if backend == "model" else PerfBackend(NPUConfig())
    first = Device(be, ring_commands=4096)
    nops = CommandList()
    for _ in range(100):
        nops.nop()
    s = first.create_stream(queue=1)
    s.launch(nops)
    s.synchronize()
    head = be.csr_read(queue_csr(1, Csr.HEAD))
    assert head > 100
    dev = Device(be, ring_commands=8)
    before = dev.memory_stats()
    with pytest.raises(ValueError, match=f"queue 1's HEAD is {head}, outside a ring of 8 "
                                         f"commands.*at least 128"):
        dev.create_stream(queue=1)
    assert dev.memory_stats() == before and 1 not in dev.streams
    assert be.csr_read(queue_csr(1, Csr.RING_SIZE)) == 4096
    stream = dev.create_stream(queue=1, ring_commands=128)
    for _ in range(2):      # wraps the 128-slot ring from slot `head`
        stream.launch(nops)
    stream.synchronize()
    assert be.csr_read(Csr.STATUS) == 0
    assert be.csr_read(queue_csr(1, Csr.HEAD)) == be.csr_read(queue_csr(1, Csr.TAIL)) < 128


def test_stream_ring_size_is_checked_and_a_ring_error_is_reported_as_a_fetch():
    """``create_stream`` refuses a ring size the hardware would refuse (as ``Device`` does);
    a ring error (opcode 0, found at fetch) is reported as a command that could not be
    fetched, not as one that failed."""
    dev = Device(ModelBackend(NPUConfig()))
    for bad in (0, 3, 2**28):
        with pytest.raises(ValueError, match="ring_commands must be a power of two from 2"):
            dev.create_stream(ring_commands=bad)
    assert list(dev.streams) == [0]
    dev.backend.csr_write(queue_csr(0, Csr.RING_SIZE), 3)       # behind the runtime's back
    c = CommandList()
    c.nop()
    with pytest.raises(DeviceError, match=r"queue 0: command #0 \(NOP\) could not be fetched "
                                          r"from the ring: BAD_SIZE at 0x"):
        dev.run(c)


def _linear_operands(rng, m, k, n):
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (k, n), dtype=np.int8),
            rng.integers(-1000, 1000, n).astype(np.int32), np.full(n, 1 << 20), np.full(n, 28))


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_kernels_on_unordered_streams_may_not_share_local_rows(backend):
    """Two linear kernels on two streams with the default regions (the whole scratchpad and
    accumulator each) raced silently: wrong results on the perf model and the RTL, right ones
    on the functional model, which runs queues one after another. The second launch is refused
    with nothing written or kept; ordered (an event, a barrier, through a third stream, a
    synchronize) or in disjoint regions, both run and are bit-exact."""
    rng = np.random.default_rng(7)
    a_ops, b_ops = _linear_operands(rng, 64, 128, 64), _linear_operands(rng, 32, 96, 80)
    want_a, want_b = linear_int(*a_ops), linear_int(*b_ops)
    dev = Device(backend(NPUConfig()))
    s0, s1, s2 = dev.default_stream, dev.create_stream(), dev.create_stream()

    def check(j0, j1):
        for s in (s0, s1, s2):
            s.synchronize()
        assert np.array_equal(j0.output(), want_a) and np.array_equal(j1.output(), want_b)
        j0.free()
        j1.free()

    j0 = linear_launch(s0, *a_ops)
    before, pool = dev.memory_stats(), len(dev._sem_pool)
    tail = s1.commands_submitted
    with pytest.raises(LocalMemoryConflictError, match=r"stream 1 .* stream 0 .*scratchpad "
                       r"rows \[0, \d+\) and \[0, \d+\)"):
        linear_launch(s1, *b_ops)
    assert (dev.memory_stats(), len(dev._sem_pool), s1.commands_submitted) == (before, pool,
                                                                                 tail)
    s1.wait_event(s0.record())                        # ordered by an event
    check(j0, linear_launch(s1, *b_ops))
    j0 = linear_launch(s0, *a_ops)
    dev.barrier([s0, s1])                             # by a barrier
    check(j0, linear_launch(s1, *b_ops))
    j0 = linear_launch(s0, *a_ops)
    s2.wait_event(s0.record())                        # through a third stream
    s1.wait_event(s2.record())
    check(j0, linear_launch(s1, *b_ops))
    j0 = linear_launch(s0, *a_ops)
    ev = s0.record()
    with pytest.raises(LocalMemoryConflictError):
        linear_launch(s1, *b_ops)
    ev.synchronize()                                  # the host saw it complete
    check(j0, linear_launch(s1, *b_ops))
    j0 = linear_launch(s0, *a_ops)
    ev = s0.record()
    while not ev.query():                             # the host saw it complete, by polling
        dev.backend.run_cycles(100)
    check(j0, linear_launch(s1, *b_ops))
    j0 = linear_launch(s0, *a_ops, spad_region=(0, 2048), acc_region=(0, 512))
    check(j0, linear_launch(s1, *b_ops, spad_region=(2048, 2048), acc_region=(512, 512)))
    j0 = linear_launch(s0, *a_ops, spad_region=(0, 2048), acc_region=(0, 512))
    j2 = linear_launch(s0, *a_ops, spad_region=(2048, 2048), acc_region=(512, 512))
    with pytest.raises(LocalMemoryConflictError):     # the first still counts after the second
        linear_launch(s1, *b_ops, spad_region=(0, 2048), acc_region=(0, 512))
    s0.synchronize()
    assert np.array_equal(j2.output(), want_a)
    j0.free()
    j2.free()
    j0 = linear_launch(s0, *a_ops, spad_region=(8, 2048), acc_region=(0, 512))
    with pytest.raises(LocalMemoryConflictError, match=r"\[0, \d+\) and \[8, \d+\)"):
        linear_launch(s1, *b_ops, spad_region=(0, 2048), acc_region=(512, 512))
    s0.synchronize()
    j0.free()
    early = dev.event()                               # a wait before the first recording
    s1.wait_event(early)
    j0 = linear_launch(s0, *a_ops)
    with pytest.raises(LocalMemoryConflictError):     # not recorded yet: nothing known
        linear_launch(s1, *b_ops)
    s0.record(early)                                  # its first recording follows j0
    check(j0, linear_launch(s1, *b_ops))
    j0 = linear_launch(s0, *a_ops)                    # an event before the kernel orders nothing
    s1.wait_event(ev)
    with pytest.raises(LocalMemoryConflictError):
        linear_launch(s1, *b_ops)
    s0.synchronize()
    check(j0, linear_launch(s1, *b_ops))


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_a_refused_kernel_counts_nothing_and_ordering_and_plans_are_followed(backend):
    """Found by a second trial of the local-memory check: a refused launch had counted its
    signals on semaphores the caller passes in (the next kernel on them waited for ever); a
    stream's synchronize did not tell the host that what it ran after was done; a given
    plan was taken to use all of both memories; linear_with_stats left its fence behind when
    refused and could not run beside another stream."""
    from sw.kernels.attention import attention_launch
    from sw.kernels.eltwise import eltwise_launch
    from sw.kernels.linear_plan import plan_linear
    rng = np.random.default_rng(11)
    a_ops, b_ops = _linear_operands(rng, 64, 128, 64), _linear_operands(rng, 32, 96, 80)
    want_a, want_b = linear_int(*a_ops), linear_int(*b_ops)
    dev = Device(backend(NPUConfig()))
    cfg = dev.config
    s0, s1, s2 = dev.default_stream, dev.create_stream(), dev.create_stream()
    sems = {x: dev.alloc_semaphore() for x in "LMRS"}
    att_sem = dev.alloc_semaphore()
    buf = dev.alloc(4096)
    j0 = linear_launch(s0, *a_ops)
    for launch in (lambda: linear_launch(s1, *b_ops, sems=sems),
                   lambda: eltwise_launch(s1, Opcode.ADD, buf, buf, buf, buf, m=8, n=8,
                                          shift=0, sems=sems),
                   lambda: attention_launch(s1, buf, buf, buf, buf, buf, seq=8, heads=1,
                                            head_dim=8, score_mult=[1], score_shift=[0],
                                            sem=att_sem)):
        with pytest.raises(LocalMemoryConflictError):
            launch()
        assert [sems[x].issued for x in "LMRS"] + [att_sem.issued] == [0] * 5
    with pytest.raises(LocalMemoryConflictError):
        linear_with_stats(dev, *b_ops, stream=s1)
    assert s1.commands_submitted == 0
    s1.wait_event(s0.record())
    s1.synchronize()                  # s0's kernel is done too: s2 may use its rows
    j1 = linear_launch(s2, *b_ops, sems=sems)
    s2.synchronize()
    assert np.array_equal(j0.output(), want_a) and np.array_equal(j1.output(), want_b)
    j0.free()
    j1.free()
    # given plans use their own rows, not all of both memories
    p_a = plan_linear(cfg, 64, 128, 64, double_buffer=True, spad_region=(0, 2048),
                      acc_region=(0, 512))
    p_b = plan_linear(cfg, 32, 96, 80, double_buffer=True, spad_region=(2048, 2048),
                      acc_region=(512, 512))
    j0.free()
    j1.free()
    j0 = linear_launch(s0, *a_ops, plan=p_a)
    j1 = linear_launch(s1, *b_ops, plan=p_b)
    s0.synchronize()
    s1.synchronize()
    assert np.array_equal(j0.output(), want_a) and np.array_equal(j1.output(), want_b)
    j0.free()
    j1.free()
    j0 = linear_launch(s0, *a_ops, plan=p_a)    # linear_with_stats beside it, in its region
    out, _ = linear_with_stats(dev, *b_ops, stream=s1, spad_region=(2048, 2048),
                               acc_region=(512, 512))
    s0.synchronize()
    assert np.array_equal(j0.output(), want_a) and np.array_equal(out, want_b)


def test_a_freed_event_keeps_its_semaphore_until_its_waits_and_recordings_retired():
    """Freeing an event right after another stream's wait_event (CUDA's habit) gave its
    semaphore to the next event at once: that event's signals released the pending wait
    early, and a kernel raced (wrong results on the perf model). The semaphore and the
    timestamp word now return once the host saw the wait and the recording retire."""
    dev = Device(PerfBackend(NPUConfig()))
    s0, s1, s2 = dev.default_stream, dev.create_stream(), dev.create_stream()
    gate = dev.event()
    s0.wait_event(gate)               # holds s0, so its recording stays pending
    ev = s0.record()
    s1.wait_event(ev)
    sem_id, free_before = ev.sem.id, len(dev._sem_pool)
    ev.free()
    assert len(dev._sem_pool) == free_before
    other = dev.event()
    assert other.sem.id != sem_id
    s2.record(other)                  # signals its own semaphore: s1 must still wait
    s2.synchronize()
    assert not s1.query() and sem_id not in dev._sem_pool
    s2.record(gate)
    s1.synchronize()                  # its wait retired, and so did s0's recording
    assert sem_id in dev._sem_pool


def test_a_linear_job_freed_before_it_completed_keeps_its_memory_until_it_has():
    """LinearJob.free() before the kernel completed gave its buffers and semaphores back at
    once: the kernel's DMA could still write the buffers' next owner."""
    dev = Device(PerfBackend(NPUConfig()))
    s = dev.default_stream
    ops = _linear_operands(np.random.default_rng(3), 32, 64, 64)
    used, pool = dev.memory_stats().used_bytes, len(dev._sem_pool)
    job = linear_launch(s, *ops)
    job.free()
    assert dev.memory_stats().used_bytes > used and len(dev._sem_pool) == pool - 4
    s.synchronize()
    assert dev.memory_stats().used_bytes == used and len(dev._sem_pool) == pool
    job.free()                          # a second free does nothing


def test_deferred_frees_after_resets_in_virtual_memory_and_when_running_out():
    """Found by a third trial: a stream reset kept what the stream had waited for, so its
    next synchronize told the host that the other stream's kernel was done while it ran (its
    deferred buffers were handed out again and overwritten); in a context a deferred release
    synchronized a TLB invalidate inside a non-blocking query, which hung behind a blocked
    stream; freed events that had retired were not reclaimed before the pool ran out."""
    dev = Device(PerfBackend(NPUConfig()))
    a, b = dev.default_stream, dev.create_stream()
    ops = _linear_operands(np.random.default_rng(5), 64, 512, 64)
    gate = dev.event()
    a.wait_event(gate)                # holds a's kernel until the host records the gate
    job = linear_launch(a, *ops)
    b.wait_event(a.record())
    used, pool = dev.memory_stats().used_bytes, len(dev._sem_pool)
    job.free()
    b.reset()                         # b's wait is dropped: b runs after nothing of a
    b.synchronize()
    assert len(dev._sem_pool) == pool and dev.memory_stats().used_bytes == used
    with pytest.raises(LocalMemoryConflictError):
        linear_launch(b, *ops)
    b.record(gate)
    a.synchronize()
    assert len(dev._sem_pool) == pool + 4

    dev = Device(ModelBackend(NPUConfig()), virtual_memory=True)
    s = dev.default_stream
    job = linear_launch(s, *ops)
    ev = s.record()
    s.wait_event(dev.event())         # s's later work waits for a recording not made yet
    job.free()
    assert ev.query()                 # returns: the job's pages go behind s's queue, unwaited
    assert not s.query()

    dev = Device(ModelBackend(NPUConfig()))
    s = dev.default_stream
    for _ in range(dev.config.n_sems - 1):
        s.record().free()             # retired, but the host has not looked
    dev.event()                       # reclaimed instead of OutOfSemaphoresError


def test_a_freed_event_cannot_be_used():
    """Recording a freed event signalled the semaphore a new event got: the new event, which
    could never complete, reported complete."""
    dev = Device(ModelBackend(NPUConfig()))
    s0, s1 = dev.default_stream, dev.create_stream()
    gate, e2 = dev.event(), dev.event()
    e2.free()
    e3 = dev.event()
    assert e3.sem.id == e2.sem.id
    s1.wait_event(gate)
    s1.record(e3)
    for use in (lambda: s0.record(e2), lambda: s0.wait_event(e2), e2.query, e2.synchronize,
                e2.timestamp, lambda: e2.record(s0)):
        with pytest.raises(NPUError, match="was freed"):
            use()
    s0.synchronize()
    assert not e3.query()
    e2.free()                                         # a second free does nothing


def test_launch_refuses_what_is_not_a_command():
    """``launch([b"\\x01\\x02"])`` and ``launch([123])`` (123 zero bytes) were written to the
    ring; the stream's next deadlock report then failed on them and every later synchronize
    with it."""
    dev = Device(ModelBackend(NPUConfig()))
    s = dev.default_stream
    good = CommandList()
    good.barrier()
    for bad, err, msg in ((b"\x01\x02", ValueError, "command 1 of the launch is 2 bytes"),
                          (123, TypeError, "command 1 of the launch is a int"),
                          (bytes(33), ValueError, "is 33 bytes; a command is 32")):
        with pytest.raises(err, match=msg):
            s.launch([good[0], bad])
    assert s.commands_submitted == 0
    s.launch([good[0].raw, bytearray(good[0].raw)])
    s.synchronize()
    with pytest.raises(TypeError, match="takes streams, got a int"):
        dev.barrier([1])


# -- stream destruction ------------------------------------------------------------------------

def _fence(buf, value: int) -> CommandList:
    c = CommandList()
    c.fence(addr=buf.addr, value=value)
    return c


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_a_destroyed_stream_finishes_its_work_then_its_queue_serves_a_new_stream(backend):
    """``Stream.destroy`` with work queued (held by an event wait): the work still runs; the
    queue, the ring and the fence word are held until the host has seen it retire; a new
    stream on the queue (the only one left) waits for that, then starts clean: its launches
    are not taken for the destroyed stream's work that others were ordered after (positions on
    a queue go on across its streams). An event recorded on the destroyed stream completes,
    and recorded again on the new stream gets a timestamp word of its own."""
    from sw.runtime import LocalUse, StreamDestroyedError
    dev = Device(backend(NPUConfig()))
    s0 = dev.default_stream
    s1, s2, s3 = dev.create_stream(), dev.create_stream(), dev.create_stream()
    out = dev.alloc(64)
    out.write(bytes(64))
    gate = dev.event()
    s1.wait_event(gate)
    s1.launch(_fence(out, 0x11))
    ev = s1.record()
    s2.wait_event(ev)                 # s2 runs after all of s1's work
    s1.destroy()
    assert s1.destroyed and dev.streams[1] is s1 and not s1.ring.freed
    with pytest.raises(StreamDestroyedError, match="^the stream of queue 1 was destroyed"):
        s1.destroy()
    assert not ev.query()
    s0.record(gate)                   # lets s1's work run
    s1b = dev.create_stream()         # every other queue has a stream: waits for queue 1
    assert s1b.queue == 1 and dev.streams[1] is s1b and s1.ring.freed
    assert out.read(4) == (0x11).to_bytes(4, "little")
    assert ev.query()
    ev.synchronize()
    ev.timestamp()
    rd = dev.backend.csr_read
    assert rd(queue_csr(1, Csr.HEAD)) == rd(queue_csr(1, Csr.TAIL))
    use = LocalUse("kernel", spad=(0, 8))
    nop = CommandList()
    nop.nop()
    s1b.launch(nop, local=use)        # not known complete: s2 may run beside it
    with pytest.raises(LocalMemoryConflictError, match="on stream 2 and kernel launched on "
                                                       "stream 1"):
        s2.launch(nop, local=use)
    s1b.launch(_fence(out, 0x22))
    ev.record(s1b)
    s1b.synchronize()
    assert out.read(4) == (0x22).to_bytes(4, "little")
    assert ev.query()
    ev.timestamp()
    s2.launch(nop, local=use)         # s1b was synchronized
    for s in (s2, s3):
        s.synchronize()
    ev.free()


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_destroying_its_streams_lets_a_context_be_destroyed(backend):
    """A context whose streams are destroyed can be destroyed: ``Context.destroy`` waits for
    the destroyed streams' work, which releases their queues and bindings; everything of the
    context is freed, and the queue is physical again for a new stream."""
    dev = Device(backend(NPUConfig()))
    s0 = dev.default_stream
    gate = dev.event()
    s0.record(gate)                   # (its timestamp word allocated before `before`)
    s0.synchronize()
    before = dev.memory_stats()
    ctx = dev.create_context()
    s = dev.create_stream(context=ctx)
    buf = s.upload(np.zeros(16, dtype=np.int32))
    ev = s.record()                   # a timestamp word in the context
    s.wait_event(gate)
    s.launch(_fence(buf, 0x33))
    s.destroy()
    s0.record(gate)
    ctx.destroy()
    assert ctx.destroyed and s.queue not in dev.streams and s.ring.freed and buf.freed
    assert dev.backend.csr_read(queue_csr(s.queue, Csr.Q_VM)) == 0
    ev.free()
    assert dev.memory_stats() == before
    p = dev.create_stream(queue=s.queue)          # physical: its fence is not translated
    out = dev.alloc(64)
    p.launch(_fence(out, 0x44))
    p.synchronize()
    assert out.read(4) == (0x44).to_bytes(4, "little")
    p.destroy()
    out.free()
    assert dev.memory_stats() == before


def test_a_destroyed_stream_refuses_every_use():
    from sw.runtime import LocalUse, StreamDestroyedError
    from tests.support.device_state import device_state
    dev = Device(ModelBackend(NPUConfig()))
    s0 = dev.default_stream
    with pytest.raises(ValueError, match="the default stream cannot be destroyed"):
        s0.destroy()
    ctx = dev.create_context()
    buf = ctx.alloc(64)
    s = dev.create_stream()
    ev = dev.event()
    s.destroy()
    state, live, submitted = device_state(dev), dict(ctx.pages), s0.commands_submitted
    nop = CommandList()
    nop.nop()
    for use in (lambda: s.launch(nop), s.record, lambda: s.record(ev), lambda: ev.record(s),
                lambda: s.wait_event(ev), s.query, s.synchronize, s.reset,
                lambda: s.bind(ctx), lambda: s.alloc(64), lambda: s.upload(np.zeros(4)),
                s.resume, s.skip, lambda: s.check_local(LocalUse("k", spad=(0, 1))),
                s.destroy, lambda: dev.barrier([s0, s]),
                lambda: dev.invalidate_tlb(stream=s), lambda: ctx.free(buf, stream=s),
                lambda: ctx.free(buf, stream=s, wait=False),
                lambda: ctx.unmap(buf.addr, 64, stream=s), lambda: ctx.destroy(stream=s),
                lambda: linear_launch(s, *_linear_operands(np.random.default_rng(0), 8, 8,
                                                           8))):
        with pytest.raises(StreamDestroyedError, match="^the stream of queue 1 was destroyed"):
            use()
    assert device_state(dev) == state and ctx.pages == live and not buf.freed
    assert s0.commands_submitted == submitted and "destroyed" in repr(s)


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_a_destroyed_window_stream_frees_its_window_with_what_it_held(backend):
    """A stream with a window frees the whole window at its release: its arena's buffers and
    the timestamp words of events recorded on it go with it, and say so when used; the
    event itself still completes and frees."""
    from sw.runtime import Event
    dev = Device(backend(NPUConfig()))
    before = dev.memory_stats()
    s = dev.create_stream(window_bytes=4096)
    buf = s.alloc(64)
    ev = s.record()
    s.synchronize()
    s.destroy()                       # known retired: released at once
    assert s.queue not in dev.streams and dev.memory_stats() == before and buf.freed
    assert ev.query()
    ev.synchronize()
    for use in (ev.timestamp, buf.read, buf.free):
        with pytest.raises(NPUError, match="in the window of the stream of queue 1, which "
                                           "was destroyed: it was freed with it"):
            use()
    s2 = dev.create_stream(queue=1)
    ev.record(s2)                     # a word of its own (not the one freed with the window)
    s2.synchronize()
    ev.timestamp()
    ev.free()
    assert isinstance(dev.event(), Event)


def test_a_destroyed_streams_error_goes_to_the_call_that_waits_for_it():
    """A device error in a destroyed stream's work is raised by the call that waits for that
    work (``create_stream`` on its queue), as a DeviceError with the queue reset; the queue is
    then free. Work that never retires makes that call time out, changing nothing."""
    from sw.runtime import DeviceTimeoutError
    dev = Device(ModelBackend(SMALL), SMALL, ring_commands=16)
    s1 = dev.create_stream()
    bad = CommandList()
    bad.matmul(a_row=0, w_row=0, acc_row=15, m=2)
    s1.launch(bad)
    s1.destroy()
    with pytest.raises(DeviceError) as e:
        dev.create_stream(queue=1)
    assert e.value.queue == 1 and e.value.code == ErrorCode.BAD_LOCAL_ADDR
    assert type(e.value) is DeviceError
    s1b = dev.create_stream(queue=1)
    ev = s1b.record()
    s1b.destroy()
    s1c = dev.create_stream(queue=1)  # (s1b released)
    s1c.launch(bad)
    assert ev.query()                 # the queue's error is s1c's, not the event's stream's
    with pytest.raises(DeviceError) as e:
        s1c.synchronize()
    assert e.value.queue == 1 and e.value.command_index == 0
    s1c.wait_event(dev.event())       # never recorded
    s1b = s1c
    s1b.destroy()
    with pytest.raises(DeviceTimeoutError, match="the work of the destroyed stream of queue 1"):
        dev.create_stream(queue=1)
    assert dev.streams[1] is s1b



def test_a_deferred_free_after_its_stream_was_destroyed_invalidates_elsewhere():
    """An event freed before its recording retired, on a stream in a context that is then
    destroyed: its word's unwaited unmap goes on the default stream (the destroyed stream
    takes no command) when the host learns of the completion."""
    dev = Device(ModelBackend(NPUConfig()))
    ctx = dev.create_context()
    s = dev.create_stream(context=ctx)
    gate = dev.event()
    ev = s.record()                   # its timestamp word is in the context
    s.wait_event(gate)
    done = s.record()
    ev.free()                         # held until the host sees the recording retire
    s.destroy()
    dev.default_stream.record(gate)
    assert done.query()               # releases the word, then the stream
    assert s.queue not in dev.streams and len(ctx.pages) == 1    # `done`'s word only
    dev.synchronize()
    ctx.destroy()
    done.free()


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_create_stream_takes_an_idle_queue_of_a_destroyed_stream_before_a_busy_one(backend):
    """With every queue held, ``create_stream()`` took the lowest queue of a destroyed stream
    and waited on it (here: work held by an event nobody records, a DeviceTimeoutError after
    the whole budget) while the queues of other destroyed streams were idle. It now polls
    ``Q_STATUS`` and takes an idle one; with none idle it waits, for ``timeout_cycles``
    (which its timeout message asks for)."""
    dev = Device(backend(NPUConfig()))
    s1, s2, s3 = dev.create_stream(), dev.create_stream(), dev.create_stream()
    out = dev.alloc(64)
    gate = dev.event()
    s1.wait_event(gate)
    s1.launch(_fence(out, 1))
    for s in (s2, s3):                # retire, never synchronized
        s.launch(_fence(out, 2))
    for s in (s1, s2, s3):
        s.destroy()
    dev.synchronize()
    assert dev.create_stream().queue == 2 and dev.create_stream().queue == 3
    assert dev.streams[1] is s1
    with pytest.raises(DeviceTimeoutError, match="no completion after 20,000 cycles .*give a "
                                                  "larger timeout_cycles"):
        dev.create_stream(timeout_cycles=20_000)
    dev.default_stream.record(gate)
    assert dev.create_stream().queue == 1
    assert out.read(4) == (1).to_bytes(4, "little")


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_hints_about_a_destroyed_streams_work_can_be_followed(backend):
    """A local-memory conflict with a destroyed stream's launch told the user to order
    against it through that stream (wait_event on an event recorded on it later,
    Device.barrier, synchronize it), and out-of-semaphores to synchronize it: each raises
    StreamDestroyedError. They now say what works: an event recorded there before the
    destroy, or ``create_stream(queue=...)``; the hint is followed here."""
    from sw.runtime import LocalUse, OutOfSemaphoresError
    cfg = NPUConfig(n_sems=8)
    dev = Device(backend(cfg), cfg)
    s0, s1, s2 = dev.default_stream, dev.create_stream(), dev.create_stream()
    gate = dev.event()
    use = LocalUse("kernel", spad=(0, 8))
    nop = CommandList()
    nop.nop()
    s1.wait_event(gate)
    s1.launch(nop, local=use)
    ev = s1.record()
    held = s1.record()
    held.free()                       # its semaphore is held until s1's work retired
    s1.destroy()
    with pytest.raises(LocalMemoryConflictError, match=r"order them \(stream 1 was destroyed: "
                       r"wait_event on, or synchronize, an event recorded on it after that "
                       r"launch \(before the destroy\), or Device.create_stream\(queue=1\), "
                       r"which waits for its work\); nothing was launched$"):
        s2.launch(nop, local=use)
    s2.wait_event(ev)                 # the hint: s2 now runs after it
    s2.launch(nop, local=use)
    sems = [dev.alloc_semaphore() for _ in range(len(dev._sem_pool))]
    with pytest.raises(OutOfSemaphoresError, match=r"hold theirs until the host sees their "
                       r"work retire \(for the destroyed stream\(s\) of queue\(s\) 1, "
                       r"synchronize an event recorded there before the destroy, or "
                       r"Device.create_stream\(queue=1\), which waits for that work\)\)$"):
        dev.alloc_semaphore()
    s0.record(gate)
    ev.synchronize()                  # the hint: releases what s1's work held
    dev.alloc_semaphore()
    for s in sems:
        s.free()
    s2.synchronize()


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_a_reset_that_drops_a_barrier_signal_does_not_hold_later_barriers(backend):
    """Found by a trial: a stream reset while its barrier's signal was pending dropped that
    signal, and the barrier semaphore's cumulative count then never reached the target of
    any later barrier, on any streams: they all waited for ever. Later barriers now take a
    fresh semaphore; the old one goes back to the pool once the other streams' work is seen
    retired."""
    dev = Device(backend(NPUConfig()))
    s1, s2, s3 = dev.create_stream(), dev.create_stream(), dev.create_stream()
    gate = dev.event()
    s2.wait_event(gate)                 # s2's barrier signal cannot execute yet
    dev.barrier([s1, s2])
    pool = len(dev._sem_pool)
    s2.reset()                          # drops it; s1 waits on it (as on any dropped work)
    s1.reset()
    dev.barrier([s2, s3])
    ev = s3.record()
    ev.synchronize(timeout_cycles=100_000)
    ev.free()
    s2.synchronize(timeout_cycles=100_000)
    assert len(dev._sem_pool) == pool - 1   # the new barrier semaphore; the old one held
    s1.synchronize(timeout_cycles=100_000)
    assert len(dev._sem_pool) == pool       # ... until the other streams were seen retired
    dev.barrier([s1, s2, s3])           # and barriers keep working
    for s in (s1, s2, s3):
        s.synchronize(timeout_cycles=100_000)
    # a reset after the barrier was seen retired keeps the semaphore
    sem = dev._barrier_sem
    s1.reset()
    assert dev._barrier_sem is sem
