"""Runtime jobs (streams, events, windows, errors, ring wrap, overlap) that run on any backend:
on the RTL under cocotb (:func:`cosim.tb.harness.run_job`) and in-process on the functional model.

Each job takes a :class:`sw.backend.Backend` and JSON-serialisable keyword arguments and returns
a JSON-serialisable dict; the tests in ``tests/cosim/test_runtime_rtl.py`` check both backends.
"""

import numpy as np

from hw.isa import ErrorCode, LocalMem
from sw.golden import attention_head_int, linear_int
from sw.kernels.attention import attention_with_stats
from sw.kernels.linear import linear_launch, linear_with_stats
from sw.runtime import CommandList, Device, DeviceError, DeviceTimeoutError
from tests.support.rtl_jobs import random_attention_operands, random_linear_operands


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _cycles(device: Device) -> int:
    """``CYCLES`` now, or 0 on an untimed backend."""
    counters = device.counters()
    return counters["cycles"] if counters.timed else 0


def event_dependency(backend) -> dict:
    """Two streams run GEMMs concurrently; stream 1 then waits on an event recorded after
    stream 0's GEMM and runs a GEMM that consumes its output straight from device memory.

    Returns correctness, and from the hardware trace: whether every command of the dependent
    GEMM started after the last command of the GEMM it depends on ended, and whether the two
    independent GEMMs overlapped in time; the events' elapsed cycles, the ``CYCLES`` counter
    over the whole job (``run_cycles``) and the span of the trace (first start to last end).
    """
    device = Device(backend)
    cfg = device.config
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    s0 = device.default_stream
    s1 = device.create_stream()
    rng = np.random.default_rng(11)
    m, k, n = 16, 4 * cfg.rows, 2 * cfg.cols
    a, w, bias, mult, shift = random_linear_operands(rng, m, k, n)
    b_a, b_w, b_bias, b_mult, b_shift = random_linear_operands(rng, m, k, n)
    c_w = rng.integers(-128, 128, (n, cfg.cols), dtype=np.int8)
    _, _, c_bias, c_mult, c_shift = random_linear_operands(rng, m, n, cfg.cols)

    device.read_trace()                                  # start from an empty trace
    cycles_before = _cycles(device)
    start_a = s0.record()
    r0 = s0.next_index
    job_a = linear_launch(s0, a, w, bias, mult, shift, spad_region=(0, half_s),
                          acc_region=(0, half_a))
    r0_end = s0.next_index
    done_a = s0.record()
    r1 = s1.next_index
    job_b = linear_launch(s1, b_a, b_w, b_bias, b_mult, b_shift,
                          spad_region=(half_s, half_s), acc_region=(half_a, half_a))
    r1_mid = s1.next_index
    s1.wait_event(done_a)
    r1_c = s1.next_index
    job_c = linear_launch(s1, job_a.out_buffer, c_w, c_bias, c_mult, c_shift, m=m,
                          spad_region=(half_s, half_s), acc_region=(half_a, half_a))
    r1_end = s1.next_index
    s1.synchronize()
    s0.synchronize()
    run_cycles = _cycles(device) - cycles_before
    trace = device.read_trace()

    want_a = linear_int(a, w, bias, mult, shift)
    ok = {
        "a": bool(np.array_equal(job_a.output(), want_a)),
        "b": bool(np.array_equal(job_b.output(), linear_int(b_a, b_w, b_bias, b_mult, b_shift))),
        "c": bool(np.array_equal(job_c.output(),
                                 linear_int(want_a, c_w, c_bias, c_mult, c_shift))),
    }
    elapsed = start_a.elapsed_cycles(done_a)
    for job in (job_a, job_b, job_c):
        job.free()
    done_a.free()
    start_a.free()

    def span(queue: int, lo: int, hi: int) -> list:
        return [(t.start, t.end) for t in trace if t.queue == queue and lo <= t.index < hi]

    a_cmds, b_cmds, c_cmds = span(s0.queue, r0, r0_end), span(s1.queue, r1, r1_mid), \
        span(s1.queue, r1_c, r1_end)
    a_end = max(e for _, e in a_cmds)
    return {
        "correct": ok,
        "n_trace": {"a": len(a_cmds), "b": len(b_cmds), "c": len(c_cmds)},
        "dependency_honoured": min(s for s, _ in c_cmds) >= a_end,
        "a_end": a_end, "c_start": min(s for s, _ in c_cmds),
        "a_b_overlap": any(_overlaps(x, y) for x in a_cmds for y in b_cmds),
        "a_start": min(s for s, _ in a_cmds), "event_elapsed": elapsed,
        "run_cycles": run_cycles,
        "trace_span": max(t.end for t in trace) - min(t.start for t in trace),
    }


