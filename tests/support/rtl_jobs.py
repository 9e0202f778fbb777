"""Jobs that run on any backend: under cocotb on the RTL (through ``cosim.tb.harness``) and
in-process on the functional model, so the two can be compared on the same command streams.

Each job takes a :class:`sw.backend.Backend` and JSON-serialisable keyword arguments and
returns a JSON-serialisable dict.
"""

import hashlib

import numpy as np

from hw.isa import COMMAND_BYTES, ErrorCode, LocalMem
from sw.golden import linear_int
from sw.kernels.linear import linear_with_stats
from sw.runtime import CommandList, Device, DeviceError


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def random_linear_operands(rng: np.random.Generator, m: int, k: int, n: int):
    """int8 A (m, k), W (k, n), int32 bias (n,), per-channel multiplier/shift giving outputs
    that use most of the int8 range (so saturation and rounding are both exercised)."""
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-(1 << 16), 1 << 16, n, dtype=np.int32)
    multiplier = rng.integers(1 << 30, 1 << 31, n, dtype=np.int64)
    # |acc| ~ 128*128*sqrt(k)/2: scale that to ~100 (shift = log2(acc_scale) + 31)
    shift = np.full(n, 31 + int(np.log2(64 * 64 * np.sqrt(k))) - 5, dtype=np.int64)
    shift += rng.integers(0, 2, n)
    return a, w, bias, multiplier, shift


