"""The rules of the testbench's AXI protocol checkers (``cosim/tb/axi_checker.sv``), by number.

The checkers watch the NPU's AXI4 master port (``mem``) and its AXI4-Lite CSR port (``csr``)
in every full-NPU run and count violations; ``tb_top`` shows the count (``chk_errors``), the
first violation's rule (``chk_rule``: the number below, plus :data:`CSR_PORT_OFFSET` when it
was on the CSR port) and its cycle (``chk_cycle``, rising edges since time 0). A run with a
violation fails (:mod:`cosim.tb.cocotb_entry`). The numbers and names here are the table of
``axi_checker.sv``'s header and its ``npu_axi_rule_name``; ``tests/cosim/test_axi_checker.py``
checks that they agree and that each rule fires when broken.

References: ARM IHI 0022 (AMBA AXI and ACE Protocol Specification, issue H) A3.2.1
(handshakes), A3.3 (channel dependencies), A3.4.1 (bursts), B1 (AXI4-Lite).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AXI_RULES", "AXI_LITE_RULES", "CSR_PORT_OFFSET", "AxiViolation", "rule_name"]

#: Rule number -> (name, what it means).
AXI_RULES: dict[int, tuple[str, str]] = {
    1: ("AR_DROP", "ARVALID fell before ARREADY"),
    2: ("AR_CHANGE", "AR payload changed while waiting for ARREADY"),
    3: ("AW_DROP", "AWVALID fell before AWREADY"),
    4: ("AW_CHANGE", "AW payload changed while waiting for AWREADY"),
    5: ("W_DROP", "WVALID fell before WREADY"),
    6: ("W_CHANGE", "W payload changed while waiting for WREADY"),
    7: ("R_DROP", "RVALID fell before RREADY"),
    8: ("R_CHANGE", "R payload changed while waiting for RREADY"),
    9: ("B_DROP", "BVALID fell before BREADY"),
    10: ("B_CHANGE", "B payload changed while waiting for BREADY"),
    11: ("AR_4K", "INCR read burst crosses a 4 KiB boundary"),
    12: ("AW_4K", "INCR write burst crosses a 4 KiB boundary"),
    13: ("AR_BURST", "ARBURST reserved, bad WRAP length or alignment, or ARSIZE above the bus"),
    14: ("AW_BURST", "AWBURST reserved, bad WRAP length or alignment, or AWSIZE above the bus"),
    15: ("W_LAST", "WLAST not on beat AWLEN + 1 of its burst"),
    16: ("R_LAST", "RLAST not on beat ARLEN + 1 of its burst"),
    17: ("R_UNEXPECTED", "RVALID with no read outstanding for its ID"),
    18: ("B_UNEXPECTED", "BVALID with no complete write (AW and last W) outstanding for its ID"),
    19: ("RESET_VALID", "a VALID high while reset is asserted"),
}

#: The rules the AXI4-Lite checker applies (single beats, no ID, no bursts).
AXI_LITE_RULES: tuple[int, ...] = (*range(1, 11), 17, 18, 19)

#: Added to the rule number in ``chk_rule`` when the first violation was on the CSR port.
CSR_PORT_OFFSET = 64


def rule_name(rule: int) -> str:
    """The name of rule ``rule`` (1..19), e.g. ``"W_LAST"``.

    Raises
    ------
    KeyError
        If there is no such rule.
    """
    return AXI_RULES[rule][0]


@dataclass(frozen=True)
class AxiViolation:
    """What the checkers of one run saw (from ``tb_top``'s ``chk_*`` outputs).

    Attributes
    ----------
    count : int
        Violations on both ports (a cycle that breaks two rules counts two).
    port : str
        ``"mem"`` (AXI4 master) or ``"csr"`` (AXI4-Lite) for the first one.
    rule : int
        Its rule number (:data:`AXI_RULES`).
    cycle : int
        The rising edge (counted from time 0, reset included) at which it was seen.
    """
    count: int
    port: str
    rule: int
    cycle: int

    @classmethod
    def from_pins(cls, count: int, code: int, cycle: int) -> AxiViolation:
        """Decode ``chk_errors``, ``chk_rule`` and ``chk_cycle``."""
        port = "csr" if code >= CSR_PORT_OFFSET else "mem"
        return cls(count, port, code % CSR_PORT_OFFSET, cycle)

    def __str__(self) -> str:
        name, meaning = AXI_RULES.get(self.rule, ("?", "unknown rule"))
        return (f"{self.count} AXI protocol violations seen by the protocol checker; the first "
                f"at cycle {self.cycle} on the {self.port} port: rule {self.rule} {name} "
                f"({meaning})")
