"""AWS credentials through botocore's standard chain, against moto_server in the loopback-only namespace:
profiles in ~/.aws files of a temporary HOME with no AWS_* variables; and a pool with no credentials at
all, which must fail naming every place looked, with no cleanup warning and no cost claimed."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.providers.base import ClusterSpec, ProvisionError
from skyhive.providers.cloud.aws import AWS
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.runtime.events import inventory
from tests.infra.fake_service_quotas import FakeServiceQuotas
from tests.infra.moto_ec2 import NOTHING_LEFT, leftovers

pytestmark = [pytest.mark.loopback_only, pytest.mark.anyio]

FAST = CloudTimeouts(poll=0.05, running=30, terminate=30, cleanup=30, visibility_grace=2)
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
            "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")


@pytest.fixture
def bare_home(tmp_path, monkeypatch) -> Path:
    """A HOME of its own and no AWS_* variable (the instance-metadata lookup off: nothing to ask here)."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return home


def provider(moto, **kw) -> AWS:
    return AWS(region="us-east-1", instance_type="t3.micro", image=moto.image, ssh_cidr="192.0.2.1/32",
               endpoint=moto.endpoint, timeouts=FAST, **kw)


async def test_a_profile_from_the_shared_credentials_file_is_used(moto_server, bare_home):
    (bare_home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = d\n"
        "[work]\naws_access_key_id = AKIAWORKPROFILE\naws_secret_access_key = w\n")
    aws = provider(moto_server, profile="work")
    handles = await aws.create(ClusterSpec(pool_id="p-prof", nodes=1))
    assert len(handles) == 1 and aws.driver.key == "AKIAWORKPROFILE"
    assert "AKIAWORKPROFILE" not in repr(aws.describe()) and aws.describe()["profile"] == "work"
    await aws.down("p-prof")
    assert leftovers(moto_server.endpoint) == NOTHING_LEFT


async def test_aws_profile_selects_a_profile_of_the_config_file(moto_server, bare_home, monkeypatch):
    (bare_home / ".aws" / "config").write_text(
        "[profile team]\naws_access_key_id = AKIATEAMCONFIG\naws_secret_access_key = t\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_PROFILE", "team")
    aws = provider(moto_server)
    await aws.create(ClusterSpec(pool_id="p-cfg", nodes=1))
    assert aws.driver.key == "AKIATEAMCONFIG"
    await aws.down("p-cfg")
    monkeypatch.delenv("AWS_PROFILE")  # the checking client (boto3, moto's dummy keys) has no such profile
    assert leftovers(moto_server.endpoint) == NOTHING_LEFT


async def test_an_unknown_profile_names_both_files(moto_server, bare_home):
    with pytest.raises(ProvisionError, match=r"profile 'nope' is in neither .*/\.aws/credentials nor .*/\.aws/config"):
        await provider(moto_server, profile="nope").create(ClusterSpec(pool_id="p-noprof", nodes=1))
    assert leftovers(moto_server.endpoint) == NOTHING_LEFT


async def test_a_pool_without_credentials_names_every_place_and_claims_nothing(moto_server, bare_home, caplog,
                                                                              skyhive_home):
    aws = provider(moto_server)
    caplog.set_level(logging.WARNING)
    with pytest.raises(ProvisionError) as err:
        async with sky.Pool(provider=aws, nodes=2, name="p-nocreds"):
            pass
    text = str(err.value)
    assert "no credentials found" in text
    for place in ("AWS_ACCESS_KEY_ID", f"{bare_home}/.aws/credentials", f"{bare_home}/.aws/config",
                  "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS", "instance role", "profile="):
        assert place in text, place
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [w for w in warnings if "clean" in w.lower()], warnings  # nothing made: nothing to clean up
    (entry,) = [e for e in inventory.scan(include_stopped=True) if e.pool_id == "p-nocreds"]
    assert entry.cost(time.time()) is None  # no instance ever ran: no cost
    assert leftovers(moto_server.endpoint) == NOTHING_LEFT


def test_check_says_where_credentials_were_found_and_reads_the_quota(moto_server, bare_home, monkeypatch):
    from skyhive.runtime.commands.check import check

    monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", moto_server.endpoint)
    (aws_line,) = [s for item, s in check(("aws",))["aws"] if item == "credentials"]
    assert aws_line.startswith("NOT FOUND") and f"{bare_home}/.aws/credentials" in aws_line
    (bare_home / ".aws" / "credentials").write_text("[default]\naws_access_key_id = AKIACHECK\n"
                                                    "aws_secret_access_key = c\n")
    lines = dict(check(("aws",))["aws"])
    assert lines["credentials"] == "found (shared-credentials-file; key AKIA…)"
    # moto serves Service Quotas for `vpc` only: for EC2 the line says so, naming the error, never a number
    assert lines["vCPU quota us-east-1 L-417A185B"].startswith("could not be read (NoSuchResourceException")
    # the fake Service Quotas (moto has none for EC2) with the account's values: read, named, per code
    with FakeServiceQuotas({"L-417A185B": 0, "L-DB2E81BA": 8, "L-1216C47A": 640}) as quotas:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", quotas.endpoint)
        lines = dict(check(("aws",))["aws"])
        assert lines["vCPU quota us-east-1 L-417A185B"] == "Running On-Demand P instances (L-417A185B): 0 vCPUs"
        assert lines["vCPU quota us-east-1 L-DB2E81BA"] == "Running On-Demand G and VT instances (L-DB2E81BA): 8 vCPUs"
        assert lines["vCPU quota us-east-1 L-1216C47A"].endswith("(L-1216C47A): 640 vCPUs")
        assert quotas.asked == [("us-east-1", c) for c in ("L-417A185B", "L-DB2E81BA", "L-1216C47A")]
        quotas.deny = True  # a policy without servicequotas:GetServiceQuota: said, credentials still found
        lines = dict(check(("aws",))["aws"])
        assert lines["vCPU quota us-east-1 L-417A185B"].startswith("could not be read (AccessDeniedException")
        assert lines["credentials"].startswith("found")


