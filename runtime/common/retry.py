"""Re-running a call whose worker was lost: `retries=N` on `run`, `broadcast`, `map` and the sugar.

A call is re-run only when the attempt failed with `WorkerLost` (the worker died or stopped answering
while it ran the task) — never after the function's own exception, unless the caller names that
exception's type in `retry_on`, and never after a timeout or a cancellation. Each new attempt goes to
a worker picked anew (the restarted one, or another node's), after a short backoff.

How many attempts a call took is visible: the exception that ends a retried call carries
`exc.attempts` (and a note saying so), and `pool.statistics()["retries"]` counts every re-run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar


from ...errors import WorkerLost

log = logging.getLogger("skyhive.pool")

__all__ = ["Retries", "NO_RETRIES", "retries_of", "with_retries"]

T = TypeVar("T")

#: Waits between attempts, doubling from this up to `_MAX_DELAY` seconds.
_FIRST_DELAY = 0.05
_MAX_DELAY = 2.0


@dataclass(frozen=True, slots=True)
class Retries:
    """How often a call may be re-run (`count`), and after which failures besides `WorkerLost` (`on`)."""

    count: int = 0
    on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise ValueError(f"retries={self.count!r}: need a whole number >= 0")
        for kind in self.on:
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                raise TypeError(f"retry_on={self.on!r}: need exception classes (subclasses of Exception)")

    def covers(self, exc: BaseException) -> bool:
        """Whether an attempt that raised `exc` may be re-run."""
        return isinstance(exc, WorkerLost) or (bool(self.on) and isinstance(exc, self.on))


NO_RETRIES = Retries()


def retries_of(retries: int, retry_on: Any) -> Retries:
    """The `Retries` for a call's `retries=` and `retry_on=` (a class or a tuple of classes)."""
    if retries == 0 and not retry_on:
        return NO_RETRIES
    on = retry_on if isinstance(retry_on, tuple) else ((retry_on,) if retry_on else ())
    return Retries(retries, on)


async def with_retries(attempt: Callable[[], Awaitable[T]], retries: Retries, *, what: str,
                       on_retry: Callable[[], None]) -> T:
    """Await `attempt()`; while it fails in a way `retries` covers and attempts remain, run it again.

    The exception of the last attempt is raised, with `attempts` set when there was more than one.
    `on_retry()` is called before each re-run (the pool counts them).
    """
    if retries.count == 0:
        return await attempt()
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt()
        except Exception as exc:
            if tries > retries.count or not retries.covers(exc):
                if tries > 1:
                    exc.attempts = tries  # type: ignore[attr-defined]
                    exc.add_note(f"(skyhive: {what} failed on each of {tries} attempts)")
                raise
            log.warning("%s: attempt %d of %d failed (%s: %s); running it again", what, tries,
                        retries.count + 1, type(exc).__name__, exc)
            on_retry()
            import anyio  # (imported with the first retry: `sky.Pool` does not import it)

            await anyio.sleep(min(_FIRST_DELAY * 2 ** (tries - 1), _MAX_DELAY))
