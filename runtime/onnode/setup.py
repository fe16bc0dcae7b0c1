"""What the client and a worker process agree on: versions in the handshake, the plugin setup sent
before the first task, and the size of the function cache both sides keep (a count and bytes).

Small on purpose: the client imports it without importing the worker daemon, and the worker
unpickles `WorkerSetup` from here.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["TASK_THREADS_ENV", "WorkerSetup", "python_version", "skyhive_version", "FN_CACHE_LIMIT", "FN_CACHE_BYTES"]

#: Functions a worker keeps by id. The client forgets what it sent at the same count, so both sides
#: clear together and the client re-sends a function's bytes after that.
FN_CACHE_LIMIT = 4096

#: ... and at most this many bytes of them, counted as their pickles' sizes (what the client sent): a
#: worker drops its oldest loaded functions to hold a new one past it, so that a loop which makes a
#: distinct large function each call (a closure over a different big array) does not grow its memory
#: without bound. The client counts the bytes of the distinct functions it sent the same way: past
#: this sum a large function's bytes go with each of its tasks again (see `WorkerChannel.carries_buffers`).
FN_CACHE_BYTES = 256 << 20


class WorkerSetup:
    """Sent once, before any task: plugin hooks to enter for the worker's lifetime."""

    def __init__(self, plugins: list[Any], env: dict[str, str]) -> None:
        self.plugins = plugins
        self.env = env


def python_version() -> str:
    """This interpreter's version, "3.11.7" (client and worker must share major.minor)."""
    return "%d.%d.%d" % sys.version_info[:3]


def skyhive_version() -> str:
    """skyhive's version: the package's own `__version__` (pyproject's `version`, which a test ties to it).

    Not read from the distribution's metadata: that imports importlib.metadata (zipfile, email, csv)
    and parses METADATA with an email parser, in the client and in every worker process — the
    largest part of a worker's start after Python itself."""
    # (`skyhive`, the package, is imported before any of its modules, this one included)
    return str(getattr(sys.modules.get("skyhive"), "__version__", "0+unknown"))


#: The environment variable that starts a worker process with N task threads (`sky.Worker`'s thread
#: executor; the worker side is `runtime/worker/threaded.py`).
TASK_THREADS_ENV = "SKYHIVE_TASK_THREADS"
