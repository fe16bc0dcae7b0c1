"""The event log and `pool.events()` have bounds: the log keeps at most `log_output_limit` characters
of task output (then a marker), while `pool.output()` and the terminal still get everything; an
events() reader is registered when created, and one that falls too far behind is detached with
`EventsStalled` instead of growing without limit."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import EventLog, read_log
from skyhive.runtime.events.types import OutputCapped, OutputChunk, PoolStarted, TaskSubmitted

pytestmark = pytest.mark.anyio
LIMIT = 300
MB = 1000 * 1000


def spew(total, line=1000):
    """Print `total` characters of stdout in lines of `line` characters (newline included)."""
    row = "y" * (line - 1) + "\n"
    block = row * 1000
    for _ in range(total // len(block)):
        sys.stdout.write(block)
    sys.stdout.write(row * ((total % len(block)) // line))
    return total


def rss_bytes():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


# ---- the log's output cap ----------------------------------------------------------------------------


def test_output_past_the_limit_is_cut_with_a_marker_and_replay_matches(tmp_path):
    path = tmp_path / "pool.jsonl"
    log = EventLog("pool-cap", path=path, output_limit=100)
    log.emit(PoolStarted, provider="local", nodes=1, processes_per_node=1, pid=1, host="here")
    for i in range(10):
        log.log_output(task=1, node=0, local_rank=0, stream="stdout", text=f"{i:02d}" * 15)  # 30 characters
    live = log.state
    log.close()
    events = list(read_log(path))
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    assert "".join(c.text for c in chunks) == "".join(f"{i:02d}" * 15 for i in range(4))[:100]
    assert [len(c.text) for c in chunks] == [30, 30, 30, 10]  # the fourth piece cut at the limit
    (marker,) = [e for e in events if isinstance(e, OutputCapped)]
    assert events[-1] is not marker or marker.seq == chunks[-1].seq + 1
    assert marker.seq == chunks[-1].seq + 1 and marker.limit == 100 and marker.task == 1
    assert live.output_capped and live.output_chunks == 4
    assert EventLog.replay(path) == live


@pytest.mark.slow
async def test_200_mb_of_stdout_reaches_the_reader_whole_while_log_and_memory_stay_bounded(skyhive_home):
    total = 200 * MB
    async with sky.Pool(nodes=1, output=None) as pool:
        assert await pool.run(spew, 1000) == 1000  # warm: worker, imports, buffers
        before = rss_bytes()
        peak = before
        received = 0
        stream = pool.output()

        async def read():
            nonlocal received, peak
            async for rec in stream:
                received += len(rec.text)
                if received >= total:
                    return

        async def watch():
            nonlocal peak
            while True:
                peak = max(peak, rss_bytes())
                await anyio.sleep(0.05)

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                reader = anyio.Event()

                async def read_then_stop():
                    await read()
                    reader.set()

                tg.start_soon(read_then_stop)
                assert await pool.run(spew, total) == total
                await reader.wait()
                tg.cancel_scope.cancel()
        path = pool.log_path
        pool_id = pool.id
        limit = pool._runtime.settings.log_output_limit
    assert received == total  # pool.output() got every character
    size = os.path.getsize(path)
    assert size < limit * 1.2 + 1 * MB, f"the log is {size / MB:.0f} MB for {total / MB:.0f} MB of output"
    growth = peak - before
    assert growth < 120 * MB, f"client memory grew by {growth / MB:.0f} MB for {total / MB:.0f} MB of output"
    events = list(read_log(path))
    assert sum(len(e.text) for e in events if isinstance(e, OutputChunk)) == limit
    assert [e.limit for e in events if isinstance(e, OutputCapped)] == [limit]
    logs = subprocess.run([sys.executable, "-m", "skyhive", "logs", pool_id], capture_output=True, text=True,
                          timeout=LIMIT, env={**os.environ, "SKYHIVE_HOME": skyhive_home})
    assert logs.returncode == 0, logs.stderr[-2000:]
    assert f"the log holds only the first {limit} characters" in logs.stderr


def test_the_limit_is_a_pool_setting():
    with pytest.raises(ValueError, match="log_output_limit must be >= 0"):
        sky.Pool(nodes=1, log_output_limit=-1)


async def test_a_pool_with_a_small_limit_still_gives_everything_to_terminal_capture_and_output(capsys):
    async with sky.Pool(nodes=1, output="all", log_output_limit=5000) as pool:
        stream = pool.output()
        captured = await pool.run(spew, 20_000, 100, capture=True)
        assert pool.state.output_capped
        path = pool.log_path
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[node 0] ")]
    assert printed == ["[node 0] " + "y" * 99] * 200  # every line on the terminal
    assert len(captured.stdout) == 20_000
    assert sum([len(r.text) async for r in stream]) == 20_000
    assert sum(len(e.text) for e in read_log(path) if isinstance(e, OutputChunk)) == 5000


# ---- pool.events() -----------------------------------------------------------------------------------


def nothing():
    return None


async def test_a_reader_that_falls_behind_is_detached_with_a_clear_error_and_the_pool_goes_on():
    async with sky.Pool(nodes=1, output=None) as pool:
        slow = pool.events(max_buffer=20_000)
        keeping_up = pool.events()
        with anyio.fail_after(LIMIT):
            for _ in range(20):
                await pool.run(spew, 2000, 100)  # output events, about 2000 characters each call
            assert await pool.run(spew, 10) == 10  # the pool is not held back by the reader
        assert slow.pending * 200 <= 20_000  # what it holds stays within its bound
        got = 0
        with pytest.raises(sky.EventsStalled, match=r"pool.events\(\) iterator fell .* behind .*max_buffer=20000"):
            async for _ in slow:
                got += 1
        assert got > 0  # the events it held came first
        await keeping_up.aclose()


async def test_events_are_registered_when_created_and_end_when_the_pool_closes():
    async with sky.Pool(nodes=1, output=None) as pool:
        events = pool.events()
        await pool.run(nothing)  # before the first iteration: not missed
    with anyio.fail_after(LIMIT):
        seen = [ev async for ev in events]  # ends after what it holds
    assert any(isinstance(ev, TaskSubmitted) and ev.fn.startswith("nothing") for ev in seen), seen
    assert type(seen[-1]).__name__ == "PoolStopped"
