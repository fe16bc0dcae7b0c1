"""A managed job's restart policy as data (runtime/control/managed/policy.py): what follows each kind of
attempt outcome, the limits, what counts as a recovery, the capacity back-off, and how a job's policy is
read from its spec, its events and the environment."""

from __future__ import annotations

import dataclasses

import pytest

from skyhive.runtime.control.managed.lifecycle import JobState
from skyhive.runtime.control.managed.outcome import Outcome
from skyhive.runtime.control.managed.policy import Action, Decision, RestartPolicy
from skyhive.runtime.control.steps import NodeExit

FAILED_RUN = NodeExit(node=0, phase="run", code=3, detail="exit code 3")
LOST_NODE = NodeExit(node=1, phase="run", code=1, detail="WorkerLost", lost=True)


def job(**counts: int) -> JobState:
    return JobState(id=1, max_restarts_on_errors=2, max_recoveries=3, **counts)


POLICY = RestartPolicy(max_restarts_on_errors=2, max_recoveries=3, capacity_first=30.0)


def test_each_outcome_decides_one_action():
    assert POLICY.decide(Outcome("ok"), job()) == Decision(Action.SUCCEED)
    assert POLICY.decide(Outcome("cancelled", why="cancelled while running"), job()) == Decision(
        Action.CANCEL, why="cancelled while running")
    assert POLICY.decide(Outcome("lost", LOST_NODE, "node 1 lost"), job()).action is Action.RECOVER
    assert POLICY.decide(Outcome("error", FAILED_RUN, "run failed"), job()) == Decision(
        Action.RESTART, why="run failed", code=3)
    assert POLICY.decide(Outcome("broken", why="ProvisionError: no room", capacity=True), job()) == Decision(
        Action.WAIT, why="ProvisionError: no room", delay=30.0)
    assert POLICY.decide(Outcome("broken", why="TaskFileError: bad"), job()) == Decision(
        Action.FAIL, why="TaskFileError: bad", code=1)


def test_a_recovery_is_not_counted_against_restarts_on_errors_and_stops_at_max_recoveries():
    lost = Outcome("lost", LOST_NODE, "node 1 lost")
    assert POLICY.decide(lost, job(restarts_on_errors=2, recoveries=2)).action is Action.RECOVER
    out = POLICY.decide(lost, job(recoveries=3))
    assert (out.action, out.out_of_recoveries, out.why) == (Action.FAIL, True, "node 1 lost")


def test_the_programs_failures_restart_until_max_restarts_on_errors():
    failed = Outcome("error", FAILED_RUN, "run failed")
    assert POLICY.decide(failed, job(restarts_on_errors=1, recoveries=3)).action is Action.RESTART
    out = POLICY.decide(failed, job(restarts_on_errors=2))
    assert (out.action, out.code, out.out_of_recoveries) == (Action.FAIL, 3, False)
    assert RestartPolicy().decide(failed, JobState(id=1)).action is Action.FAIL  # max_restarts_on_errors 0


def test_what_counts_as_a_recovery_is_the_policys_data():
    strict = dataclasses.replace(POLICY, recoveries=frozenset())
    assert strict.decide(Outcome("lost", LOST_NODE, "lost"), job()) == Decision(Action.FAIL, why="lost", code=1)
    lenient = dataclasses.replace(POLICY, recoveries=frozenset({"lost", "error"}), errors=frozenset())
    assert lenient.decide(Outcome("error", FAILED_RUN, "run failed"), job()).action is Action.RECOVER


def test_the_capacity_back_off_doubles_up_to_its_cap():
    assert [POLICY.capacity_delay(n) for n in range(1, 8)] == [30, 60, 120, 240, 480, 600, 600]
    waits = [POLICY.decide(Outcome("broken", capacity=True), job(), full).delay for full in range(3)]
    assert waits == [30, 60, 120]
    quick = RestartPolicy(capacity_first=0.05, capacity_max=600)
    assert quick.capacity_delay(3) == pytest.approx(0.2)


def test_a_jobs_policy_comes_from_its_spec_its_limits_and_the_environment(monkeypatch):
    st = job()
    monkeypatch.delenv("SKYHIVE_JOBS_CAPACITY_RETRY", raising=False)
    p = RestartPolicy.of({"restart": "node"}, st)
    assert (p.restart, p.max_restarts_on_errors, p.max_recoveries, p.capacity_first, p.capacity_max) == (
        "node", 2, 3, 30.0, 600.0)
    assert RestartPolicy.of({}, st).restart == "gang"
    monkeypatch.setenv("SKYHIVE_JOBS_CAPACITY_RETRY", "0.5")
    assert RestartPolicy.of({}, st).capacity_first == 0.5
    monkeypatch.setenv("SKYHIVE_JOBS_CAPACITY_RETRY", "soon")
    assert RestartPolicy.of({}, st).capacity_first == 30.0
    monkeypatch.setenv("SKYHIVE_JOBS_CAPACITY_RETRY", "900")  # a first wait past the cap: the cap grows to it
    assert RestartPolicy.of({}, st).capacity_delay(3) == 900.0


def test_a_policy_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="'sideways' is not one of gang, node"):
        RestartPolicy(restart="sideways")
    with pytest.raises(ValueError, match="whole numbers >= 0"):
        RestartPolicy(max_recoveries=-1)
    with pytest.raises(ValueError, match="capacity back-off"):
        RestartPolicy(capacity_first=60, capacity_max=30)
    with pytest.raises(dataclasses.FrozenInstanceError):
        POLICY.max_recoveries = 9  # type: ignore[misc]
