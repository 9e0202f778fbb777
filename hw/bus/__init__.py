"""Bus and engine signatures shared by the blocks of the NPU.

* :class:`AXI4Signature`: an AXI4 manager (master) port, flat member names as in the AMBA AXI
  spec (ARM IHI 0022), so a flattened top-level port reads ``mem__araddr`` etc.
* :class:`AXI4LiteSignature`: an AXI4-Lite manager port (32-bit data).
* :class:`EngineSignature`: how the command processor hands one command at a time to an
  engine (DMA load, DMA store, matrix, vector) and learns that it retired.
* :class:`ArbitratedWriteSignature`: a write request to a local memory whose single write
  port is shared by several writers (``amaranth.lib.memory.WritePort.Signature`` plus
  ``ready``).

Signatures are written from the manager's (initiator's) point of view; a subordinate uses
``In(...)`` (``.flip()``). The exception is :class:`ArbitratedWriteSignature`, which follows
Amaranth's memory port signatures (written from the memory's side) so that it sits beside
``ReadPort.Signature``/``WritePort.Signature``.
"""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.isa import Command, ErrorCode

__all__ = ["AXI4Signature", "AXI4LiteSignature", "EngineSignature",
           "ArbitratedWriteSignature", "AXI_BURST_INCR", "AXI_RESP_OKAY", "AXI_RESP_SLVERR",
           "AXI_RESP_DECERR"]

AXI_BURST_INCR = 0b01
AXI_RESP_OKAY = 0b00
AXI_RESP_SLVERR = 0b10
AXI_RESP_DECERR = 0b11


class AXI4Signature(wiring.Signature):
    """AXI4 manager port: five channels with full valid/ready handshakes.

    Parameters
    ----------
    addr_width, data_width, id_width : int
        Widths in bits. ``data_width`` is a multiple of 8.
    """

    def __init__(self, *, addr_width: int, data_width: int, id_width: int):
        self.addr_width = addr_width
        self.data_width = data_width
        self.id_width = id_width
        super().__init__({
            # write address
            "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8),
            "awsize": Out(3), "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
            # write data
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            # write response
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            # read address
            "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8),
            "arsize": Out(3), "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
            # read data
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and self.addr_width == other.addr_width
                and self.data_width == other.data_width and self.id_width == other.id_width)

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width})")


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite manager port with 32-bit data."""

    def __init__(self, *, addr_width: int):
        self.addr_width = addr_width
        super().__init__({
            "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(32), "wstrb": Out(4), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
            "rdata": In(32), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return type(other) is type(self) and self.addr_width == other.addr_width

    def __repr__(self):
        return f"AXI4LiteSignature(addr_width={self.addr_width})"


class EngineSignature(wiring.Signature):
    """Command port of an engine, from the command processor's point of view.

    Members
    -------
    cmd : ``Out(stream.Signature(Command))``
        The processor offers one :class:`~hw.isa.Command`; the engine takes it (``ready``)
        when it can: the DMA channels and the vector unit only when idle, the matrix engine
        also while earlier commands run (at most :func:`hw.isa.engine_in_flight` taken and not
        retired; the processor offers no more). Stream rules of :mod:`amaranth.lib.stream`
        apply.
    done : ``In(1)``
        One-cycle pulse when a taken command retires (successfully or not), in the order they
        were taken. Its effects (memory writes, DRAM writes acknowledged by B responses) are
        complete by then.
    error : ``In(ErrorCode)``
        Valid in the ``done`` cycle; ``ErrorCode.NONE`` on success. A failing command must
        not write anything outside the memory it is allowed to touch.
    error_addr : ``In(32)``
        Valid in the ``done`` cycle when ``error`` is set: the offending address.
    busy : ``In(1)``
        High while the engine holds a command: from the cycle after taking one until the
        ``done`` pulse (inclusive) of the last one it holds.
    queue : ``Out(8)``
        The command queue the offered command comes from (valid with ``cmd.valid``).
    window_base, window_limit : ``Out(32)``
        That queue's DRAM window ``[window_base, window_limit)`` in bytes, valid with
        ``cmd.valid``; ``window_limit == 0`` means no limit below ``dram_bytes``. Engines that
        touch DRAM (the DMA) latch it with the command and check every access against it.
    vm : ``Out(32)``
        That queue's ``Q_VM`` (:class:`hw.isa.VmWord`), valid with ``cmd.valid``: the DMA
        latches it with the command and translates with it (:mod:`hw.isa.vm`).
    """

    def __init__(self):
        super().__init__({
            "cmd": Out(stream.Signature(Command)),
            "done": In(1),
            "error": In(ErrorCode),
            "error_addr": In(32),
            "busy": In(1),
            "queue": Out(8),
            "window_base": Out(32),
            "window_limit": Out(32),
            "vm": Out(32),
        })


class ArbitratedWriteSignature(wiring.Signature):
    """Write request to a local memory whose one write port is shared by several writers.

    Written from the memory's (arbiter's) side, like ``amaranth.lib.memory.WritePort.Signature``:
    a writer uses ``In(ArbitratedWriteSignature(...))``, the arbiter ``Out(...)``.

    Members
    -------
    en : ``In(1)``
        The writer requests a write of ``data`` to row ``addr`` in this cycle.
    addr : ``In(addr_width)``
    data : ``In(shape)``
    ready : ``Out(1, init=1)``
        The write port is free for this writer in this cycle (no writer of higher priority
        writes). The row is written at the clock edge iff ``en & ready``; with ``en & ~ready``
        nothing is written and the writer must hold (or retry) the write in a later cycle.
        ``ready`` does not depend on this writer's ``en``, and ``en`` must not depend on
        ``ready`` (no combinational loop; the same rule as a stream's ``valid``). An
        unconnected ``ready`` stays at its initial value 1 (never denied).

    Parameters
    ----------
    addr_width : int
    shape : shape-castable
        The row shape of the memory.
    """

    def __init__(self, *, addr_width: int, shape):
        self.addr_width = addr_width
        self.shape = shape
        super().__init__({
            "en": In(1),
            "addr": In(addr_width),
            "data": In(shape),
            "ready": Out(1, init=1),
        })

    def __eq__(self, other):
        return (type(other) is type(self) and self.addr_width == other.addr_width
                and self.shape == other.shape)

    def __repr__(self):
        return f"ArbitratedWriteSignature(addr_width={self.addr_width}, shape={self.shape!r})"
