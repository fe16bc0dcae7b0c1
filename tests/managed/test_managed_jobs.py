"""Managed jobs on Local (docs/jobs.md): `skyhive jobs launch/queue/logs/cancel`, a detached controller
per job, a lost node recovered on fresh nodes resuming from `SKYHIVE_CHECKPOINT_DIR`,
`max_restarts_on_errors`, a client killed after launch, a controller killed and started again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.procs import Lines, state_of, worker_pids

SKYHIVE = [sys.executable, "-m", "skyhive"]

# a training loop: resumes from the step in its checkpoint folder, writes the step after each one; the
# pid of its worker (its parent: `exec` replaces the shell) and its own, per start, for the test to kill
TRAIN = textwrap.dedent("""\
    name: train
    {extra}
    run: |
      exec python3 -c '
      import os, sys, time
      d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; rank = os.environ["SKYPILOT_NODE_RANK"]
      p = os.path.join(d, "step" if rank == "0" else "step." + rank)
      step = int(open(p).read()) if os.path.exists(p) else 0
      print("start at step", step, "task", os.environ["SKYPILOT_TASK_ID"], "job", os.environ["SKYHIVE_JOB_ID"], flush=True)
      open(os.path.join(d, "started.%s.%d" % (rank, step)), "w").write("%d %d" % (os.getppid(), os.getpid()))
      while step < {steps}:
          time.sleep({pause}); step += 1
          open(p + ".tmp", "w").write(str(step)); os.replace(p + ".tmp", p)
          print("step", step, flush=True)
          {hold}
      {after}
      '
