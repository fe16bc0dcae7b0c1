"""A managed job's typed events and the pure reducer that folds them (runtime/control/managed/events.py,
lifecycle.py): every transition of the table, the refused ones named, and records written by earlier
versions read as before."""

from __future__ import annotations

import json
import logging

import pytest

from skyhive.runtime.control.managed import lifecycle, store
from skyhive.runtime.control.managed.events import (EVENT_TYPES, AttemptStarted, CancelAsked, ControllerStarted, Ended,
                                                    Ending, ErrorExit, JobEvent, Leaked, Lost, Notice, Replaced,
                                                    Running, Stopped, Submitted, Unknown, Unneeded, Waiting,
                                                    from_record, to_record)
from skyhive.runtime.control.managed.lifecycle import (CANCELLED, CLEANING, FAILED, FINISHED, LEAKED, LIVE, PENDING,
                                                       RECOVERING, RUNNING, SAME, STARTING, SUCCEEDED, TRANSITIONS,
                                                       WAITS, JobState, RefusedTransition, fold, reduce)

STATES = (*LIVE, CLEANING, LEAKED, *FINISHED)
#: one event of each kind the table knows (the final event once per outcome)
SAMPLES: dict[str, JobEvent] = {
    "submitted": Submitted(time=1.0, name="j", max_restarts_on_errors=2, max_recoveries=3),
    "controller": ControllerStarted(time=2.0, pid=7),
    "attempt": AttemptStarted(time=3.0, attempt=1, pool="j-job1-1", pid=7),
    "running": Running(time=4.0, attempt=1, pool="j-job1-1", nodes="local:0"),
    "notice": Notice(time=5.0, node=0, notice={"action": "terminate"}),
    "lost": Lost(time=6.0, attempt=1, detail="WorkerLost", places=("local:0",)),
    "replaced": Replaced(time=6.5, attempt=1, node=1, detail="node 1 lost", places=("local:1",)),
    "stopped": Stopped(time=7.0, attempt=1),
    "unneeded": Unneeded(time=7.5, attempt=2, detail="ended after its notice"),
    "waiting": Waiting(time=8.0, attempt=1, detail="no capacity", retry_in=30.0),
    "error": ErrorExit(time=9.0, attempt=1, detail="run failed", code=3),
    "cancel": CancelAsked(time=10.0),
    "ending": Ending(time=11.0, outcome="succeeded", data={"attempt": 1}),
    "succeeded": Ended(time=12.0, outcome="succeeded"),
    "failed": Ended(time=12.0, outcome="failed", detail="run failed", data={"code": 3}),
    "cancelled": Ended(time=12.0, outcome="cancelled", detail="cancelled"),
    "leaked": Leaked(time=13.0, pools=("j-job1-1: host unreachable",)),
    "unknown": Unknown(time=14.0, name="from-a-newer-version", data={"x": 1}),
}


def test_every_kind_of_event_has_a_sample_and_a_place_in_the_table():
    kinds = {k for _, k in TRANSITIONS}
    assert set(SAMPLES) == kinds
    assert set(EVENT_TYPES) <= kinds


@pytest.mark.parametrize("state,kind", sorted(TRANSITIONS))
def test_each_transition_of_the_table(state, kind):
    st = JobState(id=1, state=state, recoveries=1, outcome="failed" if state in (CLEANING, LEAKED) else "")
    new = reduce(st, SAMPLES[kind])
    target = TRANSITIONS[(state, kind)]
    expected = state if target == SAME else RECOVERING if target == WAITS else target
    assert new.state == expected
    assert st.state == state and st.recoveries == 1  # pure: the state it was given is left as it was


def test_waiting_goes_back_to_pending_before_any_recovery_and_to_recovering_after_one():
    assert reduce(JobState(id=1, state=STARTING), SAMPLES["waiting"]).state == PENDING
    assert reduce(JobState(id=1, state=STARTING, recoveries=2), SAMPLES["waiting"]).state == RECOVERING


