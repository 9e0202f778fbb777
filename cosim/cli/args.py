"""Argument types and checks shared by the ``npu`` subcommands (:mod:`cosim.cli`): the
configuration, DRAM timing, counts and sizes, sequence lengths, ``--json`` paths, and help
text made from module docstrings."""

import argparse
import os
import re
import tempfile
from pathlib import Path

from hw.config import ConfigParseError, NPUConfig
from sw.dram import PRESETS, DramTiming, DramTimingError

__all__ = ["CONFIG_HELP", "parse_config", "parse_dram", "DRAM_HELP", "int_at_least", "seq_len",
           "attention_len", "gemm_shape", "help_text", "check_dram_arg", "check_json_arg",
           "check_out_dir", "check_image_suffix", "output_path", "output_folder", "dram_line",
           "WAVEFORM_SUFFIXES"]


#: How ``--config`` is written, for help texts.
CONFIG_HELP = "ROWSxCOLS[,key=value...]"


def parse_config(text: str) -> NPUConfig:
    """The ``--config`` type: :meth:`hw.config.NPUConfig.parse` of ``ROWSxCOLS[,key=value...]``,
    e.g. ``8x8`` or ``4x4,spad_rows=1024``.

    Raises
    ------
    argparse.ArgumentTypeError
        On a malformed string or a value :class:`NPUConfig` rejects (the message of
        :class:`hw.config.ConfigParseError`, which says which).
    """
    try:
        return NPUConfig.parse(text)
    except ConfigParseError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def parse_dram(text: str) -> DramTiming:
    """``--dram``: a preset and/or key=value pairs (:meth:`sw.dram.DramTiming.parse`)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty DRAM timing: give a preset (e.g. ideal) or "
                                         "key=value pairs")
    try:
        return DramTiming.parse(text)
    except DramTimingError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


DRAM_HELP = (f"DRAM timing (rtl and perf): a preset ({' '.join(PRESETS)}) "
             "and/or key=value pairs: latency, wlatency (cycles), bw (bytes/cycle; none: no "
             "limit), stall, "
             "ar_stall, r_stall, aw_stall, w_stall, b_stall (probability), seed; e.g. "
             "latency=100,bw=4,stall=0.3,seed=1 (see sw/dram.py; default ideal)")


def seq_len(text: str) -> int:
    """``--seq-len``: 1..512 tokens (MiniLM has 512 position embeddings:
    :data:`sw.models.attention_block.MAX_POSITIONS`)."""
    from sw.models.attention_block import MAX_POSITIONS
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= value <= MAX_POSITIONS:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_POSITIONS} (MiniLM's positions), "
                                         f"got {value}")
    return value


def int_at_least(lo: int, hi: int | None = None, why: str = ""):
    """An argparse ``type``: an integer ``>= lo``, and ``<= hi`` if given (``why``: the
    reason for ``hi``, said when a value is above it) (one home for every count, size and
    seed argument of the CLI)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {value}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {value}"
                                             + (f" ({why})" if why else ""))
        return value
    return parse


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number ``> 0`` (durations, frequencies)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


#: Suffixes of waveform files (the formats ``npu waves`` reads): no output but ``npu waves
#: cut``'s (a VCD) has one.
WAVEFORM_SUFFIXES = (".vcd", ".fst")


def dram_line(dram: DramTiming, backend: str) -> str:
    """The ``DRAM timing: ...`` line of a run's report: the timing's description, or that the
    functional model (``backend == "model"``) has none (it printed ``ideal: read latency 3
    cycles ...`` while refusing ``--dram``)."""
    return "DRAM timing: " + ("none: the functional model is untimed" if backend == "model"
                              else dram.describe())


def output_path(text: str) -> str:
    """An argparse ``type`` for an output file or folder (``--out``, ``--json``, ...): the
    path as given.

    Raises
    ------
    argparse.ArgumentTypeError
        On an empty path (``--out ''`` wrote into the current folder, ``--json ''`` was
        ignored).
    """
    if not text:
        raise argparse.ArgumentTypeError("the path is empty; give a name")
    return text


def output_folder(text: str) -> Path:
    """:func:`output_path` as a :class:`~pathlib.Path` (``npu sweep --out``, ``--cache``)."""
    return Path(output_path(text))


