"""ECP5 PLL (EHXPLLL) divider settings (Lattice FPGA-TN-02200)."""






#: The ULX3S oscillator.
BOARD_CLOCK_HZ = 25_000_000



#: ECP5 PLL operating ranges in Hz: phase-detector input (CLKI / CLKI_DIV) and VCO
#: (Lattice FPGA-TN-02200, "ECP5 and ECP5-5G sysCLOCK PLL/DLL Design and Usage Guide",
#: and the same limits in Project Trellis' ``ecppll``).
PLL_PFD_HZ = (3.125e6, 400e6)
PLL_VCO_HZ = (400e6, 800e6)


def ecp5_pll(f_in_hz: float, f_out_hz: float) -> dict:
    """Divider settings of an ECP5 ``EHXPLLL`` with feedback from ``CLKOP``.

    With ``FEEDBK_PATH="CLKOP"`` the output is ``f_in * CLKFB_DIV / CLKI_DIV`` and the VCO runs
    at ``f_out * CLKOP_DIV`` (TN-02200); ``CLKOP_CPHASE = (CLKOP_DIV - 1) // 2`` as
    Project Trellis' ``ecppll`` writes it. Among the settings whose phase-detector and VCO
    frequencies are in range (:data:`PLL_PFD_HZ`, :data:`PLL_VCO_HZ`) the one closest to
    ``f_out_hz`` is returned (the first found on a tie), with ``CLKOP_DIV`` putting the VCO
    nearest the middle of its range.

    Parameters
    ----------
    f_in_hz, f_out_hz : float
        Input and wanted output frequency, Hz.

    Returns
    -------
    dict
        ``CLKI_DIV``, ``CLKFB_DIV``, ``CLKOP_DIV``, ``CLKOP_CPHASE`` and ``f_out_hz`` (the
        frequency achieved) and ``f_vco_hz``.

    Raises
    ------
    ValueError
        If no setting is within 1% of ``f_out_hz``.
    """
    best = None
    for clki in range(1, 129):
        if not PLL_PFD_HZ[0] <= f_in_hz / clki <= PLL_PFD_HZ[1]:
            continue
        for clkfb in range(1, 81):
            out = f_in_hz * clkfb / clki
            clkop = min((d for d in range(1, 129)
                         if PLL_VCO_HZ[0] <= out * d <= PLL_VCO_HZ[1]),
                        key=lambda d: abs(out * d - sum(PLL_VCO_HZ) / 2), default=None)
            if clkop is not None and (best is None or abs(out - f_out_hz) < best[0]):
                best = (abs(out - f_out_hz), clki, clkfb, clkop, out)
    if best is None or best[0] > 0.01 * f_out_hz:
        nearest = f" (nearest: {best[4] / 1e6:.4g} MHz)" if best else ""
        raise ValueError(f"no ECP5 PLL setting gives {f_out_hz / 1e6:g} MHz from "
                         f"{f_in_hz / 1e6:g} MHz within 1%{nearest}")
    _, clki, clkfb, clkop, out = best
    return {"CLKI_DIV": clki, "CLKFB_DIV": clkfb, "CLKOP_DIV": clkop,
            "CLKOP_CPHASE": (clkop - 1) // 2, "f_out_hz": out, "f_vco_hz": out * clkop}
