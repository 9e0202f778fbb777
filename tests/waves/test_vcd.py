"""The streaming VCD reader (cosim.waves.vcd) on hand-written tricky files in tests/data/.

Every file is read twice, by the fast reader (numpy scan, the checked reader for irregular
stretches) and by the checked reader alone (``fast=False``): both must give the same steps,
warnings and errors. Values are canonical (``canonical``): ints, full-width x/z strings,
floats, texts."""

import re
import warnings
from fractions import Fraction
from pathlib import Path

import pytest

from cosim.waves.vcd import (
    MAX_LINE_WARNINGS,
    ClockSampler,
    VcdFormatError,
    VcdSignalError,
    VcdSkippedLineWarning,
    VcdValueError,
    VcdVar,
    VcdWidthWarning,
    canonical,
    parse_timescale,
    read_header,
    scan,
    stream,
    to_float,
    to_int,
)
from cosim.waves.vcd.scan import vcd_changes

DATA = Path(__file__).parents[1] / "data"


def changes(path: Path, names: list[str]) -> list[tuple[int, dict[str, object]]]:
    """(time, canonical values by name) at the end of every timestamp where one of ``names``
    changed, read by both readers (which must agree, warnings included)."""
    got = []
    for fast in (True, False):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            got.append((_changes(path, names, fast), [(w.category, str(w.message))
                                                         for w in rec]))
    assert got[0] == got[1], "the fast and the checked reader differ"
    for category, message in got[0][1]:     # the warnings once more, for pytest.warns
        warnings.warn(category(message), stacklevel=2)
    return got[0][0]


def _changes(path: Path, names: list[str], fast: bool) -> list[tuple[int, dict[str, object]]]:
    header = read_header(path)
    vars_ = {n: header.find(n) for n in names}
    out: list[tuple[int, dict[str, object]]] = []

    def step(t: int, vals: dict[str, object]) -> None:
        snap = {n: vals.get(v.id) for n, v in vars_.items()}
        if out and out[-1][0] == t:
            out[-1] = (t, snap)
        elif not out or out[-1][1] != snap:
            out.append((t, snap))

    stream(path, header, vars_.values(), step, fast=fast)
    return out


def test_aliases_share_one_code_and_values():
    h = read_header(DATA / "vcd_aliases.vcd")
    assert [v.path for v in h.by_id['"']] == ["top.a.busy", "top.b.busy_alias"]
    assert [v.path for v in h.by_id["!"]] == ["top.clk", "top.b.clk"]
    assert h.timescale_s == Fraction(1, 10**9)
    got = changes(DATA / "vcd_aliases.vcd", ["top.a.busy", "top.b.busy_alias",
                                             "top.b.data_alias[7:0]"])
    assert got[-1] == (15, {"top.a.busy": 0, "top.b.busy_alias": 0,
                            "top.b.data_alias[7:0]": 0b10100101})
    assert (5, {"top.a.busy": 1, "top.b.busy_alias": 1,
                "top.b.data_alias[7:0]": 0b10100101}) in got
    # sampling at rising edges sees the alias exactly like the original
    seen = []
    clk, busy = h.find("top.clk"), h.find("top.b.busy_alias")
    sampler = ClockSampler(clk, [busy], lambda c, t, v: seen.append((c, t, v[busy.id])))
    stream(DATA / "vcd_aliases.vcd", h, [clk, busy], sampler.step, with_previous=True)
    assert seen == [(0, 10, 1), (1, 20, 0)]