def unrecorded_event(backend, *, timeout_cycles: int = 20_000) -> dict:
    """A stream waits on an event that is never recorded: synchronize must time out with a
    deadlock report naming the event's semaphore; the device then keeps working."""
    device = Device(backend)
    s1 = device.create_stream()
    ev = device.event()
    s1.wait_event(ev)
    cmds = CommandList()
    cmds.nop()
    s1.launch(cmds)
    out: dict = {"sem": ev.sem.id, "raised": False}
    try:
        s1.synchronize(timeout=timeout_cycles)
    except DeviceTimeoutError as e:
        out.update(raised=True, message=str(e),
                   blocked=[{"queue": b.queue, "index": b.command_index, "sem": b.sem,
                             "value": b.value, "current": b.current,
                             "last_signal": b.last_signal} for b in e.blocked])
    out["query"] = ev.query()
    s1.reset()
    # the device and the stream keep working
    cmds = CommandList()
    cmds.signal(0)
    s1.launch(cmds)
    s1.synchronize()
    device.run(cmds)
    out["works_after"] = device.semaphore(0) == 2
    return out


def window_violation(backend) -> dict:
    """Stream 1 has a private DRAM window and stores outside it; it must fail with WINDOW,
    change no byte outside its window, while streams 0 and 2 complete their work."""
    device = Device(backend)
    cfg = device.config
    srb = cfg.spad_row_bytes
    s0 = device.default_stream
    s1 = device.create_stream(window_bytes=16 * 1024)
    s2 = device.create_stream(window_bytes=16 * 1024)
    rng = np.random.default_rng(5)
    victim = device.upload(rng.integers(0, 256, 64 * srb, dtype=np.uint8))
    src1 = s1.upload(rng.integers(0, 256, 8 * srb, dtype=np.uint8))
    dst1 = s1.alloc(8 * srb)
    src2 = s2.upload(rng.integers(0, 256, 8 * srb, dtype=np.uint8))
    dst2 = s2.alloc(8 * srb)
    a, w, bias, mult, shift = random_linear_operands(rng, 9, 33, 17)
    snapshot = bytes(backend.mem_read(0, cfg.dram_bytes))

    job = linear_launch(s0, a, w, bias, mult, shift, spad_region=(0, 2048))
    c2 = CommandList()
    c2.dma_load(mem=LocalMem.SPAD, dram_addr=src2.addr, dram_stride=srb, row_bytes=srb,
                n_rows=8, local_row=3000, local_stride=1, signal=0)
    c2.dma_store(mem=LocalMem.SPAD, dram_addr=dst2.addr, dram_stride=srb, row_bytes=srb,
                 n_rows=8, local_row=3000, local_stride=1, wait=(0, 1))
    s2.launch(c2)
    sem = device.alloc_semaphore()      # the store waits for the load (different engines)
    c1 = CommandList()
    c1.dma_load(mem=LocalMem.SPAD, dram_addr=src1.addr, dram_stride=srb, row_bytes=srb,
                n_rows=8, local_row=3100, local_stride=1, signal=sem.id)
    c1.dma_store(mem=LocalMem.SPAD, dram_addr=victim.addr + 8 * srb, dram_stride=srb,
                 row_bytes=srb, n_rows=8, local_row=3100, local_stride=1,
                 wait=(sem.id, sem.target(1)))                                # outside
    sem.issued += 1
    c1.dma_store(mem=LocalMem.SPAD, dram_addr=dst1.addr, dram_stride=srb, row_bytes=srb,
                 n_rows=8, local_row=3100, local_stride=1)
    s1.launch(c1)
    out: dict = {"raised": False}
    try:
        s1.synchronize()
    except DeviceError as e:
        out.update(raised=True, code=e.code.name if isinstance(e.code, ErrorCode) else e.code,
                   queue=e.queue, index=e.command_index, address=e.address,
                   message=str(e))
    out["expected_address"] = victim.addr + 8 * srb
    s0.synchronize()
    s2.synchronize()
    out["others_ok"] = {
        "gemm": bool(np.array_equal(job.output(), linear_int(a, w, bias, mult, shift))),
        "copy": backend.mem_read(dst2.addr, 8 * srb) == backend.mem_read(src2.addr, 8 * srb),
    }
    after = bytes(backend.mem_read(0, cfg.dram_bytes))
    # allowed changes: stream 1's window; the other streams' rings, fence words and outputs
    allowed = [s1.window, (job.out_buffer.addr, job.out_buffer.addr + job.out_buffer.nbytes),
               (dst2.addr, dst2.addr + dst2.nbytes)]
    allowed += [(b.addr, b.addr + b.nbytes) for b in job._buffers]
    allowed += [(s.ring.addr, s.ring.addr + s.ring.nbytes) for s in (s0, s2)]
    allowed += [(s._fence_word.addr, s._fence_word.addr + 4) for s in (s0, s2)]
    diff = np.flatnonzero(np.frombuffer(after, np.uint8) != np.frombuffer(snapshot, np.uint8))
    outside = [int(d) for d in diff if not any(lo <= d < hi for lo, hi in allowed)]
    out["changed_outside"] = len(outside)
    job.free()
    out["victim_intact"] = backend.mem_read(victim.addr, victim.nbytes) == \
        snapshot[victim.addr:victim.addr + victim.nbytes]
    out["third_command_skipped"] = backend.mem_read(dst1.addr, 8 * srb) == bytes(8 * srb)
    # after the error the stream works again
    c1 = CommandList()
    c1.dma_store(mem=LocalMem.SPAD, dram_addr=dst1.addr, dram_stride=srb, row_bytes=srb,
                 n_rows=8, local_row=3100, local_stride=1)
    s1.launch(c1)
    s1.synchronize()
    out["works_after"] = backend.mem_read(dst1.addr, 8 * srb) == \
        backend.mem_read(src1.addr, 8 * srb)
    return out


