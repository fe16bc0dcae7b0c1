"""Issue 40, point 5: the job queue's ids and `logs --sync-down` as SkyPilot's. A task with only `setup`
takes no job id (SkyPilot gives it none), so the first task with a `run` is job 1 and `cancel NAME 1`
cancels it; `logs NAME 1 --sync-down` prints `Job 1 logs: DIR` and writes `DIR/run.log`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture

SKYHIVE = [sys.executable, "-m", "skyhive"]


def sky(*args: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"HOME": str(home)} if home else {})}
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


def wait_state(name: str, job: str, state: str, cwd: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if f"Job {job}: {state}" in sky("logs", name, job, "--status", cwd=cwd).stdout:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} of {name} never became {state}")


def test_a_setup_only_task_takes_no_job_id(tmp_path, clean):
    (tmp_path / "setup.yaml").write_text("setup: echo setting up\n")
    name = "t-ids"
    launched = sky("launch", "-y", "-c", name, "--infra", "local", "setup.yaml", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "setting up" in launched.stdout and "no job id" in launched.stderr
    queued = sky("exec", name, "-d", "sleep 10000", cwd=tmp_path)
    assert queued.returncode == 0 and "job 1 (" in queued.stderr, queued.stderr
    wait_state(name, "1", "RUNNING", tmp_path)
    rows = [ln.split()[:3] for ln in sky("queue", name, cwd=tmp_path).stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["1"]  # the setup is not listed
    assert sky("cancel", "-y", name, "1", cwd=tmp_path).returncode == 0
    wait_state(name, "1", "CANCELLED", tmp_path)
    assert sky("logs", name, "2", "--status", cwd=tmp_path).returncode == 102  # no job 2


def test_sync_down_prints_skypilots_line_and_writes_run_log(tmp_path, clean):
    name = "t-sync"
    launched = sky("launch", "-y", "-c", name, "--infra", "local", "echo first job", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert sky("exec", name, "echo second job", cwd=tmp_path).returncode == 0
    home = tmp_path / "user"
    home.mkdir()
    one = sky("logs", name, "1", "--sync-down", cwd=tmp_path, home=home)
    assert one.returncode == 0, one.stderr
    (line,) = one.stdout.splitlines()
    m = re.fullmatch(r"Job 1 logs: (.*)", line)
    assert m, line
    folder = Path(m.group(1))
    assert folder.parent == home / "sky_logs" and folder.name.startswith("sky-")
    assert "first job" in (folder / "run.log").read_text()
    both = sky("logs", name, "--sync-down", cwd=tmp_path, home=home)
    lines = both.stdout.splitlines()
    assert [ln.split(" logs: ")[0] for ln in lines] == ["Job 1", "Job 2"]
    assert lines[0] == line  # the same folder for the same job
    assert "second job" in (Path(lines[1].split(" logs: ")[1]) / "run.log").read_text()
    missing = sky("logs", name, "7", "--sync-down", cwd=tmp_path, home=home)
    assert missing.returncode != 0 and "has no job 7" in missing.stderr
