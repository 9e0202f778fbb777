"""Board build: the ULX3S 85F wrapper (:mod:`hw.board`) through Yosys, nextpnr and ecppack."""

import json
import os
import time
from pathlib import Path

from cosim.fpga.pnr import parse_nextpnr_log, parse_nextpnr_report
from cosim.fpga.tools import FpgaToolError, ToolMissingError, find_tool
from hw.board import BOARD_CLOCK_HZ, DEFAULT_CLOCK_HZ, NPUBoard, ecp5_pll
from hw.config import NPUConfig

__all__ = ["build_board"]


def build_board(config: NPUConfig, *, out_dir: Path | str = "build/board",
                bitstream: bool = True, clock_hz: int = DEFAULT_CLOCK_HZ) -> dict:
    """Build :class:`NPUBoard` for the ULX3S 85F with amaranth-boards' Trellis flow.

    Runs Yosys (``synth_ecp5``), nextpnr-ecp5 (``--router router2``; the clock constraint is
    the board's 25 MHz oscillator, which nextpnr carries through the PLL to ``clock_hz``) and,
    with ``bitstream``, ecppack, all from the ``yowasp-*`` wheels. nextpnr fails the build
    when the routed design does not meet ``clock_hz``.

    Parameters
    ----------
    config : NPUConfig
    out_dir : Path or str
        Build folder (``top.v``, ``top.lpf``, ``top.json``, ``top.tim``, ``top.bit``).
    bitstream : bool
        Also pack the bitstream (``top.bit``); otherwise stop after place and route.
    clock_hz : int
        NPU clock from the PLL: the nearest frequency it makes (:func:`ecp5_pll`, which raises
        ``ValueError`` if none is within 1%).

    Returns
    -------
    dict
        ``config``, ``clock_mhz`` (achieved by the PLL), ``fmax_mhz`` (routed),
        ``utilization``, ``critical_path`` (:func:`cosim.fpga.parse_nextpnr_report`),
        ``seconds``, ``bitstream`` (path or None), ``log`` (nextpnr's log).

    Raises
    ------
    ToolMissingError
        If a yowasp tool or amaranth-boards is missing.
    FpgaToolError
        If the build fails (the message names the log).
    """
    try:
        from amaranth_boards.ulx3s import ULX3S_85F_Platform
    except ImportError as e:
        raise ToolMissingError("amaranth-boards is not installed "
                               "(pip install amaranth-boards==0.0.21)") from e
    env = {"YOSYS": find_tool("yosys"), "NEXTPNR_ECP5": find_tool("nextpnr-ecp5"),
           "ECPPACK": find_tool("ecppack")}
    out_dir = Path(out_dir)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    t0 = time.perf_counter()
    try:
        platform = ULX3S_85F_Platform()
        pll = ecp5_pll(BOARD_CLOCK_HZ, clock_hz)
        board = NPUBoard(config, clock_hz=round(pll["f_out_hz"]))
        plan = platform.build(board, name="top", build_dir=str(out_dir), do_build=False,
                              nextpnr_opts="--router router2 --report top.report.json")
        if not bitstream:
            # drop the ecppack step from the generated script
            script = "build_top.sh"
            text = plan.files[script]
            plan.files[script] = "\n".join(line for line in text.splitlines()
                                           if "ECPPACK" not in line) + "\n"
        try:
            plan.execute_local(str(out_dir))
        except Exception as e:
            raise FpgaToolError(f"board build failed: {type(e).__name__}: {e}",
                                out_dir / "top.tim") from e
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.perf_counter() - t0
    tim = out_dir / "top.tim"
    parsed = parse_nextpnr_log(tim.read_text(errors="replace")) if tim.is_file() else {}
    report = out_dir / "top.report.json"
    critical = (parse_nextpnr_report(json.loads(report.read_text()))["critical_path"]
                if report.is_file() else {})
    bit = out_dir / "top.bit"
    result = {
        "config": config.name,
        "board": "ULX3S 85F (LFE5U-85F-6BG381C)",
        "clock_mhz": board.clock_hz / 1e6,
        "fmax_mhz": parsed.get("fmax_mhz"),
        "utilization": {k: list(v) for k, v in parsed.get("utilization", {}).items()},
        "critical_path": critical,
        "seconds": round(seconds, 1),
        "bitstream": str(bit) if bitstream and bit.is_file() else None,
        "log": str(tim),
    }
    (out_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
