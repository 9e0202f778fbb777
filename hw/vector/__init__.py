"""The vector unit: requantization and the integer softmax on a shared multiplier (see
:mod:`hw.vector.vector_unit`)."""

from hw.vector.eltwise_engine import EltwiseEngine
from hw.vector.requant_engine import RequantEngine, gelu_lane
from hw.vector.rounding_multiplier import RoundingMultiplier
from hw.vector.softmax_engine import SoftmaxEngine, exp2_lane
from hw.vector.vector_unit import VectorUnit

__all__ = ["EltwiseEngine", "gelu_lane", "RequantEngine", "RoundingMultiplier", "SoftmaxEngine",
           "VectorUnit", "exp2_lane"]
