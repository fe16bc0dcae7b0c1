"""Ctrl-C in a script that holds a pool: one short line, not chained tracebacks.

A pool left because of Ctrl-C (`KeyboardInterrupt` through `with sky.Pool(...)`, or the cancellation
`anyio.run`/`asyncio.run` deliver on SIGINT) has by then cancelled its calls on the nodes and closed; the
traceback Python would print next (two or three chained ones, through the event loop's internals) says
nothing the user can act on. So the first pool a process enters wraps `sys.excepthook`: an uncaught
`KeyboardInterrupt` after such a pool closed prints one line naming the pools; any other exception,
or SKYHIVE_TRACEBACK=full, goes to the hook that was there before. A task's error (one with a
`remote_traceback`) goes there without skyhive's own frames in its local half: the user's call line,
then the remote traceback in its notes (issue 39 point 6). The exit status stays Python's for
Ctrl-C (killed by SIGINT: 130 in a shell). An interrupt the script catches itself prints nothing.

A blocking call (`with sky.Pool(...) as pool: pool.broadcast(...)`) holds Ctrl-C back while it hands
its work to the pool's event loop thread (`deferred_sigint`): the `KeyboardInterrupt` is raised only
where the call waits for its result (or at once after the hand-over, when Ctrl-C came during it), so
the call is always known and cancelled — on the nodes too — before the script sees the interrupt. A
script that catches it goes on with a pool that works: the next call runs (docs/design.md). Without
this, Ctrl-C could land inside the hand-over and leave the call running unseen (the next call queued
behind it), or inside the portal's machinery.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from .common.remote_errors import full_tracebacks, without_skyhive_frames

__all__ = ["install_hook", "closed_by_interrupt", "cancel_in_flight", "deferred_sigint", "SigintGuard"]

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
    if getattr(exc, "remote_traceback", None) is not None and not full_tracebacks():
        tb = without_skyhive_frames(tb)  # the pool's call and dispatch: nothing the user wrote
        exc.__traceback__ = tb
    (_previous or sys.__excepthook__)(exc_type, exc, tb)


class SigintGuard:
    """Ctrl-C held back by `deferred_sigint`: raised by `wait` (at once if it came before), never
    elsewhere in the block."""

    __slots__ = ("pending", "waiting")

    def __init__(self) -> None:
        self.pending = False  # Ctrl-C came while not waiting: raised by the next `wait` or at the block's end
        self.waiting = False

    def __repr__(self) -> str:
        return f"<SigintGuard pending={self.pending} waiting={self.waiting}>"

    def handle(self, signum: int, frame: Any) -> None:
        if self.waiting:
            self.waiting = False
            raise KeyboardInterrupt
        self.pending = True

    def wait(self, fn: Callable[[], Any]) -> Any:
        """`fn()` (a wait), which Ctrl-C interrupts with `KeyboardInterrupt`; raised at once when Ctrl-C
        came since the block began."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
        self.waiting = True
        try:
            return fn()
        finally:
            self.waiting = False


@contextmanager
def deferred_sigint() -> Iterator[SigintGuard | None]:
    """In the main thread with Python's own SIGINT handler: a `SigintGuard` for the block (SIGINT
    held back but where `guard.wait` waits; one left pending at the block's end is raised then); else
    None (another thread, or a handler of the script's own: nothing changes)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield None
        return
    guard = SigintGuard()
    signal.signal(signal.SIGINT, guard.handle)
    try:
        yield guard
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if guard.pending:  # (came after the last wait: the block's work is done, the interrupt is the script's)
        raise KeyboardInterrupt
