"""How a detached (socket-serving) worker leaves, whoever ends it: the server before a worker ran, or
the worker itself after `Shutdown`, a lost client or SIGTERM."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import NoReturn

from ..common.leaving import run_before_leaving, stop_tasks_first

__all__ = ["leave"]


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
