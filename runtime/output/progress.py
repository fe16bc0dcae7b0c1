"""The pool's provisioning display: per node, requested -> provisioning (with the provider's own state)
-> running -> connecting -> bootstrapping (with the step) -> ready, drawn live on a terminal while the
pool starts, and quiet when stderr is not one.

Two parts, as elsewhere in `output/`: `ProvisioningView` folds the pool's events into what is shown
(pure, no I/O: tested on its own), and `ProvisioningDisplay` draws it with rich on stderr, fed by a
subscription to the pool's event log. Every provider gets the same display, because every provider's
progress is already an event (`NodeStateChanged`, `NodeProgress`). A pool of more than `DETAIL_LIMIT`
nodes is shown as counts per state, plus the nodes that failed.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from ..events.stream import EventStream
from ..events.types import Event, NodeProgress, NodeStateChanged

__all__ = ["ProvisioningView", "ProvisioningDisplay", "DETAIL_LIMIT", "wants_display"]

log = logging.getLogger(__name__)

#: Pools of at most this many nodes get one line per node; bigger ones, counts per state.
DETAIL_LIMIT = 16
#: The order the lifecycle goes in (how counts are listed).
ORDER = ("requested", "provisioning", "running", "connecting", "bootstrapping", "ready", "failed",
         "terminating", "terminated")
_DONE = frozenset({"ready", "failed", "terminating", "terminated"})


@dataclass(slots=True)
class _Row:
    state: str = "requested"
    detail: str = ""  # the last progress detail within the state (a bootstrap step, a retry)
    provider_state: str = ""  # the provider's own word ("pending") while provisioning
    since: float = 0.0


class ProvisioningView:
    """What the display shows, folded from the pool's node events. `apply` says whether it changed."""

    def __init__(self, nodes: int, *, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.rows = [_Row(since=self.started) for _ in range(nodes)]

    def apply(self, event: Event) -> bool:
        if isinstance(event, NodeStateChanged) and 0 <= event.node < len(self.rows):
            row = self.rows[event.node]
            row.state, row.detail, row.provider_state, row.since = event.state, event.detail, "", self.clock()
            return True
        if isinstance(event, NodeProgress) and 0 <= event.node < len(self.rows):
            row = self.rows[event.node]
            row.detail = event.detail or row.detail
            row.provider_state = event.provider_state or row.provider_state
            return True
        return False

    @property
    def done(self) -> bool:
        """Every node is ready, or failed, or going away: nothing more to show."""
        return all(row.state in _DONE for row in self.rows)

    def counts(self) -> dict[str, int]:
        counts = {state: 0 for state in ORDER}
        for row in self.rows:
            counts[row.state] = counts.get(row.state, 0) + 1
        return {state: n for state, n in counts.items() if n}

    def lines(self, pool_id: str) -> list[str]:
        """The text of the display: a header, then a line per node (or counts, for a big pool)."""
        now = self.clock()
        counts = self.counts()
        ready = counts.get("ready", 0)
        header = f"pool {pool_id}: {ready}/{len(self.rows)} nodes ready ({now - self.started:.1f} s)"
        if len(self.rows) > DETAIL_LIMIT:
            body = ["  " + " · ".join(f"{state} {n}" for state, n in counts.items())]
            failed = [(i, row) for i, row in enumerate(self.rows) if row.state == "failed"]
            body += [f"  node {i}: failed: {row.detail}" for i, row in failed[:5]]
            if len(failed) > 5:
                body.append(f"  ... and {len(failed) - 5} more failed")
            return [header, *body]
        width = len(str(len(self.rows) - 1))
        return [header, *(f"  node {i:>{width}}  {self._describe(row, now)}" for i, row in enumerate(self.rows))]

    @staticmethod
    def _describe(row: _Row, now: float) -> str:
        text = row.state
        if row.provider_state and row.state in ("provisioning", "running"):
            text += f" ({row.provider_state})"
        if row.detail and row.state not in ("ready",):
            text += f": {row.detail}"
        elif row.detail and row.state == "ready":
            text += f" ({row.detail})"
        if row.state not in _DONE:
            text += f"  {now - row.since:.0f}s"
        return text


def wants_display(setting: bool | None, stream: TextIO | None = None) -> bool:
    """Whether to draw: `setting` when given (Pool(progress=...)), else only on a terminal."""
    if setting is not None:
        return setting
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ProvisioningDisplay:
    """Draws a `ProvisioningView` on stderr with rich while the pool starts (`run` in a task; `stop`
    when the start is over). Leaves one summary line behind; draws nothing when rich is missing."""

    def __init__(self, pool_id: str, nodes: int, *, stream: TextIO | None = None) -> None:
        self.pool_id = pool_id
        self.view = ProvisioningView(nodes)
        self.stream = stream if stream is not None else sys.stderr
        self._live: Any = None
        self._events: EventStream | None = None

    async def run(self, events: EventStream) -> None:
        """Follow `events` (a subscription to the pool's log) until the view is done or `stop`."""
        self._events = events
        try:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text
        except ImportError:  # rich is a dependency; without it the log lines are all there is
            return
        console = Console(file=self.stream, force_terminal=True)
        self._text = Text
        # redrawn on each change, and twice a second by rich's thread so the seconds keep counting
        self._live = Live(console=console, get_renderable=self._render, auto_refresh=True, refresh_per_second=2,
                          transient=True, redirect_stdout=False, redirect_stderr=False)
        self._live.start(refresh=True)
        last = 0.0
        try:
            async for event in events:  # the display must never break the pool: errors are logged below
                if self.view.apply(event):
                    now = time.monotonic()
                    # every change at small scale; at most 10 redraws a second for a big pool
                    if len(self.view.rows) <= DETAIL_LIMIT or now - last > 0.1 or self.view.done:
                        self._live.refresh()
                        last = now
                if self.view.done:
                    break
        except Exception:  # noqa: BLE001 - a drawing problem is not the pool's problem
            log.debug("provisioning display failed", exc_info=True)
        finally:
            self._finish()

    async def stop(self) -> None:
        """The start is over (ready, failed or cancelled): end the subscription and the drawing.
        The events that arrived before this and that `run` has not taken yet (its task had no turn
        since: the start's last node became ready just now) are applied first, so the last frame and
        the summary left on the screen show every node's final state."""
        if self._events is not None:
            changed = False
            for event in self._events.take_nowait():
                changed = self.view.apply(event) or changed
            if changed and self._live is not None:
                self._live.refresh()
            await self._events.aclose()
        self._finish()

    def _render(self) -> Any:
        return self._text("\n".join(self.view.lines(self.pool_id)))

    def _finish(self) -> None:
        live, self._live = self._live, None
        if live is None:
            return
        live.stop()
        counts = self.view.counts()
        summary = ", ".join(f"{n} {state}" for state, n in counts.items())
        try:
            self.stream.write(f"skyhive: pool {self.pool_id}: {summary} "
                              f"({time.monotonic() - self.view.started:.1f} s)\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
