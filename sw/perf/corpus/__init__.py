"""The validation corpus of the performance model: backend-agnostic workloads.

Each workload is a function ``run(device) -> dict`` that drives a :class:`sw.runtime.Device` on
any backend and returns JSON-serialisable results of its own (kernel cycles reported by the
runtime, output digests, bit-exactness). :mod:`cosim.bench.validate` runs them on the RTL and on
:class:`sw.perf.PerfBackend` and compares their counters. Groups:

* ``gemm``: the linear kernel (double-buffered and serialized) on shapes including
  non-multiples of the array and ``M = 1``;
* ``attention``: multi-head attention at ``L`` in {8, 32, 128}, no mask, causal, key padding;
* ``streams``: concurrent streams ordered by events, a three-way fan-in;
* ``sync``: a barrier-heavy stream, processor commands (NOP, WAIT, SIGNAL, BARRIER, FENCE), a
  ring that wraps while full;
* ``commands``: a random serialized command stream, DMA edge cases (4 KiB crossings, zero
  lengths, one-beat rows, accumulator rows), SOFTMAX alone; GELU, ADD and LAYERNORM with a
  DMA load into the scratchpad running beside them;
* ``errors``: failing commands and the runtime's recovery; queue resets at every cycle offset
  into a running stream;
* ``main``: the layer-0 attention block of all-MiniLM-L6-v2 at ``L = 32``
  (:func:`sw.jobs.minilm_block.run_attention_job`);
* ``vm``: translated streams (:mod:`hw.isa.vm`): GEMMs and attention in a context (with 64 KiB
  runs, and page by page), two contexts at once, page faults with resume and skip, unmap and
  ``TLB_INVALIDATE``.
* ``formats``: int4 and MXINT8 linear layers (every combination, edge cases, the int4 GEMV)
  and back-to-back MATMULs in random formats, on 8x8 and 4x4 NPUs with the MX stage.
"""

from sw.perf.corpus import formats, general, vm
from sw.perf.corpus.common import Workload, attention_operands, linear_operands
from sw.perf.corpus.formats import format_golden, format_operands

__all__ = ["Workload", "WORKLOADS", "linear_operands", "attention_operands", "format_operands",
           "format_golden"]

#: Every workload, by name (in the order of the groups above; other configurations after the
#: virtual-memory ones).
WORKLOADS = {w.name: w for w in (*general.workloads(), *vm.workloads(),
                                 *general.other_config_workloads(), *formats.workloads())}
