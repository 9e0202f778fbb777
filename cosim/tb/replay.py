"""Record what the host did to the simulated NPU under cocotb, and replay it in a pure
Verilator C++ harness (``cosim/native/main.cpp``) to measure how fast the same design runs
without cocotb and Python.

What is recorded (and why this is faithful)
-------------------------------------------
:class:`cosim.tb.rtl_backend.RtlBackend` is the only code that touches the pins of ``tb_top``
(plus the reset in :mod:`cosim.tb.cocotb_entry`). With a :class:`Recorder` attached it logs, in
order and with the simulated time (in simulator precision steps) at which it happened:

* every value it drives on an input pin (``rst``, the AXI4-Lite ``csr__*`` inputs, the DRAM
  backdoor ``bd_op/bd_first/bd_last``);
* every output pin value it sampled (``csr__awready``, ``csr__rdata``, ``irq``, ``bd_ack``,
  ``dram_prot_errors``...), as a check;
* the contents of the DRAM backdoor file it wrote before each ``$readmemh`` load, and the
  contents of each ``$writememh`` dump file it read back (a check);
* the simulated time at which the job ended.

The design is deterministic and all its inputs are these pins (the clock is generated inside
the simulation), so driving the same pin values at the same simulated times reproduces the
run cycle for cycle. The C++ harness does exactly that, and compares every sampled output and
every DRAM dump with the recorded value: every CSR read (status, head pointers, cycle
counters, perf counters) and every byte the host read back from DRAM (all results) must
match bit for bit, and it must reach the recorded end time, so the cycle counts agree by
construction. A replay with any mismatch is reported as failed. Host-side work (the Python
runtime, numpy, hex formatting) does not exist in the replay; waiting for ``irq`` becomes
running the clock to the recorded time at which ``irq`` rose (and checking that it did).

File format (little-endian)
---------------------------
::

    "NPUREC1\\0"                          magic, 8 bytes
    u64 end_step, u64 period_steps, u64 n_signals, u64 n_events
    n_signals x (u64 length, name bytes, zero padding to 8)
    n_events x (u64 step, u32 op, u32 signal, u64 value, u64 length, payload, padding to 8)

``op``: 1 drive ``signal`` = ``value``; 2 check ``signal`` == ``value``; 3 write ``payload``
to the DRAM backdoor file (``+npu_dram_file=``); 4 check that the dump file (``PATH.out``)
holds exactly ``payload`` (then delete it). A JSON sidecar (``<file>.json``) carries the
config, the job, the DRAM timing and the counts.

DRAM timing
-----------
The DRAM model's timing (:class:`sw.dram.DramTiming`: latency, bandwidth, seeded random
backpressure) is an input of the run too, given as plusargs. The sidecar keeps it
(``"dram"``) and :func:`run_native` passes the same plusargs to the replay, so a recording
made under any timing replays cycle for cycle (the backpressure generators are in the model,
seeded from the plusargs, so the replay draws the same stalls). A recording without a
sidecar replays under ``ideal`` timing (give ``run_native(dram=...)`` otherwise); a wrong
timing shows as a failed replay, never as a silent one.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hw.config import NPUConfig
from sw.dram import DramTiming

__all__ = ["Recorder", "Recording", "read_recording", "NativeBuild", "build_native",
           "run_native", "recording_dram", "NativeResult", "ReplayError", "OP_DRIVE",
           "OP_CHECK", "OP_LOAD", "OP_DUMP"]

MAGIC = b"NPUREC1\0"
OP_DRIVE, OP_CHECK, OP_LOAD, OP_DUMP = 1, 2, 3, 4
_EVENT = struct.Struct("<QIIQQ")
NATIVE_DIR = Path(__file__).resolve().parent / "native"


class ReplayError(RuntimeError):
    """The native replay could not be built or run, or did not reproduce the recording."""


def _pad8(n: int) -> int:
    return -n % 8


class Recorder:
    """In-memory log of the host's pin activity during one cocotb run (see the module doc).

    Appending is all that happens during the run (a tuple per pin access); :meth:`write`
    encodes the file afterwards, outside the timed job.
    """

    def __init__(self) -> None:
        from cocotb.simtime import get_sim_time
        self._now = get_sim_time
        self.signals: list[str] = []
        self._sig_index: dict[str, int] = {}
        self.events: list[tuple[int, int, int, int, bytes]] = []

    def _sig(self, name: str) -> int:
        i = self._sig_index.get(name)
        if i is None:
            i = self._sig_index[name] = len(self.signals)
            self.signals.append(name)
        return i

    def drive(self, name: str, value: int) -> None:
        """The host set input pin ``name`` to ``value`` now."""
        self.events.append((self._now("step"), OP_DRIVE, self._sig(name), value, b""))

    def check(self, name: str, value: int) -> None:
        """The host sampled output pin ``name`` as ``value`` now."""
        self.events.append((self._now("step"), OP_CHECK, self._sig(name), value, b""))

    def load(self, text: bytes) -> None:
        """The host wrote ``text`` to the DRAM backdoor file now."""
        self.events.append((self._now("step"), OP_LOAD, 0, 0, bytes(text)))

    def dump(self, text: bytes) -> None:
        """The host read ``text`` from the DRAM dump file now."""
        self.events.append((self._now("step"), OP_DUMP, 0, 0, bytes(text)))

    def write(self, path: Path, *, end_step: int, period_steps: int, meta: dict) -> dict:
        """Write the recording to ``path`` and a JSON sidecar ``path.json``; return the
        sidecar's content."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        parts = [MAGIC, struct.pack("<QQQQ", end_step, period_steps, len(self.signals),
                                    len(self.events))]
        for name in self.signals:
            b = name.encode()
            parts += [struct.pack("<Q", len(b)), b, b"\0" * _pad8(len(b))]
        counts = {"drive": 0, "check": 0, "load": 0, "dump": 0}
        names = {OP_DRIVE: "drive", OP_CHECK: "check", OP_LOAD: "load", OP_DUMP: "dump"}
        payload = 0
        for step, op, sig, value, data in self.events:
            parts.append(_EVENT.pack(step, op, sig, value, len(data)))
            if data:
                parts += [data, b"\0" * _pad8(len(data))]
                payload += len(data)
            counts[names[op]] += 1
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(b"".join(parts))
        tmp.replace(path)
        side = dict(meta, end_step=end_step, period_steps=period_steps,
                    cycles=end_step // period_steps, signals=self.signals,
                    events=len(self.events), counts=counts, payload_bytes=payload,
                    file_bytes=path.stat().st_size)
        Path(f"{path}.json").write_text(json.dumps(side, indent=1) + "\n")
        return side


