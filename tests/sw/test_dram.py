"""sw.dram: the DRAM timing value, its presets, parser, plusargs and the Python mirror of the
model's backpressure generators (pure Python; the pin-level checks are in
tests/cosim/test_dram_timing.py)."""

import dataclasses
import itertools
import subprocess
import sys

import pytest

from sw.dram import (
    CHANNELS,
    MIN_READ_LATENCY,
    MIN_WRITE_LATENCY,
    PRESET_NOTES,
    PRESETS,
    DramTiming,
    DramTimingError,
    stall_draws,
)


def test_ideal_is_the_default_and_needs_no_plusargs():
    for t in (DramTiming(), DramTiming.parse("ideal"), DramTiming.parse(None),
              DramTiming.parse(""), DramTiming.parse(" IDEAL ")):
        assert t == PRESETS["ideal"] and t.is_ideal and t.to_plusargs() == []
    assert DramTiming().read_latency == MIN_READ_LATENCY == 3
    assert DramTiming().write_latency == MIN_WRITE_LATENCY == 1
    assert DramTiming().bytes_per_cycle is None


def test_presets_are_documented_and_named():
    assert set(PRESETS) == set(PRESET_NOTES) >= {"ideal", "ddr", "hbm", "jitter", "lat100",
                                                 "bp50"}
    for name, t in PRESETS.items():
        assert DramTiming.parse(name) is t and t.name == name
    assert PRESETS["lat100"] == DramTiming(read_latency=100)
    assert PRESETS["bp50"] == DramTiming(r_stall=0.5)
    jitter = PRESETS["jitter"]
    assert all(jitter.stall(ch) > 0 for ch in CHANNELS) and jitter.read_latency > 3
    assert PRESETS["ddr"].bytes_per_cycle == 4.8 and PRESETS["hbm"].bytes_per_cycle == 16
    assert "JESD79-4" in PRESET_NOTES["ddr"] and "JESD235" in PRESET_NOTES["hbm"]


def test_explicit_values_and_overrides():
    t = DramTiming.parse("latency=100,bw=4,stall=0.3,seed=1")
    assert (t.read_latency, t.write_latency, t.bytes_per_cycle, t.seed) == (100, 1, 4.0, 1)
    assert all(t.stall(ch) == pytest.approx(0.3, abs=1e-9) for ch in CHANNELS)
    t = DramTiming.parse("r_stall=0.1, stall=0.3,wlatency=7")     # channel key wins over stall
    assert t.r_stall == pytest.approx(0.1) and t.b_stall == pytest.approx(0.3)
    assert t.write_latency == 7
    t = DramTiming.parse("jitter,seed=7")
    assert t == dataclasses.replace(PRESETS["jitter"], seed=7) and t.name == "jitter,seed=7"
    assert DramTiming.parse("bw=none") == DramTiming()


@pytest.mark.parametrize("text", ["ideal", "ddr", "hbm", "jitter", "lat100", "bp50",
                                  "latency=77,bw=2.5,r_stall=0.125,seed=9", "seed=5"])
def test_spec_and_dict_round_trip(text):
    t = DramTiming.parse(text)
    assert DramTiming.parse(t.spec()) == t
    assert DramTiming.from_dict(t.to_dict()) == t
    assert t.spec() in t.describe()
    assert ("no bandwidth limit (R and W one bus beat per cycle each)" in t.describe()) == (
        t.bytes_per_cycle is None)     # in words (it said "bandwidth bus")


@pytest.mark.parametrize("text, stalls", [
    ("stall=1e-3", "AR 0.1%, R 0.1%, AW 0.1%, W 0.1%, B 0.1%"),     # said 0%
    ("r_stall=0.99999", "R 99.999%"),                              # said 100%
    ("ar_stall=0.3,b_stall=0.07", "AR 30%, B 7%"),
])
def test_describe_keeps_a_stall_probabilitys_digits(text, stalls):
    assert f"backpressure {stalls} (seed " in DramTiming.parse(text).describe()


def test_bandwidth_is_an_exact_fraction():
    assert DramTiming(bytes_per_cycle=2.5).bw_fraction == (5, 2)
    assert DramTiming(bytes_per_cycle=4.8).bw_fraction == (24, 5)
    assert DramTiming(bytes_per_cycle=6).to_plusargs() == ["+npu_dram_bw_num=6",
                                                           "+npu_dram_bw_den=1"]
    assert DramTiming().bw_fraction is None


