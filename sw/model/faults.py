"""Bus faults injected at device DRAM: which bursts the memory answers with SLVERR or DECERR.

:class:`BusFault` describes the fault the co-simulation's DRAM model (``cosim/tb/dram.sv``,
"Fault injection") applies; every backend takes it through ``set_bus_fault(fault)`` (the RTL
through a testbench control of the DRAM model, no rebuild; :class:`sw.model.ModelBackend` and
the performance model by applying the same rule to the bursts the hardware issues).

The rule, per AXI burst (ARM IHI 0022 A3.4: a burst of ``AxLEN + 1`` beats of
``2**AxSIZE`` bytes from ``AxADDR``):

* ``mode="range"``: every burst of a selected direction whose bytes ``[AxADDR aligned down to
  the beat, + beats * beat)`` meet ``[lo, hi)`` fails;
* ``mode="nth"``: the ``nth`` burst (from 1) of the selected directions since the fault was
  set, counted at the AR/AW handshake (an AR before an AW of the same cycle), fails, once.
  Which burst that is depends on timing across the queues, so only the RTL applies it; the
  models raise :class:`NotImplementedError`.

A failing read burst carries the response on every beat (its data is poisoned: the inverted
memory word); a failing write burst writes nothing and returns the response on B. The DRAM's
timing does not change (a load channel drains the rest of its transfer after the first error
beat, ``hw/dma/load.py``). What the device does then is the ISA's (``hw.isa.ErrorCode.AXI_ERROR``):
the command that issued the burst fails with ``AXI_ERROR`` and its queue stops.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BusFault", "SLVERR", "DECERR", "RESPONSES"]

SLVERR = 2  #: AXI response code (xRESP) of a subordinate error
DECERR = 3  #: AXI response code of a decode error
RESPONSES = {"slverr": SLVERR, "decerr": DECERR}
_MODES = {"off": 0, "range": 1, "nth": 2}
_TOP = 1 << 32


@dataclass(frozen=True)
class BusFault:
    """One fault rule of the DRAM model (see the module docstring).

    Attributes
    ----------
    mode : str
        ``"range"`` or ``"nth"`` (``"off"``: no fault, the same as no rule).
    reads, writes : bool
        Directions the rule applies to (AR/R bursts, AW/W/B bursts).
    resp : str
        ``"slverr"`` or ``"decerr"``.
    lo, hi : int
        Byte range ``[lo, hi)`` of ``mode="range"``; ``hi == 0`` means ``2**32``.
    nth : int
        Burst number of ``mode="nth"``, from 1.

    Raises
    ------
    ValueError
        On an unknown mode or response, no direction, a range that does not fit 32 bits, or
        ``nth < 1``.
    """
    mode: str = "range"
    reads: bool = True
    writes: bool = True
    resp: str = "slverr"
    lo: int = 0
    hi: int = 0
    nth: int = 1

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"bus fault mode must be one of {sorted(_MODES)}, got {self.mode!r}")
        if self.resp not in RESPONSES:
            raise ValueError(f"bus fault response must be one of {sorted(RESPONSES)}, "
                             f"got {self.resp!r}")
        if not (self.reads or self.writes):
            raise ValueError("a bus fault needs reads, writes or both")
        if not (0 <= self.lo < _TOP and 0 <= self.hi < _TOP):
            raise ValueError(f"bus fault range [{self.lo:#x}, {self.hi:#x}) must fit 32 bits")
        if self.nth < 1:
            raise ValueError(f"bus fault nth counts from 1, got {self.nth}")

    @property
    def resp_code(self) -> int:
        """The AXI response code (``SLVERR`` 2 or ``DECERR`` 3)."""
        return RESPONSES[self.resp]

    def pins(self) -> dict[str, int]:
        """Values of the DRAM model's ``fault_*`` inputs (``mode``, ``dir``, ``resp``, ``lo``,
        ``hi``, ``nth``) that select this rule."""
        return {"mode": _MODES[self.mode], "dir": int(self.reads) | int(self.writes) << 1,
                "resp": self.resp_code, "lo": self.lo, "hi": self.hi, "nth": self.nth}

    def to_plusargs(self) -> list[str]:
        """The simulator plusargs that start the DRAM model with this rule."""
        return [f"+npu_dram_fault_{k}={v}" for k, v in self.pins().items()]

    def hits(self, write: bool, addr: int, beats: int, beat_bytes: int) -> bool:
        """Whether a burst of ``beats`` beats of ``beat_bytes`` bytes at ``addr`` (a write
        burst if ``write``) fails under the range rule.

        Raises
        ------
        NotImplementedError
            For ``mode="nth"`` (timing-dependent, RTL only).
        """
        if self.mode == "off" or not (self.writes if write else self.reads):
            return False
        if self.mode == "nth":
            raise NotImplementedError("an nth-burst fault depends on the bus order across "
                                      "queues; only the RTL's DRAM model applies it")
        first = addr - addr % beat_bytes
        hi = self.hi or _TOP
        return first < hi and first + beats * beat_bytes > self.lo
