"""What the dashboard reads (issue 30), without a browser: logs read incrementally (never a whole log
per request), torn lines, output lines with node prefixes, a job's log redacted, no secret in what the
pages are sent."""

from __future__ import annotations

import json
import os

import pytest

from skyhive.runtime.events.log import EventLog, pool_log_path
from skyhive.runtime.events.types import NodeStateChanged, PoolStarted, PoolStopped, TaskFinished, TaskSubmitted

pytest.importorskip("starlette", reason="the dashboard extra (starlette, uvicorn) is not installed")

from skyhive.runtime.dashboard import views  # noqa: E402
from skyhive.runtime.dashboard.watch import StateDir  # noqa: E402


def _pool(pool_id: str = "pool-t1", nodes: int = 2) -> EventLog:
    log = EventLog(pool_id, path=pool_log_path(pool_id))
    log.emit(PoolStarted, provider="local", nodes=nodes, processes_per_node=1, pid=os.getpid(), host="elsewhere",
             provider_config={"provider": "local", "api_token": "tok-123"}, plan={"instance_type": "m5.large",
                                                                                  "cost_per_hour": 0.5})
    for n in range(nodes):  # billed from the first node that ran (inventory.PoolEntry.cost)
        log.emit(NodeStateChanged, node=n, state="running", addr="127.0.0.1", provider_id=f"p-{n}")
        log.emit(NodeStateChanged, node=n, state="ready", addr="127.0.0.1", provider_id=f"p-{n}")
    log.flush()
    return log


def test_logs_are_read_incrementally_and_requests_read_nothing(skyhive_home):
    log = _pool()
    store = StateDir()
    assert store.refresh() is True
    watch = store.get("pool-t1")
    size = pool_log_path("pool-t1").stat().st_size
    assert watch.tail.offset == size and watch.tail.bytes_read == size
    # asking for the pages reads nothing more
    for _ in range(3):
        views.pool_rows(store)
        views.pool_detail(store, "pool-t1")
        views.node_rows(store, "pool-t1")
        views.event_rows(store, "pool-t1")
        views.timeline_json(store, "pool-t1")
    assert watch.tail.bytes_read == size
    # an unchanged log is not even opened again
    assert store.refresh() is False and watch.tail.bytes_read == size
    # what is appended is read once, and only it
    log.emit(TaskSubmitted, task=1, node=0, local_rank=0, fn="train", items=1)
    log.emit(TaskFinished, task=1, node=0, local_rank=0, outcome="error", error="boom")
    log.emit(NodeStateChanged, node=1, state="failed", detail="worker 0: the worker process exited with status 7")
    log.flush()
    new_size = pool_log_path("pool-t1").stat().st_size
    assert store.refresh() is True
    assert watch.tail.bytes_read == new_size  # the old bytes were not read again
    row = views.pool_rows(store)[0]
    assert row["ready"] == 1 and row["failed"] == 1 and row["machine"] == "m5.large" and row["per_hour"] == 0.5
    assert row["tasks"]["failed"] == 1
    assert {"cause": "node 1 failed: worker 0: the worker process exited with status 7",
            "fix": "skyhive down pool-t1"} in row["problems"]
    assert row["status"] == "running on elsewhere"
    log.close()


def test_a_torn_line_waits_for_its_end_and_a_cut_one_is_read_again(skyhive_home):
    log = _pool()
    log.close()
    path = pool_log_path("pool-t1")
    store = StateDir()
    store.refresh()
    watch = store.get("pool-t1")
    seen = watch.state.last_seq
    line = json.dumps({"pool_id": "pool-t1", "seq": seen + 1, "ts": 1.0, "type": "node_state", "node": 0,
                       "state": "draining", "addr": "", "provider_id": "", "detail": ""}).encode()
    with open(path, "ab") as fh:  # a client killed half-way through a line
        fh.write(line[:20])
    store.refresh()
    assert watch.state.last_seq == seen and watch.tail.bad_lines == 0
    # `skyhive down` cuts the torn line off and appends its own: both read right
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 20)
    with open(path, "ab") as fh:
        fh.write(line + b"\n")
    store.refresh()
    assert watch.state.last_seq == seen + 1 and watch.tail.bad_lines == 0
    assert watch.state.nodes[0].state == "draining"


def test_output_lines_carry_their_node_and_are_asked_for_after_an_index(skyhive_home):
    log = _pool()
    log.log_output(task=1, node=0, local_rank=0, stream="stdout", text="hel")
    log.log_output(task=1, node=1, local_rank=0, stream="stdout", text="one\ntwo\n")
    log.log_output(task=1, node=0, local_rank=0, stream="stdout", text="lo\nrest")
    log.emit(PoolStopped)
    log.close()
    store = StateDir()
    store.refresh()
    out = views.output_lines(store, "pool-t1")
    assert out["text"] == "[node 1] one\n[node 1] two\n[node 0] hello\n[node 0] rest\n"
    later = views.output_lines(store, "pool-t1", after=out["next"] - 1)
    assert later["text"] == "[node 0] rest\n" and later["lines"] == 1


