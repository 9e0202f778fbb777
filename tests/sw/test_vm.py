"""Device virtual memory (:mod:`hw.isa.vm`, :mod:`sw.runtime.vm`) on the functional model and
the performance model: the page walk and the TLB against hand-built tables, the runtime's
contexts, and the acceptance jobs of :mod:`tests.support.vm_jobs` (isolation, recovery,
invalidation, stress). The same jobs run on the RTL in ``tests/cosim/test_vm_rtl.py``."""

import numpy as np
import pytest

from hw.config import NPUConfig
from hw.isa import (
    CONTIG_PAGES,
    TIMING_COUNTERS,
    VM_PAGE_BYTES,
    Csr,
    ErrorCode,
    Fault,
    Pte,
    TlbModel,
    Translation,
    VmWord,
    pack_fields,
    queue_csr,
    walk,
)
from sw.model import ModelBackend
from sw.perf import PerfBackend
from sw.perf.corpus import WORKLOADS
from sw.runtime import CommandList, ContextInUseError, Device, NPUError
from sw.runtime.vm import VA_BASE
from tests.support import vm_jobs

CONFIG = NPUConfig()


def _pte(ppn, *, valid=1, read=1, write=1, contig=0) -> int:
    return pack_fields(Pte, {"valid": valid, "read": read, "write": write, "contig": contig,
                             "ppn": ppn})


def test_walk_reads_two_levels_and_decides_by_hand():
    mem = {}
    root, table = 0x10, 0x11
    vm = pack_fields(VmWord, {"enable": 1, "asid": 3, "root": root})
    va = (5 << 22) | (7 << 12) | 0x123
    mem[(root << 12) + 4 * 5] = _pte(table, read=0, write=0)
    mem[(table << 12) + 4 * 7] = _pte(0x42, write=0)
    t, reads = walk(lambda a: mem.get(a, 0), vm, va, 1 << 24)
    assert reads == [(root << 12) + 20, (table << 12) + 28]
    assert t == Translation(3, (5 << 10) | 7, 0x42, True, False, False)
    assert t.physical(va) == (0x42 << 12) | 0x123 and not t.allows(write=True)
    # an invalid level-1 entry: one read; an invalid level-0 entry: two
    f, reads = walk(lambda a: mem.get(a, 0), vm, 6 << 22, 1 << 24)
    assert f == Fault(ErrorCode.PAGE_NOT_MAPPED) and len(reads) == 1
    f, reads = walk(lambda a: mem.get(a, 0), vm, (5 << 22) | (8 << 12), 1 << 24)
    assert f == Fault(ErrorCode.PAGE_NOT_MAPPED) and len(reads) == 2
    # a page (or a table, or the root) outside DRAM is not mapped
    mem[(root << 12) + 4 * 6] = _pte(1 << 12, read=0, write=0)      # a table past DRAM
    f, reads = walk(lambda a: mem.get(a, 0), vm, 6 << 22, 1 << 24)
    assert f == Fault(ErrorCode.PAGE_NOT_MAPPED) and len(reads) == 1
    mem[(table << 12) + 4 * 9] = _pte(1 << 12)
    f, _ = walk(lambda a: mem.get(a, 0), vm, (5 << 22) | (9 << 12), 1 << 24)
    assert f == Fault(ErrorCode.PAGE_NOT_MAPPED)
    f, reads = walk(lambda a: 0, pack_fields(VmWord, {"enable": 1, "root": 1 << 12}), 0,
                    1 << 24)
    assert f == Fault(ErrorCode.PAGE_NOT_MAPPED) and reads == []


def test_contiguous_run_is_one_entry_and_tlb_fills_round_robin():
    mem = {}
    vm = pack_fields(VmWord, {"enable": 1, "asid": 1, "root": 0x10})
    mem[(0x10 << 12)] = _pte(0x11)
    for i in range(CONTIG_PAGES):
        mem[(0x11 << 12) + 4 * (16 + i)] = _pte(0x40 + i, contig=1)
    t, _ = walk(lambda a: mem.get(a, 0), vm, (16 + 5) << 12, 1 << 24)
    assert t.contig and t.vpn == 16 and t.ppn == 0x40
    assert all(t.covers(1, 16 + i) for i in range(CONTIG_PAGES)) and not t.covers(1, 32)
    assert not t.covers(2, 16)                           # another address space
    assert t.physical((16 + 9) << 12 | 4) == (0x49 << 12) | 4
    tlb = TlbModel(2)
    a, b, c = (Translation(1, v, v, True, True, False) for v in (1, 2, 3))
    for x in (a, b, c):
        tlb.fill(x)
    assert tlb.lookup(1, 1) is None and tlb.lookup(1, 2) is b and tlb.lookup(1, 3) is c
    tlb.invalidate(False, 2)
    assert tlb.lookup(1, 3) is c
    tlb.invalidate(False, 1)
    assert tlb.lookup(1, 3) is None


