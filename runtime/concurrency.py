"""`sky.Worker`: how many tasks one worker runs at once (the seeds' `worker=sky.Worker(concurrency=N)`).

    sky.Pool(nodes=2, worker=sky.Worker(concurrency=10))   # 20 tasks at once, 10 per node

skyhive runs each task slot as its own worker process (`executor="process"`): the daemon runs a task
on its main thread so that a `Cancel` can interrupt it with a signal, and per-task output capture
and `instance_info()` are per process. `executor="thread"` (Skyward's default) is accepted and runs
the same way — the difference a user can see is that concurrent tasks do not share module globals.
See docs/seeds.md.

The extra processes take tasks from `run`, `map`, `gather`, `submit` and joblib; `broadcast`
(`fn() @ pool`) still runs once per node and local rank. They see the same `instance_info()` as the
rank they serve. They cannot join a framework's process group (two processes of one rank), so a
pool with `concurrency > 1` refuses plugins that set one up on the worker (`around_app`).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

from ..plugins.api import AppHook

__all__ = ["Worker", "EXECUTORS", "check_plugins"]

EXECUTORS = ("auto", "process", "thread")


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """Per node: `concurrency` task slots per worker process of a rank (1: one task at a time)."""

    concurrency: int = 1
    executor: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.concurrency, int) or isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise ValueError(f"Worker(concurrency={self.concurrency!r}): need a positive integer")
        if self.executor not in EXECUTORS:
            raise ValueError(f"Worker(executor={self.executor!r}): use one of {', '.join(EXECUTORS)}")


def check_plugins(worker: Worker, plugins: Sequence[Any]) -> None:
    """Raise `ValueError` when `worker` runs extra processes and a plugin forms a process group."""
    if worker.concurrency == 1:
        return
    grouped = [getattr(p, "name", type(p).__name__) for p in plugins if isinstance(p, AppHook)]
    if grouped:
        raise ValueError(
            f"Worker(concurrency={worker.concurrency}) runs extra worker processes per node, which cannot "
            f"join the process group that plugin(s) {', '.join(grouped)} set up; use concurrency=1 "
            "with them (one process per rank; processes_per_node for more ranks)"
        )
