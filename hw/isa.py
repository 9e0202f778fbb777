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
    "DmaBody", "MatmulBody", "RequantBody", "FenceBody", "Body", "Command",
    "Csr", "CSR_ID_VALUE", "CSR_VERSION_VALUE", "IrqBit", "queue_csr", "sem_csr",
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


class Flags(data.Struct):
    """Per-command flag bits (8 bits)."""
    wait: 1        #: wait for sem[wait_sem] >= wait_value before starting
    signal: 1      #: increment sem[signal_sem] when the command retires
    irq: 1         #: FENCE: raise the fence interrupt after the write
    accumulate: 1  #: MATMUL: add into the accumulator instead of overwriting
    relu: 1        #: REQUANT: clamp negative outputs to zero
    _pad: 3


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
    """
    acc_row: 16
    spad_row: 16
    n_rows: 16
    param_row: 16
    _pad: 128


class FenceBody(data.Struct):
    """FENCE: once all earlier commands of the queue retired, write ``value`` (32-bit,
    little-endian) to the 4-byte aligned DRAM address ``addr``; then raise ``irq`` if
    ``flags.irq``."""
    addr: 32
    value: 32
    _pad: 128


class Body(data.Union):
    raw: 192
    dma: DmaBody
    matmul: MatmulBody
    requant: RequantBody
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
CSR_VERSION_VALUE = 0x00010000  # 1.0


class Csr:
    """Byte offsets of the 32-bit CSRs on the AXI4-Lite ``csr`` port.

    Read-only configuration: ``CFG_ARRAY`` = rows | cols << 8 | n_queues << 16 | n_sems << 24;
    ``CFG_SPAD`` = spad_rows; ``CFG_ACC`` = acc_rows; ``CFG_BUS`` = axi_data_bytes |
    dma_outstanding << 8 | spad_row_bytes << 16 | acc_row_elems << 24; ``CFG_DRAM`` =
    dram_bytes.

    ``STATUS``: bit 0 busy (a queue holds unretired commands), bit 1 error latched.
    ``ERR_CODE``: :class:`ErrorCode` | queue << 8 | opcode << 16. ``ERR_CMD``: index of the
    failing command (commands fetched from that queue since its last reset, from 0).
    ``ERR_ADDR``: the offending address (DRAM byte address or local row).
    ``IRQ_STATUS`` (write 1 to clear) and ``IRQ_ENABLE``: bits of :class:`IrqBit`; ``irq`` is
    high while ``IRQ_STATUS & IRQ_ENABLE`` is non-zero. ``CYCLES_LO``/``CYCLES_HI``: free-running
    64-bit cycle counter; reading ``CYCLES_LO`` latches ``CYCLES_HI``. ``CONTROL``: write bit 0
    to clear the error, flush all queues (head := tail) and zero the semaphores.

    Per queue ``q`` at :func:`queue_csr`: ``RING_BASE`` (32-byte aligned DRAM address),
    ``RING_SIZE`` (commands, a power of two >= 2), ``HEAD`` (read-only, next slot the device
    fetches), ``TAIL`` (doorbell: the host writes the slot after its last command). The ring is
    empty when head == tail and holds at most ``RING_SIZE - 1`` commands.
    Semaphore ``s`` reads at :func:`sem_csr` (read-only).
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

    QUEUE_BASE = 0x100
    QUEUE_STRIDE = 0x10
    RING_BASE = 0x0
    RING_SIZE = 0x4
    HEAD = 0x8
    TAIL = 0xC

    SEM_BASE = 0x400


class IrqBit:
    FENCE = 1 << 0
    ERROR = 1 << 1


def queue_csr(queue: int, reg: int) -> int:
    """Byte offset of register ``reg`` (e.g. :attr:`Csr.TAIL`) of command queue ``queue``."""
    return Csr.QUEUE_BASE + queue * Csr.QUEUE_STRIDE + reg


def sem_csr(sem: int) -> int:
    """Byte offset of the read-only value of semaphore ``sem``."""
    return Csr.SEM_BASE + 4 * sem
