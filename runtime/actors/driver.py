"""The pool actor's side of `PoolDriver` (`runtime/nodes/driver.py`, the contract): what `Pool.driver()`
hands out, reading the pool runtime so that nothing above the actors has to."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import PoolClosed
from ..nodes.driver import NodeView, WorkerRef

if TYPE_CHECKING:
    from ...providers.base import Provider
    from ..common.settings import Settings
    from ..events.stream import EventStream
    from .node import NodeActor
    from .pool_actor import PoolRuntime

__all__ = ["RuntimeDriver"]


class RuntimeDriver:
    """`PoolDriver` over a `PoolRuntime` (see the contract for each member)."""

    def __init__(self, rt: PoolRuntime) -> None:
        self._rt = rt

    def __repr__(self) -> str:
        return f"<PoolDriver {self._rt.pool_id}>"

    @property
    def pool_id(self) -> str:
        return self._rt.pool_id

    @property
    def provider(self) -> Provider:
        return self._rt.provider

    @property
    def settings(self) -> Settings:
        return self._rt.settings

    def _view(self, node: NodeActor) -> NodeView:
        return NodeView(index=node.index, handle=node.handle, state=node.state,
                        busy=sum(len(c.calls) for c in node.channels if c is not None),
                        replacing=self._rt.loss_policy.replacing(node.index), transport=node.transport,
                        processes=tuple(node.processes))

    def nodes(self) -> list[NodeView]:
        return [self._view(n) for n in self._rt.nodes]

    def node(self, index: int) -> NodeView:
        if not 0 <= index < len(self._rt.nodes):
            raise IndexError(f"pool {self._rt.pool_id} has no node {index} (it has {len(self._rt.nodes)})")
        return self._view(self._rt.nodes[index])

    def replacing(self, index: int | None = None) -> bool:
        return self._rt.loss_policy.replacing(index)

    def replace(self, index: int, reason: str) -> bool:
        return self._rt.replace_node(index, reason)

    def _busy(self) -> bool:
        return any(c is not None and c.calls for n in self._rt.nodes for c in n.channels)

    async def quiet(self, *, timeout: float | None = None) -> bool:
        # registered before the look: a call that ends between the look and the wait is an event it holds
        with anyio.move_on_after(timeout):
            async with self._rt.log.subscribe() as stream:
                while self._busy():
                    try:
                        await stream.__anext__()  # (a call's end, a node lost: any event is a reason to look)
                    except StopAsyncIteration:  # the pool closed: its calls ended with it
                        break
            return not self._busy()
        return not self._busy()

    async def workers(self) -> list[WorkerRef]:
        return [WorkerRef(node=c.node, rank=c.local_rank, token=c) for c in await self._rt.all_channels()]

    async def call(self, worker: WorkerRef, fn: Callable[..., Any], args: tuple[Any, ...] = (), *,
                   name: str | None = None) -> Any:
        if worker.token is None:
            raise ValueError(f"{worker!r} does not come from PoolDriver.workers()")
        return await self._rt.call_on(worker.token, fn, args, {}, fn_name=name)

    def events(self) -> EventStream:
        return self._rt.log.subscribe()

    @contextlib.contextmanager
    def collect_task_ids(self, ids: set[int]) -> Iterator[set[int]]:
        from .dispatch import collect_task_ids

        with collect_task_ids(ids):
            yield ids

    def spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._rt.tg is None:
            raise PoolClosed(f"pool {self._rt.pool_id} is not running: nothing can be started for its lifetime")
        self._rt.tg.start_soon(fn, *args)
