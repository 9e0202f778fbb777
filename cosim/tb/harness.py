"""Run synchronous runtime code on the RTL, from pytest or from the command line.

:func:`run_on_rtl` builds the simulator for a configuration (cached, see :mod:`cosim.build`),
starts one simulation of :mod:`cosim.tb.cocotb_entry`, which calls ``function(backend, **args)``
with an :class:`cosim.tb.rtl_backend.RtlBackend`, and returns what the function returned.

Arguments and results travel as JSON files in the run directory
``build/<tag>/runs/<name>/`` (``spec.json``, ``result.json``, plus ``sim.log`` and the DRAM
backdoor scratch file). Waveforms, when asked for, go to ``<waves dir>/<name>.vcd`` (or
``.fst``), with ``<name>.waves.json`` beside it: the absolute cycles the file holds, the clock
period, the window and scopes asked for, and the kernel regions of the run (the markers of
``npu waves gtkw``). The waves directory is ``waves/`` unless ``NPU_WAVES_DIR`` names another
(the test suite points it at a temporary directory).

The DRAM model runs under a :class:`sw.dram.DramTiming` (``dram=``: a preset name such as
``"jitter"``, ``key=value`` pairs, or a DramTiming; ``ideal`` by default), passed to the
simulator as plusargs, so every timing shares one build. :func:`default_dram` sets the
timing of the runs that do not give one.

Command line::

    python -m cosim.tb.harness JOB [--args JSON] [--config JSON] [--name NAME] [--waves]
                                [--waves-format vcd|fst] [--record PATH] [--dram SPEC]

``--record PATH`` records the host's pin activity for the native replay harness
(``python -m cosim.tb.replay PATH``, see :mod:`cosim.tb.replay`).
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import difflib
import fcntl
import itertools
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from cosim.build import (
    DEFAULT_DESIGN,
    ROOT,
    WAVES_FORMATS,
    WAVES_ROOT,
    CosimBuildError,
    _runner_class,
    build_sim,
    design_blocks,
    design_tag,
    generate_verilog,
    trace_vars,
)
from hw.config import NPUConfig
from sw.dram import DramTiming
from sw.model.faults import BusFault

__all__ = ["run_on_rtl", "run_job", "check_waves_window", "check_waves_scope", "default_dram",
           "waves_dir", "RunResult", "CosimError", "CosimJobError", "main"]

# Warnings are errors in the simulator process too; add narrow, named exceptions here.
PYTHONWARNINGS = "error"
# cocotb rewrites the asserts of every imported module by default ("*.py"), recompiling hw/, sw/
# and amaranth on each start (about 1.5 s); detailed assert messages are kept for job modules.
REWRITE_ASSERTION_FILES = "*_jobs.py"


class CosimError(RuntimeError):
    """The simulation itself failed (crashed, or ended without a result).

    Attributes
    ----------
    log_path : Path
        The simulator's output.
    """

    def __init__(self, message: str, log_path: Path):
        super().__init__(f"{message} (log: {log_path})")
        self.log_path = log_path


class CosimJobError(CosimError):
    """The job raised (or returned something that is not JSON). ``str()`` ends with the
    job's traceback from the simulator process.

    Attributes
    ----------
    error : str
        ``"ExceptionType: message"`` of the job's exception.
    job_traceback : str
        The traceback text.
    """

    def __init__(self, job: str, error: str, job_traceback: str, log_path: Path):
        super().__init__(f"job {job} failed on the RTL: {error}\n{job_traceback}", log_path)
        self.error = error
        self.job_traceback = job_traceback


@dataclass(frozen=True)
class RunResult:
    """Outcome of one :func:`run_job`.

    Attributes
    ----------
    result : object
        What the job returned (JSON round-tripped).
    cycles : int
        Simulated clock cycles at the end of the job (including reset).
    job_seconds : float
        Wall time of the job inside the simulator, seconds.
    build_seconds : float
        Wall time spent on the (cached) build, seconds.
    run_dir : Path
        Where spec, result and log are.
    waves : Path or None
        The waveform file (VCD or FST), if traced.
    job_cpu_seconds : float or None
        CPU time of the simulator process (simulation, cocotb and the job's Python) over the
        same span; less disturbed than wall time when other processes share the cores.
    recording : dict or None
        With ``record=``: the summary of the recording (:meth:`cosim.tb.replay.Recorder.write`:
        path in ``"path"``, events, cycles...).
    dram : DramTiming
        The DRAM timing the run had.
    waves_info : dict or None
        With a waveform: what ``<name>.waves.json`` beside it holds (``cycles``: the first
        and last absolute cycle in the file, as :func:`cosim.waves.summarize` numbers them;
        ``clock_period_ns``, ``format``, ``window``, ``scope``, ``regions``).
    """
    result: object
    cycles: int
    job_seconds: float
    build_seconds: float
    run_dir: Path
    waves: Path | None
    recording: dict | None = None
    job_cpu_seconds: float | None = None
    dram: DramTiming = field(default_factory=DramTiming)
    waves_info: dict | None = None


_DEFAULT_DRAM: contextvars.ContextVar[DramTiming | None] = contextvars.ContextVar(
    "npu_default_dram", default=None)


@contextlib.contextmanager
def default_dram(dram: DramTiming | str) -> Iterator[DramTiming]:
    """Within the ``with`` block, :func:`run_job` calls without ``dram=`` run under ``dram``
    (for drivers such as ``npu bench`` that run many jobs); yields the parsed timing.

    Raises
    ------
    sw.dram.DramTimingError
        If ``dram`` does not parse.
    """
    timing = DramTiming.parse(dram)
    token = _DEFAULT_DRAM.set(timing)
    try:
        yield timing
    finally:
        _DEFAULT_DRAM.reset(token)

@contextlib.contextmanager
def _repo_on_sys_path() -> Iterator[None]:
    # runner.test() sets the simulator's PYTHONPATH from this process's sys.path.
    added = str(ROOT) not in sys.path
    if added:
        sys.path.insert(0, str(ROOT))
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(str(ROOT))


def _safe_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    if not safe:
        raise ValueError(f"run name {name!r} has no usable characters")
    return safe


def check_waves_window(window: dict) -> dict:
    """Validate a ``waves_window`` (see :func:`run_job`) and fill its defaults.

    Raises
    ------
    ValueError
        Unknown keys, both a cycle range and a kernel, a negative or empty cycle range, or an
        occurrence below 1.
    """
    window = dict(window)
    if set(window) - {"from", "to", "kernel", "occurrence"}:
        raise ValueError(f"waves_window: unknown keys in {sorted(window)}")
    if "kernel" in window:
        if "from" in window or "to" in window:
            raise ValueError("waves_window: give a cycle range or a kernel, not both")
        window.setdefault("occurrence", 1)
        if not window["kernel"] or int(window["occurrence"]) < 1:
            raise ValueError(f"waves_window: bad kernel window {window}")
        return window
    first, last = int(window.get("from", 0)), window.get("to")
    if first < 0 or (last is not None and int(last) <= first):
        raise ValueError(f"waves_window: need 0 <= from < to, got from={first} to={last}")
    return {"from": first, "to": None if last is None else int(last)}


def waves_dir() -> Path:
    """Where waveforms go: ``$NPU_WAVES_DIR`` if set (the test suite sets it to a temporary
    directory), else ``waves/`` of the repository."""
    env = os.environ.get("NPU_WAVES_DIR")
    return Path(env) if env else WAVES_ROOT


def run_job(config: NPUConfig, job: str, args: dict | None = None, *, name: str,
            waves: bool = False, design: str = DEFAULT_DESIGN,
            internal_clock: bool = True, waves_window: dict | None = None,
            record: Path | None = None, dram: DramTiming | str | None = None,
            waves_format: str = "vcd", waves_scope: list[str] | None = None,
            bus_fault: BusFault | None = None) -> RunResult:
    """Build (cached) and run ``job(backend, **args)`` on the RTL of ``design(config)``.

    Parameters
    ----------
    config : NPUConfig
    job : str
        ``"module:function"``, importable from the repository root; the function takes an
        :class:`~cosim.tb.rtl_backend.RtlBackend` and keyword arguments and returns a
        JSON-serialisable value.
    args : dict, optional
        JSON-serialisable keyword arguments of the job.
    name : str
        Names the run directory and the waveform (``<waves dir>/<name>.vcd``, see
        :func:`waves_dir`). While another process runs a job of that name in this checkout,
        the run takes ``<name>.2`` (``.3``, ...) for both (``RunResult.run_dir`` says which).
    waves : bool
        Trace the design into ``<waves dir>/<name>.vcd`` (a separate, traced build).
    design : str
        ``"module:Class"`` of the design under test, ``hw.top:NPU`` by default.
    internal_clock : bool
        Use the clock generated inside the simulation (default; about 2x faster than
        cocotb's ``Clock``, which ``False`` selects).
    waves_window : dict, optional
        Trace only a window (implies ``waves``): ``{"from": first_cycle, "to": last_cycle}``
        (absolute clock cycles, ``"to"`` may be None: to the end) or ``{"kernel": name,
        "occurrence": n}`` (the ``n``-th, from 1, :meth:`sw.runtime.Device.region` of that
        name, e.g. ``"query"`` or ``"softmax"``). The file keeps absolute times.
    record : Path, optional
        Record the host's pin activity into this file for the native replay harness
        (:mod:`cosim.tb.replay`); needs the internal clock. The recording's sidecar keeps
        the DRAM timing, and the replay runs under it.
    dram : DramTiming or str, optional
        Timing of the DRAM model (:meth:`sw.dram.DramTiming.parse`: ``"ideal"``, ``"ddr"``,
        ``"hbm"``, ``"jitter"``, ``"lat100"``, ``"bp50"`` or ``"latency=100,bw=4,..."``);
        default :func:`default_dram`'s, ``ideal`` outside one. No rebuild per timing.
    waves_format : {"vcd", "fst"}
        Waveform format (implies nothing by itself); FST is a build of its own and needs
        liblz4 (see :func:`cosim.build.build_sim`).
    waves_scope : list of str, optional
        Trace only these blocks of the NPU (dotted paths below it: ``["dma", "cmdproc"]``,
        see :func:`cosim.build.design_blocks`), plus the NPU's own ports, named probes and
        counter sources (:func:`cosim.build.trace_vars`); implies ``waves``.
    bus_fault : BusFault, optional
        A fault the DRAM model applies from time 0 (its plusargs, :mod:`sw.model.faults`);
        the job can change it with ``backend.set_bus_fault``.

    Returns
    -------
    RunResult

    Raises
    ------
    CosimBuildError
        If the build fails.
    CosimJobError
        If the job raised; the message carries its traceback.
    KeyboardInterrupt
        If the job ended on one (^C reached the simulator).
    CosimError
        If the simulator crashed or ended without writing a result, or the window's kernel
        never ran.
    ValueError
        If ``waves_window`` is malformed, ``waves_format`` unknown, or a ``waves_scope``
        block is not in the design (the message lists the blocks).
    sw.dram.DramTimingError
        If ``dram`` does not parse (a ValueError).
    """
    timing = DramTiming.parse(_DEFAULT_DRAM.get() if dram is None else dram)
    name = _safe_name(name)
    if waves_window is not None:
        waves_window = check_waves_window(waves_window)
        waves = True
    if waves_format not in WAVES_FORMATS:
        raise ValueError(f"waves_format must be one of {WAVES_FORMATS}, not {waves_format!r}")
    waves = waves or bool(waves_scope)
    if record is not None and not internal_clock:
        raise ValueError("recording needs the internal clock (the replay does not drive clk)")
    args = dict(args or {})
    json.dumps(args)  # fail here, not in the simulator
    tag_dir = ROOT / "build" / design_tag(config, design)
    if waves_scope:         # before the (minutes long) traced build; the Verilog is cached
        check_waves_scope(config, waves_scope, design)
    sim = build_sim(config, waves=waves, design=design, internal_clock=internal_clock,
                    waves_format=waves_format)

    with _claim_run_dir(tag_dir / "runs" / name) as run_dir:
        return _run_in(run_dir, config, job, args, timing, sim, waves, waves_format,
                       waves_window, waves_scope, record, internal_clock, design, bus_fault)


@contextlib.contextmanager
def _claim_run_dir(base: Path) -> Iterator[Path]:
    """The run directory ``base``, held for the run with an exclusive lock
    (``fcntl.flock`` on ``.lock`` inside); if another process holds it (a second ``npu run``
    of the same job in this checkout), ``base.2``, ``base.3``, ... instead, so that concurrent
    runs never share a DRAM image or a result file."""
    for k in itertools.count(1):
        run_dir = base if k == 1 else base.with_name(f"{base.name}.{k}")
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            yield run_dir
            return


def _run_in(run_dir: Path, config: NPUConfig, job: str, args: dict, timing: DramTiming, sim,
            waves: bool, waves_format: str, waves_window, waves_scope, record, internal_clock,
            design: str, bus_fault) -> RunResult:
    """The body of :func:`run_job` in its claimed run directory (named as the run)."""
    name = run_dir.name
    spec_path, result_path = run_dir / "spec.json", run_dir / "result.json"
    log_path = run_dir / "sim.log"
    result_path.unlink(missing_ok=True)
    dram_file = run_dir / "dram.hex"
    spec_path.write_text(json.dumps({
        "config": config.to_dict(), "job": job, "args": args,
        "dram_file": str(dram_file), "internal_clock": internal_clock,
        "waves_window": waves_window,
        "record": str(Path(record).resolve()) if record is not None else None,
        "design": design, "dram": timing.to_dict(),
    }))
    vcd = None
    test_args: list[str] = []
    if waves:
        waves_dir().mkdir(parents=True, exist_ok=True)
        vcd = waves_dir() / f"{name}.{waves_format}"
        partial = vcd.with_name(f"{name}.partial.{waves_format}")   # vcd once the run ends
        partial.unlink(missing_ok=True)
        test_args = ["--trace-file", str(partial)]
        for spec in trace_vars(waves_scope):
            test_args += ["--trace-vars", spec]

    runner = _runner_class()()
    with _repo_on_sys_path():
        try:
            runner.test(
                test_module="cosim.tb.cocotb_entry", hdl_toplevel="tb_top",
                hdl_toplevel_lang="verilog",
                build_dir=sim.build_dir, test_dir=run_dir, waves=waves, test_args=test_args,
                plusargs=[f"+npu_dram_file={dram_file}", *timing.to_plusargs(),
                          *(bus_fault.to_plusargs() if bus_fault is not None else [])],
                extra_env={"NPU_COSIM_SPEC": str(spec_path),
                           "NPU_COSIM_RESULT": str(result_path),
                           "PYTHONWARNINGS": PYTHONWARNINGS,
                           "COCOTB_REWRITE_ASSERTION_FILES": REWRITE_ASSERTION_FILES},
                results_xml=str(run_dir / "results.xml"), log_file=log_path,
                timescale=("1ns", "1ps"),
            )
        except SystemExit:
            pass  # the runner exits under pytest when the cocotb test failed; see result.json
        except (RuntimeError, OSError) as e:
            if _interrupted(result_path):
                raise KeyboardInterrupt(f"simulation of {name} interrupted") from None
            raise CosimError(f"simulation of {name} could not run: {e}", log_path) from e
    dram_file.unlink(missing_ok=True)  # scratch data can be large
    Path(f"{dram_file}.out").unlink(missing_ok=True)

    outcome = json.loads(result_path.read_text()) if result_path.is_file() else None
    missed = _missed_kernel(waves_window, outcome)
    if vcd is not None:
        # the waveform of a finished or failed job replaces the previous one; a window whose
        # kernel never ran traced nothing, and the previous file stays
        if missed is None and partial.exists():
            partial.replace(vcd)
        partial.unlink(missing_ok=True)
    if outcome is None:
        raise CosimError(f"simulation of {name} ended without a result", log_path)
    if outcome.get("interrupted"):      # (on the simulator's status 130 it is caught above)
        raise KeyboardInterrupt(f"simulation of {name} interrupted")
    if not outcome["ok"]:
        raise CosimJobError(job, outcome["error"], outcome["traceback"], log_path)
    if missed is not None:
        raise CosimError(f"{missed}; nothing was traced, {vcd} is left as it was", log_path)
    info = _waves_sidecar(vcd, waves_format, waves_window, waves_scope, outcome) \
        if vcd is not None else None
    recording = outcome.get("recording")
    if recording is not None:
        recording = dict(recording, path=str(Path(record).resolve()))
    return RunResult(outcome["result"], outcome["cycles"], outcome["seconds"], sim.seconds,
                     run_dir, vcd, recording, outcome.get("cpu_seconds"), timing, info)


def _interrupted(result_path: Path) -> bool:
    """Whether the simulator reported a ^C (:mod:`cosim.tb.cocotb_entry`): the run is then
    interrupted here too, not a failed job with the simulator's traceback."""
    try:
        return bool(json.loads(result_path.read_text()).get("interrupted"))
    except (OSError, ValueError):
        return False


def _missed_kernel(window: dict | None, outcome: dict | None) -> str | None:
    """Why a waveform window on a kernel occurrence traced nothing (the job ran fewer
    occurrences of it), or None."""
    if not window or "kernel" not in window or not outcome or not outcome["ok"]:
        return None
    regions = outcome.get("regions", {})
    ran = regions.get(window["kernel"], 0)
    if ran >= window["occurrence"]:
        return None
    known = ", ".join(f"{k} x{v}" for k, v in regions.items())
    return (f"waveform window: kernel {window['kernel']!r} ran {ran} times, occurrence "
            f"{window['occurrence']} was asked for (kernels of this run: {known or 'none'})")


def check_waves_scope(config: NPUConfig, scopes: list[str],
                      design: str = DEFAULT_DESIGN) -> None:
    """Check that every block of ``scopes`` (dotted paths below the NPU, ``run_job``'s
    ``waves_scope``) is a block of ``design(config)``: one of
    :func:`cosim.build.design_blocks` of its Verilog (:func:`cosim.build.generate_verilog`:
    cached, else about 10 s); no simulator is built.

    Raises
    ------
    ValueError
        A block is not in the design; the message lists the design's blocks.
    CosimBuildError
        If the Verilog cannot be generated.
    """
    blocks = design_blocks(generate_verilog(config, design))
    unknown = [s for s in scopes if s not in blocks]
    if unknown:
        named = [b for b in blocks if "$" not in b]     # not the generated names
        close = [m for s in unknown for m in difflib.get_close_matches(s, named, 2)]
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise ValueError(f"waves scope: no block {', '.join(map(repr, unknown))} in the "
                         f"design; {hint}blocks: {', '.join(named)}")


def _waves_sidecar(path: Path, fmt: str, window: dict | None, scope: list[str] | None,
                   outcome: dict) -> dict:
    """Write ``<name>.waves.json`` beside a waveform and return what it holds; the save files
    ``npu waves gtkw`` wrote beside an earlier waveform of that name are rewritten for this
    one (:func:`cosim.waves.refresh_gtkw`; ``"gtkw"``, a list of paths, in the result, not in
    the file)."""
    from cosim.tb.rtl_backend import CLOCK_PERIOD_NS
    from cosim.waves import refresh_gtkw
    from cosim.waves.vcd import read_header, time_range

    header = read_header(path)
    span = time_range(path, header)
    period = round(Fraction(CLOCK_PERIOD_NS, 10**9) / header.timescale_s)
    # the clock rises at every multiple of the period; the first dump is no edge
    cycles = None if span is None else [span[0] // period, span[1] // period - 1]
    info = {"file": path.name, "format": fmt, "cycles": cycles,
            "clock_period_ns": CLOCK_PERIOD_NS, "time_unit_s": str(header.timescale_s),
            "window": window, "scope": scope, "regions": outcome.get("region_log", [])}
    path.with_suffix(".waves.json").write_text(json.dumps(info, indent=1) + "\n")
    gtkw = refresh_gtkw(path)       # after the sidecar: its markers are this run's regions
    return info | {"gtkw": [str(g) for g in gtkw]} if gtkw else info


def run_on_rtl(config: NPUConfig, job: str, args: dict | None = None, *, name: str,
               waves: bool = False, design: str = DEFAULT_DESIGN,
               waves_window: dict | None = None,
               dram: DramTiming | str | None = None, waves_format: str = "vcd",
               waves_scope: list[str] | None = None) -> object:
    """Run ``job(backend, **args)`` on the RTL and return what it returned.

    Same parameters and errors as :func:`run_job` (which also reports cycles and timings).
    """
    return run_job(config, job, args, name=name, waves=waves, design=design,
                   waves_window=waves_window, dram=dram, waves_format=waves_format,
                   waves_scope=waves_scope).result


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: run one job on the RTL and print its JSON result."""
    p = argparse.ArgumentParser(prog="python -m cosim.tb.harness", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", help="module:function taking (backend, **args)")
    p.add_argument("--args", default="{}", help="JSON object of keyword arguments")
    p.add_argument("--config", default="{}", help="JSON object of NPUConfig fields")
    p.add_argument("--design", default=DEFAULT_DESIGN, help="module:Class of the design")
    p.add_argument("--name", default=None, help="run name (default: the function name)")
    p.add_argument("--waves", action="store_true",
                   help="write <waves dir>/<name>.vcd (waves/, or $NPU_WAVES_DIR)")
    p.add_argument("--waves-format", choices=WAVES_FORMATS, default="vcd",
                   help="waveform format (fst needs liblz4-dev)")
    p.add_argument("--record", type=Path, default=None,
                   help="record the host's pin activity to PATH "
                   "(replay: python -m cosim.tb.replay)")
    p.add_argument("--dram", default="ideal", metavar="SPEC",
                   help="DRAM timing: a preset (ideal ddr hbm jitter lat100 bp50) and/or "
                   "key=value pairs, e.g. latency=100,bw=4,stall=0.3,seed=1 (see sw/dram.py)")
    ns = p.parse_args(argv)
    config = NPUConfig(**json.loads(ns.config))
    name = ns.name or ns.job.rpartition(":")[2]
    try:
        r = run_job(config, ns.job, json.loads(ns.args), name=name, waves=ns.waves,
                    design=ns.design, record=ns.record, dram=ns.dram,
                    waves_format=ns.waves_format)
    except (CosimBuildError, CosimError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    print(json.dumps({"result": r.result, "cycles": r.cycles, "job_seconds": r.job_seconds,
                      "job_cpu_seconds": r.job_cpu_seconds, "build_seconds": r.build_seconds,
                      "waves": str(r.waves) if r.waves else None, "dram": r.dram.to_dict(),
                      "recording": r.recording and {k: v for k, v in r.recording.items()
                                                    if k not in ("args", "config", "signals")}},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
