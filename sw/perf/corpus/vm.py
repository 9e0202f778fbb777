"""Validation workloads of virtual memory (:mod:`hw.isa.vm`): translated GEMMs and attention,
two contexts, page faults of the DMA and of the command fetch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hw.isa import Csr, LocalMem, queue_csr, sem_csr
from sw.perf.corpus.common import Workload, digest, linear_operands
from sw.perf.corpus.general import attention_workload
from sw.runtime import CommandList, Device, PageFaultError


def _vm_gemm(m: int, k: int, n: int, contiguous: bool = True) -> Callable[[Device], dict]:
    def run(device: Device) -> dict:
        from sw.golden import linear_int
        from sw.kernels.linear import linear_with_stats
        s = device.create_stream(context=device.create_context(contiguous=contiguous))
        a, w, bias, mult, shift = linear_operands(np.random.default_rng(m * k * n), m, k, n)
        out, st = linear_with_stats(device, a, w, bias, mult, shift, stream=s)
        return {"kernel_cycles": st.cycles, "digest": digest(out),
                "bit_exact": bool(np.array_equal(out, linear_int(a, w, bias, mult, shift)))}
    return run


def _vm_attention(device: Device) -> dict:
    s = device.create_stream(context=device.create_context(contiguous=False))
    return attention_workload(32, "causal", stream=s)(device)


def _vm_two_contexts(device: Device) -> dict:
    """Two contexts run GEMMs at the same virtual addresses on two streams at once (both
    walkers and the fetch share the read channel)."""
    from sw.kernels.linear import linear_launch
    cfg = device.config
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    rng = np.random.default_rng(21)
    streams = [device.create_stream(context=device.create_context(contiguous=False))
               for _ in range(2)]
    jobs = []
    for i, s in enumerate(streams):
        a, w, bias, mult, shift = linear_operands(rng, 24, 6 * cfg.rows, 3 * cfg.cols)
        jobs.append(linear_launch(s, a, w, bias, mult, shift,
                                  spad_region=(i * half_s, half_s),
                                  acc_region=(i * half_a, half_a)))
    for s in streams:
        s.synchronize()
    return {"digest": digest(*[j.output() for j in jobs]),
            "same_va": jobs[0].out_buffer.addr == jobs[1].out_buffer.addr}


def _vm_faults(device: Device) -> dict:
    """A load that faults on its third row (unmapped), map and resume; a store to a read-only
    page, skipped; unmap with TLB_INVALIDATE and remap to another page; a load that faults
    after the unmap."""
    from hw.isa import VM_PAGE_BYTES
    ctx = device.create_context()
    s = device.create_stream(context=ctx)
    buf = ctx.alloc(3 * VM_PAGE_BYTES)
    buf.write(bytes(range(256)) * 48)
    ctx.unmap(buf.addr + 2 * VM_PAGE_BYTES, VM_PAGE_BYTES)
    ro = ctx.alloc(VM_PAGE_BYTES, write=False)
    out = {}

    def run(c: CommandList) -> dict | None:
        s.launch(c)
        try:
            s.synchronize()
        except PageFaultError as e:
            return {"kind": e.kind, "va": e.virtual_address, "index": e.command_index}
        return None

    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr + 8, dram_stride=VM_PAGE_BYTES,
               row_bytes=40, n_rows=3, local_row=0, local_stride=5, signal=0)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=buf.addr + 64, dram_stride=40, row_bytes=40,
                n_rows=3, local_row=0, local_stride=5, wait=(0, 1))
    out["load"] = run(c)
    page = device.alloc(VM_PAGE_BYTES, align=VM_PAGE_BYTES)
    page.write(bytes([7]) * VM_PAGE_BYTES)
    ctx.map(buf.addr + 2 * VM_PAGE_BYTES, [page.addr])
    s.resume()
    s.synchronize()
    c = CommandList()
    c.dma_store(mem=LocalMem.SPAD, dram_addr=ro.addr + 4, dram_stride=0, row_bytes=16,
                n_rows=1, local_row=0, local_stride=0)
    out["store"] = run(c)
    s.skip()
    s.synchronize()
    ctx.unmap(buf.addr + VM_PAGE_BYTES, VM_PAGE_BYTES, stream=s)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=VM_PAGE_BYTES, row_bytes=8,
               n_rows=2, local_row=20, local_stride=1)
    out["after_unmap"] = run(c)
    s.skip()
    s.synchronize()
    out["digest"] = digest(np.frombuffer(buf.read(VM_PAGE_BYTES), np.uint8))
    return out


def _vm_fetch_faults(device: Device) -> dict:
    """Faults of the command fetch (:mod:`hw.isa.vm`): a stream whose ring's second page is
    mapped without read permission faults at the first slot there, the page gets it back
    and the stream resumes; a fence on an unmapped page, mapped and resumed; a fence on a
    read-only page, skipped (not written)."""
    from hw.isa import VM_PAGE_BYTES
    ctx = device.create_context()
    q = next(q for q in range(device.config.n_queues) if q not in device.streams)
    device.backend.csr_write(queue_csr(q, Csr.TAIL), 0)      # HEAD to 0: see _ring_wrap
    device.backend.csr_write(Csr.QUEUE_RESET, 1 << q)
    s = device.create_stream(q, context=ctx, ring_commands=2 * VM_PAGE_BYTES // 32)
    out = {}

    def run(c: CommandList) -> dict | None:
        s.launch(c)
        try:
            s.synchronize()
        except PageFaultError as e:
            return {"kind": e.kind, "va": e.virtual_address - s.ring.addr,
                    "index": e.command_index, "opcode": e.opcode}
        return None

    page2 = s.ring.addr + VM_PAGE_BYTES
    (m,) = ctx.unmap(page2, VM_PAGE_BYTES, release=False)
    ctx.map(page2, [m.pa], read=False, write=True, blocks=[m.block])
    c = CommandList()
    for i in range(140):
        if i % 7:
            c.signal(0)
        else:
            c.nop()
    out["ring"] = run(c)
    ctx.unmap(page2, VM_PAGE_BYTES, release=False)
    ctx.map(page2, [m.pa], blocks=[m.block])
    s.resume()
    s.synchronize()
    out["sem0"] = device.backend.csr_read(sem_csr(0))
    buf = ctx.alloc(2 * VM_PAGE_BYTES)
    buf.write(bytes(2 * VM_PAGE_BYTES))
    (hole,) = ctx.unmap(buf.addr + VM_PAGE_BYTES, VM_PAGE_BYTES, release=False)
    c = CommandList()
    c.fence(addr=buf.addr + VM_PAGE_BYTES + 8, value=0x1234)
    c.signal(1)
    out["fence"] = run(c)
    ctx.map(buf.addr + VM_PAGE_BYTES, [hole.pa], blocks=[hole.block])
    s.resume()
    s.synchronize()
    ro = ctx.alloc(VM_PAGE_BYTES, write=False)
    ro.write(bytes(VM_PAGE_BYTES))
    c = CommandList()
    c.fence(addr=ro.addr + 16, value=0x5678, signal=1)
    out["fence_ro"] = run(c)
    s.skip()
    s.synchronize()
    out["sem1"] = device.backend.csr_read(sem_csr(1))
    out["digest"] = digest(np.frombuffer(buf.read(), np.uint8), np.frombuffer(ro.read(),
                                                                               np.uint8))
    return out



def workloads() -> list[Workload]:
    """The ``vm`` workloads."""
    return [Workload("vm_gemm_64x64x64", "vm", _vm_gemm(64, 64, 64)),
            Workload("vm_gemm_pages_128x256x256", "vm", _vm_gemm(128, 256, 256, False)),
            Workload("vm_attention_L32_causal", "vm", _vm_attention),
            Workload("vm_two_contexts", "vm", _vm_two_contexts),
            Workload("vm_faults", "vm", _vm_faults),
            Workload("vm_fetch_faults", "vm", _vm_fetch_faults)]
