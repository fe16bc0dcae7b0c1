"""The names a user calls: `sky.dict`, `sky.set`, `sky.counter`, `sky.queue`, `sky.barrier`, `sky.lock`
(Skyward's spellings; see `proxies.py` and docs/collections.md)."""

from __future__ import annotations

from .proxies import Barrier, Counter, Lock, Queue, SharedDict, SharedSet

__all__ = ["dict", "set", "counter", "queue", "barrier", "lock"]


def dict(name: str, *, consistency: str = "eventual") -> SharedDict:  # noqa: A001 - Skyward's name
    """The pool's shared dict `name` (created on first use)."""
    return SharedDict(name, consistency=consistency)


def set(name: str, *, consistency: str = "eventual") -> SharedSet:  # noqa: A001 - Skyward's name
    """The pool's shared set `name` (created on first use)."""
    return SharedSet(name, consistency=consistency)


def counter(name: str, *, consistency: str = "eventual") -> Counter:
    """The pool's shared counter `name` (0 on first use)."""
    return Counter(name, consistency=consistency)


def queue(name: str, *, consistency: str = "eventual") -> Queue:
    """The pool's shared FIFO queue `name` (empty on first use)."""
    return Queue(name, consistency=consistency)


def barrier(name: str, n: int, *, consistency: str = "eventual", timeout: float | None = None) -> Barrier:
    """The pool's barrier `name` for `n` participants (every caller must give the same `n`)."""
    return Barrier(name, n, consistency=consistency, timeout=timeout)


def lock(name: str, *, consistency: str = "eventual") -> Lock:
    """The pool's lock `name`."""
    return Lock(name, consistency=consistency)
