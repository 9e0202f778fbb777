"""Validation workloads of the kernels, streams, synchronization, command streams, errors and
the main job, on the default and two other configurations."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hw.isa import Csr, ErrorCode, LocalMem, queue_csr
from sw.perf.corpus.common import Workload, attention_operands, digest, linear_operands
from sw.runtime import CommandList, Device, DeviceError

# -- gemm ---------------------------------------------------------------------------------------

def gemm_workload(m: int, k: int, n: int, *, relu: bool = False,
                  double_buffer: bool = True) -> Callable[[Device], dict]:
    """A workload: the int8 linear kernel on ``(m, k) x (k, n)`` random operands
    (:func:`linear_operands`); results: kernel cycles, commands, output digest, bit-exactness."""
    def run(device: Device) -> dict:
        from sw.golden import linear_int
        from sw.kernels.linear import linear_with_stats
        a, w, bias, mult, shift = linear_operands(np.random.default_rng(m * k * n), m, k, n)
        out, st = linear_with_stats(device, a, w, bias, mult, shift, relu=relu,
                                    double_buffer=double_buffer)
        return {"kernel_cycles": st.cycles, "commands": st.n_commands, "digest": digest(out),
                "bit_exact": bool(np.array_equal(out, linear_int(a, w, bias, mult, shift,
                                                                 relu=relu)))}
    return run


# -- attention ------------------------------------------------------------------------------------

def attention_workload(seq: int, mask: str, heads: int = 2, d: int = 32,
                       stream=None) -> Callable[[Device], dict]:
    """A workload: multi-head attention at ``L = seq`` (``mask``: ``none``, ``causal`` or
    ``padding``) on random operands (:func:`attention_operands`), on ``stream`` (default: a new
    one)."""
    def run(device: Device) -> dict:
        from sw.golden import attention_head_int
        from sw.kernels.attention import attention_with_stats
        rng = np.random.default_rng(seq)
        q, k, v, sm, ss, om, osh = attention_operands(rng, seq, heads, d)
        kv = seq - seq // 3 if mask == "padding" else None
        causal = mask == "causal"
        out, st = attention_with_stats(device, q, k, v, heads=heads, score_mult=sm,
                                       score_shift=ss, out_mult=om, out_shift=osh,
                                       kv_len=kv, causal=causal, stream=stream)
        gold = np.concatenate([
            attention_head_int(q[:, h * d:(h + 1) * d], k[:, h * d:(h + 1) * d],
                               v[:, h * d:(h + 1) * d], score_mult=int(sm[h]),
                               score_shift=int(ss[h]), out_mult=om[h * d:(h + 1) * d],
                               out_shift=osh[h * d:(h + 1) * d], kv_len=kv, causal=causal)
            for h in range(heads)], axis=1)
        return {"stage_cycles": {s: x["cycles"] for s, x in st.stages.items()},
                "digest": digest(out), "bit_exact": bool(np.array_equal(out, gold))}
    return run


# -- streams and events ---------------------------------------------------------------------------

def _two_streams(device: Device) -> dict:
    """GEMM A on stream 0 and GEMM B on stream 1 run concurrently; stream 1 then waits on an
    event recorded after A and runs GEMM C on A's output from device memory."""
    from sw.kernels.linear import linear_launch
    cfg = device.config
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    s0, s1 = device.default_stream, device.create_stream()
    rng = np.random.default_rng(11)
    m, k, n = 16, 4 * cfg.rows, 2 * cfg.cols
    a, w, bias, mult, shift = linear_operands(rng, m, k, n)
    b_a, b_w, b_bias, b_mult, b_shift = linear_operands(rng, m, k, n)
    c_w = rng.integers(-128, 128, (n, cfg.cols), dtype=np.int8)
    _, _, c_bias, c_mult, c_shift = linear_operands(rng, m, n, cfg.cols)
    start = s0.record()
    job_a = linear_launch(s0, a, w, bias, mult, shift, spad_region=(0, half_s),
                          acc_region=(0, half_a))
    done_a = s0.record()
    job_b = linear_launch(s1, b_a, b_w, b_bias, b_mult, b_shift, spad_region=(half_s, half_s),
                          acc_region=(half_a, half_a))
    s1.wait_event(done_a)
    job_c = linear_launch(s1, job_a.out_buffer, c_w, c_bias, c_mult, c_shift, m=m,
                          spad_region=(half_s, half_s), acc_region=(half_a, half_a))
    s1.synchronize()
    s0.synchronize()
    outs = [job.output() for job in (job_a, job_b, job_c)]
    elapsed = start.elapsed_cycles(done_a)
    for x in (job_a, job_b, job_c, start, done_a):
        x.free()
    return {"event_elapsed": elapsed, "digest": digest(*outs)}


