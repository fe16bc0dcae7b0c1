"""sky.GCP's request building, checked offline against apache-libcloud's own GCE test kit.

FAKE: no GCE emulator exists; `RecordingGCEMockHttp` is libcloud's shipped `GCEMockHttp` (canned GCE
answers from its fixtures) recording the bodies the driver POSTs. It proves what skyhive sends — labels,
network tags, the pool's SSH key in metadata, preemptible scheduling, firewall rules — and that answers
are parsed into handles; not that GCE accepts them. Runs in a loopback-only namespace (no packet leaves
even if a mock were missed).
"""

from __future__ import annotations

import json
import sys
import types
import unittest

import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud.base import ErrorKind
from skyhive.providers.cloud.gcp import GCP
from skyhive.providers.cloud.keys import pool_key

pytestmark = [pytest.mark.loopback_only]


@pytest.fixture
def gce(monkeypatch):
    """(GCP provider with libcloud's GCE driver on the test kit's mock HTTP, the POSTed bodies)."""
    pytest.importorskip("requests_mock", reason="libcloud's test kit needs requests-mock (dev extra)")
    secrets = types.ModuleType("libcloud.test.secrets")  # the kit's secrets.py-dist, without writing a file
    secrets.GCE_PARAMS = ("email@developer.gserviceaccount.com", "key")
    secrets.GCE_KEYWORD_PARAMS = {"project": "project_name"}
    monkeypatch.setitem(sys.modules, "libcloud.test.secrets", secrets)
    from libcloud.common.google import GoogleBaseAuthConnection
    from libcloud.compute.drivers.gce import GCENodeDriver
    from libcloud.test.common.test_google import GoogleAuthMockHttp, GoogleTestCase
    from libcloud.test.compute.test_gce import GCEMockHttp

    posted: list[tuple[str, dict]] = []

    class RecordingGCEMockHttp(GCEMockHttp):
        """FAKE: libcloud's canned GCE answers; records what was POSTed."""

        def _zones_us_central1_a_instances(self, method, url, body, headers):
            if method == "POST":
                posted.append(("instance", json.loads(body)))
            return super()._zones_us_central1_a_instances(method, url, body, headers)

        def _global_firewalls(self, method, url, body, headers):
            if method == "POST":
                posted.append(("firewall", json.loads(body)))
            return super()._global_firewalls(method, url, body, headers)

        def __getattr__(self, name):  # our resource names: answered with the kit's fixture of that kind
            if name.startswith("_global_firewalls_"):
                return self._global_firewalls_lcfirewall
            if name.startswith("_zones_us_central1_a_instances_skyhive_"):
                return self._zones_us_central1_a_instances_node_name
            raise AttributeError(name)

    patchers = [getattr(GoogleTestCase, n) for n in dir(GoogleTestCase) if n.endswith("_patcher")]
    monkeypatch.setattr(GCENodeDriver.connectionCls, "conn_class", RecordingGCEMockHttp)
    monkeypatch.setattr(GoogleBaseAuthConnection, "conn_class", GoogleAuthMockHttp)
    RecordingGCEMockHttp.test, RecordingGCEMockHttp.type = unittest.TestCase(), None
    for p in patchers:
        p.start()
    try:
        provider = GCP(project="project_name", region="us-central1", zones=["us-central1-a"],
                       machine_type="n1-standard-1", image="debian-7", ssh_cidr="192.0.2.1/32", spot=True,
                       disk_gb=20)
        provider._driver = GCENodeDriver(*secrets.GCE_PARAMS, project="project_name", auth_type="IA",
                                         datacenter="us-central1-a")
        yield provider, posted
    finally:
        for p in patchers:
            p.stop()


