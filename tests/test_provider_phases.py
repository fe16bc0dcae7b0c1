"""The runtime drives a provider phase by phase, per node: shown with `Staged`, an in-process test
provider (a fake cloud whose nodes are real local worker processes; see tests/providers/staged.py)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import read_log
from skyhive.runtime.nodes import registry
from tests.providers.staged import Broken, Staged, register_staged_transport

pytestmark = pytest.mark.anyio


def node_of():
    return sky.instance_info().node


def events(name: str) -> list:
    return list(read_log(Path(os.environ["SKYHIVE_HOME"]) / "pools" / f"{name}.jsonl"))


def states(evs: list, node: int) -> list[str]:
    return [e.state for e in evs if e.kind == "node_state" and e.node == node]


def progress(evs: list, node: int) -> list:
    return [e for e in evs if e.kind == "node_progress" and e.node == node]


FULL = ["requested", "provisioning", "running", "connecting", "bootstrapping", "ready", "draining",
        "terminating", "terminated"]


@pytest.fixture
def staged_kind():
    register_staged_transport()
    yield
    registry.unregister_transport("staged")


async def test_every_node_walks_the_phases_and_reports_the_providers_states():
    provider = Staged(late={1: 3})
    async with sky.Pool(provider=provider, nodes=2, name="phases") as pool:
        assert await pool.broadcast(node_of) == [0, 1]
    evs = events("phases")
    assert states(evs, 0) == FULL and states(evs, 1) == FULL
    # node 1 came up late: its provider's states are events, in order, before it ran
    assert [e.provider_state for e in progress(evs, 1)] == ["pending", "running"]
    ran = next(e.seq for e in evs if e.kind == "node_state" and e.node == 1 and e.state == "running")
    assert all(e.seq < ran for e in progress(evs, 1))
    # one launch for both nodes, then each node waited for, terminated on its own, then cleanup
    assert provider.calls[:2] == [("prepare", -1), ("launch", -1)]
    assert sorted(c for c in provider.calls if c[0] == "terminate") == [("terminate", 0), ("terminate", 1)]
    assert provider.calls[-1] == ("cleanup", -1) and provider.live == set()


async def test_each_node_is_told_to_its_provider_as_bootstrapped_once_before_it_turns_ready():
    """The hook a cloud lifts its boot-time limit by (Azure's auto-shutdown schedule): after the node's
    bootstrap, before `ready`; its failure fails the node, its transient errors are retried."""
    provider = Staged(transient={("bootstrapped", 1): 1})
    async with sky.Pool(provider=provider, nodes=2, name="lifted") as pool:
        assert await pool.broadcast(node_of) == [0, 1]
    assert provider.calls.count(("bootstrapped", 0)) == 1 and provider.calls.count(("bootstrapped", 1)) == 2
    assert all(provider.calls.index(("wait_running", n)) < provider.calls.index(("bootstrapped", n)) for n in (0, 1))
    assert states(events("lifted"), 0) == FULL and states(events("lifted"), 1) == FULL

    failing = Staged(fail={("bootstrapped", 1)})
    with pytest.raises(sky.ProvisionError, match="node 1: staged failure at bootstrapped"):
        async with sky.Pool(provider=failing, nodes=2, name="unlifted"):
            pass
    assert "ready" not in states(events("unlifted"), 1) and failing.live == set()


async def test_a_node_that_fails_while_starting_fails_the_pool_and_everything_is_terminated():
    provider = Staged(fail={("wait_running", 1)})
    with pytest.raises(sky.ProvisionError, match="node 1: staged failure at wait_running"):
        async with sky.Pool(provider=provider, nodes=2, name="fails"):
            pass
    evs = events("fails")
    assert "failed" in states(evs, 1) and states(evs, 1)[-1] == "terminated"
    assert states(evs, 0)[-1] == "terminated"
    assert provider.live == set() and provider.calls[-1] == ("cleanup", -1)
    assert evs[-1].kind == "pool_stopped" and "staged failure" in evs[-1].error


async def test_a_failed_launch_leaves_nothing_and_names_the_cause():
    provider = Staged(fail={("launch", -1)})
    with pytest.raises(sky.ProvisionError, match="staged failure at launch"):
        async with sky.Pool(provider=provider, nodes=2, name="nolaunch"):
            pass
    assert not any(c[0] == "wait_running" for c in provider.calls)
    assert ("cleanup", -1) in provider.calls and provider.live == set()
    assert set(states(events("nolaunch"), 0)) <= {"requested", "provisioning", "terminating", "terminated"}


async def test_transient_errors_are_retried_with_the_providers_backoff():
    provider = Staged(transient={("prepare", -1): 1, ("wait_running", 0): 2, ("terminate", 1): 1})
    async with sky.Pool(provider=provider, nodes=2, name="transient") as pool:
        assert await pool.broadcast(node_of) == [0, 1]
    assert provider.calls.count(("wait_running", 0)) == 3 and provider.calls.count(("prepare", -1)) == 2
    assert provider.calls.count(("terminate", 1)) == 2 and provider.live == set()
    retried = [e.detail for e in progress(events("transient"), 0) if "transient" in e.detail]
    assert len(retried) == 2 and "Throttled" in retried[0]


async def test_transient_errors_give_up_after_the_last_attempt():
    provider = Staged(transient={("wait_running", 0): 5})  # the policy allows 3 attempts
    with pytest.raises(Exception, match="throttled at wait_running") as err:
        async with sky.Pool(provider=provider, nodes=1, name="exhausted"):
            pass
    assert provider.calls.count(("wait_running", 0)) == 3
    del err


async def test_an_error_the_provider_does_not_call_transient_is_not_retried():
    provider = Staged(broken={("wait_running", 0)})
    with pytest.raises(Broken, match="broken at wait_running"):
        async with sky.Pool(provider=provider, nodes=1, name="broken"):
            pass
    assert provider.calls.count(("wait_running", 0)) == 1 and provider.live == set()


async def test_a_state_the_provider_maps_to_terminated_fails_the_node_naming_it():
    provider = Staged(final_state={0: "terminated"})
    with anyio.fail_after(30):
        with pytest.raises(sky.ProvisionError, match="node 0: the staged provider reports it 'terminated'"):
            async with sky.Pool(provider=provider, nodes=1, name="gone"):
                pass
    assert [e.provider_state for e in progress(events("gone"), 0)] == ["terminated"]


async def test_connecting_is_retried_while_a_fresh_node_refuses(staged_kind):
    provider = Staged(reach="staged", refuse_connects=2, connect_retry=30)
    async with sky.Pool(provider=provider, nodes=1, name="refuses") as pool:
        assert await pool.broadcast(node_of) == [0]
    refused = [e.detail for e in progress(events("refuses"), 0) if "connection refused" in e.detail]
    assert len(refused) == 2


async def test_connecting_is_not_retried_past_the_providers_bound(staged_kind):
    provider = Staged(reach="staged", refuse_connects=2, connect_retry=0)
    with pytest.raises(sky.ProvisionError, match="connection refused"):
        async with sky.Pool(provider=provider, nodes=1, name="bound"):
            pass
    assert states(events("bound"), 0)[-3:] == ["failed", "terminating", "terminated"]
    assert provider.live == set()


async def test_a_reach_kind_without_a_transport_fails_naming_the_kind():
    provider = Staged(reach="staged")  # the "staged" kind is not registered in this test
    with pytest.raises(sky.ProvisionError, match="no transport is registered for reach kind 'staged'"):
        async with sky.Pool(provider=provider, nodes=1, name="nokind"):
            pass
    assert provider.live == set()


async def test_a_launch_that_returns_the_wrong_nodes_is_refused_and_what_it_made_terminated():
    class Miscounting(Staged):
        async def launch(self, spec, nodes):
            return (await super().launch(spec, nodes))[:1]  # one node for two asked

    provider = Miscounting()
    with pytest.raises(sky.ProvisionError, match=r"launched nodes \[0\], asked for 2"):
        async with sky.Pool(provider=provider, nodes=2, name="miscount"):
            pass
    # the node it returned is terminated at once; the one it kept quiet about is found by list_owned
    assert ("terminate", 0) in provider.calls and ("list_owned", -1) in provider.calls
    assert provider.live == set()


def test_a_built_in_kind_is_found_through_its_entry_point_when_first_needed():
    """The built-in kinds are declared as entry points (pyproject.toml), as another package's are: the
    registry loads only the one a node needs, and declaring "ssh" does not import asyncssh."""
    import subprocess
    import sys

    code = ("import sys; from skyhive.runtime.nodes import registry as r; from skyhive.providers.base import *; "
            "before = sorted(r._KINDS); "
            "h = NodeHandle(node=0, provider_id='x', private_addr='h', reach=SSHReach(host='h')); "
            "print(before, r.transport_kind(h).kind, sorted(r._KINDS), 'asyncssh' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "ssh", "['ssh']", "False"]