@dataclass(frozen=True)
class Recording:
    """A recording read back by :func:`read_recording` (for tests and inspection)."""
    end_step: int
    period_steps: int
    signals: list[str]
    events: list[tuple[int, int, int, int, bytes]]

    @property
    def cycles(self) -> int:
        return self.end_step // self.period_steps


def read_recording(path: Path) -> Recording:
    """Parse a file written by :meth:`Recorder.write`.

    Raises
    ------
    ReplayError
        If the file is not a recording.
    """
    raw = Path(path).read_bytes()
    if raw[:8] != MAGIC:
        raise ReplayError(f"{path} is not an NPU recording")
    end_step, period, n_sig, n_ev = struct.unpack_from("<QQQQ", raw, 8)
    off = 40
    signals = []
    for _ in range(n_sig):
        (n,) = struct.unpack_from("<Q", raw, off)
        signals.append(raw[off + 8: off + 8 + n].decode())
        off += 8 + n + _pad8(n)
    events = []
    for _ in range(n_ev):
        step, op, sig, value, n = _EVENT.unpack_from(raw, off)
        off += _EVENT.size
        events.append((step, op, sig, value, raw[off: off + n]))
        off += n + _pad8(n)
    if off != len(raw):
        raise ReplayError(f"{path}: {len(raw) - off} trailing bytes")
    return Recording(end_step, period, signals, events)


# -- the native harness --------------------------------------------------------------------------

@dataclass(frozen=True)
class NativeBuild:
    """The replay executable.

    Attributes
    ----------
    exe : Path
    seconds : float
        Wall time of this call (compile + link, or ~0 when cached).
    cached : bool
    model_dir : Path
        The cocotb simulator build whose compiled model was linked in.
    """
    exe: Path
    seconds: float
    cached: bool
    model_dir: Path


def _cocotb_verilator_args(model: Path) -> list[str]:
    """The Verilator command line of the cocotb build in ``model`` (from its
    ``Vtop__verFiles.dat``), without what belongs to cocotb: ``--vpi``, the cocotb library in
    ``-LDFLAGS``, cocotb's main ``verilator.cpp``, ``-Mdir`` and ``-o``."""
    lines = [ln for ln in (model / "Vtop__verFiles.dat").read_text().splitlines()
             if ln.startswith('C "')]
    if not lines:
        raise ReplayError(f"no Verilator command line in {model / 'Vtop__verFiles.dat'}")
    toks = lines[0][3:].rstrip('"').split()
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t in ("-Mdir", "-o"):
            i += 2
            continue
        if t == "-LDFLAGS":   # its value (one argument with spaces) was split above
            i += 1
            while i < len(toks) and toks[i].startswith(("-Wl,", "-L", "-l")):
                i += 1
            continue
        if t == "--vpi" or t.endswith("/verilator.cpp"):
            i += 1
            continue
        out.append(t)
        i += 1
    return out


