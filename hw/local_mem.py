"""Helpers shared by the blocks that use the tile's local memories (scratchpad, accumulator):
port shapes, memory attributes and row-range checks."""

from amaranth.hdl import Mux
from amaranth.utils import exact_log2

from hw.config import NPUConfig

__all__ = ["RAM_ATTRS", "spad_shape", "acc_shape", "check_config", "check_rows"]


#: Attributes of the scratchpad and accumulator memories. ``ram_style = "block"`` makes Yosys'
#: ``memory_libmap`` use block RAM (ECP5 DP16KD, iCE40 SB_RAM40_4K) also for shallow memories,
#: where it would otherwise pick LUT RAM (the 16-row memories of the smallest test
#: configuration): the tile's buffers map to the same kind of RAM in every configuration, and
#: LUT RAM would take slices from the logic.
RAM_ATTRS = {"ram_style": "block"}


def spad_shape(cfg: NPUConfig) -> dict:
    return {"addr_width": exact_log2(cfg.spad_rows), "shape": cfg.spad_row_bytes * 8}


def acc_shape(cfg: NPUConfig) -> dict:
    return {"addr_width": exact_log2(cfg.acc_rows), "shape": cfg.acc_row_bytes * 8}



def check_config(component, config) -> None:
    if not isinstance(config, NPUConfig):
        component._MustUse__silence = True  # no "created but never used" warning on top
        raise TypeError(f"config must be an NPUConfig, not {config!r}")


def check_rows(start, count, depth: int):
    """Range check of local rows ``start .. start + count - 1`` against a memory of ``depth`` rows.

    Returns ``(bad, first_bad_row)`` as Amaranth values: ``bad`` is high if any of the rows is
    outside ``[0, depth)``; ``first_bad_row`` is then the lowest such row index, i.e.
    ``max(start, depth)``. ``count == 0`` is never bad.
    """
    bad = (count != 0) & (start + count > depth)
    return bad, Mux(start >= depth, start, depth)