def test_escaped_and_bracketed_names():
    h = read_header(DATA / "vcd_names.vcd")
    s = "top.inst.with.dots"
    assert h.scopes == ["top", s]
    foo = h.find(f"{s}.foo[3]")                       # escaped: the brackets are the name
    assert (foo.width, foo.msb, foo.reference) == (1, None, "top.\\inst.with.dots.\\foo[3]")
    assert h.find(f"{s}.\\foo[3]") is foo             # the backslash is optional
    bus = h.find(f"{s}.bus")                          # "bus [7:0]": range optional in lookups
    assert (bus.path, bus.msb, bus.lsb, bus.width) == (f"{s}.bus[7:0]", 7, 0, 8)
    nib = h.find(f"{s}.nib[3:0]")                     # range written without a space
    assert (nib.base, nib.msb, nib.lsb) == (f"{s}.nib", 3, 0)
    assert h.find(f"{s}.addr$21").width == 7
    assert h.find(f"{s}.$auto$verilog_backend.cc:2355:dump_module$23").id == "%"
    assert h.find(f"{s}.bit").msb == 5
    assert h.find(f"{s}.payload.header.flags").width == 2
    got = changes(DATA / "vcd_names.vcd", [f"{s}.foo[3]", f"{s}.bus", f"{s}.addr$21",
                                           f"{s}.payload.header.flags"])
    assert got[0] == (0, {f"{s}.foo[3]": 1, f"{s}.bus": 0b11110000, f"{s}.addr$21": 0b1111111,
                          f"{s}.payload.header.flags": 0b10})
    assert got[-1][1][f"{s}.foo[3]"] == 0
    with pytest.raises(VcdSignalError, match="similar: top.inst.with.dots.bus"):
        h.find("top.bus")


def test_x_z_and_wide_vectors():
    h = read_header(DATA / "vcd_xz_wide.vcd")
    assert h.timescale_s == Fraction(1, 10**11)
    assert h.find("top.wide").width == 128
    names = ["top.s", "top.wide", "top.short", "top.unknown", "top.hiz"]
    got = dict(changes(DATA / "vcd_xz_wide.vcd", names))
    assert got[0] == {"top.s": "x", "top.wide": "x" * 128, "top.short": 0b101,
                      "top.unknown": "zzzz0000", "top.hiz": "z"}
    assert [to_int(v) for v in got[0].values()] == [None, None, 5, None, None]
    assert to_int(got[1]["top.wide"]) == (1 << 127) | 1
    assert got[1]["top.short"] == "xxxxxxx1"           # bx1: x-extended
    assert to_int(got[1]["top.short"]) is None
    assert to_int(got[1]["top.unknown"]) == 0
    assert got[2]["top.s"] == 0 and got[2]["top.hiz"] == 1  # changes on the '#' line


def test_string_and_real_variables():
    # vcdvcd drops 's' lines silently; cosim.waves.vcd reads them
    h = read_header(DATA / "vcd_strings.vcd")
    assert h.find("top.state_name").kind == "string"
    assert h.find("top.temperature").kind == "real"
    got = changes(DATA / "vcd_strings.vcd", ["top.state_name", "top.temperature"])
    assert got == [(0, {"top.state_name": "IDLE", "top.temperature": 36.6}),
                   (7, {"top.state_name": "FETCH_HEADER", "top.temperature": 36.6}),
                   (14, {"top.state_name": "DONE", "top.temperature": -1.5e3})]
    assert h.timescale_s == Fraction(1, 10**13)


@pytest.mark.parametrize("text, seconds", [
    ("1ns", Fraction(1, 10**9)), ("1 ns", Fraction(1, 10**9)), ("10ps", Fraction(1, 10**11)),
    ("100 fs", Fraction(1, 10**13)), ("1 s", Fraction(1)), ("10us", Fraction(1, 10**5)),
    (" 100\n ms ", Fraction(1, 10)),
])
def test_timescale_forms(text, seconds):
    assert parse_timescale(text)[0] == seconds


@pytest.mark.parametrize("text", ["0ps", "0 ns", "000 fs", "0.0 s"])
def test_zero_timescale_is_rejected(text):
    with pytest.raises(VcdFormatError, match=f"zero \\$timescale '{text}'"):
        parse_timescale(text)


def test_zero_timescale_file_names_it():
    with pytest.raises(VcdFormatError,
                       match=r"vcd_zero_timescale.vcd:1: zero \$timescale '0ps': every time "
                             "would be 0 s"):
        read_header(DATA / "vcd_zero_timescale.vcd")


def test_timescale_split_across_lines():
    h = read_header(DATA / "vcd_timescale_split.vcd")
    assert (h.timescale_s, h.timescale) == (Fraction(1, 10**9), "1 ns")
    assert changes(DATA / "vcd_timescale_split.vcd", ["top.clk"])[-1] == (3, {"top.clk": 0})


