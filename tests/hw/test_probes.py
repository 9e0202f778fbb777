# amaranth: UnusedElaboratable=no
"""The named probes of the NPU (:data:`hw.top.PROBE_FIELDS`, :func:`hw.top.probe_name`): present
in the generated Verilog with their widths, and carrying what their definitions say, on the
whole NPU in Amaranth's simulator (each engine's commands come from a different queue and
command index, so a probe wired to the wrong engine or field shows)."""

import re

import pytest
from amaranth.sim import Simulator

from cosim.build import generate_verilog
from hw.config import NPUConfig
from hw.isa import (
    COMMAND_BYTES,
    ENGINE_NAMES,
    Csr,
    LocalMem,
    Opcode,
    counter_csr,
    encode,
    queue_csr,
)
from hw.top import NPU, PROBE_FIELDS, probe_name
from tests.support.amaranth_axi import AxiMemory, axil_read, axil_write

_DECL = re.compile(r"^\s*(?:wire|reg)\s+(?:\[(\d+):0\]\s+)?\\?([\w$.]+)\s*;", re.M)


def declared_widths(verilog: str, module: str = "npu") -> dict[str, int]:
    """Width of every wire/reg declared in ``module`` of a Verilog text."""
    match = re.search(rf"^module {module}\(.*?^endmodule", verilog, re.M | re.S)
    assert match, f"no module {module}"
    return {name: int(msb) + 1 if msb else 1 for msb, name in _DECL.findall(match.group(0))}


def test_probe_names_and_widths_in_verilog(tmp_path):
    """Every probe of every engine is a signal of the ``npu`` module of the Verilog (generated
    as for the RTL tests, into a private directory so that no concurrent build sees it
    change), with its width."""
    text = generate_verilog(NPUConfig(), out_dir=tmp_path).read_text()
    widths = declared_widths(text)
    expected = {probe_name(e, f): w for e in ENGINE_NAMES for f, w in PROBE_FIELDS.items()}
    assert len(expected) == 4 * 7
    assert {n: widths.get(n) for n in expected} == expected


def test_probe_name_rejects_unknown():
    with pytest.raises(KeyError, match="no probe"):
        probe_name("matrix", "bsy")
    with pytest.raises(KeyError, match="engines"):
        probe_name("tensor", "busy")


# -- behaviour on the whole NPU -------------------------------------------------------------------

CFG = NPUConfig(rows=2, cols=2, spad_rows=64, acc_rows=64, dram_bytes=1 << 16)
RING = 0x1000
RING_BYTES = 0x400


def command(opcode, body=None, *, wait=None, signal=None):
    header = {"opcode": opcode, "flags": {}}
    if wait is not None:
        header["flags"]["wait"] = 1
        header["wait_sem"], header["wait_value"] = wait
    if signal is not None:
        header["flags"]["signal"] = 1
        header["signal_sem"] = signal
    return encode({"header": header, "body": body or {}})


def dma(opcode, dram_addr, n_rows, **kw):
    row = CFG.spad_row_bytes
    return command(opcode, {"dma": {"dram_addr": dram_addr, "dram_stride": row, "row_bytes": row,
                                    "n_rows": n_rows, "local_row": 4, "local_stride": 1,
                                    "mem": LocalMem.SPAD}}, **kw)


#: per queue, the commands; each engine's commands sit in one queue at distinct indices. The
#: store waits for the second load (semaphore 5), long enough that the store engine sees a
#: ``sem`` stall (the store is fetched in a burst of its own, after queues 0..2).
PROGRAM = {
    0: [command(Opcode.NOP), dma(Opcode.DMA_LOAD, 0x2000, 0),
        dma(Opcode.DMA_LOAD, 0x2000, 16, signal=5)],
    1: [command(Opcode.MATMUL, {"matmul": {"a_row": 4, "w_row": 8, "acc_row": 0, "m": 2}}),
        command(Opcode.NOP),
        command(Opcode.MATMUL, {"matmul": {"a_row": 4, "w_row": 8, "acc_row": 2, "m": 1}})],
    2: [command(Opcode.NOP), command(Opcode.NOP),
        command(Opcode.REQUANT, {"requant": {"acc_row": 0, "spad_row": 20, "n_rows": 2,
                                             "param_row": 8}})],
    3: [dma(Opcode.DMA_STORE, 0x3000, 2, wait=(5, 1))],
}
#: engine -> the (queue, index, opcode) of the commands it must retire, in order
EXPECTED = {
    "load": [(0, 1, Opcode.DMA_LOAD), (0, 2, Opcode.DMA_LOAD)],
    "store": [(3, 0, Opcode.DMA_STORE)],
    "matrix": [(1, 0, Opcode.MATMUL), (1, 2, Opcode.MATMUL)],
    "vector": [(2, 2, Opcode.REQUANT)],
}


