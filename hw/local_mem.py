"""Helpers shared by the blocks that use the tile's local memories (scratchpad, accumulator):
port shapes, memory attributes and row-range checks."""

from amaranth.hdl import Mux
from amaranth.utils import exact_log2

from hw.config import NPUConfig

__all__ = ["RAM_ATTRS", "spad_shape", "acc_shape", "check_config", "check_rows"]


#: Attributes of the scratchpad and accumulator memories.
#:
#: * ``ram_style = "block"`` makes Yosys' ``memory_libmap`` use block RAM (ECP5 DP16KD, iCE40
#:   SB_RAM40_4K) also for shallow memories, where it would otherwise pick LUT RAM (the 16-row
#:   memories of the smallest test configuration): the tile's buffers map to the same kind of
#:   RAM in every configuration, and LUT RAM would take slices from the logic.
#: * ``no_rw_check`` drops the logic that emulates Amaranth's read-during-write rule (a
#:   non-transparent read port reads the old row in the cycle another port writes it) across the
#:   ports of the block RAM copies, whose read data is undefined in such a collision (the write
#:   itself completes). On ECP5 the emulation held every write back a cycle behind a bypass
#:   multiplexer per read port: 8x8 (``npu area --config 8x8 --no-pnr``), the two memories'
#:   own logic went from 3,456 LUT4 and 1,516 FF to 562 and 257. The matrix engine's
#:   accumulate port is transparent for the write port and keeps its bypass (the 257 FF).
#:
#:   Only a program with a data race reads a row in the cycle another port writes it, where the
#:   read data is used: engines that share rows are ordered by semaphores, and a command signals
#:   after its last access to the memory, so a dependent access comes cycles later; within one
#:   command no engine writes rows it reads in the same memory (the element-wise engine refuses
#:   overlapping output rows, :class:`hw.isa.EltwiseBody`; SOFTMAX writes a scale row before any
#:   later read, :class:`hw.isa.SoftmaxBody`). An idle engine's read port may still read (its
#:   ``en`` stays at 1) and meet a write; its data is not used. ``scripts/memory_collisions.py``
#:   counts the collisions in fuzz streams' VCDs: none between a write and a same-row read of a
#:   busy engine in 140 streams (1.6M cycles; 8x8 and 4x4 under ``ideal``, ``jitter`` and
#:   ``bp50``, ``8x8,mx=1``, 16x16). A racy program reads the old row in simulation and
#:   undefined data on the FPGA.
RAM_ATTRS = {"ram_style": "block", "no_rw_check": 1}


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

