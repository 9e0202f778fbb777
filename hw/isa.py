"""Instruction set and register map of the NPU: defined once, used by hardware and software.

Commands are 32-byte (256-bit) little-endian words in a ring buffer in device DRAM: bit ``i`` of
the command is bit ``i % 8`` of byte ``i // 8``. Every command is a :class:`Command`: a
64-bit :class:`Header` shared by all opcodes and a 192-bit opcode-specific body.

The hardware decodes with these layouts; the runtime encodes with the same layouts
(:func:`encode` / :func:`decode`), so no field is declared twice.

Synchronization (see DESIGN.md): a command whose ``flags.wait`` is set does not start until
``sem[wait_sem] >= wait_value``; a command whose ``flags.signal`` is set increments
``sem[signal_sem]`` by one when it retires. Engines (DMA load, DMA store, matrix, vector) each
run their own commands in order and run concurrently with each other; the semaphores order
work across engines.
"""


import functools

from amaranth.lib import data, enum

__all__ = [
    "COMMAND_BYTES", "Opcode", "OPCODE_ENGINE", "ENGINE_NAMES", "LocalMem", "ErrorCode",
    "Flags", "Header",
    "DmaBody", "MatmulBody", "RequantBody", "SoftmaxBody", "FenceBody", "Body", "Command",
    "ROW_SCALE_SHIFT", "SOFTMAX_RECIP_BITS", "SOFTMAX_EXP_FRAC_BITS", "SOFTMAX_EXP_GUARD_BITS",
    "SOFTMAX_EXP_MAX_SHIFT", "softmax_exp_table",
    "Csr", "CSR_ID_VALUE", "CSR_VERSION_VALUE", "IrqBit", "queue_csr", "sem_csr",
    "sem_last_csr", "trace_csr", "MAX_QUEUES",
    "STALL_REASONS", "ENGINE_STALLS", "COUNTER_NAMES", "TIMING_COUNTERS", "COUNTER_BITS",
    "counter_csr", "engine_counter_csr",
    "encode", "decode", "CommandView",
]

COMMAND_BYTES = 32


class Opcode(enum.Enum, shape=8):
    """Command opcodes. Engine in brackets."""
    NOP = 0         #: [processor] does nothing (still honours wait/signal)
    DMA_LOAD = 1    #: [DMA load]  DRAM -> scratchpad or accumulator, 2-D strided
    DMA_STORE = 2   #: [DMA store] scratchpad or accumulator -> DRAM, 2-D strided
    MATMUL = 3      #: [matrix]    acc[acc_row + i] (+)= A[a_row + i] @ W[w_row:w_row+rows]
    REQUANT = 4     #: [vector]    spad[spad_row + i] = requant(acc[acc_row + i])
    FENCE = 5       #: [processor] after all earlier work retired: DRAM[addr] = value, irq
    WAIT = 6        #: [processor] block the queue until sem[wait_sem] >= wait_value
    SIGNAL = 7      #: [processor] sem[signal_sem] += 1
    BARRIER = 0x10  #: [processor] block the queue until all its earlier commands retired
    SOFTMAX = 8     #: [vector]    spad[P rows] = exp2 rows of acc[S rows]; acc[scale] = 1/sum


#: Which engine runs each opcode: "load", "store", "matrix", "vector" (the engine ports of
#: the command processor) or "processor" (the command processor itself). One definition for
#: the hardware's dispatch and the functional model.
OPCODE_ENGINE = {
    Opcode.NOP: "processor",
    Opcode.DMA_LOAD: "load",
    Opcode.DMA_STORE: "store",
    Opcode.MATMUL: "matrix",
    Opcode.REQUANT: "vector",
    Opcode.FENCE: "processor",
    Opcode.WAIT: "processor",
    Opcode.SIGNAL: "processor",
    Opcode.BARRIER: "processor",
    Opcode.SOFTMAX: "vector",
}
ENGINE_NAMES = ("load", "store", "matrix", "vector")


class LocalMem(enum.Enum, shape=2):
    """Which on-chip memory a DMA command addresses."""
    SPAD = 0  #: scratchpad, rows of ``spad_row_bytes`` int8
    ACC = 1   #: accumulator, rows of ``acc_row_elems`` int32 (little-endian in DRAM)