def linear_shapes(backend, *, shapes: list, seed: int = 0, relu_every: int = 3) -> dict:
    """Run a quantized linear layer for each ``(M, K, N)`` in ``shapes``; compare with the
    golden integer model. Returns per shape: bit-exactness, cycles, utilization, output digest.
    """
    device = Device(backend)
    rng = np.random.default_rng(seed)
    results = []
    for i, (m, k, n) in enumerate(shapes):
        a, w, bias, mult, shift = random_linear_operands(rng, m, k, n)
        relu = relu_every > 0 and i % relu_every == relu_every - 1
        out, stats = linear_with_stats(device, a, w, bias, mult, shift, relu=relu)
        golden = linear_int(a, w, bias, mult, shift, relu=relu)
        results.append({
            "shape": [m, k, n], "relu": relu, "bit_exact": bool(np.array_equal(out, golden)),
            "cycles": stats.cycles, "utilization": stats.utilization,
            "commands": stats.n_commands, "k_passes": stats.plan.kb,
            "m_tiles": -(-m // stats.plan.m_tile), "digest": _digest(out),
            "saturated": int(np.sum(np.abs(golden.astype(np.int32)) == 127)
                             + np.sum(golden == -128)),
        })
    return {"shapes": results, "free_bytes_after": device.memory_stats().free_bytes}


def linear_plans(backend, *, cases: list, seed: int = 0) -> dict:
    """Run a quantized linear layer with a hand-picked double-buffered tiling for each
    ``[M, K, N, double_buffered_plan keyword arguments]`` in ``cases`` (see
    ``tests.sw.test_linear.FORCED``); compare with the golden integer model. Returns per
    case: bit-exactness, cycles, the planner's estimate and an output digest."""
    from sw.kernels.linear import double_buffered_plan
    device = Device(backend)
    rng = np.random.default_rng(seed)
    results = []
    for i, (m, k, n, kw) in enumerate(cases):
        a, w, bias, mult, shift = random_linear_operands(rng, m, k, n)
        plan = double_buffered_plan(device.config, m, k, n, **kw)
        relu = i % 2 == 1
        out, stats = linear_with_stats(device, a, w, bias, mult, shift, relu=relu, plan=plan)
        results.append({"shape": [m, k, n], "cycles": stats.cycles, "digest": _digest(out),
                         "bit_exact": bool(np.array_equal(
                             out, linear_int(a, w, bias, mult, shift, relu=relu)))})
    return {"cases": results, "free_bytes_after": device.memory_stats().free_bytes}


def dma_edge_cases(backend) -> dict:
    """DMA transfers whose rows cross a 4 KiB boundary, and zero-length transfers.

    A pattern is loaded into the scratchpad from a row that straddles a 4 KiB page, then
    stored to another straddling location; zero-length loads/stores must complete and move
    nothing.
    """
    device = Device(backend)
    cfg = device.config
    srb = cfg.spad_row_bytes
    region = device.alloc(4 * 4096, align=4096)
    src = region.addr + 4096 - 5 * srb          # 10 rows: 5 before, 5 after the boundary
    dst = region.addr + 3 * 4096 - 3 * srb
    rng = np.random.default_rng(7)
    pattern = rng.integers(0, 256, 10 * srb, dtype=np.uint8).tobytes()
    backend.mem_write(src, pattern)
    before = backend.mem_read(region.addr, 4 * 4096)

    cmds = CommandList()
    sem = device.semaphore(0)
    seq = lambda: {"wait": (0, sem + len(cmds)), "signal": 0}  # noqa: E731
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src, dram_stride=0, row_bytes=10 * srb,
                  n_rows=1, local_row=3, local_stride=0, **seq())
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=region.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=0, local_row=0, local_stride=1, **seq())     # zero rows
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=region.addr, dram_stride=srb, row_bytes=0,
                  n_rows=4, local_row=0, local_stride=1, **seq())     # zero bytes per row
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=dst, dram_stride=srb, row_bytes=srb,
                   n_rows=10, local_row=3, local_stride=1, **seq())
    cmds.dma_store(mem=LocalMem.SPAD, dram_addr=region.addr, dram_stride=srb, row_bytes=srb,
                   n_rows=0, local_row=3, local_stride=1, **seq())    # zero rows
    cycles = device.run(cmds)
    after = backend.mem_read(region.addr, 4 * 4096)
    expected = bytearray(before)
    expected[dst - region.addr:dst - region.addr + 10 * srb] = pattern
    return {
        "copied": backend.mem_read(dst, 10 * srb) == pattern,
        "nothing_else_changed": after == bytes(expected),
        "crosses_4k": (src // 4096) != ((src + 10 * srb - 1) // 4096)
                      and (dst // 4096) != ((dst + 10 * srb - 1) // 4096),
        "cycles": cycles,
        "semaphore": device.semaphore(0) - sem,
    }


def dma_odd_bytes(backend) -> dict:
    """DMA transfers of any byte address, stride and length, both memories, held to the byte.

    For each case a 2-D pattern is loaded from odd addresses (rows crossing a 4 KiB boundary
    among them), stored back row for row to odd addresses elsewhere (the bytes of the rows
    only), and stored again as whole local rows (which shows the zero fill of a partial last
    local row). Returns whether every destination holds exactly what it must and nothing else
    in the region changed, and a digest of the region for the RTL/model comparison.
    """
    device = Device(backend)
    cfg = device.config
    size = 12 * 4096            # sources in pages 0-2 and 3-5, destinations in 6-7 and 8-9
    region = device.alloc(size, align=4096)
    base = region.addr
    rng = np.random.default_rng(11)
    backend.mem_write(base, rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    before = bytearray(backend.mem_read(base, size))
    expected = bytearray(before)
    cmds = CommandList()
    sem = device.semaphore(0)
    seq = lambda: {"wait": (0, sem + len(cmds)), "signal": 0}  # noqa: E731
    for mem, L in ((LocalMem.SPAD, cfg.spad_row_bytes), (LocalMem.ACC, cfg.acc_row_bytes)):
        cases = [(1, 13, 11, 3), (4096 - 5, 0, 37, 1), (7, 2 * L + 9, 2 * L + 3, 2),
                 (3, 5, 1, 4), (4096 - 1, 4096 + 3, 2, 2)]
        dst = 0x6000 if mem == LocalMem.SPAD else 0x8000
        src_page = 0 if mem == LocalMem.SPAD else 0x3000
        for i, (off, stride, rb, n) in enumerate(cases):
            lrows = -(-rb // L)
            src = base + src_page + 0x100 * i + off if off < 4096 - 64 else base + src_page + off
            exact = base + dst + 0x180 * i + 3
            padded = exact + 0xC0 + 1
            pstride = lrows * L + 3
            common = {"mem": mem, "n_rows": n, "local_row": 4 * i, "local_stride": lrows}
            cmds.dma_load(dram_addr=src, dram_stride=stride, row_bytes=rb, **common, **seq())
            cmds.dma_store(dram_addr=exact, dram_stride=stride, row_bytes=rb, **common, **seq())
            cmds.dma_store(dram_addr=padded, dram_stride=pstride, row_bytes=lrows * L, **common,
                           **seq())
            for r in range(n):
                row = before[src - base + r * stride:][:rb]
                o = exact - base + r * stride
                expected[o:o + rb] = row
                o = padded - base + r * pstride
                expected[o:o + lrows * L] = row + bytes(lrows * L - rb)
    cycles = device.run(cmds)
    after = backend.mem_read(base, size)
    return {"exact": after == bytes(expected), "commands": len(cmds),
            "semaphore": device.semaphore(0) - sem, "digest": hashlib.sha256(after).hexdigest(),
            "cycles": cycles}


def engine_timing(backend, *, cases: list) -> dict:
    """Each ``[method, fields]`` of ``cases`` (a :class:`~sw.runtime.CommandList` method and its
    keyword arguments; a DMA's ``dram_addr`` is an offset into a 4 KiB-aligned region) run
    alone on an otherwise idle NPU; returns per case the difference of every ``busy.*`` and
    ``retired.*`` counter over the command.

    The command waits on a semaphore that the next command of the queue, a SIGNAL, releases:
    the command processor fetches and executes the SIGNAL before the command can start and
    has nothing left to fetch afterwards, so no ring fetch shares the DRAM port with a DMA
    transfer, and the differences are the command's own cycles (:mod:`hw.isa.timing`).
    """
    device = Device(backend)
    region = device.alloc(1 << 16, align=4096)
    gate, done = device.alloc_semaphore(), device.alloc_semaphore()
    results = []
    for method, fields in cases:
        fields = dict(fields)
        if "dram_addr" in fields:
            fields["dram_addr"] += region.addr
        target = (device.semaphore(gate.id) + 1) & 0xFFFF_FFFF
        signalled = device.semaphore(done.id)
        cmds = CommandList()
        getattr(cmds, method)(**fields, wait=(gate.id, target), signal=done.id)
        cmds.signal(gate.id)
        before = device.counters()
        device.launch(cmds)
        for _ in range(2000):
            if device.semaphore(done.id) != signalled:
                break
            backend.wait_irq(10)
        d = device.counters() - before
        results.append({k: d[k] for k in d if k.startswith(("busy.", "retired."))})
    device.synchronize(timeout_cycles=100_000)
    gate.free()
    done.free()
    region.free()
    return {"cases": results}


def unknown_opcode(backend) -> dict:
    """Submit a good command, an unknown opcode and a good command; the runtime must raise a
    DeviceError naming the bad command; afterwards the device must still work."""
    device = Device(backend)
    cmds = CommandList()
    cmds.nop()
    bad = bytearray(COMMAND_BYTES)
    bad[0] = 0x7F
    cmds.append_raw(bytes(bad))
    cmds.nop()
    outcome: dict = {"raised": False}
    try:
        device.run(cmds, timeout_cycles=100_000)
    except DeviceError as e:
        outcome.update(raised=True, message=str(e), code=e.code.name
                       if isinstance(e.code, ErrorCode) else int(e.code),
                       index=e.command_index, opcode=e.opcode)
    # the device keeps working: a small linear layer after the error is bit-exact
    rng = np.random.default_rng(3)
    a, w, bias, mult, shift = random_linear_operands(rng, 5, 20, 11)
    out, _ = linear_with_stats(device, a, w, bias, mult, shift)
    outcome["works_after"] = bool(np.array_equal(out, linear_int(a, w, bias, mult, shift)))
    return outcome


def raw_stream(backend, *, seed: int = 0, n_commands: int = 40) -> dict:
    """A random, serialized stream of DMA, MATMUL and REQUANT commands over random data in
    the local memories; returns a digest of the DRAM region the stream writes, so the RTL and
    the functional model can be compared on exactly the same commands."""
    device = Device(backend)
    cfg = device.config
    rng = np.random.default_rng(seed)
    srb, arb = cfg.spad_row_bytes, cfg.acc_row_bytes
    rows = 64
    src = device.upload(rng.integers(0, 256, rows * srb, dtype=np.uint8))
    # requantization parameters: bias, multiplier, shift rows
    params = np.zeros((3, cfg.acc_row_elems), dtype=np.int32)
    params[0] = rng.integers(-1000, 1000, cfg.acc_row_elems)
    params[1] = rng.integers(1 << 30, 1 << 31, cfg.acc_row_elems)
    params[2] = rng.integers(12, 20, cfg.acc_row_elems)
    p_buf = device.upload(params)
    out = device.alloc(rows * max(srb, arb))
    backend.mem_write(out.addr, bytes(out.nbytes))
    cmds = CommandList()
    sem = device.semaphore(0)
    seq = lambda: {"wait": (0, sem + len(cmds)), "signal": 0}  # noqa: E731
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=src.addr, dram_stride=srb, row_bytes=srb,
                  n_rows=rows, local_row=0, local_stride=1, **seq())
    cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr, dram_stride=arb, row_bytes=arb,
                  n_rows=3, local_row=0, local_stride=1, **seq())
    for _ in range(n_commands):
        kind = rng.integers(0, 4)
        if kind == 0:
            m = int(rng.integers(1, 9))
            cmds.matmul(a_row=int(rng.integers(0, rows - m)), w_row=int(rng.integers(0, 16)),
                        acc_row=int(rng.integers(3, 20)), m=m, accumulate=bool(rng.integers(2)),
                        **seq())
        elif kind == 1:
            n = int(rng.integers(1, 8))
            cmds.requant(acc_row=int(rng.integers(3, 20)), spad_row=int(rng.integers(32, 56)),
                         n_rows=n, param_row=0, relu=bool(rng.integers(2)), **seq())
        elif kind == 2:
            n = int(rng.integers(1, 8))
            cmds.dma_store(mem=LocalMem.SPAD, dram_addr=out.addr + int(rng.integers(0, 32)) * srb,
                           dram_stride=srb, row_bytes=srb, n_rows=n,
                           local_row=int(rng.integers(0, 56)), local_stride=1, **seq())
        else:
            n = int(rng.integers(1, 4))
            cmds.dma_store(mem=LocalMem.ACC, dram_addr=out.addr + int(rng.integers(0, 8)) * arb,
                           dram_stride=arb, row_bytes=arb, n_rows=n,
                           local_row=int(rng.integers(3, 20)), local_stride=1, **seq())
    device.run(cmds)
    data = backend.mem_read(out.addr, out.nbytes)
    return {"digest": hashlib.sha256(data).hexdigest(), "commands": len(cmds),
            "nonzero_bytes": sum(1 for b in data if b)}


def random_attention_operands(rng: np.random.Generator, seq: int, heads: int, d: int):
    """int8 Q, K, V ``(seq, heads*d)`` and per-head/per-channel scales giving softmax rows
    with a few dominant keys and context outputs that use the int8 range."""
    q, k, v = (rng.integers(-128, 128, (seq, heads * d), dtype=np.int8) for _ in range(3))
    score_mult = rng.integers(1 << 15, 1 << 16, heads)
    # |score| ~ 128*128*sqrt(d)/3: a few tens of base-2 exponent units (F = 4) per std dev
    score_shift = np.full(heads, 16 + int(np.log2(128 * 128 * np.sqrt(d) / 3 / 16 / 16)))
    out_mult = rng.integers(1 << 30, 1 << 31, heads * d)
    out_shift = np.full(heads * d, 31 + 16 - 1)
    return q, k, v, score_mult, score_shift, out_mult, out_shift


def attention_cases(backend, *, cases: list, seed: int = 0) -> dict:
    """Run multi-head attention for each ``{"seq", "heads", "d", "mask"}`` (mask ``"none"``,
    ``"causal"`` or ``"padding"``: the last third of the keys, or all keys when ``seq`` is 1...)
    and compare with :func:`sw.golden.attention_head_int`; per case bit-exactness, the output
    digest, cycles per stage."""
    from sw.golden import attention_head_int
    from sw.kernels.attention import attention_with_stats

    device = Device(backend)
    rng = np.random.default_rng(seed)
    results = []
    for case in cases:
        seq, heads, d, mask = case["seq"], case["heads"], case["d"], case["mask"]
        q, k, v, sm, ss, om, osh = random_attention_operands(rng, seq, heads, d)
        kv = case.get("kv_len", seq - seq // 3 if mask == "padding" else None)
        causal = mask == "causal"
        out, stats = attention_with_stats(device, q, k, v, heads=heads, score_mult=sm,
                                          score_shift=ss, out_mult=om, out_shift=osh,
                                          kv_len=kv, causal=causal)
        sl = [slice(h * d, (h + 1) * d) for h in range(heads)]
        golden = np.concatenate([
            attention_head_int(q[:, s], k[:, s], v[:, s], score_mult=int(sm[h]),
                               score_shift=int(ss[h]), out_mult=om[s], out_shift=osh[s],
                               kv_len=kv, causal=causal) for h, s in enumerate(sl)], axis=1)
        results.append({"case": case, "bit_exact": bool(np.array_equal(out, golden)),
                        "digest": _digest(out), "nonzero": int(np.count_nonzero(golden)),
                        "all_zero": not np.any(out),
                        "cycles": {s: v["cycles"] for s, v in stats.stages.items()}})
    return {"cases": results}


def eltwise_row_tiles(backend, *, opcode: str) -> dict:
    """LAYERNORM or ADD (:func:`sw.kernels.eltwise.eltwise_launch`) over 45 rows of 384
    channels in a small scratchpad region (six double-buffered row tiles of 8 rows, the last
    one short), negative gammas, an all-equal row; compared with :mod:`sw.golden`."""
    from hw.config import NPUConfig
    from hw.isa import Opcode
    from sw.golden import add_int, layernorm_int
    from sw.kernels.eltwise import eltwise_launch, pack_add_params, pack_layernorm_params
    from sw.kernels.linear import pack_activations

    dev = Device(backend)
    cfg: NPUConfig = dev.config
    rng = np.random.default_rng(9)
    m, n = 45, 384
    a = rng.integers(-128, 128, (m, n), dtype=np.int8)
    b = rng.integers(-128, 128, (m, n), dtype=np.int8)
    a[3], b[3] = 7, -2
    ma, mb = rng.integers(1 << 20, 1 << 22, (2, n))
    gamma = rng.integers(1 << 19, 1 << 21, n) * rng.choice([-1, 1], n)
    beta = rng.integers(-(1 << 12), 1 << 12, n)
    s = dev.default_stream
    sems = {x: dev.alloc_semaphore() for x in "LRS"}
    bufs = [s.upload(pack_activations(cfg, x)) for x in (a, b)]
    out = s.alloc(len(pack_activations(cfg, a).tobytes()))
    op = Opcode[opcode]
    if op == Opcode.LAYERNORM:
        p = s.upload(pack_layernorm_params(cfg, ma, mb, gamma, beta))
        want = layernorm_int(a, b, ma, mb, 16, gamma, beta, 20)
    else:
        p = s.upload(pack_add_params(cfg, ma, mb))
        want = add_int(a, b, ma, mb, 16)
    nb = n // cfg.cols
    region = (100, 6 * nb * 8)               # 8 rows per tile: 6 tiles
    n_cmds = eltwise_launch(s, op, *bufs, p, out, m=m, n=n, shift=16, g_shift=20,
                            sems=sems, spad_region=region, acc_row=5)
    cycles = s.synchronize()
    got = dev.download(out, np.int8, (nb, m, cfg.spad_row_bytes))[:, :, :cfg.cols]
    got = got.transpose(1, 0, 2).reshape(m, n)
    return {"bit_exact": bool(np.array_equal(got, want)), "commands": n_cmds,
            "cycles": cycles, "digest": _digest(got)}
