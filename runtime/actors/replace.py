"""What a lost worker means to its pool: the one place that decides it.

A worker is *lost* when its supervisor sees it gone and its link did not resume it: the process died
(killed, crashed, exited), it stopped answering heartbeats, or its host vanished (the SSH link gave up
after `reconnect_timeout`). Two policies answer a loss:

- `RestartInPlace` (the default, `Pool(replace_failed=False)`): the node's supervisor restarts the
  worker on the same node, with backoff; more than `max_restarts` losses within `restart_window` and
  the node is given up (`failed`), and the pool routes work around it (`node.py`).
- `ReplaceFailed` (`Pool(replace_failed=True)`): the node is lost for good. The pool fails what ran on
  it (`WorkerLost`, saying the node is being replaced), stops what is left of it, destroys it through
  its provider (`terminate([handle])`), records `NodeReplaced`, and asks the same provider for a fresh
  node for the same index through the same per-node phases as at start (`launch([index])`, the lost
  node's place tried last: `Provider.avoid_in_place`,
  `wait_running`, connect, bootstrap, workers). The index keeps its rank: the replacement gets the same
  `instance_info().node`/`rank` and the current peers. Calls wait for it (bounded by `start_timeout`).
  An index is replaced at most `max_restarts` times within `restart_window` (the supervisor's own
  intensity limit); past that, or when the provider has nothing left to give (an SSH pool with no
  spare host left, `ProvisionError(kind="capacity")`), or when the replacement cannot start, the index
  stays `failed` with an error naming the lost node and why it was not replaced — the pool goes on
  as it does today with a failed node. A replacement is told how many workers ran at its ranks before
  (`SKYHIVE_WORKER_RESTARTS`), so a plugin that forms a process group (torch, jax) refuses it with
  `WorkerRestarted` — the surviving ranks' group cannot take a new member — and no further
  replacement is tried for it.

The task that ran on the lost worker fails with `WorkerLost` either way; `retries=N` on the call re-runs
it (`runtime/common/retry.py`) on a worker picked anew, which waits for the replacement when it is the only
place left. A broadcast waits for every index to be ready again, so one started after a replacement
reaches N nodes; one in flight when a rank is lost fails at once with that rank's `WorkerLost`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ..events.types import NodeReplaced
from ..events.lifecycle import NodeState
from .loss import LossPolicy, LostNode
from .node import NodeActor, final_cause, first_error
from .provisioning import with_retries

if TYPE_CHECKING:
    from ...providers.base import ClusterSpec, Provider
    from ..events.log import EventLog
    from ..common.settings import Settings
    from ..nodes.context import NodeContext
    from .startclock import StartClocks

log = logging.getLogger("skyhive.pool")

__all__ = ["ReplaceFailed", "ReplaceHost"]


class ReplaceHost(Protocol):
    """What `ReplaceFailed` needs of its pool (the pool actor, `PoolRuntime`, is one)."""

    pool_id: str
    open: bool
    nodes: list[NodeActor]
    settings: Settings
    log: EventLog
    provider: Provider
    spec: ClusterSpec
    context: NodeContext
    tg: Any  # the pool's task group: a replacement and its node's supervisors run there
    launching: int  # launches in flight: `close` asks the provider's `list_owned` while any is
    start_clocks: StartClocks  # a replacement's start is bounded like the pool's (a build lifts it)

    def slots_changed(self) -> None: ...




class ReplaceFailed(LossPolicy):
    """`Pool(replace_failed=True)`: a lost worker is a lost node, replaced by a fresh one from the same
    provider for the same index (see the module docstring)."""

    def __init__(self, rt: ReplaceHost) -> None:
        self.rt = rt
        self.pending: dict[int, anyio.CancelScope] = {}  # index -> the replacement under way
        self.history: dict[int, deque[float]] = {}  # index -> when it was replaced (intensity limit)
        self.closing = False
        self._idle = anyio.Event()
        self._idle.set()

    def __repr__(self) -> str:
        return f"<ReplaceFailed replacing={sorted(self.pending)}>"

    def replacing(self, index: int | None = None) -> bool:
        return bool(self.pending) if index is None else index in self.pending

    def _budget_left(self, index: int) -> bool:
        settings = self.rt.settings
        seen = self.history.setdefault(index, deque())
        now = time.monotonic()
        while seen and seen[0] < now - settings.restart_window:
            seen.popleft()
        return len(seen) < settings.max_restarts

    def _applies(self, node: LostNode) -> bool:
        """A loss on a node of an open pool that is still that index's current node."""
        rt = self.rt
        return rt.open and not self.closing and rt.nodes[node.index] is node

    def note(self, node: LostNode) -> str:
        if self._applies(node) and node.index not in self.pending and self._budget_left(node.index):
            return f"; node {node.index} is being replaced (replace_failed=True)"
        return ""

    def take_over(self, node: LostNode, rank: int, reason: str, cause: BaseException | None) -> bool:
        assert isinstance(node, NodeActor)
        if not self._applies(node):
            return self.closing  # closing: stop() ends the supervisor; not open yet: restart in place
        if node.index in self.pending:
            return True  # another of its workers reported the same loss first
        scope = anyio.CancelScope()
        self.pending[node.index] = scope
        self._idle = anyio.Event()
        self.rt.tg.start_soon(self._run, scope, node, f"worker {rank}: {reason}")
        return True

    async def aclose(self) -> None:
        self.closing = True
        for scope in self.pending.values():
            scope.cancel()
        with anyio.move_on_after(self.rt.settings.stop_timeout + 10, shield=True):
            await self._idle.wait()

    # ---- carrying a replacement out ------------------------------------------------------------------

    async def _run(self, scope: anyio.CancelScope, node: NodeActor, reason: str) -> None:
        index = node.index
        try:
            with scope:
                while node is not None:
                    node, reason = await self._replace(node, reason)
        finally:
            del self.pending[index]
            if not self.pending:
                self._idle.set()
            self.rt.slots_changed()

    async def _stop(self, node: NodeActor) -> None:
        """Stop what is left of `node` (its workers, its transport): shielded, bounded — a vanished
        host's transport may take its connect timeout to give up."""
        settings = self.rt.settings
        with anyio.CancelScope(shield=True), anyio.move_on_after(settings.stop_timeout + 5):
            await node.stop(settings.stop_timeout)

    async def _replace(self, old: NodeActor, reason: str) -> tuple[NodeActor | None, str]:
        """Destroy `old` and start a node in its place. Returns (a replacement that failed to start,
        why) to be replaced in turn, or (None, "") when done — replaced, or left failed saying why."""
        rt, index = self.rt, old.index
        old_id = old.handle.provider_id if old.handle is not None else ""
        lost = f"node {index}" + (f" ({old_id})" if old_id else "") + f" was lost: {reason}"
        budget = self._budget_left(index)
        for channel in old.channels:  # whatever still runs there fails now, saying why
            if channel is not None and channel.calls:
                channel.fail_all(f"{lost}" + ("; it is being replaced (replace_failed=True)" if budget else ""))
        if old.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
            old.move(NodeState.FAILED, detail=lost + ("; replacing it" if budget else ""))
        rt.slots_changed()
        if not budget:
            why = (f"{lost}; not replaced again: replaced {len(self.history[index])} times within "
                   f"{rt.settings.restart_window:g} s (max_restarts={rt.settings.max_restarts})")
            log.error("pool %s: %s", rt.pool_id, why)
            old.progress(why)
            await self._stop(old)
            return None, ""
        log.warning("pool %s: %s; replacing it", rt.pool_id, lost)
        await self._stop(old)
        with anyio.CancelScope(shield=True):  # destroying what we had must finish
            failed = await old.terminate()
        if failed:  # not confirmed gone: it stays in the pool, whose close tries again (or names it leaked)
            log.error("pool %s: %s; not replaced: %s", rt.pool_id, lost, failed)
            return None, ""
        self.history[index].append(time.monotonic())
        replacement = rt.log.state.nodes[index].replacements + 1
        rt.log.emit(NodeReplaced, node=index, replacement=replacement, old_provider_id=old_id, reason=reason)
        new = NodeActor(rt.context, index)
        # a replacement is told how many workers ran at its ranks before: a plugin that forms a
        # process group refuses it (the survivors' group cannot take a new member)
        new.starts = [max(1, n) for n in old.starts]
        rt.nodes[index] = new
        new.move(NodeState.PROVISIONING)
        provider, spec = rt.provider, rt.spec
        if old.handle is not None:  # the lost node's place (a cloud's zone) is tried last by its replacement
            provider.avoid_in_place([old.handle])
        rt.launching += 1  # a launch in flight: close asks list_owned if it never answers
        handles = []
        try:
            handles = await with_retries(provider, f"node {index}: launch a replacement",
                                         lambda: provider.launch(spec, [index]), on_retry=new.progress)
        except Exception as exc:
            rt.launching -= 1  # a launch that raised has terminated what it made (Provider.launch)
            why = f"{lost}; it could not be replaced: {exc}"
            log.error("pool %s: %s", rt.pool_id, why)
            new.failure = exc
            new.move(NodeState.FAILED, detail=why)
            return None, ""
        if [h.node for h in handles] != [index]:
            with anyio.CancelScope(shield=True):
                await with_retries(provider, "terminate", lambda: provider.terminate(handles))
            rt.launching -= 1
            new.move(NodeState.FAILED, detail=f"{lost}; the {provider.name} provider launched nodes "
                                              f"{[h.node for h in handles]} for it, asked for [{index}]")
            return None, ""
        rt.launching -= 1
        new.handle = handles[0]
        try:
            with rt.start_clocks.bound():
                await rt.tg.start(new.run, handles[0])
        except Exception as group:
            exc = first_error(group)  # a node's failure arrives wrapped in task groups
            why = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, TimeoutError):
                why = f"not ready within start_timeout={rt.settings.start_timeout} s"
            final = final_cause(exc)
            new.failure = new.failure or final or exc
            if new.state not in (NodeState.FAILED, NodeState.TERMINATING, NodeState.TERMINATED):
                new.move(NodeState.FAILED, detail=f"{lost}; its replacement failed: {why}")
            if final is not None:  # it would be refused again, whatever node comes next
                log.error("pool %s: node %d: its replacement cannot join the pool: %s", rt.pool_id, index, final)
                await self._stop(new)
                return None, ""
            return new, f"its replacement failed: {why}"
        log.warning("pool %s: node %d replaced (%s -> %s)", rt.pool_id, index, old_id or "?",
                    new.handle.provider_id if new.handle is not None else "?")
        rt.slots_changed()
        return None, ""
