"""Warnings a provider raises while a pool starts (a Local/SSH node lacking the accelerator asked
for), held and shown at the user's own `with sky.Pool(...)` line: they are raised on the pool's event
loop (for a blocking pool, in another thread), where no frame of the user's is on the stack.

`Pool.__aenter__` holds them (`held_warnings`) and shows them in the calling thread (`warn_held`);
`accelerators.warn_missing` holds its warning when a pool is starting (`hold`). Kept apart from
`accelerators.py`, which a plain pool does not import (it imports subprocess/shutil on load).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import warnings
from collections.abc import Iterator

__all__ = ["held_warnings", "hold", "warn_held"]


class _Held(list[tuple[str, type[Warning]]]):
    """The warnings held while a pool starts; closed once it has started, so that a node launched
    later (a replacement, in a task started meanwhile) warns at once."""

    open = True


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar("skyhive_held_warnings", default=None)


@contextlib.contextmanager
def held_warnings() -> Iterator[list[tuple[str, type[Warning]]]]:
    """Hold the warnings given to `hold` in this context (and the tasks it starts)."""
    held = _Held()
    token = _HELD.set(held)
    try:
        yield held
    finally:
        held.open = False
        _HELD.reset(token)


def hold(message: str, category: type[Warning]) -> bool:
    """Keep `message` for `warn_held` when a pool is starting (True), else False (warn it yourself)."""
    held = _HELD.get()
    if held is None or not held.open:
        return False
    held.append((message, category))
    return True


def warn_held(held: list[tuple[str, type[Warning]]]) -> None:
    """Show each held warning as one of the innermost calling frame that is not skyhive's own (the
    user's `with sky.Pool(...)` line), in the calling thread; the list is emptied."""
    if not held:
        return
    frame = sys._getframe(1)
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] == "skyhive":
        frame = frame.f_back
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    for message, category in held:
        warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                               module=frame.f_globals.get("__name__", "<string>"), registry=registry,
                               module_globals=frame.f_globals)
    held.clear()
