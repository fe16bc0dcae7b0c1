"""The cheapest GPU across clouds: `skyhive launch --gpus A100:8` with no provider ranks the offers of every
cloud whose credentials are found; `Pool(provider=[...], order="price")` tries the cheapest first and walks
down on capacity. Launches go through the FAKE clouds (tests/cloud/fake_gce.py, tests/cloud/fake_arm.py)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from skyhive.cli import main
from skyhive.providers.base import ClusterSpec
from skyhive.providers.cloud import offers
from skyhive.providers.cloud.azure import Azure
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.gcp import GCP
from skyhive.providers.fallback import Fallback
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_gce import FakeGCE
from tests.cloud.fake_http import install_fakes

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=10, terminate=10, cleanup=10)
CLOUD_ENV = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "GOOGLE_APPLICATION_CREDENTIALS",
             "AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET",
             "DIGITALOCEAN_ACCESS_TOKEN", "GOOGLE_CLOUD_PROJECT")


@pytest.fixture
def no_clouds(monkeypatch, tmp_path):
    """No cloud credentials at all: an empty home, no cloud variables."""
    for name in CLOUD_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "home" / "gcloud"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_credentials_are_found_per_cloud(no_clouds, monkeypatch):
    assert offers.credentials() == {"aws": None, "gcp": None, "azure": None, "digitalocean": None}
    aws = no_clouds / "home" / ".aws"
    aws.mkdir(parents=True)
    (aws / "credentials").write_text("[default]\naws_access_key_id = x\n")
    gcloud = no_clouds / "home" / "gcloud"
    gcloud.mkdir()
    FakeGCE().user_file(gcloud / "application_default_credentials.json")
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", "t")
    found = offers.credentials()
    assert found["aws"].endswith(".aws/credentials") and found["gcp"].endswith("application_default_credentials.json")
    assert found["digitalocean"] == "DIGITALOCEAN_ACCESS_TOKEN" and found["azure"] is None


def test_a_dry_run_ranks_aws_and_gcp_offers_by_price(no_clouds, monkeypatch, capsys):
    (no_clouds / "t.yaml").write_text("run: nvidia-smi\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    FakeGCE().service_account_file(no_clouds / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(no_clouds / "sa.json"))
    assert main(["launch", "t.yaml", "--gpus", "A100:8", "--dryrun"]) == 0
    out = capsys.readouterr().out
    assert "offers across clouds, cheapest first" in out and "nothing was created" in out
    start = out.index("#   CLOUD")
    rows = [line.split() for line in out[start:].splitlines()[1:] if line.startswith("    ") and line.split()[0].isdigit()]
    clouds = {r[1] for r in rows}
    assert clouds == {"aws", "gcp"}  # no Azure or DigitalOcean credentials: not ranked
    prices = [float(r[4].lstrip("$")) for r in rows]
    assert prices == sorted(prices) and len(rows) > 4
    assert {(r[1], r[3]) for r in rows} >= {("aws", "p4d.24xlarge"), ("gcp", "a2-highgpu-8g")}
    first = rows[0]
    assert f"machines: 1 x {first[3]} in {first[2]}" in out


def test_a_cloud_chosen_by_price_is_never_launched_without_a_terminal_or_yes(no_clouds, monkeypatch, capsys):
    """No provider named, credentials found, no terminal (CI, a pipe), no -y: refused before anything is made."""
    (no_clouds / "t.yaml").write_text("run: nvidia-smi\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setattr("sys.stdin", open(os.devnull))  # not a terminal
    assert main(["launch", "t.yaml", "--gpus", "A100:8"]) == 2
    err = capsys.readouterr().err
    assert "no provider was named" in err and "-y" in err and "--provider" in err
    assert not list(Path(os.environ["SKYHIVE_HOME"]).rglob("*.jsonl"))  # no pool log: nothing was created


def test_without_credentials_a_gpu_task_stays_local(no_clouds):
    from skyhive.providers.local import Local
    from skyhive.runtime.commands.resources import provider_for
    from skyhive.runtime.commands.taskfile import load

    (no_clouds / "g.yaml").write_text("resources:\n  accelerators: L4:2\nrun: echo hi\n")
    assert isinstance(provider_for(load(str(no_clouds / "g.yaml"))), Local)


def test_order_price_tries_the_cheapest_first_and_walks_down_on_capacity(no_clouds, monkeypatch):
    from libcloud.compute.drivers.azure_arm import AzureNodeDriver

    gce, arm = FakeGCE(), FakeARM("99999999")
    install_fakes(monkeypatch, gce, arm)
    gce.service_account_file(no_clouds / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(no_clouds / "sa.json"))
    azure = Azure(region="eastus", timeouts=FAST)
    azure._driver = AzureNodeDriver("77777777-7777-7777-7777-777777777777", "99999999",
                                    "55555555-5555-5555-5555-555555555555", "p4ssw0rd", region="eastus")
    gcp = GCP(region="us-central1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-cheap", nodes=1, accelerator="A100-80GB:1")
    fallback = Fallback([azure, gcp], order="price")  # Azure given first; GCP's a2-ultragpu-1g is cheaper
    plan = fallback.plan(spec)
    assert [c["cloud"] for c in plan["candidates"]] == ["gcp", "azure"]
    assert plan["candidates"][0]["price_per_hour"] < plan["candidates"][1]["price_per_hour"]
    gce.exhausted |= {"us-central1-a", "us-central1-c"}  # every zone that offers it is full
    handles = anyio.run(fallback.launch, spec, [0])
    assert fallback.chosen is azure and handles[0].provider_id == "p-cheap/node-0"
    assert len(fallback.skipped) == 1 and fallback.skipped[0].startswith("gcp us-central1: capacity")
    assert gce.instances == {} and gce.firewalls == {}  # the skipped cloud left nothing
    anyio.run(fallback.down, "p-cheap")
    assert arm.resources == {}


def test_the_pool_takes_order_and_skywards_selection():
    from skyhive import Pool

    pool = Pool(provider=[GCP(project="p"), Azure()], order="price")
    assert isinstance(pool.provider, Fallback) and pool.provider.order == "price"
    assert Pool(provider=[GCP(project="p"), Azure()], selection="cheapest").provider.order == "price"
    assert Pool(provider=[GCP(project="p"), Azure()]).provider.order == "given"
    with pytest.raises(ValueError, match="Fallback\\(order='fastest'\\)"):
        Pool(provider=[GCP(project="p")], order="fastest")


def test_check_says_which_clouds_have_credentials(no_clouds, monkeypatch, capsys):
    monkeypatch.setenv("DIGITALOCEAN_ACCESS_TOKEN", "t")
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "digitalocean:\n  credentials: found: DIGITALOCEAN_ACCESS_TOKEN" in out and "gcp:\n  credentials: none found" in out
    assert "ranks offers of: digitalocean" in out
