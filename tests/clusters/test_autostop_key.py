"""`resources.autostop` in a task file is a named pool's autostop, and its `hook` runs before the stop
(issue 39, point 1 / done-when 2): `autostop: {idle_minutes: 10, hook: ...}` on `launch -c` stops the pool
after 10 idle minutes — a test-short minute: `SKYHIVE_AUTOSTOP_MINUTE`, as the autostop tests use it —
with the hook run first, on the head node, as a job of the pool (its output in the job's log).

No timing margin: the pool is launched with an hour-long "minute" (nothing can fire while the test looks
at it), then its watchdog is restarted with the task's own 10 minutes and a 0.2 s minute."""

from __future__ import annotations

from pathlib import Path

from skyhive.runtime.clusters import jobs as jobq
from skyhive.runtime.clusters import record as records
from skyhive.runtime.clusters.named import set_autostop
from skyhive.runtime.events.log import read_log
from tests.clusters.test_clusters import clean, record, running_under, skyhive, wait_for, write  # noqa: F401
from tests.procs import state_of

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
