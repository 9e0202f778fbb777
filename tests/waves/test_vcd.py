"""The streaming VCD reader (cosim.waves.vcd) on hand-written tricky files in tests/data/."""

from fractions import Fraction
from pathlib import Path

import pytest

from cosim.waves.vcd import (
    ClockSampler,
    VcdFormatError,
    VcdSignalError,
    parse_timescale,
    read_header,
    stream,
    to_int,
)

DATA = Path(__file__).parents[1] / "data"


def changes(path: Path, names: list[str]) -> list[tuple[int, dict[str, str]]]:
    """(time, values by name) at the end of every timestamp where one of ``names`` changed."""
    header = read_header(path)
    vars_ = {n: header.find(n) for n in names}
    out: list[tuple[int, dict[str, str]]] = []

    def step(t: int, vals: dict[str, str]) -> None:
        snap = {n: vals.get(v.id, "x") for n, v in vars_.items()}
        if out and out[-1][0] == t:
            out[-1] = (t, snap)
        elif not out or out[-1][1] != snap:
            out.append((t, snap))

    stream(path, header, vars_.values(), step)
    return out


def test_aliases_share_one_code_and_values():
    h = read_header(DATA / "vcd_aliases.vcd")
    assert [v.path for v in h.by_id['"']] == ["top.a.busy", "top.b.busy_alias"]
    assert [v.path for v in h.by_id["!"]] == ["top.clk", "top.b.clk"]
    assert h.timescale_s == Fraction(1, 10**9)
    got = changes(DATA / "vcd_aliases.vcd", ["top.a.busy", "top.b.busy_alias",
                                             "top.b.data_alias[7:0]"])
    assert got[-1] == (15, {"top.a.busy": "0", "top.b.busy_alias": "0",
                            "top.b.data_alias[7:0]": "10100101"})
    assert (5, {"top.a.busy": "1", "top.b.busy_alias": "1",
                "top.b.data_alias[7:0]": "10100101"}) in got
    # sampling at rising edges sees the alias exactly like the original
    seen = []
    clk, busy = h.find("top.clk"), h.find("top.b.busy_alias")
    sampler = ClockSampler(clk, [busy], lambda c, t, v: seen.append((c, t, v[busy.id])))
    stream(DATA / "vcd_aliases.vcd", h, [clk, busy], sampler.step, with_previous=True)
    assert seen == [(0, 10, "1"), (1, 20, "0")]


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
    assert got[0] == (0, {f"{s}.foo[3]": "1", f"{s}.bus": "11110000", f"{s}.addr$21": "1111111",
                          f"{s}.payload.header.flags": "10"})
    assert got[-1][1][f"{s}.foo[3]"] == "0"
    with pytest.raises(VcdSignalError, match="similar: top.inst.with.dots.bus"):
        h.find("top.bus")


def test_x_z_and_wide_vectors():
    h = read_header(DATA / "vcd_xz_wide.vcd")
    assert h.timescale_s == Fraction(1, 10**11)
    assert h.find("top.wide").width == 128
    names = ["top.s", "top.wide", "top.short", "top.unknown", "top.hiz"]
    got = dict(changes(DATA / "vcd_xz_wide.vcd", names))
    assert got[0] == {"top.s": "x", "top.wide": "x", "top.short": "101",
                      "top.unknown": "zzzz0000", "top.hiz": "z"}
    assert [to_int(v) for v in got[0].values()] == [None, None, 5, None, None]
    assert to_int(got[1]["top.wide"]) == (1 << 127) | 1
    assert to_int(got[1]["top.short"]) is None          # bx1: x-extended
    assert to_int(got[1]["top.unknown"]) == 0
    assert got[2]["top.s"] == "0" and got[2]["top.hiz"] == "1"  # changes on the '#' line


def test_string_and_real_variables():
    # vcdvcd drops 's' lines silently; cosim.waves.vcd reads them
    h = read_header(DATA / "vcd_strings.vcd")
    assert h.find("top.state_name").kind == "string"
    assert h.find("top.temperature").kind == "real"
    got = changes(DATA / "vcd_strings.vcd", ["top.state_name", "top.temperature"])
    assert got == [(0, {"top.state_name": "IDLE", "top.temperature": "36.6"}),
                   (7, {"top.state_name": "FETCH_HEADER", "top.temperature": "36.6"}),
                   (14, {"top.state_name": "DONE", "top.temperature": "-1.5e3"})]
    assert h.timescale_s == Fraction(1, 10**13)


@pytest.mark.parametrize("text, seconds", [
    ("1ns", Fraction(1, 10**9)), ("1 ns", Fraction(1, 10**9)), ("10ps", Fraction(1, 10**11)),
    ("100 fs", Fraction(1, 10**13)), ("1 s", Fraction(1)), ("10us", Fraction(1, 10**5)),
    (" 100\n ms ", Fraction(1, 10)),
])
def test_timescale_forms(text, seconds):
    assert parse_timescale(text)[0] == seconds


def test_timescale_split_across_lines():
    h = read_header(DATA / "vcd_timescale_split.vcd")
    assert (h.timescale_s, h.timescale) == (Fraction(1, 10**9), "1 ns")
    assert changes(DATA / "vcd_timescale_split.vcd", ["top.clk"])[-1] == (3, {"top.clk": "0"})


def test_dumpoff_makes_values_unknown():
    h = read_header(DATA / "vcd_dumpoff.vcd")
    got = dict(changes(DATA / "vcd_dumpoff.vcd", ["top.busy", "top.count"]))
    assert got[0] == {"top.busy": "1", "top.count": "0011"}
    assert got[10] == {"top.busy": "x", "top.count": "x"}
    assert got[30] == {"top.busy": "0", "top.count": "0110"}
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


def test_malformed_body_has_line_number():
    h = read_header(DATA / "vcd_bad_body.vcd")
    with pytest.raises(VcdFormatError, match=r"vcd_bad_body.vcd:9: vector change 'b1010'"):
        stream(DATA / "vcd_bad_body.vcd", h, [h.find("top.data")], lambda t, v: None)


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
