"""Profiled runs (:class:`sw.runtime.profile.Profiler`) on any timed backend -- the RTL under
cocotb (:func:`cosim.tb.harness.run_job`) and :class:`sw.perf.PerfBackend` in-process -- and
the checks of a profile against the hardware counters and the streams' records.

The jobs return JSON: ``{"profile": Profile.to_dict(), "records": {queue: [hex, ...]}, ...}``,
``records`` holding every command each stream submitted (the runtime's view of what ran).
"""

from __future__ import annotations

import numpy as np

from hw.config import NPUConfig
from hw.isa import (
    ENGINE_NAMES,
    OPCODE_ENGINE,
    ErrorCode,
    LocalMem,
    MatmulTimeline,
    Opcode,
    command_busy_cycles,
    command_retire_cycles,
    decode,
    engine_in_flight,
    retire_window_cycles,
)
from sw.golden import linear_int
from sw.kernels.linear import linear_with_stats
from sw.runtime import CommandList, Device, DeviceError
from sw.runtime.profile import Profile
from tests.support.rtl_jobs import random_linear_operands


def _records(device: Device, extra: dict[int, list[bytes]] | None = None) -> dict[str, list]:
    out = {q: list(s._record) for q, s in device.streams.items()}
    for q, recs in (extra or {}).items():
        out[q] = recs + out[q]
    return {str(q): [r.hex() for r in recs] for q, recs in out.items()}


def layer_of_two_gemms(backend, *, config: dict, m: int, k: int, n: int, skip_cycles: int = 0,
                       failing_stream: bool = False) -> dict:
    """A ``"layer"`` region around two linear kernels (regions ``"gemm0"``, ``"gemm1"``),
    the second consuming the first's output, on a profiling device of configuration
    ``config`` (:meth:`NPUConfig.to_dict`: the CSRs do not report ``trace_depth``).

    ``skip_cycles``: let that many cycles pass first (``backend.run_cycles``; on the
    performance model, to cross the 2**32 wrap of the trace's cycles). ``failing_stream``:
    meanwhile a second stream runs a DMA_LOAD, then a DMA_STORE outside DRAM and one more
    load; the store fails, the runtime resets that queue (the profiler must keep what ran)."""
    device = Device(backend, NPUConfig(**config), profile=True)
    cfg = device.config
    if skip_cycles:
        backend.run_cycles(skip_cycles)
    rng = np.random.default_rng(7)
    a, w0, b0, m0, s0 = random_linear_operands(rng, m, k, n)
    _, w1, b1, m1, s1 = random_linear_operands(rng, m, n, n)
    failed, side = None, {}
    with device.region("layer"):
        if failing_stream:
            failed, side = _failing_side_stream(device)
        with device.region("gemm0"):
            y0, _ = linear_with_stats(device, a, w0, b0, m0, s0)
        with device.region("gemm1"):
            y1, _ = linear_with_stats(device, y0, w1, b1, m1, s1)
    exact = (np.array_equal(y0, linear_int(a, w0, b0, m0, s0))
             and np.array_equal(y1, linear_int(y0, w1, b1, m1, s1)))
    return {"profile": device.profiler.finish().to_dict(), "records": _records(device, side),
            "bit_exact": bool(exact), "failed": failed, "rows": cfg.rows}


def _failing_side_stream(device: Device) -> tuple[dict, dict[int, list[bytes]]]:
    """Launch load, bad store, load on a new stream and synchronize it; returns the error
    (queue, index, code) and the stream's record as it was before the reset cleared it."""
    cfg = device.config
    s = device.create_stream()
    buf = s.alloc(cfg.spad_row_bytes * 4)
    c = CommandList()
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=cfg.spad_row_bytes,
               row_bytes=cfg.spad_row_bytes, n_rows=4, local_row=cfg.spad_rows - 4, local_stride=1)
    c.dma_store(mem=LocalMem.SPAD, dram_addr=cfg.dram_bytes, dram_stride=cfg.spad_row_bytes,
                row_bytes=cfg.spad_row_bytes, n_rows=1, local_row=cfg.spad_rows - 4, local_stride=1)
    c.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr, dram_stride=cfg.spad_row_bytes,
               row_bytes=cfg.spad_row_bytes, n_rows=4, local_row=cfg.spad_rows - 4, local_stride=1)
    s.launch(c)
    record = list(s._record)
    try:
        s.synchronize()
    except DeviceError as e:
        return {"queue": e.queue, "index": e.command_index,
                "code": e.code.value}, {s.queue: record}
    raise AssertionError("the store outside DRAM did not fail")


def decoded_records(records: dict[str, list]) -> dict[int, list[bytes]]:
    return {int(q): [bytes.fromhex(h) for h in recs] for q, recs in records.items()}


def _engine(raw: bytes) -> str | None:
    engine = OPCODE_ENGINE.get(decode(raw).header.opcode)
    return engine if engine in ENGINE_NAMES else None


