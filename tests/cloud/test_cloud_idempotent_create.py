"""Creates that are idempotent (issue 38, point 4): a rate limit (GCE 403 rateLimitExceeded, DigitalOcean 429)
or a server error whose call went through anyway (5xx, the instance made) injected at each create position
of a pool: only that call is retried, the node is found again by its name or tags before the retry, the pool
comes up, never more nodes alive than it asked for, and nothing is left after `down`."""

from __future__ import annotations

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, RetryPolicy
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.digitalocean import DigitalOcean
from skyhive.providers.cloud.gcp import GCP
from tests.cloud.fake_do import FakeDO
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)
NODES = 3
QUICK_RETRY = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.05)


@pytest.mark.parametrize("fault", [(403, "rateLimitExceeded", False), (503, "backendError", True)],
                         ids=["rate-limited", "5xx-but-created"])
@pytest.mark.parametrize("position", range(1, NODES + 1))
def test_gcp_a_failed_insert_is_retried_alone_and_never_doubles(gce, position, fault):
    gce.insert_faults[position] = fault
    provider = GCP(region="us-east1", timeouts=FAST)
    provider.retry = QUICK_RETRY
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-idem", nodes=NODES))
    assert sorted(h.node for h in handles) == list(range(NODES)) and all(h.state == "running" for h in handles)
    assert gce.peak <= NODES and len(gce.instances) == NODES
    names = [b["name"] for b in gce.inserts]
    assert len(names) == NODES + (0 if fault[2] else 1)  # a made-anyway node is adopted, not inserted again
    assert "alreadyExists" not in " ".join(gce.refused)
    anyio.run(provider.down, "p-idem")
    assert gce.instances == {} and gce.firewalls == {}


@pytest.mark.parametrize("fault", [(429, False), (500, True)], ids=["rate-limited", "5xx-but-created"])
@pytest.mark.parametrize("position", range(1, NODES + 1))
def test_digitalocean_a_failed_create_is_retried_alone_and_never_doubles(monkeypatch, position, fault):
    from libcloud.compute.drivers.digitalocean import DigitalOceanNodeDriver

    fake = FakeDO()
    install_fakes(monkeypatch, fake)
    fake.create_faults[position] = fault
    provider = DigitalOcean(ssh_cidr="192.0.2.1/32", timeouts=FAST)
    provider._driver = DigitalOceanNodeDriver(fake.token, api_version="v2")
    provider.retry = QUICK_RETRY
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-idem", nodes=NODES))
    assert sorted(h.node for h in handles) == list(range(NODES)) and all(h.state == "running" for h in handles)
    assert fake.peak <= NODES and len(fake.droplets) == NODES
    assert fake.create_calls == NODES + (0 if fault[1] else 1)
    anyio.run(provider.down, "p-idem")
    assert fake.droplets == {} and fake.firewalls == {} and fake.keys == {}