class ErrorCode(enum.Enum, shape=8):
    """Error codes latched in the ``ERR_CODE`` CSR. ``NONE`` means no error."""
    NONE = 0
    BAD_OPCODE = 1      #: unknown opcode
    BAD_DRAM_ADDR = 2   #: a DRAM access outside [0, dram_bytes)
    BAD_LOCAL_ADDR = 3  #: a scratchpad/accumulator row outside the memory
    MISALIGNED = 4      #: address or size not aligned as the command requires
    BAD_SIZE = 5        #: a size the engine cannot do (e.g. row_bytes not a multiple of the row)
    BAD_SEM = 6         #: semaphore id >= n_sems
    AXI_ERROR = 7       #: SLVERR/DECERR response on the memory bus
    WINDOW = 8          #: a DRAM access (ring fetch, fence, DMA) outside the queue's window


class Flags(data.Struct):
    """Per-command flag bits (8 bits)."""
    wait: 1        #: wait for sem[wait_sem] >= wait_value before starting
    signal: 1      #: increment sem[signal_sem] when the command retires
    irq: 1         #: FENCE: raise the fence interrupt after the write
    accumulate: 1  #: MATMUL: add into the accumulator instead of overwriting
    relu: 1        #: REQUANT: clamp negative outputs to zero
    transpose: 1   #: MATMUL: load the weight tile transposed (needs rows == cols)
    row_scale: 1   #: REQUANT: first multiply row i by its reciprocal (see RequantBody)
    _pad: 1


class Header(data.Struct):
    """Common 64-bit command header."""
    opcode: Opcode
    flags: Flags
    wait_sem: 8
    signal_sem: 8
    wait_value: 32


class DmaBody(data.Struct):
    """DMA_LOAD / DMA_STORE: a 2-D strided transfer of ``n_rows`` DRAM rows.

    DRAM row ``r`` is ``row_bytes`` bytes at ``dram_addr + r * dram_stride``. It maps onto
    ``row_bytes // local_row_bytes`` consecutive local rows starting at
    ``local_row + r * local_stride`` of memory ``mem``. ``row_bytes`` must be a multiple of the
    local row size; ``dram_addr`` and ``dram_stride`` must be multiples of
    ``min(local_row_bytes, axi_data_bytes)``. ``n_rows == 0`` or ``row_bytes == 0`` moves
    nothing and still completes.
    """
    dram_addr: 32    #: bytes
    dram_stride: 32  #: bytes
    row_bytes: 16    #: bytes per DRAM row
    n_rows: 16
    local_row: 16    #: row index in the local memory
    local_stride: 16  #: local rows between consecutive DRAM rows
    mem: LocalMem
    _pad: 62


class MatmulBody(data.Struct):
    """MATMUL on the weight-stationary systolic array.

    Weight tile: scratchpad rows ``w_row .. w_row + rows - 1``; row ``k`` holds
    ``W[k, 0:cols]`` (int8). Activations: scratchpad rows ``a_row .. a_row + m - 1``; row ``i``
    holds ``A[i, 0:rows]`` (int8). Result: accumulator row ``acc_row + i`` gets
    ``A[i] @ W`` (int32, ``cols`` elements), added to the old value if ``flags.accumulate``.

    With ``flags.transpose`` the weight tile is loaded column by column: array column ``n``
    gets the first ``rows`` bytes of scratchpad row ``w_row + n``, i.e. ``W[k, n] =
    spad[w_row + n][k]``. Keys stored one per scratchpad row thus become ``K^T`` (the score
    matmul ``Q @ K^T`` of attention) with no transpose in memory. Needs ``rows == cols``
    (``BAD_SIZE`` with ``error_addr`` 0 otherwise, checked after the opcode and ``m == 0``).
    """
    a_row: 16
    w_row: 16
    acc_row: 16
    m: 16            #: number of activation rows; 0 does nothing
    _pad: 128