def _fan_in(device: Device) -> dict:
    """Three streams each run a GEMM (serialized kernels: one semaphore each); the default
    stream waits for all three events and runs a fourth; every event's timestamp is
    reported."""
    from sw.kernels.linear import linear_launch
    cfg = device.config
    streams = [device.create_stream() for _ in range(3)]
    rng = np.random.default_rng(12)
    rows = cfg.spad_rows // 4
    accs = cfg.acc_rows // 4
    jobs, events = [], []
    for i, s in enumerate(streams):
        a, w, bias, mult, shift = linear_operands(rng, 12 + 5 * i, 24 + 8 * i, 16)
        jobs.append(linear_launch(s, a, w, bias, mult, shift, double_buffer=False,
                                  spad_region=((i + 1) * rows, rows),
                                  acc_region=((i + 1) * accs, accs)))
        events.append(s.record())
    s0 = device.default_stream
    for ev in events:
        s0.wait_event(ev)
    a, w, bias, mult, shift = linear_operands(rng, 8, 16, 8)
    last = linear_launch(s0, a, w, bias, mult, shift, double_buffer=False,
                         spad_region=(0, rows), acc_region=(0, accs))
    s0.synchronize()
    for s in streams:
        s.synchronize()
    stamps = [ev.timestamp() for ev in events]
    outs = [j.output() for j in (*jobs, last)]
    for x in (*jobs, last, *events):
        x.free()
    return {"timestamps": stamps, "digest": digest(*outs)}


# -- synchronization --------------------------------------------------------------------------

def _barriers(device: Device) -> dict:
    """Two streams alternate small GEMMs and cross-stream barriers, eight rounds."""
    from sw.kernels.linear import linear_launch
    cfg = device.config
    s0, s1 = device.default_stream, device.create_stream()
    rng = np.random.default_rng(13)
    half_s, half_a = cfg.spad_rows // 2, cfg.acc_rows // 2
    outs = []
    for r in range(8):
        jobs = []
        for s, region in ((s0, 0), (s1, 1)):
            a, w, bias, mult, shift = linear_operands(rng, 4 + r, 8 + 4 * r, 8)
            jobs.append(linear_launch(s, a, w, bias, mult, shift,
                                      spad_region=(region * half_s, half_s),
                                      acc_region=(region * half_a, half_a)))
        device.barrier([s0, s1])
        s0.synchronize()
        s1.synchronize()
        outs += [j.output() for j in jobs]
        for j in jobs:
            j.free()
    return {"digest": digest(*outs)}


def _processor_commands(device: Device) -> dict:
    """NOP, SIGNAL, WAIT, BARRIER and timestamped FENCEs on two streams, ping-ponging a
    semaphore 24 times."""
    s0, s1 = device.default_stream, device.create_stream()
    sem = device.alloc_semaphore()
    word = device.alloc(64)
    c0, c1 = CommandList(), CommandList()
    base = sem.target(0)
    for i in range(12):
        c0.nop(wait=(sem.id, base + 2 * i), signal=sem.id)
        c0.barrier()
        c1.wait(sem.id, base + 2 * i + 1)
        c1.signal(sem.id)
        c1.fence(addr=word.addr + 4 * (i % 16), timestamp=True)
    sem.issued += 24
    s1.launch(c1)
    s0.launch(c0)
    s0.synchronize()
    s1.synchronize()
    stamps = np.frombuffer(word.read(48), np.uint32)
    return {"sem": sem.value() - base, "fence_span": int(stamps[-1] - stamps[0])}