""")


# the program waits at step 3 until the test writes `release` in the checkpoint folder (no timing margin)
HOLD_AT_3 = 'while step == 3 and not os.path.exists(os.path.join(d, "release")): time.sleep(0.1)'


def task_file(tmp_path: Path, *, steps: int = 12, pause: float = 0.3, extra: str = "", after: str = "",
              name: str = "task.yaml", hold: str = "pass") -> str:
    path = tmp_path / name
    path.write_text(TRAIN.format(steps=steps, pause=pause, extra=extra, after=after, hold=hold))
    return str(path)


def skyhive(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], capture_output=True, text=True, timeout=timeout)


def launch(path: str, *extra: str) -> int:
    out = skyhive("jobs", "launch", path, "-y", *extra)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("managed job ", 1)[1].split()[0])


def queue() -> dict[int, dict]:
    out = skyhive("jobs", "queue", "--json")
    assert out.returncode == 0, out.stderr
    return {j["id"]: j for j in map(json.loads, out.stdout.splitlines())}


def wait_for(predicate, timeout: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def ended(job_id: int) -> dict:
    return wait_for(lambda: (j := queue()[job_id])["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and j,
                    what=f"job {job_id} to end")


def ckpt(home: str, job_id: int) -> Path:
    return Path(home) / "managed" / str(job_id) / "checkpoints"


def step_of(home: str, job_id: int) -> int:
    p = ckpt(home, job_id) / "step"
    try:
        return int(p.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if state_of(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


def live_workers(pools: list[str]) -> set[int]:
    """The job's pools' worker processes still running (other pools on this machine are not ours: a
    pool's name is the job's, `<name>-job<ID>-<attempt>`, the same in another state directory — another
    test process's — so only the workers of this test's `SKYHIVE_HOME` count)."""
    assert pools
    home = f"SKYHIVE_HOME={os.environ['SKYHIVE_HOME']}".encode()

    def ours(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                return home in fh.read().split(b"\0")
        except OSError:
            return False

    return {p for pool in pools for p in worker_pids(pool) if ours(p) and not gone(p, timeout=10)}


def logs(job_id: int) -> str:
    out = skyhive("jobs", "logs", "--no-follow", str(job_id))  # (a cancelled job's followed log exits 1)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_jobs_launch_returns_and_the_controller_runs_the_job_to_its_end(tmp_path, skyhive_home):
    job = launch(task_file(tmp_path, steps=3, pause=0.1))
    info = ended(job)
    assert info["state"] == "SUCCEEDED" and info["attempts"] == 1 and info["recoveries"] == 0
    text = logs(job)
    assert "start at step 0" in text and "step 3" in text and f"job {job} succeeded" in text
    (start,) = [line for line in text.splitlines() if line.startswith("start at step")]
    assert start.endswith(f" job {job}") and f"-managed-{job} " in start  # SKYHIVE_JOB_ID, SKYPILOT_TASK_ID
    # the checkpoint folder is the job's, under SKYHIVE_HOME, private
    assert step_of(skyhive_home, job) == 3
    assert (os.stat(ckpt(skyhive_home, job)).st_mode & 0o777) == 0o700
    assert wait_for(lambda: info["controller_pid"] and gone(info["controller_pid"]), what="the controller to exit")
    follow = skyhive("jobs", "logs", "--follow", str(job))
    assert follow.returncode == 0 and follow.stdout == text
    table = skyhive("jobs", "queue")
    assert table.returncode == 0 and "SUCCEEDED" in table.stdout and "RECOVERIES" in table.stdout
    assert "COST" in table.stdout and info["cost_usd"] is None  # Local: nothing to pay


def test_a_node_whose_worker_is_killed_is_recovered_and_the_job_resumes_from_its_checkpoint(tmp_path, skyhive_home):
    job = launch(task_file(tmp_path, hold=HOLD_AT_3))  # (held at step 3: the recovery resumes at 3, runs on)
    wait_for(lambda: step_of(skyhive_home, job) >= 3, what="three steps")
    started = sorted(ckpt(skyhive_home, job).glob("started.*"))
    assert [p.name for p in started] == ["started.0.0"]
    worker, program = map(int, started[0].read_text().split())
    with open(f"/proc/{worker}/cmdline", "rb") as fh:
        assert b"skyhive.runtime.worker" in fh.read()
    os.kill(worker, signal.SIGKILL)
    info = ended(job)
    assert info["state"] == "SUCCEEDED", info
    assert info["attempts"] == 2 and info["recoveries"] == 1 and info["restarts_on_errors"] == 0
    text = logs(job)
    starts = [line for line in text.splitlines() if line.startswith("start at step")]
    assert len(starts) == 2 and starts[0].startswith("start at step 0 ")
    resumed = int(starts[1].split()[3])
    assert resumed >= 3, starts  # resumed from its checkpoint, not from 0
    # one SKYPILOT_TASK_ID across the recovery; one continuous log with the recovery marked
    assert starts[0].split(" task ")[1] == starts[1].split(" task ")[1]
    assert "[skyhive] node lost" in text and "WorkerLost" in text and "[skyhive] recovery: starting attempt 2" in text
    assert text.index("[skyhive] node lost") < text.index(starts[1]) < text.index("step 12")
    assert text.count("step 12") == 1 and step_of(skyhive_home, job) == 12
    # the first attempt's program went with its node; nothing of either pool is left
    assert gone(program)
    assert not live_workers(info["pools"])
    assert gone(info["controller_pid"])


def test_max_restarts_on_errors_restarts_the_programs_failures_and_no_more(tmp_path, skyhive_home):
    # fails once (exit 3) after its steps unless it failed before: the retry resumes and succeeds
    after = 'm = os.path.join(d, "failed")\n  if not os.path.exists(m): open(m, "w").close(); sys.exit(3)'
    ok = launch(task_file(tmp_path, steps=2, pause=0.1, after=after,
                          extra="resources:\n  job_recovery:\n    max_restarts_on_errors: 1"))
    info = ended(ok)
    assert info["state"] == "SUCCEEDED" and info["restarts_on_errors"] == 1 and info["recoveries"] == 0
    assert "restarting (1 of max_restarts_on_errors=1)" in logs(ok)
    # without it (the default, 0) the first failure ends the job
    bad = launch(task_file(tmp_path, steps=1, pause=0.1, after=after, name="bad.yaml"))
    info = ended(bad)
    assert info["state"] == "FAILED" and info["attempts"] == 1 and "exit code 3" in info["detail"]


def test_a_bad_max_restarts_on_errors_is_refused_before_anything_is_submitted(tmp_path, skyhive_home):
    path = task_file(tmp_path, extra="resources:\n  job_recovery:\n    max_restarts_on_errors: -1")
    out = skyhive("jobs", "launch", path, "-y")
    assert out.returncode == 2
    assert "max_restarts_on_errors" in out.stderr and "task.yaml" in out.stderr
    assert not (Path(skyhive_home) / "managed").exists() or not list((Path(skyhive_home) / "managed").glob("[0-9]*"))
    out = skyhive("jobs", "logs", "7")
    assert out.returncode == 1 and "no managed job 7" in out.stderr


def test_the_job_finishes_after_its_client_is_killed_right_after_launch(tmp_path, skyhive_home):
    proc = subprocess.Popen([*SKYHIVE, "jobs", "launch", task_file(tmp_path, steps=4, pause=0.2), "-y"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = Lines(proc.stdout).wait_for("managed job ", 120, "jobs launch's first line")
    os.killpg(proc.pid, signal.SIGKILL)  # the client and anything left in its group
    proc.wait()
    job = int(line.split("managed job ", 1)[1].split()[0])
    info = ended(job)
    assert info["state"] == "SUCCEEDED" and step_of(skyhive_home, job) == 4


def test_cancel_stops_the_job_and_leaves_no_process(tmp_path, skyhive_home):
    job = launch(task_file(tmp_path, steps=1000, pause=0.2))
    wait_for(lambda: step_of(skyhive_home, job) >= 1, what="a step")
    worker, program = map(int, (ckpt(skyhive_home, job) / "started.0.0").read_text().split())
    controller = queue()[job]["controller_pid"]
    assert worker in worker_pids(queue()[job]["pools"][-1])  # the leak check below sees the job's workers
    out = skyhive("jobs", "cancel", str(job), "-y")
    assert out.returncode == 0, out.stderr
    assert f"job {job} cancelled" in out.stderr
    info = queue()[job]
    assert info["state"] == "CANCELLED"
    for pid in (controller, worker, program):
        assert gone(pid), pid
    assert not live_workers(info["pools"])
    assert "cancelled while running" in logs(job)
    # nothing to cancel any more
    again = skyhive("jobs", "cancel", "--all", "-y")
    assert again.returncode == 0 and "no managed job to cancel" in again.stderr


def test_a_controller_killed_mid_job_is_started_again_and_resumes_without_a_second_copy(tmp_path, skyhive_home):
    job = launch(task_file(tmp_path, steps=14, pause=0.3, hold=HOLD_AT_3))
    wait_for(lambda: step_of(skyhive_home, job) >= 3, what="three steps")
    worker, program = map(int, (ckpt(skyhive_home, job) / "started.0.0").read_text().split())
    first = queue()[job]["controller_pid"]
    os.kill(first, signal.SIGKILL)
    # the dead controller's pool goes with it: its worker and its program end
    assert gone(worker) and gone(program)
    (ckpt(skyhive_home, job) / "release").write_text("go on")
    info = queue()  # `jobs queue` starts a controller for a job left without one
    info = ended(job)
    assert info["state"] == "SUCCEEDED", info
    assert info["controller_pid"] != first and info["attempts"] == 2
    text = logs(job)
    starts = [line for line in text.splitlines() if line.startswith("start at step")]
    assert len(starts) == 2 and int(starts[1].split()[3]) >= 3
    assert "the controller was restarted" in text and text.count("step 14") == 1


def test_a_controller_sent_sigterm_cancels_its_job_and_tears_its_pool_down(tmp_path, skyhive_home):
    job = launch(task_file(tmp_path, steps=1000, pause=0.2))
    wait_for(lambda: step_of(skyhive_home, job) >= 1, what="a step")
    worker, program = map(int, (ckpt(skyhive_home, job) / "started.0.0").read_text().split())
    info = queue()[job]
    os.kill(info["controller_pid"], signal.SIGTERM)
    info = ended(job)
    assert info["state"] == "CANCELLED"
    for pid in (info["controller_pid"], worker, program):
        assert gone(pid), pid
    assert not live_workers(info["pools"])


# a gang of two: each start of a rank's program takes the next number (start.<rank>.<n>, O_EXCL) and
# records whether a program of an earlier round — of any rank — still runs (two copies at once)
GANG = textwrap.dedent("""\
    name: gang
    num_nodes: 2
    setup: |
      echo $$ >> "$SKYHIVE_CHECKPOINT_DIR/setup.$SKYPILOT_NODE_RANK"
    run: |
      exec python3 -c '
      import glob, os, time
      d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; rank = os.environ["SKYPILOT_NODE_RANK"]
      n = 0
      while True:
          try:
              fd = os.open(os.path.join(d, "start.%s.%d" % (rank, n)), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
              break
          except FileExistsError:
              n += 1
      os.write(fd, b"%d %d" % (os.getppid(), os.getpid())); os.close(fd)
      for f in glob.glob(os.path.join(d, "start.*.*")):
          if int(f.rsplit(".", 1)[1]) < n:
              pid = int(open(f).read().split()[1])
              try:
                  state = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0]
              except OSError:
                  continue
              if state != "Z":
                  open(os.path.join(d, "overlap"), "a").write("%s round %d: %s runs\\n" % (rank, n, f))
      p = os.path.join(d, "step." + rank)
      step = int(open(p).read()) if os.path.exists(p) else 0
      print("round", n, "start at step", step, flush=True)
      while step < {steps}:
          time.sleep(0.3); step += 1
          open(p + ".tmp", "w").write(str(step)); os.replace(p + ".tmp", p)
          while step == 2 and not os.path.exists(os.path.join(d, "release")):
              time.sleep(0.1)  # the first round waits here until the test has killed node 1
      print("done", flush=True)
      '