def test_contexts_share_map_unmap_and_free():
    dev = Device(ModelBackend(CONFIG))
    a, b = dev.create_context(), dev.create_context()
    assert (a.asid, b.asid) == (0, 1)
    x = a.alloc(5 * VM_PAGE_BYTES + 3)
    x.write(bytes(range(256)) * 80 + b"xyz")
    y = a.share(x, b)                                    # read-only view in b
    assert y.read() == x.read() and not b.pages[y.addr >> 12].write
    w = a.share(x, b, write=True)
    assert b.pages[w.addr >> 12].write
    free_before = dev.memory_stats().free_bytes
    with pytest.raises(NPUError, match="not a live buffer"):
        a.free(y)
    b.free(y)
    b.free(w)
    assert dev.memory_stats().free_bytes == free_before  # the owner keeps the pages
    a.free(x)
    assert dev.memory_stats().free_bytes == free_before + 6 * VM_PAGE_BYTES
    with pytest.raises(ValueError, match="not mapped"):
        a.unmap(x.addr, 1)
    # 64 KiB runs carry the contiguous hint; a context without them maps page by page
    big = a.alloc(2 * CONTIG_PAGES * VM_PAGE_BYTES)
    assert all(a.pages[(big.addr >> 12) + i].contig for i in range(2 * CONTIG_PAGES))
    a.unmap(big.addr + 3 * VM_PAGE_BYTES, VM_PAGE_BYTES)
    assert not any(a.pages[(big.addr >> 12) + i].contig for i in range(CONTIG_PAGES) if i != 3)
    p = dev.create_context(contiguous=False).alloc(CONTIG_PAGES * VM_PAGE_BYTES)
    assert not any(m.contig for m in p.context.pages.values())
    with pytest.raises(NPUError, match="no virtual memory"):
        Device(ModelBackend(NPUConfig(tlb_entries=0))).create_context()


def test_destroy_refuses_a_context_with_streams_bound():
    # a destroyed context under a live stream left its queue's Q_VM on freed page tables and
    # the stream failing with "buffer ... was freed"; destroy now refuses and changes nothing
    dev = Device(PerfBackend(CONFIG))
    ctx = dev.create_context()
    s = dev.create_stream(context=ctx)
    buf = ctx.alloc(64)
    pages, stats = dict(ctx.pages), dev.memory_stats()
    with pytest.raises(ContextInUseError, match=rf"context {ctx.asid} still has 1 stream\(s\) "
                       rf"bound \(queue\(s\) {s.queue}\).*destroy them first") as e:
        ctx.destroy()
    assert e.value.streams == [s]
    assert not ctx.destroyed and dev.contexts[ctx.asid] is ctx and ctx.pages == pages
    assert dev.memory_stats() == stats and not buf.freed and not s.ring.freed
    assert dev.backend.csr_read(queue_csr(s.queue, Csr.Q_VM)) == ctx.vm_word
    c = CommandList()
    c.fence(addr=buf.addr, value=0x5A5A)
    s.launch(c)
    s.synchronize()
    assert buf.read(4) == (0x5A5A).to_bytes(4, "little")
    # the default stream of a virtual-memory device holds its default context
    vdev = Device(PerfBackend(CONFIG), virtual_memory=True)
    with pytest.raises(ContextInUseError, match=r"queue\(s\) 0\)"):
        vdev.default_context.destroy()


