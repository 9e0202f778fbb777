"""The vector unit's shared arithmetic: one pipelined multiplier and one rounding shifter per lane.

REQUANT (per-channel multiplier, and the row scale of deferred softmax normalization) and
SOFTMAX (score difference to base-2 exponent) all compute the same thing per lane,
``(a * b + round) >> shift`` with round to nearest, ties toward +infinity. The vector unit runs
one command at a time, so the two engines share one :class:`RoundingMultiplier`
(:class:`hw.vector.VectorUnit` muxes its input by the busy engine).
"""

from amaranth.hdl import Cat, Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.isa.timing import VECTOR_MUL_LATENCY

__all__ = ["MUL_A_BITS", "MUL_B_BITS", "MUL_SHIFT_BITS", "MUL_Y_BITS", "MUL_LATENCY",
           "mul_request_layout", "mul_result_layout", "RoundingMultiplier"]

#: Operand ``a``: signed (the bias-added accumulator value, the row-scaled value, the score
#: difference), 33 bits.
MUL_A_BITS = 33
#: Operand ``b``: unsigned (a REQUANT multiplier or row reciprocal, the SOFTMAX ``mult``), 31 bits.
MUL_B_BITS = 31
#: Right shift 0..63.
MUL_SHIFT_BITS = 6
#: Result: ``(a * b + round) >> shift`` always fits in 64 signed bits (``|a * b| < 2**63``; for
#: ``shift >= 1`` the rounded quotient is below ``2**62 + 1``).
MUL_Y_BITS = 64
#: Cycles from a request (``i.valid``) to its result (``o.valid``): operand registers, partial
#: products, their sum, the rounding shift (one register each). Defined with the engine timing
#: (:data:`hw.isa.timing.VECTOR_MUL_LATENCY`); the pipeline below is built to it.
MUL_LATENCY = VECTOR_MUL_LATENCY

# The 33 x 31 product as four partial products, each fitting one 18x18 signed DSP multiplier
# (ECP5 MULT18X18D, iCE40 SB_MAC16 16x16 takes more): low halves are 17 bits unsigned.
_LO = 17


def _lane_request() -> data.StructLayout:
    return data.StructLayout({"a": signed(MUL_A_BITS), "b": unsigned(MUL_B_BITS),
                              "shift": unsigned(MUL_SHIFT_BITS)})


def mul_request_layout(lanes: int, tag_width: int) -> data.StructLayout:
    """Payload of a request: per lane ``a`` (signed 33), ``b`` (unsigned 31), ``shift``
    (unsigned 6), and a ``tag`` of ``tag_width`` bits that comes back with the result
    unchanged (the requester's own bookkeeping: which pass, which lanes are masked)."""
    return data.StructLayout({"lane": data.ArrayLayout(_lane_request(), lanes),
                              "tag": unsigned(tag_width)})


def mul_result_layout(lanes: int, tag_width: int) -> data.StructLayout:
    """Payload of a result: per lane ``y`` (signed 64) and the request's ``tag``."""
    return data.StructLayout({"y": data.ArrayLayout(signed(MUL_Y_BITS), lanes),
                              "tag": unsigned(tag_width)})