""")


def test_a_two_node_job_replaces_only_the_lost_node_and_restarts_the_gang(tmp_path, skyhive_home):
    path = tmp_path / "gang.yaml"
    path.write_text(GANG.format(steps=12))
    job = launch(str(path))
    folder = ckpt(skyhive_home, job)
    wait_for(lambda: (folder / "start.1.0").exists() and (folder / "start.0.0").exists(), what="both nodes")
    wait_for(lambda: all((folder / f"step.{r}").exists() and int((folder / f"step.{r}").read_text() or 0) >= 2
                         for r in "01"), what="two steps on each node")
    kept, first0 = map(int, (folder / "start.0.0").read_text().split())
    worker, first1 = map(int, (folder / "start.1.0").read_text().split())
    os.kill(worker, signal.SIGKILL)
    info = ended(job)
    text = logs(job)
    # one attempt, one pool: only the lost node was replaced
    assert info["state"] == "SUCCEEDED", (info, text)
    assert (info["attempts"], info["recoveries"], len(info["pools"])) == (1, 1, 1), (info, text)
    # node 0 kept its worker (its machine): the gang's run restarted there in the same worker
    again0, second0 = map(int, (folder / "start.0.1").read_text().split())
    again1, second1 = map(int, (folder / "start.1.1").read_text().split())
    assert again0 == kept and second0 != first0
    assert again1 != worker and second1 != first1
    assert not (folder / "start.0.2").exists() and not (folder / "start.1.2").exists()
    # setup ran again on the replacement only; never two rounds at once; both resumed from their checkpoints
    assert len((folder / "setup.0").read_text().split()) == 1
    assert len((folder / "setup.1").read_text().split()) == 2
    assert not (folder / "overlap").exists(), (folder / "overlap").read_text()
    assert (folder / "step.0").read_text() == "12" and (folder / "step.1").read_text() == "12"
    rounds = [line for line in text.splitlines() if "round 1 start at step" in line]
    assert len(rounds) == 2 and all(int(line.split()[-1]) >= 1 for line in rounds), text
    assert "replacing only it" in text and "node 1 replaced" in text, text
    from skyhive.runtime.control.managed import store

    kinds = [e["kind"] for e in store.events(job)]
    assert "replaced" in kinds and "lost" not in kinds, kinds
    for pid in (worker, first0, first1, second0, second1):
        assert gone(pid), pid
    assert not live_workers(info["pools"])


def test_cancel_during_a_recovery_leaves_nothing(tmp_path, skyhive_home):
    # the recovery's setup hangs (a slow new node): cancel it there
    setup = ('setup: |\n  if [ -f "$SKYHIVE_CHECKPOINT_DIR/step" ]; then echo $$ > "$SKYHIVE_CHECKPOINT_DIR/recovering"; '
             'exec sleep 600; fi')
    job = launch(task_file(tmp_path, steps=1000, pause=0.2, extra=setup))
    wait_for(lambda: step_of(skyhive_home, job) >= 2, what="two steps")
    worker, program = map(int, (ckpt(skyhive_home, job) / "started.0.0").read_text().split())
    os.kill(worker, signal.SIGKILL)
    marker = ckpt(skyhive_home, job) / "recovering"
    wait_for(lambda: marker.exists() and marker.read_text().strip(), what="the recovery's setup")
    hanging = int(marker.read_text())
    info = queue()[job]
    assert info["state"] == "RUNNING" and info["recoveries"] == 1 and info["attempts"] == 2
    out = skyhive("jobs", "cancel", str(job), "-y")
    assert out.returncode == 0, out.stderr
    info = queue()[job]
    assert info["state"] == "CANCELLED"
    for pid in (info["controller_pid"], worker, program, hanging):
        assert gone(pid), pid
    assert not live_workers(info["pools"]) and len(info["pools"]) == 2


def test_managed_jobs_from_python(tmp_path, skyhive_home):
    import skyhive as sky
    from skyhive.errors import TaskFileError

    job = sky.jobs.launch(task_file(tmp_path, steps=1000, pause=0.2), name="py")
    wait_for(lambda: step_of(skyhive_home, job) >= 1, what="a step")
    (listed,) = [j for j in sky.jobs.queue() if j["id"] == job]
    assert listed["name"] == "py" and listed["state"] == "RUNNING"
    assert sky.jobs.cancel(job) == "CANCELLED"
    assert "start at step 0" in sky.jobs.log(job)
    with pytest.raises(LookupError, match="no managed job 99"):
        sky.jobs.log(99)
    with pytest.raises(TaskFileError, match="task.yaml"):
        sky.jobs.launch(task_file(tmp_path, extra="resources:\n  job_recovery:\n    max_restarts_on_errors: x"))


def test_the_event_log_survives_a_torn_line_and_bad_commands_say_what_is_wrong(tmp_path, skyhive_home):
    from skyhive.runtime.control.managed import store

    job = store.new_job("torn", b"", 2)
    store.append(job, "controller", pid=1)
    store.append(job, "attempt", attempt=1, pool="p-1", pid=1)
    store.append(job, "lost", attempt=1, detail="WorkerLost")
    with open(store.job_dir(job) / "events.jsonl", "a") as fh:
        fh.write('{"kind": "succ')  # a writer killed mid-line
    st = store.load(job)
    assert (st.state, st.attempts, st.recoveries, st.max_restarts_on_errors) == ("RECOVERING", 1, 1, 2)
    assert (os.stat(store.job_dir(job) / "events.jsonl").st_mode & 0o777) == 0o600
    with pytest.raises(LookupError, match="no managed job 42"):
        store.load(42)
    out = skyhive("jobs", "cancel")
    assert out.returncode == 2 and "name the jobs to cancel, or --all" in out.stderr
    out = skyhive("jobs", "cancel", "42", "-y")
    assert out.returncode == 1 and "no managed job 42" in out.stderr


def test_a_job_is_shown_ended_only_once_its_cleanup_is_confirmed_and_a_failed_one_stays_shown(tmp_path, skyhive_home):
    import skyhive as sky
    from tests.managed.gated import GatedLocal

    gate = tmp_path / "gate"
    gate.mkdir()
    job = sky.jobs.launch(task_file(tmp_path, steps=1, pause=0.1), provider=GatedLocal(str(gate)))
    wait_for(lambda: list(gate.glob("down.*")), what="the job's last sweep")
    # the program succeeded, its pools are being swept: not shown SUCCEEDED yet
    info = queue()[job]
    assert info["state"] == "CLEANING" and info["outcome"] == "succeeded" and info["ended"] is None, info
    (gate / "fail").touch()  # the sweep fails (a host unreachable)
    info = wait_for(lambda: (j := queue()[job])["state"] == "LEAKED" and j, what="the sweep to fail")
    assert any(f"train-job{job}-1" in p and "host unreachable" in p for p in info["leaked"]), info
    assert "not cleaned up" in info["detail"] and info["ended"] is None
    assert gone(info["controller_pid"])  # the controller left; `jobs queue` does not start it again
    assert queue()[job]["state"] == "LEAKED" and gone(info["controller_pid"])
    table = skyhive("jobs", "queue")
    assert table.returncode == 0 and "LEAKED" in table.stdout
    assert "could not clean up after the job" in logs(job)
    # a cancel that cannot finish the sweep either says so and leaves it shown
    out = skyhive("jobs", "cancel", str(job), "-y")
    assert out.returncode == 1 and "not cleaned up" in out.stderr, out.stderr
    assert queue()[job]["state"] == "LEAKED"
    # once the sweep can go through, `jobs cancel` finishes it and the job's own outcome is recorded
    (gate / "fail").unlink()
    (gate / "go").touch()
    out = skyhive("jobs", "cancel", str(job), "-y")
    assert out.returncode == 0 and f"job {job} succeeded" in out.stderr, out.stderr
    info = queue()[job]
    assert info["state"] == "SUCCEEDED" and info["leaked"] == [] and info["ended"], info
    assert not live_workers(info["pools"])


# a program that says so when it starts while a copy of it still runs (an earlier start's pid alive) or
# before the lost attempt's sweep went through (the gate's `down.*` there, its `go` not yet)
OVERLAP = textwrap.dedent("""\
    name: train
    envs:
      GATE: {gate}
    run: |
      exec python3 -c '
      import glob, os, time
      d = os.environ["SKYHIVE_CHECKPOINT_DIR"]; p = os.path.join(d, "step"); gate = os.environ["GATE"]
      step = int(open(p).read()) if os.path.exists(p) else 0
      for f in glob.glob(os.path.join(d, "started.*")):
          pid = int(open(f).read().split()[1])
          try:
              alive = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] != "Z"
          except OSError:
              alive = False
          if alive:
              open(os.path.join(d, "overlap"), "a").write("%s still runs\\n" % f)
      if glob.glob(os.path.join(gate, "down.*")) and not os.path.exists(os.path.join(gate, "go")):
          open(os.path.join(d, "overlap"), "a").write("started before the sweep\\n")
      open(os.path.join(d, "started.%d" % step), "w").write("%d %d" % (os.getppid(), os.getpid()))
      while step < 6:
          time.sleep(0.2); step += 1
          open(p + ".tmp", "w").write(str(step)); os.replace(p + ".tmp", p)
      '