def test_destroyed_context_refuses_a_second_destroy_and_every_use():
    dev = Device(PerfBackend(CONFIG))
    ctx, other = dev.create_context(), dev.create_context()
    buf, theirs = ctx.alloc(64), other.alloc(64)
    ctx.destroy()
    assert ctx.destroyed and buf.freed
    with pytest.raises(NPUError, match=rf"^context {ctx.asid} already destroyed$"):
        ctx.destroy()
    with pytest.raises(NPUError, match="freed twice"):
        buf.free()
    n_streams = len(dev.streams)
    for use in (lambda: ctx.alloc(64), lambda: ctx.map(VA_BASE, [0]),
                lambda: ctx.unmap(VA_BASE, 64), lambda: ctx.translate(VA_BASE),
                lambda: ctx.read(VA_BASE, 4), lambda: other.share(theirs, ctx),
                lambda: dev.create_stream(context=ctx)):
        with pytest.raises(NPUError, match=rf"context {ctx.asid} was destroyed"):
            use()
    assert len(dev.streams) == n_streams
    s = dev.create_stream()
    with pytest.raises(NPUError, match="was destroyed"):
        s.bind(ctx)
    assert s.context is None and not s.ring.freed      # the stream is left as it was
    s.synchronize()
    assert dev.create_context().asid == ctx.asid       # the id went back to the pool


def test_destroy_after_unmap_without_release_frees_everything():
    # a page unmapped with release=False made every destroy fail ("not mapped"), leaking the
    # context's pages, tables and address-space id
    dev = Device(PerfBackend(CONFIG))
    foreign = dev.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES)     # mapped, not the context's
    before = dev.memory_stats()
    ctx = dev.create_context()
    asid = ctx.asid
    b = ctx.alloc(64)
    big = ctx.alloc(CONTIG_PAGES * VM_PAGE_BYTES)
    ctx.unmap(b.addr, 64, release=False)
    ctx.unmap(big.addr + VM_PAGE_BYTES, VM_PAGE_BYTES, release=False)
    ctx.map(ctx.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES), [foreign.addr])
    ctx.destroy()
    assert ctx.destroyed and asid not in dev.contexts and b.freed and big.freed
    assert dev.memory_stats() == before                  # pages and tables freed, not foreign
    assert not foreign.freed
    again = dev.create_context()
    assert again.asid == asid
    again.destroy()
    assert dev.memory_stats() == before


@pytest.fixture(params=["model", "perf"])
def make(request):
    return {"model": ModelBackend, "perf": PerfBackend}[request.param]


def test_isolation(make):
    r = vm_jobs.isolation(make(CONFIG))
    assert r["gemm_a"] and r["gemm_b"] and r["gemm_c"]
    assert r["same_va"] and r["distinct_pa"] and r["device_writes_outside"] == 0
    assert [(f["kind"], f["va_ok"], f["queue"]) for f in r["faults"]] == [
        ("not_mapped", True, 1), ("not_mapped", True, 1), ("permission", True, 1)]
    assert r["shared_unchanged"]


def test_recovery_resume_and_skip(make):
    r = vm_jobs.recovery(make(CONFIG))
    assert r["golden"] and r["resumed_equal"]
    assert [(f["kind"], f["offset"]) for f in r["faults"]] == [("not_mapped", 0)]
    assert r["skipped"]["kind"] == "not_mapped" and r["skipped"]["offset"] == 8
    # the skipped store wrote its first row (a burst before the fault) and nothing else; the
    # command that waited on its semaphore ran
    assert r["partial_store"] == list(range(8)) and r["after_skip"] == list(range(8)) * 2


def test_invalidation(make):
    r = vm_jobs.invalidation(make(CONFIG))
    assert (r["first"], r["second"], r["walked_again"]) == (1, 2, True)
    assert r["fault"]["kind"] == "not_mapped" and r["fault"]["offset"] == 0
    # without the invalidate the TLB still held the old page; after it, the new one
    assert (r["stale_without_invalidate"], r["after_invalidate"]) == (2, 3)
    assert r["invalidate_signalled"] == 1       # that TLB_INVALIDATE signalled its semaphore


@pytest.mark.parametrize("seed", [3, 4])
def test_stress_against_the_reference(make, seed):
    r = vm_jobs.stress(make(CONFIG), seed=seed, steps=60)
    assert r["mismatches"] == 0 and r["spad_ok"]
    assert r["events"]["fault"] > 0 and r["events"]["free"] > 0