def ring_wrap(backend, *, ring_commands: int = 8, n: int = 40) -> dict:
    """``2 n`` commands through a ring of ``ring_commands`` slots (wrap-around, full ring):
    zero-length DMA loads (engine commands, traced) interleaved with SIGNALs. All must execute
    in submission order."""
    device = Device(backend)
    s = device.create_stream(ring_commands=ring_commands)
    device.read_trace()
    start = s.next_index
    base = device.semaphore(0)
    cmds = CommandList()
    for _ in range(n):
        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=0, row_bytes=0, n_rows=0,
                      local_row=0, local_stride=0)
        cmds.signal(0)
    s.launch(cmds)
    s.synchronize()
    trace = [t for t in device.read_trace() if t.queue == s.queue]
    return {
        "sem": device.semaphore(0) - base,
        "load_indices_in_order": [t.index - start for t in trace] == list(range(0, 2 * n, 2)),
        "n_traced": len(trace),
        "ring_commands": ring_commands,
        "submitted": s.commands_submitted,
    }


def overlap(backend, *, m: int = 16, k: int = 384, n: int = 128) -> dict:
    """A GEMM whose weights do not fit the scratchpad at once, run serialized and double
    buffered; busy and overlap counters of the engines for each."""
    device = Device(backend)
    rng = np.random.default_rng(2)
    a, w, bias, mult, shift = random_linear_operands(rng, m, k, n)
    want = linear_int(a, w, bias, mult, shift)
    out = {}
    for name, db in (("serialized", False), ("double_buffered", True)):
        before = device.counters()
        res, stats = linear_with_stats(device, a, w, bias, mult, shift, double_buffer=db)
        d = device.counters() - before   # no timing counters on the untimed model: None
        out[name] = {"bit_exact": bool(np.array_equal(res, want)), "cycles": stats.cycles,
                     "dma_busy": d.get("dma_busy"), "matrix_busy": d.get("busy.matrix"),
                     "overlap": d.get("overlap"), "commands": stats.n_commands,
                     "double_buffer": stats.plan.double_buffer}
    return out


