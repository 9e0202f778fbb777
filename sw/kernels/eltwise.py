"""LAYERNORM (and ADD) over device-resident tensors as NPU command streams.

Inputs and output are in the linear kernel's activation layout
(:func:`sw.kernels.linear.pack_activations`): ``(NB, M, spad_row_bytes)`` int8, ``NB =
ceil(N / cols)`` element blocks of ``cols`` channels, so a projection's ``out_buffer`` goes
in and the output feeds the next projection. The element-wise engine reads the same blocked
layout from the scratchpad (:class:`hw.isa.EltwiseBody`: block ``b`` of row ``i`` at
``row + b * stride + i``), so a tile of ``Mt`` rows is one 2-D DMA per tensor (``NB`` DRAM
rows of ``Mt * spad_row_bytes`` bytes, ``M * spad_row_bytes`` apart) and one command.

Schedule (double-buffered over row tiles; the caller's semaphores ``L`` loads, ``R`` vector
commands, ``S`` stores, each signalled by one engine in its order, so a count names one
command): the parameters (:func:`pack_layernorm_params`, four accumulator rows per block)
load once; tile ``t``'s two loads go to buffer set ``t % 2`` and wait for the store of tile
``t - 2`` (same buffers); its command waits for its loads; its store waits for its command.
Loads of the next tile thus overlap the current tile's command and the previous tile's store.
"""

from __future__ import annotations

import operator

import numpy as np
import numpy.typing as npt

from hw.isa import DmaBody, EltwiseBody, LocalMem, Opcode, eltwise_param_rows, field_max
from sw.kernels.device_args import check_device_args
from sw.quant import INT32_MAX, INT32_MIN, check_int_values, check_multipliers, check_shifts
from sw.runtime import Buffer, CommandList, LocalUse, Semaphore, Stream
from sw.runtime.local import region

__all__ = ["pack_layernorm_params", "pack_add_params", "eltwise_tile_rows", "eltwise_fit",
           "eltwise_launch"]

_ROW_BYTES_LIMIT = field_max(DmaBody, "row_bytes") + 1