@pytest.mark.parametrize("state,kind", sorted((s, k) for s in STATES for k in SAMPLES if (s, k) not in TRANSITIONS))
def test_every_other_transition_is_refused_naming_the_state_and_the_event(state, kind):
    with pytest.raises(RefusedTransition, match=f"managed job 4: a '{kind}' event is refused in state {state}"):
        reduce(JobState(id=4, state=state), SAMPLES[kind])


def test_the_refused_transitions_include_the_ones_that_mean_a_bug():
    for state, kind in ((CLEANING, "attempt"), (LEAKED, "running"), (PENDING, "running"), (SUCCEEDED, "attempt"),
                        (FAILED, "ending"), (CANCELLED, "lost")):
        assert (state, kind) not in TRANSITIONS


def _records(*events: JobEvent) -> list[dict]:
    return [{**to_record(e), "time": e.time} for e in events]


def test_a_recovered_job_folds_to_its_counts_and_outcome():
    st = fold(1, _records(SAMPLES["submitted"], SAMPLES["controller"], SAMPLES["attempt"], SAMPLES["running"],
                          SAMPLES["lost"], AttemptStarted(time=8.0, attempt=2, pool="j-job1-2"),
                          Running(time=8.5, attempt=2, nodes="local:1"), SAMPLES["stopped"],
                          ErrorExit(time=9.0, attempt=2, detail="exit 3", code=3),
                          AttemptStarted(time=9.5, attempt=3, pool="j-job1-3"),
                          Ending(time=11.0, outcome="succeeded", data={"attempt": 3}),
                          Ended(time=12.0, outcome="succeeded", data={"attempt": 3})))
    assert (st.state, st.attempts, st.recoveries, st.restarts_on_errors) == (SUCCEEDED, 3, 1, 1)
    assert st.pools == ["j-job1-1", "j-job1-2", "j-job1-3"] and st.controller_pid == 7
    assert (st.name, st.max_restarts_on_errors, st.max_recoveries) == ("j", 2, 3)
    assert (st.started, st.ended, st.outcome, st.leaked) == (3.0, 12.0, "succeeded", [])


def test_a_leaked_sweep_then_a_second_one_then_the_end():
    st = fold(1, _records(SAMPLES["submitted"], SAMPLES["attempt"], SAMPLES["ending"], SAMPLES["leaked"]))
    assert st.state == LEAKED and st.detail == "succeeded; not cleaned up: j-job1-1: host unreachable"
    st = fold(1, _records(SAMPLES["submitted"], SAMPLES["attempt"], SAMPLES["ending"], SAMPLES["leaked"],
                          SAMPLES["ending"], SAMPLES["succeeded"]))
    assert (st.state, st.leaked) == (SUCCEEDED, [])


#: events as the version before typed events (main at 3541022) wrote them, read unchanged
OLD_LOG = """\
{"kind": "submitted", "max_restarts_on_errors": 1, "max_recoveries": 2, "name": "train", "time": 100.0}
{"kind": "controller", "pid": 4242, "time": 100.5}
{"attempt": 1, "kind": "attempt", "pid": 4242, "pool": "train-job3-1", "time": 101.0}
{"attempt": 1, "kind": "running", "nodes": "local:a, local:b", "pool": "train-job3-1", "time": 102.0}
{"kind": "notice", "node": 1, "notice": {"action": "terminate", "time": "soon"}, "time": 103.0}
{"attempt": 1, "detail": "node 1 lost", "kind": "replaced", "node": 1, "places": ["local:b"], "time": 104.0}
{"attempt": 1, "kind": "running", "nodes": "local:a, local:c", "pool": "train-job3-1", "time": 105.0}
{"attempt": 1, "detail": "run failed on node 0: exit code 2", "kind": "error", "code": 2, "time": 106.0}
{"attempt": 2, "kind": "attempt", "pid": 4242, "pool": "train-job3-2", "time": 107.0}
{"kind": "cancel", "time": 108.0}
{"detail": "cancelled while running", "kind": "ending", "outcome": "cancelled", "time": 109.0}
{"detail": "cancelled while running", "kind": "cancelled", "time": 110.0}
{"kind": "cancel", "time": 111.0}
"""


