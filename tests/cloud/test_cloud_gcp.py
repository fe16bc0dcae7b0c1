"""sky.GCP against `FakeGCE` (tests/cloud/fake_gce.py): a FAKE GCE that refuses what GCE refuses, rule by rule.

Every pool here is made in the provider's DEFAULT configuration (no image, no zones) unless the test is
about an override: the image family, TERMINATE for GPUs, spot, N1 with attached GPUs, the zones taken
from the catalog, a zone the region lacks, application-default credentials of both kinds, networks.
"""

from __future__ import annotations

import json

import anyio
import pytest

from skyhive.errors import CloudAPIError
from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.base import CloudTimeouts, ErrorKind
from skyhive.providers.cloud.gcp import GCP
from skyhive.providers.cloud.keys import pool_key

from tests.cloud.fake_gce import FakeGCE

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)


def _metadata(body: dict) -> dict[str, str]:
    return {item["key"]: item["value"] for item in body["metadata"]["items"]}


def test_a_default_pool_is_created_and_destroyed_leaving_nothing(gce):
    provider = GCP(region="us-east1", timeouts=FAST)  # project from the key file, default image and zones
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-gce", nodes=2))
    assert [(h.node, h.state) for h in handles] == [(0, "running"), (1, "running")]
    assert all(h.provider_id.startswith("us-east1-b/") for h in handles)  # us-east1 has no zone a
    assert handles[0].public_addr.startswith("203.0.113.") and handles[0].private_addr.startswith("10.128.0.")
    body = gce.inserts[0]
    assert body["disks"][0]["initializeParams"]["sourceImage"] == \
        "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
    assert body["machineType"].endswith("/e2-standard-2")
    assert body["labels"] == {"skyhive-pool": "p-gce", "skyhive-node": "0"}
    assert body["tags"]["items"] == ["skyhive-p-gce"]
    meta = _metadata(body)
    assert meta["ssh-keys"] == f"skyhive:{pool_key('p-gce')[1]} skyhive"
    assert meta["enable-oslogin"] == "FALSE"
    assert "astral.sh/uv/install.sh" in meta["startup-script"]  # uv at boot, for the client's Python
    assert "nvidia-smi" not in handles[0].reach.ready_command and handles[0].reach.idle_shutdown == 1800.0
    assert set(gce.firewalls) == {"skyhive-p-gce", "skyhive-p-gce-internal"}
    assert gce.refused == []
    found = anyio.run(provider.down, "p-gce")
    assert sorted(h.node for h in found) == [0, 1]
    assert gce.instances == {} and gce.firewalls == {}
    assert anyio.run(provider.list_owned, "p-gce") == []


def test_the_fake_refuses_a_family_sent_as_an_image_name(gce):
    provider = GCP(project="proj-1", region="us-central1", image="projects/ubuntu-os-cloud/global/images/ubuntu-2204-lts",
                   timeouts=FAST)
    with pytest.raises(ProvisionError, match="ubuntu-2204-lts' was not found"):
        anyio.run(provider.create, ClusterSpec(pool_id="p-img", nodes=1))
    assert gce.instances == {} and gce.firewalls == {}  # the failed start cleaned up
    # a bare family name is sent as a family path of its public project
    assert GCP(project="proj-1", image="debian-12").image_path(gpu=False) == \
        "projects/debian-cloud/global/images/family/debian-12"


def test_a_gpu_pool_gets_the_cheapest_a100_machine_terminate_and_the_driver_image(gce):
    provider = GCP(region="us-central1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-a100", nodes=1, accelerator="A100:1")
    plan = provider.plan(spec)
    # "A100" is any A100 on every cloud (issue 38): in us-central1 the 80 GB one is the cheaper machine
    assert (plan["instance_type"], plan["accelerator"], plan["accelerators"]) == ("a2-ultragpu-1g", "A100-80GB", 1)
    assert plan["price_per_hour"] > 1 and plan["spot_price_per_hour"] < plan["price_per_hour"]
    (handle,) = anyio.run(provider.create, spec)
    body = gce.inserts[-1]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert "deeplearning-platform-release" in body["disks"][0]["initializeParams"]["sourceImage"]
    assert _metadata(body)["install-nvidia-driver"] == "True"
    assert "nvidia-smi" in handle.reach.ready_command and handle.accelerators == 1
    anyio.run(provider.down, "p-a100")
    assert gce.instances == {}


def test_the_fake_refuses_gpus_that_would_live_migrate(gce):
    provider = GCP(project="proj-1", region="us-central1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-mig", nodes=1, accelerator="L4:1")
    body = provider.create_request(spec, 0, "us-central1-a")
    body["scheduling"] = {"automaticRestart": True}  # what was sent before: no onHostMaintenance
    with pytest.raises(CloudAPIError, match="do not support live migration"):
        provider.client.request("POST", "zones/us-central1-a/instances", body)


def test_n1_with_attached_t4_sends_guest_accelerators_in_a_zone_that_has_them(gce):
    provider = GCP(region="us-central1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-t4", nodes=1, accelerator="T4")
    assert provider.plan(spec)["instance_type"] == "n1-standard-8+1xT4"
    anyio.run(provider.create, spec)
    body = gce.inserts[-1]
    assert body["machineType"].endswith("/machineTypes/n1-standard-8")
    (acc,) = body["guestAccelerators"]
    assert acc["acceleratorType"].endswith("/acceleratorTypes/nvidia-tesla-t4") and acc["acceleratorCount"] == 1
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    anyio.run(provider.down, "p-t4")