def minilm_qkv_compare(backend, *, text: str | None = None) -> dict:
    """MiniLM layer-0 Q, K, V projections, serialized vs double-buffered linear kernel."""
    from sw.jobs.minilm_block import PROJECTIONS, calibrate_qkv
    from sw.models.minilm import DEFAULT_EVAL_TEXT, load_minilm

    model = load_minilm()
    quantized = calibrate_qkv(model)
    x = model.embed(text or DEFAULT_EVAL_TEXT)
    device = Device(backend)
    rows = []
    for name in PROJECTIONS:
        q = quantized[name]
        xi = q.quantize_input(x)
        row: dict = {"name": name, "shape": [int(xi.shape[0]), int(q.w.shape[0]),
                                             int(q.w.shape[1])]}
        for label, db in (("serialized", False), ("double_buffered", True)):
            before = device.counters()
            out, stats = linear_with_stats(device, xi, q.w, q.bias, q.multiplier, q.shift,
                                           double_buffer=db)
            d = device.counters() - before
            row[label] = {"cycles": stats.cycles, "dma_busy": d.get("dma_busy"),
                          "overlap": d.get("overlap"), "bit_exact": bool(np.array_equal(
                              out, q.golden(xi)))}
        rows.append(row)
    return {"tokens": int(x.shape[0]), "kernels": rows}


def counter_snapshots(backend) -> dict:
    """Two small GEMMs on two streams at once, then a third on stream 1 after an event of
    stream 0, bracketed by two snapshots of the performance counters (``Device.counters``).

    The engines wait on each other's semaphores (load -> matmul -> requant -> store in each
    GEMM, and across the streams), so the ``sem`` stalls, busy, retired and byte counters
    all move. Returns both snapshots (absolute values) and bit-exactness.
    """
    device = Device(backend)
    cfg = device.config
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    s0, s1 = device.default_stream, device.create_stream()
    rng = np.random.default_rng(5)
    m, k, n = 8, 2 * cfg.rows, cfg.cols
    a, w, bias, mult, shift = random_linear_operands(rng, m, k, n)
    b_a, b_w, b_bias, b_mult, b_shift = random_linear_operands(rng, m, k, n)
    before = device.counters()
    job_a = linear_launch(s0, a, w, bias, mult, shift, spad_region=(0, half_s),
                          acc_region=(0, half_a))
    done_a = s0.record()
    job_b = linear_launch(s1, b_a, b_w, b_bias, b_mult, b_shift,
                          spad_region=(half_s, half_s), acc_region=(half_a, half_a))
    s1.wait_event(done_a)
    job_c = linear_launch(s1, b_a, b_w, b_bias, b_mult, b_shift,
                          spad_region=(half_s, half_s), acc_region=(half_a, half_a))
    s1.synchronize()
    s0.synchronize()
    after = device.counters()
    want_b = linear_int(b_a, b_w, b_bias, b_mult, b_shift)
    ok = (np.array_equal(job_a.output(), linear_int(a, w, bias, mult, shift))
          and np.array_equal(job_b.output(), want_b) and np.array_equal(job_c.output(), want_b))
    for job in (job_a, job_b, job_c):
        job.free()
    done_a.free()
    return {"before": dict(before), "after": dict(after), "timed": before.timed,
            "bit_exact": bool(ok)}


def _attention_golden(q, k, v, heads: int, sm, ss, om, osh) -> np.ndarray:
    d = q.shape[1] // heads
    sl = [slice(h * d, (h + 1) * d) for h in range(heads)]
    return np.concatenate([
        attention_head_int(q[:, s], k[:, s], v[:, s], score_mult=int(sm[h]),
                           score_shift=int(ss[h]), out_mult=om[s], out_shift=osh[s])
        for h, s in enumerate(sl)], axis=1)