class RequantBody(data.Struct):
    """REQUANT on the vector unit: int32 accumulator rows -> int8 scratchpad rows.

    Parameters per output channel ``j < cols`` live in three accumulator rows:
    ``bias = acc[param_row]``, ``multiplier = acc[param_row + 1]`` (0 .. 2**31-1),
    ``shift = acc[param_row + 2]`` (0 .. 63). For each row ``i < n_rows``::

        x = acc[acc_row + i][j] + bias[j]                       (33-bit, no wrap)
        y = (x * multiplier[j] + (1 << (shift[j] - 1) if shift[j] else 0)) >> shift[j]
        spad[spad_row + i][j] = clamp(y, -128, 127)   (then max(., 0) if flags.relu)

    i.e. round to nearest, ties toward +infinity (see :func:`sw.quant.requantize`).

    With ``flags.row_scale`` (deferred softmax normalization) each row is first scaled by its
    own reciprocal ``r_i = acc[scale_row + i // cols][i % cols]`` (low 31 bits, unsigned), as
    written by SOFTMAX, before the per-channel multiplier::

        x = clamp((x * r_i + 2**(ROW_SCALE_SHIFT - 1)) >> ROW_SCALE_SHIFT, -2**32, 2**32 - 1)

    The scale rows are checked after the parameter rows (``ceil(n_rows / cols)`` rows).
    """
    acc_row: 16
    spad_row: 16
    n_rows: 16
    param_row: 16
    scale_row: 16    #: first reciprocal row (only with ``flags.row_scale``)
    _pad: 112


#: REQUANT ``flags.row_scale``: the row reciprocal ``r_i`` is a fixed-point value with this many
#: fractional bits after the multiplication (``x * r_i >> ROW_SCALE_SHIFT``).
ROW_SCALE_SHIFT = 16
#: SOFTMAX reciprocal: ``r_i = floor((2**SOFTMAX_RECIP_BITS + sum_i // 2) / sum_i)`` (0 if the
#: row sum is 0), so ``x * r_i >> ROW_SCALE_SHIFT ~= x / sum_i * 2**16``.
SOFTMAX_RECIP_BITS = 32
#: SOFTMAX exponent: fractional bits ``F`` of the base-2 exponent (a ``2**F``-entry table).
SOFTMAX_EXP_FRAC_BITS = 4
#: SOFTMAX exponent: guard bits ``G`` of the table entries (``127 * 2**G * 2**(-f / 2**F)``).
SOFTMAX_EXP_GUARD_BITS = 7
#: SOFTMAX exponent: integer parts ``q >= SOFTMAX_EXP_MAX_SHIFT`` give exactly 0.
SOFTMAX_EXP_MAX_SHIFT = 8


def softmax_exp_table(frac_bits: int = SOFTMAX_EXP_FRAC_BITS,
                      guard_bits: int = SOFTMAX_EXP_GUARD_BITS) -> list[int]:
    """The SOFTMAX exponent table: ``round(127 * 2**guard_bits * 2**(-f / 2**frac_bits))`` for
    ``f < 2**frac_bits`` (round half up). Entry 0 is ``127 << guard_bits``."""
    import math
    return [math.floor(127 * (1 << guard_bits) * 2.0 ** (-f / (1 << frac_bits)) + 0.5)
            for f in range(1 << frac_bits)]


class SoftmaxBody(data.Struct):
    """SOFTMAX on the vector unit: integer base-2 softmax of score rows, row by row, with
    deferred normalization (P is left unnormalized, max -> 127; the reciprocal of each row sum
    goes to the accumulator for REQUANT ``flags.row_scale``).

    Score row ``i < n_rows`` is ``n_blocks`` accumulator rows: block ``b`` is
    ``acc[acc_row + b * stride + i][0:cols]`` = scores of keys ``b * cols .. b * cols + cols-1``
    (int32). Key ``k`` of row ``i`` is *valid* if ``k < kv_len`` and, if ``causal``,
    ``k <= q_offset + i``. With ``m_i`` the max of the valid scores of row ``i``::

        d = m_i - s                                   (>= 0, 33-bit, exact)
        n = (d * mult + (2**(shift - 1) if shift else 0)) >> shift   (base-2 exponent, F frac bits)
        q, f = n >> F, n % 2**F
        p = (T[f] + 2**(q + G - 1)) >> (q + G)   if q < SOFTMAX_EXP_MAX_SHIFT   else 0
        p = 0 for an invalid key

    with ``T = softmax_exp_table()`` (``F``, ``G`` = :data:`SOFTMAX_EXP_FRAC_BITS`,
    :data:`SOFTMAX_EXP_GUARD_BITS`). So ``p ~= 127 * 2**(-(m_i - s) * mult / 2**shift)``: with
    ``mult / 2**shift = scale * log2(e) * 2**F`` for a real score ``scale * s`` this is
    ``127 * exp(scale * (s - m_i))``. ``p`` (0..127) goes to ``spad[spad_row + b * stride +
    i][0:cols]`` (bytes ``>= cols`` are 0) -- the blocked activation layout of the ``P @ V``
    MATMUL. The row sum ``sum_i`` of the ``p`` values is exact; its reciprocal ``r_i =
    floor((2**32 + sum_i // 2) / sum_i)`` (0 for a fully masked row, whose ``p`` are all 0)
    goes to ``acc[scale_row + i // cols][i % cols]``; elements of a scale row beyond the last
    row are written 0.

    Errors (in this order): ``n_rows == 0`` or ``n_blocks == 0`` does nothing; accumulator
    rows of the scores, scratchpad rows of P, then the ``ceil(n_rows / cols)`` scale rows
    outside their memory -> ``BAD_LOCAL_ADDR`` (``error_addr`` the first bad row of the range:
    ``max(start, depth)`` with ``start = acc_row`` / ``spad_row`` and the range's last row
    ``start + (n_blocks - 1) * stride + n_rows - 1``).
    """
    acc_row: 16
    spad_row: 16
    n_rows: 16
    n_blocks: 16
    stride: 16
    scale_row: 16
    kv_len: 16       #: keys >= kv_len are masked (key padding)
    q_offset: 16     #: causal mask: key k is masked for row i if k > q_offset + i
    mult: 16         #: score units -> base-2 exponent units (unsigned)
    shift: 6
    causal: 1
    _pad: 41


