"""What the performance model reuses of the functional model (:mod:`sw.model`): the engines'
checks and arithmetic (:class:`sw.model.engines.Engines`), so both backends produce the same
bytes and the same errors.

The performance backend is a :class:`sw.model.ModelBackend` (its DRAM image, local memories,
ring and window registers) with the timing put in front of it; this module is the one place
that calls into the functional model's engines.
"""

from __future__ import annotations

from hw.isa import ErrorCode, LocalMem, Opcode
from sw.model import ModelBackend
from sw.model.engines import CommandError
from sw.perf.decode import Decoded

__all__ = ["execute_engine", "local_mem"]

_LOAD, _STORE = Opcode.DMA_LOAD.value, Opcode.DMA_STORE.value
_MATMUL, _REQUANT, _SOFTMAX = Opcode.MATMUL.value, Opcode.REQUANT.value, Opcode.SOFTMAX.value
_GELU, _ADD, _LAYERNORM = Opcode.GELU.value, Opcode.ADD.value, Opcode.LAYERNORM.value


def local_mem(cmd: Decoded) -> LocalMem:
    """The local memory of a DMA command: ``ACC`` for ``mem == 1``, else the scratchpad (the
    undefined encodings too), as the RTL and :mod:`sw.model` decode it."""
    return LocalMem.ACC if cmd.body.mem == LocalMem.ACC.value else LocalMem.SPAD


def execute_engine(model: ModelBackend, cmd: Decoded) -> tuple[ErrorCode, int]:
    """Check and execute one engine command on the functional model's state (DRAM image,
    scratchpad, accumulator), at once and completely; a DMA is checked against the window its
    queue has now (the DMA latches it when it takes the command).

    Returns
    -------
    (ErrorCode, int)
        ``(NONE, 0)``, or the error the engine reports and its address, exactly as
        :class:`sw.model.engines.Engines` (and the RTL) decide them; nothing is written then.

    Raises
    ------
    ValueError
        For an opcode that no engine runs.
    """
    engines = model.engines
    op, f, body = cmd.opcode, cmd.flags, cmd.body
    try:
        if op == _MATMUL:
            engines.matmul(body, accumulate=bool(f.accumulate), transpose=bool(f.transpose))
        elif op in (_LOAD, _STORE):
            queue = model.queues[cmd.queue]
            engines.dma(body, local_mem(cmd), load=op == _LOAD, window=queue.window(),
                        vm=queue.vm)
        elif op == _REQUANT:
            engines.requant(body, relu=bool(f.relu), row_scale=bool(f.row_scale))
        elif op == _SOFTMAX:
            engines.softmax(body)
        elif op == _GELU:
            engines.gelu(body)
        elif op in (_ADD, _LAYERNORM):
            engines.eltwise(body, Opcode(op))
        else:
            raise ValueError(f"opcode {op:#x} is not an engine command")
    except CommandError as e:
        return e.code, e.addr
    return ErrorCode.NONE, 0
