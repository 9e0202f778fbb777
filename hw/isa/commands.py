"""Command layouts of the NPU and their encoding: defined once, used by hardware and software.

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
    "DmaBody", "MatmulBody", "RequantBody", "SoftmaxBody", "EltwiseBody", "FenceBody",
    "TlbInvalidateBody", "Body", "Command", "eltwise_param_rows",
    "OPCODE_BODY", "error_stage", "encode", "decode", "CommandView", "body_fields", "pack_fields",
    "unpack_fields", "field_max",
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
    TLB_INVALIDATE = 0x11  #: [processor] after all earlier work retired: drop TLB entries
    ADD = 0x20      #: [vector]    spad[out] = requant(a * ma + b * mb), int8 inputs (EltwiseBody)
    LAYERNORM = 0x21  #: [vector]  spad[out] = LayerNorm(a * ma + b * mb) * gamma + beta
    GELU = 0x22     #: [vector]    spad[spad_row + i] = GELU(acc[acc_row + i]) (RequantBody)


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
    Opcode.TLB_INVALIDATE: "processor",
    Opcode.ADD: "vector",
    Opcode.LAYERNORM: "vector",
    Opcode.GELU: "vector",
}
ENGINE_NAMES = ("load", "store", "matrix", "vector")


class LocalMem(enum.Enum, shape=2):
    """Which on-chip memory a DMA command addresses."""
    SPAD = 0  #: scratchpad, rows of ``spad_row_bytes`` int8
    ACC = 1   #: accumulator, rows of ``acc_row_elems`` int32 (little-endian in DRAM)


class ErrorCode(enum.Enum, shape=8):
    """Error codes latched in the ``ERR_CODE`` CSR. ``NONE`` means no error.

    ``AXI_ERROR`` is an SLVERR or DECERR response of device DRAM to a burst the device issued
    (both give the same code). Per site, with ``ERR_ADDR``:

    * ring fetch: the command is never decoded (``ERR_CODE.opcode`` 0, checked before the
      opcode), ``HEAD`` stays on it; ``ERR_ADDR`` = its slot address. A fetch burst may read
      several commands; when the DRAM answers such a burst with an error, its commands are
      dropped and read again one per burst (the next ``fetch_depth`` fetches of the queue),
      so the error names the command whose own 32-byte burst failed and the commands before
      it run;
    * DMA_LOAD / DMA_STORE: the transfer runs to its end (same timing), then fails;
      ``ERR_ADDR`` = the address of the first failing burst (``AxADDR``). A load writes no
      local row whose last byte arrives with or after that burst (rows completed before it
      are written); of a DRAM row at an address that is not a multiple of ``G``
      (:class:`hw.isa.timing.DmaRow`) a local row arrives with the R beat after the first
      one holding its last chunk (the realigned word spans both), or with the row's last
      beat if that chunk is in the flush word. A store writes every burst that did not
      fail (a failing write burst writes nothing);
    * FENCE: nothing written, no interrupt, no semaphore increment; ``ERR_ADDR`` = the fence
      address.
    """
    NONE = 0
    BAD_OPCODE = 1      #: unknown opcode
    BAD_DRAM_ADDR = 2   #: a DRAM access outside [0, dram_bytes)
    BAD_LOCAL_ADDR = 3  #: a scratchpad/accumulator row outside the memory
    MISALIGNED = 4      #: a ring base or fence address not aligned as required (not the DMA)
    #: a size or number format that cannot be done (MatmulBody, SoftmaxBody), or a ring's
    #: RING_SIZE, HEAD and TAIL (ring_is_bad)
    BAD_SIZE = 5
    BAD_SEM = 6         #: semaphore id >= n_sems
    AXI_ERROR = 7       #: SLVERR/DECERR response on the memory bus
    WINDOW = 8          #: a DRAM access (ring fetch, fence, DMA) outside the queue's window
    PAGE_NOT_MAPPED = 9  #: a DMA burst's virtual page is not mapped (:mod:`hw.isa.vm`)
    PAGE_PERMISSION = 10  #: a DMA burst's page lacks the permission (read / write)


def error_stage(code: int, opcode: int) -> str:
    """Where a queue's error was found, from its report (``Q_ERR_CODE``'s ``code`` and
    ``opcode``): ``"fetch"`` when the command was never dispatched (``BAD_OPCODE``,
    ``BAD_SEM``, and the ring checks and bus faults of the fetch, reported with opcode 0),
    ``"fence"`` for a FENCE's write, ``"engine"`` when an engine ran the command and retired
    it with the error. It decides where ``HEAD`` stops (:mod:`hw.isa`, *Errors*): on the
    failing command ``i``, at ``i + 1``, at ``i + 1`` or ``i + 2``."""
    if code in (ErrorCode.BAD_OPCODE.value, ErrorCode.BAD_SEM.value):
        return "fetch"
    if opcode == Opcode.FENCE.value:
        return "fence"
    engine = {op.value: e for op, e in OPCODE_ENGINE.items()}.get(opcode, "processor")
    return "fetch" if engine == "processor" else "engine"


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

    DRAM row ``r`` is ``row_bytes`` bytes at ``dram_addr + r * dram_stride`` (any byte
    address, stride and length). It maps onto ``ceil(row_bytes / local_row_bytes)``
    consecutive local rows starting at ``local_row + r * local_stride`` of memory ``mem``, a
    little-endian byte copy; when ``local_row_bytes`` does not divide ``row_bytes`` the last
    local row is partial: DMA_LOAD writes its remaining bytes as 0, DMA_STORE writes only the
    row's bytes to DRAM. ``n_rows == 0`` or ``row_bytes == 0`` moves nothing and still
    completes.
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

    K blocks: with ``k_len = B - 1 > 0`` (as AXI's ``AxLEN``: 0 is one tile) one command sums
    ``B`` tiles along K: tile ``j`` has the weights at ``w_row + j * rows`` and the
    activations at ``a_row + j * m`` (``A_j[i]`` = scratchpad row ``a_row + j * m + i``), and
    ``acc[acc_row + i] (+)= sum_j A_j[i] @ W_j`` (``flags.accumulate`` as for one tile; the
    sum wraps modulo 2**32). So the scratchpad rows read are ``a_row .. a_row + B * m - 1``
    and ``w_row .. w_row + B * rows - 1``. One command then does the work of ``B`` (a GEMV
    with ``m = 1`` needs one command per N block and K chunk, not per tile).

    Number formats (``w_fmt``, ``a_fmt``, ``x_base``; all 0: the int8 MATMUL above): the
    layouts of int4 and MXINT8 tiles, which replace ``rows`` and ``m`` above by the tile's
    scratchpad rows (:func:`hw.isa.weight_tile_rows`, :func:`hw.isa.act_tile_rows`), and the
    MX exponent alignment are defined in :mod:`hw.isa.formats`. ``BAD_SIZE`` (``error_addr``
    0, checked where the transpose check is) for a format the configuration does not have
    (:func:`hw.isa.format_error`).
    """
    a_row: 16
    w_row: 16
    acc_row: 16
    m: 16            #: number of activation rows; 0 does nothing
    k_len: 16        #: weight tiles summed along K, minus one
    w_fmt: 2         #: weight format (:class:`hw.isa.WeightFormat`; 3 is reserved)
    a_fmt: 1         #: activation format (:class:`hw.isa.ActFormat`)
    x_base: 10       #: MX commands: exponent alignment base (see :mod:`hw.isa.formats`)
    _pad: 99


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

    **GELU** (opcode ``GELU``) uses this body too: the same rows and checks, with a fourth
    parameter row (``param_row + 3`` is checked with the others) and two passes per row
    (:func:`sw.golden.gelu_int`)::

        y = clamp((x * m1[j] + rnd) >> s1[j], -2**15, 2**15 - 1)     (GELU domain, 2**-8 units)
        g = max(y, 0) - C[(|y| + 4) >> 3]         (C = hw.isa.gelu_table(); 0 past its end)
        spad[spad_row + i][j] = clamp((g * m2[j] + rnd) >> s2[j], -128, 127)

    with ``x`` as above, ``m1 = acc[param_row + 1]``, ``s1`` the low 6 bits and ``s2`` bits
    8..13 of ``acc[param_row + 2]``, ``m2 = acc[param_row + 3]`` (low 31 bits). ``flags.relu``,
    ``flags.row_scale`` and ``scale_row`` are ignored.
    """
    acc_row: 16
    spad_row: 16
    n_rows: 16
    param_row: 16
    scale_row: 16    #: first reciprocal row (only with ``flags.row_scale``)
    _pad: 112


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

    Order (defined, so that every implementation writes the same bytes): rows are processed
    in groups of ``cols`` (``g * cols .. g * cols + cols - 1``, the last group shorter); the
    scale row ``scale_row + g`` is written after every score of group ``g`` was read and
    before any score of group ``g + 1`` is read. Scale rows that lie inside the score rows
    are therefore read as written by then.

    Errors (in this order): ``n_rows == 0`` or ``n_blocks == 0`` does nothing; overlapping P
    blocks (``n_blocks >= 2`` and ``stride < n_rows``: block ``b + 1`` of row ``i`` would
    land on block ``b`` of a later row) -> ``BAD_SIZE`` (``error_addr`` = ``stride``);
    accumulator rows of the scores, scratchpad rows of P, then the ``ceil(n_rows / cols)``
    scale rows outside their memory -> ``BAD_LOCAL_ADDR`` (``error_addr`` the first bad row of
    the range: ``max(start, depth)`` with ``start = acc_row`` / ``spad_row`` and the range's
    last row ``start + (n_blocks - 1) * stride + n_rows - 1``). A failing command writes
    nothing.
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


class EltwiseBody(data.Struct):
    """ADD and LAYERNORM on the vector unit: element-wise work on two int8 tensors in the
    scratchpad, written to a third (bit for bit :func:`sw.golden.add_int`,
    :func:`sw.golden.layernorm_int`).

    Element block ``(i, b)`` (row ``i < n_rows``, block ``b < n_blocks``, ``cols`` channels
    ``b * cols + j``) of input ``a`` is ``spad[a_row + b * stride + i][0:cols]``, of ``b``
    ``spad[b_row + b * stride + i]``, of the output ``spad[out_row + b * stride + i]`` (bytes
    ``>= cols`` written 0): the blocked layout of MATMUL's activations and SOFTMAX's P. Per
    channel parameters are accumulator rows, per block: ADD ``ma = acc[param_row + 2b]``,
    ``mb = acc[param_row + 2b + 1]``; LAYERNORM ``ma, mb, gamma, beta = acc[param_row + 4b +
    0..3]`` (``ma``, ``mb``: the low 31 bits, unsigned; ``gamma``: bit 31 the sign, bits 0..30
    the magnitude; ``beta``: int32). The input stage of both::

        x = clamp(((a * ma + rnd) >> shift) + ((b * mb + rnd) >> shift), -2**15, 2**15 - 1)

    (each product rounded to nearest, ties toward +infinity). ADD writes
    ``clamp((x + 2**7) >> 8, -128, 127)``. LAYERNORM normalises each row over its ``N =
    n_blocks * cols`` elements (sums ``S``, ``Q`` of ``x`` and ``x**2``, the row constants
    ``R``, ``e``, ``mu`` of :func:`sw.golden.layernorm_row_constants`), then per element::

        t = (((x << 8) - mu) * R + rnd) >> hw.isa.ln_norm_shift(e)
        out = clamp(((t * gamma + rnd) >> g_shift) + beta + 2**7) >> 8, -128, 127)

    Order: rows one after another; every output of row ``i`` is written before any input of
    row ``i + 1`` is read (ADD: element blocks in row-major order).

    Errors (in this order; a failing command writes nothing): ``n_rows == 0`` or ``n_blocks
    == 0`` does nothing; overlapping blocks (``n_blocks >= 2`` and ``stride < n_rows``) ->
    ``BAD_SIZE`` (``error_addr`` = ``stride``); LAYERNORM with ``n_blocks * cols >
    LN_MAX_ELEMS`` -> ``BAD_SIZE`` (``error_addr`` = ``n_blocks``); output rows
    ``[out_row, out_row + span)`` (``span = (n_blocks - 1) * stride + n_rows``) overlapping
    those of ``a`` or ``b`` -> ``BAD_SIZE`` (``error_addr`` = ``out_row``; in-place work is not
    allowed); then ``a``, ``b``, the output and the parameter rows (:func:`eltwise_param_rows`)
    outside their memory -> ``BAD_LOCAL_ADDR`` (``error_addr`` ``max(start, depth)``).
    """
    a_row: 16
    b_row: 16
    out_row: 16
    n_rows: 16
    n_blocks: 16
    stride: 16       #: scratchpad rows between blocks (of a, b and the output)
    param_row: 16    #: first accumulator row of the per-block parameters
    shift: 6         #: right shift of the two input products
    g_shift: 6       #: LAYERNORM: right shift of the gamma product
    _pad: 68


def eltwise_param_rows(opcode, n_blocks: int) -> int:
    """Accumulator parameter rows of an ADD (2 per block) or LAYERNORM (4 per block);
    ``opcode`` an :class:`Opcode` or its value."""
    op = opcode.value if isinstance(opcode, Opcode) else int(opcode)
    return (4 if op == Opcode.LAYERNORM.value else 2) * n_blocks


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


class TlbInvalidateBody(data.Struct):
    """TLB_INVALIDATE: once every earlier command of the queue retired (as a ``BARRIER``),
    drop every TLB entry (``all``) or those of address space ``asid`` (:mod:`hw.isa.vm`)."""
    all: 1
    _pad0: 7
    asid: 8
    _pad1: 176


class Body(data.Union):
    raw: 192
    dma: DmaBody
    matmul: MatmulBody
    requant: RequantBody
    softmax: SoftmaxBody
    eltwise: EltwiseBody
    fence: FenceBody
    tlb: TlbInvalidateBody


class Command(data.Struct):
    """One 256-bit command."""
    header: Header
    body: Body


#: The :class:`Body` member each opcode reads; NOP, WAIT, SIGNAL and BARRIER have no body.
OPCODE_BODY = {
    Opcode.DMA_LOAD: "dma",
    Opcode.DMA_STORE: "dma",
    Opcode.MATMUL: "matmul",
    Opcode.REQUANT: "requant",
    Opcode.SOFTMAX: "softmax",
    Opcode.ADD: "eltwise",
    Opcode.LAYERNORM: "eltwise",
    Opcode.GELU: "requant",
    Opcode.FENCE: "fence",
    Opcode.TLB_INVALIDATE: "tlb",
}


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


def body_fields(view: CommandView) -> dict:
    """The body fields of a decoded command (:func:`decode`) by name, in layout order, as
    :class:`CommandView` returns them (enum members, ``int``); reserved fields (a leading
    ``_``) are left out. ``{}`` for an opcode without a body (:data:`OPCODE_BODY`) or an
    unknown one."""
    member = OPCODE_BODY.get(view.header.opcode)
    if member is None:
        return {}
    body = getattr(view.body, member)
    return {name: getattr(body, name) for name in _fields(body._layout)
            if not name.startswith("_")}


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



def _as_layout(layout) -> data.Layout:
    if isinstance(layout, type) and issubclass(layout, data.Struct | data.Union):
        return layout.as_shape()
    return data.Layout.cast(layout)


def pack_fields(layout, fields: dict) -> int:
    """Pack a (nested) dict of fields of ``layout`` (a :class:`~amaranth.lib.data.Struct`
    subclass or a layout) into an ``int``; missing fields are 0.

    This is the one software packer of every packed register and command (e.g.
    ``pack_fields(SemLast, {"index": 3, "queue": 1, "valid": 1})``).

    Raises
    ------
    ValueError
        For an unknown field or a value that does not fit its field.
    """
    return _pack(_as_layout(layout), fields)


def unpack_fields(layout, value: int) -> CommandView:
    """Read-only view of ``value`` (an ``int``) as ``layout``: attribute access returns each
    field (``unpack_fields(TraceInfo, word).queue``).

    Raises
    ------
    ValueError
        If ``value`` is negative or wider than the layout.
    """
    layout = _as_layout(layout)
    if not 0 <= value < (1 << layout.size):
        raise ValueError(f"{value:#x} does not fit a {layout.size}-bit {layout!r}")
    return CommandView(layout, value)


def field_max(layout, name: str) -> int:
    """Largest value the unsigned field ``name`` of ``layout`` holds (``2**width - 1``), e.g.
    ``field_max(DmaBody, "row_bytes")`` = 65535: the one place a command's or a register's field
    limit comes from.

    Raises
    ------
    KeyError
        If ``layout`` has no field ``name``.
    """
    return (1 << _fields(_as_layout(layout))[name][1]) - 1
