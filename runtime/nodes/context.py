"""`NodeContext`: what a node actor (and the transport and bootstrap serving its node) gets from its
pool — and nothing more.

The pool actor builds one and hands it to each `NodeActor`; the node never holds the pool, so the
dependencies point one way (pool actor -> node actor -> context) and a transport or bootstrap that a
third party registers sees the same narrow view.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ...plugins.image import Image
    from ...protocol.info import InstanceInfo
    from ...providers.base import ClusterSpec, NodeHandle, Provider
    from ..events.log import EventLog
    from ..common.settings import Settings
    from ..common.shm import MemfdPool

__all__ = ["NodeContext", "LossPolicy", "WorkerChannel"]


class LossPolicy(Protocol):
    """What a lost worker means to its pool, as a node sees it (`actors/loss.py` implements it): the SDK
    declares only what it calls, so it imports nothing above it."""

    def note(self, node: Any) -> str: ...
    def take_over(self, node: Any, rank: int, reason: str, cause: BaseException | None) -> bool: ...
    def replacing(self, index: int | None = None) -> bool: ...


#: One worker's protocol connection (`actors/channel.py: WorkerChannel`), opaque to the SDK: the pool's
#: callbacks take it as they got it.
WorkerChannel = Any


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeContext:
    """The pool as one node sees it."""

    pool_id: str
    spec: ClusterSpec
    provider: Provider
    settings: Settings
    #: the pool's event log: the node's state lives there (`log.state.nodes[i]`), and it redacts
    log: EventLog
    image: Image | None
    #: environment every worker gets (the image's env and secrets)
    worker_env: Mapping[str, str]
    #: (node, local_rank) -> InstanceInfo; complete once `addresses_known` is set
    infos: Mapping[tuple[int, int], InstanceInfo]
    #: where a worker's output frames go: the pool's output router
    deliver_output: Callable[[WorkerChannel, Any, int, str], None]
    #: flush buffered output of (node, local_rank)
    flush_output: Callable[[int, int], None]
    #: tell the scheduler that usable workers changed
    slots_changed: Callable[[], None]
    #: record that this node runs (its handle has addresses); the pool fills `infos` when all do
    node_running: Callable[[NodeHandle], None]
    #: node i waits until every member's addresses are known (workers need their peers' addresses;
    #: `actors/membership.py`)
    wait_addresses: Callable[[int], Awaitable[None]]
    #: run the plugins' worker setup on a freshly started worker (None: no plugin needs one)
    setup_worker: Callable[[WorkerChannel], Awaitable[None]] | None
    #: what a lost worker means: restarted in place, or its node replaced (`actors/replace.py`)
    loss_policy: LossPolicy
    #: start `fn(*args)` as a task in the pool's task group (a lost worker's restart)
    spawn: Callable[..., None]
    #: worker processes per local rank (`sky.Worker(concurrency=N)`); the extra ones take tasks but
    #: no broadcast and no plugin setup
    concurrency: int = 1
    #: task threads per worker process (`sky.Worker(concurrency=N)`, thread executor; 1: one task at a time)
    task_threads: int = 1
    #: entered around an environment build (bounded by `build_timeout` itself): lifts the pool's
    #: start deadline while it runs (`actors/startclock.py`)
    building: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    #: no provisioning display is drawn (stderr is no terminal, or `progress=False`): a long step of the
    #: start (a Local environment build) says itself as a line on stderr instead
    step_lines: bool = False
    #: the pool's reusable memfds for large arguments to workers on this machine (None: none kept)
    memfds: MemfdPool | None = None
