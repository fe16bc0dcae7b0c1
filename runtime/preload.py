"""`preload()`: import the client's runtime now rather than at the first pool's start.

`import skyhive` is lazy, and so is the pool: a plain Local pool starts its workers when it is entered and
imports the runtime (the pool and node actors, the event log and state, the output router, the
transports) while they start, so a short script overlaps the two (docs/startup.md). A program that opens
pools later in its life — a service embedding a pool in its asyncio app, a notebook — can pay that import
once, at a moment of its choosing, so its first pool's start does not: ``sky.preload()`` at start-up. It
returns at once when the runtime is already imported, and changes nothing else.
"""

from __future__ import annotations

import importlib

__all__ = ["preload", "RUNTIME_MODULES"]

#: `sky.Pool`, `sky.Local`, and what a plain pool's start and close import (`Pool._enter`/`__aexit__`, the
#: blocking layer)
RUNTIME_MODULES = (
    "skyhive.runtime.pool", "skyhive.providers.local", "skyhive.runtime.actors.pool_actor", "skyhive.runtime.interrupt", "skyhive.runtime.output.progress",
    "skyhive.runtime.collections.store", "skyhive.runtime.common.active", "skyhive.runtime.blocking",
    "skyhive.runtime.kinds.local.transport", "skyhive.runtime.kinds.local.shell", "skyhive.runtime.bootstrap.node",
    "skyhive.runtime.onnode.early", "skyhive.runtime.actors.worker_argv", "skyhive.providers.held_warnings",
    "skyhive.providers.local_early",
)


def preload() -> None:
    """Import the client's runtime now (what a pool's start would import: ~30–60 ms of CPU), so that the
    first pool started later does not pay it. Optional: every pool imports what it needs."""
    for name in RUNTIME_MODULES:
        importlib.import_module(name)
