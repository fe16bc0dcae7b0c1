"""Task events kept in their parts (`runtime/events/parts.py`): the line written from them is the
event's JSON line, and what the log file holds reads back equal to what the log holds in memory —
every field, and the time to the microsecond."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.runtime.events.log import EventLog, read_log
from skyhive.runtime.events.parts import PartsFormat, line
from skyhive.runtime.events.types import (NodeStateChanged, PoolStarted, PoolStopped, TaskFinished, TaskStarted,
                                          TaskSubmitted, from_json, to_json)

odd = st.text(max_size=12)  # quotes, backslashes, %, control and non-ASCII characters
# microseconds since the epoch: the epoch itself, whole seconds, and times far ahead
micros = st.integers(0, 2**52) | st.integers(0, 4_000_000_000).map(lambda s: s * 1_000_000)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), pool_id=odd, seq=st.integers(0, 2**40), us=micros)
def test_a_line_from_parts_reads_back_as_the_event(data, pool_id, seq, us):
    for cls, fixed in ((TaskSubmitted, {}), (TaskSubmitted, {"items": 1}), (TaskStarted, {}), (TaskFinished, {}),
                       (TaskFinished, {"outcome": "ok", "error": ""})):
        fmt = PartsFormat(cls, pool_id, fixed)
        own = {}
        for f in dataclasses.fields(cls)[3:]:
            if f.name in fixed:
                own[f.name] = fixed[f.name]
            else:
                own[f.name] = data.draw(st.integers(-(2**40), 2**40) if str(f.type) == "int" else odd)
        values = tuple(v for k, v in own.items() if k not in fixed)
        parts = fmt.parts(seq, us, values)
        event = cls(pool_id=pool_id, seq=seq, ts=us / 1e6, **own)
        text = line(parts)
        assert text.endswith("\n") and "\n" not in text[:-1]
        assert json.loads(text) == {"pool_id": pool_id, "seq": seq, "ts": us / 1e6, **own, "type": cls.kind}
        assert from_json(text) == event == fmt.build(parts) == from_json(to_json(event))
        assert round(from_json(text).ts * 1e6) == us  # the time to the microsecond


def test_a_fixed_field_must_exist_and_have_its_type():
    with pytest.raises(TypeError, match="TaskSubmitted has no field colour to fix"):
        PartsFormat(TaskSubmitted, "p", {"colour": 1})
    with pytest.raises(TypeError, match=r"TaskSubmitted.items: fixed to '1', not an int"):
        PartsFormat(TaskSubmitted, "p", {"items": "1"})
    with pytest.raises(TypeError, match="PoolStarted.provider_config: a dict"):
        PartsFormat(PoolStarted, "p")  # structured fields are not kept in parts


@pytest.mark.parametrize("pool_id", ["p", 'a"%d\\b'])
def test_the_file_reads_back_equal_to_the_log_in_memory(tmp_path, pool_id):
    """Every way a call records its task events (the common ones with fixed fields, the others in
    full, through `record_task`), mixed with emitted events: the file is the log, ts included."""
    path = tmp_path / "pool.jsonl"

    async def drive() -> EventLog:  # in a running loop, as a pool's log is (its writes deferred)
        log = EventLog(pool_id, path=path)
        log.emit(PoolStarted, provider="local", nodes=2, processes_per_node=1, pid=1, host="h")
        log.task_submitted(1, 0, 0, "f", 1)
        log.task_submitted(2, 1, 0, 'g"\\\n%s', 7)
        log.task_finished(1, 0, 0, "ok", "")
        log.task_finished(2, 1, 0, "error", "ValueError: 'x' %d")
        log.emit(NodeStateChanged, node=1, state="ready")
        log.record_task(TaskStarted, 3, 1, 0)
        log.task_submitted(3, 1, 0, "h", 1)
        log.task_finished(3, 1, 0, "ok", "late output")  # ok, but with an error text: not the fixed form
        log.task_finished(4, 0, 0, "lost", "")
        log.flush()
        log.record_task(TaskSubmitted, 5, 0, 0, "f", 1)
        log.emit(PoolStopped)
        return log

    log = asyncio.run(drive())
    memory = list(log.recent)
    state = log.state
    log.close()
    written = list(read_log(path))
    assert written == memory  # every field, ts to the microsecond
    assert [e.seq for e in written] == list(range(12))
    assert [type(e).__name__ for e in written][1:5] == ["TaskSubmitted"] * 2 + ["TaskFinished"] * 2
    assert written[4].error == "ValueError: 'x' %d" and written[2].fn == 'g"\\\n%s' and written[2].items == 7
    assert (state.tasks_submitted, state.tasks_ok, state.tasks_failed, state.tasks_lost) == (4, 2, 1, 1)
    for event in written:
        assert event.ts == round(event.ts * 1e6) / 1e6  # whole microseconds
        assert abs(event.ts - time.time()) < 60


def test_a_log_whose_memory_was_read_writes_the_same_file(tmp_path):
    """Reading `recent` builds the events kept in parts; what is written after is unchanged."""
    path = tmp_path / "pool.jsonl"
    log = EventLog("p", path=path)
    log.task_submitted(1, 0, 0, "f", 1)
    log.task_finished(1, 0, 0, "ok", "")
    memory = list(log.recent)
    log.close()
    assert list(read_log(path)) == memory
    assert [(type(e), e.task) for e in memory] == [(TaskSubmitted, 1), (TaskFinished, 1)]


def test_task_events_reach_the_file_while_the_pool_runs(tmp_path, monkeypatch):
    """Each run of task events is written by a flush arranged after its first event (at most
    WRITE_DELAY later), again after every flush — not only when the log closes."""
    from skyhive.runtime.events import log as log_module

    monkeypatch.setattr(log_module, "WRITE_DELAY", 0.01)
    path = tmp_path / "pool.jsonl"

    async def written_lines(count: int) -> int:
        for _ in range(500):  # (up to 5 s: a loaded machine)
            await asyncio.sleep(0.01)
            lines = path.read_text().count("\n")
            if lines >= count:
                return lines
        return path.read_text().count("\n")

    async def drive() -> list[int]:
        log = EventLog("p", path=path)
        seen = []
        for task in range(3):
            log.task_submitted(task, 0, 0, "f", 1)
            log.task_finished(task, 0, 0, "ok", "")
            seen.append(await written_lines(2 * task + 2))
        log.close()
        return seen

    assert asyncio.run(drive()) == [2, 4, 6]
    assert [e.task for e in read_log(path)] == [0, 0, 1, 1, 2, 2]