def run_npu():
    """Run :data:`PROGRAM`; returns the probes sampled in every cycle from reset and the
    counters (free-running from reset) of a snapshot taken after the run."""
    npu = NPU(CFG)
    sim = Simulator(npu)
    sim.add_clock(1e-8)
    mem = AxiMemory(npu.mem, CFG.dram_bytes, CFG.axi_data_bytes, stall=0.2, seed=4)
    sim.add_testbench(mem.run_reads, background=True)
    sim.add_testbench(mem.run_writes, background=True)
    names = [(e, f) for e in ENGINE_NAMES for f in PROBE_FIELDS]
    samples = []

    async def monitor(ctx):
        async for _, _, *values in ctx.tick().sample(*(npu.probes[e][f] for e, f in names)):
            row = {e: {} for e in ENGINE_NAMES}
            for (e, f), v in zip(names, values, strict=True):
                row[e][f] = v
            samples.append(row)

    out = {}

    async def counters(ctx):
        await axil_write(ctx, npu.csr, Csr.CNT_SNAPSHOT, 1)
        values = {name: await axil_read(ctx, npu.csr, counter_csr(name))
                  for e in ENGINE_NAMES
                  for name in (f"busy.{e}", f"retired.{e}", f"stall.{e}.sem")}
        values["cycles"] = await axil_read(ctx, npu.csr, Csr.CNT_CYCLES_LO)
        return values

    async def host(ctx):
        for q in PROGRAM:
            await axil_write(ctx, npu.csr, queue_csr(q, Csr.RING_BASE), RING + q * RING_BYTES)
            await axil_write(ctx, npu.csr, queue_csr(q, Csr.RING_SIZE), 8)
        before = await counters(ctx)
        for q, cmds in PROGRAM.items():
            base = RING + q * RING_BYTES
            for i, c in enumerate(cmds):
                mem.mem[base + i * COMMAND_BYTES:base + (i + 1) * COMMAND_BYTES] = c
        for q, cmds in PROGRAM.items():
            await axil_write(ctx, npu.csr, queue_csr(q, Csr.TAIL), len(cmds))
        for _ in range(3000):
            if not await axil_read(ctx, npu.csr, Csr.QUEUE_BUSY):
                break
        out["errors"] = await axil_read(ctx, npu.csr, Csr.QUEUE_ERRORS)
        out["before"], out["counters"] = before, await counters(ctx)
        out["done"] = True

    sim.add_testbench(monitor, background=True)
    sim.add_testbench(host)
    sim.run()
    assert out.get("done") and out["errors"] == 0, out
    assert out["before"]["retired.load"] == 0       # nothing ran before the commands
    return samples, out["counters"]


@pytest.fixture(scope="module")
def npu_run():
    return run_npu()


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_probes_follow_their_engine(npu_run, engine):
    """``take`` starts each command, ``busy`` covers it through ``done``, and ``queue``,
    ``index``, ``opcode`` name that command (the one this engine must run); ``busy``, ``done``
    and ``sem_stall`` count what the engine's counters count."""
    samples, counters = npu_run
    rows = [s[engine] for s in samples]
    retired, takes = [], 0
    for before, row in zip(rows, rows[1:], strict=False):
        if before["take"]:
            takes += 1
            assert row["busy"], f"{engine}: not busy after take"
        if row["busy"] and before["busy"] and not before["done"]:
            assert (row["queue"], row["index"], row["opcode"]) == \
                (before["queue"], before["index"], before["opcode"]), f"{engine}: changed"
        if row["done"]:
            assert row["busy"], f"{engine}: done outside busy"
            retired.append((row["queue"], row["index"], Opcode(row["opcode"])))
    assert retired == EXPECTED[engine]
    assert takes == len(EXPECTED[engine])
    # the counters count the same definitions: over the cycles before the snapshot (cycle
    # ``counters["cycles"]``), exactly
    before = rows[:counters["cycles"]]
    assert len(before) == counters["cycles"] and not any(r["busy"] for r in rows[len(before):])
    assert sum(r["busy"] for r in before) == counters[f"busy.{engine}"] > 0
    assert sum(r["done"] for r in before) == counters[f"retired.{engine}"] == len(retired)
    assert sum(r["sem_stall"] for r in before) == counters[f"stall.{engine}.sem"]
    if engine == "store":
        assert counters["stall.store.sem"] > 0
