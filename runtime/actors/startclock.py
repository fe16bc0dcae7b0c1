"""The pool's start deadlines, and how an environment build lifts them.

A pool's start (and a replacement node's) is bounded by `Settings.start_timeout` (120 s): enough to
launch, connect and start workers, far too little to build an environment (a pinned torch is
minutes). A build has a bound of its own, `Settings.build_timeout`, and fails naming its step when it
runs out. So while a node builds, the running start deadlines are pushed out past the build's own
bound, and when the build ends, what follows it gets a fresh `start_timeout`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import anyio

from ..common.settings import Settings

__all__ = ["StartClocks"]


class StartClocks:
    """The start deadlines running now (the pool's start, replacements being started)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._scopes: set[anyio.CancelScope] = set()

    @contextlib.contextmanager
    def bound(self) -> Iterator[anyio.CancelScope]:
        """`anyio.fail_after(start_timeout)` that a build can lift; raises `TimeoutError` when out."""
        with anyio.fail_after(self.settings.start_timeout) as scope:
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """Around a node's environment build (bounded by `build_timeout` itself): no start deadline
        runs out under it, and what comes after it has `start_timeout` again."""
        self._extend(self.settings.build_timeout + self.settings.start_timeout)
        try:
            yield
        finally:
            self._extend(self.settings.start_timeout)

    def _extend(self, seconds: float) -> None:
        until = anyio.current_time() + seconds
        for scope in self._scopes:
            scope.deadline = max(scope.deadline, until)