def _ring_wrap(device: Device) -> dict:
    """120 commands through a ring of 16 slots: the host waits for ring space.

    The queue's ``HEAD`` is first brought to 0 (``TAIL`` 0, then a queue reset): a stream set
    up on a queue whose ``HEAD`` an earlier, larger ring left beyond 16 would start outside
    its ring (the runtime takes ``HEAD`` as is)."""
    q = next(q for q in range(device.config.n_queues) if q not in device.streams)
    device.backend.csr_write(queue_csr(q, Csr.TAIL), 0)
    device.backend.csr_write(Csr.QUEUE_RESET, 1 << q)
    s = device.create_stream(q, ring_commands=16)
    cmds = CommandList()
    for _ in range(60):
        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=8, row_bytes=8, n_rows=4,
                      local_row=0, local_stride=1)
        cmds.signal(0)
    s.launch(cmds)
    s.synchronize()
    return {"sem": device.semaphore(0)}


# -- command streams ------------------------------------------------------------------------

def _random_stream(device: Device, seed: int = 0, n_commands: int = 60) -> dict:
    """A random serialized stream of DMA (scratchpad and accumulator), MATMUL, REQUANT and
    SOFTMAX commands on random local data; digest of what it stores."""
    cfg = device.config
    rng = np.random.default_rng(seed)
    srb, arb = cfg.spad_row_bytes, cfg.acc_row_bytes
    rows = 64
    src = device.upload(rng.integers(0, 256, rows * srb, dtype=np.uint8))
    params = np.zeros((3, cfg.acc_row_elems), dtype=np.int32)
    params[0] = rng.integers(-1000, 1000, cfg.acc_row_elems)
    params[1] = rng.integers(1 << 30, 1 << 31, cfg.acc_row_elems)
    params[2] = rng.integers(12, 20, cfg.acc_row_elems)
    p_buf = device.upload(params)
    out = device.alloc(rows * max(srb, arb))
    out.write(bytes(out.nbytes))
    cmds = CommandList()
    sem = device.semaphore(0)

    def seq() -> dict:
        return {"wait": (0, sem + len(cmds)), "signal": 0}
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=rows, local_row=0, local_stride=1, **seq())
    cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr, dram_stride=arb, row_bytes=arb,
                  n_rows=3, local_row=0, local_stride=1, **seq())
    for _ in range(n_commands):
        kind = int(rng.integers(0, 5))
        if kind == 0:
            m = int(rng.integers(1, 9))
            cmds.matmul(a_row=int(rng.integers(0, rows - m)), w_row=int(rng.integers(0, 16)),
                        acc_row=int(rng.integers(3, 20)), m=m, accumulate=bool(rng.integers(2)),
                        **seq())
        elif kind == 1:
            cmds.requant(acc_row=int(rng.integers(3, 20)), spad_row=int(rng.integers(32, 56)),
                         n_rows=int(rng.integers(1, 8)), param_row=0,
                         relu=bool(rng.integers(2)), **seq())
        elif kind == 2:
            cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr + int(rng.integers(0, 32)) * srb,
                           dram_stride=srb, row_bytes=srb, n_rows=int(rng.integers(1, 8)),
                           local_row=int(rng.integers(0, 56)), local_stride=1, **seq())
        elif kind == 3:
            cmds.dma_store(mem=LocalMem.ACC, dram_addr=out.addr + int(rng.integers(0, 8)) * arb,
                           dram_stride=arb, row_bytes=arb, n_rows=int(rng.integers(1, 4)),
                           local_row=int(rng.integers(3, 20)), local_stride=1, **seq())
        else:
            n = int(rng.integers(1, 12))
            cmds.softmax(acc_row=24, spad_row=40, n_rows=n, n_blocks=int(rng.integers(1, 3)),
                         stride=n, scale_row=60, kv_len=int(rng.integers(1, 16)), mult=3000,
                         shift=12, causal=bool(rng.integers(2)), **seq())
    device.run(cmds)
    return {"digest": digest(np.frombuffer(out.read(), np.uint8)), "commands": len(cmds)}


