"""`resources.autostop` in a task file is a named pool's autostop, and its `hook` runs before the stop
(issue 39, point 1 / done-when 2): `autostop: {idle_minutes: 10, hook: ...}` on `launch -c` stops the pool
after 10 idle minutes — a test-short minute: `SKYHIVE_AUTOSTOP_MINUTE`, as the autostop tests use it —
with the hook run first, on the head node, as a job of the pool (its output in the job's log).

No timing margin: the pool is launched with an hour-long "minute" (nothing can fire while the test looks
at it), then its watchdog is restarted with the task's own 10 minutes and a 0.2 s minute."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from skyhive.runtime.clusters import jobs as jobq
from skyhive.runtime.clusters import record as records
from skyhive.runtime.clusters.named import set_autostop
from skyhive.runtime.events.log import read_log
from tests.clusters.test_clusters import clean, record, running_under, skyhive, wait_for, write  # noqa: F401
from tests.procs import Lines, state_of

HOOKED = """\
    name: hooked
    resources:
      autostop:
        idle_minutes: 10
        hook: |
          echo "saving a checkpoint on node $SKYPILOT_NODE_RANK"
          python -c "import time; print(time.time())" > {marker}
        hook_timeout: 120
    run: echo trained
    """


def test_resources_autostop_stops_the_idle_pool_after_its_hook(tmp_path, clean, monkeypatch):
    home = clean
    marker = tmp_path / "hook-ran"
    task = write(tmp_path / "t.yaml", HOOKED.format(marker=marker))
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    done = skyhive("launch", "-y", "-c", "hooked", str(task), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout and "autostop after 10 min idle" in done.stderr
    rec = records.load("hooked")
    assert rec.autostop_minutes == 10 and not rec.autostop_down  # the task file's key, honoured
    row = next(ln for ln in skyhive("status", cwd=tmp_path).stdout.splitlines() if ln.startswith("hooked "))
    assert "10 min" in row
    workers = sorted(w.pid for w in rec.workers)
    assert not marker.exists()  # nothing ran the hook yet: the pool is not idle for an hour-long minute

    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "0.2")  # from now on 10 "minutes" are 2 s
    watchdog = set_autostop(records.load("hooked"), rec.autostop_minutes, rec.autostop_down).watchdog_pid
    assert "skyhive.runtime.control.autostop_hook" in Path(f"/proc/{watchdog}/cmdline").read_text().replace("\0", " ")
    wait_for(lambda: all(state_of(p) in (None, "Z") for p in workers + [watchdog]), timeout=180,
             what="the idle pool's workers and its watchdog to exit")

    hook_ran = float(marker.read_text())
    last = list(read_log(Path(home) / "pools" / "hooked.jsonl"))[-1]
    assert last.kind == "pool_stopped" and last.error.startswith("autostop")
    assert hook_ran < last.ts  # the hook ran first, while the pool was up
    jobs = {j.id: j for j in jobq.list_jobs("hooked")}
    assert [j.name for j in jobs.values()] == ["hooked", "autostop-hook"] and jobs[2].state == "SUCCEEDED"
    log = jobq.log_path("hooked", 2).read_text()
    assert "saving a checkpoint on node 0" in log
    row = next(ln for ln in skyhive("status", cwd=tmp_path).stdout.splitlines() if ln.startswith("hooked "))
    assert "STOPPED (autostop)" in row
    assert running_under(home) == []


def test_a_failing_hook_does_not_keep_the_pool_up(tmp_path, clean, monkeypatch):
    marker = tmp_path / "tried"
    task = write(tmp_path / "t.yaml", f"""\
        resources:
          autostop: {{idle_minutes: 5, down: true, hook: "echo tried > {marker}; exit 3"}}
        run: echo trained
        """)
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    done = skyhive("launch", "-y", "-c", "failing", str(task), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rec = records.load("failing")
    assert rec.autostop_down and rec.autostop_minutes == 5
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "0.2")
    set_autostop(rec, 5, True)
    wait_for(lambda: "failing" not in records.names(), timeout=180, what="autodown to forget the pool")
    wait_for(lambda: running_under(clean) == [], timeout=120, what="the workers, the agent and the watchdog to exit")
    assert marker.read_text() == "tried\n"  # it ran, failed, and the pool went down all the same
    assert not any(ln.startswith("failing ") for ln in skyhive("status", cwd=tmp_path).stdout.splitlines())


# ---- resources.autostop.wait_for (SkyPilot's: docs/source/reference/auto-stop.rst, "Setting idleness
# behavior"): jobs_and_ssh (the default) waits for jobs and connections, jobs only for jobs, none for nothing

HARD_LIMIT = """\
    name: notebook
    resources:
      autostop:
        idle_minutes: 10
        wait_for: none
    run: |
      echo started
      sleep 600
    """


def _stopped_by_autostop(home: str, name: str):
    """The pool's last `pool_stopped` event (an attached client may log its workers' end after it)."""
    return [e for e in read_log(Path(home) / "pools" / f"{name}.jsonl") if e.kind == "pool_stopped"][-1]


def test_wait_for_none_stops_the_pool_after_its_time_with_its_job_running(tmp_path, clean, monkeypatch):
    home = clean
    task = write(tmp_path / "t.yaml", HARD_LIMIT)
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    done = skyhive("launch", "-y", "-d", "-c", "notebook", str(task), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: jobq.load_job("notebook", 1).state == jobq.RUNNING, timeout=120, what="the job to run")
    wait_for(lambda: "started" in jobq.log_path("notebook", 1).read_text(), timeout=60, what="the job's first line")
    rec = records.load("notebook")
    workers = sorted(w.pid for w in rec.workers)

    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "0.2")  # 10 "minutes" are 2 s from now on: a hard limit
    watchdog = set_autostop(rec, rec.autostop_minutes, rec.autostop_down).watchdog_pid
    assert "--wait-for none" in Path(f"/proc/{watchdog}/cmdline").read_text().replace("\0", " ")
    wait_for(lambda: all(state_of(p) in (None, "Z") for p in workers + [watchdog]), timeout=180,
             what="the pool's workers and its watchdog to exit while the job runs")
    job = jobq.load_job("notebook", 1)
    assert job.state == jobq.CANCELLED, job  # the running job did not keep the pool: it was cancelled
    last = _stopped_by_autostop(home, "notebook")
    assert last.kind == "pool_stopped" and last.error.startswith("autostop") and "wait_for: none" in last.error
    row = next(ln for ln in skyhive("status", cwd=tmp_path).stdout.splitlines() if ln.startswith("notebook "))
    assert "STOPPED (autostop)" in row
    wait_for(lambda: running_under(home) == [], timeout=60, what="the job's sleep and the agent to exit")


def test_wait_for_jobs_stops_the_pool_under_an_attached_client_once_its_jobs_are_done(tmp_path, clean, monkeypatch):
    home = clean
    release = tmp_path / "release"
    task = write(tmp_path / "t.yaml", f"""\
        resources:
          autostop: {{idle_minutes: 10, wait_for: jobs}}
        run: |
          while [ ! -e {release} ]; do sleep 0.1; done
          echo released
        """)
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "3600")
    done = skyhive("launch", "-y", "-d", "-c", "ide", str(task), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: jobq.load_job("ide", 1).state == jobq.RUNNING, timeout=120, what="the job to run")
    rec = records.load("ide")
    workers = sorted(w.pid for w in rec.workers)
    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "0.2")
    watchdog = set_autostop(rec, rec.autostop_minutes, rec.autostop_down).watchdog_pid
    assert "--wait-for jobs" in Path(f"/proc/{watchdog}/cmdline").read_text().replace("\0", " ")
    release.touch()  # the job ends: from then on, only a client is attached (below), which does not count
    wait_for(lambda: jobq.load_job("ide", 1).state == jobq.SUCCEEDED, timeout=120, what="the job to end")
    # (a client attaches only between jobs: it is an IDE's or a notebook's session, which `jobs` ignores)
    client = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, skyhive as sky
        pool = sky.Pool.attach("ide", output=None)
        pool.__enter__()
        print("attached", flush=True)
        time.sleep(600)
        """)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        Lines(client.stdout).wait_for(lambda line: line.strip() == "attached", 120, "the client attached")
        wait_for(lambda: all(state_of(p) in (None, "Z") for p in workers), timeout=180,
                 what="the pool's workers to exit under the attached client")
        wait_for(lambda: any(e.kind == "pool_stopped" for e in read_log(Path(home) / "pools" / "ide.jsonl")),
                 timeout=60, what="the pool recorded stopped")
        assert client.poll() is None  # the client was still attached when the pool stopped
        # what the client restarts of the stopped pool is ended as it comes, until the client leaves
        wait_for(lambda: all(state_of(p) in (None, "Z") for p in running_under(home) if p not in (client.pid, watchdog)
                             and "autostop" not in Path(f"/proc/{p}/cmdline").read_text()),
                 timeout=60, what="no worker of the stopped pool while its client is attached")
    finally:
        client.kill()
        client.wait(timeout=30)
    wait_for(lambda: state_of(watchdog) in (None, "Z"), timeout=60, what="the watchdog to exit once the client left")
    job = jobq.load_job("ide", 1)
    last = _stopped_by_autostop(home, "ide")
    assert last.kind == "pool_stopped" and "wait_for: jobs" in last.error and last.ts > job.ended
    assert "released" in jobq.log_path("ide", 1).read_text()
    try:
        wait_for(lambda: running_under(home) == [], timeout=60, what="nothing of the pool left running")
    except AssertionError:
        raise AssertionError([Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ") for p in running_under(home)])


def test_wait_for_takes_skypilots_three_values_and_refuses_others_naming_them(tmp_path, clean):
    for value in ("jobs_and_ssh", "jobs", "none"):
        task = write(tmp_path / "t.yaml", f"resources:\n  autostop: {{idle_minutes: 5, wait_for: {value}}}\nrun: echo hi\n")
        done = skyhive("launch", "-y", "--dryrun", "-c", "d", str(task), cwd=tmp_path)
        assert done.returncode == 0, (value, done.stderr)
    task = write(tmp_path / "t.yaml", "resources:\n  autostop: {idle_minutes: 5, wait_for: ssh}\nrun: echo hi\n")
    done = skyhive("launch", "-y", "-c", "d", str(task), cwd=tmp_path)
    assert done.returncode == 2
    assert "resources.autostop.wait_for" in done.stderr and "jobs_and_ssh, jobs, none" in done.stderr
    assert "'ssh'" in done.stderr
    assert records.names() == []  # nothing launched