def test_the_fake_service_quotas_refuses_what_the_api_refuses(monkeypatch):
    """FakeServiceQuotas' own rules (Service Quotas API reference, GetServiceQuota), through botocore."""
    import botocore.session
    import requests

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    with FakeServiceQuotas({"L-417A185B": 96}) as quotas:
        client = botocore.session.Session().create_client("service-quotas", region_name="eu-west-1",
                                                          endpoint_url=quotas.endpoint)
        assert client.get_service_quota(ServiceCode="ec2", QuotaCode="L-417A185B")["Quota"]["Value"] == 96
        for service, quota, code in (("ec2", "L-DB2E81BA", "NoSuchResourceException"),  # not held
                                     ("vpc", "L-417A185B", "NoSuchResourceException"),
                                     ("ec2", "1-bad", "IllegalArgumentException")):  # pattern [a-zA-Z]...
            with pytest.raises(client.exceptions.ClientError) as err:
                client.get_service_quota(ServiceCode=service, QuotaCode=quota)
            assert err.value.response["Error"]["Code"] == code
        assert quotas.asked == [("eu-west-1", "L-417A185B")]
        unsigned = requests.post(quotas.endpoint + "/", data="{}", headers={
            "X-Amz-Target": "ServiceQuotasV20190624.GetServiceQuota", "Content-Type": "application/x-amz-json-1.1"})
        assert unsigned.status_code == 403 and unsigned.json()["__type"] == "MissingAuthenticationTokenException"
        other = requests.post(quotas.endpoint + "/", data="{}", headers={
            "X-Amz-Target": "ServiceQuotasV20190624.RequestServiceQuotaIncrease"})
        assert other.status_code == 400 and other.json()["__type"] == "UnknownOperationException"


def test_the_profile_option_reaches_the_chain_and_the_pools_record(tmp_path, bare_home, monkeypatch, capsys):
    from skyhive.cli import main

    (bare_home / ".aws" / "credentials").write_text("[work]\naws_access_key_id = AKIAWORK\naws_secret_access_key = w\n")
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_PROFILE", "")  # restored after the test; --profile sets it for the command
    assert main(["launch", "t.yaml", "--cloud", "aws", "--gpus", "T4", "--profile", "work", "--dryrun"]) == 0
    import os

    assert os.environ["AWS_PROFILE"] == "work"
    assert AWS().describe()["profile"] == "work"
    assert AWS().driver.key == "AKIAWORK"  # no call made: the driver only holds the key


async def test_a_pool_outlives_credentials_that_expire(fake_ec2_proxy, bare_home, tmp_path):
    """A `credential_process` profile whose keys change: each call is signed with the keys of its moment.
    Keys about to expire (inside botocore's refresh window) are replaced before the next call, with no
    call refused; keys that AWS refuses as expired (ExpiredToken, by the fake proxy) are renewed through
    the chain and the call retried once; the pool ends cleanly with the newest keys."""
    import json
    import sys
    from datetime import datetime, timedelta, timezone

    moto = fake_ec2_proxy
    state = tmp_path / "issued.json"
    script = tmp_path / "issue.py"
    script.write_text(f"import sys\nsys.stdout.write(open({str(state)!r}).read())\n")

    def issue(key: str, minutes: float) -> None:
        expiry = (datetime.now(timezone.utc) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
        state.write_text(json.dumps({"Version": 1, "AccessKeyId": key, "SecretAccessKey": f"secret-{key}",
                                     "SessionToken": f"token-{key}", "Expiration": expiry}))

    (bare_home / ".aws" / "config").write_text(f"[profile rolling]\ncredential_process = {sys.executable} {script}\n")
    issue("ASIAFIRST", 8)  # expires in 8 minutes: botocore refreshes before every use (its 10-minute window)
    aws = provider(moto, profile="rolling")
    await aws.create(ClusterSpec(pool_id="p-roll", nodes=1))
    proxy = moto.proxy
    assert set(proxy.keys) == {"ASIAFIRST"}
    issue("ASIASECOND", 60)  # the process now hands out new keys, valid for an hour
    mark = len(proxy.keys)
    assert len(await aws.call(aws.list_sync, "p-roll")) == 1
    # the next calls (DescribeInstances, libcloud's DescribeAddresses) already signed with the new keys,
    # none refused
    assert proxy.keys[mark:] and set(proxy.keys[mark:]) == {"ASIASECOND"}
    proxy.expired.add("ASIASECOND")  # AWS says they expired (a revoked session, a skewed clock)
    issue("ASIATHIRD", 60)
    mark = len(proxy.keys)
    assert len(await aws.call(aws.list_sync, "p-roll")) == 1
    # refused once, renewed, retried; then the new keys only
    assert proxy.keys[mark:mark + 2] == ["ASIASECOND", "ASIATHIRD"] and set(proxy.keys[mark + 1:]) == {"ASIATHIRD"}
    assert [a for a, _ in proxy.calls[mark:mark + 2]] == ["DescribeInstances", "DescribeInstances"]
    mark = len(proxy.keys)
    await aws.down("p-roll")
    assert proxy.keys[mark:] and set(proxy.keys[mark:]) == {"ASIATHIRD"}
    assert "ASIA" not in repr(aws.describe()) and "secret-" not in repr(aws.driver.connection.credentials)
    assert leftovers(moto.upstream, proxy=proxy) == NOTHING_LEFT
