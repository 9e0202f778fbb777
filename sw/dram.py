"""DRAM timing of the co-simulated memory: one typed value, named presets and a parser.

:class:`DramTiming` describes how the DRAM model of the co-simulation
(``cosim/tb/dram.sv``, module ``npu_dram``) answers the NPU's AXI4 port. The simulator reads
it at run time from plusargs (:meth:`DramTiming.to_plusargs`), so changing the timing needs
no rebuild. This module is plain Python (no cosim, no Amaranth): the performance model
imports it too, and both sides read the same definitions from here.

Pin-level meaning of every parameter (what the tests of ``tests/cosim/test_dram_timing.py``
measure). Cycle ``c`` is the rising clock edge at which a handshake happens.

``read_latency`` (cycles, >= :data:`MIN_READ_LATENCY` = 3)
    From the AR handshake of a burst to the handshake of its first R beat, when RREADY is
    high and nothing else holds the beat back (R backpressure, the bandwidth limit, an
    earlier burst still sending). Each queued burst carries its own ready time (AR cycle +
    latency), so the latencies of outstanding bursts overlap: a burst whose time has come
    starts one idle cycle after the previous burst's last beat. 3 is the model's pipeline
    (AR queue, burst fetch, registered RVALID) and is the ``ideal`` model.
``write_latency`` (cycles, >= :data:`MIN_WRITE_LATENCY` = 1)
    From the handshake of a burst's last W beat to its B handshake (BREADY high, no B
    backpressure). Responses queue (up to 16 write bursts await B), so the latencies of
    outstanding writes overlap; a new AW is taken one idle cycle after the previous burst's
    last W beat.
``bytes_per_cycle`` (bytes per cycle, or ``None``)
    Peak DRAM data bandwidth as a token bucket that R and W beats share, as one DRAM data
    bus would (reads and writes are not simultaneous on a DDR/HBM data bus). Tokens (bytes)
    refill by ``bytes_per_cycle`` every cycle up to ``bus bytes + bytes_per_cycle``; a beat
    may go (R beat presented, WREADY high) only while the bucket holds at least one bus
    width of bytes, and costs a full bus width whatever its strobes or size. An R and a W
    beat may both go in one cycle (the bucket then goes below zero and both channels wait
    until it refills), so over any long stretch the R + W bytes never exceed the rate by
    more than two beats. The model counts in exact rationals: the rate is the closest
    fraction with a denominator up to :data:`BW_MAX_DENOMINATOR` (1000), so decimal rates
    such as 2.5 or 4.8 are exact (the stored value is that fraction). ``None``: no limit,
    each of R and W one beat per cycle (the ``ideal`` model).
``ar_stall``, ``r_stall``, ``aw_stall``, ``w_stall``, ``b_stall`` (probability, [0, 1))
    Random backpressure per channel: the probability that the model withholds ARREADY,
    RVALID, AWREADY, WREADY or BVALID in a cycle in which it could otherwise assert it.
    Once RVALID or BVALID is high it stays high until its handshake (AXI rule, ARM IHI 0022
    A3.2.1), so for R and B the draw decides whether the next beat or response starts in
    that cycle. The model compares a 32-bit draw with ``round(p * 2**32)``; the stored value
    is that threshold / 2**32.
``seed`` (0 .. 2**32 - 1)
    Seeds one xorshift32 generator per channel inside the model (:func:`stall_draws` gives
    the same sequence in Python). The same seed gives the same run, cycle for cycle, on
    every simulator and in the native replay; the generators are reseeded at reset.

Clock: the presets are stated for an NPU clock of :data:`NPU_CLOCK_HZ` = 1 GHz, so one
cycle is one nanosecond and 1 GB/s is 1 byte per cycle. At another clock scale them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

__all__ = ["DramTiming", "DramTimingError", "PRESETS", "CHANNELS", "MIN_READ_LATENCY",
           "MIN_WRITE_LATENCY", "MAX_LATENCY", "MAX_BYTES_PER_CYCLE", "NPU_CLOCK_HZ",
           "BW_MAX_DENOMINATOR", "STALL_FRACTION_BITS", "stall_draws", "channel_seed",
           "PRESET_NOTES"]

#: NPU clock the presets are stated at (Hz): one cycle = 1 ns.
NPU_CLOCK_HZ = 1_000_000_000
#: The model's read pipeline: AR handshake to first R handshake with no added latency.
MIN_READ_LATENCY = 3
#: The model's write response: last W handshake to B handshake with no added latency.
MIN_WRITE_LATENCY = 1
#: Largest latency the model takes (cycles).
MAX_LATENCY = 65535
#: Largest bandwidth limit (bytes per cycle); larger is no limit on any bus the NPU has.
MAX_BYTES_PER_CYCLE = 1024.0
#: Largest denominator of the bandwidth as a fraction (``+npu_dram_bw_num/_den``).
BW_MAX_DENOMINATOR = 1000
#: Fraction bits of the stall probabilities (``+npu_dram_<ch>_stall`` = probability * 2**32).
STALL_FRACTION_BITS = 32
#: Channels with random backpressure, in the model's generator order.
CHANNELS = ("ar", "r", "aw", "w", "b")

#: Ideal cycles of a command stream per extra cycle of DRAM latency it waits
#: (:meth:`DramTiming.slowdown`).
_CYCLES_PER_LATENCY = 300

_MASK32 = 0xFFFFFFFF


class DramTimingError(ValueError):
    """A DRAM timing value or specification string is invalid; the message names the key
    and its allowed range (or the known presets).

    ``field`` and ``why``: for a field value out of range, the :class:`DramTiming` field and
    what it must be (so that :meth:`DramTiming.parse` can name the key the text used, e.g.
    ``latency`` for ``read_latency``); None otherwise.
    """

    def __init__(self, message: str, field: str | None = None, why: str | None = None):
        super().__init__(message)
        self.field, self.why = field, why


def _bad_field(key: str, value, why: str) -> DramTimingError:
    """A field value out of range: ``key=value: why``."""
    return DramTimingError(f"{key}={value!r}: {why}", key, why)


@dataclass(frozen=True)
class DramTiming:
    """Timing of the co-simulated DRAM (see the module docstring for the exact pin meaning).

    Parameters
    ----------
    read_latency : int
        AR handshake to first R handshake, cycles, in ``3..65535``.
    write_latency : int
        Last W handshake to B handshake, cycles, in ``1..65535``.
    bytes_per_cycle : float or None
        Peak data bandwidth shared by R and W, bytes per cycle, in ``[0.001, 1024]``
        (stored as the closest fraction with a denominator up to 1000); ``None`` for no
        limit (one beat per cycle per channel).
    ar_stall, r_stall, aw_stall, w_stall, b_stall : float
        Probability of withholding ARREADY, RVALID, AWREADY, WREADY, BVALID in a cycle, in
        ``[0, 1)`` (stored rounded to a multiple of 2**-32).
    seed : int
        Seed of the per-channel generators, ``0 .. 2**32 - 1``.
    name : str
        The preset or specification it was made from (for reports; not compared).

    Raises
    ------
    DramTimingError
        If a value is out of range or of the wrong type.
    """

    read_latency: int = MIN_READ_LATENCY
    write_latency: int = MIN_WRITE_LATENCY
    bytes_per_cycle: float | None = None
    ar_stall: float = 0.0
    r_stall: float = 0.0
    aw_stall: float = 0.0
    w_stall: float = 0.0
    b_stall: float = 0.0
    seed: int = 1
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        _check_int("read_latency", self.read_latency, MIN_READ_LATENCY, MAX_LATENCY)
        _check_int("write_latency", self.write_latency, MIN_WRITE_LATENCY, MAX_LATENCY)
        _check_int("seed", self.seed, 0, _MASK32)
        if self.bytes_per_cycle is not None:
            bw = _number("bytes_per_cycle", self.bytes_per_cycle)
            if not 1 / BW_MAX_DENOMINATOR <= bw <= MAX_BYTES_PER_CYCLE:
                raise _bad_field("bytes_per_cycle", self.bytes_per_cycle,
                                 f"must be in [{1 / BW_MAX_DENOMINATOR}, "
                                 f"{MAX_BYTES_PER_CYCLE:g}] bytes per cycle"
                                 f"{' (that would let no data through)' if bw <= 0 else ''}; "
                                 "for no bandwidth limit leave bw out or give bw=none")
            object.__setattr__(self, "bytes_per_cycle", float(_bw_fraction(bw)))
        one = 1 << STALL_FRACTION_BITS
        for ch in CHANNELS:
            key = f"{ch}_stall"
            p = _number(key, getattr(self, key))
            q = round(p * one) / one
            if p < 0 or q >= 1:
                raise _bad_field(key, p, f"a probability in [0, 1) is needed (at most "
                                 f"{(one - 1) / one} after rounding to 1/{one})")
            object.__setattr__(self, key, q)
        if not self.name:
            object.__setattr__(self, "name", self.spec())

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str | DramTiming | None) -> DramTiming:
        """Parse a preset name and/or ``key=value`` pairs, comma-separated.

        ``"ideal"``, ``"ddr"``, ``"hbm"``, ``"jitter"``, ``"lat100"``, ``"bp50"`` (see
        :data:`PRESETS`); ``"latency=100,bw=4,stall=0.3,seed=1"``; a preset followed by
        overrides, ``"jitter,seed=7"``. Keys (each at most once):

        ``latency`` or ``read_latency``
            read latency, cycles (int, 3..65535)
        ``wlatency`` or ``write_latency``
            write-response latency, cycles (int, 1..65535)
        ``bw`` or ``bytes_per_cycle``
            peak bandwidth, bytes per cycle (number, [0.001, 1024]; ``none``, the
            default, for no limit)
        ``stall``
            the backpressure probability of every channel (number, [0, 1))
        ``ar_stall``, ``r_stall``, ``aw_stall``, ``w_stall``, ``b_stall``
            one channel's probability; applied after ``stall`` whatever the order
        ``seed``
            generator seed (int, 0..2**32-1)

        ``None`` or an empty string is ``ideal``; a :class:`DramTiming` is returned as is.

        Raises
        ------
        DramTimingError
            On an unknown preset or key, a repeated key, a preset after the first item, or a
            value that is not a number or out of range.
        """
        if isinstance(text, DramTiming):
            return text
        if text is None or not text.strip():
            return PRESETS["ideal"]
        if not isinstance(text, str):
            raise DramTimingError(f"DRAM timing must be a string or DramTiming, got "
                                  f"{type(text).__name__}")
        items = [t.strip() for t in text.split(",")]
        base, label = PRESETS["ideal"], ",".join(items)
        if items and "=" not in items[0]:
            name = items.pop(0).lower()
            if name not in PRESETS:
                raise DramTimingError(f"unknown DRAM preset {name!r}; presets: "
                                      f"{', '.join(PRESETS)}; or key=value pairs (keys: "
                                      f"{', '.join(_KEYS)})")
            base = PRESETS[name]
        changes, written = _parse_pairs(items)
        if not changes:
            return base
        try:
            return dataclasses.replace(base, name=label, **changes)
        except DramTimingError as e:
            if e.field not in written:
                raise
            key, raw = written[e.field]     # say it as the text did (latency, not read_latency)
            raise DramTimingError(f"{key}={raw}: {e.why}", e.field, e.why) from None

    # -- derived --------------------------------------------------------------------------------

    @property
    def is_ideal(self) -> bool:
        """True if the model behaves as the ideal one (no plusargs; the seed is then unused)."""
        return not self.to_plusargs()

    def read_burst_terms(self, beats: float, outstanding: int,
                         gap: int = 1) -> tuple[float, float]:
        """The two bounds on the mean cycles per read burst of ``beats`` beats in a long run of
        them: ``(channel, latency)``.

        ``channel = (beats + gap) / (1 - r_stall)``: the R channel carries a beat per cycle
        and the model idles ``gap`` cycles between bursts (``cosim/tb/dram.sv``), stretched by
        random R backpressure in expectation. ``latency = (read_latency + beats - 1) /
        outstanding``: each burst holds one of ``outstanding`` read slots from its AR
        handshake to its last beat, so by Little's law (Little, "A proof for the queuing
        formula L = lambda W", Operations Research 9(3), 1961) at most ``outstanding`` bursts
        complete per ``read_latency + beats - 1`` cycles. The mean is the larger; the DRAM's
        bandwidth limit is separate (:attr:`bytes_per_cycle`)."""
        return ((beats + gap) / (1 - self.r_stall),
                (self.read_latency + beats - 1) / outstanding)

    def write_burst_cycles(self, beats: float, gap: int = 1) -> float:
        """Mean cycles per write burst of ``beats`` beats in a long run of them: a beat per
        cycle and ``gap`` idle cycles between the last W beat and the next AW, stretched by
        random W backpressure in expectation (``(beats + gap) / (1 - w_stall)``)."""
        return (beats + gap) / (1 - self.w_stall)

    def stall(self, channel: str) -> float:
        """Backpressure probability of ``channel`` (one of :data:`CHANNELS`)."""
        if channel not in CHANNELS:
            raise DramTimingError(f"unknown channel {channel!r}; channels: {CHANNELS}")
        return getattr(self, f"{channel}_stall")

    def slowdown(self, bus_bytes: int) -> float:
        """At most how many times as long as under ideal DRAM a command stream takes under
        this timing (>= 1; an estimate, on the safe side in every case measured): the slowest
        beat, ``1 / (1 - p)`` of the most stalled channel or ``bus_bytes /
        bytes_per_cycle``, times ``1 + extra latency / 300`` (the larger of the read latency
        above :data:`MIN_READ_LATENCY` and the write latency above :data:`MIN_WRITE_LATENCY`;
        a stream meets about one latency per 300 of its ideal cycles: measured on the fuzz
        streams, which take at most 200x as long under ``latency=65535`` as under ideal, 35x
        under 10000). Used to size cycle budgets (the runtime's default wait, the fuzzer's
        hang budget).

        Parameters
        ----------
        bus_bytes : int
            The AXI data bus width in bytes (``NPUConfig.axi_data_bytes``).
        """
        stall = max(self.stall(ch) for ch in CHANNELS)
        beat = max(1 / (1 - stall),
                   1.0 if self.bytes_per_cycle is None else bus_bytes / self.bytes_per_cycle)
        latency = max(self.read_latency - MIN_READ_LATENCY,
                      self.write_latency - MIN_WRITE_LATENCY)
        return max(1.0, beat) * (1 + latency / _CYCLES_PER_LATENCY)

    def spec(self) -> str:
        """Canonical specification: ``"ideal"`` or the ``key=value`` pairs that differ from
        it; :meth:`parse` of it gives an equal timing."""
        parts = []
        if self.read_latency != MIN_READ_LATENCY:
            parts.append(f"latency={self.read_latency}")
        if self.write_latency != MIN_WRITE_LATENCY:
            parts.append(f"wlatency={self.write_latency}")
        if self.bytes_per_cycle is not None:
            parts.append(f"bw={self.bytes_per_cycle:g}")
        parts += [f"{ch}_stall={self.stall(ch):g}" for ch in CHANNELS if self.stall(ch)]
        if self.seed != 1 or any(self.stall(ch) for ch in CHANNELS):
            parts.append(f"seed={self.seed}")
        return ",".join(parts) or "ideal"

    def describe(self) -> str:
        """One line for reports, e.g. ``"lat100: read latency 100 cycles, write latency 1, no
        bandwidth limit (R and W one bus beat per cycle each), no backpressure"``."""
        bw = ("no bandwidth limit (R and W one bus beat per cycle each)"
              if self.bytes_per_cycle is None
              else f"bandwidth {self.bytes_per_cycle:g} B/cycle")
        # as many digits as the probability has (0.1% was said as 0%, 99.999% as 100%)
        stalls = ", ".join(f"{ch.upper()} {100 * self.stall(ch):g}%" for ch in CHANNELS
                           if self.stall(ch))
        bp = f"backpressure {stalls} (seed {self.seed})" if stalls else "no backpressure"
        head = self.name if self.name == self.spec() else f"{self.name} ({self.spec()})"
        return (f"{head}: read latency {self.read_latency} cycles, write latency "
                f"{self.write_latency}, {bw}, {bp}")

    def to_dict(self) -> dict:
        """JSON-ready fields, with ``name`` and the canonical ``spec``."""
        d = dataclasses.asdict(self)
        d["spec"] = self.spec()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DramTiming:
        """Inverse of :meth:`to_dict` (``spec`` is ignored)."""
        return cls(**{k: v for k, v in d.items() if k != "spec"})

    def to_plusargs(self) -> list[str]:
        """Simulator arguments of this timing (empty for ``ideal``: the model's defaults).

        ``+npu_dram_rd_latency=N``, ``+npu_dram_wr_latency=N``, ``+npu_dram_bw_num=N`` and
        ``+npu_dram_bw_den=D`` (bytes per cycle = N / D), ``+npu_dram_<ch>_stall=N``
        (probability * 2**32), ``+npu_dram_seed=N``; only the ones that differ from the
        defaults.
        """
        args = []
        if self.read_latency != MIN_READ_LATENCY:
            args.append(f"+npu_dram_rd_latency={self.read_latency}")
        if self.write_latency != MIN_WRITE_LATENCY:
            args.append(f"+npu_dram_wr_latency={self.write_latency}")
        if self.bytes_per_cycle is not None:
            frac = self.bw_fraction
            args += [f"+npu_dram_bw_num={frac[0]}", f"+npu_dram_bw_den={frac[1]}"]
        for ch in CHANNELS:
            if self.stall(ch):
                args.append(f"+npu_dram_{ch}_stall={self.stall_fixed(ch)}")
        if any(self.stall(ch) for ch in CHANNELS):
            args.append(f"+npu_dram_seed={self.seed}")
        return args

    @property
    def bw_fraction(self) -> tuple[int, int] | None:
        """Bandwidth as the model's fraction ``(numerator, denominator)`` bytes per cycle;
        ``None`` for no limit."""
        if self.bytes_per_cycle is None:
            return None
        f = _bw_fraction(self.bytes_per_cycle)
        return f.numerator, f.denominator

    def stall_fixed(self, channel: str) -> int:
        """Stall threshold of ``channel`` in the model's fixed point (probability * 2**32)."""
        return round(self.stall(channel) * (1 << STALL_FRACTION_BITS))


