"""The verbs and flags SkyPilot users type (issue 39 points 2 and 4), as SkyPilot's docs write them:
`skyhive autostop NAME -i 10` (`--down`, `--cancel`), `status --ip NAME`, `logs NAME JOB` following by
default (`--no-follow` not), `jobs logs --no-follow`; an unknown verb names the nearest skyhive spelling;
`--hosts H1 H2 TASK.yaml` leaves the task to the task. Each runs as the real command in a subprocess;
the named pools are Local ones (the `clean` fixture takes them down and checks nothing is left).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.clusters.test_clusters import clean, running_under  # noqa: F401 - a fixture: named pools down
from tests.commands.test_cli_launch import SKYHIVE, pool_logs, skyhive
from tests.procs import Lines

WAITS = """\
name: waits
run: |
  echo "waiting"
  while [ ! -e {go} ]; do sleep 0.05; done
  echo "went on"
"""


def watchdog_pid(name: str) -> int:
    from skyhive.runtime.clusters import record as records

    return records.load(name).watchdog_pid


def test_autostop_sets_replaces_and_cancels_a_named_pools_autostop_as_skypilots(tmp_path, clean):
    from skyhive.runtime.clusters import record as records
    from tests.procs import alive

    (tmp_path / "t.yaml").write_text("run: echo up\n")
    assert skyhive("launch", "-y", "-c", "auto", "t.yaml", cwd=tmp_path).returncode == 0
    assert records.load("auto").autostop_minutes is None

    done = skyhive("autostop", "auto", "-i", "10", cwd=tmp_path)  # SkyPilot's docs, verbatim but for `sky`
    assert done.returncode == 0, done.stderr
    assert "pool auto: stop after 10 min idle" in done.stdout
    rec = records.load("auto")
    assert (rec.autostop_minutes, rec.autostop_down) == (10, False) and alive(rec.watchdog_pid)
    first = rec.watchdog_pid

    done = skyhive("autostop", "auto", "-i", "10", "--down", "-y", cwd=tmp_path)
    assert done.returncode == 0 and "pool auto: down after 10 min idle" in done.stdout, done.stderr
    rec = records.load("auto")
    assert rec.autostop_down and rec.watchdog_pid != first and alive(rec.watchdog_pid)
    status = skyhive("status", "--json", "auto", cwd=tmp_path)
    assert '"autostop"' in status.stdout or "10" in status.stdout, status.stdout

    done = skyhive("autostop", "auto", cwd=tmp_path)  # no -i: SkyPilot's default, 5 minutes
    assert done.returncode == 0 and "stop after 5 min idle" in done.stdout, done.stderr

    second = records.load("auto").watchdog_pid
    done = skyhive("autostop", "auto", "--cancel", cwd=tmp_path)
    assert done.returncode == 0 and "pool auto: autostop cancelled" in done.stdout, done.stderr
    rec = records.load("auto")
    assert rec.autostop_minutes is None and rec.watchdog_pid == 0 and not rec.autostop_down
    from tests.procs import wait_gone

    assert wait_gone({second}, timeout=30) == set()

    # errors name what is wrong: no such pool, a bad number, --cancel with -i
    missing = skyhive("autostop", "nope", "-i", "10", cwd=tmp_path)
    assert missing.returncode == 1 and "nope" in missing.stderr and "invalid choice" not in missing.stderr
    bad = skyhive("autostop", "auto", "-i", "0", cwd=tmp_path)
    assert bad.returncode == 2 and "positive" in bad.stderr
    both = skyhive("autostop", "auto", "-i", "3", "--cancel", cwd=tmp_path)
    assert both.returncode == 2 and "--cancel takes no -i" in both.stderr


def test_status_ip_prints_the_head_address_alone(tmp_path, clean):
    (tmp_path / "t.yaml").write_text("run: echo up\n")
    assert skyhive("launch", "-y", "-c", "ipp", "t.yaml", cwd=tmp_path).returncode == 0
    ip = skyhive("status", "--ip", "ipp", cwd=tmp_path)
    assert ip.returncode == 0 and ip.stdout == "127.0.0.1\n", ip.stdout + ip.stderr  # a pool on this machine
    none = skyhive("status", "--ip", cwd=tmp_path)
    assert none.returncode == 2 and "--ip shows one pool" in none.stderr
    gone = skyhive("status", "--ip", "nope", cwd=tmp_path)
    assert gone.returncode == 1 and "nope" in gone.stderr


def test_logs_of_a_named_pools_job_follow_by_default_and_not_with_no_follow(tmp_path, clean):
    go = tmp_path / "go"
    (tmp_path / "waits.yaml").write_text(WAITS.format(go=go))
    queued = skyhive("launch", "-y", "-c", "fl", "-d", "waits.yaml", cwd=tmp_path)
    assert queued.returncode == 0, queued.stderr

    follower = subprocess.Popen([*SKYHIVE, "logs", "fl", "1"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        out = Lines(follower.stdout)
        out.wait_for("waiting", 120, "the job's first line")
        now = skyhive("logs", "fl", "1", "--no-follow", cwd=tmp_path, timeout=60)  # returns while it runs
        assert now.returncode == 0 and "waiting" in now.stdout and "went on" not in now.stdout
        assert follower.poll() is None  # still following
        go.touch()
        out.wait_for("went on", 120, "the job's last line, followed")
        out.wait_for("[skyhive] job 1 succeeded", 60, "the end of the job")
        assert follower.wait(timeout=60) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def test_jobs_logs_takes_no_follow(tmp_path, skyhive_home):
    done = skyhive("jobs", "logs", "--no-follow", "7", cwd=tmp_path)
    assert done.returncode == 1 and "no managed job 7" in done.stderr, done.stderr


@pytest.mark.parametrize("argv, said", [
    (["lauch", "t.yaml"], "unknown command 'lauch'; did you mean `skyhive launch`?"),
    (["stauts"], "did you mean `skyhive status`?"),
    (["autostp", "x"], "did you mean `skyhive autostop`?"),
    (["show-gpu"], "did you mean `skyhive show-gpus`?"),
    (["spot", "launch", "t.yaml"], "did you mean `skyhive jobs`?"),
    (["serve", "up", "s.yaml"], "skyhive has no serving"),
    (["jobs", "lunch", "t.yaml"], "did you mean `skyhive jobs launch`?"),
])
def test_an_unknown_verb_names_the_nearest_skyhive_spelling(argv, said, tmp_path, skyhive_home):
    done = skyhive(*argv, cwd=tmp_path)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "invalid choice" not in done.stderr and "--help` lists the commands" in done.stderr


def test_hosts_before_the_task_leave_the_task_to_the_task(tmp_path, skyhive_home):
    """`--hosts H1 H2 task.yaml`: argparse gave all three to --hosts and said the task was missing."""
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    done = skyhive("launch", "--provider", "ssh", "--hosts", "10.213.255.2", "10.213.255.3", "t.yaml", "--dryrun",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  machines: 10.213.255.2, 10.213.255.3 (" in done.stdout and "run: echo hi" in done.stdout, done.stdout
    assert "required" not in done.stderr
    # a command after the hosts cannot be told from a host: said so, with the two ways to write it
    cmd = skyhive("launch", "--provider", "ssh", "--hosts", "h1", "h2", "echo", "hi", "--dryrun", cwd=tmp_path)
    assert cmd.returncode == 2 and "--hosts takes every word up to the next option" in cmd.stderr, cmd.stderr
    assert "`--hosts H1 H2 -- COMMAND`" in cmd.stderr
    ended = skyhive("launch", "--dryrun", "--provider", "ssh", "--hosts", "10.213.255.2", "--", "echo", "hi",
                    cwd=tmp_path)
    assert ended.returncode == 0 and "machines: 10.213.255.2 (" in ended.stdout, ended.stderr
    assert "run: echo hi" in ended.stdout
    nothing = skyhive("launch", cwd=tmp_path)  # no --hosts: argparse's own word, no hint about hosts
    assert nothing.returncode == 2 and "required: TASK.yaml|COMMAND" in nothing.stderr
    assert "--hosts" not in nothing.stderr.splitlines()[-1]
    # the exec form (NAME first) and options after the hosts
    other = skyhive("exec", "somepool", "--hosts", "10.213.255.2", "10.213.255.3", "t.yaml", "-d", cwd=tmp_path)
    assert other.returncode == 1 and "somepool" in other.stderr, other.stderr  # parsed: no such pool
    assert "required" not in other.stderr and "unrecognized" not in other.stderr, other.stderr
    assert pool_logs(skyhive_home) == [] and running_under(skyhive_home) == []
