"""Race check of a command stream (a helper of the kernel tests).

The functional model runs commands one at a time in stream order, so a missing semaphore wait
never shows there; on the RTL the engines run concurrently and it corrupts data only for some
timings. :func:`assert_ordered` finds such races statically."""

from hw.isa import OPCODE_ENGINE, LocalMem, Opcode, decode


def assert_ordered(config, commands) -> None:
    """Check a single-queue command stream for races, as the RTL would run it: every engine
    runs its commands in order, engines run concurrently, and the only other order is a wait
    on a semaphore signalled by earlier commands. Two commands on different engines that touch
    the same scratchpad or accumulator row, one of them writing, must be ordered (the earlier
    one retired before the later one starts) through a chain of such waits; every wait must
    be satisfiable by earlier commands (the in-order functional model would hang otherwise).
    Semaphores are taken to start at 0 (wait values are signal counts)."""
    rows_of = {LocalMem.SPAD: config.spad_row_bytes, LocalMem.ACC: config.acc_row_bytes}
    engine_pos: dict[str, int] = {}
    last_on: dict[str, int] = {}          # engine -> index of its latest command
    clocks: list[dict[str, int]] = []     # vector clock: engine -> latest position ordered before
    where: list[tuple[str, int]] = []
    signals: dict[int, list[int]] = {}    # semaphore -> indices of its signalling commands
    writer: dict[tuple, int] = {}
    readers: dict[tuple, list[int]] = {}

    def before(x: int, y: int) -> bool:
        e, pos = where[x]
        return clocks[y].get(e, -1) >= pos

    for i, cmd in enumerate(commands):
        v = decode(cmd.raw)
        op = v.header.opcode
        eng = OPCODE_ENGINE[op]
        clock = dict(clocks[last_on[eng]]) if eng in last_on else {}
        pos = engine_pos.get(eng, 0)
        engine_pos[eng] = pos + 1
        clock[eng] = pos
        if v.header.flags.wait:
            sigs = signals.get(v.header.wait_sem, [])
            need = v.header.wait_value
            assert need <= len(sigs), f"command {i} waits for a later command"
            if need:
                for e, p in clocks[sigs[need - 1]].items():
                    clock[e] = max(clock.get(e, -1), p)
        clocks.append(clock)
        where.append((eng, pos))
        last_on[eng] = i
        if v.header.flags.signal:
            signals.setdefault(v.header.signal_sem, []).append(i)
        reads: list[tuple] = []
        writes: list[tuple] = []
        if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
            d = v.body.dma
            per = d.row_bytes // rows_of[d.mem]
            local = [(d.mem, d.local_row + r * d.local_stride + t)
                     for r in range(d.n_rows) for t in range(per)]
            (writes if op == Opcode.DMA_LOAD else reads).extend(local)
        elif op == Opcode.MATMUL:
            b = v.body.matmul
            blocks = b.k_len + 1
            reads += [(LocalMem.SPAD, b.a_row + r) for r in range(blocks * b.m)]
            reads += [(LocalMem.SPAD, b.w_row + r) for r in range(blocks * config.rows)]
            acc = [(LocalMem.ACC, b.acc_row + r) for r in range(b.m)]
            writes += acc
            if v.header.flags.accumulate:
                reads += acc
        elif op == Opcode.REQUANT:
            b = v.body.requant
            reads += [(LocalMem.ACC, b.acc_row + r) for r in range(b.n_rows)]
            reads += [(LocalMem.ACC, b.param_row + r) for r in range(3)]
            writes += [(LocalMem.SPAD, b.spad_row + r) for r in range(b.n_rows)]
        else:
            raise AssertionError(f"unexpected opcode {op}")
        for row in reads:
            w = writer.get(row)
            assert w is None or before(w, i), f"command {i} reads {row} written by {w} (race)"
        for row in writes:
            w = writer.get(row)
            assert w is None or w == i or before(w, i), \
                f"command {i} writes {row} written by {w} (race)"
            for r in readers.get(row, ()):
                assert r == i or before(r, i), f"command {i} writes {row} read by {r} (race)"
        for row in reads:
            readers.setdefault(row, []).append(i)
        for row in writes:
            writer[row] = i
            readers[row] = []