class FenceBody(data.Struct):
    """FENCE: once all earlier commands of the queue retired, write ``value`` (32-bit,
    little-endian) to the 4-byte aligned DRAM address ``addr``; then raise ``irq`` if
    ``flags.irq``. With ``timestamp`` set the word written is the low 32 bits of the cycle
    counter (``CYCLES``) at the write instead of ``value`` (the runtime's event timestamps).
    """
    addr: 32
    value: 32
    timestamp: 1
    _pad: 127


class Body(data.Union):
    raw: 192
    dma: DmaBody
    matmul: MatmulBody
    requant: RequantBody
    softmax: SoftmaxBody
    fence: FenceBody


class Command(data.Struct):
    """One 256-bit command."""
    header: Header
    body: Body


@functools.cache
def _fields(layout: data.Layout) -> dict:
    """``{name: (offset, width, sub)}`` of a layout; ``sub`` is a nested Layout, an enum class,
    or None. Computed once per layout: Amaranth's own ``Layout.const`` re-derives sizes on every
    call (about 1 ms per command), too slow for kernels of thousands of commands."""
    table = {}
    for name, field in layout:
        shape = field.shape
        if isinstance(shape, type) and issubclass(shape, data.Struct | data.Union):
            shape = shape.as_shape()
        if isinstance(shape, data.Layout):
            table[name] = (field.offset, shape.size, shape)
        elif isinstance(shape, type) and issubclass(shape, enum.Enum):
            table[name] = (field.offset, shape.as_shape().width, shape)
        else:
            table[name] = (field.offset, field.width, None)
    return table


def _pack(layout: data.Layout, fields: dict) -> int:
    table = _fields(layout)
    bits = 0
    for name, value in fields.items():
        try:
            offset, width, sub = table[name]
        except KeyError:
            raise ValueError(f"{name!r} is not a field of {layout!r}; fields: "
                             f"{', '.join(table)}") from None
        if isinstance(value, dict):
            if not isinstance(sub, data.Layout):
                raise ValueError(f"field {name!r} is not a struct")
            value = _pack(sub, value)
        else:
            value = int(value.value if isinstance(value, enum.Enum) else value)
            if not 0 <= value < (1 << width):
                raise ValueError(f"field {name!r} = {value} does not fit in {width} unsigned "
                                 "bits")
        bits |= value << offset
    return bits


class CommandView:
    """Read-only view of an encoded command: attribute access walks the layout (e.g.
    ``view.header.opcode``, ``view.body.dma.n_rows``). Enum fields return the enum member, or
    the plain integer for a value the enum does not define; other fields return ``int``."""

    __slots__ = ("_layout", "_bits")

    def __init__(self, layout: data.Layout, bits: int):
        self._layout = layout
        self._bits = bits

    def __getattr__(self, name: str):
        try:
            offset, width, sub = _fields(self._layout)[name]
        except KeyError:
            raise AttributeError(name) from None
        value = (self._bits >> offset) & ((1 << width) - 1)
        if isinstance(sub, data.Layout):
            return CommandView(sub, value)
        if sub is not None:
            try:
                return sub(value)
            except ValueError:
                return value
        return value

    def as_bits(self) -> int:
        return self._bits