def check_profile(profile: Profile, records: dict[int, list[bytes]], *,
                  ran: dict[int, int] | None = None,
                  errors: dict[tuple[int, int], ErrorCode] | None = None) -> None:
    """Assert that ``profile`` is the hardware's complete view of the run:

    * every engine command of ``records`` (queue -> the commands it submitted; only the
      first ``ran[q]`` of queue ``q`` if given, the others never ran; ``errors``: the
      commands that retired with an error, by (queue, index)) appears exactly once,
      with its queue, index and bytes, and nothing else does;
    * per engine the slices' count equals ``retired.<engine>`` and the union of their spans
      (``start + 1 .. end``) is ``busy.<engine>`` over the profile; nothing lost, no FIFO
      overflow;
    * slices lie inside the profile; those of an engine that runs one command at a time
      never overlap; the matrix engine's are exactly the schedule of
      :class:`hw.isa.MatmulTimeline` for their take cycles (several in flight); REQUANT takes
      exactly :func:`hw.isa.command_busy_cycles`, DMA at least that (the ideal DRAM is the
      fastest);
    * every run of up to ``trace_depth + 1`` consecutive retirements of an engine lasts at
      least :func:`hw.isa.retire_window_cycles` (what the profiler sizes its drains by).
    """
    expected = sorted((q, i, raw) for q, recs in records.items()
                      for i, raw in enumerate(recs[:None if ran is None else ran.get(q)])
                      if _engine(raw) is not None)
    got = sorted((s.queue, s.index, s.command) for s in profile.slices)
    assert got == expected, (len(got), len(expected))
    summary = profile.engine_summary()
    assert profile.overflowed == ()
    def error(s) -> ErrorCode:
        return (errors or {}).get((s.queue, s.index), ErrorCode.NONE)
    for e in ENGINE_NAMES:
        mine = sorted((s for s in profile.slices if s.engine == e), key=lambda s: s.start)
        assert len(mine) == profile.counters[f"retired.{e}"] == summary[e]["commands"], e
        held = set().union(*(range(s.start + 1, s.end + 1) for s in mine))
        assert len(held) == profile.counters[f"busy.{e}"], e
        assert summary[e]["lost"] == 0 and summary[e]["busy_slices"] == summary[e]["busy"], e
        for s in mine:
            assert _engine(s.command) == e
            assert profile.begin <= s.start < s.end < profile.end
        if engine_in_flight(profile.config, e) == 1:
            for a, b in zip(mine, mine[1:], strict=False):
                assert b.start > a.end, (a, b)      # one command at a time, taken after done
        _check_retire_windows(profile, e, [(s.end, command_retire_cycles(
            profile.config, s.command, error(s))) for s in mine])
    _check_matmul_schedule(profile, [s for s in profile.slices if s.engine == "matrix"],
                           error)
    for s in profile.slices:
        op = decode(s.command).header.opcode
        bound = command_busy_cycles(profile.config, s.command, error(s))
        if op == Opcode.REQUANT:
            assert s.cycles == bound, (s, bound)
        elif op != Opcode.MATMUL:
            assert s.cycles >= bound, (s, bound)


def _check_matmul_schedule(profile: Profile, slices, error) -> None:
    """The matrix engine's slices, replayed on :class:`hw.isa.MatmulTimeline` at their take
    cycles (it must be able to take each then), retire in exactly their ``end`` cycles."""
    line = MatmulTimeline(profile.config)
    for s in sorted(slices, key=lambda s: s.start):
        b = decode(s.command).body.matmul
        times = line.take(s.start, b.m, k_blocks=b.k_len + 1,
                          error=error(s) != ErrorCode.NONE)
        assert times.done == s.end, (s, times)


def _check_retire_windows(profile: Profile, engine: str, retired: list[tuple[int, int]]) -> None:
    """Every run of up to ``trace_depth + 1`` consecutive retirements ``(end, retire
    cycles)`` of ``engine`` spans at least :func:`hw.isa.retire_window_cycles` (the window
    from the cycle before the first ``done`` to the last)."""
    retired = sorted(retired)
    for i, (first, _) in enumerate(retired):
        for j in range(i, min(len(retired), i + profile.config.trace_depth + 1)):
            bound = retire_window_cycles(profile.config, engine,
                                         [b for _, b in retired[i:j + 1]])
            assert retired[j][0] - (first - 1) >= bound, (engine, retired[i:j + 1])


def check_regions(profile: Profile, records: dict[int, list[bytes]]) -> None:
    """The ``layer`` region holds ``gemm0`` and ``gemm1`` (depth 1, in order), and every
    command of the default stream's two kernels runs inside its kernel's region."""
    regions = {r.name: r for r in profile.regions}
    assert [r.name for r in profile.regions] == ["layer", "gemm0", "gemm1"]
    layer, g0, g1 = regions["layer"], regions["gemm0"], regions["gemm1"]
    assert (layer.depth, g0.depth, g1.depth) == (0, 1, 1)
    assert layer.enter < g0.enter < g0.exit < g1.enter < g1.exit < layer.exit
    q0 = sorted((s for s in profile.slices if s.queue == 0), key=lambda s: s.index)
    inside = [g0.enter <= s.start and s.end <= g0.exit or g1.enter <= s.start and s.end <= g1.exit
              for s in q0]
    assert all(inside) and q0
    assert NPUConfig(**profile.config.to_dict()) == profile.config