def test_plusargs_of_every_key():
    t = DramTiming(read_latency=10, write_latency=4, bytes_per_cycle=0.5, ar_stall=0.5,
                   r_stall=0.25, seed=3)
    assert t.to_plusargs() == [
        "+npu_dram_rd_latency=10", "+npu_dram_wr_latency=4", "+npu_dram_bw_num=1",
        "+npu_dram_bw_den=2", f"+npu_dram_ar_stall={1 << 31}", f"+npu_dram_r_stall={1 << 30}",
        "+npu_dram_seed=3"]


@pytest.mark.parametrize("p, fixed", [
    (0.1, 429496730),       # 0.1 * 2**32 = 429496729.6: rounded up, not truncated
    (0.3, 1288490189),      # 1288490188.8
    (0.6, 2576980378),      # 2576980377.6
    (0.2, 858993459),       # 858993459.2: rounded down
])
def test_stall_threshold_is_the_probability_rounded_to_nearest(p, fixed):
    """The stall probability in the model's fixed point (``p * 2**32``, hand-computed) rounds
    to nearest: fractions that are not a whole number of 2**-32 (the exact ones above hide
    the rounding rule)."""
    t = DramTiming(w_stall=p, seed=2)
    assert t.stall_fixed("w") == fixed
    assert f"+npu_dram_w_stall={fixed}" in t.to_plusargs()


@pytest.mark.parametrize("text, words", [
    # a value out of range is named as the text wrote it (latency, not read_latency)
    ("latency=2", ["latency=2: ", "3..65535"]),
    ("latency=-1", ["latency=-1: ", "3..65535"]),
    ("jitter,latency=70000", ["latency=70000: ", "3..65535"]),
    ("read_latency=2", ["read_latency=2: ", "3..65535"]),
    ("wlatency=0", ["wlatency=0: ", "1..65535"]),
    ("latency=1.5", ["latency", "integer"]),
    # in words: what 0 would mean, and how to say "no limit" (it said "or None")
    ("bw=0", ["bw=0: ", "[0.001, 1024]", "would let no data through",
              "for no bandwidth limit leave bw out or give bw=none"]),
    ("bw=2000", ["bw=2000: ", "1024", "for no bandwidth limit leave bw out or give bw=none"]),
    ("bw=inf", ["bw=inf: ", "finite"]),
    ("bw=fast", ["bw", "number"]),
    # as written: it said stall=1.0 (the float it was read as)
    ("stall=1", ["stall=1: ", "[0, 1)", "every channel"]),
    ("stall=2e0", ["stall=2e0: ", "[0, 1)"]),
    ("stall=0.99999999999", ["stall=0.99999999999: ", "[0, 1)"]),  # 1 on the stall grid
    ("b_stall=-0.1", ["b_stall=-0.1: ", "[0, 1)"]),
    ("seed=-1", ["seed=-1: ", "4294967295"]),
    ("speed=3", ["unknown", "speed", "latency"]),
    ("latency=3,latency=4", ["latency", "twice"]),
    ("dddr", ["unknown DRAM preset", "ideal", "jitter"]),
    ("latency=100,ddr", ["key=value", "first"]),
])
def test_bad_input_names_the_key_and_the_range(text, words):
    with pytest.raises(DramTimingError) as e:
        DramTiming.parse(text)
    assert isinstance(e.value, ValueError)
    assert "None" not in str(e.value)       # Python's word, not one the text can use
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    if e.value.field is not None:       # a value out of range: the key the text used
        assert str(e.value).startswith(tuple(f"{item.partition('=')[0]}="
                                             for item in text.split(","))), str(e.value)


def test_bad_field_types():
    with pytest.raises(DramTimingError, match="read_latency"):
        DramTiming(read_latency=True)
    with pytest.raises(DramTimingError, match="r_stall"):
        DramTiming(r_stall=float("nan"))


def test_stall_draws_are_seeded_and_at_the_rate():
    t = DramTiming(r_stall=0.3, w_stall=0.3, seed=4)
    n = 40_000
    r = list(itertools.islice(stall_draws(t, "r"), n))
    assert r[0] is False                                    # out of reset: never withheld
    assert r == list(itertools.islice(stall_draws(t, "r"), n))
    assert r != list(itertools.islice(stall_draws(t, "w"), n))          # per channel
    assert r != list(itertools.islice(stall_draws(DramTiming(r_stall=0.3, seed=5), "r"), n))
    assert abs(sum(r) - 0.3 * n) < 5 * (n * 0.3 * 0.7) ** 0.5
    assert not any(itertools.islice(stall_draws(DramTiming(), "ar"), 1000))


def test_imports_neither_cosim_nor_amaranth():
    code = ("import sys, sw.dram; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('cosim', 'amaranth', 'hw', 'cocotb')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
