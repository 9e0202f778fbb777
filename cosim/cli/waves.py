"""``npu waves ...``: the waveform subcommands of the ``npu`` CLI (see :mod:`cosim.cli`).

::

    npu waves summarize FILE [--from C1] [--to C2] [--counters JSON] [--json OUT]
    npu waves gtkw FILE [-o OUT.gtkw] [--force]
    npu waves cut FILE.vcd --from C1 --to C2 [-o OUT.vcd] [--time]
    npu waves trace FILE [-o OUT.json] [--png OUT.png] [--cycle-ns NS]

FILE is a VCD or an FST file. Cycles are absolute, numbered as the co-simulation numbers
them (``npu run --waves-from``), whatever window of the run the file holds. ``--counters``
takes counter values over the window, or a snapshot pair ``{"before": dev.counters(),
"after": dev.counters()}`` of the same traced run, whose difference is checked exactly over
the cycles between the two snapshots. ``gtkw`` writes a save file zoomed to the file, with
markers at the run's kernel regions (from ``<stem>.waves.json`` beside it); it does not
overwrite a save file it did not write (saved from GTKWave) unless given ``--force``.

The tools read the NPU's named probes (``hw.top.PROBE_FIELDS``); a file traced before the
hardware had them is refused with a message naming the missing probes.

Exit status: 0 on success, 1 on a counter mismatch (or when the output's reader has gone,
as with ``| head``), 2 on an unreadable, empty or header-only file, a folder given as a file,
an empty window, a missing signal or probe (the message says which line or signal), a bad
counters file, an output file that is a folder, in a folder that does not exist or named as a
waveform (.vcd, .fst: cut's output alone is one, a .vcd), or a save file of one's own in the
way. Malformed value lines are skipped with a warning naming them.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from functools import partial
from pathlib import Path

__all__ = ["add_parser"]


def _summarize(args: argparse.Namespace) -> int:
    from cosim.waves import (
        check_counters,
        counter_delta,
        counter_values,
        load_counters,
        summarize,
    )

    counters = load_counters(args.counters) if args.counters else None
    if counters is not None and {"before", "after"} <= set(counters):
        # a snapshot pair of Device.counters(): the window is theirs, in CYCLES
        if args.start is not None or args.end is not None:
            print("npu waves summarize: --from/--to cannot be combined with a counter "
                  "snapshot pair (its window is before.cycles .. after.cycles)",
                  file=sys.stderr)
            return 2
        before, after = counters["before"], counters["after"]
        counters = counter_delta(before, after)
        if "cycles" not in counters:
            print("npu waves summarize: the counter snapshot pair has no 'cycles' (its window)",
                  file=sys.stderr)
            return 2
        window = {"start": int(before["cycles"]), "end": int(after["cycles"]), "unit": "counter"}
    else:
        window = {"start": args.start, "end": args.end}
    if counters is not None:
        counter_values(counters)        # an unknown name is refused before the VCD is read
    s = summarize(args.file, **window)
    print(s.format(width=args.width))
    for m in _clamped(window, s):
        print(f"note: {m}", file=sys.stderr)
    status = 0
    if counters is not None:
        check = check_counters(s, counters)
        print()
        print(check.format())
        status = 0 if check.ok else 1
    if args.json:
        Path(args.json).write_text(json.dumps(s.to_dict(), indent=1) + "\n")
        print(f"wrote {args.json}")
    return status


def _clamped(window: dict, s) -> list[str]:
    """What part of a --from/--to window (absolute cycles) the file did not hold, so that a
    window that starts before the file or ends after it does not pass silently."""
    if window.get("unit") == "counter":
        return []       # summarize() refuses a counter window the file does not hold whole
    start, end = window["start"], window["end"]
    notes = []
    if start is not None and start < s.first_cycle:
        notes.append(f"--from {start} is before the file's first cycle {s.first_cycle}: "
                     f"summarized from {s.first_cycle}")
    if end is not None and end > s.end_cycle:
        notes.append(f"--to {end} is past the file's last cycle {s.end_cycle - 1}: "
                     f"summarized to {s.end_cycle}")
    return notes


def _gtkw(args: argparse.Namespace) -> int:
    from cosim.waves import GtkwExistsError, write_gtkw

    try:
        out, notes = write_gtkw(args.file, args.out, force=args.force)
    except GtkwExistsError as e:
        print(f"npu waves gtkw: {e}: not overwritten; --force overwrites it, -o writes "
              "another file", file=sys.stderr)
        return 2
    print(out)
    for m in notes:
        print(f"note: {m}", file=sys.stderr)
    return 0


def _cut(args: argparse.Namespace) -> int:
    from cosim.waves import cut

    src = Path(args.file)
    out = args.out or src.with_name(f"{src.stem}.{args.start}-{args.end}.vcd")
    r = cut(src, out, args.start, args.end, unit="time" if args.time else "cycle")
    # the cycles it holds, first..last (as summarize prints them); its times too
    cycles = ""
    if r.cycles is not None:
        a, b = r.cycles
        cycles = f"cycles {a}..{b} ({b - a + 1} cycles"
        if r.cycles != (args.start, args.end - 1):
            cycles += f" of the {args.end - args.start} asked: the file holds no more"
        cycles += "), "
    print(f"{r.out}: {cycles}time {r.start_time}..{r.end_time}, read {r.bytes_in} bytes, "
          f"wrote {r.bytes_out}")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from cosim.fuzz.compare import plural
    from cosim.waves import summarize
    from cosim.waves.trace import timeline_png, write_chrome_trace

    src = Path(args.file)
    s = summarize(src)
    out = Path(args.out or src.with_suffix(".trace.json"))
    write_chrome_trace(out, s.records(), cycle_ns=args.cycle_ns,
                       metadata={"source": str(src), "figures": s.figures()})
    print(f"{out}: {plural(len(s.records()), 'command')} (open in https://ui.perfetto.dev)")
    if args.png:
        timeline_png(args.png, s.records(), title=src.name,
                     busy={k: e.intervals for k, e in s.engines.items()})
        print(args.png)
    return 0


def _guard(func):
    def run(args: argparse.Namespace) -> int:
        from cosim.waves.vcd import VcdError

        def show(message, category, filename, lineno, file=None, line=None):
            # one line, as the errors (Python's form named the reader's source line)
            print(f"npu waves {args.waves_command}: warning: {message}", file=sys.stderr)

        try:
            with warnings.catch_warnings():
                warnings.showwarning = show
                return func(args)
        except FileNotFoundError as e:
            print(f"npu waves {args.waves_command}: no such file: {e.filename}", file=sys.stderr)
            return 2
        except IsADirectoryError as e:     # e.g. a default output name that is a folder
            print(f"npu waves {args.waves_command}: {e.filename} is a folder, not a file",
                  file=sys.stderr)
            return 2
        except (VcdError, ValueError, TypeError) as e:
            print(f"npu waves {args.waves_command}: {e}", file=sys.stderr)
            return 2
    return run


#: Output options whose file is an image (matplotlib writes the format of the suffix).
_IMAGES = ("png",)


def _check_outputs(parser: argparse.ArgumentParser, flags: dict[str, str],
                   args: argparse.Namespace, *, waveform: bool = False) -> None:
    """Refuse an input waveform that is a folder, and an output file (``flags``: dest ->
    option) that is the input waveform, a folder or in a folder that does not exist, or
    that has a waveform's suffix (:data:`cosim.cli.args.WAVEFORM_SUFFIXES`) unless the
    output is a VCD (``waveform``: ``cut``'s), before the input is read (a folder was reported as
    ``[Errno 21]``, a missing folder as a missing file; the input given as the output, or
    another waveform, was overwritten; ``cut -o x.fst`` wrote VCD text), or that is the
    run's ``<stem>.waves.json`` beside the input (``trace -o`` overwrote it, and gtkw lost
    its markers)."""
    from cosim.cli.args import WAVEFORM_SUFFIXES, check_image_suffix

    if Path(args.file).is_dir():
        parser.error(f"{args.file} is a folder; give a waveform file (VCD or FST)")
    for dest, flag in flags.items():
        path = getattr(args, dest)
        if path is None:
            continue
        folder = Path(path).parent
        if Path(path).is_dir():
            parser.error(f"{flag} {path}: is a folder, give a file name")
        if Path(path).exists() and Path(args.file).exists() \
                and Path(path).samefile(args.file):
            parser.error(f"{flag} {path}: that is the input waveform; give another file")
        if Path(path).resolve() == Path(args.file).with_suffix(".waves.json").resolve():
            parser.error(f"{flag} {path}: that is the run's record beside the waveform (its "
                         "kernel regions, gtkw's markers); give another file")
        suffix = Path(path).suffix.lower()
        if suffix in WAVEFORM_SUFFIXES and not waveform:
            parser.error(f"{flag} {path}: {suffix} is a waveform's suffix and this writes no "
                         "waveform; give another file name")
        if waveform and suffix != ".vcd":
            parser.error(f"{flag} {path}: this writes a VCD; give a .vcd name")
        if not folder.is_dir():
            parser.error(f"{flag} {path}: the output folder {folder} "
                         f"{'is not a folder' if folder.exists() else 'does not exist'}")
        if dest in _IMAGES:     # before the trace JSON is written (it was, then refused)
            check_image_suffix(parser, flag, path)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``waves`` command (with its subcommands) to the ``npu`` parser."""
    from cosim.cli.args import help_text, int_at_least, output_path, positive_float
    w = sub.add_parser("waves", help="summarize, cut, group and export VCD waveforms of runs",
                       description=help_text(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ws = w.add_subparsers(dest="waves_command", required=True, metavar="COMMAND")

    s = ws.add_parser("summarize", help="engine utilization and AXI traffic of a run",
                      description="Stream a VCD of an NPU run: per-engine busy cycles, "
                                  "utilization and timeline; AXI handshakes per channel and "
                                  "bytes per cycle; optionally compare with counters.")
    s.add_argument("file", help="VCD or FST of an NPU run (e.g. waves/<run>.vcd)")
    s.add_argument("--from", dest="start", type=int, default=None, metavar="CYCLE",
                   help="first absolute cycle counted (default: the file's first)")
    s.add_argument("--to", dest="end", type=int, default=None, metavar="CYCLE",
                   help="count the absolute cycles before this one (default: to the end)")
    s.add_argument("--counters", metavar="JSON",
                   help="counters of the same run, exit 1 on any difference: either values "
                        "over the --from/--to window (names as in 'figures': cycles, "
                        "busy.<engine>, retired.<engine>, stall.<engine>.<reason>, dma_busy, "
                        "overlap, bytes_read, bytes_written, commands.<engine>, axi.<ch>) or "
                        "a snapshot pair {\"before\": ..., \"after\": ...} of "
                        "Device.counters(), checked over its own window (CYCLES before.cycles "
                        "to after.cycles)")
    s.add_argument("--json", type=output_path, metavar="OUT",
                   help="also write the summary as JSON")
    s.add_argument("--width", type=int_at_least(10), default=60,
                   help="timeline width in characters (at least 10)")
    s.set_defaults(func=_guard(_summarize),
                   check_args=partial(_check_outputs, s, {"json": "--json"}))

    g = ws.add_parser("gtkw", help="write a GTKWave save file grouping the NPU's signals",
                      description="Write <file>.gtkw (or -o): the NPU's ports (clock, AXI "
                                  "channels, host CSR port), every engine's named probes and "
                                  "the counter sources in groups, zoomed to the file's time "
                                  "range, with a marker at the start of each kernel region "
                                  "of the run (<stem>.waves.json). A save file there that it "
                                  "did not write (saved from GTKWave) is kept unless --force.")
    g.add_argument("file")
    g.add_argument("-o", "--out", type=output_path, default=None,
                   help="default <stem>.gtkw beside the input")
    g.add_argument("--force", action="store_true",
                   help="overwrite the output even if it is a save file that npu waves gtkw "
                        "did not write (one saved from GTKWave: its view and signals are lost)")
    g.set_defaults(func=_guard(_gtkw), check_args=partial(_check_outputs, g, {"out": "-o"}))

    c = ws.add_parser("cut", help="copy a cycle window of a VCD into a smaller VCD",
                      description="Stream FILE and write the window [--from, --to) with the "
                                  "header and every value at the window start; times and "
                                  "cycles stay absolute.")
    c.add_argument("file")
    c.add_argument("--from", dest="start", type=int, required=True, metavar="C1",
                   help="first absolute cycle of the window")
    c.add_argument("--to", dest="end", type=int, required=True, metavar="C2",
                   help="the window ends before this absolute cycle")
    c.add_argument("--time", action="store_true",
                   help="C1 and C2 are VCD time units, not cycles (both included)")
    c.add_argument("-o", "--out", type=output_path, default=None,
                   help="output (default <stem>.<C1>-<C2>.vcd beside the input)")
    c.set_defaults(func=_guard(_cut),
                   check_args=partial(_check_outputs, c, {"out": "-o"}, waveform=True))

    t = ws.add_parser("trace", help="Perfetto/Chrome trace (and PNG timeline) from a VCD",
                      description="Command records from the VCD (the engines' take, done, "
                                  "queue, index and opcode probes) as a traceEvents JSON for "
                                  "ui.perfetto.dev.")
    t.add_argument("file")
    t.add_argument("-o", "--out", type=output_path, default=None,
                   help="default <stem>.trace.json")
    t.add_argument("--png", type=output_path, default=None, help="also draw a PNG timeline")
    t.add_argument("--cycle-ns", type=positive_float, default=1.0,
                   help="ns per cycle in the trace (default 1: the viewer's ns are cycles)")
    t.set_defaults(func=_guard(_trace),
                   check_args=partial(_check_outputs, t, {"out": "-o", "png": "--png"}))