def test_perf_model_agrees_with_the_functional_model():
    for job, args in (("smoke", {}), ("stress", {"seed": 3, "steps": 60})):
        m = getattr(vm_jobs, job)(ModelBackend(CONFIG), **args)
        p = getattr(vm_jobs, job)(PerfBackend(CONFIG), **args)
        timed = {k for k in p["counters"] if k in TIMING_COUNTERS}
        assert timed >= {"tlb.load.walk_cycles", "tlb.fetch.misses"}
        assert p["counters"].keys() - m["counters"].keys() == timed
        assert {k: v for k, v in p.items() if k != "counters"} == \
            {k: v for k, v in m.items() if k != "counters"}
        assert {k: p["counters"][k] for k in m["counters"]} == m["counters"]


def test_translation_off_is_physical():
    # a queue without a context keeps physical addresses and the window (no TLB counts)
    dev = Device(ModelBackend(CONFIG))
    buf = dev.upload(np.arange(64, dtype=np.int8))
    from hw.isa import LocalMem
    from sw.runtime import CommandList
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=8, row_bytes=8, n_rows=8,
               local_row=0, local_stride=1)
    dev.run(c)
    assert all(v == 0 for k, v in dev.counters().items() if k.startswith("tlb."))
    assert np.array_equal(dev.backend.spad[:8, :8].reshape(-1), np.arange(64))


@pytest.mark.parametrize("dram", ["ideal", "lat100"])
def test_perf_model_walk_timing_follows_the_rules(dram):
    # the same rules are checked on the RTL in tests/cosim/test_vm_rtl.py
    from sw.dram import DramTiming
    from tests.cosim.test_vm_rtl import check_walk_timing
    r = vm_jobs.walk_timing(PerfBackend(CONFIG, dram=dram))
    check_walk_timing(r, DramTiming.parse(dram).read_latency)


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_skipped_fence_still_signals(backend):
    # vm_fetch_faults: a fence with a signal on a read-only page, skipped after its page
    # fault: not written, its semaphore signalled
    out = WORKLOADS["vm_fetch_faults"].run(Device(backend(CONFIG)))
    assert out["fence_ro"]["kind"] == "permission"
    assert out["sem1"] == 2                        # the resumed fence's SIGNAL, then this one


def test_destroy_refuses_a_context_whose_pages_another_context_maps():
    """Pages are shared by ``share`` (the owner keeps them) and by ``map`` of the physical
    pages of another context's buffer (``translate``): destroying the owner freed them under
    the other context's mappings. It now refuses, naming them, and changes nothing; the
    sharer's destroy frees nothing of the owner's; a block has one owner."""
    dev = Device(ModelBackend(CONFIG))
    a, b = dev.create_context(), dev.create_context()
    x, z = a.alloc(5 * VM_PAGE_BYTES), a.alloc(64)
    x.write(bytes(range(256)) * 20)
    y = a.share(x, b)
    b.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)      # (a hole: two runs)
    raw_va = b.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    b.map(raw_va, [a.translate(z.addr)])
    run = a.alloc(CONTIG_PAGES * VM_PAGE_BYTES)   # one 64 KiB block: a page inside it
    c = dev.create_context()
    c_va = c.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    c.map(c_va, [a.translate(run.addr + 3 * VM_PAGE_BYTES)])
    pages, stats = dict(a.pages), dev.memory_stats()
    with pytest.raises(ContextInUseError, match=rf"context {a.asid}'s physical pages are "
                       rf"mapped in context {b.asid} at \[{y.addr:#x}, \+5 pages\), "
                       rf"\[{raw_va:#x}, \+1 pages\); in context {c.asid} at "
                       rf"\[{c_va:#x}, \+1 pages\): unmap them there first") as e:
        a.destroy()
    assert e.value.shared == [(b, y.addr, 5), (b, raw_va, 1), (c, c_va, 1)]
    assert e.value.streams == []
    assert not a.destroyed and a.pages == pages and dev.memory_stats() == stats
    assert y.read() == x.read()
    # a block has one owner: mapping it with blocks= elsewhere would free it twice
    (kept,) = a.unmap(z.addr, 64, release=False)
    with pytest.raises(ValueError, match=rf"physical block {kept.block:#x} is owned by context "
                                         rf"{a.asid}"):
        b.map(b.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES), [kept.pa], blocks=[kept.block])
    b.free(y)
    with pytest.raises(ContextInUseError, match=r"\+1 pages\)"):
        a.destroy()
    b.unmap(raw_va, VM_PAGE_BYTES)
    with pytest.raises(ContextInUseError, match=rf"in context {c.asid} at"):
        a.destroy()
    c.destroy()
    table_bytes = VM_PAGE_BYTES * (1 + len(b._tables))
    free = dev.memory_stats().free_bytes
    b.destroy()                       # the sharer: only its tables
    assert dev.memory_stats().free_bytes == free + table_bytes
    assert x.read(5120) == bytes(range(256)) * 20
    a.destroy()
    assert a.destroyed


