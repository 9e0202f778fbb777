"""The contract between the NPU's hardware and its software, defined once:

* :mod:`hw.isa.commands`: command layouts (:class:`Command` and its bodies), opcodes, error
  codes, :func:`encode` / :func:`decode`;
* :mod:`hw.isa.registers`: the CSR map and the layout of every packed register and trace entry;
* :mod:`hw.isa.counters`: performance counter names, definitions and registers;
* :mod:`hw.isa.numerics`: numerics constants of the vector unit;
* :mod:`hw.isa.timing`: engine timing, in cycles, as functions of a command and the
  :class:`~hw.config.NPUConfig` (the DMA's in :mod:`hw.isa.dma_timing`).

Everything is re-exported here: ``from hw.isa import Opcode, Csr, COUNTER_NAMES``.
"""

from hw.isa.commands import *  # noqa: F403
from hw.isa.commands import __all__ as _commands
from hw.isa.counters import *  # noqa: F403
from hw.isa.counters import __all__ as _counters
from hw.isa.numerics import *  # noqa: F403
from hw.isa.numerics import __all__ as _numerics
from hw.isa.registers import *  # noqa: F403
from hw.isa.registers import __all__ as _registers
from hw.isa.timing import *  # noqa: F403
from hw.isa.timing import __all__ as _timing

__all__ = [*_commands, *_registers, *_counters, *_numerics, *_timing]
