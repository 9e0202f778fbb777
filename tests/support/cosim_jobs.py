"""Jobs (``function(backend, **args)``) that the co-simulation tests run in the simulator.

They run in the cocotb process, in a bridge thread, against :class:`cosim.tb.rtl_backend.RtlBackend`
on the stand-in design (:mod:`tests.support.cosim_standin`) or on the real NPU. Checks are plain
``assert``s: a failure comes back to pytest as :class:`cosim.tb.harness.CosimJobError` with the
traceback.
"""

import os
import signal
import time

import numpy as np

from hw.isa import CSR_ID_VALUE, Csr, IrqBit
from sw.backend import BackendError
from tests.support.cosim_standin import StandInCsr

STATUS_BUSY, STATUS_RRESP, STATUS_BRESP, STATUS_RID = 1, 2, 4, 8


def smoke(backend) -> dict:
    return {"id": backend.csr_read(Csr.ID), "cycle": backend.cycle}


def fail(backend, message: str) -> dict:
    backend.csr_read(Csr.ID)
    raise ValueError(message)


def csr_timeout(backend) -> dict:
    """A CSR read that is never answered raises after the timeout; the port still works."""
    backend.csr_timeout_cycles = 50
    start = backend.cycle
    try:
        backend.csr_read(StandInCsr.HANG)
    except BackendError as e:
        message = str(e)
    else:
        raise AssertionError("no timeout")
    return {"message": message, "cycles": backend.cycle - start,
            "id": backend.csr_read(Csr.ID)}


def not_json(backend) -> object:
    return {"bytes": b"\x00"}


def interrupt_self(backend) -> dict:
    """^C to the simulator in the middle of a job (a terminal sends it to the whole process
    group): the simulator must end at once, reporting the interruption."""
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):               # the simulator runs on, its main thread sees it
        backend.csr_read(Csr.ID)
    raise AssertionError("the simulator ran on after ^C")


def _copy(backend, *, src: int, dst: int, beats: int, burst: int, max_out: int = 4,
          wstrb: int | None = None, max_cycles: int = 1_000_000) -> dict:
    """Start the stand-in copy engine, wait for its interrupt, return STATUS and counters."""
    for reg, value in ((StandInCsr.SRC, src), (StandInCsr.DST, dst),
                       (StandInCsr.BEATS, beats), (StandInCsr.BURST, burst),
                       (StandInCsr.MAX_OUT, max_out),
                       (StandInCsr.WSTRB, (1 << backend.config.axi_data_bytes) - 1
                        if wstrb is None else wstrb),
                       (Csr.IRQ_ENABLE, IrqBit.FENCE)):
        backend.csr_write(reg, value)
    start = backend.cycle
    backend.csr_write(StandInCsr.GO, 1)
    assert backend.wait_irq(max_cycles), f"no irq within {max_cycles} cycles"
    cycles = backend.cycle - start
    backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
    assert not backend.wait_irq(0), "irq still high after clearing IRQ_STATUS"
    return {"status": backend.csr_read(StandInCsr.STATUS),
            "max_seen": backend.csr_read(StandInCsr.MAX_SEEN), "cycles": cycles}


def copy_cases(backend, cases: list[dict], seed: int = 1) -> list[dict]:
    """Run copies of random data with the given bursts, strobes and read concurrency; check
    the destination byte for byte (bytes with a clear strobe keep their old value)."""
    rng = np.random.default_rng(seed)
    w = backend.config.axi_data_bytes
    out = []
    for case in cases:
        n = case["beats"] * w
        src_data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        old = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        backend.mem_write(case["src"], src_data)
        backend.mem_write(case["dst"], old)
        r = _copy(backend, **case)
        assert r["status"] == 0, f"{case}: STATUS={r['status']:#x}"
        got = backend.mem_read(case["dst"], n)
        strobe = case.get("wstrb", (1 << w) - 1)
        mask = np.tile(np.array([(strobe >> b) & 1 for b in range(w)], bool), case["beats"])
        want = np.where(mask, np.frombuffer(src_data, np.uint8), np.frombuffer(old, np.uint8))
        bad = np.flatnonzero(np.frombuffer(got, np.uint8) != want)
        assert bad.size == 0, f"{case}: {bad.size} bytes differ, first at offset {bad[0]}"
        out.append(r)
    return out


def out_of_range(backend) -> dict:
    """Bursts outside the DRAM get an error response; nothing wraps to address 0.

    (A burst that starts inside and runs past the end necessarily crosses a 4 KiB boundary,
    since the DRAM size is a power of two >= 4096, so it is a protocol violation as well.)
    """
    size = backend.config.dram_bytes
    guard = bytes(range(256)) * 16
    backend.mem_write(0, guard)
    backend.mem_write(size - len(guard), guard)
    r_read = _copy(backend, src=size, dst=0x10000, beats=16, burst=16)
    r_write = _copy(backend, src=0x20000, dst=size, beats=16, burst=16)
    r_write2 = _copy(backend, src=0x20000, dst=size + 0x800, beats=4, burst=4)
    assert backend.mem_read(0, len(guard)) == guard, "an out-of-range write wrapped to 0"
    assert backend.mem_read(size - len(guard), len(guard)) == guard
    # the engine is not stuck: a good copy still works
    r_ok = _copy(backend, src=0x20000, dst=0x30000, beats=4, burst=4)
    return {"read": r_read["status"], "write": r_write["status"] | r_write2["status"],
            "ok": r_ok["status"]}