def test_dumpoff_makes_values_unknown():
    h = read_header(DATA / "vcd_dumpoff.vcd")
    got = dict(changes(DATA / "vcd_dumpoff.vcd", ["top.busy", "top.count"]))
    assert got[0] == {"top.busy": 1, "top.count": 0b0011}
    assert got[10] == {"top.busy": "x", "top.count": "xxxx"}
    assert got[30] == {"top.busy": 0, "top.count": 0b0110}
    # no rising edge is seen while dumping is off (clk is x); one after $dumpon (x -> 1 is
    # not an edge) -- so the cycle count never invents cycles inside the gap
    edges = []
    clk = h.find("top.clk")
    sampler = ClockSampler(clk, [h.find("top.busy")], lambda c, t, v: edges.append(t))
    stream(DATA / "vcd_dumpoff.vcd", h, [clk, h.find("top.busy")], sampler.step, with_previous=True)
    assert edges == []


def test_malformed_var_has_line_number():
    with pytest.raises(VcdFormatError, match=r"vcd_bad_var.vcd:4: \$var size 'eight'") as e:
        read_header(DATA / "vcd_bad_var.vcd")
    assert e.value.line == 4


def test_malformed_timescale_has_line_number():
    with pytest.raises(VcdFormatError, match=r":1: bad \$timescale '3 parsecs'"):
        read_header(DATA / "vcd_bad_timescale.vcd")


def test_malformed_body_line_is_skipped_with_its_line_number():
    with pytest.warns(VcdSkippedLineWarning,
                      match=r"vcd_bad_body.vcd:9: skipped malformed line 'b1010'"):
        got = changes(DATA / "vcd_bad_body.vcd", ["top.clk", "top.data"])
    assert got[-1] == (5, {"top.clk": 0, "top.data": None})     # read on after line 9


def test_malformed_value_lines_are_skipped_and_named():
    """Each malformed line gives one warning with its number and text; the file is read."""
    path = DATA / "vcd_malformed_lines.vcd"
    with pytest.warns(VcdSkippedLineWarning) as rec:
        got = dict(changes(path, ["top.clk", "top.data", "top.level"]))
    named = [re.search(r"vcd_malformed_lines.vcd:(\d+): skipped malformed line '(.*)': ",
                       str(w.message)).groups() for w in rec]
    assert named == [("14", "b1010"), ("15", 'b10102 "'), ("16", "rabc #"), ("17", "1?"),
                     ("18", "hello world"), ("19", "$dumpports"), ("23", "1")]
    assert got[5] == {"top.clk": 0, "top.data": 0b00000001, "top.level": 0.5}
    assert got[10] == {"top.clk": 1, "top.data": 0b00000011, "top.level": 0.5}  # '#' line
    assert got[20] == {"top.clk": 1, "top.data": 0b00000100, "top.level": 2.0}
    h = read_header(path)
    edges = []
    sampler = ClockSampler(h.find("top.clk"), [], lambda c, t, v: edges.append(t))
    with pytest.warns(VcdSkippedLineWarning):
        stream(path, h, [h.find("top.clk")], sampler.step, with_previous=True)
    assert edges == [10, 20]


def test_many_malformed_lines_then_one_count(tmp_path):
    p = tmp_path / "many.vcd"
    p.write_text("$scope module top $end\n$var wire 8 ! d [7:0] $end\n$upscope $end\n"
                 "$enddefinitions $end\n#0\n" + "b1\n" * 15 + "b101 !\n")
    h = read_header(p)
    seen = []
    with pytest.warns(VcdSkippedLineWarning) as rec:
        stream(p, h, h.vars, lambda t, v: seen.append(v["!"]))
    assert len(rec) == MAX_LINE_WARNINGS + 1 and seen[-1] == 0b101
    assert [int(str(w.message).split(":")[1]) for w in rec[:-1]] == list(range(6, 16))
    assert "5 more malformed lines skipped (lines 16 .. 20; 15 in all)" in str(rec[-1].message)


def test_changes_on_a_dumpvars_line(tmp_path):
    p = tmp_path / "inline.vcd"
    p.write_text("$var wire 1 ! a $end\n$var wire 3 \" b [2:0] $end\n$enddefinitions $end\n"
                 "#0\n$dumpvars 1! b101 \" $end\n#4 0! b11 \"\n")
    assert changes(p, ["a", "b"]) == [(0, {"a": 1, "b": 0b101}), (4, {"a": 0, "b": 0b11})]