def encode(fields: dict) -> bytes:
    """Encode a command given as a nested dict of :class:`Command` fields, e.g.
    ``{"header": {"opcode": Opcode.FENCE, "flags": {"irq": 1}}, "body": {"fence": {...}}}``.
    Missing fields are 0.

    Returns
    -------
    bytes
        :data:`COMMAND_BYTES` bytes, little-endian.

    Raises
    ------
    ValueError
        For an unknown field or a value that does not fit its field.
    """
    return _pack(Command.as_shape(), fields).to_bytes(COMMAND_BYTES, "little")


def decode(raw: bytes) -> CommandView:
    """Decode :data:`COMMAND_BYTES` bytes into a :class:`CommandView` of a :class:`Command`.

    Raises
    ------
    ValueError
        If ``raw`` is not exactly :data:`COMMAND_BYTES` long.
    """
    if len(raw) != COMMAND_BYTES:
        raise ValueError(f"a command is {COMMAND_BYTES} bytes, got {len(raw)}")
    return CommandView(Command.as_shape(), int.from_bytes(raw, "little"))


# -- CSR map (AXI4-Lite, 32-bit registers, byte offsets) ---------------------------------------

CSR_ID_VALUE = 0x4E505530       # "NPU0"
CSR_VERSION_VALUE = 0x00020000  # 2.0: the PERF_* registers moved into the counter block


