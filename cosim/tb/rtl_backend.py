"""The ``rtl`` backend of the runtime: cocotb + Verilator, driven from synchronous code.

:class:`RtlBackend` implements :class:`sw.backend.Backend`. Its synchronous methods must be
called from a thread started by cocotb's :func:`cocotb.task.bridge` (as
:mod:`cosim.tb.cocotb_entry` does); each one runs a short coroutine in the simulator through
:func:`cocotb.task.resume` and returns when it is done. While the caller runs Python code,
simulated time stands still.

Timing model: the host drives the AXI4-Lite port from falling clock edges (so every value is
stable at the rising edge that samples it) and checks handshakes in the ReadOnly phase just
before the rising edge. A CSR access therefore costs a few clock cycles of simulated time;
a backdoor DRAM access costs two cycles, whatever its size.

Only signals of ``tb_top`` are touched (``cosim/tb_top.sv``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from cocotb.simtime import get_sim_time
from cocotb.task import resume
from cocotb.triggers import FallingEdge, First, ReadOnly, RisingEdge, Timer

from cosim.tb.axi_rules import AxiViolation
from hw.config import NPUConfig
from sw.backend import BackendError
from sw.dram import DramTiming
from sw.model.faults import BusFault

if TYPE_CHECKING:
    from cosim.tb.replay import Recorder

__all__ = ["RtlBackend", "CLOCK_PERIOD_NS", "hex_encode", "hex_decode"]

#: Clock period of the simulation, ns (the cycle count is simulated time / period).
CLOCK_PERIOD_NS = 10

#: The pins of ``tb_top`` the host touches (inputs it drives, outputs it samples).
PINS = ("rst", "csr__awaddr", "csr__awvalid", "csr__wdata", "csr__wstrb", "csr__wvalid",
        "csr__bready", "csr__araddr", "csr__arvalid", "csr__rready", "bd_op", "bd_first",
        "bd_last", "irq", "csr__awready", "csr__wready", "csr__bresp", "csr__bvalid",
        "csr__arready", "csr__rdata", "csr__rresp", "csr__rvalid", "bd_ack", "dram_prot_errors",
        "fault_we", "fault_mode", "fault_dir", "fault_resp", "fault_lo", "fault_hi", "fault_nth",
        "fault_hits", "chk_errors", "chk_rule", "chk_cycle")

_BD_LOAD = 1
_BD_DUMP = 2


def hex_encode(data: bytes, word_bytes: int) -> bytes:
    """Format ``data`` as a ``$readmemh`` file: one little-endian word of ``word_bytes`` bytes
    per line, most significant hex digit first. ``len(data)`` must be a multiple of
    ``word_bytes``."""
    words = np.frombuffer(data, np.uint8).reshape(-1, word_bytes)[:, ::-1]
    digits = np.frombuffer(words.tobytes().hex().encode(), "S1").reshape(-1, 2 * word_bytes)
    out = np.empty((digits.shape[0], 2 * word_bytes + 1), "S1")
    out[:, :-1] = digits
    out[:, -1] = b"\n"
    return out.tobytes()


def hex_decode(text: bytes, word_bytes: int) -> bytes:
    """Inverse of :func:`hex_encode` for a ``$writememh`` file (``//`` comments and ``@``
    address lines are skipped).

    Raises
    ------
    BackendError
        If the file holds a word that is not plain hex (e.g. ``x``).
    """
    if b"@" in text or b"/" in text:
        text = b"\n".join(line for line in text.split()
                          if not line.startswith((b"@", b"//")))
    digits = text.translate(None, b" \t\r\n")
    try:
        raw = bytes.fromhex(digits.decode("ascii"))
    except ValueError as e:
        raise BackendError(f"DRAM dump is not plain hex (X or Z in memory?): {e}") from e
    return np.frombuffer(raw, np.uint8).reshape(-1, word_bytes)[:, ::-1].tobytes()


class RtlBackend:
    """:class:`sw.backend.Backend` on the Verilated ``tb_top`` (NPU + DRAM model).

    Parameters
    ----------
    dut : cocotb handle
        The ``tb_top`` handle. The clock must already run and reset must be released.
    config : NPUConfig
        The configuration the simulator was built for (DRAM size, bus width).
    dram_file : Path
        Scratch file for the DRAM backdoor; must be the file named by the simulator's
        ``+npu_dram_file=`` plusarg (dumps go to the same name plus ``.out``).
    csr_timeout_cycles : int
        A CSR access that is not answered within this many clock cycles raises.
    dram_timing : DramTiming, optional
        The timing the simulator's DRAM model was started with (its plusargs; the backend
        cannot change it). Kept in :attr:`dram_timing` so that reports can state it; default
        ``ideal``.

    Notes
    -----
    The synchronous methods may only be called from a :func:`cocotb.task.bridge` thread;
    elsewhere :func:`cocotb.task.resume` raises ``RuntimeError``. The ``a``-prefixed
    coroutine methods do the same from cocotb coroutines.
    """

    name = "rtl"
    timed = True  #: cycle-accurate: every performance counter is meaningful

    def __init__(self, dut: Any, config: NPUConfig, *, dram_file: Path,
                 csr_timeout_cycles: int = 1000, recorder: Recorder | None = None,
                 trace_kernel: tuple[str, int] | None = None,
                 dram_timing: DramTiming | None = None):
        self.dut = dut
        self.config = config
        self.dram_timing = dram_timing if dram_timing is not None else DramTiming()
        self.dram_file = Path(dram_file)
        self._dump_file = Path(f"{dram_file}.out")
        self.csr_timeout_cycles = csr_timeout_cycles
        self.recorder = recorder
        self._word = config.axi_data_bytes
        self._clk = dut.clk
        self._pins = {name: getattr(dut, name) for name in PINS}
        # idle the host port and the backdoor
        for sig in ("awvalid", "wvalid", "bready", "arvalid", "rready"):
            self._set(f"csr__{sig}", 0)
        self._set("bd_op", 0)
        self._set("fault_we", 0)
        self.trace_kernel = trace_kernel
        self.regions: dict[str, int] = {}  #: kernel name -> regions entered so far
        self.region_log: list[dict] = []   #: every region's span, in entry order
        #: VALIDs the host withdrew before their READY when a CSR access timed out (each is
        #: a protocol violation of the host's own, which the CSR port's checker sees)
        self.host_dropped_valids = 0

    # -- Backend protocol (synchronous, from a bridge thread) ---------------------------------

    def csr_read(self, offset: int) -> int:
        """Read the 32-bit CSR at byte ``offset`` (0..0xFFC, a multiple of 4).

        Raises
        ------
        ValueError
            If ``offset`` is out of range or unaligned.
        BackendError
            On a non-OKAY response or no answer within ``csr_timeout_cycles`` cycles.
        """
        return resume(self.acsr_read)(offset)

    def csr_write(self, offset: int, value: int) -> None:
        """Write the 32-bit CSR at byte ``offset``; ``value`` in 0..2**32-1.

        Raises
        ------
        ValueError
            If ``offset`` or ``value`` is out of range.
        BackendError
            On a non-OKAY response or no answer within ``csr_timeout_cycles`` cycles.
        """
        resume(self.acsr_write)(offset, value)

    def csr_batch(self, ops: list[tuple[int, int | None]]) -> list[int]:
        """Several CSR accesses in order, in one call into the simulator (a sequence of
        :meth:`csr_read` / :meth:`csr_write` costs one Python round trip instead of one
        each): ``(offset, None)`` reads, ``(offset, value)`` writes.

        Returns
        -------
        list of int
            The values read, in order.

        Raises
        ------
        ValueError, BackendError
            As :meth:`csr_read` and :meth:`csr_write`.
        """
        return resume(self.acsr_batch)(ops)

    async def acsr_batch(self, ops: list[tuple[int, int | None]]) -> list[int]:
        """Coroutine form of :meth:`csr_batch`."""
        out = []
        for offset, value in ops:
            if value is None:
                out.append(await self.acsr_read(offset))
            else:
                await self.acsr_write(offset, value)
        return out

    def mem_write(self, addr: int, data: bytes) -> None:
        """Write ``data`` to device DRAM at byte ``addr`` through the backdoor (any alignment).

        Raises
        ------
        BackendError
            If ``[addr, addr + len(data))`` is not inside ``[0, config.dram_bytes)``.
        """
        resume(self.amem_write)(addr, bytes(data))

    def mem_read(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes of device DRAM at byte ``addr`` through the backdoor.

        Raises
        ------
        BackendError
            If ``[addr, addr + size)`` is not inside ``[0, config.dram_bytes)``.
        """
        return resume(self.amem_read)(addr, size)

    def wait_irq(self, max_cycles: int) -> bool:
        """Let the simulation run until ``irq`` is high or ``max_cycles`` clock cycles passed.

        Python is woken once (by the rising edge of ``irq`` or by a timer), not every cycle.

        Returns
        -------
        bool
            ``True`` if ``irq`` is high on return.
        """
        return resume(self.await_irq)(max_cycles)

    def run_cycles(self, n: int) -> None:
        """Let the simulation run for ``n`` clock cycles (one timer, no per-cycle wake-up)."""
        resume(self.arun_cycles)(n)

    @contextlib.contextmanager
    def region(self, name: str) -> Iterator[None]:
        """Mark a named kernel (see :meth:`sw.runtime.Device.region`).

        If this run's waveform window is that kernel (``trace_kernel = (name, occurrence)``,
        occurrences counted from 1), its ``occurrence``-th region drives ``tb_top.trace_on``
        high on entry and low on exit, so the waveform holds exactly that kernel (see
        ``cosim/build/verilator_main.cpp``). Every region is counted in :attr:`regions` and
        its span kept in :attr:`region_log` (``{"name", "occurrence", "start_cycle",
        "end_cycle"}``, absolute cycles, end exclusive), for the markers of
        :func:`cosim.waves.write_gtkw`.
        """
        n = self.regions[name] = self.regions.get(name, 0) + 1
        hit = self.trace_kernel == (name, n)
        entry = {"name": name, "occurrence": n, "start_cycle": resume(self._now)(),
                 "end_cycle": None}
        self.region_log.append(entry)
        if hit:
            resume(self.aset_trace)(1)
        try:
            yield
        finally:
            if hit:
                resume(self.aset_trace)(0)
            entry["end_cycle"] = resume(self._now)()

    async def aset_trace(self, on: int) -> None:
        """Drive ``tb_top.trace_on`` (read by traced builds only); from a coroutine."""
        self.dut.trace_on.value = on

    async def _now(self) -> int:
        return self.cycle

    @property
    def cycle(self) -> int:
        """Clock cycles simulated so far (simulated time / :data:`CLOCK_PERIOD_NS`)."""
        return int(get_sim_time("ns") // CLOCK_PERIOD_NS)

    @property
    def dram_protocol_errors(self) -> int:
        """AXI protocol violations the DRAM model has seen (4 KiB crossing, WLAST, burst)."""
        return self._get("dram_prot_errors")

    def set_bus_fault(self, fault: BusFault | None) -> None:
        """Make the DRAM model answer the bursts ``fault`` selects with SLVERR/DECERR from the
        next clock edge on (``None``: no fault); a count (``mode="nth"``) restarts. See
        :mod:`sw.model.faults` and ``cosim/tb/dram.sv``. Takes one clock cycle."""
        resume(self.aset_bus_fault)(fault)

    async def aset_bus_fault(self, fault: BusFault | None) -> None:
        """Coroutine form of :meth:`set_bus_fault`."""
        pins = (fault or BusFault(mode="off")).pins()
        await FallingEdge(self._clk)
        for name, value in pins.items():
            self._set(f"fault_{name}", value)
        self._set("fault_we", 1)
        await FallingEdge(self._clk)
        self._set("fault_we", 0)

    @property
    def bus_fault_hits(self) -> int:
        """Bursts the DRAM model answered with an injected error since the fault was set."""
        return self._get("fault_hits")

    @property
    def axi_violation(self) -> AxiViolation | None:
        """What the AXI protocol checkers of ``tb_top`` saw so far (``cosim/tb/axi_checker.sv``
        on the memory and the CSR port), or ``None`` when the run is clean. The host's own
        withdrawn VALIDs after a CSR timeout (:attr:`host_dropped_valids`) do not count when
        they are all there is: the first violation a ``*_DROP`` on the CSR port and no more
        violations than VALIDs withdrawn."""
        count = self._get("chk_errors")
        if count == 0:
            return None
        v = AxiViolation.from_pins(count, self._get("chk_rule"), self._get("chk_cycle"))
        if v.port == "csr" and v.rule in (1, 3, 5) and count <= self.host_dropped_valids:
            return None
        return v

    def drive_reset(self, level: int) -> None:
        """Drive ``rst`` (1 holds the design in reset); from a cocotb coroutine."""
        self._set("rst", level)

    # -- coroutines ---------------------------------------------------------------------------

    async def acsr_write(self, offset: int, value: int) -> None:
        """Coroutine form of :meth:`csr_write`."""
        self._check_csr(offset)
        if not 0 <= value < 1 << 32:
            raise ValueError(f"CSR value {value!r} does not fit 32 bits")
        await FallingEdge(self._clk)
        self._set("csr__awaddr", offset)
        self._set("csr__wdata", value)
        self._set("csr__wstrb", 0xF)
        self._set("csr__awvalid", 1)
        self._set("csr__wvalid", 1)
        self._set("csr__bready", 1)
        aw_pending = w_pending = True
        for _ in range(self.csr_timeout_cycles):
            await ReadOnly()
            aw_fire = aw_pending and bool(self._get("csr__awready"))
            w_fire = w_pending and bool(self._get("csr__wready"))
            b_fire = bool(self._get("csr__bvalid"))
            resp = self._get("csr__bresp")
            await FallingEdge(self._clk)  # the rising edge in between took the handshakes
            if aw_fire:
                aw_pending = False
                self._set("csr__awvalid", 0)
            if w_fire:
                w_pending = False
                self._set("csr__wvalid", 0)
            if b_fire:
                self._set("csr__bready", 0)
                if aw_pending or w_pending:
                    raise BackendError(f"CSR write 0x{offset:03x}: B response before AW/W")
                if resp != 0:
                    raise BackendError(f"CSR write 0x{offset:03x}: response {resp:#04b}")
                return
        self.host_dropped_valids += aw_pending + w_pending
        self._set("csr__awvalid", 0)
        self._set("csr__wvalid", 0)
        self._set("csr__bready", 0)
        raise BackendError(f"CSR write 0x{offset:03x} not answered within "
                           f"{self.csr_timeout_cycles} cycles")

    async def acsr_read(self, offset: int) -> int:
        """Coroutine form of :meth:`csr_read`."""
        self._check_csr(offset)
        await FallingEdge(self._clk)
        self._set("csr__araddr", offset)
        self._set("csr__arvalid", 1)
        self._set("csr__rready", 1)
        ar_pending = True
        for _ in range(self.csr_timeout_cycles):
            await ReadOnly()
            ar_fire = ar_pending and bool(self._get("csr__arready"))
            r_fire = bool(self._get("csr__rvalid"))
            if r_fire:
                data = self._get("csr__rdata")
                resp = self._get("csr__rresp")
            await FallingEdge(self._clk)
            if ar_fire:
                ar_pending = False
                self._set("csr__arvalid", 0)
            if r_fire:
                self._set("csr__rready", 0)
                if ar_pending:
                    raise BackendError(f"CSR read 0x{offset:03x}: R response before AR")
                if resp != 0:
                    raise BackendError(f"CSR read 0x{offset:03x}: response {resp:#04b}")
                return data
        self.host_dropped_valids += ar_pending
        self._set("csr__arvalid", 0)
        self._set("csr__rready", 0)
        raise BackendError(f"CSR read 0x{offset:03x} not answered within "
                           f"{self.csr_timeout_cycles} cycles")

    async def amem_write(self, addr: int, data: bytes) -> None:
        """Coroutine form of :meth:`mem_write`. Partial words at the edges are read first
        (read-modify-write), so bytes outside ``[addr, addr + len(data))`` keep their value."""
        self._check_mem(addr, len(data))
        if not data:
            return
        w = self._word
        first, last = addr // w, (addr + len(data) - 1) // w
        head = addr - first * w
        tail = (last + 1) * w - (addr + len(data))
        buf = bytearray((last - first + 1) * w)
        if head and tail and first == last:
            buf[:] = await self._backdoor(_BD_DUMP, first, last)
        else:
            if head:
                buf[:w] = await self._backdoor(_BD_DUMP, first, first)
            if tail:
                buf[-w:] = await self._backdoor(_BD_DUMP, last, last)
        buf[head:head + len(data)] = data
        await self._backdoor(_BD_LOAD, first, last, bytes(buf))

    async def amem_read(self, addr: int, size: int) -> bytes:
        """Coroutine form of :meth:`mem_read`."""
        self._check_mem(addr, size)
        if size == 0:
            return b""
        w = self._word
        first, last = addr // w, (addr + size - 1) // w
        raw = await self._backdoor(_BD_DUMP, first, last)
        return raw[addr - first * w: addr - first * w + size]

    async def await_irq(self, max_cycles: int) -> bool:
        """Coroutine form of :meth:`wait_irq`."""
        if max_cycles < 0:
            raise ValueError(f"max_cycles must be >= 0, got {max_cycles}")
        irq = self._get("irq")
        if irq or max_cycles == 0:
            return bool(irq)
        await First(RisingEdge(self.dut.irq), Timer(max_cycles * CLOCK_PERIOD_NS, "ns"))
        return bool(self._get("irq"))

    async def arun_cycles(self, n: int) -> None:
        """Coroutine form of :meth:`run_cycles`."""
        if n > 0:
            await Timer(n * CLOCK_PERIOD_NS, "ns")

    # -- helpers ------------------------------------------------------------------------------

    async def _backdoor(self, op: int, first: int, last: int, data: bytes = b"") -> bytes:
        """Load (``data`` -> words ``first..last``) or dump words ``first..last``; 2 cycles."""
        # The file is rewritten in place and the dump file removed first: on ext4, truncating
        # a file that holds data and rewriting it costs ~0.4 ms (a forced flush).
        if op == _BD_LOAD:
            fd = os.open(self.dram_file, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                text = hex_encode(data, self._word)
                os.write(fd, text)
                os.ftruncate(fd, len(text))
            finally:
                os.close(fd)
            if self.recorder is not None:
                self.recorder.load(text)
        else:
            self._dump_file.unlink(missing_ok=True)
        await FallingEdge(self._clk)
        self._set("bd_first", first)
        self._set("bd_last", last)
        self._set("bd_op", op)
        await FallingEdge(self._clk)  # the DRAM model ran $readmemh/$writememh at the edge
        self._set("bd_op", 0)
        if not bool(self._get("bd_ack")):
            raise BackendError("DRAM backdoor not acknowledged (is the DRAM model in reset?)")
        if op == _BD_DUMP:
            text = self._dump_file.read_bytes()
            if self.recorder is not None:
                self.recorder.dump(text)
            raw = hex_decode(text, self._word)
            if len(raw) != (last - first + 1) * self._word:
                raise BackendError(f"DRAM dump of words {first}..{last} returned "
                                   f"{len(raw) // self._word} words")
            return raw
        return b""

    def _set(self, name: str, value: int) -> None:
        """Drive input pin ``name`` of ``tb_top`` (recorded when a recorder is attached)."""
        self._pins[name].value = value
        if self.recorder is not None:
            self.recorder.drive(name, value)

    def _get(self, name: str) -> int:
        """Sample output pin ``name`` of ``tb_top`` (recorded when a recorder is attached)."""
        value = int(self._pins[name].value)
        if self.recorder is not None:
            self.recorder.check(name, value)
        return value

    @staticmethod
    def _check_csr(offset: int) -> None:
        if not (0 <= offset < 0x1000 and offset % 4 == 0):
            raise ValueError(f"CSR offset {offset!r} is not a multiple of 4 in 0..0xffc")

    def _check_mem(self, addr: int, size: int) -> None:
        if size < 0 or addr < 0 or addr + size > self.config.dram_bytes:
            raise BackendError(f"DRAM access [{addr:#x}, {addr + size:#x}) outside "
                               f"[0, {self.config.dram_bytes:#x})")