def test_destroy_invalidates_after_a_free_whose_invalidate_has_not_retired():
    """``free(wait=False)`` (the runtime's deferred frees, a destroyed stream's ring) leaves
    its TLB invalidate queued; with no page left mapped, destroy skipped its own and freed
    the pages and the address-space id while a TLB could still hold them."""
    from hw.isa import Opcode, decode
    dev = Device(ModelBackend(CONFIG))
    s0, s1 = dev.default_stream, dev.create_stream()
    ctx = dev.create_context()
    gate = dev.event()
    s0.wait_event(gate)               # holds the unwaited invalidate
    ctx.free(ctx.alloc(64), wait=False)
    assert not ctx.pages
    n = s1.next_index
    ctx.destroy(stream=s1)
    assert [decode(r).header.opcode for r in s1._record[n:]].count(Opcode.TLB_INVALIDATE) == 1
    s1.record(gate)
    s0.synchronize()


def test_an_unwaited_free_frees_its_pages_once_its_invalidate_retired():
    # the deferred release of free(wait=False) took no argument: the Deferred that ran it
    # (any later synchronize) failed with a TypeError
    dev = Device(ModelBackend(CONFIG))
    ctx = dev.create_context()
    ctx.alloc(64)                     # (its page table stays)
    stats = dev.memory_stats()
    ctx.free(ctx.alloc(64), wait=False)
    assert dev.memory_stats() != stats
    dev.synchronize()
    assert dev.memory_stats() == stats


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_a_page_fault_in_a_destroyed_streams_work(backend):
    # nobody can resume a destroyed stream: its fault is a DeviceError (queue reset) for the
    # call that waits for its work, and that call then goes through
    from sw.runtime import DeviceError
    dev = Device(backend(CONFIG))
    ctx = dev.create_context()
    s = dev.create_stream(context=ctx)
    c = CommandList()
    c.fence(addr=VA_BASE + 64 * VM_PAGE_BYTES, value=1)      # not mapped
    s.launch(c)
    s.destroy()
    with pytest.raises(DeviceError) as e:
        ctx.destroy()
    assert type(e.value) is DeviceError and e.value.code == ErrorCode.PAGE_NOT_MAPPED
    assert not ctx.destroyed
    ctx.destroy()
    assert ctx.destroyed and s.queue not in dev.streams


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_owner_free_and_unmap_refuse_pages_another_context_maps(backend):
    """The owner's free / unmap of pages another context maps (``share``, ``map``) freed them
    under that mapping: the next alloc reused them and the other context read and wrote
    someone else's data. They now refuse as destroy does (``ContextInUseError``, ``shared``)
    and change nothing, ``free(wait=False)`` and a job's deferred free too; a page of a
    64 KiB block mapped elsewhere holds the whole block."""
    from sw.kernels.linear import linear_launch
    dev = Device(backend(CONFIG))
    a, b = dev.create_context(), dev.create_context()
    x = a.alloc(2 * VM_PAGE_BYTES)
    x.write(b"A" * 64)
    y = a.share(x, b)
    pages, stats = dict(a.pages), dev.memory_stats()
    for refused, va, n in ((x.free, y.addr, 2), (lambda: a.free(x, wait=False), y.addr, 2),
                           (lambda: a.unmap(x.addr, VM_PAGE_BYTES), y.addr, 1),
                           (lambda: a.unmap(x.addr + VM_PAGE_BYTES, 1), y.addr + VM_PAGE_BYTES, 1)):
        with pytest.raises(ContextInUseError, match=rf"context {a.asid}'s physical pages are "
                           rf"mapped in context {b.asid} at \[{va:#x}, \+{n} pages\)") as e:
            refused()
        assert e.value.shared == [(b, va, n)]
        assert not x.freed and a.pages == pages and dev.memory_stats() == stats
    z = a.alloc(2 * VM_PAGE_BYTES)
    z.write(b"Z" * 64)
    assert y.read(8) == b"AAAAAAAA"
    (kept,) = a.unmap(x.addr, VM_PAGE_BYTES, release=False)   # keeps the page: allowed
    a.map(x.addr, [kept.pa], blocks=[kept.block])
    b.free(y)
    x.free()                                            # nobody else maps them now
    # one page of a 64 KiB block mapped elsewhere: the owner may unmap the other pages, not
    # the last one (that frees the block)
    run = a.alloc(CONTIG_PAGES * VM_PAGE_BYTES)
    c_va = b.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    b.map(c_va, [a.translate(run.addr + 3 * VM_PAGE_BYTES)])
    a.unmap(run.addr, 3 * VM_PAGE_BYTES)
    with pytest.raises(ContextInUseError, match=rf"at \[{c_va:#x}, \+1 pages\)"):
        a.unmap(run.addr + 3 * VM_PAGE_BYTES, (CONTIG_PAGES - 3) * VM_PAGE_BYTES)
    b.unmap(c_va, VM_PAGE_BYTES)
    a.unmap(run.addr + 3 * VM_PAGE_BYTES, (CONTIG_PAGES - 3) * VM_PAGE_BYTES)
    # a kernel's buffers, freed once its work retired: refused at LinearJob.free, not later
    s = dev.create_stream(context=a)
    rng = np.random.default_rng(0)
    job = linear_launch(s, rng.integers(-128, 128, (8, 16), dtype=np.int8),
                        rng.integers(-128, 128, (16, 8), dtype=np.int8), np.zeros(8, np.int32),
                        np.full(8, 1 << 20), np.full(8, 28))
    out = a.share(job.out_buffer, b)
    with pytest.raises(ContextInUseError, match=rf"in context {b.asid}"):
        job.free()
    assert not job.out_buffer.freed
    b.free(out)
    job.free()
    s.synchronize()
    assert job.out_buffer.freed