def test_escaped_names_lose_both_backslashes():
    """Vivado ends escaped names with a backslash too (\\<const0>\\): neither is the name."""
    h = read_header(DATA / "vcd_values.vcd")
    assert h.scopes == ["top", "top.gen.blk"]
    c0 = h.find("top.gen.blk.<const0>")
    assert (c0.path, c0.name, c0.id) == ("top.gen.blk.<const0>", "<const0>", "!")
    assert h.find("top.\\gen.blk\\.\\<const0>\\") is c0          # as written in the file
    dout = h.find("top.gen.blk.^dout")
    assert (dout.path, dout.msb, dout.lsb, dout.width) == ("top.gen.blk.^dout[3:0]", 3, 0, 4)
    assert changes(DATA / "vcd_values.vcd", ["top.gen.blk.<const0>"])[0] == (
        0, {"top.gen.blk.<const0>": 0})


def test_bracket_suffix_is_a_range_only_if_it_spans_the_width():
    h = read_header(DATA / "vcd_values.vcd")
    x0 = h.find("top.x[0]")                          # a 1-bit variable named x[0]
    assert (x0.width, x0.msb, x0.lsb, x0.base, x0.id) == (1, None, None, "top.x[0]", "#")
    x = h.find("top.x")                              # the 8-bit x [7:0], not x[0]
    assert (x.id, x.msb, x.lsb, x.path) == ("%", 7, 0, "top.x[7:0]")
    mem = h.find("top.mem[3]")                       # a memory word, 8 bits
    assert (mem.width, mem.msb, mem.base) == (8, None, "top.mem[3]")
    assert h.get("top.mem") is None
    nib = h.find("top.nib")                          # attached, spans the width: a range
    assert (nib.msb, nib.lsb, nib.path) == (3, 0, "top.nib[3:0]")
    pair = h.find("top.pair[3:0]")                   # 2 bits: [3:0] is part of the name
    assert (pair.width, pair.msb, pair.base) == (2, None, "top.pair[3:0]")
    assert h.get("top.pair") is None


def test_real_string_and_signed_values():
    h = read_header(DATA / "vcd_values.vcd")
    temp, volts, state = (h.find(f"top.{n}") for n in ("temp_c", "volts", "state"))
    got = dict(changes(DATA / "vcd_values.vcd", ["top.temp_c", "top.volts", "top.state"]))
    t, v, s = (got[0][n] for n in ("top.temp_c", "top.volts", "top.state"))
    assert (temp.to_int(t, signed=True), temp.to_int(t), temp.value(t)) == (-5, 251, 251)
    assert temp.to_int(got[10]["top.temp_c"], signed=True) == 7      # b0111: zero-extended
    assert temp.to_int(got[20]["top.temp_c"], signed=True) is None    # b1x
    assert volts.value(v) == 1.25 and isinstance(volts.value(v), float)
    assert volts.value(got[10]["top.volts"]) == -2.5e-3 and volts.value(got[20]["top.volts"]) \
        is None
    assert (state.value(s), state.value(got[10]["top.state"])) == ("IDLE", "RUN")
    with pytest.raises(VcdValueError, match="top.state is a string variable"):
        state.to_int(s)
    with pytest.raises(VcdValueError, match="top.volts is a real variable"):
        volts.to_int(v)
    with pytest.raises(VcdValueError, match="not a VCD bit string"):
        to_int(s)
    with pytest.raises(VcdValueError, match="not a real value"):
        to_float("abc")


@pytest.mark.parametrize("value, width, unsigned, signed", [
    ("b1011", 4, 11, -5), ("1011", 8, 11, 11), ("11111011", 8, 251, -5), ("1", 1, 1, -1),
    ("0", 1, 0, 0), ("b0111", 4, 7, 7), ("1000", 4, 8, -8), ("110000", 4, 0, 0),
    ("z1", 8, None, None), ("x", 4, None, None),
])
def test_to_int_signed(value, width, unsigned, signed):
    assert to_int(value, width=width) == unsigned
    assert to_int(value, signed=True, width=width) == signed


