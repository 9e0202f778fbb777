"""Virtual-memory jobs (:mod:`hw.isa.vm`, :mod:`sw.runtime.vm`) that run on any backend: on the
RTL under cocotb (:func:`cosim.tb.harness.run_job`) and in-process on the functional and the
performance model. Each takes a :class:`sw.backend.Backend` and JSON-serialisable keyword
arguments and returns a JSON-serialisable dict (``tests/cosim/test_vm_rtl.py`` and
``tests/sw/test_vm.py`` check them)."""

from __future__ import annotations

import hashlib

import numpy as np

from hw.isa import VM_PAGE_BYTES, VM_PAGE_SHIFT, LocalMem
from sw.golden import linear_int
from sw.kernels.linear import linear_launch
from sw.runtime import CommandList, Device, PageFaultError
from tests.support.rtl_jobs import random_linear_operands


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _tlb_counters(dev: Device) -> dict:
    return {k: v for k, v in dev.counters().items() if k.startswith("tlb.")}


def _fault(e: PageFaultError, base: int = 0) -> dict:
    return {"kind": e.kind, "offset": e.virtual_address - base, "index": e.command_index,
            "queue": e.queue, "code": int(e.code.value)}


def _sync_fault(stream) -> PageFaultError | None:
    try:
        stream.synchronize()
    except PageFaultError as e:
        return e
    return None


def _physical_ranges(ctx, buf) -> list[tuple[int, int]]:
    """Physical byte ranges of a virtual buffer, page by page."""
    out, va, end = [], buf.addr, buf.addr + buf.nbytes
    while va < end:
        n = min(end - va, VM_PAGE_BYTES - va % VM_PAGE_BYTES)
        pa = ctx.translate(va)
        out.append((pa, pa + n))
        va += n
    return out


def smoke(backend) -> dict:
    """A load that faults on its third row (unmapped page), map, resume; then a store ordered
    after it by a semaphore."""
    dev = Device(backend, virtual_memory=True)
    ctx, s = dev.default_context, dev.default_stream
    buf = ctx.alloc(2 * VM_PAGE_BYTES)
    buf.write(bytes(range(256)) * 32)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=VM_PAGE_BYTES, row_bytes=8,
               n_rows=3, local_row=0, local_stride=1, signal=0)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=buf.addr + 64, dram_stride=8, row_bytes=8,
                n_rows=3, local_row=0, local_stride=1, wait=(0, 1))
    s.launch(c)
    e = _sync_fault(s)
    fault = None
    if e is not None:
        fault = _fault(e, buf.addr)
        page = dev.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES)
        page.write(bytes([7]) * VM_PAGE_BYTES)
        ctx.map(buf.addr + 2 * VM_PAGE_BYTES, [page.addr])
        s.resume()
        s.synchronize()
    return {"fault": fault, "stored": list(buf.read(24, 64)), "counters": _tlb_counters(dev)}