def test_a_node_is_created_with_labels_tags_ssh_key_and_preemptible_scheduling(gce):
    provider, posted = gce
    spec = ClusterSpec(pool_id="p-gce", nodes=2)
    (handle,) = provider.launch_sync(spec, [1], "us-central1-a")
    kind, body = posted[-1]
    assert kind == "instance" and body["name"] == "skyhive-p-gce-1"
    assert body["labels"] == {"skyhive-pool": "p-gce", "skyhive-node": "1"}
    assert body["tags"]["items"] == ["skyhive-p-gce"]
    (item,) = [i for i in body["metadata"]["items"] if i["key"] == "ssh-keys"]
    assert item["value"] == f"skyhive:{pool_key('p-gce')[1]} skyhive"
    assert body["scheduling"]["preemptible"] is True
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == 20
    assert handle.provider_id.startswith("us-central1-a/") and handle.extra["pool_id"] == "p-gce"


def test_prepare_opens_ssh_from_the_client_and_everything_inside_the_pool(gce):
    provider, posted = gce
    provider.prepare_sync(ClusterSpec(pool_id="p-gce", nodes=2))
    rules = {body["name"]: body for kind, body in posted if kind == "firewall"}
    assert set(rules) == {"skyhive-p-gce", "skyhive-p-gce-internal"}
    ssh, internal = rules["skyhive-p-gce"], rules["skyhive-p-gce-internal"]
    assert ssh["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert ssh["sourceRanges"] == ["192.0.2.1/32"] and ssh["targetTags"] == ["skyhive-p-gce"]
    assert internal["allowed"] == [{"IPProtocol": "all"}]
    assert internal["sourceTags"] == internal["targetTags"] == ["skyhive-p-gce"]


def test_gce_errors_are_classified_by_code(gce):
    from libcloud.common.google import GoogleBaseError, QuotaExceededError, ResourceNotFoundError

    provider, _ = gce
    assert provider.classify(GoogleBaseError("full", 503, "ZONE_RESOURCE_POOL_EXHAUSTED")) is ErrorKind.CAPACITY
    assert provider.classify(QuotaExceededError("cpus", 403, "QUOTA_EXCEEDED")) is ErrorKind.QUOTA
    assert provider.classify(GoogleBaseError("slow down", 403, "rateLimitExceeded")) is ErrorKind.TRANSIENT
    assert provider.classify(ResourceNotFoundError({"message": "gone"}, 404, "notFound")) is ErrorKind.NOT_FOUND
    assert provider.classify(GoogleBaseError("bad", 400, "invalid")) is ErrorKind.FATAL


def test_describe_rebuilds_the_same_provider():
    from skyhive.providers.registry import from_description

    provider = GCP(project="p", region="europe-west4", machine_type="n2-standard-8", spot=True)
    rebuilt = from_description(json.loads(json.dumps(provider.describe())))
    assert isinstance(rebuilt, GCP) and rebuilt.describe() == provider.describe()
    assert rebuilt.zones == ["europe-west4-a", "europe-west4-b", "europe-west4-c", "europe-west4-f"]


def test_an_accelerator_without_a_machine_type_is_refused_before_anything_is_created(gce):
    from skyhive.providers.base import ProvisionError

    provider, posted = gce
    provider.machine_type = None  # what GCP() has when no machine_type is given
    spec = ClusterSpec(pool_id="p-gpu", nodes=1, accelerator="A100")
    with pytest.raises(ProvisionError, match=r"gcp: cannot choose a machine for accelerator 'A100'.*a2-highgpu-1g"):
        provider.plan(spec)
    with pytest.raises(ProvisionError, match="no gcp machine table"):
        provider.prepare_sync(spec)
    assert posted == []
    # no accelerator: the default machine
    assert provider.create_request(ClusterSpec(pool_id="p-cpu", nodes=1), 0, "us-central1-a")["size"] == "e2-standard-2"


def test_an_accelerator_with_a_named_machine_type_uses_that_machine(gce, caplog):
    provider, _ = gce
    provider.machine_type = "a2-highgpu-1g"
    spec = ClusterSpec(pool_id="p-gpu", nodes=2, accelerator="A100")
    with caplog.at_level("INFO", logger="skyhive.providers.cloud.base"):
        assert provider.create_request(spec, 0, "us-central1-a")["size"] == "a2-highgpu-1g"
    assert "accelerator A100 taken as given by machine a2-highgpu-1g" in caplog.text
    assert provider.plan(spec)["instance_type"] == "a2-highgpu-1g"
