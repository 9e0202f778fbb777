"""The vector unit: REQUANT (and GELU), SOFTMAX, ADD and LAYERNORM behind one engine port,
sharing one multiplier and one rounding shifter per lane."""

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In
from amaranth.utils import exact_log2

from hw.bus import ArbitratedWriteSignature, EngineSignature
from hw.config import NPUConfig
from hw.isa import SOFTMAX_EXP_FRAC_BITS, Opcode
from hw.local_mem import check_config
from hw.vector.eltwise_engine import EltwiseEngine
from hw.vector.requant_engine import RequantEngine
from hw.vector.rounding_multiplier import RoundingMultiplier
from hw.vector.softmax_engine import SoftmaxEngine

__all__ = ["VectorUnit"]


class VectorUnit(wiring.Component):
    """The vector engine of the tile: :class:`~hw.vector.RequantEngine` (REQUANT, GELU),
    :class:`SoftmaxEngine` (SOFTMAX) and :class:`~hw.vector.EltwiseEngine` (ADD, LAYERNORM)
    behind one engine port.

    A command goes to the softmax engine if its opcode is SOFTMAX, to the element-wise engine
    if it is ADD or LAYERNORM, else to the requant engine (which reports ``BAD_OPCODE`` for
    anything but REQUANT and GELU). The command processor gives an engine one command at a
    time, so at most one of them is busy; the memory ports and the shared
    :class:`~hw.vector.RoundingMultiplier` (one 33x31 multiplier, four 18x18 DSPs, and one
    rounding shifter per lane: REQUANT's multiplier and row scale, GELU's two passes,
    SOFTMAX's exponent, ADD's and LAYERNORM's products) are shared: the memory ports are
    multiplexed by which one is busy, the multiplier's requests ORed (an engine's request is
    all zeros while its ``valid`` is low), with no extra latency. An engine is busy until its
    last result has left the multiplier, so every result goes to the engine that asked for it.

    Members
    -------
    engine : ``In(EngineSignature())``
    acc_rd, acc_wr, spad_wr
        As :class:`SoftmaxEngine` (``acc_wr`` is used by SOFTMAX only; its ``ready`` goes to
        the softmax engine).
    spad_rd : ``In(ReadPort.Signature(...))``
        A scratchpad read port for the element-wise engine's int8 inputs.
    """

    def __init__(self, config: NPUConfig, exp_frac_bits: int = SOFTMAX_EXP_FRAC_BITS):
        check_config(self, config)
        self.config = config
        self.exp_frac_bits = exp_frac_bits
        acc = {"addr_width": exact_log2(config.acc_rows), "shape": config.acc_row_bytes * 8}
        spad = {"addr_width": exact_log2(config.spad_rows), "shape": config.spad_row_bytes * 8}
        super().__init__({
            "engine": In(EngineSignature()),
            "acc_rd": In(ReadPort.Signature(**acc)),
            "acc_wr": In(ArbitratedWriteSignature(**acc)),
            "spad_wr": In(WritePort.Signature(**spad)),
            "spad_rd": In(ReadPort.Signature(**spad)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.requant = rq = RequantEngine(self.config)
        m.submodules.softmax = sm = SoftmaxEngine(self.config, self.exp_frac_bits)
        m.submodules.eltwise = el = EltwiseEngine(self.config)
        m.submodules.mul = mul = RoundingMultiplier(self.config.cols, self.config.cols)

        # -- command routing -----------------------------------------------------------------------
        op = self.engine.cmd.payload.header.opcode
        to_sm = op == Opcode.SOFTMAX
        to_el = (op == Opcode.ADD) | (op == Opcode.LAYERNORM)
        for e in (rq, sm, el):
            m.d.comb += e.engine.cmd.payload.eq(self.engine.cmd.payload)
        m.d.comb += [
            sm.engine.cmd.valid.eq(self.engine.cmd.valid & to_sm),
            el.engine.cmd.valid.eq(self.engine.cmd.valid & to_el),
            rq.engine.cmd.valid.eq(self.engine.cmd.valid & ~to_sm & ~to_el),
            self.engine.cmd.ready.eq(Mux(to_sm, sm.engine.cmd.ready,
                                         Mux(to_el, el.engine.cmd.ready, rq.engine.cmd.ready))),
            self.engine.done.eq(rq.engine.done | sm.engine.done | el.engine.done),
            self.engine.busy.eq(rq.engine.busy | sm.engine.busy | el.engine.busy),
            self.engine.error.eq(Mux(sm.engine.done, sm.engine.error,
                                     Mux(el.engine.done, el.engine.error, rq.engine.error))),
            self.engine.error_addr.eq(Mux(sm.engine.done, sm.engine.error_addr,
                                          Mux(el.engine.done, el.engine.error_addr,
                                              rq.engine.error_addr))),
        ]

        # -- memory ports --------------------------------------------------------------------------
        m.d.comb += [rq.acc_rd.data.eq(self.acc_rd.data), sm.acc_rd.data.eq(self.acc_rd.data),
                     el.acc_rd.data.eq(self.acc_rd.data)]
        wiring.connect(m, wiring.flipped(self.spad_rd), el.spad_rd)
        with m.If(el.engine.busy):
            m.d.comb += [self.acc_rd.en.eq(el.acc_rd.en), self.acc_rd.addr.eq(el.acc_rd.addr),
                         self.spad_wr.en.eq(el.spad_wr.en),
                         self.spad_wr.addr.eq(el.spad_wr.addr),
                         self.spad_wr.data.eq(el.spad_wr.data)]
        with m.Elif(sm.engine.busy):
            m.d.comb += [self.acc_rd.en.eq(sm.acc_rd.en), self.acc_rd.addr.eq(sm.acc_rd.addr),
                         self.spad_wr.en.eq(sm.spad_wr.en),
                         self.spad_wr.addr.eq(sm.spad_wr.addr),
                         self.spad_wr.data.eq(sm.spad_wr.data)]
        with m.Else():
            m.d.comb += [self.acc_rd.en.eq(rq.acc_rd.en), self.acc_rd.addr.eq(rq.acc_rd.addr),
                         self.spad_wr.en.eq(rq.spad_wr.en),
                         self.spad_wr.addr.eq(rq.spad_wr.addr),
                         self.spad_wr.data.eq(rq.spad_wr.data)]
        # -- shared multiplier -------------------------------------------------------------------
        # One engine at a time requests, and an engine's request is all zeros while its valid
        # is low (the element-wise engine's by construction, the others' gated here): the
        # requests are ORed, not multiplexed by the busy engine (no select fanning out to
        # every operand bit of every lane).
        width = len(mul.i.payload.as_value())
        m.d.comb += [
            mul.i.valid.eq(rq.o_mul.valid | sm.o_mul.valid | el.o_mul.valid),
            mul.i.payload.eq(rq.o_mul.payload.as_value() & rq.o_mul.valid.replicate(width)
                             | sm.o_mul.payload.as_value() & sm.o_mul.valid.replicate(width)
                             | el.o_mul.payload.as_value()),
        ]
        m.d.comb += [rq.i_mul.payload.eq(mul.o.payload), sm.i_mul.payload.eq(mul.o.payload),
                     el.i_mul.payload.eq(mul.o.payload),
                     rq.i_mul.valid.eq(mul.o.valid & ~sm.engine.busy & ~el.engine.busy),
                     sm.i_mul.valid.eq(mul.o.valid & sm.engine.busy),
                     el.i_mul.valid.eq(mul.o.valid & el.engine.busy)]

        m.d.comb += [self.acc_wr.en.eq(sm.acc_wr.en), self.acc_wr.addr.eq(sm.acc_wr.addr),
                     self.acc_wr.data.eq(sm.acc_wr.data), sm.acc_wr.ready.eq(self.acc_wr.ready)]
        return m
