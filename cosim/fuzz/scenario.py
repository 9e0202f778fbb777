"""A fuzz scenario: the command streams of several queues and how the host sets them up
(:class:`Scenario`), as a JSON-serialisable record that a reproducer file holds.

Every command is kept as its :func:`hw.isa.encode` field dict (so that a shrunk reproducer
stays readable) with the queue it runs on; ``expect`` is the error code the generator meant
it to fail with (``0``: none). The commands of one queue run in list order; the list's
global order is the generation order (every semaphore wait refers to signals earlier in it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hw.config import NPUConfig
from hw.isa import encode

__all__ = ["Scenario", "FuzzCommand", "QueueSetup", "FORMAT"]

FORMAT = "npu-fuzz-scenario/1"


@dataclass
class FuzzCommand:
    """One command: ``queue``, its fields (:func:`hw.isa.encode`), what it is meant to do."""
    queue: int
    fields: dict
    kind: str               #: opcode name, e.g. ``"DMA_LOAD"``
    expect: int = 0         #: ErrorCode value it must fail with, 0 = succeeds
    timestamp_addr: int | None = None   #: a FENCE with ``timestamp``: the word it writes

    def __post_init__(self) -> None:
        self.fields = _plain(self.fields)

    def raw(self) -> bytes:
        return encode(self.fields)

    @property
    def opcode(self) -> int:
        return self.fields["header"]["opcode"]


def _plain(fields):
    """Field values as plain ints (enum members by value), nested dicts kept."""
    if isinstance(fields, dict):
        return {k: _plain(v) for k, v in fields.items()}
    return int(getattr(fields, "value", fields))


@dataclass
class QueueSetup:
    """Ring and window of one hardware queue (``window_limit == 0``: no window)."""
    queue: int
    ring_base: int
    ring_size: int
    window_base: int = 0
    window_limit: int = 0


@dataclass
class Scenario:
    """Everything one fuzz stream needs, on any backend.

    Attributes
    ----------
    config : dict
        :meth:`NPUConfig.to_dict` of the configuration it was generated for.
    seed : int
        Seed of the DRAM and local-memory contents (and of the generator that made it).
    queues : list of QueueSetup
    commands : list of FuzzCommand
    sem_init : dict
        Semaphore id (as a string key in JSON) -> value the host writes before the doorbells.
    irq_enable : int
        ``IRQ_ENABLE`` during the stream.
    fault : dict or None
        :class:`sw.model.faults.BusFault` fields, set before the doorbells.
    vm : dict or None
        Translated mode (:mod:`cosim.fuzz.generate`): ``queues`` (queue as a string ->
        ``word`` (``Q_VM``), ``delta``, ``ring`` (the virtual ``RING_BASE``)), ``tables``
        (``[physical address, 32-bit word]`` of the page tables, written before the
        doorbells) and ``faults`` (queue -> the planted page fault: ``kind``, ``code``,
        ``opcode``, ``index``, ``addr`` (virtual), ``action`` (``resume`` / ``skip``) and
        ``fix`` (the ``[address, word]`` the host writes before resuming, or None)).
    note : str
        What the scenario is (a reproducer says what it found).
    """
    config: dict
    seed: int
    queues: list[QueueSetup]
    commands: list[FuzzCommand]
    sem_init: dict = field(default_factory=dict)
    irq_enable: int = 0
    fault: dict | None = None
    note: str = ""
    vm: dict | None = None

    @property
    def npu_config(self) -> NPUConfig:
        return NPUConfig(**self.config)

    def queue_commands(self, q: int) -> list[FuzzCommand]:
        return [c for c in self.commands if c.queue == q]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["format"] = FORMAT
        d["sem_init"] = {str(k): v for k, v in self.sem_init.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Scenario:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ValueError
            If ``d`` is not a scenario of this format.
        """
        if d.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} record (format {d.get('format')!r})")
        return cls(config=d["config"], seed=d["seed"],
                   queues=[QueueSetup(**q) for q in d["queues"]],
                   commands=[FuzzCommand(**c) for c in d["commands"]],
                   sem_init={int(k): v for k, v in d["sem_init"].items()},
                   irq_enable=d["irq_enable"], fault=d["fault"], note=d.get("note", ""),
                   vm=d.get("vm"))

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Scenario:
        return cls.from_dict(json.loads(Path(path).read_text()))
