"""The search over offers across clouds (issue 38, point 2): it moves to the next offer on any refusal of
one offer (a ProvisionError kind of its own, "refused", logged with the reason), ranks only what can be
bought, prices spot at the zones that will be tried, and gives each accelerator name one meaning on
every cloud. Launches go through the FAKE clouds (tests/cloud/fake_gce.py, tests/cloud/fake_arm.py)."""

from __future__ import annotations

import logging

import anyio
import pytest

from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import catalog, offers
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.fallback import Fallback
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_gce import FakeGCE
from tests.cloud.fake_http import install_fakes
from tests.cloud.test_cloud_cheapest import CLOUD_ENV

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=10, terminate=10, cleanup=10, visibility_grace=1)
SUBSCRIPTION = "99999999-0000-0000-0000-000000000000"


@pytest.fixture
def clouds(monkeypatch, tmp_path):
    """GCP (a service account FakeGCE trusts) and Azure (a service principal FakeARM takes) credentials."""
    for name in CLOUD_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "home" / "gcloud"))
    monkeypatch.chdir(tmp_path)
    gce, arm = FakeGCE(), FakeARM(SUBSCRIPTION)
    install_fakes(monkeypatch, gce, arm)
    gce.service_account_file(tmp_path / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
    for name, value in (("AZURE_TENANT_ID", "77777777-7777-7777-7777-777777777777"),
                        ("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION),
                        ("AZURE_CLIENT_ID", "55555555-5555-5555-5555-555555555555"), ("AZURE_CLIENT_SECRET", "p4ssw0rd")):
        monkeypatch.setenv(name, value)
    return gce, arm


def _across(tmp_path, gpus: str) -> Fallback:
    """What `skyhive launch --gpus GPUS` (no provider) builds: the Fallback over the ranked offers."""
    from skyhive.runtime.commands.resources import provider_for
    from skyhive.runtime.commands.taskfile import load

    (tmp_path / "t.yaml").write_text(f"resources:\n  accelerators: {gpus}\nrun: nvidia-smi\n")
    fallback = provider_for(load(str(tmp_path / "t.yaml")))
    assert isinstance(fallback, Fallback)
    for provider in fallback.providers:
        provider.timeouts = FAST
    return fallback


def test_a_refused_first_offer_moves_to_the_next_and_the_log_says_why(clouds, tmp_path, caplog):
    gce, arm = clouds
    fallback = _across(tmp_path, "A100:1")
    spec = ClusterSpec(pool_id="p-refused", nodes=1, accelerator="A100:1")
    ordered = fallback.plan(spec)["candidates"]
    first, second = ordered[0], ordered[1]
    assert first["cloud"] == "gcp"  # the cheapest A100:1 is a GCP a2-highgpu-1g
    gce.refusals[first["region"]] = "Invalid resource usage: 'machine type is not available to this project.'"
    with caplog.at_level(logging.WARNING, logger="skyhive.providers.fallback"):
        handles = anyio.run(fallback.launch, spec, [0])
    chosen = fallback.chosen
    assert chosen is not None and (chosen.name, chosen.describe()["region"]) == (second["cloud"], second["region"])
    assert len(handles) == 1
    (skipped,) = fallback.skipped
    assert skipped.startswith(f"gcp {first['region']}: refused: ") and "not available to this project" in skipped
    assert any(f"skipping gcp {first['region']}: refused" in r.getMessage() for r in caplog.records)
    anyio.run(fallback.down, "p-refused")
    assert gce.instances == {} and gce.firewalls == {} and arm.resources == {}


def test_credentials_refused_still_stop_the_search(clouds, tmp_path, monkeypatch):
    """A refusal of the caller (401/403), unlike a refusal of the offer, is no reason to try the next one."""
    from skyhive.errors import CloudAPIError
    from skyhive.providers.cloud.gcp import GCP

    provider = GCP(region="us-central1", timeouts=FAST)
    assert provider.refusal(CloudAPIError("badRequest", "no", 400), provider.classify(
        CloudAPIError("badRequest", "no", 400))).value == "refused"
    forbidden = CloudAPIError("forbidden", "Permission denied", 403)
    assert provider.refusal(forbidden, provider.classify(forbidden)).value == "fatal"


@pytest.mark.parametrize("spot", [False, True])
@pytest.mark.parametrize("gpus", ["H100:1", "L4:1", "A100:1", "V100:1"])
def test_the_ranking_holds_only_offers_that_can_be_bought(gpus, spot):
    ranked = offers.rank(gpus, offers.CLOUDS, spot=spot)
    assert ranked, gpus
    model = "spot" if spot else "on-demand"
    for offer in ranked:
        assert model in catalog.sold(offer.cloud, offer.instance_type), offer
        assert catalog.same_model(offer.accelerator, gpus.split(":")[0]) and offer.accelerators == 1
    machines = {(o.cloud, o.instance_type) for o in ranked}
    if gpus == "H100:1" and not spot:
        assert ("gcp", "a3-highgpu-1g") not in machines  # sold as spot or flex-start only
    if gpus == "H100:1" and spot:
        assert ("gcp", "a3-highgpu-1g") in machines
    if gpus == "V100:1":
        assert not any(t.endswith("_v3") for c, t in machines if c == "azure")  # NCv3: retired 2025-09-30


def test_one_meaning_of_each_accelerator_name_on_every_cloud():
    azure = catalog.choose("azure", "eastus", accelerator="A100")
    assert (azure.instance_type, azure.accelerators) == ("Standard_NC24ads_A100_v4", 1)  # not the 8-GPU ND96asr_v4
    assert catalog.choose("azure", "eastus", accelerator="A100-80GB:8").instance_type == "Standard_ND96amsr_A100_v4"
    assert catalog.choose("aws", "us-east-1", accelerator="A100-80GB:8").instance_type == "p4de.24xlarge"
    assert catalog.choose("aws", "us-east-1", accelerator="A100:8").instance_type == "p4d.24xlarge"
    assert catalog.choose("gcp", "us-central1", accelerator="A100-80GB:1").instance_type == "a2-ultragpu-1g"
    assert catalog.instance("aws", "p4de.24xlarge").accelerator == "A100-80GB"
    assert catalog.same_model("A100-80GB", "a100") and not catalog.same_model("A100", "A100-80GB")
    assert not catalog.same_model("H100-MEGA", "H100")


def test_spot_is_priced_at_the_dearest_zone_that_may_be_tried():
    """AWS's catalog prices spot per zone ID, and zone IDs name other letters in each account: every zone
    may be tried, so the rank uses the dearest zone's price (8xA100 in us-east-1: not the one $2.51 zone)."""
    import csv
    from pathlib import Path

    with (Path(__file__).parent / "catalogs" / "aws_gap.csv").open(newline="") as fh:
        spots = [float(r["SpotPrice"]) for r in csv.DictReader(fh)
                 if r["InstanceType"] == "p4d.24xlarge" and r["Region"] == "us-east-1" and r["SpotPrice"]]
    choice = catalog.choose("aws", "us-east-1", accelerator="A100:8", spot=True)
    assert choice.spot_price_per_hour == max(spots) and min(spots) < max(spots)
