"""Issue 40 (the audit, point 4): SkyPilot's smoke test_cli_logs failed on skyhive at
`sky logs NAME 3 4 --sync-down` (`error: unrecognized arguments: 4`): SkyPilot's `logs` takes several job
ids, and globs over them (`*`), when it downloads them (-s/--sync-down); streaming several is refused.
The steps below are that smoke test's, with only `sky` → `skyhive` and the cluster's name."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.clusters.test_clusters import clean  # noqa: F401 - a fixture
from tests.programs.test_job_ids import sky

TS = "1765000000"


def _jobs_of(stdout: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^Job (\d+) logs: ", stdout, re.M)]


def test_skypilots_cli_logs_steps(tmp_path, clean):
    name = "t-cli-logs"
    home = tmp_path / "user"
    home.mkdir()
    assert sky("launch", "-y", "-c", name, f"echo {TS} 1", cwd=tmp_path).returncode == 0
    for i in (2, 3, 4):
        assert sky("exec", name, f"echo {TS} {i}", cwd=tmp_path).returncode == 0
    assert sky("logs", name, "2", "--status", cwd=tmp_path).returncode == 0
    some = sky("logs", name, "3", "4", "--sync-down", cwd=tmp_path, home=home)
    assert some.returncode == 0, some.stderr
    assert _jobs_of(some.stdout) == ["3", "4"]
    for line in some.stdout.splitlines():
        job, folder = re.fullmatch(r"Job (\d+) logs: (.*)", line).groups()
        assert f"{TS} {job}" in (Path(folder) / "run.log").read_text()
    every = sky("logs", name, "*", "--sync-down", cwd=tmp_path, home=home)  # '*' as the shell passes it
    assert every.returncode == 0 and _jobs_of(every.stdout) == ["1", "2", "3", "4"], every.stderr
    short = sky("logs", name, "1", "-s", cwd=tmp_path, home=home)
    assert short.returncode == 0 and _jobs_of(short.stdout) == ["1"]
    # `sky logs NAME 1 | grep "TS 1"` and `sky logs NAME | grep "TS 4"`, through a shell as the smoke test
    for args, want in ((f"{name} 1", f"{TS} 1"), (name, f"{TS} 4")):
        piped = subprocess.run(f"{shlex.quote(sys.executable)} -m skyhive logs {args} | grep '{want}'", shell=True, cwd=tmp_path,
                               capture_output=True, text=True, timeout=240)
        assert piped.returncode == 0, piped.stdout + piped.stderr


def test_several_jobs_without_sync_down_and_bad_ids_are_refused_by_name(tmp_path, clean):
    name = "t-cli-logs-bad"
    assert sky("launch", "-y", "-c", name, "echo one", cwd=tmp_path).returncode == 0
    both = sky("logs", name, "1", "2", cwd=tmp_path)
    assert both.returncode == 2 and "cannot stream logs of multiple jobs (IDs: 1, 2)" in both.stderr
    assert "-s/--sync-down" in both.stderr
    glob = sky("logs", name, "*", cwd=tmp_path)
    assert glob.returncode == 2 and "invalid job ID '*'" in glob.stderr
    none = sky("logs", name, "7?", "--sync-down", cwd=tmp_path, home=tmp_path)
    assert none.returncode != 0 and "has no job matching '7?'" in none.stderr
    missing = sky("logs", name, "1", "9", "--sync-down", cwd=tmp_path, home=tmp_path)
    assert missing.returncode != 0 and "has no job 9" in missing.stderr
    assert not (tmp_path / "sky_logs").exists() or not any((tmp_path / "sky_logs").iterdir())