class RoundingMultiplier(wiring.Component):
    """Per lane ``y = (a * b + round) >> shift``, ``round = 2**(shift - 1)`` (0 if ``shift ==
    0``), exact: round to nearest, ties toward +infinity (the project's one rounding rule, see
    :class:`hw.isa.RequantBody`). ``>>`` is an arithmetic shift (floor).

    Pipeline (one register each, :data:`MUL_LATENCY` = 4 cycles, one request per cycle, no
    backpressure; the streams follow Amaranth's stream rules with ``ready`` always high):

    1. operand registers (the requesters' muxes stay off the multiplier's path);
    2. four partial products ``a_hi * b_hi``, ``a_hi * b_lo``, ``a_lo * b_hi``, ``a_lo * b_lo``
       with 17-bit unsigned low halves: four 18x18 signed DSP multipliers per lane, their
       adder tree in the next stage rather than behind the DSPs;
    3. their sum ``p = a * b`` (64 bits signed);
    4. the rounding shift as ``t = (2 * p >> shift) + 1`` and ``y = t >> 1``: for ``shift >= 1``
       ``floor((floor(p / 2**(shift - 1)) + 1) / 2) = floor((p + 2**(shift - 1)) / 2**shift)``
       (nested floor division), for ``shift == 0`` ``floor((2 * p + 1) / 2) = p``. One barrel
       shifter and an incrementer, no one-hot rounding constant.

    Parameters
    ----------
    lanes : int
        Parallel lanes (the array's columns), >= 1.
    tag_width : int
        Bits of the tag carried from request to result, >= 1.

    Members
    -------
    i : ``In(stream.Signature(mul_request_layout(lanes, tag_width), always_ready=True))``
    o : ``Out(stream.Signature(mul_result_layout(lanes, tag_width), always_ready=True))``
        ``o.valid`` is ``i.valid`` delayed by :data:`MUL_LATENCY` cycles.
    """

    def __init__(self, lanes: int, tag_width: int):
        for name, v in (("lanes", lanes), ("tag_width", tag_width)):
            if not isinstance(v, int) or v < 1:
                self._MustUse__silence = True       # not elaboratable: no unused warning
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        self.lanes, self.tag_width = lanes, tag_width
        super().__init__({
            "i": In(stream.Signature(mul_request_layout(lanes, tag_width), always_ready=True)),
            "o": Out(stream.Signature(mul_result_layout(lanes, tag_width), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        # Datapath registers are not reset (only the valid bits are): they hold nothing that
        # matters while their valid bit is low.
        tags = [Signal(self.tag_width, name=f"tag{k}", reset_less=True) for k in range(3)]
        valid = [Signal(name=f"valid{k}") for k in range(3)]
        shifts = [Signal(data.ArrayLayout(unsigned(MUL_SHIFT_BITS), lanes), name=f"shift{k}",
                         reset_less=True) for k in range(3)]
        m.d.sync += [valid[0].eq(self.i.valid), tags[0].eq(self.i.payload.tag)]
        m.d.sync += [valid[k + 1].eq(valid[k]) for k in range(2)]
        m.d.sync += [tags[k + 1].eq(tags[k]) for k in range(2)]
        m.d.sync += [shifts[k + 1].eq(shifts[k]) for k in range(2)]
        m.d.sync += [self.o.valid.eq(valid[2]), self.o.payload.tag.eq(tags[2])]

        for j in range(lanes):
            req = self.i.payload.lane[j]

            # -- stage 1: operand registers --------------------------------------------------
            a = Signal(signed(MUL_A_BITS), name=f"a{j}", reset_less=True)
            b = Signal(unsigned(MUL_B_BITS), name=f"b{j}", reset_less=True)
            m.d.sync += [a.eq(req.a), b.eq(req.b), shifts[0][j].eq(req.shift)]

            # -- stage 2: partial products (one DSP multiplier each) ------------------------
            a_lo, a_hi = a[:_LO], a[_LO:].as_signed()
            b_lo, b_hi = b[:_LO], b[_LO:]
            ll = Signal(unsigned(2 * _LO), name=f"pp_ll{j}", reset_less=True)
            hl = Signal(signed(MUL_A_BITS), name=f"pp_hl{j}", reset_less=True)
            lh = Signal(unsigned(MUL_B_BITS), name=f"pp_lh{j}", reset_less=True)
            hh = Signal(signed(MUL_A_BITS + MUL_B_BITS - 2 * _LO), name=f"pp_hh{j}",
                        reset_less=True)
            m.d.sync += [ll.eq(a_lo * b_lo), hl.eq(a_hi * b_lo), lh.eq(a_lo * b_hi),
                         hh.eq(a_hi * b_hi)]

            # -- stage 3: sum of the partial products -----------------------------------------
            # ll < 2**34 and hh is scaled by 2**34: their sum is a concatenation.
            p = Signal(signed(MUL_Y_BITS), name=f"p{j}", reset_less=True)
            outer = Cat(ll, hh).as_signed()
            m.d.sync += p.eq(outer + ((hl + lh) << _LO))

            # -- stage 4: rounding shift ------------------------------------------------------
            t = Signal(signed(MUL_Y_BITS + 1), name=f"t{j}", reset_less=True)
            m.d.sync += t.eq(((p << 1) >> shifts[2][j]) + 1)
            m.d.comb += self.o.payload.y[j].eq(t[1:].as_signed())
        return m