def crosses_4k(backend) -> dict:
    """A burst over a 4 KiB boundary: the DRAM model counts a protocol violation."""
    w = backend.config.axi_data_bytes
    r = _copy(backend, src=4096 - 4 * w, dst=0x10000, beats=8, burst=8)
    return {"status": r["status"], "violations": backend.dram_protocol_errors}


def backdoor_roundtrip(backend, seed: int = 2) -> dict:
    """mem_write/mem_read at any alignment and length against a Python shadow copy."""
    rng = np.random.default_rng(seed)
    size = backend.config.dram_bytes
    base, span = 0x1000, 4096
    shadow = bytearray(rng.integers(0, 256, span, dtype=np.uint8).tobytes())
    backend.mem_write(base, bytes(shadow))
    for addr, n in [(0, 0), (1, 1), (3, 2), (5, 3), (7, 1), (7, 2), (8, 8), (9, 7), (13, 30),
                    (63, 65), (100, 1000), (span - 3, 3)]:
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        backend.mem_write(base + addr, data)
        shadow[addr:addr + n] = data
        assert backend.mem_read(base + addr, n) == data, f"read back at +{addr}, {n} bytes"
    assert backend.mem_read(base, span) == bytes(shadow), "neighbouring bytes were disturbed"
    # the very end of the DRAM, and refusals outside it
    backend.mem_write(size - 5, b"12345")
    assert backend.mem_read(size - 5, 5) == b"12345"
    refused = 0
    for addr, n in [(size - 4, 5), (size, 1), (-1, 2)]:
        try:
            backend.mem_write(addr, b"\x00" * n)
        except BackendError:
            refused += 1
        try:
            backend.mem_read(addr, n)
        except BackendError:
            refused += 1
    return {"refused": refused}


def bench_backdoor(backend, mib: int = 4) -> dict:
    """Wall time of bulk and small backdoor transfers (seconds, MiB/s)."""
    data = np.random.default_rng(0).integers(0, 256, mib << 20, dtype=np.uint8).tobytes()
    t = time.perf_counter()
    backend.mem_write(0, data)
    t_up = time.perf_counter() - t
    t = time.perf_counter()
    back = backend.mem_read(0, len(data))
    t_down = time.perf_counter() - t
    assert back == data
    t = time.perf_counter()
    for i in range(200):
        backend.mem_write(0x100000 + 32 * i, data[:32])
    t_cmd = (time.perf_counter() - t) / 200
    t = time.perf_counter()
    for i in range(200):
        backend.mem_read(0x100000 + 4 * i + 1, 4)
    t_word = (time.perf_counter() - t) / 200
    t = time.perf_counter()
    for _ in range(200):
        backend.csr_read(Csr.ID)
    t_csr = (time.perf_counter() - t) / 200
    return {"upload_MiB_s": mib / t_up, "download_MiB_s": mib / t_down,
            "write_32B_us": t_cmd * 1e6, "read_4B_unaligned_us": t_word * 1e6,
            "csr_read_us": t_csr * 1e6}


def bench_copy(backend, mib: int = 1, burst: int = 256, max_out: int = 4) -> dict:
    """Simulated cycles per second of a long copy by the stand-in engine."""
    w = backend.config.axi_data_bytes
    beats = (mib << 20) // w
    t = time.perf_counter()
    r = _copy(backend, src=0, dst=mib << 20, beats=beats, burst=burst, max_out=max_out,
              max_cycles=10 * beats)
    seconds = time.perf_counter() - t
    assert r["status"] == 0
    return {"cycles": r["cycles"], "seconds": seconds, "cycles_per_s": r["cycles"] / seconds,
            "beats_per_cycle": beats / r["cycles"]}


def check_id(backend) -> dict:
    value = backend.csr_read(Csr.ID)
    assert value == CSR_ID_VALUE, f"ID={value:#x}"
    return {"id": value}


