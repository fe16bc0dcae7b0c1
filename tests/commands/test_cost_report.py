"""`skyhive cost-report` lists every pool and managed job of this state directory with its hours and cost,
and says where a cost is unknown; `--json` too (issue 39, done-when 4).

The Local pool, the named pool and the managed job are real runs; the two cloud pools' logs are written
with the events a cloud pool logs (`PoolStarted` with its provider's plan, its node running, its stop) —
no cloud runs here — one with the price its plan had, one whose provider planned no price."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skyhive.runtime.events.types import NodeStateChanged, PoolStarted, PoolStopped, to_json

SKYHIVE = [sys.executable, "-m", "skyhive"]
HOUR = 3600.0


def skyhive(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _cloud_log(home: Path, pool: str, provider: str, plan: dict, start: float, hours: float) -> None:
    events = [PoolStarted(pool_id=pool, seq=0, ts=start, provider=provider, nodes=2, processes_per_node=1, pid=1,
                          host="elsewhere", provider_config={"provider": provider}, plan=plan),
              NodeStateChanged(pool_id=pool, seq=1, ts=start + 60, node=0, state="running"),
              PoolStopped(pool_id=pool, seq=2, ts=start + 60 + hours * HOUR)]
    (home / "pools").mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / "pools" / f"{pool}.jsonl").write_text("".join(to_json(e) + "\n" for e in events))


@pytest.fixture
def spent(tmp_path, skyhive_home):
    home = Path(skyhive_home)
    task = tmp_path / "t.yaml"
    task.write_text("name: once\nrun: echo ran\n")
    assert skyhive("launch", "-y", str(task), cwd=tmp_path).returncode == 0
    named = skyhive("launch", "-y", "-c", "kept", str(task), cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    job = skyhive("jobs", "launch", "-y", "-n", "trainjob", str(task), cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    deadline = 120
    import time

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        rows = [json.loads(line) for line in skyhive("jobs", "queue", "--json", cwd=tmp_path).stdout.splitlines()]
        if rows and rows[0]["state"] == "SUCCEEDED":
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the managed job did not succeed in time")
    _cloud_log(home, "aws-priced", "aws", {"instance_type": "g5.xlarge", "price_per_hour": 1.5, "cost_per_hour": 3.0},
               start=1_700_000_000.0, hours=2.0)
    _cloud_log(home, "gcp-unpriced", "gcp", {"instance_type": "custom-8-32768"}, start=1_700_100_000.0, hours=1.0)
    yield tmp_path
    assert skyhive("down", "kept", "-y", cwd=tmp_path).returncode == 0
    from tests.clusters.test_clusters import running_under, wait_for

    wait_for(lambda: running_under(str(home)) == [], timeout=120, what="every process of the state directory to end")


def test_cost_report_lists_every_pool_and_job_with_hours_and_cost(spent):
    done = skyhive("cost-report", cwd=spent)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[1]: line for line in done.stdout.splitlines()[1:] if line.startswith(("pool ", "job "))}
    priced = rows["aws-priced"]
    assert " aws " in priced and " 2.000 " in priced and "$3 " in priced and "$6.00" in priced
    assert "unknown" in rows["gcp-unpriced"] and "planned no price" in rows["gcp-unpriced"]
    assert "$0.0000" in rows["kept"] and "no cloud cost" in rows["kept"]
    local = [line for name, line in rows.items() if name not in ("aws-priced", "gcp-unpriced", "kept", "1")]
    assert local and all("local" in line and "$0.0000" in line for line in local)  # the one-off launch and the job's
    assert rows["1"].startswith("job ") and "trainjob" in rows["1"] and "SUCCEEDED" in rows["1"]
    assert "total of the pools: $6.00 (and 1 pool of unknown cost)" in done.stdout

    as_json = skyhive("cost-report", "--json", cwd=spent)
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    by_name = {r["name"]: r for r in records}
    assert by_name["aws-priced"]["cost"] == 6.0 and by_name["aws-priced"]["hours"] == 2.0
    assert by_name["aws-priced"]["per_hour"] == 3.0 and by_name["aws-priced"]["cost_known"] is True
    assert by_name["gcp-unpriced"]["cost"] is None and by_name["gcp-unpriced"]["cost_known"] is False
    jobs = [r for r in records if r["kind"] == "job"]
    assert len(jobs) == 1 and jobs[0]["cost"] == 0.0 and jobs[0]["status"] == "SUCCEEDED"
    assert {r["kind"] for r in records} == {"pool", "job"} and len([r for r in records if r["kind"] == "pool"]) >= 5


def test_cost_report_of_an_empty_state_directory(tmp_path, skyhive_home):
    done = skyhive("cost-report", cwd=tmp_path)
    assert done.returncode == 0 and "no pools or managed jobs" in done.stdout
    assert skyhive("cost-report", "--json", cwd=tmp_path).stdout == ""
