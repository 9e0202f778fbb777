"""Bus faults injected at device DRAM (``cosim/tb/dram.sv``, :mod:`sw.model.faults`): one test
per site (ring fetch, DMA load into the accumulator and into the scratchpad, DMA store,
fence write) and response (SLVERR, DECERR) on the
RTL, each showing the typed error (``AXI_ERROR`` with queue, command and address), DRAM
unchanged outside what the failing command may write, the other stream completing, what the
failing load left in local memory, and recovery once the fault is cleared; the functional
and the performance model give the same report. Plus the DRAM model's count mode (RTL only).

Run (Verilator, 8x8 and 4x4): ``pytest tests/cosim/test_bus_faults.py``.
"""

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import ErrorCode, Opcode
from sw.model import ModelBackend
from sw.perf import PerfBackend
from tests.support import fault_jobs as F

#: name -> (configuration, DRAM timing); under backpressure the performance model times the
#: R beats one by one (the other path of its load channel)
CONFIGS = {"8x8": (NPUConfig(), "ideal"), "4x4": (NPUConfig(rows=4, cols=4), "ideal"),
           "4x4-bp50": (NPUConfig(rows=4, cols=4), "bp50")}
CASES = [[site, resp] for site in F.SITES for resp in ("slverr", "decerr")]


@pytest.fixture(scope="module", params=list(CONFIGS))
def runs(request, worker_id) -> tuple[NPUConfig, str, dict]:
    config, dram = CONFIGS[request.param]
    # each xdist worker that needs it runs its own simulation: a run directory per worker
    r = run_job(config, "tests.support.fault_jobs:bus_fault_sites", {"cases": CASES},
                name=f"bus_faults_{request.param}_{worker_id}", dram=dram)
    return config, dram, {tuple(c): out for c, out in zip(CASES, r.result, strict=True)}


def _expected_error(site: str, out: dict) -> dict:
    lay = out["layout"]
    index = {"fetch": 4, "load": 2, "load_spad": 2, "store": 4, "fence": 4}[site]  # after 2
    opcode = {"fetch": 0, "load": Opcode.DMA_LOAD.value,                     # set-up commands
              "load_spad": Opcode.DMA_LOAD.value, "store": Opcode.DMA_STORE.value,
              "fence": Opcode.FENCE.value}[site]
    addr = {"fetch": out["fault"]["lo"], "load": lay["page"], "load_spad": lay["page"],
            "store": lay["dst_page"], "fence": lay["fence"]}[site]
    return {"code": ErrorCode.AXI_ERROR.value, "queue": out["queues"][1], "index": index,
            "opcode": opcode, "addr": addr}


def _expected_changed(site: str, lay: dict) -> list:
    """The store writes every burst but the failing one (row 0's second, from the page)."""
    if site != "store":
        return []
    rows = [[lay["dst"], lay["dst_page"]]]
    rows += [[lay["dst"] + r * F.STRIDE, lay["dst"] + r * F.STRIDE + F.ROW_BYTES]
             for r in range(1, F.N_ROWS)]
    return rows


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_fault_site_on_rtl(runs, case):
    config, _, outs = runs
    site, _ = case
    out = outs[tuple(case)]
    assert out["error"] == _expected_error(site, out)
    assert out["changed"] == _expected_changed(site, out["layout"])
    assert out["other_ok"], "the other stream's copy is wrong"
    # a fetch fault fails the burst of several commands that holds the faulty one, then
    # that command's own burst when the commands are read again one at a time
    assert out["hits"] == (2 if site == "fetch" else 1), \
        "the DRAM model answered a different number of bursts"
    assert out["recovered"], "the same work failed after the fault was cleared"
    local = config.acc_row_bytes if site == "load" else config.spad_row_bytes
    n_local = F.N_ROWS * F.ROW_BYTES // local
    written = F.HEAD // local if site.startswith("load") else n_local   # before the failing burst
    assert out["local_rows"] == [1] * written + [0] * (n_local - written)


@pytest.mark.parametrize("backend", ["model", "perf"])
def test_models_report_what_the_rtl_reports(runs, backend):
    config, dram, outs = runs
    made = ModelBackend(config) if backend == "model" else PerfBackend(config, dram=dram)
    got = F.bus_fault_sites(made, cases=CASES)
    for case, out in zip(CASES, got, strict=True):
        rtl = dict(outs[tuple(case)], hits=None)
        if backend == "model":       # untimed, and it does not read ahead
            out, rtl = dict(out, counters=None), dict(rtl, counters=None)
        # the performance model: every counter too (cycles, bytes read with the failing
        # fetch burst read again one command at a time, stalls)
        assert out == rtl, f"{backend} differs from the RTL on {case}"


def test_a_failing_last_beat_leaves_no_flush_word():
    """The load's last burst is one failing beat that would need a flush word (4x4, 4-byte
    rows, 3 bytes before a page): the channel drains it and is done 2 cycles later, on the
    RTL and in the performance model (every counter), under backpressure (the model's
    beat-by-beat path)."""
    config = NPUConfig(rows=4, cols=4)
    rtl = run_job(config, "tests.support.fault_jobs:failing_last_beat",
                  name="bus_fault_last_beat", dram="bp50").result
    assert rtl["error"] == [ErrorCode.AXI_ERROR.value, 0]
    assert F.failing_last_beat(PerfBackend(config, dram="bp50")) == rtl


def test_count_mode_on_rtl():
    r = run_job(NPUConfig(), "tests.support.fault_jobs:bus_fault_nth", name="bus_fault_nth")
    read, write = r.result["read"], r.result["write"]
    # the fetch of the first command after the fault was set (index 0 of that launch)
    assert read["error"] == [ErrorCode.AXI_ERROR.value, 0, read["slot"]] and read["hits"] == 1
    # a failing burst of three commands is read again one command per burst: the one
    # failure is absorbed, the launch runs (the store writes)
    several = r.result["read_several"]
    assert several["error"] is None and several["hits"] == 1 and several["dst_written"]
    # the store's only burst (index 2: load, barrier, store): nothing of it written
    assert write["error"] == [ErrorCode.AXI_ERROR.value, 2, write["dst"]]
    assert write["hits"] == 1 and not write["dst_written"]


def test_models_refuse_the_count_mode():
    with pytest.raises(NotImplementedError, match="only the RTL"):
        ModelBackend(NPUConfig()).set_bus_fault(F.BusFault(mode="nth"))


def test_fault_from_plusargs_at_time_zero():
    """The DRAM model starts with the fault of the run's plusargs: the first read burst of
    the run, the fetch of the first command, fails."""
    fault = F.BusFault(mode="nth", reads=True, writes=False, nth=1, resp="decerr")
    r = run_job(NPUConfig(), "tests.support.fault_jobs:first_fetch", name="bus_fault_plusargs",
                bus_fault=fault)
    assert r.result["error"] == [ErrorCode.AXI_ERROR.value, 0, r.result["slot"]]
    assert r.result["hits"] == 1
