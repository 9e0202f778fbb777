"""Scenarios of the AXI protocol checkers' test design (``axi_checker_tb.sv``).

Each scenario is a list of cycles; each cycle sets some inputs of one port (prefix ``m_``:
AXI4, ``l_``: AXI4-Lite; ``rst`` is shared) before a rising edge, the others keep their
value. :data:`SCENARIOS` maps a name to ``(port, cycles, rule)``: the rule (numbers of
:mod:`cosim.tb.axi_rules`) the checker must report first, 0 for legal traffic.
"""

from __future__ import annotations

# -- AXI4 (prefix m_) -----------------------------------------------------------------------

_AR = {"arvalid": 1, "araddr": 0x100, "arlen": 0, "arsize": 3, "arburst": 1, "arid": 0}
_AW = {"awvalid": 1, "awaddr": 0x200, "awlen": 0, "awsize": 3, "awburst": 1, "awid": 0}
_W = {"wvalid": 1, "wdata": 0x1234, "wstrb": 0xFF, "wlast": 1}
IDLE = {"arvalid": 0, "awvalid": 0, "wvalid": 0, "rvalid": 0, "bvalid": 0}  #: after a scenario


def _ar(**kw) -> dict:
    return {**_AR, "arready": 1, **kw}


def _aw(**kw) -> dict:
    return {**_AW, "awready": 1, **kw}


def _w(**kw) -> dict:
    return {**_W, "wready": 1, **kw}


def _r(**kw) -> dict:
    return {"rvalid": 1, "rready": 1, "rid": 0, "rresp": 0, "rlast": 1, "rdata": 7, **kw}


def _b(**kw) -> dict:
    return {"bvalid": 1, "bready": 1, "bid": 0, "bresp": 0, **kw}


def _off(*names: str) -> dict:
    return dict.fromkeys(names, 0)


#: name -> (port, cycles, rule expected first; 0 = legal traffic, no violation)
SCENARIOS: dict[str, tuple[str, list[dict], int]] = {
    "legal_bursts": ("m", [
        # a read of 3 beats with a stall, W before its AW, two IDs, B after both
        _ar(arlen=2), {**_off("arvalid"), **_r(rlast=0)}, {"rready": 0}, {"rready": 1},
        _r(rlast=1), {**_off("rvalid"), **_w(wlast=0)}, _w(wlast=1), {**_off("wvalid"),
                                                                      **_aw(awlen=1)},
        {**_off("awvalid"), **_b(bready=0)}, {"bready": 1}, _off("bvalid"),
        _ar(arid=1, arlen=0), {**_ar(arid=2, araddr=0xFF8), "arready": 0},
        {"arready": 1}, {**_off("arvalid"), **_r(rid=1)}, _r(rid=2), _off("rvalid"),
        # AW and W in the same cycle, B the next
        {**_aw(awid=3), **_w()}, {**_off("awvalid", "wvalid"), **_b(bid=3)}, _off("bvalid"),
    ], 0),
    "ar_drop": ("m", [{**_AR, "arready": 0}, {"arvalid": 0}], 1),
    "ar_change": ("m", [{**_AR, "arready": 0}, {"araddr": 0x140}], 2),
    "aw_drop": ("m", [{**_AW, "awready": 0}, {"awvalid": 0}], 3),
    "aw_change": ("m", [{**_AW, "awready": 0}, {"awlen": 3}], 4),
    "w_drop": ("m", [{**_W, "wready": 0, "wlast": 0}, {"wvalid": 0}], 5),
    "w_change": ("m", [{**_W, "wready": 0}, {"wdata": 0x4321}], 6),
    "r_drop": ("m", [_ar(), {**_off("arvalid"), **_r(rready=0)}, {"rvalid": 0}], 7),
    "r_change": ("m", [_ar(), {**_off("arvalid"), **_r(rready=0)}, {"rdata": 8}], 8),
    "b_drop": ("m", [{**_aw(), **_w()}, {**_off("awvalid", "wvalid"), **_b(bready=0)},
                     {"bvalid": 0}], 9),
    "b_change": ("m", [{**_aw(), **_w()}, {**_off("awvalid", "wvalid"), **_b(bready=0)},
                       {"bresp": 2}], 10),
    "ar_4k": ("m", [_ar(araddr=0xFF8, arlen=1)], 11),
    "aw_4k": ("m", [_aw(awaddr=0x1FF0, awlen=2)], 12),
    "ar_burst": ("m", [_ar(arburst=3)], 13),
    "aw_burst": ("m", [_aw(awsize=4)], 14),
    "w_last_early": ("m", [_aw(awlen=1), {**_off("awvalid"), **_w(wlast=1)}], 15),
    "w_last_late": ("m", [_aw(awlen=0), {**_off("awvalid"), **_w(wlast=0)}], 15),
    "r_last_early": ("m", [_ar(arlen=1), {**_off("arvalid"), **_r(rlast=1)}], 16),
    "r_unexpected": ("m", [_r()], 17),
    "r_same_cycle_as_ar": ("m", [{**_ar(), **_r()}], 17),
    "r_wrong_id": ("m", [_ar(arid=1), {**_off("arvalid"), **_r(rid=2)}], 17),
    "b_unexpected": ("m", [_b()], 18),
    "b_before_w": ("m", [_aw(), {**_off("awvalid"), **_b()}], 18),
    "reset_valid": ("m", [{"rst": 1, "arvalid": 1}, {"rst": 1, "arvalid": 0}], 19),
}