def test_spot_is_the_spot_provisioning_model(gce):
    provider = GCP(region="us-central1", spot=True, timeouts=FAST)
    anyio.run(provider.create, ClusterSpec(pool_id="p-spot", nodes=1))
    scheduling = gce.inserts[-1]["scheduling"]
    assert scheduling == {"automaticRestart": False, "onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT",
                          "instanceTerminationAction": "DELETE"}
    assert "preemptible" not in scheduling
    anyio.run(provider.down, "p-spot")


def test_a_zone_the_region_lacks_is_skipped_and_a_full_zone_moves_on(gce):
    gce.exhausted.add("us-east1-b")
    provider = GCP(region="us-east1", zones=["us-east1-a", "us-east1-b", "us-east1-c"], timeouts=FAST)
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-zones", nodes=1))
    assert handle.provider_id.startswith("us-east1-c/")
    assert any("zones/us-east1-a' was not found" in r for r in gce.refused)
    anyio.run(provider.down, "p-zones")
    with pytest.raises(ValueError, match="zone 'europe-west4-a' is not in region 'us-east1'"):
        GCP(region="us-east1", zones=["europe-west4-a"])


def test_gcloud_user_credentials_and_the_project_from_the_environment(gce, monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    config = tmp_path / "gcloud"
    config.mkdir()
    gce.user_file(config / "application_default_credentials.json")  # `gcloud auth application-default login`
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(config))
    with pytest.raises(ProvisionError, match="no project"):
        _ = GCP().client
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
    provider = GCP(region="us-central1", timeouts=FAST)
    anyio.run(provider.create, ClusterSpec(pool_id="p-user", nodes=1))
    assert len(gce.instances) == 1
    anyio.run(provider.down, "p-user")


def test_credentials_the_token_endpoint_refuses_fail_clearly(gce, monkeypatch, tmp_path):
    other = FakeGCE()
    bad = tmp_path / "other.json"
    other.service_account_file(bad)  # a key gce does not trust
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(bad))
    with pytest.raises(ProvisionError, match="token endpoint refused the credentials"):
        GCP(project="proj-1").client.request("GET", "global/firewalls")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ProvisionError, match="cannot read credentials file"):
        _ = GCP(project="proj-1").client


def test_a_missing_default_network_names_the_option_and_a_custom_network_needs_its_subnetwork(gce):
    gce.networks = {"vpc-1": "custom"}
    gce.subnetworks = {("us-central1", "nodes")}
    with pytest.raises(ProvisionError, match=r"network 'default' does not exist.*GCP\(network=..., subnetwork=...\)"):
        anyio.run(GCP(region="us-central1", timeouts=FAST).create, ClusterSpec(pool_id="p-net", nodes=1))
    with pytest.raises(ProvisionError, match="Subnetwork should be specified"):
        anyio.run(GCP(region="us-central1", network="vpc-1", timeouts=FAST).create, ClusterSpec(pool_id="p-net", nodes=1))
    provider = GCP(region="us-central1", network="vpc-1", subnetwork="nodes", timeouts=FAST)
    anyio.run(provider.create, ClusterSpec(pool_id="p-net", nodes=1))
    assert gce.inserts[-1]["networkInterfaces"][0]["subnetwork"] == "regions/us-central1/subnetworks/nodes"
    anyio.run(provider.down, "p-net")
    assert gce.instances == {} and gce.firewalls == {}


def test_an_accelerator_the_region_lacks_is_refused_before_anything_is_created(gce):
    provider = GCP(project="proj-1", region="us-central1", timeouts=FAST)
    with pytest.raises(ProvisionError, match="no instance type in us-central1 has accelerator RTX9000"):
        anyio.run(provider.create, ClusterSpec(pool_id="p-none", nodes=1, accelerator="RTX9000"))
    assert gce.inserts == [] and gce.firewalls == {}


def test_gce_errors_are_classified_by_code():
    provider = GCP(project="p")
    assert provider.classify(CloudAPIError("ZONE_RESOURCE_POOL_EXHAUSTED", "full", 503)) is ErrorKind.CAPACITY
    assert provider.classify(CloudAPIError("zoneNotFound", "no such zone", 404)) is ErrorKind.CAPACITY
    assert provider.classify(CloudAPIError("quotaExceeded", "cpus", 403)) is ErrorKind.QUOTA
    assert provider.classify(CloudAPIError("rateLimitExceeded", "slow down", 403)) is ErrorKind.TRANSIENT
    assert provider.classify(CloudAPIError("notFound", "gone", 404)) is ErrorKind.NOT_FOUND
    assert provider.classify(CloudAPIError("invalid", "bad", 400)) is ErrorKind.FATAL


def test_describe_rebuilds_the_same_provider():
    from skyhive.providers.registry import from_description

    provider = GCP(project="p", region="europe-west4", machine_type="n2-standard-8", spot=True, subnetwork="s")
    rebuilt = from_description(json.loads(json.dumps(provider.describe())))
    assert isinstance(rebuilt, GCP) and rebuilt.describe() == provider.describe()


def test_the_fake_refuses_a_gpu_type_the_zone_does_not_offer_and_the_catalog_zones_avoid_it(gce):
    provider = GCP(project="proj-1", region="us-central1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-p100", nodes=1, accelerator="P100:1")
    assert provider.zones_sync(spec) == ["us-central1-c", "us-central1-f"]  # where the catalog has P100 rows
    body = provider.create_request(spec, 0, "us-central1-b")
    with pytest.raises(CloudAPIError, match="acceleratorTypes/nvidia-tesla-p100' was not found"):
        provider.client.request("POST", "zones/us-central1-b/instances", body)