class Csr:
    """Byte offsets of the 32-bit CSRs on the AXI4-Lite ``csr`` port (12-bit address space).

    Read-only configuration: ``CFG_ARRAY`` = rows | cols << 8 | n_queues << 16 | n_sems << 24;
    ``CFG_SPAD`` = spad_rows; ``CFG_ACC`` = acc_rows; ``CFG_BUS`` = axi_data_bytes |
    dma_outstanding << 8 | spad_row_bytes << 16 | acc_row_elems << 24; ``CFG_DRAM`` =
    dram_bytes.

    Global status and control (``0x020..0x04C``):

    * ``STATUS``: bit 0 busy (some queue holds unretired commands), bit 1 error (some queue
      has an error latched).
    * ``ERR_CODE`` / ``ERR_CMD`` / ``ERR_ADDR``: the *first* error since it was last cleared
      (compatibility view of the per-queue registers): :class:`ErrorCode` | queue << 8 |
      opcode << 16; index of the failing command (commands fetched from that queue since its
      last reset, from 0); the offending address (DRAM byte address, local row, semaphore id).
      Cleared by ``CONTROL`` or by a ``QUEUE_RESET`` of the queue it names.
    * ``IRQ_STATUS`` (write 1 to clear) and ``IRQ_ENABLE``: bits of :class:`IrqBit`; ``irq`` is
      high while ``IRQ_STATUS & IRQ_ENABLE`` is non-zero.
    * ``CYCLES_LO``/``CYCLES_HI``: free-running 64-bit cycle counter; reading ``CYCLES_LO``
      latches ``CYCLES_HI``.
    * ``CONTROL``: write bit 0 to reset every queue (as ``QUEUE_RESET`` with all bits), clear
      every error and zero the semaphores and their ``SEM_LAST`` records.
    * ``QUEUE_RESET`` (write-only): bit ``q`` resets queue ``q`` alone: its engine FIFOs and
      staged command are dropped (a command already inside an engine finishes but neither
      signals nor reports an error), ``HEAD := TAIL``, its command index restarts at 0 and
      its error latch is cleared. Semaphores and the other queues are not touched.
    * ``QUEUE_ERRORS`` / ``QUEUE_BUSY`` (read-only): bit ``q`` = queue ``q`` has an error
      latched / holds unretired commands.

    ``0x050..0x07F`` are free (the 1.x ``PERF_*`` registers moved into the counter block).

    Command trace (``0x080..0x0BF``): one FIFO of ``trace_depth`` entries per engine, filled
    when the engine retires a command; engine ``e`` at ``TRACE_BASE + TRACE_STRIDE * e``:
    ``TRACE_INFO`` = valid << 31 | overflow << 30 | queue << 24 | command index[23:0] of the
    oldest entry (valid = the FIFO is not empty; overflow = entries were dropped because the
    FIFO was full, sticky until ``CONTROL``); ``TRACE_START`` / ``TRACE_END``: low 32 bits of
    ``CYCLES`` when the engine took the command / pulsed ``done``; writing ``TRACE_POP``
    drops the oldest entry.

    Per queue ``q`` at :func:`queue_csr` (``QUEUE_BASE + QUEUE_STRIDE * q``): ``RING_BASE``
    (32-byte aligned DRAM address), ``RING_SIZE`` (commands, a power of two >= 2), ``HEAD``
    (read-only, next slot the device fetches), ``TAIL`` (doorbell: the host writes the slot
    after its last command). The ring is empty when head == tail and holds at most
    ``RING_SIZE - 1`` commands. ``WINDOW_BASE`` / ``WINDOW_LIMIT``: the DRAM window
    ``[base, limit)`` the queue may touch (ring fetch, fence writes, DMA); ``WINDOW_LIMIT == 0``
    means ``dram_bytes`` (the reset state: the whole DRAM). An access outside is a
    ``WINDOW`` error and nothing is written. ``Q_STATUS``: bit 0 busy, bit 1 error latched.
    ``Q_ERR_CODE`` (code | opcode << 16), ``Q_ERR_CMD``, ``Q_ERR_ADDR``: the queue's latched
    error. ``Q_FETCHED``: commands fetched since the queue's last reset.

    Performance counters (``CNT_BASE`` = ``0x500`` .. ``0x59F``, just above the registers of
    :data:`MAX_QUEUES` queues): see :data:`COUNTER_NAMES` for the definitions. Every counter
    is free-running from reset (never cleared by ``CONTROL``), 32 bits wide and wraps modulo
    2**32, except the 64-bit cycle count; the difference of two snapshots taken less than
    2**32 cycles (bytes) apart is exact modulo 2**32.

    * ``CNT_SNAPSHOT`` (write-only, any value): copies every counter and ``CYCLES`` into the
      snapshot registers in one clock edge, so one snapshot is one instant of the device.
      The write takes effect in the cycle ``s`` in which the CSR block accepts it (the cycle
      after both AW and W were taken); ``CNT_CYCLES`` then reads ``s`` (the value of
      ``CYCLES`` in that cycle) and every other counter holds what happened in the cycles
      ``c < s`` since reset (cycles, commands or bytes). The difference of snapshots at
      ``s1 < s2`` therefore covers exactly the cycles ``s1 <= c < s2``: those in which
      ``CYCLES`` reads ``s1`` .. ``s2 - 1`` (the edges a VCD tool counts, see
      :mod:`cosim.waves`), and ``CNT_CYCLES`` differs by ``s2 - s1``.
    * ``CNT_CYCLES_LO`` / ``CNT_CYCLES_HI``: ``CYCLES`` at the last snapshot (64-bit).
    * ``CNT_BYTES_READ``, ``CNT_BYTES_WRITTEN``, ``CNT_DMA_BUSY``, ``CNT_OVERLAP`` and, per
      engine ``e`` (index in :data:`ENGINE_NAMES`) at :func:`engine_counter_csr`
      (``CNT_ENGINE_BASE + CNT_ENGINE_STRIDE * e``): ``CNT_BUSY``, ``CNT_RETIRED`` and the
      stall counters at ``CNT_STALL + 4 * r`` for ``r`` the index in :data:`STALL_REASONS`.
      All read the last snapshot (0 before the first). A stall register of a pair that is not
      in :data:`ENGINE_STALLS` (e.g. ``matrix``/``dram_read``) always reads 0.

    Layout: ``0x500`` SNAPSHOT, ``0x504``/``0x508`` CYCLES_LO/HI, ``0x50C`` reserved,
    ``0x510`` BYTES_READ, ``0x514`` BYTES_WRITTEN, ``0x518`` DMA_BUSY, ``0x51C`` OVERLAP; engine
    ``e`` (load, store, matrix, vector) at ``0x520 + 0x20 * e``: ``+0x00`` BUSY, ``+0x04``
    RETIRED, ``+0x08`` stall sem, ``+0x0C`` dram_read, ``+0x10`` dram_write, ``+0x14`` spad,
    ``+0x18`` acc, ``+0x1C`` reserved. :func:`counter_csr` maps a counter name to its
    register.

    Semaphore ``s`` reads at :func:`sem_csr` (read-only); ``SEM_LAST_BASE + 4 * s``: what last
    incremented it: valid << 31 | queue << 24 | command index[23:0] (read-only; zeroed by
    ``CONTROL``).
    """
    ID = 0x000
    VERSION = 0x004
    CFG_ARRAY = 0x008
    CFG_SPAD = 0x00C
    CFG_ACC = 0x010
    CFG_BUS = 0x014
    CFG_DRAM = 0x018
    STATUS = 0x020
    ERR_CODE = 0x024
    ERR_CMD = 0x028
    ERR_ADDR = 0x02C
    IRQ_STATUS = 0x030
    IRQ_ENABLE = 0x034
    CYCLES_LO = 0x038
    CYCLES_HI = 0x03C
    CONTROL = 0x040
    QUEUE_RESET = 0x044
    QUEUE_ERRORS = 0x048
    QUEUE_BUSY = 0x04C

    TRACE_BASE = 0x080
    TRACE_STRIDE = 0x10
    TRACE_INFO = 0x0
    TRACE_START = 0x4
    TRACE_END = 0x8
    TRACE_POP = 0xC

    QUEUE_BASE = 0x100
    QUEUE_STRIDE = 0x40
    RING_BASE = 0x00
    RING_SIZE = 0x04
    HEAD = 0x08
    TAIL = 0x0C
    WINDOW_BASE = 0x10
    WINDOW_LIMIT = 0x14
    Q_STATUS = 0x18
    Q_ERR_CODE = 0x1C
    Q_ERR_CMD = 0x20
    Q_ERR_ADDR = 0x24
    Q_FETCHED = 0x28

    CNT_BASE = 0x500
    CNT_SNAPSHOT = 0x500        #: write: snapshot every counter (reads 0)
    CNT_CYCLES_LO = 0x504
    CNT_CYCLES_HI = 0x508
    CNT_BYTES_READ = 0x510
    CNT_BYTES_WRITTEN = 0x514
    CNT_DMA_BUSY = 0x518
    CNT_OVERLAP = 0x51C
    CNT_ENGINE_BASE = 0x520
    CNT_ENGINE_STRIDE = 0x20
    CNT_BUSY = 0x00
    CNT_RETIRED = 0x04
    CNT_STALL = 0x08            #: + 4 * index in STALL_REASONS
    CNT_END = 0x5A0             #: first offset after the counter block

    SEM_BASE = 0x800
    SEM_LAST_BASE = 0xC00


