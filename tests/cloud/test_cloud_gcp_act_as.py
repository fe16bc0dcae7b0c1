"""A GCP user without ``iam.serviceAccounts.actAs`` on the default compute service account (issue 38, after
point 6 made every instance carry a service account): GCE refuses an insert that attaches an account its
caller may not act as (FakeGCE rule G21, in both shapes real answers show: the call's 400 ``badRequest``, or
the insert operation's ``SERVICE_ACCOUNT_ACCESS_DENIED``). With the default account the pool still comes up:
the refused insert is sent once more without the account, the pool's later inserts go without it from the
start, one warning says what that costs and how to grant the permission; its nodes then only stop themselves
(`gcp_end`'s script falls back to a shutdown when the metadata server has no token). An account the user
named by its email is never dropped: the pool fails, naming the permission, and nothing is left."""

from __future__ import annotations

import logging
import subprocess

import anyio
import pytest

from skyhive.providers.base import ClusterSpec, ProvisionError, RetryPolicy
from skyhive.providers.cloud import gcp_end
from skyhive.providers.cloud.base import CloudTimeouts
from skyhive.providers.cloud.gcp import GCP
from skyhive.providers.fallback import Fallback
from tests.cloud.fake_gce_node import GCENode

pytestmark = [pytest.mark.loopback_only]

FAST = CloudTimeouts(poll=0.01, running=30, terminate=30, cleanup=30, visibility_grace=1)
ACT_AS = "iam.serviceAccounts.actAs"
NODES = 3


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and ACT_AS in r.getMessage()]


@pytest.mark.parametrize("answer", ["insert", "operation"])
def test_a_default_pool_without_act_as_comes_up_without_the_account_and_says_so_once(gce, caplog, tmp_path, answer):
    gce.caller_permissions.discard(ACT_AS)  # a Compute Instance Admin without roles/iam.serviceAccountUser
    gce.act_as_answer = answer
    provider = GCP(region="us-east1", timeouts=FAST)
    with caplog.at_level(logging.WARNING, logger="skyhive.providers.cloud.gcp"):
        handles = anyio.run(provider.create, ClusterSpec(pool_id="p-noact", nodes=NODES))
    assert sorted(h.node for h in handles) == list(range(NODES))
    assert all(h.state == "running" and h.public_addr for h in handles)  # the next stage is `connecting`
    first, *rest = gce.inserts
    assert first["serviceAccounts"] == [{"email": "default", "scopes": [gcp_end.SCOPE]}]  # tried with it once
    assert [b["name"] for b in rest] == [f"skyhive-p-noact-{i}" for i in range(NODES)]  # node 0 again, then 1, 2
    assert all("serviceAccounts" not in b for b in rest)  # no refusal repeated for the pool's later nodes
    assert all(i["serviceAccounts"] == [] for i in gce.instances.values()) and len(gce.instances) == NODES
    assert gce.peak == NODES
    (warning,) = _warnings(caplog)
    assert "p-noact" in warning and "proj-1" in warning and "roles/iam.serviceAccountUser" in warning
    assert "stop" in warning and "skyhive down p-noact" in warning  # what it costs, and the way out
    # the nodes' reach is unchanged: the idle watchdog runs the self-end script, which has no token here
    assert all(h.reach.shutdown_command == gcp_end.SHUTDOWN_COMMAND for h in handles)
    script = tmp_path / "skyhive-end"
    script.write_text(gcp_end.end_script())
    (bin_dir := tmp_path / "bin").mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "shutdown").write_text(f'#!/bin/sh\nprintf "%s\\n" "shutdown $*" >> "{calls}"\n')
    (bin_dir / "shutdown").chmod(0o755)
    zone, name = handles[0].provider_id.split("/")
    with GCENode(gce, zone, name) as node:
        done = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=120,
                              env={"PATH": f"{bin_dir}:/usr/bin:/bin", **node.env})
    assert done.returncode == 0 and "no service account token" in done.stderr, done.stderr
    assert calls.read_text().splitlines() == ["shutdown -h now skyhive: this node ends itself"]  # a stop
    assert not any(p.startswith("DELETE") for p in node.seen)
    anyio.run(provider.down, "p-noact")
    assert gce.instances == {} and gce.firewalls == {}