def isolation(backend) -> dict:
    """Two contexts run GEMMs at the same virtual addresses on two queues, concurrently: both
    correct, and no DRAM byte changes outside each one's output (and the runtime's rings and
    fence words). Then, on queue A: a load of an unmapped page, a store to an unmapped page
    and a store to a page of B's shared read-only fault with their virtual address and kind,
    while queue B runs another GEMM to completion."""
    dev = Device(backend)
    cfg = dev.config
    ctx_a, ctx_b = dev.create_context(), dev.create_context()
    s_a = dev.create_stream(context=ctx_a)
    s_b = dev.create_stream(context=ctx_b)
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    rng = np.random.default_rng(5)
    m, k, n = 16, 4 * cfg.rows, 2 * cfg.cols
    ops_a = random_linear_operands(rng, m, k, n)
    ops_b = random_linear_operands(rng, m, k, n)
    before = backend.mem_read(0, cfg.dram_bytes)
    job_a = linear_launch(s_a, *ops_a, spad_region=(0, half_s), acc_region=(0, half_a))
    job_b = linear_launch(s_b, *ops_b, spad_region=(half_s, half_s),
                          acc_region=(half_a, half_a))
    same_va = job_a.out_buffer.addr == job_b.out_buffer.addr
    pa_a = ctx_a.translate(job_a.out_buffer.addr)
    pa_b = ctx_b.translate(job_b.out_buffer.addr)
    # what the device may write: the outputs and the streams' rings and fence words
    allowed = _physical_ranges(ctx_a, job_a.out_buffer) + _physical_ranges(ctx_b, job_b.out_buffer)
    for s in (dev.default_stream, s_a, s_b):
        if s.context is None:
            allowed += [(s.ring.addr, s.ring.addr + s.ring.nbytes),
                        (s._fence_word.addr, s._fence_word.addr + 4)]
        else:                       # a context's ring and fence word are virtual
            allowed += (_physical_ranges(s.context, s.ring)
                        + _physical_ranges(s.context, s._fence_word))
    s_a.synchronize()
    s_b.synchronize()
    after = backend.mem_read(0, cfg.dram_bytes)
    # the host wrote the operands and page tables between the snapshots: compare only what
    # the device wrote, i.e. the bytes that differ from the host's own view after the writes
    ok_a = bool(np.array_equal(job_a.output(), linear_int(*ops_a)))
    ok_b = bool(np.array_equal(job_b.output(), linear_int(*ops_b)))
    diff = np.flatnonzero(np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8))
    host = [(b.addr, b.addr + b.nbytes) for b in _host_written(dev, [ctx_a, ctx_b],
                                                                 [job_a, job_b])]
    outside = [int(i) for i in diff if not any(lo <= i < hi for lo, hi in allowed + host)]
    # faults on queue A while B runs
    ops_c = random_linear_operands(rng, m, k, n)
    job_c = linear_launch(s_b, *ops_c, spad_region=(half_s, half_s),
                          acc_region=(half_a, half_a))
    faults = []
    hole = ctx_a.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)        # reserved, never mapped
    shared = ctx_b.share(job_b.out_buffer, ctx_a)             # read-only in A
    for kind, addr in (("load", hole + 40), ("store", hole + 8), ("store", shared.addr + 16)):
        c = CommandList()
        if kind == "load":
            c.dma_load(mem=LocalMem.SPAD, dram_addr=addr, dram_stride=0, row_bytes=8,
                       n_rows=1, local_row=0, local_stride=0)
        else:
            c.dma_store(mem=LocalMem.SPAD, dram_addr=addr, dram_stride=0, row_bytes=8,
                        n_rows=1, local_row=0, local_stride=0)
        s_a.launch(c)
        e = _sync_fault(s_a)
        faults.append(None if e is None else {**_fault(e), "va_ok": e.virtual_address == addr})
        if e is not None:
            e.stream.skip()
            s_a.synchronize()
    b_unchanged = bytes(backend.mem_read(pa_b, 16)) == bytes(job_b.out_buffer.read(16))
    s_b.synchronize()
    ok_c = bool(np.array_equal(job_c.output(), linear_int(*ops_c)))
    return {"gemm_a": ok_a, "gemm_b": ok_b, "same_va": same_va, "distinct_pa": pa_a != pa_b,
            "device_writes_outside": len(outside), "faults": faults, "gemm_c": ok_c,
            "shared_unchanged": b_unchanged, "counters": _tlb_counters(dev)}


def _host_written(dev, contexts, jobs) -> list:
    """The buffers the host wrote between the two snapshots of :func:`isolation`: the
    operands (every buffer but the outputs) and the page tables."""
    out = []
    for job in jobs:
        for b in job._buffers:
            if b is not job.out_buffer:
                out += [_Range(lo, hi) for lo, hi in _physical_ranges(b.context, b)]
    for ctx in contexts:
        out.append(_Range(ctx._root.addr, ctx._root.addr + VM_PAGE_BYTES))
        out += [_Range(t.addr, t.addr + VM_PAGE_BYTES) for t in ctx._tables.values()]
    return out


class _Range:
    def __init__(self, lo: int, hi: int) -> None:
        self.addr, self.nbytes = lo, hi - lo


