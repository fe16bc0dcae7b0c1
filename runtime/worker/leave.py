"""How a detached (socket-serving) worker leaves, whoever ends it: the server before a worker ran, or
the worker itself after `Shutdown`, a lost client or SIGTERM."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import NoReturn

__all__ = ["leave", "before_leaving", "run_before_leaving"]

#: What runs before the process exits however it leaves (`before_leaving`): a cached bucket mount's
#: last upload (runtime/storage/node.py), so `skyhive down`, `stop`, autostop or a lost client lose no
#: file written just before.
_BEFORE: list[Callable[[], None]] = []


def before_leaving(fn: Callable[[], None]) -> None:
    """Have `fn` run (once, in registration order) before this worker exits: `leave`, or a pipe worker's
    `abandon`. It must bound its own time: the one ending the worker SIGKILLs it after a grace period."""
    if fn not in _BEFORE:
        _BEFORE.append(fn)


def run_before_leaving(say: Callable[[str], None]) -> None:
    """Run (and forget) what `before_leaving` registered; a failure is said, never raised."""
    while _BEFORE:
        fn = _BEFORE.pop(0)
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - leaving anyway
            say(f"before leaving: {fn.__qualname__} failed: {type(exc).__name__}: {exc}")


def leave(path: str, code: int, say: Callable[[str], None]) -> NoReturn:
    """Exit with `code`: the exit status written next to the socket (`path.exit`, for the client's
    `wait`), the socket removed, and the process group (ourselves included) killed when we lead it,
    so nothing a task started outlives the worker. What `before_leaving` registered runs first."""
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