def test_to_int_rejects():
    with pytest.raises(ValueError, match="needs its variable's width"):
        to_int("1011", signed=True)
    for bad in ("", "b", "12", "b1_0", "-1", " 1"):
        with pytest.raises(VcdValueError):
            to_int(bad)
    assert to_int(None) is None and to_float(None) is None and to_float("r-3") == -3.0


def test_wider_values_are_truncated_with_one_warning_per_variable():
    path = DATA / "vcd_wide_values.vcd"
    with pytest.warns(VcdWidthWarning) as rec:
        got = dict(changes(path, ["top.narrow", "top.other", "top.bit"]))
    assert got[10] == {"top.narrow": 0b0011, "top.other": 0b0000, "top.bit": 0}
    assert got[20] == {"top.narrow": 0b0000, "top.other": 0b0000, "top.bit": 1}
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 3
    assert msgs[0].startswith(f"{path}:16: value 'b110011' of top.narrow[3:0] has 6 bits, more "
                              "than its declared 4: keeping the low 4")
    assert ":17: value 'b111110000' of top.other" in msgs[1] and ":18:" in msgs[2]


@pytest.mark.parametrize("text, message", [
    ("$scope module top $end\n", "no \\$enddefinitions"),
    ("$scope module top $end\n$enddefinitions $end\n", ":2: \\$enddefinitions inside scope"),
    ("$upscope $end\n", ":1: \\$upscope without"),
    ("$comment never closed\n", ":1: \\$comment is never closed"),
    ("$scope module top $end\n$var wire 1 ! a\n $end\n$upscope $end\n$enddefinitions $end\n",
     ":2: \\$var split across lines"),
    ("$var wire 1 ! a $end\n$var wire 2 ! b [1:0] $end\n$enddefinitions $end\n",
     ":2: identifier '!' declared 2 bits"),
    ("#0\n", ":1: unexpected '#0'"),
    ("$enddefinitions $end\n#5\n#3\n", ":3: time goes backwards"),
    ("$enddefinitions $end\n#5\n#1x\n", ":3: bad time '#1x'"),
    ("$timescale 0 ps $end\n$enddefinitions $end\n", ":1: zero \\$timescale '0 ps'"),
])
def test_malformed_files(tmp_path, text, message):
    p = tmp_path / "bad.vcd"
    p.write_text(text)
    with pytest.raises(VcdFormatError, match=message):
        h = read_header(p)
        stream(p, h, h.vars, lambda t, v: None)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        read_header(DATA / "no_such.vcd")


def _var(width: int, kind: str = "wire") -> VcdVar:
    return VcdVar("top.v", "top.v", "top", "v", "!", kind, width, None, None, 1, "top.v")


@pytest.mark.parametrize("width, value, canon", [
    (8, "b00000101", 5), (8, "b101", 5), (4, "1", 1), (1, "0", 0), (1, "x", "x"),
    (4, "b1x", "001x"), (4, "bx1", "xxx1"), (4, "bZ", "zzzz"), (4, "x", "xxxx"),
    (64, "b" + "1" * 64, (1 << 64) - 1), (1, "r2.5", 2.5), (1, "rx", None),
    (1, "sIDLE", "IDLE"),
])
def test_canonical_values(width, value, canon):
    got = canonical(_var(width), value)
    assert got == canon and type(got) is type(canon)


def test_to_int_of_canonical_ints():
    assert to_int(251, signed=True, width=8) == -5 and to_int(251) == 251
    assert to_int(0b110011, width=4) == 0b0011 and to_int(7, signed=True, width=4) == 7
    for bad in (-1, 2.5, True):
        with pytest.raises(VcdValueError):
            to_int(bad)