def _build_own_model(model: Path, out_dir: Path, main_cpp: Path) -> Path:
    """``verilator --cc --exe`` + make of ``main_cpp`` and the design into ``out_dir``, with
    the cocotb build's Verilator options (no VPI, no cocotb); returns the executable."""
    from cosim.build import _MAKE_FIXES, verilator_root

    root = verilator_root()
    env = dict(os.environ, VERILATOR_ROOT=str(root),
               PATH=str(root / "bin") + os.pathsep + os.environ.get("PATH", ""))
    args = _cocotb_verilator_args(model)
    cmd = [str(root / "bin" / "verilator"), *args, "-Mdir", str(out_dir), "-o", "npu_replay",
           str(main_cpp)]
    log = out_dir / "build.log"
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        for c in (cmd, ["make", "-C", str(out_dir), "-f", "Vtop.mk", *_MAKE_FIXES]):
            p = subprocess.run(c, stdout=f, stderr=subprocess.STDOUT, env=env)
            if p.returncode != 0:
                raise ReplayError(f"building the native harness failed (log: {log})")
    return out_dir / "npu_replay"


def build_native(config: NPUConfig, *, own_model: bool = False, force: bool = False,
                 design: str | None = None) -> NativeBuild:
    """Build (cached) ``build/<config>/native/npu_replay``: ``cosim/native/main.cpp`` linked
    against the Verilated model of the cocotb build (:func:`cosim.build.build_sim`, built
    first if needed).

    The model is not verilated and compiled a second time: the cocotb build already ran
    ``verilator --cc --exe`` on the same Verilog with the same options, and its object files
    (``Vtop__ALL.a`` and the Verilator runtime ``verilated*.o``, compiled with ``-O2``) are
    the model. Only the main differs: cocotb's VPI main loop there, this replay loop here
    (``main.cpp`` is compiled with the same flags as the model; no tracing, no cocotb
    library). So the two speeds compare the same compiled design.

    ``own_model=True`` instead verilates and compiles the design again with ``main.cpp``
    into ``build/<config>/native-own/`` (the cocotb build's Verilator options minus
    ``--vpi`` and cocotb; a full model compile, minutes): a check that the shared model is
    not slower than a standalone one. ``force=True`` rebuilds even if the cached
    executable is up to date (to time a clean build of the harness). ``design`` (default the
    NPU) selects another design under ``tb_top``, as in :func:`cosim.tb.harness.run_job`.

    Raises
    ------
    cosim.build.CosimBuildError
        If the cocotb build fails.
    ReplayError
        If compiling or linking the harness fails (the message has the compiler output).
    """
    import hashlib

    from cosim.build import DEFAULT_DESIGN, _locked, build_sim, verilator_root

    t0 = time.perf_counter()
    sim = build_sim(config, design=design or DEFAULT_DESIGN)
    model = sim.build_dir
    out_dir = model.parent / ("native-own" if own_model else "native")
    exe = out_dir / "npu_replay"
    main_cpp = NATIVE_DIR / "main.cpp"
    objs = [model / f"{n}.o" for n in ("verilated", "verilated_dpi", "verilated_vpi",
                                       "verilated_timing", "verilated_threads")]
    lib = model / "Vtop__ALL.a"
    with _locked(out_dir / ".lock"):
        h = hashlib.sha256()
        for p in [main_cpp, lib, *objs, model / "build.hash", Path(__file__)]:
            h.update(p.read_bytes())
        digest = h.hexdigest()
        stamp = out_dir / "build.hash"
        if (not force and exe.is_file() and stamp.is_file()
                and stamp.read_text() == digest):
            return NativeBuild(exe, time.perf_counter() - t0, True, model)
        inc = verilator_root() / "include"
        # the model's compile flags, from the cocotb build (Vtop.mk / verilated.mk)
        flags = ["-O2", "-fcoroutines", "-DVERILATOR=1", "-DVM_COVERAGE=0", "-DVM_SC=0",
                 "-DVM_TIMING=1", "-DVM_TRACE=0", "-DVM_TRACE_FST=0", "-DVM_TRACE_VCD=0",
                 "-DVM_TRACE_SAIF=0", f"-I{model}", f"-I{inc}", f"-I{inc / 'vltstd'}"]
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp.unlink(missing_ok=True)
        if own_model:
            _build_own_model(model, out_dir, main_cpp)
            stamp.write_text(digest)
            return NativeBuild(exe, time.perf_counter() - t0, False, out_dir)
        cmd = ["g++", *flags, str(main_cpp), *map(str, objs), str(lib), "-pthread",
               "-o", str(exe)]
        if shutil.which("g++") is None:
            raise ReplayError("building the native harness needs g++ on PATH")
        p = subprocess.run(cmd, capture_output=True, text=True)
        (out_dir / "build.log").write_text(" ".join(cmd) + "\n" + p.stdout + p.stderr)
        if p.returncode != 0:
            raise ReplayError(f"compiling {main_cpp} failed:\n{p.stderr[-3000:]}")
        stamp.write_text(digest)
    return NativeBuild(exe, time.perf_counter() - t0, False, model)


