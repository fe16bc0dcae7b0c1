"""Across processes, with moto_server on 127.0.0.1 (in a loopback-only namespace): a client SIGKILLed
with its cloud nodes running; `skyhive down POOL` from another process rebuilds the AWS provider from
the pool's log and destroys, by tag, everything of that pool — and nothing of another pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import catalog
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.base import CloudTimeouts
from tests.infra.moto_ec2 import count_pool
from tests.procs import Lines

pytestmark = [pytest.mark.loopback_only]

ROOT = Path(__file__).resolve().parents[2]

CLIENT = textwrap.dedent("""
    import sys, time
    import skyhive as sky
    from skyhive.providers.cloud.base import CloudTimeouts
    from tests.cloud.cloud_fakes import LocalMappedAWS

    endpoint, image = sys.argv[1], sys.argv[2]
    aws = LocalMappedAWS(region="us-east-1", instance_type="t3.micro", image=image, endpoint=endpoint,
                         ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05))
    with sky.Pool(provider=aws, nodes=2, name="p-victim") as pool:
        print("READY", flush=True)
        time.sleep(600)
""")


def test_down_after_a_killed_client_leaves_nothing_of_that_pool_only(moto_server, skyhive_home):
    endpoint = moto_server.endpoint
    other = AWS(region="us-east-1", instance_type="t3.micro", image=moto_server.image, endpoint=endpoint,
                ssh_cidr="192.0.2.1/32", timeouts=CloudTimeouts(poll=0.05))
    anyio.run(other.create, ClusterSpec(pool_id="p-other", nodes=2))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    client = subprocess.Popen([sys.executable, "-c", CLIENT, endpoint, moto_server.image], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = Lines(client.stdout), Lines(client.stderr)
    try:
        try:
            out.wait_for(lambda line: line.strip() == "READY", 300, "the client's pool")
        except AssertionError as e:
            client.kill()
            pytest.fail(f"the client did not get its pool: {e}\n{err.rest()[-3000:]}")
        assert count_pool("p-victim", endpoint) == {"instances": 2, "groups": 1, "keys": 1}
        client.send_signal(signal.SIGKILL)
        client.wait(30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert count_pool("p-victim", endpoint) == {"instances": 2, "groups": 1, "keys": 1}  # the kill left them

    ls = subprocess.run([sys.executable, "-m", "skyhive", "ls", "--json"], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=60)
    (entry,) = [e for e in map(json.loads, ls.stdout.splitlines()) if e["pool"] == "p-victim"]
    assert (entry["provider"], entry["machine"], entry["status"]) == ("aws", "t3.micro", "client gone")
    per_hour, spent = entry["cost"]
    assert per_hour == pytest.approx(2 * catalog.choose("aws", "us-east-1", instance_type="t3.micro").price_per_hour)
    assert 0 < spent < per_hour  # it ran for seconds
    table = subprocess.run([sys.executable, "-m", "skyhive", "ls"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60).stdout
    assert "COST" in table and f"${per_hour:.4g}/h" in table

    down = subprocess.run([sys.executable, "-m", "skyhive", "down", "p-victim"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "2 provider nodes destroyed" in down.stdout, down.stdout + down.stderr
    assert count_pool("p-victim", endpoint) == {"instances": 0, "groups": 0, "keys": 0}
    assert count_pool("p-other", endpoint) == {"instances": 2, "groups": 1, "keys": 1}
    again = subprocess.run([sys.executable, "-m", "skyhive", "down", "p-victim"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    print("AGAIN", again.returncode, again.stdout, again.stderr)
    assert again.returncode in (0, 1), again.stderr
    anyio.run(other.down, "p-other")
    assert count_pool("p-other", endpoint) == {"instances": 0, "groups": 0, "keys": 0}
