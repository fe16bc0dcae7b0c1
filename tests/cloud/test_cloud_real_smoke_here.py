"""What can be checked here of the opt-in real-cloud smoke tests (issue 38 point 8: no test booted a node past
`running`). They are NOT run here (no cloud credentials; they spend money): this file checks that each is
skipped with a reason naming the variable that turns it on, and runs their cycle (`real_smoke.smoke_pool`:
boot to `ready`, one call, teardown, nothing left) against moto with a FAKE reach (`LocalMappedAWS`: each
instance's node is a local worker) — the cycle's own steps, not any cloud's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skyhive.providers.cloud.base import CloudTimeouts
from tests.cloud.cloud_fakes import LocalMappedAWS
from tests.cloud.real_smoke import smoke_pool
from tests.infra.moto_ec2 import NOTHING_LEFT, count_pool, leftovers

pytestmark = [pytest.mark.loopback_only]  # nothing here, nor the smoke tests it runs, may reach a real cloud

ROOT = Path(__file__).resolve().parents[2]
SMOKE = {"aws": "test_cloud_real_aws.py", "gcp": "test_cloud_real_others.py", "azure": "test_cloud_real_others.py",
         "digitalocean": "test_cloud_real_others.py"}


def test_each_real_cloud_smoke_test_is_skipped_naming_the_variable_that_turns_it_on(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SKYHIVE_REAL_CLOUDS" and k != "SKYHIVE_REAL_GPU"}
    env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = "AKIAREALLOOKING", "secret"  # credentials alone: skipped
    files = sorted({f"tests/cloud/{f}" for f in SMOKE.values()})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *files],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert re.search(r"\b4 skipped\b", done.stdout) and len(skipped) == 4, done.stdout[-3000:]
    for cloud in SMOKE:
        (line,) = [ln for ln in skipped if f"real {cloud} smoke test" in ln]
        assert f"set SKYHIVE_REAL_CLOUDS={cloud} and" in line and "boots one small node to ready" in line


@pytest.mark.anyio
async def test_the_smoke_cycle_boots_to_ready_runs_one_call_and_leaves_nothing(moto_ec2, skyhive_home):
    aws = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=moto_ec2.image,
                         ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.01))
    await smoke_pool(aws, gpu=None, start_timeout=300)
    assert aws.stages[:3] == ["requested", "prepared", "launch"] and "terminate" in aws.stages
    (pool_id,) = {p.stem for p in (Path(skyhive_home) / "pools").glob("smoke-*.jsonl")}
    assert count_pool(pool_id) == {"instances": 0, "groups": 0, "keys": 0}
    assert leftovers() == NOTHING_LEFT
