"""The active pool: `f(x) >> sky` / `f(x) @ sky` inside a `with pool:` block, as Skyward spells it.

    import skyhive as sky

    with sky.ComputePool(provider=sky.Local(), nodes=2) as pool:
        train(1) >> sky          # the same as `train(1) >> pool`
        train(1) @ sky           # every worker
        train(1) > sky.sky       # `sky.sky` (Skyward's singleton) works too

Entering a pool (`with` or `async with`) makes it the active one in this context (a `ContextVar`:
this thread, or this async task and the tasks it starts); leaving it makes the one before active again,
so nested pools resolve to the innermost. `resolve(target)` is what every operator of a pending call
does with its right-hand side: the `skyhive` module or `sky.sky` becomes the active pool; anything else
is returned as it is. With no active pool it is a `RuntimeError` saying how to open one.
"""

from __future__ import annotations

import types
from contextvars import ContextVar, Token
from typing import Any

__all__ = ["Sky", "sky", "enter", "leave", "current", "resolve"]

_active: ContextVar[Any] = ContextVar("skyhive_active_pool", default=None)


class Sky:
    """`sky.sky`: stands for the active pool on the right of `>>`, `@` and `>` (Skyward's singleton)."""

    __slots__ = ()

    def __repr__(self) -> str:
        pool = _active.get()
        return f"<sky: active pool {pool!r}>" if pool is not None else "<sky: no active pool>"


sky = Sky()


def enter(pool: Any) -> Token[Any]:
    """Make `pool` the active pool in this context; the token `leave` takes."""
    return _active.set(pool)


def leave(token: Token[Any] | None) -> None:
    """Undo `enter` (a token from another context, as a pool left from another thread, is ignored)."""
    if token is None:
        return
    try:
        _active.reset(token)
    except ValueError:  # made in another context: that context's value goes with it
        pass


def current() -> Any:
    """The active pool, or None."""
    return _active.get()


def resolve(target: Any) -> Any:
    """`target` itself, or the active pool when `target` is the `skyhive` module or `sky.sky`."""
    if target is sky or (isinstance(target, types.ModuleType) and target.__name__ == "skyhive"):
        pool = _active.get()
        if pool is None:
            raise RuntimeError("`>> sky` / `@ sky` need an active pool: use them inside "
                               "`with sky.Pool(...) as pool:` (or `async with`), or name the pool: `>> pool`")
        return pool
    return target