def _matmul_back_to_back(device: Device, seed: int = 1, n_commands: int = 48) -> dict:
    """MATMULs with no wait between them, so the matrix engine takes each while earlier ones
    run: random sizes around ``max(rows, cols)``, 1 to 4 K blocks, accumulate, transposed
    weights (square arrays), K chains onto the same rows and commands whose first row is the
    previous one's last; then every accumulator row the stream wrote is stored. Digest of
    the stored rows."""
    cfg = device.config
    rng = np.random.default_rng(seed)
    srb, arb = cfg.spad_row_bytes, cfg.acc_row_bytes
    rows, acc_rows = 256, 48
    big = max(cfg.rows, cfg.cols)
    src = device.upload(rng.integers(0, 256, rows * srb, dtype=np.uint8))
    out = device.alloc(acc_rows * arb)
    cmds = CommandList()
    sem = device.semaphore(0)
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=rows, local_row=0, local_stride=1, signal=0)
    prev = None
    for i in range(n_commands):
        m = int(rng.choice([1, 2, big - 1, big, big + 1, 2 * big + 3]))
        blocks = int(rng.integers(1, 5))
        acc_row = int(rng.integers(0, acc_rows - m))
        kind = int(rng.integers(0, 4))
        if kind == 1 and prev is not None:                   # K chain: the same rows
            acc_row, m = prev
        elif kind == 2 and prev is not None and prev[1] >= big:
            acc_row = min(prev[0] + prev[1] - 1, acc_rows - m)   # first row = last row
        cmds.matmul(a_row=int(rng.integers(0, rows - blocks * m)),
                    w_row=int(rng.integers(0, rows - blocks * big)), acc_row=acc_row, m=m,
                    accumulate=i > 0 and kind != 3, k_blocks=blocks,
                    transpose=cfg.rows == cfg.cols and bool(rng.integers(0, 3) == 0),
                    wait=(0, sem + 1) if i == 0 else None,
                    signal=0 if i == n_commands - 1 else None)
        prev = (acc_row, m)
    cmds.dma_store(mem=LocalMem.ACC, dram_addr=out.addr, dram_stride=arb, row_bytes=arb,
                   n_rows=acc_rows, local_row=0, local_stride=1, wait=(0, sem + 2))
    device.run(cmds)
    return {"digest": digest(np.frombuffer(out.read(), np.uint8)), "commands": len(cmds)}


def _dma_edges(device: Device) -> dict:
    """Rows across 4 KiB boundaries, bursts longer than 256 beats, zero-length transfers,
    one-beat strided rows and accumulator rows, loads and stores (serialized)."""
    cfg = device.config
    srb, arb = cfg.spad_row_bytes, cfg.acc_row_bytes
    region = device.alloc(8 * 4096, align=4096)
    rng = np.random.default_rng(7)
    region.write(rng.integers(0, 256, 8 * 4096, dtype=np.uint8).tobytes())
    cmds = CommandList()
    sem = device.semaphore(0)

    def seq() -> dict:
        return {"wait": (0, sem + len(cmds)), "signal": 0}
    base = region.addr
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=base + 4096 - 5 * srb, dram_stride=0,
                  row_bytes=10 * srb, n_rows=1, local_row=3, local_stride=0, **seq())
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=base + 100 * srb, dram_stride=0,
                  row_bytes=600 * srb, n_rows=1, local_row=100, local_stride=0, **seq())
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=base, dram_stride=3 * srb, row_bytes=srb,
                  n_rows=40, local_row=800, local_stride=2, **seq())
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=base, dram_stride=srb, row_bytes=srb,
                  n_rows=0, local_row=0, local_stride=1, **seq())
    cmds.dma_load(mem=LocalMem.ACC, dram_addr=base + 2 * 4096 - 2 * arb, dram_stride=arb,
                  row_bytes=arb, n_rows=9, local_row=10, local_stride=1, **seq())
    cmds.dma_load(mem=LocalMem.ACC, dram_addr=base + 3 * 4096, dram_stride=0,
                  row_bytes=20 * arb, n_rows=1, local_row=30, local_stride=0, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=base + 3 * 4096 - 3 * srb, dram_stride=srb,
                   row_bytes=srb, n_rows=10, local_row=3, local_stride=1, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=base + 5 * 4096 - 7 * srb, dram_stride=0,
                   row_bytes=300 * srb, n_rows=1, local_row=100, local_stride=0, **seq())
    cmds.dma_store(mem=LocalMem.ACC, dram_addr=base + 6 * 4096 - arb, dram_stride=2 * arb,
                   row_bytes=arb, n_rows=6, local_row=10, local_stride=1, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=base, dram_stride=srb, row_bytes=0,
                   n_rows=3, local_row=0, local_stride=1, **seq())
    device.run(cmds)
    return {"digest": digest(np.frombuffer(region.read(), np.uint8))}


