"""``npu fuzz``: the differential fuzzer (:mod:`cosim.fuzz`) from the command line.

::

    npu fuzz --streams N [--dram PRESET] [--config CFG] [--seed S] [--json OUT]
             [--backend rtl|perf] [--batch B] [--jobs J] [--repro-dir DIR] [--timed-exact]
             [--vm] [--no-shrink]

Runs ``N`` seeded streams (seeds ``S .. S + N - 1``) on the functional model, the performance
model and the RTL (``--backend perf``: the two models only, no RTL; ``--backend model``, its
former name, is still taken),
compares them, shrinks every failure to a reproducer file in ``--repro-dir``, and prints and
writes (``--json``) the totals: streams, mismatching streams, hangs, commands by kind, errors
by code, wall time. ``--vm``: translated mode (:mod:`cosim.fuzz.generate`): queues in
contexts with random mappings, planted page faults resumed or skipped: the functional
and performance models agree on it (``--backend perf``), and on the RTL too (seeds 0-99,
8x8, ideal, timing exact; README, Known limits).
``--no-shrink``: failures are reported as they are (shrinking reruns the RTL up to 400
times per failing stream). Exit status 0 when every stream agrees (with ``--timed-exact``
also in timing), 1 otherwise. ^C: one line, exit status 130, and ``--json`` gets the totals
of the batches that finished (with ``interrupted``: the seed ranges done).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_parser", "VM_SHARE", "MAX_COMMANDS"]

#: ``--vm``: the share of a stream's queues that run in a context
VM_SHARE = 0.6

#: The largest ``--max-commands`` (:attr:`cosim.fuzz.GeneratorSettings.max_commands`, per
#: queue). A stream's time grows faster than linearly in its commands: measured on 8x8 on 2
#: busy cores, seed 21 (3 queues, 4,665 commands) at 2,000 generates in 3 s and runs in 6 s
#: on ``--backend perf``, 21 s on the RTL (simulator start included); at 4,000 (9,325
#: commands) 18 s and 30 s; a user trial measured 97 s at 10,000 and 512 s at 20,000.
MAX_COMMANDS = 2000


def _format(total: dict, timed_exact: bool = False) -> str:
    from cosim.fuzz.compare import plural
    rtl = total["backend"] == "rtl"
    lines = [f"npu fuzz: {plural(total['streams'], 'stream')} on {total['config']} under DRAM "
             f"{total['dram']['name'] or total['dram']['spec']} ({total['backend']}"
             f"{', perf model too' if rtl and total['with_perf'] else ''}"
             f"{'' if rtl else ': the two models, no RTL'}): "
             f"{total['mismatching']} mismatching, {plural(total['hangs'], 'hang')}, "
             f"{total['wall_seconds']} s",
             "  commands: " + ", ".join(f"{k} {v}" for k, v in total["commands"].items()),
             "  errors:   " + (", ".join(f"{k} {v}" for k, v in total["errors"].items())
                               or "none"),
             f"  streams with a bus fault {total['with_fault']}, a ring wrap "
             f"{total['with_ring_wrap']}, several failing queues "
             f"{total['with_several_failing_queues']}, the interrupt pin high "
             f"{total['with_irq_pin_high']}; by queues used {total['queues']}"]
    if total.get("with_translated_queues"):
        lines.append(f"  streams with translated queues {total['with_translated_queues']}; "
                     "page faults " + (", ".join(f"{k} {v}" for k, v in
                                                 total["page_faults"].items()) or "none"))
    if total["perf_skipped"]:
        lines.append(f"  performance model not run: {total['perf_skipped']}")
    if total["timed"]:
        lines.append(f"  RTL vs performance model, timing only (--timed-exact): "
                     f"{plural(total['timed_differences'], 'stream')} differing")
        for t in total["timed"][:5]:
            lines.append(f"    seed {t['seed']}: {'; '.join(t['differences'][:2])}")
    elif timed_exact and total["with_perf"]:
        lines.append("  RTL vs performance model, timing (--timed-exact): the same in every "
                     "stream")
    for m in total["batch_mismatches"]:
        lines.append(f"  FAIL {m}")
    for f in total["failures"][:10]:
        lines.append(f"  FAIL seed {f['seed']}: {f['hang'] or '; '.join(f['mismatches'][:2])}")
    for p in total["reproducers"]:
        lines.append(f"  reproducer: {p}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from cosim.fuzz.campaign import CampaignInterrupted, run_campaign
    from cosim.fuzz.compare import plural

    try:
        total = run_campaign(args.config, args.streams, dram=args.dram, first_seed=args.seed,
                             backend=args.backend, batch=args.batch, jobs=args.jobs,
                             repro_dir=Path(args.repro_dir), timed_exact=args.timed_exact,
                             shrink=not args.no_shrink,
                             settings={"max_commands": args.max_commands,
                                       **({"p_vm": VM_SHARE} if args.vm else {})},
                             progress=lambda m: print(m, file=sys.stderr, flush=True))
    except CampaignInterrupted as e:
        # one line; the streams of the batches that finished go to --json
        done = e.total
        if done is None:
            what = "before any batch finished" + (f"; {args.json} not written" if args.json
                                                  else "")
        else:
            what = (f"after {plural(done['streams'], 'stream')} "
                    f"({done['mismatching']} mismatching, {plural(done['hangs'], 'hang')})")
            if args.json:
                Path(args.json).write_text(json.dumps(done, indent=1) + "\n")
                what += f"; {args.json} holds them"
        print(f"npu fuzz: interrupted {what}", file=sys.stderr)
        return 130
    if args.json:
        Path(args.json).write_text(json.dumps(total, indent=1) + "\n")
    print(_format(total, args.timed_exact))
    clean = not (total["mismatching"] or total["hangs"] or total["batch_mismatches"]
                 or total["timed"])
    return 0 if clean else 1


def _backend(text: str) -> str:
    """``--backend``: a backend of :data:`cosim.fuzz.campaign.BACKENDS` (a former name gives
    its new one)."""
    from cosim.fuzz.campaign import backend_name
    try:
        return backend_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``npu fuzz``."""
    from cosim.cli.args import (
        DRAM_HELP,
        help_text,
        int_at_least,
        output_path,
        parse_config,
        parse_dram,
    )
    from cosim.fuzz.campaign import BACKENDS
    from hw.config import NPUConfig
    from sw.dram import DramTiming

    p = sub.add_parser("fuzz", help="differential fuzzer: model, perf model and RTL",
                       description=help_text(__doc__),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int_at_least(1), default=100, metavar="N",
                   help="number of seeded streams (default 100)")
    p.add_argument("--dram", type=parse_dram, default=DramTiming(), metavar="PRESET|k=v,...",
                   help=DRAM_HELP)
    p.add_argument("--config", type=parse_config, default=NPUConfig(), metavar="CFG",
                   help="configuration, e.g. 4x4 or 8x8,n_queues=2 (default 8x8)")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="first seed (default 0)")
    p.add_argument("--json", type=output_path, metavar="PATH", help="write the totals as JSON")
    p.add_argument("--backend", type=_backend, choices=BACKENDS, default="rtl",
                   help="rtl: the co-simulated RTL beside the functional and the performance "
                   "model (default); perf: the functional model against the performance "
                   "model, no RTL (model: perf's former name, still taken)")
    p.add_argument("--batch", type=int_at_least(1), default=200,
                   help="streams per simulation (default 200)")
    p.add_argument("--jobs", type=int_at_least(1), default=1,
                   help="simulations at once (default 1)")
    p.add_argument("--repro-dir", default="build/fuzz",
                   help="where reproducers of failures go (default build/fuzz)")
    p.add_argument("--max-commands", default=48, metavar="N",
                   type=int_at_least(1, MAX_COMMANDS, "a stream's time grows faster than "
                                      "linearly in its commands"),
                   help=f"commands per queue at most, 1..{MAX_COMMANDS} (default 48; a stream "
                   f"at {MAX_COMMANDS:,} took 21 s on the RTL, at 10,000 97 s)")
    p.add_argument("--vm", action="store_true",
                   help="translated mode: queues in contexts with random mappings, planted "
                   "page faults (resumed or skipped); needs tlb_entries > 0 (the default)")
    p.add_argument("--no-shrink", action="store_true",
                   help="report failing streams as they are (no shrinking on the RTL)")
    p.add_argument("--timed-exact", action="store_true",
                   help="also compare the RTL and the performance model exactly: HEAD, "
                   "Q_FETCHED, ERR_*, counters, busy cycles of every trace entry; a "
                   "difference makes the exit status 1")
    p.set_defaults(func=_run, check_args=lambda args: _check(p, args))


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from cosim.cli.args import check_json_arg
    from cosim.fuzz.execute import check_dram
    try:
        check_dram(args.dram, args.config, args.max_commands)
    except ValueError as e:
        parser.error(f"argument --dram: {e}")
    if args.timed_exact and args.backend == "perf":
        parser.error("--timed-exact compares the RTL with the performance model: not with "
                     "--backend perf (no RTL)")
    if args.vm and not args.config.tlb_entries:
        parser.error(f"--vm runs queues in contexts: {args.config.spec} has no TLB "
                     "(tlb_entries=0)")
    check_json_arg(parser, args)     # before the campaign, not after it; last, as it makes
    # the file's folder

