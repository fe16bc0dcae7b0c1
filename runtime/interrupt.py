"""Ctrl-C in a script that holds a pool: one short line, not chained tracebacks.

A pool left because of Ctrl-C (`KeyboardInterrupt` through `with sky.Pool(...)`, or the cancellation
`anyio.run`/`asyncio.run` deliver on SIGINT) has by then cancelled its calls on the nodes and closed; the
traceback Python would print next (two or three chained ones, through the event loop's internals) says
nothing the user can act on. So the first pool a process enters wraps `sys.excepthook`: an uncaught
`KeyboardInterrupt` after such a pool closed prints one line naming the pools; any other exception,
or SKYHIVE_TRACEBACK=full, goes to the hook that was there before. The exit status stays Python's for
Ctrl-C (killed by SIGINT: 130 in a shell). An interrupt the script catches itself prints nothing.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any

from .common.remote_errors import full_tracebacks

__all__ = ["install_hook", "closed_by_interrupt", "cancel_in_flight"]

_lock = threading.Lock()
_closed: list[str] = []  # pools closed by Ctrl-C or cancellation, in order
_previous: Any = None


def closed_by_interrupt(pool_id: str) -> None:
    """Record that pool `pool_id` closed because of Ctrl-C or a cancellation."""
    with _lock:
        if pool_id not in _closed:
            _closed.append(pool_id)


def cancel_in_flight(runtime: Any) -> int:
    """Cancel every task still running on the pool's workers (a pool left by Ctrl-C: `pool.submit`
    futures and calls of other threads included), each `Cancel` enforced after `cancel_grace`; how many.
    The pool's teardown then finds its workers idle instead of waiting for them to finish."""
    count = 0
    for node in runtime.nodes:
        for channel in node.channels:
            if channel is None:
                continue
            for task_id in list(channel.calls):
                channel.cancel(task_id, grace=runtime.settings.cancel_grace)
                count += 1
    return count


def install_hook() -> None:
    """Wrap `sys.excepthook` once per process (the wrapper hands everything but our case on)."""
    global _previous
    with _lock:
        if _previous is not None:
            return
        _previous = sys.excepthook
        sys.excepthook = _hook


def _hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    with _lock:
        pools = list(_closed)
    if issubclass(exc_type, KeyboardInterrupt) and pools and not full_tracebacks():
        named = ", ".join(pools[-3:]) + (f" and {len(pools) - 3} more" if len(pools) > 3 else "")
        print(f"skyhive: interrupted (Ctrl-C): pool{'s' if len(pools) > 1 else ''} {named} stopped, its calls "
              "cancelled on the nodes (SKYHIVE_TRACEBACK=full shows the traceback)", file=sys.stderr, flush=True)
        return
    (_previous or sys.__excepthook__)(exc_type, exc, tb)
