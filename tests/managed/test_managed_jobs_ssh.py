"""Managed jobs on real OpenSSH hosts (tests/infra: sshd in network namespaces), checkpoints on a bucket
(`moto_server` on the test bridge, as tests/storage/test_storage_ssh.py): the node's worker is killed mid-run →
the controller (a detached process of its own) tears the attempt down, sweeps what the dead worker left
on its host, and starts a new attempt on the *other* host, which resumes from the checkpoint in the
bucket; afterwards nothing of the job is left on either host. Then a job cancelled mid-run leaves
nothing either."""

from __future__ import annotations

import os
import secrets
import shutil
import signal

import pytest

import skyhive as sky
from tests.managed.test_managed_jobs import ended, logs, queue, wait_for
from tests.clusters.test_ssh_down import pool_files, pool_processes, still_running
from tests.kinds.ssh.test_ssh_pool import ssh_for
from tests.kinds.ssh.test_ssh_replace import ssh_id
from tests.storage.test_storage_ssh import _clean, bridge_s3  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow]

IDLE = 3.0  # a detached worker whose client is gone exits after this

TRAIN = """\
import os, pathlib, re, time
ck = pathlib.Path(os.environ["SKYHIVE_CHECKPOINT_DIR"])
done = [int(m.group(1)) for f in ck.iterdir() if (m := re.fullmatch(r"step-(\\d+)", f.name))]
step = max(done, default=0)
print(f"resumed at {step} on {os.uname().nodename} task {os.environ['SKYPILOT_TASK_ID']}", flush=True)
pathlib.Path(os.path.expanduser("~/{tag}-pids")).write_text(f"{os.getppid()} {os.getpid()}")
while os.path.exists(os.path.expanduser("~/{tag}-gate")) and not os.path.exists(os.path.expanduser("~/{tag}-finish")):
    time.sleep(0.2)  # a host the test gated: the attempt waits here until the test lets it finish
while step < {steps}:
    time.sleep(0.2)
    step += 1
    (ck / "step.tmp").write_text(str(step))
    (ck / "step.tmp").rename(ck / f"step-{step}")  # a new name per checkpoint: whole files reach the bucket
    print(f"step {step}", flush=True)
    if step == {hold} and not os.path.exists(os.path.expanduser("~/{tag}-release")):
        while True:  # held here on the first host until the test has killed its worker
            time.sleep(0.2)
print(f"finished at {step}", flush=True)
"""

TASK = """\
name: {tag}
workdir: {work}
file_mounts:
  {tag}-ckpt:
    name: {tag}-ckpt
    mode: MOUNT_CACHED
run: |
  exec python3 train.py
"""


def _job(tmp_path, tag: str, *, steps: int, hold: int) -> str:
    work = tmp_path / tag
    work.mkdir()
    (work / "train.py").write_text(TRAIN.replace("{tag}", tag).replace("{steps}", str(steps))
                                   .replace("{hold}", str(hold)))
    (work / "task.yaml").write_text(TASK.format(tag=tag, work=work))
    return str(work / "task.yaml")


def _step_in_bucket(s3, tag: str, job: int) -> int:
    """The newest checkpoint of the job uploaded to its bucket."""
    prefix = f"{tag}-job{job}/step-"
    return max((int(k[len(prefix):]) for k in s3.keys(f"{tag}-ckpt") if k.startswith(prefix)), default=0)


def _wait(predicate, job: int, what: str) -> None:
    """`wait_for`, failing with the job's log and its controller's."""
    from skyhive.runtime.control.managed import store

    try:
        wait_for(predicate, what=what)
    except AssertionError as exc:
        d = store.job_dir(job)
        told = "".join(f"\n--- {n}\n" + (d / n).read_text()[:3000] for n in ("job.log", "controller.log")
                       if (d / n).exists())
        raise AssertionError(f"{exc}{told}") from None


