"""How a detached (socket-serving) worker leaves, whoever ends it: the server before a worker ran, or
the worker itself after `Shutdown`, a lost client or SIGTERM."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import NoReturn

__all__ = ["leave"]


def leave(path: str, code: int, say: Callable[[str], None]) -> NoReturn:
    """Exit with `code`: the exit status written next to the socket (`path.exit`, for the client's
    `wait`), the socket removed, and the process group (ourselves included) killed when we lead it,
    so nothing a task started outlives the worker."""
    try:
        with open(path + ".exit", "w") as fh:
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