def _big(tmp_path, bad_at: dict[int, str] | None = None, n: int = 3000,
         back_from: int | None = None) -> Path:
    """A regular file of ``n`` timestamps (times 10 apart), with line ``k`` of the body
    replaced by ``bad_at[k]``; from timestamp ``back_from`` on, every time 1000 earlier."""
    lines = ["$timescale 1ns $end", "$scope module top $end", "$var wire 1 ! clk $end",
             '$var wire 12 " count [11:0] $end', "$var wire 1 # odd $end", "$upscope $end",
             "$enddefinitions $end"]
    body = []
    for t in range(n):
        body += [f"#{10 * t - (1000 if back_from is not None and t >= back_from else 0)}",
                 f"{t % 2}!", f"b{t % 4096:b} \"", f"{(t // 7) % 2}#"]
    for k, text in (bad_at or {}).items():
        body[k] = text
    p = tmp_path / "big.vcd"
    p.write_text("\n".join(lines + body) + "\n")
    return p


def _read(p: Path, fast: bool, chunk: int) -> tuple[list, list]:
    h = read_header(p)
    ids = [v.id for v in h.vars]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = [(int(t), int(s), b.value(i)) for b in vcd_changes(p, h, ids, fast=fast,
                                                                  chunk_bytes=chunk)
               for i, (t, s) in enumerate(zip(b.times, b.slots, strict=True))]
    return got, [str(w.message) for w in rec]


@pytest.mark.parametrize("chunk", [64, 1000, 1 << 20])
def test_fast_reader_across_chunks(tmp_path, chunk, monkeypatch):
    """Chunks of any size give the checked reader's values; a malformed line in the middle
    sends its chunk (only) to the checked reader, with the right line number."""
    p = _big(tmp_path, {5001: "b1021 \"", 9001: "1?"})
    scans = []
    real = scan._scan
    monkeypatch.setattr(scan, "_scan", lambda d, t: scans.append(real(d, t)) or scans[-1])
    fast, fast_warn = _read(p, True, chunk)
    refused = [c is None for c in scans]
    assert 0 < sum(refused) <= 2 and refused.count(False) >= 1    # scanned, but for those
    checked, checked_warn = _read(p, False, chunk)
    assert fast == checked and fast_warn == checked_warn and len(fast) == 3 * 3000 - 2
    assert [re.search(r":(\d+): skipped malformed line '(.*?)'", w).groups()
            for w in fast_warn] == [("5009", 'b1021 "'), ("9009", "1?")]
    assert fast[:3] == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]


def test_fast_reader_refuses_what_it_cannot_check(tmp_path):
    """x bits, a CRLF, a too wide value, changes on a '#' line, a $comment across chunk
    boundaries: all read as the checked reader reads them."""
    p = _big(tmp_path, {101: "bx1 \"", 205: "0!\r", 302: "b1" + "0" * 12 + " \"",
                        400: "#1000 1!", 500: "$comment", 501: "#2000", 502: "$end"})
    fast, fast_warn = _read(p, True, 200)
    assert (fast, fast_warn) == _read(p, False, 200)
    assert any("keeping the low 12" in w for w in fast_warn)
    assert (250, 1, "xxxxxxxxxxx1") in fast and (1000, 0, 1) in fast
    assert not any(t == 1250 for t, *_ in fast)           # the #1250 line was commented out


def test_time_backwards_across_chunks(tmp_path):
    p = _big(tmp_path, {4000: "#5"})
    for fast in (True, False):
        with pytest.raises(VcdFormatError, match=r"big.vcd:4008: time goes backwards "
                                                 r"\(9990 then 5\)"):
            _read(p, fast, 256)


def test_time_backwards_at_a_chunk_boundary(tmp_path):
    """A file regular on both sides of a step back in time: wherever the step falls (at the
    start of a chunk, for one of these), both readers refuse it."""
    for j in range(400, 416):
        p = _big(tmp_path, back_from=j, n=600)
        for fast in (True, False):
            with pytest.raises(VcdFormatError, match=rf"time goes backwards "
                                                     rf"\({10 * j - 10} then {10 * j - 1000}\)"):
                _read(p, fast, 256)


def test_to_time_stops_reading(tmp_path):
    """With ``to_time`` the reader stops after the first chunk past it."""
    p = _big(tmp_path)
    h = read_header(p)
    ids = [v.id for v in h.vars]
    every = list(vcd_changes(p, h, ids, chunk_bytes=1000))
    some = list(vcd_changes(p, h, ids, chunk_bytes=1000, to_time=5000))
    assert 0 < len(some) < len(every) // 4
    assert int(some[-1].times[-1]) > 5000 >= int(some[-2].times[-1])
