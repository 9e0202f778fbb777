"""NPU configuration: the one source of truth for every width, depth and address range.

Every block in ``hw/``, every tiling decision in ``sw/`` and the Verilator build directory
derive from a :class:`NPUConfig`. The hardware exposes the configuration in read-only CSRs
(see :mod:`hw.isa`) so that the runtime can discover what it talks to and refuse a mismatch.

A configuration has a string form, ``ROWSxCOLS[,key=value...]`` (``8x8``,
``4x4,spad_rows=1024``): :attr:`NPUConfig.spec` writes it, :meth:`NPUConfig.parse` reads it
(the ``--config`` option of ``npu``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hw.isa import MAX_QUEUES

__all__ = ["NPUConfig", "ConfigParseError", "next_pow2"]


#: The size fields of the string form's ``ROWSxCOLS`` head; every other field is ``key=value``.
_SIZE_FIELDS = ("rows", "cols")
_SPEC_FORMAT = "expected ROWSxCOLS[,key=value...], e.g. 8x8 or 4x4,spad_rows=1024"


class ConfigParseError(ValueError):
    """A configuration string that :meth:`NPUConfig.parse` cannot read, or whose values
    :class:`NPUConfig` rejects; the message quotes the string and says what is wrong."""


def next_pow2(n: int) -> int:
    """Smallest power of two that is ``>= n`` (for ``n >= 1``)."""
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class NPUConfig:
    """Parameters of one NPU instance.

    Parameters
    ----------
    rows, cols : int
        Systolic array size in processing elements (PEs), 2..32 each. ``rows`` is the
        reduction (K) extent of one weight tile, ``cols`` the output-channel (N) extent.
    spad_rows : int
        Scratchpad depth in rows. One scratchpad row is :attr:`spad_row_bytes` int8 elements.
    acc_rows : int
        Accumulator depth in rows. One accumulator row is :attr:`acc_row_elems` int32 elements.
    axi_data_bits : int
        Data width of the AXI4 memory port in bits (32, 64, 128 or 256).
    axi_addr_bits : int
        Address width of the AXI4 memory port in bits.
    axi_id_bits : int
        Width of the AXI4 ID fields.
    dram_bytes : int
        Size of device DRAM in bytes, a power of two of at most 2**31. Every DRAM address the
        device touches is checked against ``[0, dram_bytes)``.
    n_queues : int
        Number of hardware command queues (ring buffers), arbitrated round-robin; at most
        :data:`hw.isa.MAX_QUEUES` (16), the room the CSR map has below the counter block.
    n_sems : int
        Number of 32-bit semaphores.
    dma_outstanding : int
        Maximum number of AXI read bursts in flight in the DMA load channel, and of write
        bursts awaiting their B response in the store channel, 2..64; each costs one 32-bit
        entry of the channel's in-flight FIFO. A burst of ``n`` beats is read in ``n + 1``
        cycles, so ``(read_latency + n + 1) / (n + 1)`` bursts in flight keep the read channel
        busy (13 for 8-beat bursts at the ``lat100`` preset of :mod:`sw.dram`: 100 cycles x 8
        bytes per cycle = 800 bytes in flight). The default is 4 (2 before issue 13): measured
        with :class:`sw.perf.PerfBackend` (which matches the RTL cycle for cycle) once the
        command processor read several commands per burst (``fetch_depth``), 4 reads in flight
        take the main job (MiniLM layer-0 block, L=32, 8x8) from 402,645 to 375,013 cycles
        under ``lat100`` (355,871 and 355,773 under ``ideal``), the GEMV 1x384x1536 from
        173,115 to 159,073 under ``ddr``, and the validation corpus's 51 workloads of the
        default configurations by 8.2% (``lat100``), 6.9% (``ddr``) and 8.4% (``hbm``) in all
        (0.1% and 0.2% under ``ideal`` and ``bp50``); the two more entries of each channel's
        in-flight FIFO cost 2 LUT4 and 6 FF on ECP5 (``npu area``, 8x8). With one command per
        fetch burst before, 4 reads in flight made that GEMV 5.1% slower (its fetches waited
        behind the DMA's bursts).
    dma_max_burst_beats : int
        Longest AXI burst the DMA issues, in beats, 1..256 (AXI4 allows 256 for INCR, AXI3
        and some interconnects 16). Bursts are also split at 4 KiB boundaries.
    cmd_fifo_depth : int
        Commands each queue holds in front of each engine, in that engine's command store
        (:class:`hw.cmdproc.EngineQueue`: ``n_queues x cmd_fifo_depth`` entries per engine).
    fetch_depth : int
        Commands per queue that the command processor reads ahead of the queue's stage
        (its prefetch buffer, a power of two in 1..64), and so the most commands one fetch
        burst reads: a burst of ``fetch_depth x 32`` bytes at most, which must fit 256 beats
        (at most 32 commands on a 32-bit bus). Each fetch burst reads as many commands as
        ``HEAD..TAIL``, the end of the ring, the queue's window, the DRAM, the 4 KiB rule
        and the free buffer entries allow, so under DRAM read latency a launch of several
        commands pays the latency once per burst, not once per command
        (:class:`hw.cmdproc.FetchUnit`).
    trace_depth : int
        Entries of each engine's command trace FIFO (see ``Csr.TRACE_*`` in :mod:`hw.isa`).
    tlb_entries : int
        Entries of each DMA channel's TLB (device virtual memory, :mod:`hw.isa.vm`), 0..64;
        0 leaves the translation hardware out (every queue then uses physical addresses).
        Each channel also gets a page walker, an AXI manager of its own on the memory port,
        so ``axi_id_bits`` must be at least 2.
    mx : int
        1: the systolic array has its MX exponent stage and the matrix engine runs MX
        commands (OCP MXINT8 weights and activations, :mod:`hw.isa.formats`); 0: MX MATMULs
        fail with ``BAD_SIZE``. int4 weights are always supported (a nibble select in the
        weight load). A parameter because the exponent stage costs area in every column (a
        shadow/active exponent pair, a 32-bit left and a rounding right shifter), not cycles:
        it sits after the last PE row's register, so the array's latency is the same.

    Raises
    ------
    ValueError
        If a parameter is out of range; the message names the parameter and the bad value.
    """

    rows: int = 8
    cols: int = 8
    spad_rows: int = 4096
    acc_rows: int = 1024
    axi_data_bits: int = 64
    axi_addr_bits: int = 32
    axi_id_bits: int = 4
    dram_bytes: int = 1 << 24
    n_queues: int = 4
    n_sems: int = 16
    dma_outstanding: int = 4
    dma_max_burst_beats: int = 256
    cmd_fifo_depth: int = 2
    fetch_depth: int = 4
    trace_depth: int = 64
    tlb_entries: int = 16
    mx: int = 0

    # Fixed number formats of this generation of the tile.
    input_bits = 8
    acc_bits = 32

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, why: str) -> None:
            if not ok:
                raise ValueError(f"NPUConfig.{name}={getattr(self, name)!r}: {why}")

        for name in ("rows", "cols"):
            v = getattr(self, name)
            check(name, isinstance(v, int) and 2 <= v <= 32, "must be an integer in 2..32")
        check("spad_rows", 16 <= self.spad_rows <= 65536 and _is_pow2(self.spad_rows),
              "must be a power of two in 16..65536")
        check("acc_rows", 16 <= self.acc_rows <= 65536 and _is_pow2(self.acc_rows),
              "must be a power of two in 16..65536")
        check("axi_data_bits", self.axi_data_bits in (32, 64, 128, 256),
              "must be 32, 64, 128 or 256")
        check("axi_addr_bits", 16 <= self.axi_addr_bits <= 32, "must be in 16..32")
        check("axi_id_bits", 1 <= self.axi_id_bits <= 8, "must be in 1..8")
        check("dram_bytes", _is_pow2(self.dram_bytes) and 4096 <= self.dram_bytes <= (1 << 31),
              "must be a power of two in 4096..2**31")
        check("axi_addr_bits", self.dram_bytes <= (1 << self.axi_addr_bits),
              f"addresses {_bytes(1 << self.axi_addr_bits)}, less than dram_bytes="
              f"{self.dram_bytes} ({_bytes(self.dram_bytes)}): give axi_addr_bits >= "
              f"{self.dram_bytes.bit_length() - 1} or a smaller dram_bytes")
        check("n_queues", 1 <= self.n_queues <= MAX_QUEUES,
              f"must be in 1..{MAX_QUEUES} (the CSR map has room for {MAX_QUEUES} queues' "
              "registers below the counter block)")
        check("n_sems", 1 <= self.n_sems <= 256, "must be in 1..256")
        check("dma_outstanding", 2 <= self.dma_outstanding <= 64, "must be in 2..64")
        check("dma_max_burst_beats", 1 <= self.dma_max_burst_beats <= 256,
              "must be in 1..256 (AxLEN is 8 bits)")
        check("cmd_fifo_depth", 1 <= self.cmd_fifo_depth <= 64, "must be in 1..64")
        check("fetch_depth", _is_pow2(self.fetch_depth) and self.fetch_depth <= 64
              and self.fetch_depth * 32 <= 256 * (self.axi_data_bits // 8),
              "must be a power of two in 1..64 whose commands fit one 256-beat burst")
        check("trace_depth", 2 <= self.trace_depth <= 1024, "must be in 2..1024")
        check("tlb_entries", isinstance(self.tlb_entries, int) and 0 <= self.tlb_entries <= 64,
              "must be an integer in 0..64")
        check("axi_id_bits", self.tlb_entries == 0 or self.axi_id_bits >= 2,
              "must be at least 2 with tlb_entries > 0 (four AXI managers: DMA, command "
              "processor and the two page walkers)")
        check("mx", self.mx in (0, 1), "must be 0 or 1")

    # -- derived quantities -------------------------------------------------------------------

    @property
    def spad_row_bytes(self) -> int:
        """Bytes (int8 elements) per scratchpad row: ``next_pow2(max(rows, cols))``.

        An activation row uses the first ``rows`` bytes, a weight row the first ``cols`` bytes,
        a requantized output row the first ``cols`` bytes. Padding to a power of two keeps the
        DMA's packing of bus beats into rows a shift, not a division.
        """
        return next_pow2(max(self.rows, self.cols))

    @property
    def acc_row_elems(self) -> int:
        """int32 elements per accumulator row: ``next_pow2(cols)``; the first ``cols`` are used."""
        return next_pow2(self.cols)

    @property
    def acc_row_bytes(self) -> int:
        """Bytes per accumulator row (``4 * acc_row_elems``)."""
        return 4 * self.acc_row_elems

    @property
    def axi_data_bytes(self) -> int:
        """Bytes per AXI beat."""
        return self.axi_data_bits // 8

    @property
    def spad_bytes(self) -> int:
        return self.spad_rows * self.spad_row_bytes

    @property
    def acc_bytes(self) -> int:
        return self.acc_rows * self.acc_row_bytes

    @property
    def n_pes(self) -> int:
        """Number of processing elements (MACs per cycle at full utilization)."""
        return self.rows * self.cols

    @property
    def name(self) -> str:
        """A short, filesystem-safe name that identifies this configuration uniquely
        (``8x8``, ``4x4_spad_rows1024``)."""
        return "_".join([f"{self.rows}x{self.cols}",
                         *(f"{key}{value}" for key, value in self._non_default())])

    @property
    def spec(self) -> str:
        """The string form that :meth:`parse` reads back: ``ROWSxCOLS``, then ``,key=value``
        (decimal) for every parameter that differs from its default, in field order.

        ``"8x8"`` for the default configuration, ``"4x4,spad_rows=1024"`` otherwise;
        ``NPUConfig.parse(config.spec) == config`` for every configuration.
        """
        return ",".join([f"{self.rows}x{self.cols}",
                         *(f"{key}={value}" for key, value in self._non_default())])

    def _non_default(self) -> list[tuple[str, int]]:
        """``(field, value)`` of every non-size field that differs from its default."""
        fields = NPUConfig.__dataclass_fields__
        return [(key, value) for key, value in asdict(self).items()
                if key not in _SIZE_FIELDS and value != fields[key].default]

    @classmethod
    def parse(cls, text: str) -> NPUConfig:
        """Read the string form ``ROWSxCOLS[,key=value...]``, e.g. ``8x8`` or
        ``4x4,spad_rows=1024`` (the inverse of :attr:`spec`).

        ``ROWSxCOLS`` takes decimal sizes (``x`` or ``X``); each ``key`` is a field of
        :class:`NPUConfig` other than ``rows`` and ``cols``, at most once, and each ``value``
        an integer literal (``int(value, 0)``: ``1024``, ``0x400``, ``1_024``). Fields not
        given keep their defaults.

        Raises
        ------
        ConfigParseError
            (a ``ValueError``) On a malformed string, an unknown or repeated key, a value that
            is not an integer, or a value :class:`NPUConfig` rejects; the message quotes
            ``text`` and says which.
        """
        def bad(why: str) -> ConfigParseError:
            return ConfigParseError(f"bad configuration {text!r}: {why}")

        size, *rest = text.split(",")
        parts = size.lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdecimal() for p in parts):
            raise bad(_SPEC_FORMAT)
        params = dict(zip(_SIZE_FIELDS, (int(p) for p in parts), strict=True))
        known = [k for k in cls.__dataclass_fields__ if k not in _SIZE_FIELDS]
        for item in rest:
            key, sep, value = item.partition("=")
            if not sep:
                raise bad(f"{item!r} is not key=value; {_SPEC_FORMAT}")
            if key not in known:
                raise bad(f"unknown parameter {key!r}; known: {', '.join(known)}")
            if key in params:
                raise bad(f"{key} is given twice")
            try:
                params[key] = int(value, 0)
            except ValueError:
                raise bad(f"{key} needs an integer, got {value!r}") from None
        try:
            return cls(**params)
        except ValueError as e:
            raise bad(str(e)) from e

    def to_dict(self) -> dict:
        return asdict(self)


def _bytes(n: int) -> str:
    """A power-of-two size as ``64 KiB``, ``16 MiB``, ``2 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _is_pow2(n: int) -> bool:
    return isinstance(n, int) and n > 0 and (n & (n - 1)) == 0