def _index(name: str, value) -> int:
    """``value`` as an int, or a TypeError naming ``name``."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _per_block(config, rows: list[np.ndarray]) -> np.ndarray:
    """Per-channel parameter vectors ``(N,)`` -> accumulator rows ``(NB * len(rows),
    acc_row_elems)`` int32, block by block (``rows`` in the order of one block)."""
    c = config
    n = len(rows[0])
    nb = _ceil_div(n, c.cols)
    out = np.zeros((nb, len(rows), c.acc_row_elems), np.int64)
    for i, r in enumerate(rows):
        pad = np.zeros(nb * c.cols, np.int64)
        pad[:n] = r
        out[:, i, :c.cols] = pad.reshape(nb, c.cols)
    return out.reshape(nb * len(rows), c.acc_row_elems).astype(np.uint32).view(np.int32)


def _channels(**params: npt.ArrayLike) -> tuple[int, ...]:
    """The common shape ``(N,)`` of per-channel parameter vectors (ValueError naming them
    otherwise)."""
    shapes = {name: np.shape(v) for name, v in params.items()}
    first = next(iter(shapes.values()))
    if len(first) != 1 or any(sh != first for sh in shapes.values()):
        raise ValueError("per-channel parameters must share a shape (N,), got " +
                         ", ".join(f"{name} {sh}" for name, sh in shapes.items()))
    return first


def pack_layernorm_params(config, ma: npt.ArrayLike, mb: npt.ArrayLike, gamma: npt.ArrayLike,
                          beta: npt.ArrayLike) -> np.ndarray:
    """LAYERNORM's accumulator rows (:class:`hw.isa.EltwiseBody`): per block ``ma``, ``mb``
    (``0..2**31-1``), ``gamma`` (bit 31 the sign, bits 0..30 the magnitude), ``beta``
    (int32); each argument ``(N,)``. Returns int32 ``(4 NB, acc_row_elems)``.

    Raises
    ------
    ValueError
        A value outside its field (the message names the argument, the range and the first
        bad value), or arguments of different shapes or not 1-D.
    TypeError
        A value that is not an integer (floats are refused unless integral, e.g. ``3.0``;
        bools are refused).
    """
    n = _channels(ma=ma, mb=mb, gamma=gamma, beta=beta)
    ma, mb = check_multipliers("ma", ma, shape=n), check_multipliers("mb", mb, shape=n)
    gamma = check_int_values("gamma", gamma, -INT32_MAX, INT32_MAX, shape=n)
    beta = check_int_values("beta", beta, INT32_MIN, INT32_MAX, shape=n)
    g = np.where(gamma < 0, (-gamma) | (1 << 31), gamma)
    return _per_block(config, [ma, mb, g, beta])


def pack_add_params(config, ma: npt.ArrayLike, mb: npt.ArrayLike) -> np.ndarray:
    """ADD's accumulator rows: per block ``ma``, ``mb`` (``0..2**31-1``), each ``(N,)``.

    Raises
    ------
    ValueError, TypeError
        As :func:`pack_layernorm_params`.
    """
    n = _channels(ma=ma, mb=mb)
    ma, mb = check_multipliers("ma", ma, shape=n), check_multipliers("mb", mb, shape=n)
    return _per_block(config, [ma, mb])


def eltwise_tile_rows(config, m: int, n_blocks: int,
                      spad_region: tuple[int, int] | None = None) -> int:
    """Rows per tile: the largest ``Mt <= M`` for which two buffer sets of three tensors
    (``6 * NB * Mt`` scratchpad rows) fit and a tile row fits a DMA's ``row_bytes``.

    Raises
    ------
    ValueError
        If not even one row fits, or the region is outside the scratchpad.
    TypeError
        If the region is not two integers.
    """
    _, rows = region(spad_region, config.spad_rows, "scratchpad")
    mt = min(m, rows // (6 * n_blocks), (_ROW_BYTES_LIMIT - 1) // config.spad_row_bytes,
             field_max(EltwiseBody, "stride"))
    if mt < 1:
        raise ValueError(f"{n_blocks} element blocks need at least {6 * n_blocks} scratchpad "
                         f"rows (one row of each of six tensor tiles), the "
                         f"{'scratchpad' if spad_region is None else 'region'} has {rows}")
    return mt


def eltwise_fit(config, opcode: Opcode, m: int, n_blocks: int, acc_row: int = 0,
                spad_region: tuple[int, int] | None = None) -> int:
    """Check that ``opcode`` (ADD, LAYERNORM) on ``m`` rows of ``n_blocks`` element blocks fits:
    its parameter rows (:func:`eltwise_param_rows`) from accumulator row ``acc_row``, and one
    tile row in the scratchpad (:func:`eltwise_tile_rows`, whose rows per tile it returns).

    Raises
    ------
    ValueError
        Naming what does not fit, what it needs and what there is.
    TypeError
        If ``acc_row`` or the region is not made of integers.
    """
    n_par = eltwise_param_rows(opcode, n_blocks)
    acc_row = _index("acc_row", acc_row)
    if acc_row < 0 or acc_row + n_par > config.acc_rows:
        raise ValueError(f"{opcode.name} of {n_blocks} element blocks needs {n_par} parameter "
                         f"rows from accumulator row {acc_row}, acc_rows={config.acc_rows}")
    return eltwise_tile_rows(config, m, n_blocks, spad_region)


def eltwise_launch(stream: Stream, opcode: Opcode, a_buf: Buffer, b_buf: Buffer,
                   p_buf: Buffer, o_buf: Buffer, *, m: int, n: int, shift: int,
                   g_shift: int = 0, sems: dict[str, Semaphore],
                   spad_region: tuple[int, int] | None = None, acc_row: int = 0,
                   timeout_cycles: int | None = None) -> int:
    """Launch ``opcode`` (``Opcode.LAYERNORM`` or ``Opcode.ADD``) over ``m`` rows of ``n``
    channels without waiting (see the module docstring); bit-exact with
    :func:`sw.golden.layernorm_int` / :func:`sw.golden.add_int`.

    Parameters
    ----------
    a_buf, b_buf, o_buf : Buffer
        int8 ``(NB, m, spad_row_bytes)`` each.
    p_buf : Buffer
        :func:`pack_layernorm_params` (or :func:`pack_add_params`), loaded to accumulator
        rows from ``acc_row``.
    shift, g_shift : int
        The command's input and gamma shifts (integers in 0..63).
    sems : dict of str to Semaphore
        ``"L"``, ``"R"``, ``"S"``, owned by the caller.

    Returns
    -------
    int
        Commands launched.

    Raises
    ------
    ValueError
        Bad opcode, sizes that do not fit (:func:`eltwise_fit`) or shifts out of range
        (naming the shift, the range and the value); a buffer smaller than its layout
        (``a_buf``, ``b_buf``, ``o_buf``: ``NB * m * spad_row_bytes`` bytes; ``p_buf``: its
        parameter rows, :func:`~hw.isa.eltwise_param_rows` ``* acc_row_bytes``), or a buffer
        or semaphore of another device than the stream's.
    TypeError
        A shift that is not an integer (floats are refused unless integral), or ``m``,
        ``n``, ``acc_row`` or the region not integers; a buffer or semaphore of the wrong
        type. This and the ValueErrors come before anything is launched.
    KeyError
        ``sems`` without ``"L"``, ``"R"`` or ``"S"``, before anything is launched.
    NPUError
        A freed buffer or semaphore, before anything is launched.
    LocalMemoryConflictError
        If a kernel of another stream that may run at the same time uses overlapping rows
        (:mod:`sw.runtime.local`), before the semaphores are counted.
    """
    if opcode not in (Opcode.LAYERNORM, Opcode.ADD):
        raise ValueError(f"eltwise_launch runs LAYERNORM or ADD, not {opcode!r}")
    shift = int(check_shifts("shift", shift, shape=()))
    g_shift = int(check_shifts("g_shift", g_shift, shape=()))
    c = stream.device.config
    m, n = _index("m", m), _index("n", n)
    if m < 1 or n < 1:
        raise ValueError(f"m and n must be >= 1, got {m}, {n}")
    srb, arb = c.spad_row_bytes, c.acc_row_bytes
    nb = _ceil_div(n, c.cols)
    n_par = eltwise_param_rows(opcode, nb)
    mt = eltwise_fit(c, opcode, m, nb, acc_row, spad_region)
    act = (nb, m, srb)
    check_device_args(stream, f"{opcode.name} of m={m}, n={n}",
                      {**{x: (buf, m * nb * srb, f"layout {act} int8")
                          for x, buf in (("a_buf", a_buf), ("b_buf", b_buf), ("o_buf", o_buf))},
                       "p_buf": (p_buf, n_par * arb,
                                 f"{n_par} accumulator rows of {arb} bytes")},
                      {f"sems[{x!r}]": sems[x] for x in "LRS"})
    s0 = 0 if spad_region is None else spad_region[0]
    use = LocalUse.regions(c, f"the {opcode.name} kernel", spad_region, (acc_row, n_par))
    stream.check_local(use)         # before the caller's semaphores are counted
    tensor = nb * mt                       # scratchpad rows of one tensor tile
    base = {x: sems[x].target() for x in "LRS"}
    count = dict.fromkeys("LRS", 0)
    cmds = CommandList()

    def kw(sig: str, wait: tuple[str, int] | None) -> dict:
        count[sig] += 1
        d: dict = {"signal": sems[sig].id}
        if wait is not None and wait[1] > 0:
            d["wait"] = (sems[wait[0]].id, (base[wait[0]] + wait[1]) & 0xFFFF_FFFF)
        return d

    cmds.dma_load(mem=LocalMem.ACC, dram_addr=p_buf.addr, dram_stride=arb, row_bytes=arb,
                  n_rows=n_par, local_row=acc_row, local_stride=1, **kw("L", None))
    tiles = [(i0, min(mt, m - i0)) for i0 in range(0, m, mt)]
    for t, (i0, rows) in enumerate(tiles):
        set0 = s0 + (t % 2) * 3 * tensor
        a_row, b_row, o_row = set0, set0 + tensor, set0 + 2 * tensor
        reuse = ("S", t - 1) if t >= 2 else None
        for row, buf in ((a_row, a_buf), (b_row, b_buf)):
            cmds.dma_load(mem=LocalMem.SPAD, dram_addr=buf.addr + i0 * srb, dram_stride=m * srb,
                          row_bytes=rows * srb, n_rows=nb, local_row=row, local_stride=rows,
                          **kw("L", reuse))
            reuse = None
        fields = {"a_row": a_row, "b_row": b_row, "out_row": o_row, "n_rows": rows,
                  "n_blocks": nb, "stride": rows, "param_row": acc_row, "shift": shift}
        if opcode == Opcode.LAYERNORM:
            cmds.layernorm(g_shift=g_shift, **fields, **kw("R", ("L", count["L"])))
        else:
            cmds.add(**fields, **kw("R", ("L", count["L"])))
        cmds.dma_store(mem=LocalMem.SPAD, dram_addr=o_buf.addr + i0 * srb, dram_stride=m * srb,
                       row_bytes=rows * srb, n_rows=nb, local_row=o_row, local_stride=rows,
                       **kw("S", ("R", count["R"])))
    for x in "LRS":
        sems[x].issued += count[x]
    kw_t = {} if timeout_cycles is None else {"timeout_cycles": timeout_cycles}
    stream.launch(cmds, **kw_t, local=use)
    return len(cmds)
