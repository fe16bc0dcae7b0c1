"""How a detached (socket-serving) worker leaves, whoever ends it: the server before a worker ran, or
the worker itself after `Shutdown`, a lost client or SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import NoReturn

__all__ = ["leave", "before_leaving", "run_before_leaving", "stop_tasks_first"]

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
    from ..common.procfs import group_members

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


def leave(path: str, code: int, say: Callable[[str], None], *, stop_tasks: bool = True) -> NoReturn:
    """Exit with `code`: the exit status written next to the socket (`path.exit`, for the client's
    `wait`), the socket removed, and the process group (ourselves included) killed when we lead it,
    so nothing a task started outlives the worker. What `before_leaving` registered runs first (the
    tasks' processes told to stop before it, `stop_tasks_first`, unless `stop_tasks` is false: SIGTERM
    came to the whole group, and a second one could cut short a job's own handler)."""
    if stop_tasks:
        stop_tasks_first()
    run_before_leaving(say)
    try:
        fd = os.open(path + ".exit", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{code}\n")
    except OSError:
        pass
    try:
        os.unlink(path)
    except OSError:
        pass
    say(f"exiting ({code})")
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    os._exit(code)
