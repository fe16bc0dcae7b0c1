"""`retries=N`: a call whose worker was lost is run again; the function's own exception is not (unless
named in `retry_on`); the caller sees how many attempts were made. Real worker processes, killed
with SIGKILL in the middle of the task."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import skyhive as sky

pytestmark = pytest.mark.anyio


def die_once(marker: str, value: int, node: int | None = None) -> int:
    """Kill this worker the first time (the marker file does not exist yet), on `node` if given;
    return `value * 2` after."""
    path = Path(marker)
    if not path.exists() and (node is None or sky.instance_info().node == node):
        path.write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return value * 2


def always_die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def count_and_raise(counter: str) -> None:
    path = Path(counter)
    path.write_text(str(int(path.read_text() or "0") + 1) if path.exists() else "1")
    raise ValueError("the function's own error")


def fails_twice(counter: str) -> str:
    path = Path(counter)
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    if n < 3:
        raise ConnectionError(f"flaky service, try {n}")
    return f"ok after {n}"


async def test_run_is_retried_after_the_worker_is_lost(tmp_path):
    async with sky.Pool(provider=sky.Local(), nodes=1, restart_backoff=0.05) as pool:
        assert await pool.run(die_once, str(tmp_path / "m"), 21, retries=1) == 42
        assert pool.statistics()["retries"] == 1
        assert pool.statistics()["tasks_lost"] == 1


async def test_without_retries_a_lost_worker_fails_the_call(tmp_path):
    async with sky.Pool(provider=sky.Local(), nodes=1, restart_backoff=0.05) as pool:
        with pytest.raises(sky.WorkerLost) as info:
            await pool.run(die_once, str(tmp_path / "m"), 1)
        assert not hasattr(info.value, "attempts")
        assert pool.statistics()["retries"] == 0
        assert await pool.run(die_once, str(tmp_path / "m"), 2) == 4  # the restarted worker serves


async def test_the_functions_own_error_is_not_retried(tmp_path):
    counter = tmp_path / "count"
    async with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        with pytest.raises(ValueError, match="own error") as info:
            await pool.run(count_and_raise, str(counter), retries=3)
    assert counter.read_text() == "1"
    assert not hasattr(info.value, "attempts")


async def test_retry_on_names_the_errors_worth_another_attempt(tmp_path):
    async with sky.Pool(provider=sky.Local(), nodes=1) as pool:
        assert await pool.run(fails_twice, str(tmp_path / "c"), retries=2, retry_on=ConnectionError) == "ok after 3"
        assert pool.statistics()["retries"] == 2
        with pytest.raises(ConnectionError, match="try 2") as info:  # 2 attempts: the 1st and 1 retry
            await pool.run(fails_twice, str(tmp_path / "d"), retries=1, retry_on=(ConnectionError,))
    assert info.value.attempts == 2
    assert any("each of 2 attempts" in note for note in info.value.__notes__)


async def test_when_every_attempt_loses_its_worker_the_last_error_says_how_many(tmp_path):
    async with sky.Pool(provider=sky.Local(), nodes=1, restart_backoff=0.05, max_restarts=10) as pool:
        with pytest.raises(sky.WorkerLost) as info:
            await pool.run(always_die, retries=2)
        assert info.value.attempts == 3
        assert pool.statistics()["retries"] == 2


async def test_broadcast_and_map_retry_lost_work(tmp_path):
    async with sky.Pool(provider=sky.Local(), nodes=2, restart_backoff=0.05) as pool:
        assert await pool.broadcast(die_once, str(tmp_path / "b"), 5, 1, retries=1) == [10, 10]
        assert pool.statistics()["retries"] == 1  # the whole broadcast ran again
        marker = str(tmp_path / "m")
        assert await pool.map(lambda x: die_once(marker, x, 0), range(20), retries=1) == [2 * x for x in range(20)]
        # the batch that killed its worker ran again, and so did a second batch in flight on it, if any
        assert pool.statistics()["retries"] in (2, 3)


async def test_the_sugar_spells_retries_on_the_function_or_the_call(tmp_path):
    @sky.compute(retries=1)
    def once(marker: str, v: int) -> int:
        return die_once(marker, v)

    plain = sky.compute(die_once)
    async with sky.Pool(provider=sky.Local(), nodes=1, restart_backoff=0.05) as pool:
        assert await (once(str(tmp_path / "a"), 3) >> pool) == 6
        assert await (plain(str(tmp_path / "b"), 4).with_retries(1) >> pool) == 8
        with pytest.raises(sky.WorkerLost):
            await (plain(str(tmp_path / "c"), 4) >> pool)
        # the user's own keyword named `retries` reaches the function untouched
        assert await (sky.compute(lambda retries: retries)(retries=7) >> pool) == 7


def test_bad_retry_values_are_refused_naming_them():
    with pytest.raises(ValueError, match="retries=-1"):
        sky.compute(retries=-1)
    with pytest.raises(TypeError, match="retry_on"):
        sky.compute(die_once)("m", 1).with_retries(1, on=("ValueError",))  # type: ignore[arg-type]


async def test_closing_while_a_worker_restarts_does_not_wait_out_stop_timeout(tmp_path):
    """A worker still starting (its restart under way) when the pool closes is ended at once: before,
    it never heard the Shutdown and the close waited the whole `stop_timeout`."""
    import anyio

    from tests.procs import wait_gone, worker_pids

    name = f"restarting-{os.getpid()}"
    async with sky.Pool(provider=sky.Local(), nodes=1, name=name, restart_backoff=0.05,
                        stop_timeout=120) as pool:
        with pytest.raises(sky.WorkerLost):
            await pool.run(die_once, str(tmp_path / "m"), 1)
        await anyio.sleep(0.08)  # the supervisor is starting the replacement now
        closing = time.monotonic()
    # not a speed figure: the close is shielded, so only the clock tells whether it sat out stop_timeout
    assert time.monotonic() - closing < 60
    assert wait_gone(worker_pids(name), timeout=3) == set()