def _softmax_rows(device: Device) -> dict:
    """SOFTMAX alone: 21 rows (three reciprocal rows, the last partial) of 3 key blocks,
    causal, then a REQUANT with row scaling of the result."""
    cfg = device.config
    n = 21
    rng = np.random.default_rng(9)
    scores = rng.integers(-5000, 5000, (3 * n, cfg.acc_row_elems), dtype=np.int32)
    s_buf = device.upload(scores)
    out = device.alloc(3 * n * cfg.spad_row_bytes)
    cmds = CommandList()
    sem = device.semaphore(0)

    def seq() -> dict:
        return {"wait": (0, sem + len(cmds)), "signal": 0}
    cmds.dma_load(mem=LocalMem.ACC, dram_addr=s_buf.addr, dram_stride=cfg.acc_row_bytes,
                  row_bytes=cfg.acc_row_bytes, n_rows=3 * n, local_row=100, local_stride=1,
                  **seq())
    cmds.softmax(acc_row=100, spad_row=200, n_rows=n, n_blocks=3, stride=n, scale_row=10,
                 kv_len=3 * cfg.cols - 2, mult=4000, shift=14, causal=True, q_offset=3, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr, dram_stride=cfg.spad_row_bytes,
                   row_bytes=cfg.spad_row_bytes, n_rows=3 * n, local_row=200, local_stride=1,
                   **seq())
    device.run(cmds)
    return {"digest": digest(np.frombuffer(out.read(), np.uint8))}


