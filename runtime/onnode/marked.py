"""The mark `@sky.compute` leaves on a function, as worker-side decorators see it.

A worker-side decorator (`@sky.stdout`, `@sky.silent`, `@sky.integrations.torch`) must wrap the function
that runs on the node, so it goes below `@sky.compute`; above it, it would wrap the call made on the
client and silently do nothing on the node. They check that here, against `PoolFunction` — the base
class of `runtime/compute.py`'s `ComputeFunction` — so that on-node code never imports the client's
`compute` module (the folder layers: `tests/test_import_graph.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PoolFunction", "refuse_above_compute"]


class PoolFunction:
    """A function marked to run on a pool (`@sky.compute`); `__skyhive_fn__` is the function itself."""

    __skyhive_fn__: Callable[..., Any]


def refuse_above_compute(fn: Any, decorator: str) -> None:
    """Raise `TypeError` when `decorator` (a worker-side one: `@sky.integrations.torch`, `@sky.stdout`)
    was put above `@sky.compute`: it would then wrap the pending call made here, not the function that
    runs on the node, and silently do nothing there."""
    if isinstance(fn, PoolFunction):
        name = getattr(fn.__skyhive_fn__, "__name__", "fn")
        raise TypeError(
            f"{decorator} goes below @sky.compute, not above it: it must wrap the function that runs on the "
            f"node, and here it wraps the @sky.compute of {name!r}. Write:\n    @sky.compute\n    {decorator}\n"
            f"    def {name}(...): ...")