def recovery(backend) -> dict:
    """A GEMM whose activations have a page unmapped: it faults, the runtime maps the page
    back and resumes: the output and DRAM equal a run that never faulted. Then the skip path:
    a store that faults is skipped; the command waiting on its semaphore still runs."""
    dev = Device(backend, virtual_memory=True)
    cfg = dev.config
    ctx, s = dev.default_context, dev.default_stream
    rng = np.random.default_rng(9)
    ops = random_linear_operands(rng, 32, 8 * cfg.rows, 4 * cfg.cols)
    # the clean run
    job = linear_launch(s, *ops)
    s.synchronize()
    clean = job.output()
    clean_digest = _digest(job.out_buffer.read())
    job.free()
    # the faulting run: held behind an event while one page of its weights is unmapped (the
    # unmap's TLB_INVALIDATE runs on another stream), then released
    other = dev.create_stream()
    gate = dev.event()
    s.wait_event(gate)
    job = linear_launch(s, *ops)
    w_buf = job._buffers[1]
    victim = w_buf.addr + (w_buf.nbytes // 2 // VM_PAGE_BYTES) * VM_PAGE_BYTES
    (m,) = ctx.unmap(victim, VM_PAGE_BYTES, release=False, stream=other)
    other.record(gate)
    faults = []
    while (e := _sync_fault(s)) is not None:
        faults.append(_fault(e, victim))
        ctx.map(victim, [m.pa], read=m.read, write=m.write, blocks=[m.block])
        s.resume()
        if len(faults) > 3:
            break
    resumed = job.output()
    same = bool(np.array_equal(resumed, clean)) and _digest(job.out_buffer.read()) == clean_digest
    # skip: a store to an unmapped page signals its semaphore anyway
    buf = ctx.alloc(VM_PAGE_BYTES)
    buf.write(bytes(range(64)) * 64)
    hole = ctx.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=64, row_bytes=8, n_rows=2,
               local_row=0, local_stride=1, signal=0)
    # two rows: the first in the mapped buffer's last bytes, the second in the hole
    c.dma_store(mem=LocalMem.SPAD, dram_addr=hole - 8, dram_stride=16, row_bytes=8, n_rows=2,
                local_row=0, local_stride=1, wait=(0, 1), signal=0)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=buf.addr + 128, dram_stride=8, row_bytes=8,
                n_rows=2, local_row=0, local_stride=1, wait=(0, 2))
    s.launch(c)
    e = _sync_fault(s)
    skipped = None if e is None else _fault(e, hole)
    if e is not None:
        s.skip()
        s.synchronize()
    return {"faults": faults, "resumed_equal": same, "golden": bool(
        np.array_equal(clean, linear_int(*ops))), "skipped": skipped,
        "after_skip": list(buf.read(16, 128)), "partial_store": list(buf.read(8, 4088)),
        "counters": _tlb_counters(dev)}


def invalidation(backend) -> dict:
    """A load fills the TLB with the page of a virtual address; the page is unmapped (with
    the runtime's TLB_INVALIDATE) and the address mapped to another page: the next load reads
    the new page (a new walk). Unmapped and invalidated, a load faults. A remap without the
    invalidate reads the stale page the TLB still holds (evidence that it held it)."""
    dev = Device(backend, virtual_memory=True)
    ctx, s = dev.default_context, dev.default_stream
    p1, p2, p3 = (dev.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES) for _ in range(3))
    for p, v in ((p1, 1), (p2, 2), (p3, 3)):
        p.write(bytes([v]) * VM_PAGE_BYTES)
    va = ctx.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    out = ctx.alloc(64)

    def load_store() -> list[int]:
        c = CommandList()
        c.dma_load(mem=LocalMem.SPAD, dram_addr=va + 256, dram_stride=0, row_bytes=8,
                   n_rows=1, local_row=5, local_stride=0, signal=0)
        sem = dev.semaphore(0)
        c.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr, dram_stride=0, row_bytes=8,
                    n_rows=1, local_row=5, local_stride=0, wait=(0, sem + 1))
        s.launch(c)
        s.synchronize()
        return list(out.read(8))

    ctx.map(va, [p1.addr])
    first = load_store()
    misses0 = dev.counters()["tlb.load.misses"]
    ctx.unmap(va, VM_PAGE_BYTES)                 # TLB_INVALIDATE of the context, waited for
    ctx.map(va, [p2.addr])
    second = load_store()
    misses1 = dev.counters()["tlb.load.misses"]
    ctx.unmap(va, VM_PAGE_BYTES)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=va, dram_stride=0, row_bytes=8, n_rows=1,
               local_row=5, local_stride=0)
    s.launch(c)
    e = _sync_fault(s)
    fault = None if e is None else _fault(e, va)
    if e is not None:
        s.skip()
        s.synchronize()
    # the negative control: remap in the page table only, no invalidate
    ctx.map(va, [p2.addr])
    load_store()                                 # the TLB holds va -> p2
    ctx.pages.pop(va >> VM_PAGE_SHIFT)
    ctx._write_pte(va >> VM_PAGE_SHIFT, 0)
    ctx.map(va, [p3.addr])                       # no TLB_INVALIDATE
    stale = load_store()
    before = dev.semaphore(0)
    c = CommandList()
    c.tlb_invalidate(asid=ctx.asid, signal=0)    # one that signals: dropped all the same
    s.launch(c)
    s.synchronize()
    signalled = dev.semaphore(0) - before
    fresh = load_store()
    return {"first": first[0], "second": second[0], "walked_again": misses1 > misses0,
            "fault": fault, "stale_without_invalidate": stale[0],
            "invalidate_signalled": signalled, "after_invalidate": fresh[0],
            "counters": _tlb_counters(dev)}


