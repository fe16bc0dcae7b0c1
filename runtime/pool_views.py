"""What an open `Pool` shows of itself (`pool.Pool` mixes this in): its id, its state folded from its events,
its nodes now, a statistics snapshot, and its event and output streams."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .actors.pool_actor import PoolRuntime
    from .events.state import PoolState
    from .events.stream import EventStream
    from .output.router import OutputStream

__all__ = ["PoolViews"]


class PoolViews:
    """The views of a `Pool` (see `pool.Pool`): needs the open pool's runtime (`_runtime`, raising
    `PoolClosed` when the pool is not open), its elastic range and its retry count."""

    elastic: tuple[int, int, float, float] | None
    _retries: int

    if TYPE_CHECKING:
        @property
        def _runtime(self) -> PoolRuntime: ...

    @property
    def id(self) -> str:
        """The pool id (names its event log: `skyhive ls`, `skyhive down`)."""
        return self._runtime.pool_id

    @property
    def state(self) -> PoolState:
        """The pool's state, folded from its events."""
        return self._runtime.log.state

    @property
    def dropped(self) -> dict[int, str]:
        """The nodes left out when the pool started (`min_nodes`): node index -> why it failed."""
        return dict(self._runtime.membership.dropped)

    def current_nodes(self) -> int:
        """How many nodes the pool has now: its members (an elastic pool, `nodes=(min, max)`, between
        its min and max; a node starting is not counted until it is ready)."""
        return len(self._runtime.members())

    @property
    def log_path(self) -> str | None:
        path = self._runtime.log.path
        return str(path) if path is not None else None

    def statistics(self) -> dict[str, Any]:
        """A snapshot: nodes and their states, workers and their load, task counters, retries and
        node replacements (done, and under way)."""
        rt = self._runtime
        st = rt.log.state
        return {
            "pool_id": rt.pool_id,
            "status": st.status,
            "nodes": {n.index: n.state.value for n in rt.nodes},
            "workers": {(n.index, i): c.load for n in rt.nodes for i, c in enumerate(n.channels) if c is not None},
            "tasks_submitted": st.tasks_submitted,
            "tasks_in_flight": st.tasks_in_flight,
            "tasks_ok": st.tasks_ok,
            "tasks_failed": st.tasks_failed,
            "tasks_cancelled": st.tasks_cancelled,
            "tasks_lost": st.tasks_lost,
            "retries": self._retries,
            "replacements": st.replacements,  # nodes replaced (`replace_failed=True`)
            "replacing": sorted(i for i in range(len(rt.nodes)) if rt.loss_policy.replacing(i)),
            # an elastic pool (`nodes=(min, max)`): its range, its nodes now, and the calls waiting for a slot
            "elastic": self.elastic[:2] if self.elastic is not None else None,
            "members": sorted(n.index for n in rt.members()),
            "waiting": rt.waiting,
            "output_records": rt.router.records,
            "output": rt.router.statistics(),
        }

    # ---- observing ---------------------------------------------------------------------------------

    def events(self, *, replay: bool = False, max_buffer: int | None = None) -> EventStream:
        """The pool's events as they happen (with `replay`, first the recent ones kept in memory).

        An async iterator (and async context manager) registered when created, so no event after
        this call is missed. It ends when the pool closes, after the events it holds. One that falls
        more than `max_buffer` characters behind (about 200 per event plus the text of output events;
        default 16 MiB) is detached and raises `EventsStalled` after the events it still holds.
        `break` or `aclose()` releases it.
        """
        if max_buffer is None:
            return self._runtime.log.subscribe(replay=replay)
        return self._runtime.log.subscribe(replay=replay, max_buffer=max_buffer)

    def output(self, *, max_buffer: int | None = None, stall_timeout: float | None = None) -> OutputStream:
        """Every piece of output the workers write, as `OutputRecord`s, whatever is printed.

        An async iterator (and async context manager) registered when created. If it falls more than
        `max_buffer` characters behind, the workers are slowed down (nothing is dropped); one that
        takes nothing for `stall_timeout` seconds while workers wait is detached and raises
        `OutputStalled` after the records it still holds. `break` or `aclose()` releases it.
        """
        kw: dict[str, Any] = {}
        if max_buffer is not None:
            kw["max_buffer"] = max_buffer
        if stall_timeout is not None:
            kw["stall_timeout"] = stall_timeout
        return self._runtime.router.subscribe(**kw)
