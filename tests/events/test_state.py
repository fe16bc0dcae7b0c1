"""The event model: fold is the plain left fold of apply; lifecycle table; JSON round trip."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.runtime.events.types import (
    NodeReplaced,
    NodeStateChanged,
    OutputCapped,
    OutputChunk,
    PoolStarted,
    PoolStopped,
    TaskFinished,
    TaskStarted,
    TaskSubmitted,
    WorkerStateChanged,
    from_json,
    to_json,
)
from skyhive.runtime.events.lifecycle import IllegalTransition, NodeState, check_transition
from skyhive.runtime.events.log import EventLog
from skyhive.runtime.events.state import PoolState, fold, reduce_apply

text = st.text(max_size=20)
node = st.integers(0, 2)


def _event(kind, seq, data):
    base = dict(pool_id="p", seq=seq, ts=float(seq))
    if kind == "submitted":
        return TaskSubmitted(**base, task=seq, node=data.draw(node), local_rank=0, fn=data.draw(text))
    if kind == "started":
        return TaskStarted(**base, task=seq, node=data.draw(node), local_rank=0)
    if kind == "finished":
        outcome = data.draw(st.sampled_from(["ok", "error", "cancelled", "lost"]))
        return TaskFinished(**base, task=seq, node=data.draw(node), local_rank=0, outcome=outcome)
    if kind == "output":
        return OutputChunk(**base, task=seq, node=data.draw(node), local_rank=0, stream="stdout", text=data.draw(text))
    if kind == "capped":
        return OutputCapped(**base, limit=seq, task=seq, node=data.draw(node), local_rank=0, stream="stderr")
    if kind == "node":
        state = data.draw(st.sampled_from([s.value for s in NodeState]))
        return NodeStateChanged(**base, node=data.draw(node), state=state, addr=data.draw(text))
    if kind == "worker":
        state = data.draw(st.sampled_from(["starting", "ready", "lost", "stopped"]))
        return WorkerStateChanged(**base, node=data.draw(node), local_rank=data.draw(st.integers(0, 1)), state=state)
    if kind == "replaced":
        return NodeReplaced(**base, node=data.draw(node), replacement=data.draw(st.integers(1, 3)),
                            old_provider_id=data.draw(text), reason=data.draw(text))
    return PoolStopped(**base, error=data.draw(text))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fold_equals_the_plain_reduce_and_survives_json(data):
    kinds = data.draw(st.lists(st.sampled_from(
        ["submitted", "started", "finished", "output", "capped", "node", "worker", "replaced", "stopped"]), max_size=40))
    events = [PoolStarted(pool_id="p", seq=0, ts=0.0, provider="local", nodes=3, processes_per_node=1,
                          pid=1, host="h")]
    events += [_event(k, i + 1, data) for i, k in enumerate(kinds)]
    expected = reduce_apply(events)
    assert fold(events) == expected
    # folding in pieces (as the live log does) gives the same state
    cut = data.draw(st.integers(0, len(events)))
    assert fold(events[cut:], fold(events[:cut])) == expected
    assert fold([from_json(to_json(e)) for e in events]) == expected


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_live_log_counts_output_without_keeping_it_and_equals_its_replay(tmp_path_factory, data):
    """The EventLog folds output events as a count (it does not keep them): reading its state at any
    points in between gives what the plain reduce of everything it emitted gives."""
    path = tmp_path_factory.mktemp("live") / "pool.jsonl"
    log = EventLog("p", path=path)
    emitted = [log.emit(PoolStarted, provider="local", nodes=3, processes_per_node=1, pid=1, host="h")]
    for kind in data.draw(st.lists(st.sampled_from(["submitted", "output", "node", "replaced", "capped", "read"]), max_size=30)):
        if kind == "read":
            assert log.state == reduce_apply(emitted)
            continue
        ev = _event(kind, 0, data)
        fields_ = {f.name: getattr(ev, f.name) for f in dataclasses.fields(ev) if f.name not in ("pool_id", "seq", "ts")}
        emitted.append(log.emit(type(ev), **fields_))
    live = log.state
    log.close()
    assert live == reduce_apply(emitted)
    assert EventLog.replay(path) == live


def test_counters():
    ev = [PoolStarted(pool_id="p", seq=0, ts=0.0, provider="local", nodes=1, processes_per_node=1, pid=1, host="h"),
          TaskSubmitted(pool_id="p", seq=1, ts=1.0, task=1, node=0, local_rank=0, fn="f()"),
          TaskSubmitted(pool_id="p", seq=2, ts=1.0, task=2, node=0, local_rank=0, fn="f()"),
          TaskFinished(pool_id="p", seq=3, ts=1.0, task=1, node=0, local_rank=0, outcome="ok")]
    state = fold(ev)
    assert (state.tasks_submitted, state.tasks_ok, state.tasks_in_flight, state.last_seq) == (2, 1, 1, 3)
    assert fold([]) == PoolState()


def test_lifecycle_table():
    check_transition(0, NodeState.REQUESTED, NodeState.PROVISIONING)
    check_transition(0, NodeState.READY, NodeState.FAILED)
    check_transition(0, NodeState.FAILED, NodeState.TERMINATING)
    with pytest.raises(IllegalTransition, match="node 3: illegal lifecycle transition ready -> provisioning"):
        check_transition(3, NodeState.READY, NodeState.PROVISIONING)
    with pytest.raises(IllegalTransition):
        check_transition(0, NodeState.TERMINATED, NodeState.READY)


def test_bad_log_lines_are_named():
    with pytest.raises(ValueError, match="not a skyhive event"):
        from_json('{"type": "nope"}')
    with pytest.raises(ValueError, match="not a skyhive event"):
        from_json("{truncated")


def test_a_replaced_node_starts_over_and_remembers_what_it_replaced():
    base = dict(pool_id="p", ts=0.0)
    events = [PoolStarted(**base, seq=0, provider="ssh", nodes=2, processes_per_node=1, pid=1, host="h"),
              NodeStateChanged(**base, seq=1, node=1, state="ready", addr="10.0.0.2", provider_id="ssh:b"),
              NodeStateChanged(**base, seq=2, node=1, state="terminated"),
              NodeReplaced(**base, seq=3, node=1, replacement=1, old_provider_id="ssh:b", reason="host gone"),
              NodeStateChanged(**base, seq=4, node=1, state="provisioning")]
    state = fold(events)
    assert state.nodes[1].state == "provisioning" and state.nodes[1].addr == ""
    assert (state.nodes[1].replacements, state.nodes[1].replaced_ids, state.replacements) == (1, ("ssh:b",), 1)
    assert fold([from_json(to_json(e)) for e in events]) == state == reduce_apply(events)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_the_generated_json_writer_writes_what_json_dumps_writes(data):
    """to_json (a writer generated per event class) is the event's fields and "type", as plain
    json.dumps would write them (compact), for every event type, odd strings and structured fields
    included; and it reads back equal."""
    import json

    from skyhive.runtime.events.types import EVENT_TYPES

    odd = st.text(max_size=12)  # quotes, backslashes, control and non-ASCII characters
    for cls in EVENT_TYPES.values():
        values = {}
        for f in dataclasses.fields(cls):
            kind = str(f.type)
            if kind == "int" and f.name == "node" and cls.kind.startswith(("node_", "worker_")):
                values[f.name] = data.draw(st.integers(0, 2**24))  # a node index the fold files under
            elif kind == "int":
                values[f.name] = data.draw(st.integers(-(2**40), 2**40))
            elif kind == "float":
                values[f.name] = data.draw(st.floats(allow_nan=False, allow_infinity=False))
            elif kind == "str":
                values[f.name] = data.draw(odd)
            elif kind.startswith("tuple"):
                values[f.name] = data.draw(st.lists(odd, max_size=3))
            else:
                values[f.name] = data.draw(st.dictionaries(odd, st.integers() | odd | st.lists(odd, max_size=3),
                                                           max_size=3))
        event = cls(**values)
        line = to_json(event)
        assert json.loads(line) == {**values, "type": cls.kind}
        assert line == json.dumps({**values, "type": cls.kind}, separators=(",", ":"), ensure_ascii=False)
        assert from_json(line) == event