@dataclass(frozen=True)
class NativeResult:
    """Outcome of :func:`run_native`.

    Attributes
    ----------
    cycles : int
        Clock cycles simulated (end time / period), the same count cocotb reports.
    wall_seconds, cpu_seconds : float
        Time of the replay loop only (model construction and reading the file excluded).
    checks, mismatches : int
        Sampled outputs and DRAM dumps compared, and how many differed.
    first_mismatch : str or None
    raw : dict
        Everything the harness printed, plus ``"dram"``: the timing it replayed under.
    """
    cycles: int
    wall_seconds: float
    cpu_seconds: float
    checks: int
    mismatches: int
    first_mismatch: str | None
    raw: dict

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.raw.get("reached_end", False)

    @property
    def cycles_per_second(self) -> float | None:
        return self.cycles / self.wall_seconds if self.wall_seconds else None


def recording_dram(recording: Path) -> DramTiming:
    """The DRAM timing a recording was made under, from its sidecar (``<file>.json``);
    ``ideal`` if there is no sidecar or it names no timing.

    Raises
    ------
    ReplayError
        If the sidecar exists but is not readable JSON.
    """
    side = Path(f"{recording}.json")
    if not side.is_file():
        return DramTiming()
    try:
        meta = json.loads(side.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReplayError(f"{recording}: cannot read the sidecar {side}, which holds the DRAM "
                          f"timing of the recording ({e})") from e
    return DramTiming.from_dict(meta["dram"]) if meta.get("dram") else DramTiming()


def run_native(exe: Path, recording: Path, *, work_dir: Path | None = None,
               timeout: float | None = None,
               dram: DramTiming | str | None = None) -> NativeResult:
    """Replay ``recording`` with the harness ``exe`` (see :func:`build_native`).

    ``work_dir`` holds the DRAM backdoor scratch files (default: beside the recording).
    ``dram``: the DRAM timing to replay under; default the recording's own
    (:func:`recording_dram`). Another timing than the recorded one makes the replay differ.

    Raises
    ------
    ReplayError
        If the harness crashed or printed no result, or the sidecar is unreadable.
    """
    recording = Path(recording).resolve()
    timing = recording_dram(recording) if dram is None else DramTiming.parse(dram)
    work_dir = Path(work_dir) if work_dir is not None else recording.parent
    work_dir.mkdir(parents=True, exist_ok=True)
    dram_file = work_dir / "native_dram.hex"
    p = subprocess.run([str(Path(exe).resolve()), str(recording), f"+npu_dram_file={dram_file}",
                        *timing.to_plusargs()],
                       capture_output=True, text=True, cwd=work_dir, timeout=timeout)
    dram_file.unlink(missing_ok=True)
    Path(f"{dram_file}.out").unlink(missing_ok=True)
    last = p.stdout.strip().splitlines()[-1:] if p.stdout.strip() else []
    try:
        raw = json.loads(last[0]) if last else None
    except json.JSONDecodeError:
        raw = None
    if p.returncode not in (0, 2) or raw is None:
        raise ReplayError(f"native replay of {recording} failed (exit {p.returncode}):\n"
                          f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    raw["dram"] = timing.to_dict()
    return NativeResult(raw["cycles"], raw["sim_wall_seconds"], raw["sim_cpu_seconds"],
                        raw["checks"], raw["mismatches"], raw.get("first_mismatch"), raw)


def main(argv: list[str] | None = None) -> int:
    """``python -m cosim.tb.replay RECORDING [--config JSON] [--own-model]``: build the harness
    (cached) and replay a recording made with ``python -m cosim.tb.harness JOB --record PATH``;
    print the harness's JSON. Exit 0 if the replay matched, 2 if not."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m cosim.tb.replay", description=main.__doc__)
    p.add_argument("recording", type=Path)
    p.add_argument("--config", default=None,
                   help="JSON object of NPUConfig fields (default: the recording's sidecar)")
    p.add_argument("--own-model", action="store_true",
                   help="link against a separately verilated model (a full build, minutes)")
    ns = p.parse_args(argv)
    side = json.loads(Path(f"{ns.recording}.json").read_text())
    fields = json.loads(ns.config) if ns.config is not None else side["config"]
    b = build_native(NPUConfig(**fields), own_model=ns.own_model, design=side.get("design"))
    n = run_native(b.exe, ns.recording)
    print(json.dumps(dict(n.raw, build_seconds=round(b.seconds, 2), build_cached=b.cached,
                          exe=str(b.exe))))
    return 0 if n.ok else 2


if __name__ == "__main__":
    import sys
    sys.exit(main())
