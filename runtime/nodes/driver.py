"""`PoolDriver`: what drives a live pool from outside it — the contract an open `Pool` hands out
(`pool.driver()`) to the code above it (`runtime/control/`: `launch`'s steps, a named pool's queue
agent, managed jobs; `runtime/clusters/named.py` recording a kept pool's workers).

The pool's actors (`runtime/actors/`) implement it (`actors/driver.py`); nothing above them reads the
pool's runtime or imports the actors. What a driver gives:

- the nodes as views (`nodes()`, `node(i)`: `NodeView` — index, handle, state, calls in flight, whether
  it is being replaced), read anew at each call;
- replacing a node (`replace(i, why)`: a pool made with `replace_failed=True`) and whether one is under
  way (`replacing(i)`);
- waiting until no call runs on the pool (`quiet()`), woken by the pool's own events (each call's end is
  one), never by polling;
- the pool's workers, waiting for those that restart or are replaced (`workers()`), and a call on one of
  them (`call(worker, fn, args)`): what a task's steps run on some nodes (`control/steps.py`);
- the pool's events (`events()`) and a task for the pool's lifetime (`spawn`).

Types only here (this module sits in the node-kind SDK's folder, below the actors and the pool, so
both the implementation and its users import it).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..events.lifecycle import NodeState

if TYPE_CHECKING:
    from ...providers.base import NodeHandle, Provider
    from ..common.settings import Settings
    from ..events.stream import EventStream
    from .transport import Transport

__all__ = ["NodeView", "WorkerRef", "PoolDriver"]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node of a live pool as it is now: its `index` (its rank among the nodes, kept by a
    replacement), the provider's `handle` (None before it is launched), its lifecycle `state`, `busy`
    (calls in flight on its workers), `replacing` (a replacement under way: `replace_failed=True`),
    its `transport` (what its kind's keep support reads to record a kept pool's workers) and its
    worker `processes` by worker index (None where none runs)."""

    index: int
    handle: NodeHandle | None
    state: NodeState
    busy: int = 0
    replacing: bool = False
    transport: Transport | None = None
    processes: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class WorkerRef:
    """One worker of the pool as `PoolDriver.workers()` found it: its `node` and local `rank`. A call
    on it goes to that worker process; once it is lost the call fails with `WorkerLost` (a restarted
    or replacement worker is a new `WorkerRef`, from `workers()` again)."""

    node: int
    rank: int
    token: Any = field(default=None, repr=False)  # the driver's own handle of the worker


class PoolDriver(Protocol):
    """Drive an open pool (see the module docstring). `pool.driver()` gives one; it is valid while
    the pool is open (a call on a closed pool raises `PoolClosed`)."""

    @property
    def pool_id(self) -> str:
        """The pool's id (its event log's name; a managed job's attempt's pool)."""

    @property
    def provider(self) -> Provider:
        """The provider the pool's nodes come from."""

    @property
    def settings(self) -> Settings:
        """The pool's settings (timeouts: `cancel_grace`, `stop_timeout`, `start_timeout`, ...)."""

    def nodes(self) -> list[NodeView]:
        """Every node (the pool's `nodes`, in index order), as it is now."""

    def node(self, index: int) -> NodeView:
        """Node `index` as it is now (`IndexError` for one the pool does not have)."""

    def replacing(self, index: int | None = None) -> bool:
        """Whether node `index` (None: any node) is being replaced."""

    def replace(self, index: int, reason: str) -> bool:
        """Replace node `index` now, as if its worker were lost (its machine is going: the provider
        took it, or it had an interruption notice): what runs there fails with `WorkerLost`, calls wait
        for the replacement. False when the pool does not replace nodes (`replace_failed=False`), is
        closing, or has no such node."""

    async def quiet(self, *, timeout: float | None = None) -> bool:
        """Wait until no call is in flight on any node (each call's end is a pool event: this waits on
        them); True once quiet, False when `timeout` seconds passed first."""

    async def workers(self) -> list[WorkerRef]:
        """Every worker of the pool in rank order, waiting (bounded: `wait_for_worker`, a replacement
        `start_timeout`) for those restarting or being replaced; `WorkerLost` naming the node when a
        node is failed for good or the wait ran out."""

    async def call(self, worker: WorkerRef, fn: Callable[..., Any], args: tuple[Any, ...] = (), *,
                   name: str | None = None) -> Any:
        """`fn(*args)` on that worker (`name`: what the pool's events and errors call it); its
        result, or the exception it raised (`WorkerLost`, `NodeUnreachable`: the worker or its node
        was lost)."""

    def events(self) -> EventStream:
        """The pool's events from now on (an async iterator ending when the pool closes)."""

    def collect_task_ids(self, ids: set[int]) -> AbstractContextManager[set[int]]:
        """Inside it, the task id of every call made from this context (and the tasks it starts) is noted
        in `ids`: the output those calls print carries it (`OutputRecord.task`), so that the output of
        calls made side by side can be told apart (a named pool's jobs, each with its own log)."""

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` (an async function) for the pool's lifetime: cancelled when the pool closes."""