def _blocked_rows(x: np.ndarray, cols: int, srb: int) -> np.ndarray:
    """``x`` ``(n, nb * cols)`` int8 as scratchpad rows, block by block (``stride = n``)."""
    n, width = x.shape
    out = np.zeros((width // cols * n, srb), np.int8)
    for b in range(width // cols):
        out[b * n:(b + 1) * n, :cols] = x[:, b * cols:(b + 1) * cols]
    return out


def _transformer_ops(device: Device) -> dict:
    """GELU of accumulator rows, ADD and LAYERNORM of two int8 tensors of 3 blocks x 10 rows
    (parameters loaded into the accumulator), the results stored; a DMA load into other
    scratchpad rows runs beside the vector commands (it yields the write port to them). The
    results are checked against :mod:`sw.golden`."""
    from sw.golden import add_int, gelu_int, layernorm_int
    cfg = device.config
    c, srb, arb = cfg.cols, cfg.spad_row_bytes, cfg.acc_row_bytes
    n, nb = 10, 3
    w = nb * c
    rng = np.random.default_rng(14)
    a = rng.integers(-128, 128, (n, w), dtype=np.int8)
    b = rng.integers(-128, 128, (n, w), dtype=np.int8)
    a[1] = 5                        # an all-equal row of the sum: variance 0
    b[1] = -3
    ma, mb = rng.integers(1 << 21, 1 << 22, (2, w))
    gamma = rng.integers(1 << 19, 1 << 21, w) * rng.choice([-1, 1], w)
    beta = rng.integers(-(1 << 12), 1 << 12, w)
    ln_par = np.zeros((4 * nb, cfg.acc_row_elems), np.int64)
    add_par = np.zeros((2 * nb, cfg.acc_row_elems), np.int64)
    for blk in range(nb):
        sl = slice(blk * c, (blk + 1) * c)
        mag = np.abs(gamma[sl])
        ln_par[4 * blk:4 * blk + 4, :c] = [ma[sl], mb[sl],
                                            np.where(gamma[sl] < 0, mag | (1 << 31), mag),
                                            beta[sl]]
        add_par[2 * blk:2 * blk + 2, :c] = [ma[sl], mb[sl]]
    acc_in = rng.integers(-(1 << 20), 1 << 20, (16, c))
    gelu_par = np.zeros((4, cfg.acc_row_elems), np.int64)
    gelu_par[:, :c] = [rng.integers(-1024, 1024, c), rng.integers(1 << 29, 1 << 30, c),
                       np.full(c, 40 | (33 << 8)), rng.integers(1 << 29, 1 << 30, c)]
    acc_rows = np.zeros((16 + 4 + 6 * nb, cfg.acc_row_elems), np.int64)
    acc_rows[:16, :c] = acc_in
    acc_rows[16:20] = gelu_par
    acc_rows[20:20 + 4 * nb] = ln_par
    acc_rows[20 + 4 * nb:] = add_par
    acc_buf = device.upload(acc_rows.astype(np.uint32).view(np.int32))
    spad_buf = device.upload(np.concatenate([_blocked_rows(a, c, srb), _blocked_rows(b, c, srb)]))
    extra = device.upload(rng.integers(-128, 128, (256, srb), dtype=np.int8))
    out = device.alloc(3 * nb * n * srb)
    cmds = CommandList()
    sem = device.semaphore(0)

    def seq() -> dict:
        return {"wait": (0, sem + len(cmds)), "signal": 0}
    cmds.dma_load(mem=LocalMem.ACC, dram_addr=acc_buf.addr, dram_stride=arb, row_bytes=arb,
                  n_rows=len(acc_rows), local_row=0, local_stride=1, **seq())
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=spad_buf.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=2 * nb * n, local_row=0, local_stride=1, **seq())
    cmds.gelu(acc_row=0, spad_row=200, n_rows=16, param_row=16, **seq())
    cmds.add(a_row=0, b_row=nb * n, out_row=100, n_rows=n, n_blocks=nb, stride=n,
             param_row=20 + 4 * nb, shift=16, **seq())
    cmds.layernorm(a_row=0, b_row=nb * n, out_row=140, n_rows=n, n_blocks=nb, stride=n,
                   param_row=20, shift=16, g_shift=20, **seq())
    # beside the ADD and the LAYERNORM: a load into rows they do not touch (ordered after the
    # GELU only)
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=extra.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=256, local_row=300, local_stride=1, wait=(0, sem + len(cmds) - 2),
                  signal=0)
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr, dram_stride=srb, row_bytes=srb,
                   n_rows=nb * n, local_row=100, local_stride=1, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr + nb * n * srb, dram_stride=srb,
                   row_bytes=srb, n_rows=nb * n, local_row=140, local_stride=1, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr + 2 * nb * n * srb, dram_stride=srb,
                   row_bytes=srb, n_rows=16, local_row=200, local_stride=1, **seq())
    device.run(cmds)
    got = np.frombuffer(out.read(), np.int8).reshape(3 * nb * n, srb)

    def unblock(rows: np.ndarray) -> np.ndarray:
        return np.concatenate([rows[blk * n:(blk + 1) * n, :c] for blk in range(nb)], axis=1)
    want_add = add_int(a, b, ma, mb, 16)
    want_ln = layernorm_int(a, b, ma, mb, 16, gamma, beta, 20)
    want_gelu = gelu_int(acc_in, gelu_par[0, :c], gelu_par[1, :c], 40, gelu_par[3, :c], 33)
    exact = (np.array_equal(unblock(got[:nb * n]), want_add)
             and np.array_equal(unblock(got[nb * n:2 * nb * n]), want_ln)
             and np.array_equal(got[2 * nb * n:2 * nb * n + 16, :c], want_gelu))
    return {"bit_exact": bool(exact), "digest": digest(got)}


