"""Waveform tools for NPU runs: summary (engine busy timelines, commands, stalls, AXI
traffic), counter cross-check, windowing (cut) and the GTKWave save file.

Everything streams (see :mod:`cosim.waves.vcd`): memory depends on the number of signals and of
commands, not on the length of the file.

The tools read only what the hardware declares for them at the NPU instance scope
(``tb_top.u_npu`` under the cosim testbench), never the nets inside its blocks: the named
probes ``probe_<engine>_<field>`` of :data:`hw.top.PROBE_FIELDS`, ``clk``, the AXI DRAM port
``mem__*``, ``csr.cycles`` and the resource stall copies ``stall_<engine>_<reason>``
(:mod:`cosim.waves.signals`). A VCD without the probes (written before they existed) is
refused with a :class:`VcdProbeError` naming them.

Modules:

* :mod:`cosim.waves.vcd`: the streaming VCD reader;
* :mod:`cosim.waves.signals`: where the signals are (:func:`locate_signals`);
* :mod:`cosim.waves.summary`: :func:`summarize` and its :class:`Summary`;
* :mod:`cosim.waves.counters`: counters against the VCD (:func:`check_counters`,
  :func:`check_counter_snapshots`);
* :mod:`cosim.waves.window`: :func:`cut`;
* :mod:`cosim.waves.gtkwave`: :func:`write_gtkw`, :func:`refresh_gtkw`,
  :func:`foreign_gtkw`, :func:`npu_gtkw`;
* :mod:`cosim.waves.trace`: Perfetto trace and plots from command records.
"""

from cosim.waves.counters import (
    CounterCheck,
    check_counter_snapshots,
    check_counters,
    counter_delta,
    counter_values,
    load_counters,
)
from cosim.waves.gtkwave import (
    GTKW_GROUPS,
    GTKW_MARKERS,
    GtkwExistsError,
    foreign_gtkw,
    gtkw_text,
    load_regions,
    npu_gtkw,
    refresh_gtkw,
    write_gtkw,
)
from cosim.waves.signals import (
    EngineProbes,
    NpuSignals,
    VcdProbeError,
    find_npu_scope,
    locate_signals,
)
from cosim.waves.summary import EngineStats, Summary, summarize
from cosim.waves.window import CutResult, cut

__all__ = [
    "find_npu_scope", "NpuSignals", "EngineProbes", "VcdProbeError", "locate_signals",
    "EngineStats", "Summary", "summarize", "CounterCheck", "check_counters", "counter_delta",
    "counter_values", "check_counter_snapshots", "load_counters", "cut", "CutResult",
    "write_gtkw", "gtkw_text", "refresh_gtkw", "foreign_gtkw", "GtkwExistsError", "GTKW_GROUPS",
    "GTKW_MARKERS", "load_regions", "npu_gtkw",
]
