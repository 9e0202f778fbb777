"""The CSR block (on the RTL), the functional model and the runtime agree on every packed
register, field by field, for each struct of :data:`hw.isa.REGISTER_STRUCTS` (job:
:func:`tests.support.register_jobs.register_fields`)."""

import enum
import json

import pytest

from cosim.tb.harness import run_job
from hw.config import NPUConfig
from hw.isa import CSR_VERSION_VALUE, REGISTER_STRUCTS, ErrorCode, Opcode, unpack_fields
from sw.model import ModelBackend
from tests.support import register_jobs

CONFIG = NPUConfig()


def fields(struct) -> list[str]:
    return [name for name, _ in struct.as_shape()]


def decoded(name: str, value: int) -> dict:
    """``{field: value}`` of a register read at ``name`` (``NAME`` or ``NAME.<which>``)."""
    struct = REGISTER_STRUCTS[name.split(".")[0]]
    view = unpack_fields(struct, value)
    out = {f: getattr(view, f) for f in fields(struct)}
    return {f: v.value if isinstance(v, enum.Enum) else v for f, v in out.items()}


@pytest.fixture(scope="module")
def runs():
    rtl = run_job(CONFIG, "tests.support.register_jobs:register_fields",
                  name="register_fields_8x8").result
    # the RTL result travels as JSON: give the model's the same types
    model = json.loads(json.dumps(register_jobs.register_fields(ModelBackend(CONFIG))))
    return {"rtl": rtl, "model": model}


def test_every_struct_is_read(runs):
    names = {k.split(".")[0] for k in runs["rtl"]["raw"]}
    assert names == set(REGISTER_STRUCTS)


@pytest.mark.parametrize("phase", ["raw", "after"])
def test_rtl_and_model_agree_field_by_field(runs, phase):
    rtl, model = runs["rtl"][phase], runs["model"][phase]
    assert rtl.keys() == model.keys()
    for name in rtl:
        got, want = decoded(name, rtl[name]), decoded(name, model[name])
        for f in got:
            assert got[f] == want[f], f"{phase} {name}.{f}: RTL {got[f]!r}, model {want[f]!r}"


def test_the_stream_exercised_every_field(runs):
    """The values compared are not trivially zero: an error latched with its queue and
    opcode, busy and error bits, trace entries, semaphore records, the configuration."""
    for run in runs.values():
        raw, q = run["raw"], run["queues"]
        err = decoded("ERR_CODE", raw["ERR_CODE"])
        assert (err["code"], err["queue"], err["opcode"]) == (ErrorCode.BAD_SEM.value, q["c"],
                                                              Opcode.SIGNAL.value)
        q_err = decoded("Q_ERR_CODE", raw[f"Q_ERR_CODE.{q['c']}"])
        assert (q_err["code"], q_err["opcode"]) == (ErrorCode.BAD_SEM.value, Opcode.SIGNAL.value)
        assert decoded("STATUS", raw["STATUS"]) == {"busy": 1, "error": 1, "_pad": 0}
        assert decoded("Q_STATUS", raw[f"Q_STATUS.{q['c']}"])["error"] == 1
        assert decoded("Q_STATUS", raw[f"Q_STATUS.{q['a']}"]) == {"busy": 0, "error": 0,
                                                                   "_pad": 0}
        last = decoded("SEM_LAST", raw[f"SEM_LAST.{q['sem']}"])
        assert (last["valid"], last["queue"], last["index"]) == (1, q["b"], 1)
        for engine, (queue, index) in {"load": (q["a"], 0), "matrix": (q["b"], 0)}.items():
            info = decoded("TRACE_INFO", raw[f"TRACE_INFO.{engine}"])
            assert (info["valid"], info["overflow"], info["queue"], info["index"]) == \
                (1, 0, queue, index)
        assert decoded("CFG_ARRAY", raw["CFG_ARRAY"])["rows"] == CONFIG.rows
        assert decoded("CFG_FEATURES", raw["CFG_FEATURES"])["mx"] == CONFIG.mx
        assert decoded("VERSION", raw["VERSION"]) == decoded("VERSION", CSR_VERSION_VALUE)
        after = run["after"]
        assert decoded("ERR_CODE", after["ERR_CODE"])["code"] == ErrorCode.NONE.value
        assert decoded("STATUS", after["STATUS"]) == {"busy": 0, "error": 0, "_pad": 0}


@pytest.mark.parametrize("backend", ["rtl", "model"])
def test_runtime_decodes_what_the_struct_says(runs, backend):
    """The runtime's view (configuration discovery, DeviceError, last_signal, read_trace,
    Stream.query) equals the struct fields of the registers it read."""
    run = runs[backend]
    raw, rt, q = run["raw"], run["runtime"], run["queues"]
    arr, bus = decoded("CFG_ARRAY", raw["CFG_ARRAY"]), decoded("CFG_BUS", raw["CFG_BUS"])
    cfg = rt["config"]
    assert (cfg["rows"], cfg["cols"], cfg["n_queues"], cfg["n_sems"] & 0xFF) == \
        (arr["rows"], arr["cols"], arr["n_queues"], arr["n_sems"])
    assert (cfg["axi_data_bits"] // 8, cfg["dma_outstanding"], cfg["spad_row_bytes"],
            cfg["acc_row_elems"]) == (bus["axi_data_bytes"], bus["dma_outstanding"],
                                      bus["spad_row_bytes"], bus["acc_row_elems"])
    q_err = decoded("Q_ERR_CODE", raw[f"Q_ERR_CODE.{q['c']}"])
    err = decoded("ERR_CODE", raw["ERR_CODE"])
    assert rt["error"] is not None
    assert (rt["error"]["code"], rt["error"]["opcode"]) == (q_err["code"], q_err["opcode"])
    assert rt["error"]["queue"] == err["queue"] and rt["error"]["command_index"] == 1
    for s, got in rt["last_signal"].items():
        last = decoded("SEM_LAST", raw[f"SEM_LAST.{s}"])
        assert got == ([last["queue"], last["index"]] if last["valid"] else None), s
    heads = {}
    for engine, queue, index in rt["trace"]:
        heads.setdefault(engine, [queue, index])
    for name in ("load", "matrix"):
        info = decoded("TRACE_INFO", raw[f"TRACE_INFO.{name}"])
        assert heads[name] == [info["queue"], info["index"]]
    for queue, busy in rt["busy"].items():
        assert busy == decoded("Q_STATUS", raw[f"Q_STATUS.{queue}"])["busy"]
