"""sky.DigitalOcean against `FakeDO` (tests/cloud/fake_do.py): a FAKE DigitalOcean API that refuses what the API
refuses (a firewall naming a tag that does not exist, sizes outside their regions, GPU sizes without the
GPU image, unknown keys). Pools are made in the DEFAULT configuration (region nyc3, no size, no image)
unless a test is about an override. It proves what is sent and that the base's policy drives a pool to
running and back to nothing; not that DigitalOcean accepts the requests.
"""

from __future__ import annotations

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.base import CloudTimeouts, ErrorKind
from skyhive.providers.cloud.digitalocean import DigitalOcean
from skyhive.providers.cloud.keys import pool_key
from tests.cloud.fake_do import FakeDO
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=5, terminate=5, cleanup=5)


@pytest.fixture
def do(monkeypatch):
    from libcloud.compute.drivers.digitalocean import DigitalOceanNodeDriver

    fake = FakeDO()
    install_fakes(monkeypatch, fake)
    provider = DigitalOcean(ssh_cidr="192.0.2.1/32", timeouts=FAST)
    provider._driver = DigitalOceanNodeDriver(fake.token, api_version="v2")
    return provider, fake


def test_prepare_makes_the_tag_before_the_firewall_that_names_it(do):
    provider, fake = do
    provider.prepare_sync(ClusterSpec(pool_id="p-do", nodes=2))
    (key,) = fake.keys.values()
    assert (key["name"], key["public_key"]) == ("skyhive-p-do", pool_key("p-do")[1])
    assert fake.requests.index(("POST", "/v2/tags")) < fake.requests.index(("POST", "/v2/firewalls"))
    (fw,) = fake.firewalls.values()
    assert fw["name"] == "skyhive-p-do" and fw["tags"] == ["skyhive-pool:p-do"]
    ssh = [r for r in fw["inbound_rules"] if r.get("ports") == "22"]
    assert ssh == [{"protocol": "tcp", "ports": "22", "sources": {"addresses": ["192.0.2.1/32"]}}]
    assert {"protocol": "tcp", "ports": "all", "sources": {"tags": ["skyhive-pool:p-do"]}} in fw["inbound_rules"]
    assert fake.refused == []


def test_the_fake_refuses_a_firewall_naming_a_tag_that_does_not_exist(do):
    from libcloud.common.exceptions import BaseHTTPError
    import json

    provider, fake = do
    with pytest.raises(BaseHTTPError, match="does not exist"):
        provider.driver.connection.request("/v2/firewalls", method="POST",
                                           data=json.dumps(provider.firewall_request("p-notag")))


def test_a_default_pool_is_created_and_destroyed_leaving_nothing(do):
    provider, fake = do
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-do", nodes=2))
    assert [(h.node, h.state) for h in handles] == [(0, "running"), (1, "running")]
    assert handles[0].public_addr.startswith("203.0.113.") and handles[0].private_addr.startswith("10.116.0.")
    body = fake.created[0]
    assert (body["size"], body["image"], body["region"]) == ("s-2vcpu-4gb", "ubuntu-22-04-x64", "nyc3")
    assert body["tags"] == ["skyhive-pool:p-do", "skyhive-node:0"]
    assert "astral.sh/uv" in body["user_data"]  # uv at boot, for the client's Python
    assert "nvidia-smi" not in handles[0].reach.ready_command
    anyio.run(provider.down, "p-do")
    assert fake.droplets == {} and fake.firewalls == {} and fake.keys == {}
    # the pool's tag is deleted; the node-index tags are shared by every pool (deleting one would untag
    # another pool's droplets), and a tag costs nothing
    assert fake.tags == {"skyhive-node:0", "skyhive-node:1"}
    assert anyio.run(provider.list_owned, "p-do") == []


def test_a_gpu_pool_goes_to_a_gpu_region_with_the_gpu_image(do):
    provider, fake = do
    spec = ClusterSpec(pool_id="p-h100", nodes=1, accelerator="H100:1")
    plan = provider.plan(spec)
    assert (plan["instance_type"], plan["regions"], plan["price_per_hour"]) == ("gpu-h100x1-80gb", ["tor1"], 6.74)
    (handle,) = anyio.run(provider.create, spec)
    body = fake.created[-1]
    assert (body["size"], body["region"], body["image"]) == ("gpu-h100x1-80gb", "tor1", "gpu-h100x1-base")
    assert "nvidia-smi" in handle.reach.ready_command and handle.accelerators == 1
    anyio.run(provider.down, "p-h100")
    assert fake.droplets == {}


def test_the_fake_refuses_a_gpu_size_outside_its_regions(do):
    provider, fake = do
    provider.size, provider.regions = "gpu-h100x1-80gb", ["nyc3"]
    with pytest.raises(ProvisionError, match="Size is not available in this region"):
        anyio.run(provider.create, ClusterSpec(pool_id="p-where", nodes=1))
    assert fake.droplets == {} and fake.firewalls == {}


def test_errors_are_classified_by_status_and_message(do):
    from libcloud.common.exceptions import BaseHTTPError

    provider, _ = do
    assert provider.classify(BaseHTTPError(429, "too many requests")) is ErrorKind.TRANSIENT
    assert provider.classify(BaseHTTPError(404, "not found")) is ErrorKind.NOT_FOUND
    limit = BaseHTTPError(422, "creating this/these droplet(s) will exceed your droplet limit (code: 422)")
    assert provider.classify(limit) is ErrorKind.QUOTA
    assert provider.classify(BaseHTTPError(422, "Region is not available (code: 422)")) is ErrorKind.CAPACITY
    assert provider.classify(BaseHTTPError(400, "bad size")) is ErrorKind.FATAL


def test_an_accelerator_no_region_offers_is_refused_before_anything_is_sent(do):
    provider, fake = do
    with pytest.raises(ProvisionError, match="offers no accelerator called 'A100'"):
        provider.prepare_sync(ClusterSpec(pool_id="p-gpu", nodes=1, accelerator="A100"))
    assert fake.requests == []
