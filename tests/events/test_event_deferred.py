"""`EventLog.record_task`: the per-call task events are built late, and the log is the same as `emit` makes.

Every reader (state, `recent`, the file, a subscriber) must see exactly the events `emit` would have
recorded, in sequence order, with the timestamp of the moment they were recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.runtime.events.log import EventLog, read_log
from skyhive.runtime.events.state import reduce_apply
from skyhive.runtime.events.types import (NodeStateChanged, PoolStarted, TaskFinished, TaskSubmitted,
                                          WorkerStateChanged)

STEP = st.one_of(
    st.tuples(st.just("submitted"), st.text(max_size=12)),
    st.tuples(st.just("finished"), st.sampled_from(["ok", "error", "cancelled", "lost"])),
    st.tuples(st.just("node"), st.text(max_size=12)),
    st.tuples(st.just("worker"), st.sampled_from(["starting", "ready", "lost"])),
    st.tuples(st.sampled_from(["read_state", "read_recent", "read_nodes", "flush"]), st.none()),
)


def _without_ts(event):
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if f.name != "ts"}


def _drive(log: EventLog, steps: list, *, deferred: bool) -> list:
    """Apply `steps` to `log`, task events through `record_task` (deferred) or `emit`; what each read saw."""
    seen = []
    for i, (step, value) in enumerate(steps):
        if step == "submitted":
            if deferred:
                log.record_task(TaskSubmitted, i, 0, 0, value, 3)
            else:
                log.emit(TaskSubmitted, task=i, node=0, local_rank=0, fn=value, items=3)
        elif step == "finished":
            if deferred:
                log.record_task(TaskFinished, i, 1, 0, value, "E")
            else:
                log.emit(TaskFinished, task=i, node=1, local_rank=0, outcome=value, error="E")
        elif step == "node":
            log.emit(NodeStateChanged, node=0, state="ready", addr=value)
        elif step == "worker":
            log.emit(WorkerStateChanged, node=1, local_rank=0, state=value)
        elif step == "read_nodes":
            nodes = log.nodes  # without folding the task events: the same records all the same
            assert nodes == log.state.nodes
            seen.append(nodes)
        elif step == "read_state":
            seen.append(dataclasses.replace(log.state, started=0.0, created=0.0))  # (the timestamps a state holds)
        elif step == "read_recent":
            seen.append([_without_ts(e) for e in log.recent])
        else:
            log.flush()
    return seen


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(STEP, max_size=40))
def test_deferred_task_events_give_the_same_log_as_emit(tmp_path_factory, steps):
    runs = {}
    for deferred in (False, True):
        path = tmp_path_factory.mktemp("log") / "pool.jsonl"
        log = EventLog("p", path=path)
        log.emit(PoolStarted, provider="local", nodes=2, processes_per_node=1, pid=1, host="h")

        async def drive() -> list:  # in a running loop, as a pool's log is (writes are then deferred)
            return _drive(log, steps, deferred=deferred)

        seen = asyncio.run(drive())
        state = log.state
        log.close()
        written = list(read_log(path))
        assert [e.seq for e in written] == list(range(len(written)))  # in sequence order, none lost
        assert reduce_apply(written) == state  # the file replays to the live state
        runs[deferred] = (seen, [_without_ts(e) for e in written])
    assert runs[True] == runs[False]


def test_a_deferred_event_keeps_the_time_it_was_recorded_at_and_its_place():
    log = EventLog("p", path=None)
    before = time.time_ns() // 1000  # (a log's times are whole microseconds)
    log.record_task(TaskSubmitted, 7, 0, 0, "f()", 1)
    after = time.time_ns() // 1000
    time.sleep(0.01)
    log.emit(NodeStateChanged, node=0, state="ready")  # emitted later: must come after it
    events = list(log.recent)
    assert [type(e) for e in events] == [TaskSubmitted, NodeStateChanged]
    assert [e.seq for e in events] == [0, 1]
    assert before <= round(events[0].ts * 1e6) <= after < round(events[1].ts * 1e6)
    assert events[0] == TaskSubmitted(pool_id="p", seq=0, ts=events[0].ts, task=7, node=0, local_rank=0,
                                      fn="f()", items=1)
    assert log.state.tasks_submitted == 1 and log.state.tasks_in_flight == 1


def test_wrong_number_of_fields_is_refused_at_the_call_site():
    log = EventLog("p", path=None)
    with pytest.raises(TypeError, match="TaskFinished has the fields"):
        log.record_task(TaskFinished, 1, 0, 0, "ok")  # `error` missing
    assert list(log.recent) == []


def test_secrets_are_redacted_from_task_events_too():
    log = EventLog("p", path=None, secrets=frozenset({"hunter2"}))
    log.record_task(TaskFinished, 1, 0, 0, "lost", "worker died holding hunter2")
    (event,) = log.recent
    assert event.error == "worker died holding ***"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_live_subscriber_gets_task_events_in_order(anyio_backend):
    log = EventLog("p", path=None)
    log.record_task(TaskSubmitted, 1, 0, 0, "f()", 1)  # before subscribing: replayed only
    stream = log.subscribe(replay=True)
    log.record_task(TaskFinished, 1, 0, 0, "ok", "")
    log.record_task(TaskSubmitted, 2, 0, 0, "g()", 1)
    log.close()
    got = [e async for e in stream]
    assert [(type(e).__name__, e.seq, e.task) for e in got] == [
        ("TaskSubmitted", 0, 1), ("TaskFinished", 1, 1), ("TaskSubmitted", 2, 2)]
    await asyncio.sleep(0)


def test_a_long_run_of_task_events_is_bounded_in_memory():
    log = EventLog("p", path=None)
    for i in range(10_000):
        log.record_task(TaskSubmitted, i, 0, 0, "f()", 1)
        log.record_task(TaskFinished, i, 0, 0, "ok" if i % 2 else "error", "")
    assert len(log._deferred) < 4096  # settled in batches
    # counted as they settle, not kept until someone reads the state (nobody may, for a million calls)
    assert not log._unfolded
    assert len(log._recent) == 10_000  # (MEMORY_EVENTS)
    state = log.state
    assert (state.tasks_submitted, state.tasks_ok, state.tasks_failed, state.last_seq) == (10_000, 5_000, 5_000, 19_999)
    assert log.recent[-1] == TaskFinished(pool_id="p", seq=19_999, ts=log.recent[-1].ts, task=9_999, node=0,
                                          local_rank=0, outcome="ok", error="")


def test_reading_the_nodes_does_not_build_the_deferred_task_events():
    log = EventLog("p", path=None)
    log.emit(PoolStarted, provider="local", nodes=1, processes_per_node=1, pid=1, host="h")
    log.emit(NodeStateChanged, node=0, state="ready")
    assert log.nodes[0].state == "ready"  # folds the lifecycle events
    log.record_task(TaskSubmitted, 1, 0, 0, "f()", 1)
    assert log.nodes[0].state == "ready" and len(log._deferred) == 1  # a call's events stay deferred
    log.emit(NodeStateChanged, node=0, state="draining")
    assert log.nodes[0].state == "draining"
    assert log.state.tasks_submitted == 1


def test_only_task_events_may_be_deferred():
    log = EventLog("p", path=None)
    with pytest.raises(TypeError, match="record_task takes task events .* not NodeStateChanged: emit it"):
        log.record_task(NodeStateChanged, 0, "ready", "", "", "")
    assert list(log.recent) == []
