"""Running the tasks of ``npu sweep``: on Ray (local instance or cluster) or in the driver.

A :class:`Task` names a function of :data:`TASKS` and its JSON arguments; ``after`` lists
tasks that must finish first (the RTL runs of a configuration wait for its Verilator build, so
no two workers build the same model and none sits on the build lock). Both executors call
``on_done(task, result)`` in the driver as each task finishes, in completion order, which is
where the sweep stores results in its cache and advances its progress bar.

:class:`RayExecutor` starts a local Ray instance with one worker per core
(``ray.init(num_cpus=..., include_dashboard=False, log_to_driver=False)``) or connects to an
existing cluster (``address``; the repository is then shipped to the workers as Ray's
``working_dir``, without ``build/``, ``.venv/`` and ``waves/``). Each task asks for one CPU, so
Ray runs at most ``num_cpus`` at once; tasks are submitted longest first (syntheses, then RTL,
then model points), which Ray starts in that order as workers free up. A task that raises is
reported as ``{"status": "error"}`` and not retried. :meth:`RayExecutor.close` shuts Ray down
(also when the sweep is interrupted: outstanding tasks are cancelled first).
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cosim.bench.sweep_tasks import area_point, model_point, rtl_point

__all__ = ["Task", "TASKS", "InlineExecutor", "RayExecutor", "RayStartError", "rtl_build",
           "call_task"]


def rtl_build(config: str) -> dict:
    """Build (or find cached) the Verilator model of ``config``: ``{"status", "seconds",
    "cached"}`` or an error."""
    from cosim.build import CosimBuildError, build_sim
    from hw.config import NPUConfig
    try:
        b = build_sim(NPUConfig.parse(config))
    except CosimBuildError as e:
        return {"status": "error", "error": str(e)}
    return {"status": "ok", "seconds": round(b.seconds, 1), "cached": b.cached}


#: The task functions by name.
TASKS: dict[str, Callable[..., dict]] = {"point": model_point, "area": area_point,
                                          "rtl": rtl_point, "build": rtl_build}


@dataclass
class Task:
    """One unit of work.

    Attributes
    ----------
    id : str
        Unique within a run (the cache key's hash, or ``build:<config>``).
    kind : str
        A key of :data:`TASKS`.
    kwargs : dict
        JSON arguments of the function.
    label : str
        For the progress output.
    key : dict or None
        Cache key of its result (None: not cached, e.g. a build).
    after : list of str
        Ids of tasks that must finish first.
    """
    id: str
    kind: str
    kwargs: dict
    label: str
    key: dict | None = None
    after: list[str] = field(default_factory=list)


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its finished children, seconds."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def call_task(kind: str, kwargs: dict, *_deps) -> dict:
    """Run one task function (``_deps``: results of the tasks it waited for, unused); its
    result gets ``task_wall_seconds`` and ``task_cpu_seconds`` (CPU time of the task and the
    tools it ran: Yosys, the simulator; on a shared machine the wall time depends on the
    load, the CPU time much less)."""
    t0, c0 = time.perf_counter(), _cpu_seconds()
    try:
        res = TASKS[kind](**kwargs)
    except Exception as e:      # a bug in a point must not take the sweep down
        import traceback
        res = {"status": "error", "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc()}
    return res | {"task_wall_seconds": round(time.perf_counter() - t0, 2),
                  "task_cpu_seconds": round(_cpu_seconds() - c0, 2)}


class InlineExecutor:
    """Runs every task in the driver, one after the other, dependencies first."""

    workers = 0   #: no Ray worker: in the process, as ``--workers 0`` says

    def run(self, tasks: list[Task], on_done: Callable[[Task, dict], None]) -> None:
        done: set[str] = set()
        ids = {t.id for t in tasks}
        pending = list(tasks)
        while pending:
            ready = [t for t in pending if all(d in done or d not in ids for d in t.after)]
            if not ready:
                raise ValueError("task dependencies form a cycle or name unknown tasks")
            t = ready[0]
            pending.remove(t)
            on_done(t, call_task(t.kind, t.kwargs))
            done.add(t.id)

    def close(self) -> None:
        pass


#: Tries at starting a local Ray instance (:meth:`RayExecutor._start_local`).
START_ATTEMPTS = 3


class RayStartError(RuntimeError):
    """Ray could not be started (the message has Ray's own)."""


class RayExecutor:
    """Runs tasks as Ray tasks.

    Parameters
    ----------
    address : str, optional
        An existing cluster (``ray://host:10001`` or ``auto``); None starts a local instance.
    num_cpus : int, optional
        Workers of a local instance (default: one per core, ``os.cpu_count()``).

    Raises
    ------
    ImportError
        If Ray is not installed.
    RayStartError
        If a local instance did not start in :data:`START_ATTEMPTS` tries.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        import ray

        from cosim.build import ROOT

        self.ray = ray
        if address is None:
            self.workers = num_cpus or os.cpu_count() or 1
            self._start_local()
        else:
            ray.init(address=address, log_to_driver=False, runtime_env={
                "working_dir": str(ROOT),
                "excludes": ["build/", ".venv/", "waves/", ".git/", "*.vcd"]})
            self.workers = int(ray.cluster_resources().get("CPU", 1))
        self._remote = ray.remote(num_cpus=1, max_retries=0)(call_task)
        self._pending: list = []

    def _start_local(self, attempts: int = START_ATTEMPTS) -> None:
        """Start the local instance; on a loaded machine Ray's raylet may miss its fixed 30 s
        registration window (``Exception: The current node timed out during startup``), so
        try again, ``attempts`` times in all."""
        # Ray starts its workers at nice 15 (its worker_niceness setting) so that they never
        # slow the raylet; on a machine shared with other work that starves every synthesis
        # and simulation of a sweep, so they run at the driver's priority unless the user set
        # RAY_worker_niceness.
        os.environ.setdefault("RAY_worker_niceness", "0")
        for attempt in range(1, attempts + 1):
            try:
                self.ray.init(num_cpus=self.workers, include_dashboard=False,
                              log_to_driver=False)
                return
            except Exception as e:          # Ray raises a bare Exception here
                with contextlib.suppress(Exception):
                    self.ray.shutdown()
                if "timed out during startup" not in str(e) or attempt == attempts:
                    raise RayStartError(f"could not start a local Ray instance "
                                        f"({attempt} attempts): {e}") from e

    def run(self, tasks: list[Task], on_done: Callable[[Task, dict], None]) -> None:
        refs: dict[str, object] = {}
        by_ref: dict = {}
        for t in _dependency_order(tasks):
            deps = [refs[d] for d in t.after if d in refs]
            ref = self._remote.remote(t.kind, t.kwargs, *deps)
            refs[t.id] = ref
            by_ref[ref] = t
        self._pending = list(by_ref)
        while self._pending:
            # a timeout, so that the driver sees ^C (KeyboardInterrupt) within a second
            ready, self._pending = self.ray.wait(self._pending, num_returns=1, timeout=1.0)
            for ref in ready:
                try:
                    result = self.ray.get(ref)
                except self.ray.exceptions.RayError as e:
                    result = {"status": "error", "error": f"{type(e).__name__}: {e}"}
                on_done(by_ref[ref], result)

    def close(self) -> None:
        """Cancel what is still running and shut Ray down."""
        for ref in self._pending:
            with contextlib.suppress(Exception):     # finished, or gone with its worker
                self.ray.cancel(ref, force=True)
        self._pending = []
        if self.ray.is_initialized():
            self.ray.shutdown()


def _dependency_order(tasks: list[Task]) -> list[Task]:
    """``tasks`` in their order, each after the tasks it waits for."""
    by_id = {t.id: t for t in tasks}
    out, seen = [], set()

    def visit(t: Task, stack: tuple = ()) -> None:
        if t.id in seen:
            return
        if t.id in stack:
            raise ValueError(f"task dependencies form a cycle through {t.id}")
        for d in t.after:
            if d in by_id:
                visit(by_id[d], (*stack, t.id))
        seen.add(t.id)
        out.append(t)
    for t in tasks:
        visit(t)
    return out