class IrqBit:
    FENCE = 1 << 0
    ERROR = 1 << 1


def queue_csr(queue: int, reg: int) -> int:
    """Byte offset of register ``reg`` (e.g. :attr:`Csr.TAIL`) of command queue ``queue``."""
    return Csr.QUEUE_BASE + queue * Csr.QUEUE_STRIDE + reg


def sem_csr(sem: int) -> int:
    """Byte offset of the read-only value of semaphore ``sem``."""
    return Csr.SEM_BASE + 4 * sem


def sem_last_csr(sem: int) -> int:
    """Byte offset of the read-only record of what last incremented semaphore ``sem``."""
    return Csr.SEM_LAST_BASE + 4 * sem


def trace_csr(engine: int, reg: int) -> int:
    """Byte offset of trace register ``reg`` (e.g. :attr:`Csr.TRACE_INFO`) of engine
    ``engine`` (index in :data:`ENGINE_NAMES`)."""
    return Csr.TRACE_BASE + engine * Csr.TRACE_STRIDE + reg


#: Most command queues the register map has room for: the queue registers
#: (``QUEUE_BASE + QUEUE_STRIDE * q``) end where the counter block starts. ``NPUConfig``
#: checks ``n_queues`` against this.
MAX_QUEUES = (Csr.CNT_BASE - Csr.QUEUE_BASE) // Csr.QUEUE_STRIDE


# -- performance counters ------------------------------------------------------------------------

#: Stall reasons, in register order (``Csr.CNT_STALL + 4 * index``):
#:
#: * ``sem``: the engine is idle (its ``busy`` is low) and cannot take a command although it
#:   has one: at least one queue that is neither stopped (error latched) nor being reset holds
#:   a command in this engine's FIFO, and the head command of every such queue waits on an
#:   unsatisfied semaphore (``flags.wait`` and ``sem[wait_sem] < wait_value``). Commands
#:   still in the command processor's stage or ring do not count.
#: * ``dram_read``, ``dram_write``, ``spad``, ``acc``: the engine is busy and its block
#:   reports that it waits for the DRAM read data / the DRAM write channel / a scratchpad port
#:   / an accumulator port (``DMA.stall``, ``ComputeTile.stall``). A cycle may count under
#:   several reasons if the block reports several at once.
STALL_REASONS = ("sem", "dram_read", "dram_write", "spad", "acc")

