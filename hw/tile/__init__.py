"""The compute tile: systolic array, matrix engine and local memories
(see :mod:`hw.tile.compute_tile`)."""

from hw.tile.compute_tile import ComputeTile, TileStall, write_arbiter
from hw.tile.matrix_engine import MatrixEngine
from hw.tile.systolic_array import SystolicArray

__all__ = ["ComputeTile", "MatrixEngine", "SystolicArray", "TileStall", "write_arbiter"]
