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
    for n in range(nodes):
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