def test_no_secret_is_sent_a_jobs_log_is_redacted(skyhive_home):
    from skyhive.runtime.clusters import jobs as jobq
    from skyhive.runtime.clusters import record as records

    log = _pool("named1")
    log.close()
    records.save(records.ClusterRecord(name="named1", provider="local", nodes=2, processes_per_node=1, cwd="/",
                                       socket_dir="/nonexistent", created=1.0))
    job = jobq.submit("named1", job_name="j", steps=b"", with_setup=False, env={"PLAIN": "p"},
                      secrets={"TOKEN": "s3cr3t-value"})
    jobq.log_path("named1", job.id).write_text("[node 0] token=s3cr3t-value\n[node 1] half")
    part = views.job_log("named1", job.id)
    assert part["text"] == "[node 0] token=***\n"  # a job still pending: whole lines only
    assert "secrets" not in part["job"] and "env" not in part["job"]
    store = StateDir()
    store.refresh()
    sent = json.dumps([views.named_rows(), views.pool_detail(store, "named1"), views.event_rows(store, "named1")])
    assert "s3cr3t-value" not in sent and "tok-123" not in sent
    assert views.pool_detail(store, "named1")["provider_config"]["api_token"] == "***"


def test_an_unknown_pool_or_job_is_named_in_the_error(skyhive_home):
    store = StateDir()
    store.refresh()
    with pytest.raises(LookupError, match="no pool 'nope'"):
        views.pool_detail(store, "nope")
    from skyhive.runtime.clusters import record as records

    records.save(records.ClusterRecord(name="q", provider="local", nodes=1, processes_per_node=1, cwd="/",
                                       socket_dir="/nonexistent", created=1.0))
    with pytest.raises(LookupError, match="pool 'q' has no job 9"):
        views.job_log("q", 9)


def test_a_big_task_lane_is_merged_to_a_bounded_number_of_spans(skyhive_home):
    log = _pool(nodes=1)
    for t in range(views.MAX_SPANS * 3):
        log.emit(TaskSubmitted, task=t, node=0, local_rank=0, fn="f", items=1)
        log.emit(TaskFinished, task=t, node=0, local_rank=0, outcome="error" if t == 5 else "ok", error="")
    log.close()
    store = StateDir()
    store.refresh()
    tl = views.timeline_json(store, "pool-t1")
    tasks = [lane for lane in tl["lanes"] if lane["tasks"]][0]
    assert len(tasks["spans"]) <= views.MAX_SPANS
    assert sum(int(s[3].split()[0]) for s in tasks["spans"]) == views.MAX_SPANS * 3
    assert [s[2] for s in tasks["spans"]].count("error") == 1  # the worst outcome of a merged run shows


def test_managed_jobs_view_reads_events_incrementally_and_the_log_in_whole_lines(skyhive_home):
    from skyhive.runtime.dashboard import actions
    from skyhive.runtime.dashboard.managed_view import ManagedJobs, managed_log
    from skyhive.runtime.control.managed import store

    job = store.new_job("train", b"not a task", 2)
    for kind, data in (("attempt", {"attempt": 1, "pool": "train-job1-1"}), ("running", {}),
                       ("lost", {"detail": "node 0 lost"}), ("attempt", {"attempt": 2, "pool": "train-job1-2"}),
                       ("running", {}), ("error", {"detail": "run failed on node 0: exit code 3"}),
                       ("attempt", {"attempt": 3, "pool": "train-job1-3"}), ("running", {})):
        store.append(job, kind, **data)
    log_file = store.log_path(job)
    log_file.write_text("step 1\n[skyhive] node lost (node 0 lost): recovering\nstep 2\npart")
    jobs = ManagedJobs()
    [row] = jobs.rows(now=store.load(job).submitted + 125)
    assert (row["id"], row["name"], row["state"], row["attempts"], row["recoveries"], row["restarts"], row["age"]) \
        == (job, "train", "RUNNING", 3, 1, "1/2", "2m")
    assert row["pools"] == ["train-job1-1", "train-job1-2", "train-job1-3"] and not row["finished"]
    # nobody holds its lock: shown, with what restarts it (and the lock is not taken by the look)
    assert row["controller"] is None and "controller is not running" in row["detail"]
    events = store.job_dir(job) / "events.jsonl"
    read = jobs.jobs[job].offset
    assert read == events.stat().st_size
    # a torn line waits for its end; then only the new bytes are read
    with open(events, "a") as fh:
        fh.write('{"kind": "succeeded", "time": 1')
    assert jobs.rows()[0]["state"] == "RUNNING" and jobs.jobs[job].offset == read
    with open(events, "a") as fh:
        fh.write('e12, "attempt": 3}\n')
    [row] = jobs.rows()
    assert row["state"] == "SUCCEEDED" and row["finished"] and row["controller"] is None
    assert "controller" not in row["detail"] and len(jobs.jobs[job].events) == 10
    # the log: everything once the job ended, the recovery line as it was written
    part = managed_log(jobs, job, offset=0)
    assert part["text"].endswith("step 2\npart") and "[skyhive] node lost" in part["text"] and not part["more"]
    assert managed_log(jobs, job, offset=part["next"])["text"] == ""
    # a job still running: whole lines only
    other = store.new_job("second", b"", 0)
    store.append(other, "attempt", attempt=1, pool="p")
    store.log_path(other).write_text("one\ntw")
    part = managed_log(jobs, other, offset=0)
    assert part["text"] == "one\n" and part["next"] == 4 and part["job"]["state"] == "STARTING"
    assert [r["id"] for r in jobs.rows()] == [other, job]
    # errors name the job; nothing is made for a job that does not exist
    with pytest.raises(LookupError, match="no managed job 99"):
        managed_log(jobs, 99)
    with pytest.raises(LookupError, match="no managed job 99"):
        actions.cancel_managed_job(99)
    assert not (store.job_dir(job).parent / "99").exists()
    with pytest.raises(ValueError, match=f"managed job {job} has already ended \\(SUCCEEDED\\)"):
        actions.cancel_managed_job(job)