def _reset_sweep(device: Device) -> dict:
    """A stream of loads, MATMULs, REQUANTs and stores is reset after 0, 3, 6 ... 117 cycles
    (``QUEUE_RESET`` lands at every phase of fetch, dispatch and the engines): commands in
    flight finish unsignalled, the rest are dropped; what reached DRAM, and the timing, must be
    the hardware's."""
    cfg = device.config
    srb = cfg.spad_row_bytes
    s = device.create_stream()
    sem = device.alloc_semaphore()
    rng = np.random.default_rng(3)
    src = device.upload(rng.integers(-128, 128, 64 * srb, dtype=np.int8))
    params = np.zeros((3, cfg.acc_row_elems), dtype=np.int32)
    params[1], params[2] = 1 << 30, 38
    p_buf = device.upload(params)
    out = device.alloc(40 * 16 * srb)
    out.write(bytes(out.nbytes))
    for i, k in enumerate(range(0, 120, 3)):
        base = sem.value()
        cmds = CommandList()

        def seq(cmds=cmds, base=base) -> dict:
            return {"wait": (sem.id, base + len(cmds)), "signal": sem.id}
        cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src.addr, dram_stride=srb, row_bytes=srb,
                      n_rows=32, local_row=0, local_stride=1, **seq())
        cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr, dram_stride=cfg.acc_row_bytes,
                      row_bytes=cfg.acc_row_bytes, n_rows=3, local_row=0, local_stride=1,
                      **seq())
        cmds.matmul(a_row=8, w_row=0, acc_row=8, m=16, **seq())
        cmds.requant(acc_row=8, spad_row=40, n_rows=16, param_row=0, **seq())
        cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr + i * 16 * srb, dram_stride=srb,
                       row_bytes=srb, n_rows=16, local_row=40, local_stride=1, **seq())
        s.launch(cmds, ordered=False)
        device.backend.run_cycles(k)
        s.reset()
        device.backend.run_cycles(200)          # in-flight commands finish
    return {"digest": digest(np.frombuffer(out.read(), np.uint8)), "sem": sem.value()}


def _reset_sweep_full(device: Device) -> dict:
    """Eight independent MATMULs (no waits: the matrix engine's FIFO fills and the stage waits
    for room) reset after 30, 31 ... 109 cycles: the reset lands on every cycle of the first
    takes and refills."""
    s = device.create_stream()
    idle = []
    for k in range(30, 110):
        cmds = CommandList()
        for i in range(8):
            cmds.matmul(a_row=8 * i, w_row=200, acc_row=8 * i, m=8)
        cmds.signal(0)
        s.launch(cmds, ordered=False)
        device.backend.run_cycles(k)
        s.reset()
        device.backend.run_cycles(120)
        idle.append(s.query())              # Q_STATUS.busy low again: nothing left behind
    s.synchronize()                          # a fence: every engine command retired
    return {"sem": device.semaphore(0), "idle": all(idle),
            "digest": digest(np.array(idle))}


# -- errors -------------------------------------------------------------------------------------

def _errors(device: Device) -> dict:
    """An unknown opcode, a DMA outside DRAM and a MATMUL outside the scratchpad, each raised
    by the runtime; after each the device keeps working (a small GEMM)."""
    from sw.kernels.linear import linear_with_stats
    cfg = device.config
    bad = CommandList()
    bad.nop()
    raw = bytearray(32)
    raw[0] = 0x7F
    bad.append_raw(bytes(raw))
    dma = CommandList()
    dma.dma_load(mem=LocalMem.SPAD, dram_addr=cfg.dram_bytes - 8 * cfg.spad_row_bytes,
                 dram_stride=4 * cfg.spad_row_bytes, row_bytes=cfg.spad_row_bytes, n_rows=7,
                 local_row=0, local_stride=1)
    mm = CommandList()
    mm.matmul(a_row=cfg.spad_rows - 2, w_row=0, acc_row=0, m=5)
    out = []
    rng = np.random.default_rng(4)
    for cmds in (bad, dma, mm):
        try:
            device.run(cmds, timeout_cycles=100_000)
            out.append(None)
        except DeviceError as e:
            code = e.code.name if isinstance(e.code, ErrorCode) else int(e.code)
            out.append([code, e.command_index, e.address])
        a, w, bias, mult, shift = linear_operands(rng, 5, 20, 11)
        res, _ = linear_with_stats(device, a, w, bias, mult, shift)
        out.append(digest(res))
    return {"errors": out, "digest": digest(np.array([str(x) for x in out]))}


# -- main job -------------------------------------------------------------------------------------

