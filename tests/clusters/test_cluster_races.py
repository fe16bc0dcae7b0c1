"""Named pools (issue 15) where two parties meet: a client attaching at the instant the autostop
watchdog fires. Real processes on Local nodes; the interleavings are forced through the pool's own
attach lock and pipes, never by sleeping.

Each test ends with the `clean` fixture of tests/clusters/test_clusters.py: every pool down, nothing left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.procs import Lines, state_of
from tests.clusters.test_clusters import clean, python, record  # noqa: F401 - `clean` is a fixture

SKYHIVE = [sys.executable, "-m", "skyhive"]


def _kept(tmp_path: Path, name: str, nodes: int = 2, **extra: str) -> list[int]:
    args = "".join(f", {k}={v}" for k, v in extra.items())
    made = python(f"""
        import os, skyhive as sky
        with sky.Pool(provider=sky.Local(), nodes={nodes}, name={name!r}, keep=True, output=None{args}) as pool:
            print(sorted(pool.broadcast(os.getpid)))
        """, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout.strip().splitlines()[-1])


def _alive(pids: list[int]) -> bool:
    return all(state_of(p) not in (None, "Z") for p in pids)


def _autostop(name: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhive.runtime.clusters.autostop", name], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


HOLDER = """
    import os, sys, skyhive as sky
    with sky.Pool.attach({name!r}, output=None) as pool:
        print("attached", flush=True)
        sys.stdin.readline()  # the test says when to go on
        print(sorted(pool.broadcast(os.getpid)), flush=True)
    """


def test_autostop_gives_up_while_a_client_is_attached_and_stops_the_pool_once_it_left(tmp_path, clean):
    home = clean
    pids = _kept(tmp_path, "race")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER.format(name="race"))], cwd=tmp_path,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, errs = Lines(holder.stdout), Lines(holder.stderr)
    try:
        lines.wait_for(lambda line: line.strip() == "attached", 120, "the client attached")  # it holds the pool now
        fired = _autostop("race", tmp_path)  # the watchdog fires at this instant
        assert fired.returncode == 75, fired.stderr  # KEEP_WATCHING: the watchdog watches on
        assert "busy" in fired.stdout and "in use by pid" in fired.stdout
        assert _alive(pids) and record(home, "race")["stopped"] == ""
        holder.stdin.write("go\n")  # the client goes on with the same workers
        holder.stdin.close()
        holder.wait(timeout=60)
        out, err = lines.rest(), errs.rest()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == pids
    fired = _autostop("race", tmp_path)  # idle now: the pool is stopped
    assert fired.returncode == 0 and "pool race: autostop" in fired.stdout, fired.stderr
    assert not _alive(pids) and record(home, "race")["stopped"] == "autostop"


def test_an_attach_that_looked_before_autostop_is_refused_after_it(tmp_path, clean):
    import skyhive as sky
    from skyhive.errors import PoolGone

    pids = _kept(tmp_path, "late")
    pool = sky.Pool.attach("late", output=None)  # looked at the record: the workers run
    assert _autostop("late", tmp_path).returncode == 0  # ... then autostop stopped them
    assert not _alive(pids)
    with pytest.raises(PoolGone, match=r"pool 'late' was stopped by autostop .*skyhive launch -c late"):
        with pool:
            pass
    with pytest.raises(PoolGone, match="stopped by autostop"):  # and so does a new attach
        sky.Pool.attach("late")


@pytest.mark.parametrize("down", [False, True])
def test_an_attach_while_autostop_stops_the_pool_waits_for_it_and_is_refused(tmp_path, clean, monkeypatch, down):
    import dataclasses

    from skyhive.runtime.clusters import autostop as autostop_mod
    from skyhive.runtime.clusters import record as records

    pids = _kept(tmp_path, "mid")
    if down:  # autodown: the pool is forgotten
        records.save(dataclasses.replace(records.load("mid"), autostop_down=True))
    attach = textwrap.dedent("""
        import sys, skyhive as sky
        try:
            with sky.Pool.attach("mid", output=None, wait={wait}) as pool:
                print("ATTACHED", flush=True)
        except sky.SkyhiveError as exc:
            print(type(exc).__name__, exc, flush=True)
        """)
    seen: dict[str, subprocess.CompletedProcess[str] | subprocess.Popen[str]] = {}
    real_stop = autostop_mod.stop_pool

    def stop_while_clients_come(name: str, **kw):  # autostop holds the attach lock here
        seen["now"] = subprocess.run([sys.executable, "-c", attach.format(wait=0)], cwd=tmp_path,
                                     capture_output=True, text=True, timeout=60)
        seen["waiting"] = subprocess.Popen([sys.executable, "-c", attach.format(wait=30)], cwd=tmp_path,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return real_stop(name, **kw)

    monkeypatch.setattr(autostop_mod, "stop_pool", stop_while_clients_come)
    assert autostop_mod.autostop("mid") == ("autodown" if down else "autostop")
    now = seen["now"]
    assert now.returncode == 0 and now.stdout.startswith("PoolInUse"), now.stderr
    assert "(autostop)" in now.stdout  # the holder is named
    waiting = seen["waiting"]
    out, err = waiting.communicate(timeout=60)  # it waited for autostop, then found the pool stopped (or gone)
    if down:
        assert out.startswith("PoolNotFound") and "no named pool 'mid'" in out, (out, err)
        assert not records.cluster_dir("mid").exists()  # the waiting client left no lock file behind
    else:
        assert out.startswith("PoolGone") and "stopped by autostop" in out, (out, err)
    assert "ATTACHED" not in out and not _alive(pids)


def test_autostop_leaves_a_pool_with_a_queued_job(tmp_path, clean):
    from skyhive.runtime.clusters import autostop as autostop_mod
    from skyhive.runtime.clusters import jobs as jobq

    pids = _kept(tmp_path, "queued")
    jobq.submit("queued", job_name="waits", steps=b"", with_setup=False, env={}, secrets={})  # its agent not started yet
    assert autostop_mod.autostop("queued").startswith("busy: pool 'queued' has a job queued")
    assert _alive(pids)


def test_the_watchdog_watches_on_when_its_command_says_not_now(tmp_path):
    from skyhive.runtime.clusters import autostop
    from skyhive.runtime.worker.watchdog import KEEP_WATCHING, watch

    assert autostop.KEEP_WATCHING == KEEP_WATCHING  # the two sides agree

    calls = tmp_path / "calls"
    # first call: "not now" (exit 75); second call: done (exit 0)
    command = f"echo x >> {calls}; test $(wc -l < {calls}) -ge 2 || exit {KEEP_WATCHING}"
    assert watch(0.05, command, 0, 0.02, unix_dir=str(tmp_path / "none")) == 0
    assert calls.read_text().count("x") == 2


def test_an_agent_starting_while_its_lock_is_probed_waits_for_the_probe_instead_of_leaving(tmp_path, clean):
    import fcntl
    import os

    from skyhive.runtime.clusters import record as records

    path = records.cluster_dir("probed", create=True) / "agent.lock"
    probe = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # what `agent_pid()` does: lock, write no pid
    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    agent = subprocess.Popen([sys.executable, "-m", "skyhive.runtime.control.agent", "probed"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def opened() -> bool:  # the agent has the lock file open: it is at its first try
            if agent.poll() is not None:
                return True  # (it left already: the assertions below say how)
            try:
                return any(os.readlink(f"/proc/{agent.pid}/fd/{fd}") == str(path)
                           for fd in os.listdir(f"/proc/{agent.pid}/fd"))
            except OSError:
                return agent.poll() is not None
        from tests.clusters.test_clusters import wait_for

        wait_for(opened, timeout=30, what="the agent to open its lock")
        os.close(probe)  # the probe is over
        out, err = agent.communicate(timeout=60)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert agent.returncode == 0, err
    assert "pid" in json.loads(out.strip().splitlines()[-1])  # it ran (and left: no job), not "already"


def test_a_job_log_never_cuts_one_nodes_line_with_anothers():
    """Unbuffered scripts write a line's text and its newline separately: with several nodes the job's
    log holds each node's line whole (it failed seed 004's test about 1 run in 3 before)."""
    import io

    from skyhive.runtime.control.joblog import JobLog

    fh = io.StringIO()
    log = JobLog(fh, prefix=True)
    log.write(0, 0, "stdout", "rank 0: training complete")
    log.write(1, 0, "stdout", "rank 1: training complete\n")
    log.write(0, 0, "stdout", "\n")
    log.write(0, 0, "stdout", "a\nb")
    log.write(1, 0, "stderr", "warn")
    log.note("job 1 succeeded")
    assert fh.getvalue().splitlines() == [
        "[node 1] rank 1: training complete",
        "[node 0] rank 0: training complete",
        "[node 0] a",
        "[node 0] b",
        "[node 1] warn",
        "[skyhive] job 1 succeeded",
    ]
    single = io.StringIO()
    one = JobLog(single, prefix=False)  # one node: written as it comes (progress bars stream)
    one.write(0, 0, "stdout", "50%\r")
    assert single.getvalue() == "50%\r"
