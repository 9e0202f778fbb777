"""A backend-agnostic job that reads every packed register of :data:`hw.isa.REGISTER_STRUCTS`
after a small stream (a DMA load and a matmul that leave trace entries, signals, an error), and
what the runtime decodes from the same registers; run on the RTL (through
:func:`cosim.tb.harness.run_job`) and on the functional model, then compared field by field.
"""

import numpy as np

from hw.isa import (
    ENGINE_NAMES,
    Csr,
    ErrorCode,
    LocalMem,
    queue_csr,
    sem_last_csr,
    trace_csr,
)
from sw.runtime import CommandList, Device, DeviceError

#: reads of QUEUE_ERRORS allowed while waiting for the error (each read advances the RTL)
ERROR_POLLS = 2000


def _raw_registers(backend, device: Device, streams) -> dict:
    """Every packed register, by ``NAME`` or ``NAME.<queue|engine|sem>``."""
    rd = backend.csr_read
    raw = {"VERSION": rd(Csr.VERSION), "CFG_ARRAY": rd(Csr.CFG_ARRAY), "CFG_BUS": rd(Csr.CFG_BUS),
           "CFG_FEATURES": rd(Csr.CFG_FEATURES), "STATUS": rd(Csr.STATUS),
           "ERR_CODE": rd(Csr.ERR_CODE)}
    for s in streams:
        raw[f"Q_STATUS.{s.queue}"] = rd(queue_csr(s.queue, Csr.Q_STATUS))
        raw[f"Q_ERR_CODE.{s.queue}"] = rd(queue_csr(s.queue, Csr.Q_ERR_CODE))
    for e, name in enumerate(ENGINE_NAMES):
        raw[f"TRACE_INFO.{name}"] = rd(trace_csr(e, Csr.TRACE_INFO))
    for sem in range(device.config.n_sems):
        raw[f"SEM_LAST.{sem}"] = rd(sem_last_csr(sem))
    return raw


def register_fields(backend) -> dict:
    """Stream A loads two scratchpad rows and signals S; stream B multiplies them and signals
    S; stream C runs a NOP and then a SIGNAL of a semaphore that does not exist (``BAD_SEM``,
    found at decode). The registers are read while C's error is latched, and again after
    the runtime has reported it (:class:`DeviceError`) and reset C.

    Returns ``{"raw": {...}, "after": {...}, "runtime": {...}, "queues": {...}}``: the
    register values and the runtime's decoding of them (its configuration, the error, the
    last signaller of each semaphore, the trace records, whether each stream is busy)."""
    device = Device(backend)
    cfg = device.config
    a, b, c = (device.create_stream() for _ in range(3))
    sem = device.alloc_semaphore()
    rows = device.upload(np.arange(2 * cfg.spad_row_bytes, dtype=np.uint8))

    cmds = CommandList()
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=rows.addr, dram_stride=cfg.spad_row_bytes,
                  row_bytes=cfg.spad_row_bytes, n_rows=2, local_row=0, local_stride=1,
                  signal=sem.id)
    a.launch(cmds)
    a.synchronize()
    cmds = CommandList()
    cmds.matmul(a_row=0, w_row=0, acc_row=0, m=2, wait=(sem.id, 1))
    cmds.signal(sem.id)
    b.launch(cmds)
    b.synchronize()
    cmds = CommandList()
    cmds.nop()
    cmds.signal(cfg.n_sems)             # no such semaphore: BAD_SEM at decode
    c.launch(cmds)
    for _ in range(ERROR_POLLS):
        if backend.csr_read(Csr.QUEUE_ERRORS) >> c.queue & 1:
            break
    raw = _raw_registers(backend, device, (a, b, c))

    runtime: dict = {"config": {k: getattr(cfg, k) for k in (
        "rows", "cols", "n_queues", "n_sems", "axi_data_bits", "dma_outstanding",
        "spad_row_bytes", "acc_row_elems")}}
    runtime["busy"] = {s.queue: not s.query() for s in (a, b)}
    try:
        c.synchronize(timeout_cycles=20_000)
        runtime["error"] = None
    except DeviceError as e:
        code = e.code.value if isinstance(e.code, ErrorCode) else int(e.code)
        runtime["error"] = {"code": code, "queue": e.queue, "opcode": e.opcode,
                            "command_index": e.command_index, "address": e.address}
    runtime["last_signal"] = {s: device.last_signal(s) for s in range(cfg.n_sems)}
    runtime["trace"] = [[r.engine, r.queue, r.index] for r in device.read_trace()]
    after = _raw_registers(backend, device, (a, b, c))
    return {"raw": raw, "after": after, "runtime": runtime,
            "queues": {"a": a.queue, "b": b.queue, "c": c.queue, "sem": sem.id}}