def _main_job(device: Device, seq_len: int = 32) -> dict:
    from sw.jobs.minilm_block import run_attention_job
    r = run_attention_job(device.backend, config=device.config.to_dict(), seq_len=seq_len)
    return {"stage_cycles": {s["name"]: s["cycles"] for s in r["stages"]},
            "bit_exact": r["bit_exact"], "sqnr_db": r["sqnr_db"],
            "digest": digest(np.array([r["sqnr_db"], r["cosine"]]))}



def workloads() -> list[Workload]:
    """The ``gemm``, ``attention``, ``streams``, ``sync``, ``commands``, ``errors`` and ``main``
    workloads on the default configuration."""
    ws = []
    for m, k, n in [(1, 8, 8), (1, 64, 64), (1, 384, 384), (8, 8, 8), (5, 20, 11),
                    (16, 64, 24), (17, 33, 9), (32, 64, 64), (64, 64, 64), (100, 72, 40),
                    (13, 130, 70), (128, 128, 128), (256, 256, 256), (32, 384, 384)]:
        ws.append(Workload(f"gemm_{m}x{k}x{n}", "gemm", gemm_workload(m, k, n, relu=m % 2 == 1)))
    for m, k, n in [(16, 64, 24), (40, 48, 56)]:
        ws.append(Workload(f"gemm_serial_{m}x{k}x{n}", "gemm",
                           gemm_workload(m, k, n, double_buffer=False)))
    for seq in (8, 32, 128):
        for mask in ("none", "causal", "padding"):
            ws.append(Workload(f"attention_L{seq}_{mask}", "attention",
                               attention_workload(seq, mask)))
    return ws + [Workload("two_streams_events", "streams", _two_streams),
                 Workload("fan_in_3_streams", "streams", _fan_in),
                 Workload("barriers_8_rounds", "sync", _barriers),
                 Workload("processor_commands", "sync", _processor_commands),
                 Workload("ring_wrap_16", "sync", _ring_wrap),
                 Workload("random_stream", "commands", _random_stream),
                 Workload("matmul_back_to_back", "commands", _matmul_back_to_back),
                 Workload("dma_edges", "commands", _dma_edges),
                 Workload("softmax_rows", "commands", _softmax_rows),
                 Workload("transformer_ops", "commands", _transformer_ops),
                 Workload("errors_recovery", "errors", _errors),
                 Workload("reset_sweep", "errors", _reset_sweep),
                 Workload("reset_sweep_full_fifos", "errors", _reset_sweep_full),
                 Workload("main_minilm_block_L32", "main", _main_job)]


#: Two more configurations: a 4x4 array (scratchpad rows of 4 bytes, narrower than a bus beat:
#: several chunks per beat), and an 8x8 with a 128-bit bus (scratchpad rows half a beat,
#: accumulator rows two beats), command FIFOs of depth 1 and 2 outstanding reads (the default
#: is 4).
OTHER_CONFIGS = {
    "4x4": {"rows": 4, "cols": 4},
    "b128": {"axi_data_bits": 128, "cmd_fifo_depth": 1, "dma_outstanding": 2},
}


def other_config_workloads() -> list[Workload]:
    """A few of :func:`workloads` on each of :data:`OTHER_CONFIGS`."""
    ws = []
    for tag, cfg in OTHER_CONFIGS.items():
        for m, k, n in [(1, 24, 20), (20, 36, 13), (64, 64, 64)]:
            ws.append(Workload(f"{tag}_gemm_{m}x{k}x{n}", "gemm",
                               gemm_workload(m, k, n, relu=m % 2 == 1), cfg))
        ws += [Workload(f"{tag}_attention_L16_causal", "attention",
                        attention_workload(16, "causal", d=16), cfg),
               Workload(f"{tag}_two_streams_events", "streams", _two_streams, cfg),
               Workload(f"{tag}_random_stream", "commands", _random_stream, cfg),
               Workload(f"{tag}_matmul_back_to_back", "commands", _matmul_back_to_back, cfg),
               Workload(f"{tag}_dma_edges", "commands", _dma_edges, cfg),
               Workload(f"{tag}_transformer_ops", "commands", _transformer_ops, cfg)]
    return ws
