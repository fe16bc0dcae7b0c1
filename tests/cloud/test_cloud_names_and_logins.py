"""Names every cloud accepts and credentials people have (issue 38, point 5): pools named after a task
(`train_gpt2-1a2b3c`) or with a dot (`exp.1`) come up on FakeDO (droplet names follow hostname rules, tags
their own: D6, D7); `sky.Azure()` works with only an Azure CLI login (a FAKE `az` on PATH answering
`az account get-access-token`, as the real one does from its token cache); the cross-cloud search counts
an AWS user whose only credentials are an SSO profile in ~/.aws/config."""

from __future__ import annotations

import json
import os
import sys

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud import offers
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.digitalocean import DigitalOcean
from tests.cloud.fake_arm import FakeARM
from tests.cloud.fake_do import FakeDO
from tests.cloud.fake_http import install_fakes
from tests.cloud.test_cloud_cheapest import CLOUD_ENV

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=10, terminate=10, cleanup=10, visibility_grace=1)
SUB = "99999999-0000-0000-0000-000000000000"


@pytest.fixture
def no_clouds(monkeypatch, tmp_path):
    for name in (*CLOUD_ENV, "AWS_CONFIG_FILE", "AZURE_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(home / "gcloud"))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.mark.parametrize("pool", ["train_gpt2-1a2b3c", "exp.1"])
def test_pools_named_after_a_task_or_with_a_dot_come_up_on_digitalocean(monkeypatch, pool):
    from libcloud.compute.drivers.digitalocean import DigitalOceanNodeDriver

    fake = FakeDO()
    install_fakes(monkeypatch, fake)
    provider = DigitalOcean(ssh_cidr="192.0.2.1/32", timeouts=FAST)
    provider._driver = DigitalOceanNodeDriver(fake.token, api_version="v2")
    handles = anyio.run(provider.create, ClusterSpec(pool_id=pool, nodes=2))
    assert sorted(h.node for h in handles) == [0, 1] and fake.refused == []
    names = sorted(d["name"] for d in fake.droplets.values())
    tags = {t for d in fake.droplets.values() for t in d["tags"]}
    if pool == "exp.1":  # a droplet name may hold the dot; a tag may not
        assert names == ["skyhive-exp.1-0", "skyhive-exp.1-1"]
        (pool_tag,) = [t for t in tags if t.startswith("skyhive-pool:")]
        assert pool_tag.startswith("skyhive-pool:exp-1-") and "." not in pool_tag
    else:  # a tag may hold the underscore; a droplet name may not
        assert "skyhive-pool:train_gpt2-1a2b3c" in tags
        assert all(n.startswith("skyhive-train-gpt2-1a2b3c-") and "_" not in n for n in names)
    assert [h.node for h in anyio.run(provider.list_owned, pool)] == [0, 1]
    anyio.run(provider.down, pool)
    assert fake.droplets == {} and fake.firewalls == {} and fake.keys == {}


def test_spellings_of_two_pools_never_collide():
    assert DigitalOcean.tags("exp.1") != DigitalOcean.tags("exp-1")
    assert DigitalOcean.droplet_name("a_b", 0) != DigitalOcean.droplet_name("a-b", 0)
    assert DigitalOcean.tags("p-do") == ["skyhive-pool:p-do"]  # a name that fits is kept as it is


def _fake_az(bin_dir, token: str, *, fail: bool = False) -> None:
    """A FAKE `az` on PATH: answers `az account get-access-token --resource <ARM> --output json` as the real
    CLI does from its token cache (accessToken, expiresOn, expires_on, subscription, tenant, tokenType)."""
    bin_dir.mkdir(exist_ok=True)
    answer = {"accessToken": token, "expiresOn": "2099-01-01 00:00:00.000000", "expires_on": 4070908800,
              "subscription": SUB, "tenant": "77777777-7777-7777-7777-777777777777", "tokenType": "Bearer"}
    script = bin_dir / "az"
    script.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
if {fail!r}:
    sys.stderr.write("ERROR: Please run 'az login' to setup account.\\n"); sys.exit(1)
if args[:2] != ["account", "get-access-token"] or "--resource" not in args:
    sys.stderr.write("FAKE az: unexpected arguments %r\\n" % args); sys.exit(2)
assert args[args.index("--resource") + 1] == "https://management.azure.com/", args
print(json.dumps({json.dumps(answer)}))
""")
    script.chmod(0o755)


def test_azure_works_with_only_an_azure_cli_login(no_clouds, monkeypatch, tmp_path):
    from skyhive.providers.cloud.azure import Azure

    arm = FakeARM(SUB)
    install_fakes(monkeypatch, arm)
    arm.tokens.add("cli-token-1")  # what the CLI's cache holds for this login
    arm.caller_role = "Owner"  # the login owns its subscription: the VM's role assignment is not refused
    _fake_az(tmp_path / "bin", "cli-token-1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (no_clouds / ".azure").mkdir()
    (no_clouds / ".azure" / "azureProfile.json").write_text(json.dumps({"subscriptions": [{"id": SUB}]}))
    assert "Azure CLI" in offers.credentials()["azure"]
    provider = Azure(region="eastus", ssh_cidr="192.0.2.1/32", timeouts=FAST)
    (handle,) = anyio.run(provider.create, ClusterSpec(pool_id="p-cli", nodes=1))
    assert handle.state == "running" and arm.refused == []
    assert all(f"/subscriptions/{SUB}/" in path for _, path, _, _ in arm.requests)
    anyio.run(provider.down, "p-cli")
    assert arm.resources == {}


def test_azure_without_any_credentials_says_what_was_tried(no_clouds, monkeypatch, tmp_path):
    from skyhive.providers.cloud.azure import Azure

    install_fakes(monkeypatch)  # no fake answers: the managed-identity endpoint is refused in process
    _fake_az(tmp_path / "bin", "unused", fail=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ProvisionError, match=r"no credentials: .*run `az login`; tried: the Azure CLI .*az login.*"
                                             r"a managed identity") as err:
        _ = Azure().driver
    assert err.value.kind == "fatal"
    assert offers.credentials()["azure"] is None  # no CLI profile: not counted


def test_launch_gpus_counts_an_sso_only_aws_profile(no_clouds, capsys):
    from skyhive.cli import main

    (no_clouds / ".aws").mkdir()
    (no_clouds / ".aws" / "config").write_text(
        "[default]\nsso_session = corp\nsso_account_id = 111122223333\nsso_role_name = ml\nregion = us-east-1\n\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\nsso_region = us-east-1\n")
    assert offers.credentials()["aws"].endswith(".aws/config [default]")
    (no_clouds.parent / "t.yaml").write_text("run: nvidia-smi\n")
    assert main(["launch", "t.yaml", "--gpus", "A100:8", "--dryrun"]) == 0
    out = capsys.readouterr().out
    assert "offers across clouds, cheapest first" in out
    rows = [line.split() for line in out[out.index("#   CLOUD"):].splitlines()[1:]
            if line.startswith("    ") and line.split()[0].isdigit()]
    assert {r[1] for r in rows} == {"aws"}


@pytest.mark.parametrize("pool", ["train_gpt2-1a2b3c", "exp.", "A" + "b" * 62])
def test_gcp_names_fit_gces_rules_and_keep_the_original(monkeypatch, tmp_path, pool):
    from skyhive.providers.cloud.gcp import GCP
    from tests.cloud.fake_gce import NAME, FakeGCE

    gce = FakeGCE(project="proj-1")
    install_fakes(monkeypatch, gce)
    gce.service_account_file(tmp_path / "sa.json")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
    provider = GCP(region="us-east1", timeouts=FAST)
    handles = anyio.run(provider.create, ClusterSpec(pool_id=pool, nodes=2))
    assert len(handles) == 2 and gce.refused == []
    for body in gce.inserts:
        assert NAME.match(body["name"]) and len(body["name"]) <= 63
        meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
        assert meta["skyhive-pool-name"] == pool
    anyio.run(provider.down, pool)
    assert gce.instances == {} and gce.firewalls == {}
