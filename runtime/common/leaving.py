"""What runs before a worker process exits, however it leaves: its `leave` (SIGTERM, `Shutdown`, its client
gone) or a pipe worker's `abandon` (runtime/worker/). Here, below both the worker and what registers
(a cached bucket mount's last upload, runtime/storage/node.py), so neither imports the other.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from .procfs import group_members

__all__ = ["before_leaving", "run_before_leaving", "stop_tasks_first"]

#: What runs before the process exits however it leaves (`before_leaving`): a cached bucket mount's
#: last upload (runtime/storage/node.py), so `skyhive down`, `stop`, autostop or a lost client lose no
#: file written just before.
_BEFORE: list[Callable[[], None]] = []
#: Held while they run: another thread leaving meanwhile (a pipe worker's main thread ending as its
#: client went away, while the flusher thread runs them) waits for them instead of exiting under them.
_RUNNING = threading.RLock()


def before_leaving(fn: Callable[[], None]) -> None:
    """Have `fn` run (once, in registration order) before this worker exits: `leave`, or a pipe worker's
    `abandon`. It must bound its own time: the one ending the worker SIGKILLs it after a grace period."""
    if fn not in _BEFORE:
        _BEFORE.append(fn)


def stop_tasks_first() -> None:
    """Before `run_before_leaving`, when something is registered: SIGTERM the other processes of the
    group this worker leads (what its tasks started), so they stop writing (a job that traps SIGTERM
    saves its last checkpoint) before the last upload. This process is not signalled."""
    if not _BEFORE:
        return
    try:
        if os.getpgid(0) != os.getpid():
            return
    except OSError:
        return
    for pid in group_members(os.getpid(), but=os.getpid()):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def run_before_leaving(say: Callable[[str], None]) -> None:
    """Run (and forget) what `before_leaving` registered; a failure is said, never raised. A call while
    another thread runs them returns once that one is done."""
    with _RUNNING:
        while _BEFORE:
            fn = _BEFORE.pop(0)
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - leaving anyway
                say(f"before leaving: {fn.__qualname__} failed: {type(exc).__name__}: {exc}")