def test_a_record_written_before_typed_events_folds_as_it_did(tmp_path):
    job = store.new_job("x", b"", 0)  # (a job folder of the test's own state dir)
    (store.job_dir(job) / "events.jsonl").write_text(OLD_LOG)
    st = store.load(job)
    assert st.as_dict() == {
        "id": job, "name": "train", "state": CANCELLED, "submitted": 100.0, "started": 101.0, "ended": 110.0,
        "attempts": 2, "recoveries": 1, "restarts_on_errors": 1, "max_restarts_on_errors": 1, "max_recoveries": 2,
        "detail": "cancelled while running", "pools": ["train-job3-1", "train-job3-2"], "controller_pid": 4242,
        "nodes": "local:a, local:c", "leaked": [], "outcome": "cancelled"}
    assert st.cancel_requested


def test_older_records_lacking_a_field_take_its_default():
    st = fold(1, [{"kind": "submitted", "time": 1.0, "name": "old"}, {"kind": "attempt", "time": 2.0},
                  {"kind": "lost", "time": 3.0}])
    assert (st.max_recoveries, st.attempts, st.pools, st.recoveries, st.state) == (
        lifecycle.DEFAULT_MAX_RECOVERIES, 1, [""], 1, RECOVERING)


def test_an_odd_or_refused_event_is_skipped_naming_the_job_and_why(caplog):
    records = [{"kind": "submitted", "time": 1.0, "name": "j"},
               {"kind": "attempt", "time": 2.0, "attempt": "two"},  # not a number
               {"kind": "running", "time": 3.0, "nodes": "x"},  # refused: no attempt started
               {"kind": "attempt", "time": 4.0, "attempt": 1, "pool": "p"}]
    with caplog.at_level(logging.WARNING, logger="skyhive.managed"):
        st = fold(991, records, "/some/events.jsonl")
    assert (st.state, st.attempts, st.pools) == (STARTING, 1, ["p"])
    said = [r.getMessage() for r in caplog.records]
    assert any("managed job 991" in m and "/some/events.jsonl" in m and "ValueError" in m for m in said), said
    assert any("a 'running' event is refused in state PENDING" in m for m in said), said


def test_what_a_finished_job_hears_after_its_end_changes_nothing_quietly(caplog):
    records = _records(SAMPLES["submitted"], SAMPLES["attempt"], SAMPLES["ending"], SAMPLES["succeeded"],
                       SAMPLES["cancel"], SAMPLES["stopped"])
    with caplog.at_level(logging.WARNING, logger="skyhive.managed"):
        st = fold(992, records)
    assert st.state == SUCCEEDED and not st.cancel_requested and not caplog.records


def test_each_event_goes_to_disk_and_back_as_itself():
    for sample in SAMPLES.values():
        assert from_record({**to_record(sample), "time": sample.time}) == sample
    assert json.loads(json.dumps(to_record(SAMPLES["lost"]))) == {
        "kind": "lost", "attempt": 1, "detail": "WorkerLost", "places": ["local:0"]}
    with pytest.raises(KeyError):
        from_record({"time": 1.0})
    with pytest.raises(ValueError):
        from_record({"kind": "attempt", "time": "later"})


def test_store_record_appends_the_typed_event_as_a_line():
    job = store.new_job("y", b"", 0)
    store.record(job, AttemptStarted(attempt=1, pool="y-1", pid=3))
    last = store.events(job)[-1]
    assert {k: v for k, v in last.items() if k != "time"} == {"kind": "attempt", "attempt": 1, "pool": "y-1", "pid": 3}
    assert store.load(job).state == STARTING