def stress(backend, seed: int = 1, steps: int = 60) -> dict:  # noqa: C901
    """Random alloc / free / map / unmap with DMA traffic (loads and stores of random rows,
    some on unmapped pages: faults, then map-and-resume or skip), checked after every step
    against a reference model of the address space (virtual page -> its bytes, and the
    scratchpad rows). Returns digests of every buffer and of the scratchpad rows used, for
    the RTL-vs-model comparison."""
    dev = Device(backend, virtual_memory=True)
    ctx, s = dev.default_context, dev.default_stream
    rng = np.random.default_rng(seed)
    ref: dict[int, bytearray] = {}          # virtual page -> bytes (the reference)
    spad_ref: dict[int, bytes] = {}         # scratchpad row -> bytes (first 8)
    bufs = []
    row_bytes = 8
    events = {"alloc": 0, "free": 0, "load": 0, "store": 0, "fault": 0, "skip": 0, "resume": 0}
    mismatches = 0
    sem = 0

    def ref_read(va: int, n: int) -> bytes:
        return bytes(ref[(va + i) >> VM_PAGE_SHIFT][(va + i) % VM_PAGE_BYTES] for i in range(n))

    def ref_write(va: int, data: bytes) -> None:
        for i, b in enumerate(data):
            ref[(va + i) >> VM_PAGE_SHIFT][(va + i) % VM_PAGE_BYTES] = b

    for _ in range(steps):
        op = rng.choice(["alloc", "free", "load", "store"], p=[0.25, 0.1, 0.35, 0.3])
        if op == "alloc" or not bufs:
            npages = int(rng.integers(1, 4))
            b = ctx.alloc(npages * VM_PAGE_BYTES)
            data = rng.integers(0, 256, b.nbytes, dtype=np.uint8).tobytes()
            b.write(data)
            for p in range(npages):
                ref[(b.addr >> VM_PAGE_SHIFT) + p] = bytearray(data[p * VM_PAGE_BYTES:
                                                                    (p + 1) * VM_PAGE_BYTES])
            bufs.append(b)
            events["alloc"] += 1
            continue
        if op == "free" and len(bufs) > 1:
            b = bufs.pop(int(rng.integers(len(bufs))))
            for p in range(b.nbytes // VM_PAGE_BYTES):
                ref.pop((b.addr >> VM_PAGE_SHIFT) + p)
            b.free()                              # unmap, TLB_INVALIDATE, free the pages
            events["free"] += 1
            continue
        b = bufs[int(rng.integers(len(bufs)))]
        n_rows = int(rng.integers(1, 5))
        stride = int(rng.choice([8, 24, 1000, VM_PAGE_BYTES]))
        start = int(rng.integers(0, max(1, b.nbytes - (n_rows - 1) * stride - row_bytes)))
        va = b.addr + start
        # sometimes run past the buffer's end into the unmapped page after it
        if rng.random() < 0.2:
            va = b.addr + b.nbytes - row_bytes * int(rng.integers(0, 3)) - 1
            stride = row_bytes
        local = int(rng.integers(0, 64))
        c = CommandList()
        if op == "load":
            c.dma_load(mem=LocalMem.SPAD, dram_addr=va, dram_stride=stride, row_bytes=row_bytes,
                       n_rows=n_rows, local_row=local, local_stride=1, signal=0)
        else:
            c.dma_store(mem=LocalMem.SPAD, dram_addr=va, dram_stride=stride,
                        row_bytes=row_bytes, n_rows=n_rows, local_row=local, local_stride=1,
                        signal=0)
        sem += 1
        c.nop(wait=(0, sem))
        s.launch(c)
        e = _sync_fault(s)
        rows = [va + r * stride for r in range(n_rows)]
        if e is not None:
            events["fault"] += 1
            if rng.random() < 0.5:
                # map the missing pages (fresh zeroed pages) and resume: the whole command runs
                for r in rows:
                    for a in (r, r + row_bytes - 1):
                        vpn = a >> VM_PAGE_SHIFT
                        if vpn not in ref:
                            page = dev.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES)
                            page.write(bytes(VM_PAGE_BYTES))
                            ctx.va.reserve(vpn << VM_PAGE_SHIFT, VM_PAGE_BYTES)
                            ctx.map(vpn << VM_PAGE_SHIFT, [page.addr])
                            ref[vpn] = bytearray(VM_PAGE_BYTES)
                s.resume()
                events["resume"] += 1
                s.synchronize()
            else:
                s.skip()
                events["skip"] += 1
                s.synchronize()
                # the skipped command's partial effects (hw.isa.vm): reload the reference of
                # what it touched from the device, once, through the host's translation
                for r in rows:
                    for a in range(r, r + row_bytes):
                        if (a >> VM_PAGE_SHIFT) in ref:
                            ref[a >> VM_PAGE_SHIFT][a % VM_PAGE_BYTES] = ctx.read(a, 1)[0]
                for r in range(n_rows):
                    spad_ref.pop(local + r, None)
                continue
        events[op] += 1
        for r, a in enumerate(rows):
            if op == "load":
                spad_ref[local + r] = ref_read(a, row_bytes)
            elif local + r in spad_ref:
                ref_write(a, spad_ref[local + r])
            else:                                   # unknown scratchpad row: learn it
                ref_write(a, ctx.read(a, row_bytes))
        for vpn, data in ref.items():
            if ctx.read(vpn << VM_PAGE_SHIFT, VM_PAGE_BYTES) != bytes(data):
                mismatches += 1
    spad_rows = sorted(spad_ref)
    spad = {}
    if spad_rows:      # read the scratchpad rows back through a store to a fresh buffer
        out = ctx.alloc(72 * row_bytes)
        c = CommandList()
        c.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr, dram_stride=row_bytes,
                    row_bytes=row_bytes, n_rows=72, local_row=0, local_stride=1)
        s.launch(c)
        s.synchronize()
        got = out.read()
        spad = {r: got[r * row_bytes:(r + 1) * row_bytes] == spad_ref[r] for r in spad_rows}
    return {"events": events, "mismatches": mismatches, "spad_ok": all(spad.values()),
            "pages": {hex(v): _digest(bytes(d)) for v, d in sorted(ref.items())},
            "counters": _tlb_counters(dev)}


