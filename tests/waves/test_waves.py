"""Waveform tools (cosim.waves, cosim.waves.trace, ``npu waves``) on NPU-shaped VCDs with known
activity (tests/support/npu_vcd_gen.py)."""

import json
import re
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from cosim.cli import main as npu_main
from cosim.waves import (
    GTKW_GROUPS,
    GTKW_MARKERS,
    GtkwExistsError,
    VcdProbeError,
    check_counter_snapshots,
    check_counters,
    counter_delta,
    cut,
    gtkw_text,
    summarize,
    write_gtkw,
)
from cosim.waves.trace import (
    REQUIRED_KEYS,
    chrome_trace,
    timeline_png,
    write_chrome_trace,
)
from cosim.waves.vcd import (
    VcdEmptyError,
    VcdError,
    VcdSignalError,
    VcdSkippedLineWarning,
    read_header,
    stream,
    time_range,
)
from hw.top import PROBE_FIELDS
from tests.support.npu_vcd_gen import (
    ENGINES,
    RESET_CYCLES,
    expected_figures,
    expected_records,
    random_cycles,
    write_npu_vcd,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    rows = random_cycles(2000, seed=5)
    return rows, write_npu_vcd(tmp_path_factory.mktemp("waves") / "run.vcd", rows)


def test_summary_equals_naive_count(run):
    rows, vcd = run
    s = summarize(vcd)
    assert s.figures() == expected_figures(rows)
    assert s.records() == expected_records(rows)
    assert len({r["queue"] for r in s.records()}) > 1 and max(r["index"] for r in
                                                               s.records()) >= 1 << 20
    assert list(s.engines) == sorted(ENGINES)    # the file's order of the busy probes
    assert s.period == 10 and s.scope == "tb_top.u_npu" and s.bus_bytes == 8
    for e in ENGINES:                            # intervals add up to the busy cycles
        assert sum(b - a for a, b in s.engines[e].intervals) == s.engines[e].busy_cycles
    assert "load" in s.format() and "bytes read" in s.format()


def test_summary_window(run):
    rows, vcd = run
    s = summarize(vcd, start=300, end=1234)
    assert s.figures() == expected_figures(rows, 300, 1234)
    assert s.records() == expected_records(rows, 300, 1234)


def test_counters_check(run):
    rows, vcd = run
    s = summarize(vcd)
    exp = expected_figures(rows)
    good = check_counters(s, {"cycles": exp["cycles"], "busy": {"load": exp["busy.load"]},
                              "bytes_read": exp["bytes_read"], "tlb.load.hits": 7})
    assert good.ok and good.unchecked == ["tlb.load.hits"] and len(good.matched) == 3
    bad = check_counters(s, {"cycles": exp["cycles"] + 1, "axi.w": exp["axi.w"]})
    assert not bad.ok and bad.mismatched == {"cycles": (exp["cycles"], exp["cycles"] + 1)}
    assert "MISMATCH cycles" in bad.format()
    with pytest.raises(TypeError, match="must be an integer"):
        check_counters(s, {"cycles": "12"})
    # only names the VCD has no figure for compared nothing: not a pass
    none = check_counters(s, {"tlb.store.faults": 0})
    assert not none.ok and none.unchecked == ["tlb.store.faults"]
    assert "nothing compared" in none.format()
    # a name that is no counter (a typo) is an error naming it and the counters (it was
    # reported unchecked, and the check of the others passed)
    with pytest.raises(ValueError, match=r"^unknown counters 'cycels', 'stall.matrix.spad'; the "
                                         r"counters are: cycles, bytes_read, .*, axi\.b$"):
        check_counters(s, {"cycels": exp["cycles"], "busy.load": exp["busy.load"],
                           "stall": {"matrix": {"spad": 0}}})


@pytest.fixture(scope="module")
def counter_run(tmp_path_factory):
    rows = random_cycles(1500, seed=11, counters=True)
    return rows, write_npu_vcd(tmp_path_factory.mktemp("waves") / "counters.vcd", rows)


def test_stalls_re_derived_from_their_sources(counter_run):
    """sem stalls from the sem_stall probes, resource stalls from the stall port copies while
    busy; the decoy command processor nets (random values) are not read."""
    rows, vcd = counter_run
    figs = summarize(vcd).figures()
    exp = expected_figures(rows)
    assert figs == exp
    for e in ENGINES:
        assert 0 < exp[f"stall.{e}.sem"] < exp["cycles"] - exp[f"busy.{e}"]
    assert all(exp[n] > 0 for n in ("stall.load.dram_read", "stall.store.dram_write",
                                     "stall.vector.acc"))


def test_counter_window_and_snapshot_pair(counter_run, tmp_path, capsys):
    """A window in CYCLES values (the counters' own time) and the check of a snapshot pair
    (with counters wrapping modulo 2**32 between the snapshots)."""
    rows, vcd = counter_run
    s = summarize(vcd, start=100, end=900, unit="counter")
    exp = expected_figures(rows, 100 + RESET_CYCLES, 900 + RESET_CYCLES)
    assert s.figures() == exp and s.first_cycle == 100 + RESET_CYCLES
    assert s.counter_window == (100, 900)
    assert "; CYCLES 100..899)" in s.format()       # both ends counted, as the cycles
    names = [k for k in exp if not k.startswith(("commands.", "axi."))]
    before = {k: (1 << 32) - 3 for k in names} | {"cycles": 100}
    after = {k: (before[k] + exp[k]) % (1 << 32) for k in names} | {"cycles": 900}
    assert counter_delta(before, after) == {k: exp[k] for k in names}
    _, check = check_counter_snapshots(vcd, before, after)
    assert check.ok and not check.unchecked and len(check.matched) == len(names)
    after["stall.load.sem"] += 1
    _, bad = check_counter_snapshots(vcd, before, after)
    assert list(bad.mismatched) == ["stall.load.sem"]
    with pytest.raises(VcdError, match="has 1900 cycles, the file holds 1397 of them"):
        summarize(vcd, start=100, end=2000, unit="counter")
    with pytest.raises(ValueError, match="after reset"):
        summarize(vcd, start=0, end=20, unit="counter")
    pair = tmp_path / "pair.json"
    pair.write_text(json.dumps({"before": before, "after": after}))
    capsys.readouterr()
    assert npu_main(["waves", "summarize", str(vcd), "--counters", str(pair)]) == 1
    assert "MISMATCH stall.load.sem" in capsys.readouterr().out
    after["stall.load.sem"] -= 1
    pair.write_text(json.dumps({"before": before, "after": after}))
    assert npu_main(["waves", "summarize", str(vcd), "--counters", str(pair)]) == 0
    out = capsys.readouterr().out
    assert f"{len(names)} equal, 0 different" in out and "CYCLES 100..899" in out
    assert npu_main(["waves", "summarize", str(vcd), "--counters", str(pair),
                     "--from", "3"]) == 2
    # a name only in "after", or a value that is no integer: one line, exit 2 (a traceback)
    missing = {"before": {k: v for k, v in before.items() if k != "busy.load"}, "after": after}
    not_int = {"before": before | {"busy.load": "x"}, "after": after}
    # and a name only in "before" (it was left out of the check without a word), half a pair
    # ("unknown counter 'before.cycles'"), a half that is no object, an empty file (exit 1)
    only_before = {"before": before, "after": {k: v for k, v in after.items()
                                                if k != "busy.load"}}
    for bad, message in ((missing, "counter snapshot pair: 'busy.load' in 'after' only"),
                         (not_int, "counter snapshot pair: 'busy.load' is 'x' before"),
                         (only_before, "counter snapshot pair: 'busy.load' in 'before' only"),
                         ({"before": before}, "a snapshot pair needs 'before' and 'after'; "
                                              "it has no 'after'"),
                         ({"before": None, "after": after}, "'before' must be an object of "
                                                            "counters, not null"),
                         ({}, "no counters in it")):
        pair.write_text(json.dumps(bad))
        capsys.readouterr()
        assert npu_main(["waves", "summarize", str(vcd), "--counters", str(pair)]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_cut_keeps_window_exactly(run, tmp_path):
    rows, vcd = run
    r = cut(vcd, tmp_path / "w.vcd", 500, 800)
    assert r.bytes_out < vcd.stat().st_size / 3
    assert summarize(r.out).figures() == expected_figures(rows, 500, 800)
    h = read_header(r.out)
    assert len(h.vars) == len(read_header(vcd).vars)
    t = cut(vcd, tmp_path / "t.vcd", 5000, 8000, unit="time")
    assert summarize(t.out).cycles == 301              # [5000, 8000]: both ends included
    z = cut(vcd, tmp_path / "z.vcd", 0, 95, unit="time")  # opens at the first timestamp
    times = [int(ln[1:]) for ln in z.out.read_text().splitlines() if ln.startswith("#")]
    assert times == list(range(0, 100, 5))           # once each: no timestamp repeated
    assert summarize(z.out).figures() == expected_figures(rows, 0, 9)
    with pytest.raises(ValueError, match="before its start"):
        cut(vcd, tmp_path / "x.vcd", 10, 5)
    # [C, C) holds no cycle (it wrote a file and reported an end time before its start)
    with pytest.raises(ValueError, match="the cycle window 500..500 is empty"):
        cut(vcd, tmp_path / "x.vcd", 500, 500)
    assert not (tmp_path / "x.vcd").exists()
    with pytest.raises(ValueError, match="window start -100 is negative"):
        cut(vcd, tmp_path / "x.vcd", -100, 50)
    with pytest.raises(ValueError, match="the window.s start -5 is negative"):
        summarize(vcd, start=-5)
    size = vcd.stat().st_size
    with pytest.raises(ValueError, match="is the file being cut"):
        cut(vcd, vcd, 500, 800)
    assert vcd.stat().st_size == size
    # a window outside the file's times is an error, and the destination is left as it was
    keep = tmp_path / "keep.vcd"
    keep.write_text("previous\n")
    end = max(int(ln[1:]) for ln in vcd.read_text().splitlines() if ln.startswith("#"))
    with pytest.raises(ValueError, match=f"starts after the file's end \\(it ends at #{end}\\)"):
        cut(vcd, keep, end + 1, end + 50, unit="time")
    assert keep.read_text() == "previous\n" and not list(tmp_path.glob("*.part"))
    assert cut(vcd, tmp_path / "last.vcd", end, end + 50, unit="time").end_time == end
    late = tmp_path / "late.vcd"      # a file that starts at #100
    late.write_text("$timescale 1ns $end\n$var wire 1 ! a $end\n$enddefinitions $end\n"
                    "#100\n1!\n#200\n0!\n")
    with pytest.raises(ValueError, match="ends before the file's first time #100"):
        cut(late, keep, 10, 50, unit="time")
    assert keep.read_text() == "previous\n"
    # the times a cut holds: the window, less what lies before or after the file
    for window, held in (((120, 150), (120, 150)), ((150, 500), (150, 200)),
                         ((50, 150), (100, 150))):
        r = cut(late, tmp_path / "held.vcd", *window, unit="time")
        assert (r.start_time, r.end_time) == held and r.cycles is None


def test_cut_skips_malformed_lines(tmp_path):
    """A malformed line of the source is warned about once and not copied: the window reads
    without a warning and holds the source's values."""
    src = DATA / "vcd_malformed_lines.vcd"
    with pytest.warns(VcdSkippedLineWarning) as rec:
        r = cut(src, tmp_path / "c.vcd", 5, 25, unit="time")
    assert len(rec) == 7
    text = r.out.read_text()
    assert "hello world" not in text and "$dumpports" not in text and "rabc" not in text
    h = read_header(r.out)
    got = {}
    stream(r.out, h, h.vars, lambda t, v: got.update({t: dict(v)}))
    assert got[10] == {"!": 1, '"': 0b00000011, "#": 0.5}
    assert got[20] == {"!": 1, '"': 0b00000100, "#": 2.0}


@pytest.mark.filterwarnings("default")     # as a user's Python shows them (not errors)
def test_cli_warns_in_one_line(tmp_path, capsys):
    """A skipped line is one ``warning:`` line of the subcommand (Python's form named the
    reader's source file and line, and echoed its code)."""
    src = DATA / "vcd_malformed_lines.vcd"
    assert npu_main(["waves", "cut", str(src), "--from", "5", "--to", "25", "--time",
                     "-o", str(tmp_path / "c.vcd")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 7 and all(e.startswith("npu waves cut: warning: ") for e in err)
    assert not any(".py:" in e for e in err)


def test_gtkw_groups_from_hierarchy(run, tmp_path):
    """The save file: zoomed to the file's time range, the groups of GTKW_GROUPS in their
    order with only the ports, named probes and counter sources, and markers at the kernel
    regions of the run's sidecar (those inside the file)."""
    _, vcd = run
    regions = [{"name": "query", "occurrence": 1, "start_cycle": 100, "end_cycle": 300},
               {"name": "softmax", "occurrence": 1, "start_cycle": 300, "end_cycle": 400},
               {"name": "softmax", "occurrence": 2, "start_cycle": 1500, "end_cycle": 1600},
               {"name": "late", "occurrence": 1, "start_cycle": 9999, "end_cycle": 10000}]
    out, notes = write_gtkw(vcd, tmp_path / "run.gtkw", regions=regions, clock_period_ns=10)
    text = out.read_text()
    assert f'[dumpfile] "{vcd.resolve()}"' in text
    groups = [ln[1:] for ln in text.splitlines()[::1] if ln.startswith("-")][::2]
    assert groups == [g for g, names in GTKW_GROUPS if any(
        f"tb_top.u_npu.{n}" in text for n in names)]
    assert groups[:2] == ["Clock, reset, interrupt", "Engine load (named probes)"]
    assert "tb_top.u_npu.mem__wstrb[7:0]" in text and "tb_top.u_npu.probe_load_busy" in text
    assert "tb_top.u_npu.probe_vector_index[31:0]" in text
    assert "cmdproc." not in text                        # no internal net, decoys included
    assert text.count("@800200") == text.count("@1000200") == len(groups)
    probes = [ln for ln in text.splitlines() if ln.startswith("tb_top.u_npu.probe_load_")]
    assert [p.split("probe_load_")[1].split("[")[0] for p in probes] == list(PROBE_FIELDS)
    # time range 0 .. 20000 (1 ns units): [timestart] 0 and the zoom that fits it
    assert "[timestart] 0\n" in text
    zoom = float(next(ln for ln in text.splitlines() if ln.startswith("*"))[1:].split()[0])
    assert 2 ** -zoom / 200 * 980 == pytest.approx(20000, rel=1e-6)
    marks = next(ln for ln in text.splitlines() if ln.startswith("*")).split()[2:]
    assert marks[:3] == ["1000", "3000", "15000"] and set(marks[3:]) == {"-1"}
    assert len(marks) == GTKW_MARKERS
    assert [ln for ln in text.splitlines() if ln.startswith("[markername]")] == [
        "[markername] Aquery", "[markername] Bsoftmax:1", "[markername] Csoftmax:2"]
    assert any("csr.cycles" in n for n in notes)          # the generated file has no csr
    assert npu_main(["waves", "gtkw", str(vcd), "-o", str(tmp_path / "g.gtkw")]) == 0


def test_gtkw_markers_beyond_26(run, tmp_path):
    """GTKWave has 26 named markers: the first region of each kernel always gets one, the
    others fill the rest in time order, and the ones left out are counted in a note."""
    _, vcd = run
    regions = [{"name": f"k{i % 3}", "occurrence": i // 3 + 1, "start_cycle": 10 * i,
                "end_cycle": 10 * i + 5} for i in range(40)]
    regions.append({"name": "rare", "occurrence": 1, "start_cycle": 1900, "end_cycle": 1950})
    out, notes = write_gtkw(vcd, tmp_path / "m.gtkw", regions=regions, clock_period_ns=10)
    names = [ln.split(" ", 1)[1][1:] for ln in out.read_text().splitlines()
             if ln.startswith("[markername]")]
    assert len(names) == GTKW_MARKERS and "rare" in names and names[0] == "k0:1"
    assert names[:25] == [f"k{i % 3}:{i // 3 + 1}" for i in range(25)]
    assert "15 kernel regions without a marker" in " ".join(notes)


def test_gtkw_names_vectors_declared_without_a_range(run, tmp_path):
    """Amaranth's simulator declares vectors without a range (``$var wire 8 # wstrb``);
    GTKWave names them ``wstrb[7:0]`` and drops a save-file name it does not know."""
    _, vcd = run
    bare = tmp_path / "bare.vcd"
    bare.write_text(re.sub(r"^(\$var \S+ (\d+) \S+ \S+) \[\d+:\d+\] \$end$", r"\1 $end",
                           vcd.read_text(), flags=re.MULTILINE))
    assert read_header(bare).find("tb_top.u_npu.mem__wstrb").msb is None
    text = gtkw_text(read_header(bare))[0]
    assert "tb_top.u_npu.mem__wstrb[7:0]\n" in text and "tb_top.u_npu.mem__arvalid\n" in text
    assert text == gtkw_text(read_header(vcd))[0].replace(str(vcd.resolve()),
                                                          str(bare.resolve()))


def test_a_new_waveform_rewrites_its_stale_save_file(run, tmp_path):
    """A run that writes a new ``npu_run.vcd`` rewrites the ``npu_run.gtkw`` that ``npu waves
    gtkw`` made for the one before (GTKWave opened the new file with the old view and
    markers); a save file written otherwise is left alone."""
    from cosim.tb.harness import _waves_sidecar

    rows, vcd = run
    wave = tmp_path / "npu_run.vcd"
    write_npu_vcd(wave, rows[:500])
    write_gtkw(wave)
    old = wave.with_suffix(".gtkw").read_text()
    write_npu_vcd(wave, rows)                       # the next run, another length
    region = {"name": "scores", "occurrence": 1, "start_cycle": 900, "end_cycle": 950}
    info = _waves_sidecar(wave, "vcd", None, None, {"region_log": [region]})
    new = wave.with_suffix(".gtkw").read_text()
    assert info["gtkw"] == [str(wave.with_suffix(".gtkw"))] and new != old
    header = read_header(wave)
    assert new == gtkw_text(header, vcd_path=wave, regions=[region], clock_period_ns=10,
                            span=time_range(wave, header))[0]
    assert "[markername] Ascores\n" in new
    own = "[*] saved by GTKWave\n"
    wave.with_suffix(".gtkw").write_text(own)
    assert "gtkw" not in _waves_sidecar(wave, "vcd", None, None, {})
    assert wave.with_suffix(".gtkw").read_text() == own
    # a folder of that name is not ours either (the run raised IsADirectoryError at its end)
    wave.with_suffix(".gtkw").unlink()
    wave.with_suffix(".gtkw").mkdir()
    assert "gtkw" not in _waves_sidecar(wave, "vcd", None, None, {})


def test_gtkw_keeps_a_save_file_of_ones_own(run, tmp_path, capsys):
    """``npu waves gtkw`` rewrites a save file it wrote but not one saved from GTKWave (it
    overwrote it, and a traced run's hint suggested the command beside it): exit 2 naming the
    file and --force, which overwrites it; the traced run's hint then names another file."""
    from types import SimpleNamespace

    from cosim.cli import _waves_line
    from cosim.tb.harness import _waves_sidecar

    rows, _ = run
    wave = tmp_path / "npu_run.vcd"
    write_npu_vcd(wave, rows[:300])
    gtkw = wave.with_suffix(".gtkw")

    def hint() -> str:
        info = _waves_sidecar(wave, "vcd", None, None, {})
        return _waves_line(SimpleNamespace(waves=wave, waves_info=info)).split("save file: ")[1]

    assert hint() == f"npu waves gtkw {wave}"               # none yet
    assert npu_main(["waves", "gtkw", str(wave)]) == 0
    assert npu_main(["waves", "gtkw", str(wave)]) == 0      # its own: rewritten
    assert hint() == f"{gtkw} (rewritten for this waveform)"
    own = "[*] saved by GTKWave\n"
    gtkw.write_text(own)
    capsys.readouterr()
    assert npu_main(["waves", "gtkw", str(wave)]) == 2
    assert capsys.readouterr().err == (
        f"npu waves gtkw: {gtkw} is a save file that npu waves gtkw did not write (saved from "
        "GTKWave?): not overwritten; --force overwrites it, -o writes another file\n")
    assert gtkw.read_text() == own
    with pytest.raises(GtkwExistsError):
        write_gtkw(wave)
    assert gtkw.read_text() == own
    assert hint() == (f"{gtkw} (not written by npu waves gtkw: kept; the NPU's signal groups: "
                      f"npu waves gtkw {wave} -o {tmp_path / 'npu_run.npu.gtkw'})")
    npu = tmp_path / "npu_run.npu.gtkw"
    assert npu_main(["waves", "gtkw", str(wave), "-o", str(npu)]) == 0
    assert gtkw.read_text() == own
    # the next run rewrites the save file the hint suggested (it was left stale, zoomed and
    # marked for the run before) and says so; the one of one's own is still kept
    write_npu_vcd(wave, rows[:400])
    stale = npu.read_text()
    assert hint() == (f"{gtkw} (not written by npu waves gtkw: kept; the NPU's signal groups: "
                      f"{npu}, rewritten for this waveform)")
    assert npu.read_text() != stale
    assert npu.read_text() == write_gtkw(wave, tmp_path / "fresh.gtkw")[0].read_text()
    assert gtkw.read_text() == own
    assert npu_main(["waves", "gtkw", str(wave), "--force"]) == 0
    assert gtkw.read_text() == write_gtkw(wave, tmp_path / "fresh.gtkw")[0].read_text()


def test_missing_signal_is_a_clear_error(tmp_path):
    p = tmp_path / "nonpu.vcd"
    p.write_text("$timescale 1ns $end\n$scope module top $end\n$var wire 1 ! clk $end\n"
                 "$upscope $end\n$enddefinitions $end\n#0\n1!\n")
    with pytest.raises(VcdSignalError, match="mem__arvalid"):
        summarize(p)
    with pytest.raises(VcdSignalError):
        gtkw_text(read_header(p))


def _without(src, dst, names) -> None:
    """Copy of a VCD without the declarations of ``names`` (nor their value changes)."""
    h = read_header(src)
    drop = {h.find(f"tb_top.u_npu.{n}").id for n in names}
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(
        ln for ln in lines if not (ln.startswith("$var") and ln.split()[3] in drop)
        and not (ln[:1] in "01" and ln[1:].strip() in drop)
        and not (ln[:1] == "b" and ln.split()[-1] in drop)))


def test_vcd_without_probes_is_a_clear_error(run, tmp_path, capsys):
    """A VCD from before the named probes (it still has the command processor's nets) is
    refused, naming every missing probe; the tools never fall back to internal nets."""
    _, vcd = run
    old = tmp_path / "old.vcd"
    gone = [f"probe_{e}_{f}" for e in ENGINES for f in ("busy", "done", "take", "sem_stall",
                                                         "queue", "index", "opcode")]
    _without(vcd, old, gone)
    with pytest.raises(VcdProbeError, match="predates") as e:
        summarize(old)
    assert e.value.missing == gone and all(n in str(e.value) for n in gone)
    assert e.value.scope == "tb_top.u_npu" and isinstance(e.value, VcdSignalError)
    some = tmp_path / "some.vcd"
    _without(vcd, some, ["probe_matrix_take", "probe_vector_opcode"])
    with pytest.raises(VcdProbeError) as e:
        summarize(some)
    assert e.value.missing == ["probe_matrix_take", "probe_vector_opcode"]
    wide = tmp_path / "wide.vcd"
    code = read_header(vcd).find("tb_top.u_npu.probe_load_busy").id
    wide.write_text(vcd.read_text().replace(f"$var wire 1 {code} probe_load_busy $end",
                                            f"$var wire 2 {code} probe_load_busy [1:0] $end"))
    with pytest.raises(VcdProbeError, match=r"probe_load_busy \(2 bits, not 1\)"):
        summarize(wide)
    capsys.readouterr()
    assert npu_main(["waves", "summarize", str(old)]) == 2
    err = capsys.readouterr().err
    assert "probe_load_busy" in err and "predates" in err
    assert npu_main(["waves", "gtkw", str(old), "-o", str(tmp_path / "old.gtkw")]) == 0


def test_cli(run, tmp_path, capsys):
    rows, vcd = run
    exp = expected_figures(rows)
    counters = tmp_path / "c.json"
    counters.write_text(json.dumps({"cycles": exp["cycles"], "axi.r": exp["axi.r"]}))
    assert npu_main(["waves", "summarize", str(vcd), "--counters", str(counters),
                     "--json", str(tmp_path / "s.json")]) == 0
    assert "2 equal, 0 different" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["figures"] == exp
    counters.write_text(json.dumps({"cycles": 1}))
    assert npu_main(["waves", "summarize", str(vcd), "--counters", str(counters)]) == 1
    counters.write_text(json.dumps({"cycles": exp["cycles"], "cycels": 1}))
    capsys.readouterr()
    assert npu_main(["waves", "summarize", str(vcd), "--counters", str(counters)]) == 2
    out = capsys.readouterr()
    assert out.out == ""        # refused before the VCD is read
    assert out.err.startswith("npu waves summarize: unknown counter 'cycels'; the counters "
                              "are: cycles, bytes_read, ")
    assert npu_main(["waves", "gtkw", str(vcd), "-o", str(tmp_path / "g.gtkw")]) == 0
    capsys.readouterr()
    assert npu_main(["waves", "cut", str(vcd), "--from", "10", "--to", "20",
                     "-o", str(tmp_path / "c.vcd")]) == 0
    # the window in cycles, as given (it said time units alone)
    assert re.match(rf"{tmp_path / 'c.vcd'}: cycles 10..19 \(10 cycles\), time \d+..\d+, ",
                    capsys.readouterr().out)
    # a window past the file's end: the cycles it holds (it claimed the window asked, and
    # the time of a cycle the file does not have)
    last = summarize(vcd).end_cycle - 1
    assert npu_main(["waves", "cut", str(vcd), "--from", str(last - 4), "--to",
                     str(last + 1000), "-o", str(tmp_path / "e.vcd")]) == 0
    assert (f"cycles {last - 4}..{last} (5 cycles of the 1004 asked: the file holds no more)"
            in capsys.readouterr().out)
    assert summarize(tmp_path / "e.vcd").cycles == 5
    assert npu_main(["waves", "trace", str(vcd), "-o", str(tmp_path / "t.json"),
                     "--png", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").read_bytes()[:8] == PNG_MAGIC
    bad = tmp_path / "bad.vcd"
    bad.write_text("$timescale 1 lightyear $end\n")
    capsys.readouterr()
    assert npu_main(["waves", "summarize", str(bad)]) == 2
    assert "bad.vcd:1: bad $timescale" in capsys.readouterr().err


def test_summary_into_a_closed_pipe_ends_quietly(run, capsys):
    """``npu waves summarize run.vcd | head`` printed ``[Errno 32] Broken pipe``, exit 2."""
    from tests.cosim.test_cli import closed_pipe_stdout
    with closed_pipe_stdout():
        assert npu_main(["waves", "summarize", str(run[1])]) == 1
    assert capsys.readouterr().err == ""


def test_trace_checks_the_image_suffix_before_writing(run, tmp_path, capsys):
    """``npu waves trace --png t.txt`` wrote the JSON trace, then refused the suffix."""
    _, vcd = run
    out = tmp_path / "t.json"
    with pytest.raises(SystemExit) as e:
        npu_main(["waves", "trace", str(vcd), "-o", str(out), "--png", str(tmp_path / "t.txt")])
    assert e.value.code == 2
    assert f"--png {tmp_path / 't.txt'}: the image format is the file's suffix" \
        in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


RECORDS = [
    {"queue": 0, "index": 0, "engine": "load", "opcode": 1, "start_cycle": 10, "end_cycle": 40},
    {"queue": 0, "index": 1, "engine": "matrix", "opcode": 3, "start_cycle": 40,
     "end_cycle": 90},
    {"queue": 0, "index": 2, "engine": "load", "opcode": 1, "start_cycle": 45, "end_cycle": 70},
    {"queue": 1, "index": 0, "engine": "store", "opcode": "DMA_STORE", "start_cycle": 0,
     "end_cycle": 0},
    {"queue": 0, "index": 3, "engine": "store", "opcode": None, "start_cycle": 90,
     "end_cycle": 120},
]


def test_chrome_trace_structure(tmp_path):
    path = write_chrome_trace(tmp_path / "t.json", RECORDS, cycle_ns=10.0,
                              metadata={"config": "8x8"})
    trace = json.loads(path.read_text())                       # valid JSON
    assert set(trace) == {"traceEvents", "otherData"}
    events = trace["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    slices = [e for e in events if e["ph"] == "X"]
    for e in events:
        assert {"ph", "name", "pid", "tid"} <= set(e)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert set(procs.values()) == {"Queues", "Engines"}
    # every slice's track is named; one track per queue and engine (+ overlap lanes)
    assert all((s["pid"], s["tid"]) in names for s in slices)
    assert {n for n in names.values()} == {"queue 0", "queue 0 #2", "queue 1", "load",
                                           "matrix", "store"}
    assert len(slices) == 2 * len(RECORDS)                    # each command on 2 tracks
    for s in slices:
        assert {"ts", "dur", "cat", "args"} <= set(s) and s["dur"] >= 0
        assert set(REQUIRED_KEYS) <= set(s["args"])
        assert s["ts"] == pytest.approx(s["args"]["start_cycle"] * 0.01)
    by_track: dict = {}
    for s in slices:
        by_track.setdefault((s["pid"], s["tid"]), []).append(s)
    for track in by_track.values():                           # monotonic, never overlapping
        for a, b in zip(track, track[1:], strict=False):
            assert a["ts"] <= b["ts"] and a["ts"] + a["dur"] <= b["ts"] + 1e-9
    assert {s["name"] for s in slices} >= {"DMA_STORE #0", "cmd #3"}


def test_chrome_trace_rejects_bad_records():
    with pytest.raises(ValueError, match="lacks engine"):
        chrome_trace([{"queue": 0, "index": 0, "opcode": 1, "start_cycle": 0,
                       "end_cycle": 1}])
    with pytest.raises(ValueError, match="ends before it starts"):
        chrome_trace([dict(RECORDS[0], end_cycle=5)])


def test_pngs(tmp_path):
    t = timeline_png(tmp_path / "t.png", RECORDS, busy={"load": [(10, 40), (45, 70)]})
    assert t.read_bytes()[:8] == PNG_MAGIC


def test_streaming_memory_does_not_grow_with_file(tmp_path):
    """A 4x longer file (same command count) must not need more memory: values are streamed.
    """
    peaks = []
    for n in (2_000, 8_000):
        rows = random_cycles(n, seed=1, burst=n // 50)
        vcd = write_npu_vcd(tmp_path / f"m{n}.vcd", rows)
        tracemalloc.start()
        s = summarize(vcd)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert s.cycles == n
    assert peaks[1] < peaks[0] * 1.5 + 200_000, peaks


def test_summary_cycles_are_absolute(run, tmp_path):
    """A window of the run (cut from it, times kept) is summarised with the run's own cycle
    numbers; --from/--to are absolute too, and equal the cut of the same cycles."""
    rows, vcd = run
    part = cut(vcd, tmp_path / "w.vcd", 500, 800).out
    s = summarize(part)
    assert (s.first_cycle, s.end_cycle, s.cycles) == (500, 800, 300)
    assert s.records() == expected_records(rows, 500, 800)
    inner = summarize(part, start=600, end=700)
    assert (inner.first_cycle, inner.cycles) == (600, 100)
    assert inner.figures() == summarize(vcd, start=600, end=700).figures() \
        == expected_figures(rows, 600, 700)
    # the header and the timeline give the window alike, both ends counted (the timeline
    # said 500..800)
    text = s.format()
    assert text.count("cycles 500..799") == 2 and "500..800" not in text


def test_summarize_says_when_the_window_is_clamped_to_the_file(run, tmp_path, capsys):
    """--from before the file's first cycle or --to past its last summarizes the cycles the
    file holds and says so on stderr (a stale window from another run passed silently)."""
    _, vcd = run
    part = cut(vcd, tmp_path / "w.vcd", 500, 800).out
    assert npu_main(["waves", "summarize", str(part), "--from", "450", "--to", "900"]) == 0
    err = capsys.readouterr().err
    assert "--from 450 is before the file's first cycle 500: summarized from 500" in err
    assert "--to 900 is past the file's last cycle 799: summarized to 800" in err
    assert npu_main(["waves", "summarize", str(part), "--from", "500", "--to", "800"]) == 0
    assert capsys.readouterr().err == ""


def test_fast_and_checked_summaries_agree(run):
    _, vcd = run
    fast, checked = summarize(vcd), summarize(vcd, fast=False)
    assert fast.figures() == checked.figures() and fast.records() == checked.records()
    assert {k: e.intervals for k, e in fast.engines.items()} == {
        k: e.intervals for k, e in checked.engines.items()}


def test_fst_summary_equals_vcd(run, tmp_path):
    """An FST of the same file (GTKWave's vcd2fst), read through pywellen, summarises to
    the same figures and records."""
    if not shutil.which("vcd2fst"):
        pytest.skip("vcd2fst (GTKWave) is not installed: apt-get install gtkwave")
    rows, vcd = run
    fst = tmp_path / "run.fst"
    subprocess.run(["vcd2fst", str(vcd), str(fst)], check=True, capture_output=True)
    s = summarize(fst)
    assert s.figures() == expected_figures(rows) and s.records() == expected_records(rows)
    assert summarize(fst, start=300, end=1234).figures() == expected_figures(rows, 300, 1234)
    out, _ = write_gtkw(fst, tmp_path / "f.gtkw")
    assert "tb_top.u_npu.probe_load_index[31:0]" in out.read_text()


@pytest.mark.parametrize("text, message", [
    ("", "no \\$enddefinitions"),
    ("$timescale 1ns $end\n$scope module tb_top $end\n$scope module u_npu $end\n"
     "$upscope $end\n$upscope $end\n$enddefinitions $end\n", "mem__arvalid"),
])
def test_empty_files_exit_2(tmp_path, capsys, text, message):
    p = tmp_path / "empty.vcd"
    p.write_text(text)
    assert npu_main(["waves", "summarize", str(p)]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_header_only_and_empty_windows_exit_2(run, tmp_path, capsys):
    """A file with the NPU's signals but no value change, or a window holding none of the
    file's cycles, is an error (exit 2), never '0 cycles'."""
    rows, vcd = run
    head = tmp_path / "head.vcd"
    text = vcd.read_text()
    head.write_text(text[:text.index("$enddefinitions $end") + len("$enddefinitions $end\n")])
    with pytest.raises(VcdEmptyError, match="fewer than two rising edges"):
        summarize(head)
    capsys.readouterr()
    assert npu_main(["waves", "summarize", str(head)]) == 2
    assert "nothing to summarize" in capsys.readouterr().err
    with pytest.raises(VcdEmptyError, match=r"no cycle of the file is in the window "
                                            r"\[5000, 6000\) \(the file holds cycles 0..1999"):
        summarize(vcd, start=5000, end=6000)
    capsys.readouterr()
    assert npu_main(["waves", "summarize", str(vcd), "--from", "5000"]) == 2
    assert ("no cycle of the file is in the window from cycle 5000 on (the file holds cycles "
            "0..1999)") in capsys.readouterr().err
    # a window before the file: its reading stops at the first cycle, the end is not known
    # (it said the file held cycles 0..0, and 'None' for an open end)
    with pytest.raises(VcdEmptyError, match=r"in the window before cycle 0 \(the file starts "
                                            r"at cycle 0\)"):
        summarize(vcd, end=0)
    with pytest.raises(ValueError, match="empty"):
        summarize(vcd, start=10, end=10)