def test_the_pool_s_next_launch_goes_without_the_account_and_warns_no_more(gce, caplog):
    """A node added later (a replacement, a grown pool) is created without the account straight away."""
    gce.caller_permissions.discard(ACT_AS)
    provider = GCP(region="us-east1", timeouts=FAST)
    spec = ClusterSpec(pool_id="p-noact-more", nodes=1)
    with caplog.at_level(logging.WARNING, logger="skyhive.providers.cloud.gcp"):
        anyio.run(provider.create, spec)
        assert len(gce.inserts) == 2
        anyio.run(provider.launch, spec, [1])
    assert "serviceAccounts" not in gce.inserts[-1] and len(gce.inserts) == 3
    assert len(_warnings(caplog)) == 1
    anyio.run(provider.down, "p-noact-more")
    assert gce.instances == {} and gce.firewalls == {}


@pytest.mark.parametrize("answer", ["insert", "operation"])
def test_a_named_account_without_act_as_fails_naming_the_permission_and_leaves_nothing(gce, caplog, answer):
    gce.caller_permissions.discard(ACT_AS)
    gce.act_as_answer = answer
    named = "nodes@proj-1.iam.gserviceaccount.com"
    provider = GCP(region="us-east1", timeouts=FAST, service_account=named)
    with pytest.raises(ProvisionError) as caught:
        anyio.run(provider.create, ClusterSpec(pool_id="p-noact-named", nodes=2))
    err = caught.value
    assert err.kind == "fatal" and err.code == "SERVICE_ACCOUNT_ACCESS_DENIED"
    assert ACT_AS in str(err) and named in str(err) and "roles/iam.serviceAccountUser" in str(err)
    assert "us-east1-b" in str(err) and "us-east1-c" not in err.zones_tried  # fatal: no other zone tried
    assert [b["serviceAccounts"][0]["email"] for b in gce.inserts] == [named]  # never sent without it
    assert _warnings(caplog) == []
    assert gce.instances == {} and gce.firewalls == {}


def test_a_cross_cloud_search_keeps_the_offer_of_a_user_without_act_as(gce):
    """The refusal is a 400, which the search would take as a refusal of the offer and skip it: with the
    default account the first offer is used all the same."""
    gce.caller_permissions.discard(ACT_AS)
    first, second = GCP(region="us-east1", timeouts=FAST), GCP(region="us-west1", timeouts=FAST)
    for provider in (first, second):
        provider.retry = RetryPolicy(attempts=2, initial_delay=0.01)
    search = Fallback([first, second])
    handles = anyio.run(search.create, ClusterSpec(pool_id="p-noact-fb", nodes=1))
    assert search.chosen is first and search.skipped == []
    assert handles[0].extra["zone"].startswith("us-east1-")
    anyio.run(search.down, "p-noact-fb")
    assert gce.instances == {} and gce.firewalls == {}


def test_with_act_as_the_default_account_is_attached_as_before(gce, caplog):
    provider = GCP(region="us-east1", timeouts=FAST)  # the fake's default caller: an Owner/Editor
    with caplog.at_level(logging.WARNING, logger="skyhive.providers.cloud.gcp"):
        anyio.run(provider.create, ClusterSpec(pool_id="p-act", nodes=2))
    assert [b["serviceAccounts"] for b in gce.inserts] == [[{"email": "default", "scopes": [gcp_end.SCOPE]}]] * 2
    assert _warnings(caplog) == [] and gce.refused == []
    anyio.run(provider.down, "p-act")
    assert gce.instances == {} and gce.firewalls == {}


@pytest.mark.parametrize("fault", [(403, "rateLimitExceeded", False), (503, "backendError", True)],
                         ids=["rate-limited", "5xx-but-created"])
def test_the_insert_resent_without_the_account_stays_idempotent(gce, fault):
    """The resend is retried like any insert: a rate limit retries that call alone; a 5xx whose instance was
    made anyway is found again by its name, never created twice."""
    gce.caller_permissions.discard(ACT_AS)
    gce.insert_faults[2] = fault  # insert #1 is refused for the account, #2 is its resend
    provider = GCP(region="us-east1", timeouts=FAST)
    provider.retry = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.05)
    handles = anyio.run(provider.create, ClusterSpec(pool_id="p-noact-idem", nodes=NODES))
    assert sorted(h.node for h in handles) == list(range(NODES)) and all(h.state == "running" for h in handles)
    assert gce.peak <= NODES and len(gce.instances) == NODES
    assert all(i["serviceAccounts"] == [] for i in gce.instances.values())
    assert len(gce.inserts) == 1 + NODES + (0 if fault[2] else 1)  # the refused one, then one per node
    assert "alreadyExists" not in " ".join(gce.refused)
    anyio.run(provider.down, "p-noact-idem")
    assert gce.instances == {} and gce.firewalls == {}
