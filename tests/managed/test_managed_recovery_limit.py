"""A managed job's recoveries are bounded (issue 36 point 3): a node lost every time — a worker that
dies at the same point of every attempt — no longer recovers for ever (a job whose program exited 0
ran 59 attempts in 60 s, each a new machine on a cloud): after `max_recoveries` recoveries
(`resources.job_recovery.max_recoveries`, SKYHIVE_JOBS_MAX_RECOVERIES, default
`store.DEFAULT_MAX_RECOVERIES`) the job FAILS naming the limit. And the loss that started it: an
error naming a file whose name is not UTF-8 now reaches the controller as the program's own error
(the worker no longer dies reporting it), so the job ends at once. Real controllers, Local workers."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.runtime.control.managed import store
from tests.managed.test_managed_jobs import ended, gone, launch, live_workers, logs, skyhive

# exits 0 after killing its own worker (the shell's parent): every attempt's node is lost
LOSE_THE_NODE = textwrap.dedent("""\
    name: lost
    {extra}
    run: |
      echo "attempt on $(hostname)" >> "$SKYHIVE_CHECKPOINT_DIR/attempts"
      kill -9 $PPID
      exit 0
    """)


def test_a_node_lost_every_time_fails_the_job_after_max_recoveries(tmp_path, skyhive_home):
    path = tmp_path / "lost.yaml"
    path.write_text(LOSE_THE_NODE.format(extra="resources:\n  job_recovery:\n    max_recoveries: 2"))
    job = launch(str(path))
    info = ended(job)
    assert info["state"] == "FAILED", info
    assert info["attempts"] == 3 and info["recoveries"] == 2 and info["max_recoveries"] == 2, info
    assert "after 2 recoveries" in info["detail"] and "max_recoveries=2" in info["detail"], info["detail"]
    text = logs(job)
    assert text.count("recovery: starting attempt") == 2 and f"job {job} failed: node lost" in text, text
    attempts = (Path(skyhive_home) / "managed" / str(job) / "checkpoints" / "attempts").read_text()
    assert attempts.count("attempt on") == 3
    assert gone(info["controller_pid"]) and not live_workers(info["pools"])


def test_max_recoveries_0_fails_at_the_first_loss_and_the_default_comes_from_the_environment(
        tmp_path, skyhive_home, monkeypatch):
    path = tmp_path / "lost.yaml"
    path.write_text(LOSE_THE_NODE.format(extra=""))
    monkeypatch.setenv("SKYHIVE_JOBS_MAX_RECOVERIES", "0")  # (read by `jobs launch`, kept with the job)
    job = launch(str(path))
    info = ended(job)
    assert info["state"] == "FAILED" and info["attempts"] == 1 and info["recoveries"] == 0, info
    assert "max_recoveries=0" in info["detail"]
    assert gone(info["controller_pid"]) and not live_workers(info["pools"])
    monkeypatch.delenv("SKYHIVE_JOBS_MAX_RECOVERIES")
    assert store.default_max_recoveries() == store.DEFAULT_MAX_RECOVERIES
    # a bad value in the task file is refused before anything is recorded
    path.write_text(LOSE_THE_NODE.format(extra="resources:\n  job_recovery:\n    max_recoveries: -1"))
    out = skyhive("jobs", "launch", str(path), "-y")
    assert out.returncode == 2 and "max_recoveries" in out.stderr and "lost.yaml" in out.stderr, out.stderr
    assert [j.id for j in map(store.load, store.list_ids())] == [job]


@sky.compute
def fail_naming_a_bad_file() -> None:
    (sky.checkpoint_dir() / f"try.{os.getpid()}").touch()
    raise ValueError(f"could not upload {os.fsdecode(b'ckpt-' + bytes([0xFF]) + b'.bin')}")


def test_a_managed_job_whose_error_names_a_non_utf8_file_ends_with_that_error(skyhive_home):
    job = sky.jobs.launch(fail_naming_a_bad_file())
    with pytest.raises(ValueError) as err:
        job.result(timeout=120)
    assert str(err.value) == f"could not upload {os.fsdecode(b'ckpt-' + bytes([0xFF]) + b'.bin')}"
    info = job.info()
    assert info["state"] == "FAILED" and info["attempts"] == 1 and info["recoveries"] == 0, info
    assert "ckpt-\\xff.bin" in info["detail"], info["detail"]
    assert len(list((Path(skyhive_home) / "managed" / str(job.id) / "checkpoints").glob("try.*"))) == 1
    assert gone(info["controller_pid"]) and not live_workers(info["pools"])


# node 1 of 2 kills its own worker every time: replaced in place (a recovery), then lost again
LOSE_NODE_1 = textwrap.dedent("""\
    name: gang
    num_nodes: 2
    resources:
      job_recovery:
        max_recoveries: 1
    run: |
      echo "node $SKYPILOT_NODE_RANK" >> "$SKYHIVE_CHECKPOINT_DIR/runs"
      if [ "$SKYPILOT_NODE_RANK" = 1 ]; then kill -9 $PPID; fi
      for i in $(seq 600); do sleep 0.1; done
    """)


def test_a_node_replaced_in_place_counts_and_the_next_loss_past_the_limit_fails_the_job(tmp_path, skyhive_home):
    path = tmp_path / "gang.yaml"
    path.write_text(LOSE_NODE_1)
    job = launch(str(path))
    info = ended(job)
    assert info["state"] == "FAILED" and info["recoveries"] == 1, info
    assert "after 1 recoveries" in info["detail"] and "max_recoveries=1" in info["detail"], info["detail"]
    assert "replacing only it" in logs(job)
    assert gone(info["controller_pid"]) and not live_workers(info["pools"])
