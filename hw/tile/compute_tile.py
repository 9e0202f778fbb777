"""Compute tile: scratchpad and accumulator memories, the matrix engine and the vector unit."""

from amaranth.hdl import Const, Module
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory, ReadPort
from amaranth.lib.wiring import In, Out

from hw.bus import ArbitratedWriteSignature, EngineSignature
from hw.config import NPUConfig
from hw.local_mem import RAM_ATTRS, acc_shape, check_config, spad_shape
from hw.tile.matrix_engine import MatrixEngine
from hw.vector import VectorUnit

__all__ = ["ComputeTile", "TileStall", "write_arbiter"]

#: Layout of :attr:`ComputeTile.stall` (one bit per stall reason, valid every cycle).
TileStall = data.StructLayout({"vector_acc": 1})


def write_arbiter(m: Module, port, writers: list) -> None:
    """Share one memory write port ``port`` among ``writers``, highest priority first.

    Each writer has ``en``/``addr``/``data``; every writer but the first also has ``ready``
    (see :class:`hw.bus.ArbitratedWriteSignature`), which is high iff no writer before it has
    ``en`` high. The port writes the first writer with ``en`` high. Purely combinational: no
    added latency, and a writer's ``ready`` never depends on its own ``en``.
    """
    taken = Const(0)
    for i, w in enumerate(writers):
        if i:                       # the first writer always wins and has no ready
            m.d.comb += w.ready.eq(~taken)
        taken = taken | w.en
    m.d.comb += port.en.eq(taken)
    for i, w in enumerate(writers):
        with (m.If if i == 0 else m.Elif)(w.en):
            m.d.comb += [port.addr.eq(w.addr), port.data.eq(w.data)]


class ComputeTile(wiring.Component):
    """The compute tile: scratchpad, accumulator, matrix engine and vector engine.

    Memories (``amaranth.lib.memory.Memory``, zero-initialised, synchronous read ports with one
    cycle of latency, not transparent), each with exactly **one write port** so that FPGA
    synthesis maps it to block RAM (Yosys ``memory_libmap`` gives every read port its own copy
    of the memory, each copy a simple dual-port RAM: one write, one read; the memories carry
    :data:`~hw.local_mem.RAM_ATTRS`: on the FPGA a read of a row in the cycle another port
    writes it returns undefined data, which only a program with a data race uses):

    * scratchpad: ``spad_rows`` rows of ``spad_row_bytes`` int8; element ``j`` of a row is bits
      ``[8j+7:8j]``. Write port shared by, in priority order, the vector engine (REQUANT
      outputs, SOFTMAX P blocks, ADD and LAYERNORM outputs) and the DMA load channel. Read
      ports: DMA store, matrix engine activations, matrix engine weights (so the next
      command's weights load while the current one's activations stream: one more copy of the
      scratchpad in block RAM), vector unit (the int8 inputs of ADD and LAYERNORM: one more
      copy).
    * accumulator: ``acc_rows`` rows of ``acc_row_elems`` int32; element ``j`` is bits
      ``[32j+31:32j]``. Write port shared by, in priority order, the matrix engine (result
      rows), the vector engine (SOFTMAX reciprocal rows) and the DMA load channel. Read ports:
      DMA store, matrix engine (accumulate; transparent for the write port, so a row written
      in the cycle it is read reads new, which back-to-back MATMULs need when one's last row
      is the next one's first), vector engine (requantize, softmax).

    Write arbitration (:func:`write_arbiter`, combinational, fixed priority, decided every
    cycle): the matrix engine's and the vector engine's pipelined writes never wait. The
    softmax engine's reciprocal write waits in its row-end state while the matrix engine writes
    (:class:`~hw.vector.SoftmaxEngine`); the DMA holds its R beat while either engine writes
    the memory it loads (:class:`~hw.dma.DMA`, ``spad_w.ready``/``acc_w.ready``). No write is
    lost or reordered; a denied writer only loses cycles. Arbitration is per port, not per row:
    the software still orders conflicting accesses to the same rows with semaphores.

    Members
    -------
    matrix : ``In(EngineSignature())``
        MATMUL commands, see :class:`MatrixEngine`.
    vector : ``In(EngineSignature())``
        REQUANT and SOFTMAX commands, see :class:`~hw.vector.VectorUnit`.
    spad_w : ``Out(ArbitratedWriteSignature(addr_width=log2(spad_rows), shape=spad_row_bytes*8))``
    acc_w : ``Out(ArbitratedWriteSignature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
        The DMA's write requests, lowest priority on each memory's write port: a row is written
        iff ``en & ready`` (see :class:`hw.bus.ArbitratedWriteSignature`).
    spad_r : ``Out(ReadPort.Signature(addr_width=log2(spad_rows), shape=spad_row_bytes * 8))``
    acc_r : ``Out(ReadPort.Signature(addr_width=log2(acc_rows), shape=acc_row_bytes * 8))``
        Read ports for the DMA, each its own read port of the memory. Read data comes one cycle
        after ``addr``/``en``.
    stall : ``Out(TileStall)``
        ``vector_acc``: high in each cycle in which the softmax engine wants to write a
        reciprocal row to the accumulator (its ``acc_wr.en``) but the matrix engine writes the
        accumulator, so the softmax engine waits. (DMA write stalls are reported by
        :attr:`hw.dma.DMA.stall`.)
    """

    def __init__(self, config: NPUConfig):
        check_config(self, config)
        self.config = config
        super().__init__({
            "matrix": In(EngineSignature()),
            "vector": In(EngineSignature()),
            "spad_w": Out(ArbitratedWriteSignature(**spad_shape(config))),
            "acc_w": Out(ArbitratedWriteSignature(**acc_shape(config))),
            "spad_r": Out(ReadPort.Signature(**spad_shape(config))),
            "acc_r": Out(ReadPort.Signature(**acc_shape(config))),
            "stall": Out(TileStall),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config

        # ram_style: block RAM even where Yosys would pick LUT RAM (shallow memories)
        m.submodules.spad = spad = Memory(shape=cfg.spad_row_bytes * 8, depth=cfg.spad_rows,
                                          init=[], attrs=RAM_ATTRS)
        m.submodules.acc = acc = Memory(shape=cfg.acc_row_bytes * 8, depth=cfg.acc_rows,
                                        init=[], attrs=RAM_ATTRS)
        m.submodules.matrix = matrix = MatrixEngine(cfg)
        m.submodules.vector = vector = VectorUnit(cfg)

        # -- one write port per memory, fixed priority -----------------------------------------
        acc_wp = acc.write_port()
        write_arbiter(m, spad.write_port(), [vector.spad_wr, self.spad_w])
        write_arbiter(m, acc_wp, [matrix.acc_wr, vector.acc_wr, self.acc_w])
        m.d.comb += self.stall.vector_acc.eq(vector.acc_wr.en & ~vector.acc_wr.ready)

        # -- read ports: DMA, matrix engine (activations, weights), vector engine ---------------
        wiring.connect(m, wiring.flipped(self.spad_r), spad.read_port())
        wiring.connect(m, wiring.flipped(self.acc_r), acc.read_port())
        wiring.connect(m, matrix.spad_rd, spad.read_port())
        wiring.connect(m, matrix.spad_w_rd, spad.read_port())
        wiring.connect(m, matrix.acc_rd, acc.read_port(transparent_for=(acc_wp,)))
        wiring.connect(m, vector.acc_rd, acc.read_port())
        wiring.connect(m, vector.spad_rd, spad.read_port())

        # -- command ports ------------------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.matrix), matrix.engine)
        wiring.connect(m, wiring.flipped(self.vector), vector.engine)
        return m
