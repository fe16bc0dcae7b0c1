"""gather_or_first_failure: every result, or the first failure — and workers lost together reported together."""

from __future__ import annotations

import asyncio

from skyhive.errors import WorkerLost
from skyhive.runtime.actors.gather import gather_or_first_failure


class _Ok:
    ok = True


class _Failed:
    ok = False


def test_all_succeed_then_nothing_failed() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(3)]
        for fut in futs:
            loop.call_soon(fut.set_result, _Ok())
        return await gather_or_first_failure(futs)

    assert asyncio.run(main()) == []


def test_a_task_error_returns_at_once_without_waiting_for_the_rest() -> None:
    async def main() -> tuple[list[int], bool]:
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(3)]
        loop.call_soon(futs[1].set_result, _Failed())  # futs[0] and futs[2] never finish
        failed = await gather_or_first_failure(futs)
        return failed, futs[0].done()

    assert asyncio.run(main()) == ([1], False)


def test_losses_that_follow_the_first_one_closely_are_reported_with_it() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(4)]  # futs[3] never finishes
        loop.call_soon(futs[2].set_exception, WorkerLost("lost", node=2))
        loop.call_later(0.005, futs[0].set_exception, WorkerLost("lost", node=0))
        loop.call_later(0.01, futs[1].set_result, _Ok())
        failed = await gather_or_first_failure(futs)
        for fut in futs:
            if fut.done() and not fut.cancelled():
                fut.exception()
        return failed

    assert asyncio.run(main()) == [2, 0]
