"""`sky.Worker`: how many tasks one worker runs at once (the seeds' `worker=sky.Worker(concurrency=N)`).

    sky.Pool(nodes=2, worker=sky.Worker(concurrency=10))                      # 20 tasks at once, 10 per node
    sky.Pool(nodes=2, worker=sky.Worker(concurrency=4, executor="process"))   # 4 processes per rank

The executor is Skyward's choice: `"thread"` (the default, as in Skyward; `"auto"` means it) runs the
N task slots as threads of the rank's one worker process (`runtime/worker/threaded.py`): cheap enough
for Skyward's examples that ask for 240 or 500 slots, the tasks share module globals and the
process's memory, and a cancelled task stops at its next Python instruction. `"process"` runs each
slot as its own worker process: no shared GIL (pure-Python CPU-bound work uses every core), a task
cancelled even inside C code, nothing shared. See docs/seeds.md.

Thread slots take every kind of call (`run`, `map`, `gather`, `submit`, joblib; `pool.workers` counts
slots) and plugins set up once per process. Extra processes take tasks from `run`, `map`, `gather`,
`submit` and joblib, but `broadcast` (`fn() @ pool`) still runs once per node and local rank; they
cannot join a framework's process group (two processes of one rank), so a pool with process slots
refuses plugins that set one up on the worker (`around_app`). On `sky.Simulated` (an in-process
simulation) thread slots run one task at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any


__all__ = ["Worker", "EXECUTORS", "check_plugins"]

EXECUTORS = ("auto", "process", "thread")


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """Per rank: `concurrency` task slots, as threads of its worker process (`executor="thread"`,
    the default; "auto" is the same) or as that many worker processes (`executor="process"`)."""

    concurrency: int = 1
    executor: str = "auto"

    @classmethod
    def of_record(cls, processes: int, threads: int) -> Worker:
        """The `Worker` that made a named pool whose record says `processes` per rank and `threads` per
        process (an attached client uses every slot)."""
        if threads > 1:
            return cls(concurrency=threads, executor="thread")
        return cls(concurrency=processes, executor="process")

    @property
    def threads(self) -> int:
        """Task threads per worker process (1: one task at a time)."""
        return self.concurrency if self.executor != "process" else 1

    @property
    def processes(self) -> int:
        """Worker processes per rank."""
        return self.concurrency if self.executor == "process" else 1

    def __post_init__(self) -> None:
        if not isinstance(self.concurrency, int) or isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise ValueError(f"Worker(concurrency={self.concurrency!r}): need a positive integer")
        if self.executor not in EXECUTORS:
            raise ValueError(f"Worker(executor={self.executor!r}): use one of {', '.join(EXECUTORS)}")


def check_plugins(worker: Worker, plugins: Sequence[Any]) -> None:
    """Raise `ValueError` when `worker` runs extra processes and a plugin forms a process group."""
    if worker.processes == 1 or not plugins:  # thread slots share their rank's one process (and its process group)
        return
    from ..plugins.api import AppHook  # (a pool without plugins: not imported)

    grouped = [getattr(p, "name", type(p).__name__) for p in plugins if isinstance(p, AppHook)]
    if grouped:
        raise ValueError(
            f"Worker(concurrency={worker.concurrency}, executor='process') runs extra worker processes per node, which cannot "
            f"join the process group that plugin(s) {', '.join(grouped)} set up; use concurrency=1 "
            "with them, or the thread executor (one process per rank; processes_per_node for more ranks)"
        )