def _nothing_left(hosts, pools: list[str], job: int) -> None:
    """Once the job's controller has left (its last sweep done): no process of the job's pools on any host,
    no socket of theirs, no working directory of the job."""
    from tests.managed.test_managed_jobs import gone

    assert pools
    pid = queue()[job]["controller_pid"]
    assert pid and gone(pid, timeout=120), "the controller did not finish"
    assert queue()[job]["leaked"] == []
    for pool in pools:
        assert not still_running(pool_processes(pool), timeout=IDLE + 20), pool
        for host in hosts:
            assert not [p for p in pool_files(host, pool) if p.name.endswith(".sock")], (host.hostname, pool)
    for host in hosts:
        assert not (host.home / ".skyhive" / "work" / f"managed-job{job}").exists(), host.hostname


def test_a_managed_job_whose_ssh_worker_is_killed_resumes_on_the_other_host(netns_hosts, bridge_s3, tmp_path,
                                                                             monkeypatch, skyhive_home):
    a, b = list(netns_hosts)[:2]
    monkeypatch.setenv("SKYHIVE_STORAGE_SYNC_INTERVAL", "0.2")  # the controller (and its nodes) inherit it
    tag = f"mj{secrets.token_hex(3)}"
    s3 = bridge_s3
    s3.client().create_bucket(Bucket=f"{tag}-ckpt")
    provider = ssh_for([a, b], connect_timeout=3, reconnect_timeout=4, idle_timeout=IDLE)
    try:
        # 1 node on [a, b]: the job starts on a; b is where a recovery goes
        job = sky.jobs.launch(_job(tmp_path, tag, steps=10, hold=4), provider=provider)
        _wait(lambda: _step_in_bucket(s3, tag, job) >= 4, job, "step 4 in the bucket")
        worker, program = map(int, (a.home / f"{tag}-pids").read_text().split())
        with open(f"/proc/{worker}/cmdline", "rb") as fh:
            assert b"skyhive.runtime.worker" in fh.read()
        (b.home / f"{tag}-release").write_text("go on")  # the next host runs to the end
        os.kill(worker, signal.SIGKILL)
        info = ended(job)
        assert info["state"] == "SUCCEEDED", (info, logs(job))
        assert (info["attempts"], info["recoveries"], info["restarts_on_errors"]) == (2, 1, 0), info
        assert info["leaked"] == [] and b.host in info["nodes"] and a.host not in info["nodes"]
        text = logs(job)
        starts = [line for line in text.splitlines() if line.startswith("resumed at ")]
        assert len(starts) == 2, text
        assert starts[0].startswith(f"resumed at 0 on {a.hostname} ")
        assert starts[1].startswith(f"resumed at 4 on {b.hostname} "), text  # from the bucket, on the other host
        assert starts[0].split(" task ")[1] == starts[1].split(" task ")[1]  # one SKYPILOT_TASK_ID
        assert "[skyhive] node lost" in text and f"{ssh_id(a)} is tried last" in text, text
        assert text.index("[skyhive] node lost") < text.index(starts[1])
        assert [ln for ln in text.splitlines() if ln.startswith("step ")] == [f"step {i}" for i in range(1, 11)]
        assert _step_in_bucket(s3, tag, job) == 10
        # the first host's orphaned program was stopped by the controller's sweep, not left to run
        assert not still_running({program}, timeout=10)
        _nothing_left([a, b], info["pools"], job)

        # a job cancelled mid-run: CANCELLED, and nothing of it left on the hosts either
        other = f"{tag}c"
        s3.client().create_bucket(Bucket=f"{other}-ckpt")
        job2 = sky.jobs.launch(_job(tmp_path, other, steps=100000, hold=-1), provider=provider)
        _wait(lambda: _step_in_bucket(s3, other, job2) >= 1, job2, "a step of the second job")
        _, program2 = map(int, (a.home / f"{other}-pids").read_text().split())
        assert sky.jobs.cancel(job2) == "CANCELLED"
        info2 = queue()[job2]
        assert info2["attempts"] == 1 and info2["leaked"] == []
        assert not still_running({program2}, timeout=10)
        _nothing_left([a, b], info2["pools"], job2)
    finally:
        for j in sky.jobs.queue():
            if j["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                sky.jobs.cancel(j["id"])
        _clean([a, b], f"{tag}-ckpt", f"{tag}c-ckpt", ".skyhive/storage-deps")
        for host in (a, b):
            for name in (f"{tag}-pids", f"{tag}-release", f"{tag}c-pids"):
                (host.home / name).unlink(missing_ok=True)


def test_a_managed_job_whose_host_is_cut_off_resumes_elsewhere_and_the_host_is_cleaned_when_it_answers(
        netns_hosts, bridge_s3, tmp_path, monkeypatch, skyhive_home):
    """The host's cable cut mid-run (a partition: its worker and program live on, unreachable): the
    worker is lost after `reconnect_timeout`, the controller cannot sweep that host yet and says so, the
    job resumes on the other host from the bucket; the cut host answers again before the job ends, and
    the final sweep stops the program left there — nothing of the job is left, nothing recorded leaked."""
    a, b = list(netns_hosts)[:2]
    monkeypatch.setenv("SKYHIVE_STORAGE_SYNC_INTERVAL", "0.2")
    monkeypatch.setenv("SKYHIVE_JOBS_HEARTBEAT_TIMEOUT", "5")  # a silent node is lost after 5 s, not 20
    tag = f"mp{secrets.token_hex(3)}"
    s3 = bridge_s3
    s3.client().create_bucket(Bucket=f"{tag}-ckpt")
    provider = ssh_for([a, b], connect_timeout=3, reconnect_timeout=4, idle_timeout=IDLE)
    try:
        job = sky.jobs.launch(_job(tmp_path, tag, steps=10, hold=4),
                              provider=provider)
        _wait(lambda: _step_in_bucket(s3, tag, job) >= 4, job, "step 4 in the bucket")
        worker, program = map(int, (a.home / f"{tag}-pids").read_text().split())
        (b.home / f"{tag}-release").write_text("go on")
        (b.home / f"{tag}-gate").write_text("wait")  # attempt 2 waits on b until the cut host answers again
        a.set_link(False)
        _wait(lambda: queue()[job]["attempts"] == 2 and queue()[job]["state"] == "RUNNING", job,
              "the recovery's attempt to run")
        # the replacement's pool is up beside the lost attempt's sweep, which cannot reach the host
        _wait(lambda: "could not clean up the lost attempt's pool yet" in logs(job), job, "the sweep to give up")
        assert still_running({worker, program}, timeout=0) == {worker, program}  # alive, out of reach
        a.set_link(True)
        (b.home / f"{tag}-finish").write_text("go on")  # the job ends only now: its last sweep can reach a
        info = ended(job)
        assert info["state"] == "SUCCEEDED", (info, logs(job))
        assert (info["attempts"], info["recoveries"]) == (2, 1) and info["leaked"] == [], info
        text = logs(job)
        assert "WorkerLost" in text and "[skyhive] node lost" in text, text
        assert "could not clean up the lost attempt's pool yet (retried when the job ends)" in text, text
        assert f"resumed at 4 on {b.hostname} " in text, text
        assert not still_running({worker, program}, timeout=10)  # the final sweep reached the host again
        _nothing_left([a, b], info["pools"], job)
    finally:
        a.set_link(True)
        for j in sky.jobs.queue():
            if j["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                sky.jobs.cancel(j["id"])
        _clean([a, b], f"{tag}-ckpt", ".skyhive/storage-deps")
        for host in (a, b):
            for name in (f"{tag}-pids", f"{tag}-release", f"{tag}-gate", f"{tag}-finish"):
                (host.home / name).unlink(missing_ok=True)
            for left in host.home.glob(".skyhive/work/managed-job*"):  # a failed run's: not the next test's
                shutil.rmtree(left, ignore_errors=True)


GANG = """\
name: {tag}
num_nodes: 2
setup: |
  echo "setup $SKYPILOT_NODE_RANK" >> ~/{tag}-setup
run: |
  echo "$PPID $$" > ~/{tag}-pids
  echo "rank $SKYPILOT_NODE_RANK on $(hostname) peers $(echo $SKYPILOT_NODE_IPS | tr '\\n' ' ')"
  n=0
  while [ ! -f ~/{tag}-finish ] && [ $n -lt 3000 ]; do sleep 0.2; n=$((n+1)); done
"""


def test_a_two_node_ssh_job_replaces_only_the_lost_host_and_a_restarted_controller_still_avoids_it(
        netns_hosts, tmp_path, skyhive_home):
    """Two nodes on [a, b, c]: node 1's worker (on b) is killed → only node 1 is replaced, by the spare c
    (a keeps its worker and what setup made; setup runs on c only; the run restarts on a and c). Then
    the controller is SIGKILLed: started again, its new attempt (fresh nodes) still takes b last — the
    places lost are kept with the job, not in the dead controller's memory — so it runs on a and c."""
    from tests.managed.test_managed_jobs import gone

    a, b, c = list(netns_hosts)[:3]
    tag = f"mg{secrets.token_hex(3)}"
    (tmp_path / "task.yaml").write_text(GANG.format(tag=tag))
    provider = ssh_for([a, b, c], connect_timeout=3, reconnect_timeout=4, idle_timeout=IDLE)
    pids = {h.hostname: h.home / f"{tag}-pids" for h in (a, b, c)}
    try:
        job = sky.jobs.launch(str(tmp_path / "task.yaml"), provider=provider)
        def written(h) -> bool:
            return pids[h.hostname].exists() and len(pids[h.hostname].read_text().split()) == 2

        _wait(lambda: written(a) and written(b), job, "the run on a and b")
        worker_a, script_a = map(int, pids[a.hostname].read_text().split())
        worker_b, script_b = map(int, pids[b.hostname].read_text().split())
        os.kill(worker_b, signal.SIGKILL)
        def restarted() -> bool:  # (a script rewriting its file may be read half-written: not yet)
            words = pids[a.hostname].read_text().split() if pids[a.hostname].exists() else []
            return pids[c.hostname].exists() and len(words) == 2 and words[1] != str(script_a)

        _wait(restarted, job, "the run restarted on a and c")
        info = queue()[job]
        assert (info["attempts"], info["recoveries"], len(info["pools"])) == (1, 1, 1), info
        assert ssh_id(a) in info["nodes"] and ssh_id(c) in info["nodes"] and ssh_id(b) not in info["nodes"], info
        assert int(pids[a.hostname].read_text().split()[0]) == worker_a  # a kept its worker: not re-provisioned
        assert not still_running({script_a, script_b, worker_b}, timeout=10)  # never two rounds at once
        assert (a.home / f"{tag}-setup").read_text() == "setup 0\n"  # setup again on c only
        assert (c.home / f"{tag}-setup").read_text() == "setup 1\n"
        text = logs(job)
        assert "replacing only it" in text and f"node 1 replaced ({ssh_id(b)} -> {ssh_id(c)})" in text, text

        # the controller killed and started again (`jobs queue` does): a new attempt, b still taken last
        os.kill(info["controller_pid"], signal.SIGKILL)
        for path in pids.values():
            path.unlink(missing_ok=True)
        _wait(lambda: (j := queue()[job])["attempts"] == 2 and j["state"] == "RUNNING", job, "attempt 2")
        _wait(lambda: written(a) and written(c), job, "attempt 2's run on a and c")
        info = queue()[job]
        assert ssh_id(b) not in info["nodes"] and not pids[b.hostname].exists(), (info, logs(job))
        for h in (a, b, c):
            (h.home / f"{tag}-finish").write_text("done")
        info = ended(job)
        assert info["state"] == "SUCCEEDED", (info, logs(job))
        assert gone(worker_a) and gone(worker_b)
        _nothing_left([a, b, c], info["pools"], job)
    finally:
        for j in sky.jobs.queue():
            if j["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                sky.jobs.cancel(j["id"])
        for host in (a, b, c):
            for name in ("pids", "setup", "finish"):
                (host.home / f"{tag}-{name}").unlink(missing_ok=True)
            for left in host.home.glob(".skyhive/work/managed-job*"):
                shutil.rmtree(left, ignore_errors=True)