def _copy(stream, sem, src, dst, local_row: int, n_rows: int, row_bytes: int) -> None:
    """DRAM ``src`` -> scratchpad rows ``local_row ..`` -> DRAM ``dst`` on ``stream``; the
    store waits for the load through ``sem`` (a pool semaphore)."""
    cmds = CommandList()
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src.addr, dram_stride=row_bytes,
                  row_bytes=row_bytes, n_rows=n_rows, local_row=local_row, local_stride=1,
                  signal=sem.id)
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=dst.addr, dram_stride=row_bytes,
                   row_bytes=row_bytes, n_rows=n_rows, local_row=local_row, local_stride=1,
                   wait=(sem.id, sem.target(1)))
    sem.issued += 1
    stream.launch(cmds)


def attention_beside_stream(backend, *, seq: int = 8, heads: int = 2, d: int = 8,
                            near_wrap: bool = False) -> dict:
    """The attention kernel runs twice on stream 0 (lower half of the scratchpad and the
    accumulator) while stream 1 (upper halves) runs a linear kernel and a DMA copy beside the
    first call, and a second linear kernel and copy that wait on an event recorded on stream 0
    between the two calls (so they are pending during the first call and run beside the
    second). ``near_wrap`` first sets every semaphore to 2**32 - 1 (host writes), so every
    semaphore of the job, and that event's wait, crosses the 2**32 wrap.

    Returns bit-exactness of all four results, whether stream 1's gated work stayed pending
    until the event (its copy's destination untouched, the stream busy), whether every
    semaphore of stream 1 ends exactly at its owner's target (nobody else signalled it), and
    (``overlap``, from event timestamps) whether stream 1's first linear kernel was still
    running when the first attention call started.
    """
    device = Device(backend)
    cfg = device.config
    if near_wrap:
        for s in range(cfg.n_sems):
            device.set_semaphore(s, (1 << 32) - 1)
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    lower = {"spad_region": (0, half_s), "acc_region": (0, half_a)}
    upper = {"spad_region": (half_s, half_s), "acc_region": (half_a, half_a)}
    s0, s1 = device.default_stream, device.create_stream()
    rng = np.random.default_rng(3)
    lin = [random_linear_operands(rng, 32, 8 * cfg.rows, 4 * cfg.cols) for _ in range(2)]
    att = [random_attention_operands(rng, seq, heads, d) for _ in range(2)]
    srb = cfg.spad_row_bytes
    srcs = [device.upload(rng.integers(0, 256, 16 * srb, dtype=np.uint8)) for _ in range(2)]
    dsts = [device.upload(np.zeros(16 * srb, np.uint8)) for _ in range(2)]
    copy_sems = [device.alloc_semaphore() for _ in range(2)]
    mid = device.event()

    def attention(i: int) -> bool:
        q, k, v, sm, ss, om, osh = att[i]
        out, _ = attention_with_stats(device, q, k, v, heads=heads, score_mult=sm,
                                      score_shift=ss, out_mult=om, out_shift=osh, **lower)
        return bool(np.array_equal(out, _attention_golden(q, k, v, heads, sm, ss, om, osh)))

    job1 = linear_launch(s1, *lin[0], **upper)
    job1_done = s1.record()
    _copy(s1, copy_sems[0], srcs[0], dsts[0], half_s + 8, 16, srb)
    s1.wait_event(mid)
    _copy(s1, copy_sems[1], srcs[1], dsts[1], half_s + 8, 16, srb)
    job2 = linear_launch(s1, *lin[1], **upper)
    att_start = s0.record()
    ok_att = [attention(0)]
    gated = {"copy_untouched": dsts[1].read() == bytes(16 * srb), "stream_busy": not s1.query()}
    s0.record(mid)
    ok_att.append(attention(1))
    s1.synchronize()
    s0.synchronize()
    out = {
        "attention": ok_att,
        "linear": [bool(np.array_equal(j.output(), linear_int(*ops)))
                   for j, ops in zip((job1, job2), lin, strict=True)],
        "copies": [d.read() == s.read() for s, d in zip(srcs, dsts, strict=True)],
        "gated_until_event": gated,
        "semaphores_exact": all(s.value() == s.target() for s in
                                [*job1._sems, *job2._sems, *copy_sems, mid.sem]),
        # timed backends: stream 1's first linear kernel was still running when the first
        # attention call started (the model's timestamps are all 0)
        "overlap": job1_done.timestamp() > att_start.timestamp(),
    }
    for job in (job1, job2):
        job.free()
    return out