def attention_len(text: str) -> int:
    """``--attention-len``: 0 (skip) or a sequence length of :func:`seq_len`."""
    if text.strip() == "0":
        return 0
    try:
        return seq_len(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e} (or 0: no attention block)") from None


def gemm_shape(text: str) -> list[int]:
    """``M,K,N`` (positive integers) for ``npu bench --shapes``."""
    try:
        shape = [int(x) for x in text.split(",")]
    except ValueError:
        shape = []
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected M,K,N (positive integers), not {text!r}")
    return shape


def help_text(doc: str) -> str:
    """A module docstring as ``--help`` text: reStructuredText markup (````literal````,
    ``:role:`target``` and a ``::`` block marker) left out, the words kept."""
    doc = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc).replace("``", "")
    doc = re.sub(r"^[ \t]*::\n\n?", "", doc, flags=re.MULTILINE)
    return re.sub(r"::$", ":", doc, flags=re.MULTILINE)


def check_dram_arg(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--dram`` other than ideal needs a timed backend (the functional model is untimed)."""
    if args.backend == "model" and not args.dram.is_ideal:
        parser.error("--dram needs --backend rtl or perf (the functional model is untimed)")


#: output-file flags whose file is an image: matplotlib writes the format of the suffix
_IMAGE_FLAGS = ("trace_png", "roofline")


def check_json_arg(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject a ``--json`` (``--trace``, ``--trace-png``, ``--roofline``) path that cannot be
    written before the work starts: a folder, a name with a waveform's suffix
    (:data:`WAVEFORM_SUFFIXES`: ``--trace x.vcd`` wrote JSON there), a file whose folder
    cannot be made or written (missing folders are made here), or an image whose suffix
    matplotlib cannot write. Every path is checked before any folder is made, and commands
    call this check last, so a refused command makes nothing."""
    given = [("--" + flag.replace("_", "-"), flag, getattr(args, flag))
             for flag in ("json", "trace", *_IMAGE_FLAGS) if getattr(args, flag, None)]
    for name, flag, path in given:
        target = Path(path)
        if target.is_dir():
            parser.error(f"{name} {path}: is a folder, give a file name")
        if target.suffix.lower() in WAVEFORM_SUFFIXES:
            parser.error(f"{name} {path}: {target.suffix} is a waveform's suffix and this "
                         "writes no waveform; give another file name")
        if flag in _IMAGE_FLAGS:
            check_image_suffix(parser, name, path)
        existing = target.parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            parser.error(f"{name} {path}: {existing} is not a folder")
    for name, _, path in given:
        target = Path(path)
        # its folder is made now (as the file would be written later), so that a path that
        # cannot be written fails here and not after the run
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            parser.error(f"{name} {path}: cannot make its folder ({e.strerror})")
        # open it for appending (nothing it holds is lost) to learn now that it can be written
        existed = target.exists()
        try:
            with open(target, "a"):
                pass
        except OSError as e:
            parser.error(f"{name} {path}: cannot be written ({e.strerror})")
        if not existed:
            target.unlink()


def check_image_suffix(parser: argparse.ArgumentParser, flag: str, path: str) -> None:
    """Reject an image path (``flag``: its option) whose suffix matplotlib cannot write (the
    format is the suffix), before anything is written."""
    from matplotlib.backend_bases import FigureCanvasBase
    formats = FigureCanvasBase.get_supported_filetypes()
    if Path(path).suffix[1:].lower() not in formats:
        parser.error(f"{flag} {path}: the image format is the file's suffix, one of "
                     f"{', '.join(sorted(formats))}")


def check_out_dir(parser: argparse.ArgumentParser, flag: str, path: Path) -> None:
    """Reject an output folder (``--out``) that could not be made or written, before the work
    and without making anything: the folder, or the nearest part of its path that exists,
    must be a folder in which a folder can be made (tried: one is made and removed; a
    permission check alone passes everything for root, even ``/proc``)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        parser.error(f"{flag} {path}: {existing} is not a folder")
    try:
        probe = tempfile.mkdtemp(prefix=".npu-out-check-", dir=existing)
    except OSError as e:
        parser.error(f"{flag} {path}: {existing} cannot be written ({e.strerror})")
    os.rmdir(probe)
