"""Configuration discovery: the :class:`hw.config.NPUConfig` a device reports through its
``ID``, ``VERSION`` and ``CFG_*`` CSRs (:class:`hw.isa.Csr`)."""

from __future__ import annotations

from dataclasses import fields

from hw.config import NPUConfig
from hw.isa import (
    CSR_ID_VALUE,
    CSR_VERSION_VALUE,
    CfgArray,
    CfgBus,
    CfgFeatures,
    CfgVm,
    Csr,
    VersionWord,
    unpack_fields,
)
from sw.backend import Backend
from sw.runtime.errors import ConfigMismatchError

__all__ = ["discover_config"]

#: the fields the CSRs report (the others come from the expected configuration)
_REPORTED_FIELDS = ("rows", "cols", "n_queues", "n_sems", "spad_rows", "acc_rows",
                    "axi_data_bits", "dma_outstanding", "dram_bytes", "tlb_entries", "mx")


def discover_config(backend: Backend, expected: NPUConfig | None) -> NPUConfig:
    """The configuration the device's ``ID``, ``VERSION`` and ``CFG_*`` CSRs report, the
    fields they do not report taken from ``expected`` (else the defaults); see
    :class:`~sw.runtime.Device`.

    Raises
    ------
    ConfigMismatchError
        Not an NPU, an incompatible version, an invalid configuration, or a reported field
        that differs from ``expected``.
    """
    rd = backend.csr_read
    ident = rd(Csr.ID)
    if ident != CSR_ID_VALUE:
        raise ConfigMismatchError(f"not an NPU: ID CSR reads {ident:#010x}, "
                                  f"expected {CSR_ID_VALUE:#010x}")
    version = rd(Csr.VERSION)
    if (unpack_fields(VersionWord, version).major
            != unpack_fields(VersionWord, CSR_VERSION_VALUE).major):
        raise ConfigMismatchError(f"device version {version:#010x} is not compatible with "
                                  f"the runtime's {CSR_VERSION_VALUE:#010x}")
    arr = unpack_fields(CfgArray, rd(Csr.CFG_ARRAY))
    bus = unpack_fields(CfgBus, rd(Csr.CFG_BUS))
    reported = {
        "rows": arr.rows, "cols": arr.cols, "n_queues": arr.n_queues,
        "n_sems": arr.n_sems or 256,  # the low 8 bits: 0 means 256
        "spad_rows": rd(Csr.CFG_SPAD), "acc_rows": rd(Csr.CFG_ACC),
        "axi_data_bits": 8 * bus.axi_data_bytes, "dma_outstanding": bus.dma_outstanding,
        "dram_bytes": rd(Csr.CFG_DRAM),
        "tlb_entries": unpack_fields(CfgVm, rd(Csr.CFG_VM)).tlb_entries,
        "mx": unpack_fields(CfgFeatures, rd(Csr.CFG_FEATURES)).mx,
    }
    base = expected if expected is not None else NPUConfig()
    rest = {f.name: getattr(base, f.name) for f in fields(NPUConfig)
            if f.name not in reported}
    try:
        config = NPUConfig(**reported, **rest)
    except ValueError as e:
        raise ConfigMismatchError(f"the device reports an invalid configuration: {e}") from e
    derived = {"spad_row_bytes": bus.spad_row_bytes, "acc_row_elems": bus.acc_row_elems}
    for name, value in derived.items():
        if getattr(config, name) != value:
            raise ConfigMismatchError(f"CFG_BUS reports {name}={value} but the "
                                      f"configuration implies {getattr(config, name)}")
    if expected is not None:
        diffs = [f"{n}: device {getattr(config, n)}, expected {getattr(expected, n)}"
                 for n in _REPORTED_FIELDS if getattr(config, n) != getattr(expected, n)]
        if diffs:
            raise ConfigMismatchError("device configuration differs: " + "; ".join(diffs))
    return config