""")


def test_a_recovery_provisions_beside_the_lost_attempts_teardown_and_never_runs_two_copies(tmp_path, skyhive_home):
    import skyhive as sky
    from skyhive.runtime.control.managed import store
    from tests.managed.gated import GatedLocal

    gate = tmp_path / "gate"
    gate.mkdir()
    path = tmp_path / "task.yaml"
    path.write_text(OVERLAP.format(gate=gate))
    job = sky.jobs.launch(str(path), provider=GatedLocal(str(gate)))
    wait_for(lambda: step_of(skyhive_home, job) >= 2, what="two steps")
    worker, program = map(int, (ckpt(skyhive_home, job) / "started.0").read_text().split())
    os.kill(worker, signal.SIGKILL)
    # the lost attempt is being stopped (its sweep held at the gate) ...
    wait_for(lambda: (gate / f"down.train-job{job}-1").exists(), what="the lost attempt's sweep")
    # ... while the replacement's pool is provisioned and comes up beside it
    wait_for(lambda: [e for e in store.events(job) if e["kind"] == "running" and e.get("attempt") == 2],
             what="attempt 2's pool to run while attempt 1 is being stopped")
    info = queue()[job]
    assert info["attempts"] == 2 and info["recoveries"] == 1 and not (gate / "go").exists()
    # but its program waits for the lost attempt to be stopped: one copy at a time
    assert [p.name for p in ckpt(skyhive_home, job).glob("started.*")] == ["started.0"]
    (gate / "go").touch()
    info = ended(job)
    assert info["state"] == "SUCCEEDED" and info["attempts"] == 2 and info["recoveries"] == 1, info
    assert not (ckpt(skyhive_home, job) / "overlap").exists(), (ckpt(skyhive_home, job) / "overlap").read_text()
    assert len(list(ckpt(skyhive_home, job).glob("started.*"))) == 2 and step_of(skyhive_home, job) == 6
    kinds = [(e["kind"], e.get("attempt")) for e in store.events(job)]
    assert kinds.index(("running", 2)) < kinds.index(("stopped", 1))  # provisioned beside the teardown
    assert "attempt 2 waits for attempt 1 to be stopped" in logs(job)
    assert gone(program) and not live_workers(info["pools"])


def test_a_job_that_finds_no_capacity_waits_for_it_and_can_be_cancelled_while_waiting(tmp_path, skyhive_home,
                                                                                        monkeypatch):
    """No place has room (a cloud's capacity error): the job is not failed — it waits, trying again with
    backoff, shown as PENDING with why — and runs once there is room; a job cancelled while it waits ends
    CANCELLED at once with nothing made."""
    import skyhive as sky
    from tests.managed.gated import FullLocal

    monkeypatch.setenv("SKYHIVE_JOBS_CAPACITY_RETRY", "0.2")  # (the controller inherits it)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # it unpickles FullLocal
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "full").touch()
    job = sky.jobs.launch(task_file(tmp_path, steps=2, pause=0.1), provider=FullLocal(str(gate)), name="full")
    wait_for(lambda: len(list(gate.glob("refused.*"))) >= 2, what="two launches refused")
    info = wait_for(lambda: (j := queue()[job])["state"] == "PENDING" and j, what="the job waiting (backoff)")
    assert "waiting for capacity" in info["detail"], info
    assert "no capacity for the nodes in any zone" in info["detail"], info
    (gate / "full").unlink()
    info = ended(job)
    text = logs(job)
    assert info["state"] == "SUCCEEDED", (info, text)
    assert info["recoveries"] == 0 and info["attempts"] >= 3, info
    assert "no capacity for attempt 1" in text and "trying again in" in text and "step 2" in text, text

    (gate / "full").touch()
    job2 = sky.jobs.launch(task_file(tmp_path, steps=2, pause=0.1, name="t2.yaml"), provider=FullLocal(str(gate)),
                           name="full2")
    wait_for(lambda: queue()[job2]["state"] == "PENDING" and queue()[job2]["attempts"] >= 1, what="job 2 waiting")
    assert sky.jobs.cancel(job2) == "CANCELLED"
    info2 = queue()[job2]
    assert info2["state"] == "CANCELLED" and gone(info2["controller_pid"]), info2
    assert not (ckpt(skyhive_home, job2) / "started.0.0").exists()


def test_restart_node_replaces_the_lost_node_and_lets_the_others_run_on(tmp_path, skyhive_home):
    """`resources.job_recovery.restart: node` (nodes that work alone): node 1 lost → only node 1 is
    replaced and only its steps run again; node 0's program is never stopped or restarted."""
    path = tmp_path / "alone.yaml"
    path.write_text(GANG.format(steps=12).replace(
        "num_nodes: 2\n", "num_nodes: 2\nresources:\n  job_recovery:\n    restart: node\n", 1))
    job = launch(str(path))
    folder = ckpt(skyhive_home, job)
    wait_for(lambda: all((folder / f"step.{r}").exists() and int((folder / f"step.{r}").read_text() or 0) >= 2
                         for r in "01"), what="two steps on each node")
    _, first0 = map(int, (folder / "start.0.0").read_text().split())
    worker, first1 = map(int, (folder / "start.1.0").read_text().split())
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: (folder / "start.1.1").exists(), what="node 1 started again")
    assert state_of(first0) not in (None, "Z")  # node 0's program still runs, held at step 2
    (folder / "release").write_text("go on")
    info = ended(job)
    text = logs(job)
    assert info["state"] == "SUCCEEDED", (info, text)
    assert (info["attempts"], info["recoveries"], len(info["pools"])) == (1, 1, 1), (info, text)
    assert not (folder / "start.0.1").exists()  # node 0 ran once, to the end
    assert int((folder / "start.1.1").read_text().split()[0]) != worker
    assert len((folder / "setup.0").read_text().split()) == 1 and len((folder / "setup.1").read_text().split()) == 2
    overlap = (folder / "overlap").read_text() if (folder / "overlap").exists() else ""
    assert "start.1.0 runs" not in overlap, overlap  # never two copies of node 1's program
    assert (folder / "step.0").read_text() == "12" and (folder / "step.1").read_text() == "12"
    assert text.count("[node 0] round 0 start at step 0") == 1 and "[node 1] round 1 start at step" in text, text
    assert "the others' run goes on" in text, text
    assert gone(first0) and gone(first1) and not live_workers(info["pools"])


def test_a_bad_job_recovery_restart_is_refused_naming_the_file(tmp_path, skyhive_home):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nresources:\n  job_recovery:\n    restart: sometimes\nrun: echo hi\n")
    out = skyhive("jobs", "launch", str(path), "-y")
    assert out.returncode != 0 and "bad.yaml" in out.stderr and "job_recovery.restart" in out.stderr, out.stderr
    assert queue() == {}