def _check_int(key: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad_field(key, value, f"must be an integer in {lo}..{hi}")


def _bw_fraction(bw: float) -> Fraction:
    return Fraction(bw).limit_denominator(BW_MAX_DENOMINATOR)


def _number(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad_field(key, value, "must be a finite number")
    return float(value)


_KEYS = {"latency": "read_latency", "read_latency": "read_latency",
         "wlatency": "write_latency", "write_latency": "write_latency",
         "bw": "bytes_per_cycle", "bytes_per_cycle": "bytes_per_cycle",
         "stall": "stall", "seed": "seed", **{f"{c}_stall": f"{c}_stall" for c in CHANNELS}}
_INT_FIELDS = ("read_latency", "write_latency", "seed")


def _parse_pairs(items: list[str]) -> tuple[dict, dict]:
    """``["latency=100", "stall=0.3"]`` -> DramTiming field values (``stall`` expanded), and
    for each field the key and the value text it was written as."""
    seen: dict[str, object] = {}
    written: dict[str, tuple[str, str]] = {}
    for item in items:
        key, eq, raw = (s.strip() for s in item.partition("="))
        if not eq:
            raise DramTimingError(f"{item!r}: expected key=value (a preset name may only "
                                  "come first)")
        fld = _KEYS.get(key.lower())
        if fld is None:
            raise DramTimingError(f"unknown DRAM timing key {key!r}; keys: {', '.join(_KEYS)}")
        if fld in seen:
            raise DramTimingError(f"DRAM timing key {key!r} given twice")
        seen[fld] = _value(key, fld, raw)
        written[fld] = (key, raw)
    out = {k: v for k, v in seen.items() if k != "stall"}
    if "stall" in seen:
        if not 0 <= seen["stall"] < 1:
            key, raw = written["stall"]     # as written (stall=1, not the float's 1.0)
            raise DramTimingError(f"{key}={raw}: a probability in [0, 1) is needed (it sets "
                                  "every channel's)")
        for ch in CHANNELS:
            if f"{ch}_stall" not in out:
                out[f"{ch}_stall"] = seen["stall"]
                written[f"{ch}_stall"] = written["stall"]
    return out, written


def _value(key: str, fld: str, raw: str):
    if fld == "bytes_per_cycle" and raw.lower() in ("none", "bus"):
        return None
    try:
        return int(raw, 0) if fld in _INT_FIELDS else float(raw)
    except ValueError:
        kind = "an integer" if fld in _INT_FIELDS else "a number"
        raise DramTimingError(f"{key}={raw!r}: must be {kind}") from None


# -- the model's generators, in Python ----------------------------------------------------------

def _fmix32(x: int) -> int:
    """MurmurHash3's 32-bit finalizer (Appleby, public domain): spreads a seed's bits."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & _MASK32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)


def _xorshift32(x: int) -> int:
    """Marsaglia's xorshift32 (13, 17, 5), "Xorshift RNGs", J. Stat. Softw. 8(14), 2003."""
    x ^= (x << 13) & _MASK32
    x ^= x >> 17
    return x ^ ((x << 5) & _MASK32)


def channel_seed(seed: int, channel: str) -> int:
    """Initial state of ``channel``'s generator for ``seed`` (nonzero), as in ``dram.sv``."""
    state = _fmix32((seed ^ (0x9E3779B9 * (CHANNELS.index(channel) + 1))) & _MASK32)
    return state or 1


def stall_draws(timing: DramTiming, channel: str) -> Iterator[bool]:
    """The model's stall decisions of ``channel`` after reset: the ``k``-th value (from 0)
    says whether the channel is withheld in cycle ``k``, where cycle 0 follows the last
    rising edge with reset high and cycle ``k`` follows ``k`` rising edges with reset low.
    Cycle 0 is never withheld (the decision register comes out of reset clear); at each
    later edge the generator steps (xorshift32) and the channel is withheld for the next
    cycle if the new 32-bit state is below the probability * 2**32."""
    p = timing.stall_fixed(channel)
    state = channel_seed(timing.seed, channel)
    yield False
    while True:
        state = _xorshift32(state)
        yield state < p


# -- presets ------------------------------------------------------------------------------------

IDEAL = DramTiming(name="ideal")

PRESETS: dict[str, DramTiming] = {
    "ideal": IDEAL,
    # DDR-like: one DDR4-2400 x16 channel, as on small SoC boards, behind a 1 GHz NPU.
    "ddr": DramTiming(read_latency=80, write_latency=30, bytes_per_cycle=4.8, name="ddr"),
    # HBM-like: one HBM2 pseudo channel (64 bits at 2 Gb/s per pin).
    "hbm": DramTiming(read_latency=100, write_latency=40, bytes_per_cycle=16.0, name="hbm"),
    # For tests: some latency, a bandwidth limit, backpressure on every channel.
    "jitter": DramTiming(read_latency=20, write_latency=10, bytes_per_cycle=6.0,
                         ar_stall=0.25, r_stall=0.25, aw_stall=0.25, w_stall=0.25,
                         b_stall=0.25, seed=1, name="jitter"),
    # For the performance model's validation corpus.
    "lat100": DramTiming(read_latency=100, name="lat100"),
    "bp50": DramTiming(r_stall=0.5, seed=1, name="bp50"),
}
#: Where each preset's numbers come from (also in the module docstring).
PRESET_NOTES: dict[str, str] = {
    "ideal": (
        "Today's model: read latency 3 cycles (the model's pipeline), write response 1 cycle, "
        "no bandwidth limit (R and W one bus beat per cycle each), no backpressure."),
    "ddr": (
        "One DDR4-2400 x16 channel behind a 1 GHz NPU. Bandwidth: 2400 MT/s x 2 bytes = "
        "4.8 GB/s = 4.8 B/cycle (peak; refresh and bank conflicts are not modelled). Read "
        "latency 80 cycles: a row miss costs tRP + tRCD + tAA = 3 x 13.32 ns = 40 ns "
        "(DDR4-2400R, CL-nRCD-nRP 16-16-16, JEDEC JESD79-4 speed bins, as in Micron's 4Gb DDR4 "
        "data sheet, 'DDR4-2400 Speed Bins'), plus the BL8 burst (8 / 2.4 GT/s = 3.3 ns) and "
        "about 35 ns of controller queue, PHY and interconnect (an assumption, typical of a "
        "loaded SoC memory path; Li, Reddy and Jacob, MEMSYS 2018, find loaded DRAM latency "
        "dominated by queueing). Write response 30 cycles: a controller acknowledges a write "
        "once its data is in its write queue (CWL = 12 tCK = 10 ns plus the controller; an "
        "assumption)."),
    "hbm": (
        "One HBM2 pseudo channel behind a 1 GHz NPU: 64 data bits at 2.0 Gb/s per pin "
        "(JESD235A: 8 channels x 128 bits per stack, each split into 2 x 64-bit pseudo "
        "channels) = 16 GB/s = 16 B/cycle, more than an 8-byte AXI port moves, so on the "
        "default NPU this preset is latency-bound. Read latency 100 cycles: a DDR4-like DRAM "
        "core (tRP, tRCD, tCL about 14 ns each: 42 ns for a row miss) plus a deeper "
        "controller, interposer PHY and network-on-chip path (about 55 ns, an assumption). "
        "Write response 40 cycles (an assumption, as for ddr)."),
    "jitter": (
        "For tests: read latency 20, write response 10, 6 B/cycle shared by R and W, and 25% "
        "random backpressure on AR, R, AW, W and B (seed 1). Exposes ordering bugs that an "
        "answer-at-once memory hides."),
    "lat100": "Read latency 100 cycles, nothing else (performance-model validation corpus).",
    "bp50": "RVALID withheld in 50% of the cycles (seed 1), nothing else (validation corpus).",
}
__doc__ += "\nPresets\n-------\n" + "".join(f"``{k}``\n    {v}\n" for k, v in PRESET_NOTES.items())