@pytest.mark.parametrize("backend", [ModelBackend, PerfBackend])
def test_a_deferred_free_of_pages_mapped_elsewhere_keeps_them_until_destroy(backend):
    """The runtime's deferred frees (a destroyed stream's ring, an event's words) cannot
    refuse: where another context maps such pages (by hand), the owner keeps them instead of
    freeing them under that mapping, and its destroy refuses until they are unmapped there."""
    dev = Device(backend(CONFIG))
    a, b = dev.create_context(), dev.create_context()
    stats = dev.memory_stats()
    s = dev.create_stream(context=a, ring_commands=16)
    ring_pa = a.translate(s.ring.addr)
    va = b.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    b.map(va, [ring_pa - ring_pa % VM_PAGE_BYTES])
    s.destroy()                       # its work retired: the ring is freed now
    dev.synchronize()                 # (and its unwaited TLB invalidate retired)
    assert s.ring.freed and ring_pa - ring_pa % VM_PAGE_BYTES in a._block_pages
    assert dev.alloc(64).addr != ring_pa
    # an event's timestamp word, freed at once (its recording retired): the waited path
    s2 = dev.create_stream(context=a)
    ev = s2.record()
    s2.synchronize()
    word_pa = a.translate(ev._words[s2].addr)
    word_va = b.va.alloc(VM_PAGE_BYTES, VM_PAGE_BYTES)
    b.map(word_va, [word_pa - word_pa % VM_PAGE_BYTES])
    ev.free()
    assert ev._words == {} and word_pa - word_pa % VM_PAGE_BYTES in a._block_pages
    s2.destroy()
    assert word_va == va + VM_PAGE_BYTES          # (one run of two pages)
    with pytest.raises(ContextInUseError, match=rf"in context {b.asid} at \[{va:#x}, \+2 pages\)"):
        a.destroy()
    b.unmap(va, VM_PAGE_BYTES)
    with pytest.raises(ContextInUseError, match=rf"at \[{word_va:#x}, \+1 pages\)"):
        a.destroy()
    b.unmap(word_va, VM_PAGE_BYTES)
    a.destroy()
    b.destroy()
    assert dev.memory_stats().free_bytes == stats.free_bytes + 2 * VM_PAGE_BYTES - 64