def fence_smoke(backend, ring: int = 0x1000, fence_addr: int = 0x2000,
                value: int = 0xC0FFEE01, max_cycles: int = 20_000) -> dict:
    """The real NPU end to end: one FENCE command through the ring raises irq and writes
    ``value`` to ``fence_addr``."""
    from hw.isa import Opcode, encode, queue_csr

    ident = backend.csr_read(Csr.ID)
    assert ident == CSR_ID_VALUE, f"ID={ident:#x}"
    backend.mem_write(fence_addr, b"\x00" * 4)
    cmd = encode({"header": {"opcode": Opcode.FENCE, "flags": {"irq": 1}},
                  "body": {"fence": {"addr": fence_addr, "value": value}}})
    backend.mem_write(ring, cmd)
    backend.csr_write(queue_csr(0, Csr.RING_BASE), ring)
    backend.csr_write(queue_csr(0, Csr.RING_SIZE), 4)
    backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
    start = backend.cycle
    backend.csr_write(queue_csr(0, Csr.TAIL), 1)
    assert backend.wait_irq(max_cycles), f"no irq within {max_cycles} cycles"
    cycles = backend.cycle - start
    irq_status = backend.csr_read(Csr.IRQ_STATUS)
    err = backend.csr_read(Csr.ERR_CODE)
    assert irq_status == IrqBit.FENCE, f"IRQ_STATUS={irq_status:#x}, ERR_CODE={err:#x}"
    got = int.from_bytes(backend.mem_read(fence_addr, 4), "little")
    assert got == value, f"fence wrote {got:#x}, expected {value:#x}"
    head = backend.csr_read(queue_csr(0, Csr.HEAD))
    assert head == 1, f"HEAD={head}"
    backend.csr_write(Csr.IRQ_STATUS, IrqBit.FENCE)
    assert not backend.wait_irq(0), "irq still high after clearing IRQ_STATUS"
    return {"cycles_to_irq": cycles, "head": head, "fence": got}


def npu_dma_bench(backend, reps: int = 16, chunk: int = 32768, src: int = 0x100000,
                  dst: int = 0x400000, ring: int = 0x1000) -> dict:
    """The real NPU copies ``reps * chunk`` bytes DRAM -> scratchpad -> DRAM with DMA_LOAD and
    DMA_STORE (ordered by semaphores 0 and 1), then a FENCE raises irq. Reports simulated
    cycles per wall second of the whole run and checks the copy."""
    from hw.isa import LocalMem, Opcode, encode, queue_csr

    data = np.random.default_rng(3).integers(0, 256, reps * chunk, dtype=np.uint8).tobytes()
    backend.mem_write(src, data)
    row = backend.config.spad_row_bytes

    def dma(op, i, flags, **sems):
        return encode({"header": {"opcode": op, "flags": flags, **sems},
                       "body": {"dma": {"dram_addr": (src if op == Opcode.DMA_LOAD else dst)
                                        + i * chunk, "dram_stride": chunk, "row_bytes": chunk,
                                        "n_rows": 1, "local_row": 0, "local_stride": chunk // row,
                                        "mem": LocalMem.SPAD}}})

    cmds = []
    for i in range(reps):
        # load i waits until store i-1 has read the scratchpad; store i waits for load i
        cmds.append(dma(Opcode.DMA_LOAD, i, {"wait": i > 0, "signal": 1},
                        wait_sem=1, wait_value=i, signal_sem=0))
        cmds.append(dma(Opcode.DMA_STORE, i, {"wait": 1, "signal": 1},
                        wait_sem=0, wait_value=i + 1, signal_sem=1))
    cmds.append(encode({"header": {"opcode": Opcode.FENCE, "flags": {"irq": 1}},
                        "body": {"fence": {"addr": ring - 4, "value": 1}}}))
    size = 1 << (len(cmds)).bit_length()
    backend.mem_write(ring, b"".join(cmds))
    backend.csr_write(queue_csr(0, Csr.RING_BASE), ring)
    backend.csr_write(queue_csr(0, Csr.RING_SIZE), size)
    backend.csr_write(Csr.IRQ_ENABLE, IrqBit.FENCE | IrqBit.ERROR)
    start, t = backend.cycle, time.perf_counter()
    backend.csr_write(queue_csr(0, Csr.TAIL), len(cmds))
    assert backend.wait_irq(100 * reps * chunk), "no irq"
    seconds, cycles = time.perf_counter() - t, backend.cycle - start
    status = backend.csr_read(Csr.IRQ_STATUS)
    assert status == IrqBit.FENCE, f"IRQ_STATUS={status:#x} ERR_CODE=" \
        f"{backend.csr_read(Csr.ERR_CODE):#x} ERR_ADDR={backend.csr_read(Csr.ERR_ADDR):#x}"
    assert backend.mem_read(dst, len(data)) == data, "copy differs"
    return {"bytes": len(data), "cycles": cycles, "seconds": seconds,
            "cycles_per_s": cycles / seconds,
            "bytes_per_cycle_each_way": len(data) / cycles}


def runtime_roundtrip(backend) -> dict:
    """The device runtime on the RTL: discover the configuration from the CSRs, upload,
    synchronize (a FENCE through the runtime's ring), download."""
    from sw.runtime import Device

    dev = Device(backend, expected_config=backend.config)
    data = np.arange(1000, dtype=np.int32) * 7 - 3000
    buf = dev.upload(data)
    cycles = dev.synchronize()
    back = dev.download(buf, np.int32, data.shape)
    assert np.array_equal(back, data)
    return {"config": dev.config.name, "sync_cycles": cycles}


def regions(backend, names: list[str], cycles: int = 40) -> dict:
    """Run ``cycles`` idle cycles inside a region per name; return {name: [first, last]}
    cycles (absolute) of each region, the second name run twice (for occurrences)."""
    spans: dict[str, list[list[int]]] = {}
    for name in [*names, names[1]]:
        with backend.region(name):
            start = backend.cycle
            backend.run_cycles(cycles)
            spans.setdefault(name, []).append([start, backend.cycle])
    return spans
