"""sky.DigitalOcean's request building, checked offline against apache-libcloud's DigitalOcean test kit.

FAKE: no DigitalOcean emulator exists; `RecordingDOMockHttp` is libcloud's shipped mock with canned
answers, recording what the driver sends. libcloud ships no fixture for a successful droplet create:
`DROPLET` below is one, shaped like the API's documented answer. It proves what skyhive sends (tags,
SSH key, firewall) and that answers parse; not that DigitalOcean accepts them.
"""

from __future__ import annotations

import json
import sys
import types

import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud.base import ErrorKind
from skyhive.providers.cloud.digitalocean import DigitalOcean
from skyhive.providers.cloud.keys import pool_key

pytestmark = [pytest.mark.loopback_only]

DROPLET = {"droplet": {
    "id": 3164494, "name": "skyhive-p-do-1", "memory": 4096, "vcpus": 2, "disk": 80, "locked": False,
    "status": "new", "created_at": "2026-11-23T00:00:00Z", "features": [], "backup_ids": [], "snapshot_ids": [],
    "image": {"id": 1, "name": "22.04 x64", "distribution": "Ubuntu", "slug": "ubuntu-22-04-x64", "public": True,
              "regions": ["nyc3"], "created_at": "2026-01-01T00:00:00Z", "min_disk_size": 20, "type": "snapshot"},
    "size_slug": "s-2vcpu-4gb", "networks": {"v4": [], "v6": []}, "region": {"name": "New York 3", "slug": "nyc3"},
    "tags": ["skyhive-pool:p-do", "skyhive-node:1"],
}}


@pytest.fixture
def do(monkeypatch):
    pytest.importorskip("requests_mock", reason="libcloud's test kit needs requests-mock (dev extra)")
    secrets = types.ModuleType("libcloud.test.secrets")
    secrets.DIGITALOCEAN_v1_PARAMS, secrets.DIGITALOCEAN_v2_PARAMS = ("user", "key"), ("token",)
    monkeypatch.setitem(sys.modules, "libcloud.test.secrets", secrets)
    from libcloud.common.digitalocean import DigitalOcean_v2_BaseDriver
    from libcloud.compute.drivers.digitalocean import DigitalOceanNodeDriver
    from libcloud.test import httplib
    from libcloud.test.compute.test_digitalocean_v2 import DigitalOceanComputeMockHttp

    sent: list[tuple[str, str, dict]] = []
    keys: list[dict] = []

    class RecordingDOMockHttp(DigitalOceanComputeMockHttp):
        """FAKE: libcloud's canned DigitalOcean answers; records requests; remembers created SSH keys."""

        def _answer(self, status, obj):
            return (status, json.dumps(obj), {}, httplib.responses[status])

        def _v2_droplets(self, method, url, body, headers):
            if method == "POST":
                sent.append(("droplet", url, json.loads(body)))
                return self._answer(httplib.ACCEPTED, DROPLET)
            return super()._v2_droplets(method, url, body, headers)

        def _v2_firewalls(self, method, url, body, headers):
            if method == "POST":
                sent.append(("firewall", url, json.loads(body)))
                return self._answer(httplib.ACCEPTED, {"firewall": {"id": "fw-1", **json.loads(body)}})
            return self._answer(httplib.OK, {"firewalls": []})

        def _v2_account_keys(self, method, url, body, headers):
            if method == "POST":
                data = json.loads(body)
                sent.append(("key", url, data))
                keys.append({"id": 7717, "name": data["name"], "public_key": data["public_key"],
                             "fingerprint": "aa:bb:cc"})
                return self._answer(httplib.CREATED, {"ssh_key": keys[-1]})
            return self._answer(httplib.OK, {"ssh_keys": keys, "links": {}, "meta": {"total": len(keys)}})

    for cls in (DigitalOcean_v2_BaseDriver, DigitalOceanNodeDriver):
        monkeypatch.setattr(cls.connectionCls, "conn_class", RecordingDOMockHttp)
    RecordingDOMockHttp.type = None
    provider = DigitalOcean(region="nyc3", ssh_cidr="192.0.2.1/32")
    provider._driver = DigitalOceanNodeDriver("token", api_version="v2")
    return provider, sent


def test_prepare_registers_the_pool_key_and_a_firewall_for_its_tag(do):
    provider, sent = do
    provider.prepare_sync(ClusterSpec(pool_id="p-do", nodes=2))
    (key,) = [body for kind, _, body in sent if kind == "key"]
    assert key == {"name": "skyhive-p-do", "public_key": pool_key("p-do")[1]}
    (fw,) = [body for kind, _, body in sent if kind == "firewall"]
    assert fw["name"] == "skyhive-p-do" and fw["tags"] == ["skyhive-pool:p-do"]
    ssh = [r for r in fw["inbound_rules"] if r.get("ports") == "22"]
    assert ssh == [{"protocol": "tcp", "ports": "22", "sources": {"addresses": ["192.0.2.1/32"]}}]
    assert {"protocol": "tcp", "ports": "all", "sources": {"tags": ["skyhive-pool:p-do"]}} in fw["inbound_rules"]


def test_a_droplet_is_created_with_the_pool_tags_and_key(do):
    provider, sent = do
    spec = ClusterSpec(pool_id="p-do", nodes=2)
    provider.prepare_sync(spec)
    (handle,) = provider.launch_sync(spec, [1], "nyc3")
    (droplet,) = [body for kind, _, body in sent if kind == "droplet"]
    assert droplet["tags"] == ["skyhive-pool:p-do", "skyhive-node:1"]
    assert droplet["ssh_keys"] == ["aa:bb:cc"] and droplet["region"] == "nyc3"
    assert droplet["size"] == "s-2vcpu-4gb" and droplet["image"] == "ubuntu-22-04-x64"
    assert (handle.node, handle.provider_id, handle.state) == (1, "3164494", "pending")


def test_errors_are_classified_by_status_and_message(do):
    from libcloud.common.exceptions import BaseHTTPError

    provider, _ = do
    assert provider.classify(BaseHTTPError(429, "too many requests")) is ErrorKind.TRANSIENT
    assert provider.classify(BaseHTTPError(404, "not found")) is ErrorKind.NOT_FOUND
    limit = BaseHTTPError(422, "creating this/these droplet(s) will exceed your droplet limit (code: 422)")
    assert provider.classify(limit) is ErrorKind.QUOTA
    assert provider.classify(BaseHTTPError(422, "Region is not available (code: 422)")) is ErrorKind.CAPACITY
    assert provider.classify(BaseHTTPError(400, "bad size")) is ErrorKind.FATAL


def test_an_accelerator_needs_a_named_gpu_size_and_is_refused_before_anything_is_sent(do):
    from skyhive.providers.base import ProvisionError

    provider, sent = do[0], do[1]
    spec = ClusterSpec(pool_id="p-gpu", nodes=1, accelerator="H100")
    with pytest.raises(ProvisionError, match=r"digitalocean: cannot choose a machine for accelerator 'H100'.*"
                                             r"size='gpu-h100x1-80gb'"):
        provider.prepare_sync(spec)
    assert sent == []
    provider.size = "gpu-h100x1-80gb"
    assert provider.plan(spec)["instance_type"] == "gpu-h100x1-80gb"
    assert provider.plan(ClusterSpec(pool_id="p", nodes=1, accelerator=None))["instance_type"] == "gpu-h100x1-80gb"