def walk_timing(backend) -> dict:
    """One DMA_LOAD of one beat, alone on an idle bus (its queue's ring and fence pages
    already in the fetch's TLB, nothing else running: the host waits for its semaphore,
    so no fence is fetched meanwhile), four ways: on a physical queue; translated with a TLB
    miss (a two-level walk); translated with a hit; translated on a page whose level-1 entry
    is not valid (a one-read walk that faults). Returns each one's ``busy.load`` and
    ``tlb.load.*`` deltas, for :func:`hw.isa.walk_cycles` and :func:`hw.isa.walk_delay`."""
    dev = Device(backend)
    ctx = dev.create_context()
    phys, virt = dev.default_stream, dev.create_stream(context=ctx)
    buf = ctx.alloc(VM_PAGE_BYTES)
    pbuf = dev.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES)
    far = 1 << 30           # a virtual address whose level-1 entry is not valid
    sem = dev.alloc_semaphore()
    out = {}
    for s in (phys, virt):  # warm the fetch's TLB with the rings' and fence words' pages
        c = CommandList()
        c.nop()
        s.launch(c)
        s.synchronize()

    def one(name: str, s, addr: int) -> None:
        before = dev.counters()
        target = (dev.semaphore(sem.id) + 1) % (1 << 32)
        c = CommandList()
        c.dma_load(mem=LocalMem.SPAD, dram_addr=addr, dram_stride=0, row_bytes=8, n_rows=1,
                   local_row=0, local_stride=0, signal=sem.id)
        s.launch(c)
        try:
            dev._wait_until(lambda: dev.semaphore(sem.id) == target, 100_000, name, [s])
        except PageFaultError:
            s.reset()
        d = dev.counters() - before
        out[name] = {k: d[k] for k in ("busy.load", "tlb.load.hits", "tlb.load.misses",
                                       "tlb.load.walk_cycles", "tlb.load.faults")}

    one("physical", phys, pbuf.addr + 64)
    one("miss", virt, buf.addr + 64)
    one("hit", virt, buf.addr + 128)
    one("fault_level1", virt, far)
    return out