#: The (engine, stall reason) pairs that can happen and are counted. The other registers of
#: the regular map always read 0 and are not in :data:`COUNTER_NAMES`.
ENGINE_STALLS = {
    "load": ("sem", "dram_read", "spad", "acc"),
    "store": ("sem", "dram_write"),
    "matrix": ("sem",),
    "vector": ("sem", "acc"),
}


def _counter_names() -> tuple[str, ...]:
    names = ["bytes_read", "bytes_written", "dma_busy", "overlap"]
    for e in ENGINE_NAMES:
        names += [f"busy.{e}", f"retired.{e}"] + [f"stall.{e}.{r}" for r in ENGINE_STALLS[e]]
    return tuple(names)


#: Every 32-bit event counter of the counter block, by its stable dotted name (``cycles``, the
#: 64-bit ``CYCLES`` at the snapshot, comes on top). Units and definitions, per cycle ``c``:
#:
#: * ``bytes_read`` (bytes): ``axi_data_bytes`` per R handshake (``rvalid & rready``) on
#:   the NPU's ``mem`` port -- every read burst, ring fetches included, whole beats;
#: * ``bytes_written`` (bytes): the number of set ``wstrb`` bits per W handshake on ``mem``
#:   (DMA stores and fence writes);
#: * ``dma_busy`` (cycles): the load or the store channel is busy;
#: * ``overlap`` (cycles): a DMA channel and the matrix engine are both busy;
#: * ``busy.<engine>`` (cycles): the engine's ``busy`` is high (from the cycle after it took
#:   a command to its ``done`` pulse, inclusive);
#: * ``retired.<engine>`` (commands): ``done`` pulses of the engine: every command it
#:   finished, with or without an error (also one whose queue was reset meanwhile);
#: * ``stall.<engine>.<reason>`` (cycles): see :data:`STALL_REASONS`; only the pairs of
#:   :data:`ENGINE_STALLS`.
COUNTER_NAMES = _counter_names()

#: The counters that measure time (cycles); the untimed functional model has none of them.
TIMING_COUNTERS = ("cycles", "dma_busy", "overlap",
                   *(n for n in COUNTER_NAMES if n.startswith(("busy.", "stall."))))

#: Width of each counter in bits: they wrap modulo ``2 ** COUNTER_BITS[name]``.
COUNTER_BITS = {"cycles": 64, **dict.fromkeys(COUNTER_NAMES, 32)}


def engine_counter_csr(engine: int, reg: int) -> int:
    """Byte offset of counter register ``reg`` (:attr:`Csr.CNT_BUSY`, :attr:`Csr.CNT_RETIRED`,
    ``Csr.CNT_STALL + 4 * r``) of engine ``engine`` (index in :data:`ENGINE_NAMES`)."""
    return Csr.CNT_ENGINE_BASE + engine * Csr.CNT_ENGINE_STRIDE + reg


def counter_csr(name: str) -> int:
    """Byte offset of the snapshot register of counter ``name`` (one of
    :data:`COUNTER_NAMES`).

    Raises
    ------
    KeyError
        For an unknown name (the message lists the valid ones).
    """
    try:
        return _COUNTER_CSRS[name]
    except KeyError:
        raise KeyError(f"unknown counter {name!r}; counters: {', '.join(COUNTER_NAMES)}"
                       ) from None


def _counter_csrs() -> dict[str, int]:
    out = {"bytes_read": Csr.CNT_BYTES_READ, "bytes_written": Csr.CNT_BYTES_WRITTEN,
           "dma_busy": Csr.CNT_DMA_BUSY, "overlap": Csr.CNT_OVERLAP}
    for e, name in enumerate(ENGINE_NAMES):
        out[f"busy.{name}"] = engine_counter_csr(e, Csr.CNT_BUSY)
        out[f"retired.{name}"] = engine_counter_csr(e, Csr.CNT_RETIRED)
        for reason in ENGINE_STALLS[name]:
            out[f"stall.{name}.{reason}"] = engine_counter_csr(
                e, Csr.CNT_STALL + 4 * STALL_REASONS.index(reason))
    assert list(out) == list(COUNTER_NAMES)
    assert max(out.values()) < Csr.CNT_END
    assert engine_counter_csr(len(ENGINE_NAMES), 0) == Csr.CNT_END
    assert Csr.CNT_STALL + 4 * len(STALL_REASONS) <= Csr.CNT_ENGINE_STRIDE
    return out


_COUNTER_CSRS = _counter_csrs()