# -- AXI4-Lite (prefix l_) ------------------------------------------------------------------

_LAR = {"arvalid": 1, "araddr": 0x10}
_LAW = {"awvalid": 1, "awaddr": 0x20}
_LW = {"wvalid": 1, "wdata": 5, "wstrb": 0xF}
SCENARIOS.update({
    "lite_legal": ("l", [
        {**_LAR, "arready": 0}, {"arready": 1}, {"arvalid": 0, "rvalid": 1, "rready": 0,
                                                 "rdata": 3},
        {"rready": 1}, {"rvalid": 0, **_LAW, **_LW, "awready": 1, "wready": 1},
        {"awvalid": 0, "wvalid": 0, "bvalid": 1, "bready": 1}, {"bvalid": 0},
    ], 0),
    "lite_ar_drop": ("l", [{**_LAR, "arready": 0}, {"arvalid": 0}], 1),
    "lite_ar_change": ("l", [{**_LAR, "arready": 0}, {"araddr": 0x14}], 2),
    "lite_aw_drop": ("l", [{**_LAW, "awready": 0}, {"awvalid": 0}], 3),
    "lite_aw_change": ("l", [{**_LAW, "awready": 0}, {"awaddr": 0x24}], 4),
    "lite_w_drop": ("l", [{**_LW, "wready": 0}, {"wvalid": 0}], 5),
    "lite_w_change": ("l", [{**_LW, "wready": 0}, {"wstrb": 0x1}], 6),
    "lite_r_drop": ("l", [{**_LAR, "arready": 1}, {"arvalid": 0, "rvalid": 1, "rready": 0},
                          {"rvalid": 0}], 7),
    "lite_r_change": ("l", [{**_LAR, "arready": 1}, {"arvalid": 0, "rvalid": 1,
                                                     "rready": 0}, {"rresp": 2}], 8),
    "lite_b_drop": ("l", [{**_LAW, **_LW, "awready": 1, "wready": 1},
                          {"awvalid": 0, "wvalid": 0, "bvalid": 1, "bready": 0},
                          {"bvalid": 0}], 9),
    "lite_b_change": ("l", [{**_LAW, **_LW, "awready": 1, "wready": 1},
                            {"awvalid": 0, "wvalid": 0, "bvalid": 1, "bready": 0},
                            {"bresp": 2}], 10),
    "lite_r_unexpected": ("l", [{"rvalid": 1, "rready": 1}], 17),
    "lite_b_without_w": ("l", [{**_LAW, "awready": 1}, {"awvalid": 0, "bvalid": 1,
                                                         "bready": 1}], 18),
    "lite_reset_valid": ("l", [{"rst": 1, "awvalid": 1}, {"rst": 1, "awvalid": 0}], 19),
})
