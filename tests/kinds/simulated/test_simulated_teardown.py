"""Tearing down a Simulated pool in bulk: no task per node, one `terminate` for every node, each
node's failure still recorded on its own node when the bulk call fails, nothing left."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import anyio
import pytest

import skyhive as sky
from skyhive.providers.base import NodeHandle, ProvisionError


def _one() -> int:
    return 1


class _RecordingSimulated(sky.Simulated):
    """The real Simulated provider, recording each `terminate` call's nodes; `refuse` makes every
    call that includes one of those nodes fail (an injected failure)."""

    def __init__(self, refuse: Sequence[int] = ()) -> None:
        super().__init__()
        self.calls: list[list[int]] = []
        self.refuse = set(refuse)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        nodes = [h.node for h in handles]
        self.calls.append(nodes)
        if self.refuse & set(nodes):
            raise ProvisionError(f"injected: node(s) {sorted(self.refuse & set(nodes))} refuse to go", node=nodes[0])
        await super().terminate(handles)


def test_one_terminate_call_for_every_node_and_nothing_left() -> None:
    provider = _RecordingSimulated()

    async def main() -> None:
        async with sky.Pool(provider=provider, nodes=500) as pool:
            assert await pool.broadcast(_one) == [1] * 500
        assert provider.calls == [list(range(500))]
        assert all(not nodes for nodes in provider.live.values())
        state = pool.state
        assert state.status == "stopped" and state.error == ""
        assert {n.state for n in state.nodes} == {"terminated"}
        assert {w.state for n in state.nodes for w in n.workers} == {"stopped"}  # each shut down cleanly

    anyio.run(main)


def test_a_failed_bulk_terminate_goes_node_by_node_and_names_the_failed_node() -> None:
    provider = _RecordingSimulated(refuse=[7])

    async def main() -> None:
        with pytest.raises(sky.TeardownIncomplete) as err:
            async with sky.Pool(provider=provider, nodes=20) as pool:
                assert await pool.broadcast(_one) == [1] * 20
        assert provider.calls[0] == list(range(20))  # the bulk call (and its retries) first
        assert [7] in provider.calls and [3] in provider.calls  # then each node on its own
        assert provider.live[pool.id] == {7}  # what could be terminated was
        state = pool.state
        assert "terminate node 7 failed" in state.error and "injected" in state.error
        # not confirmed gone, so not terminated: the pool is leaking, and the caller is told which node
        node7 = state.nodes[7]
        assert node7.state == "terminating" and "injected" in node7.detail
        assert state.status == "leaking" and state.leaked == (node7.provider_id,)
        assert err.value.leaked == (node7.provider_id,) and node7.provider_id in str(err.value)
        assert all(n.detail == "" and n.state == "terminated" for i, n in enumerate(state.nodes) if i != 7)

    anyio.run(main)


def test_teardown_starts_no_task_per_node() -> None:
    async def tasks_in_teardown(nodes: int) -> int:
        loop = asyncio.get_running_loop()
        created = 0

        def counting(loop: asyncio.AbstractEventLoop, coro, **kwargs) -> asyncio.Task:
            nonlocal created
            created += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        pool = sky.Pool(provider=sky.Simulated(), nodes=nodes)
        await pool.__aenter__()
        assert await pool.broadcast(_one) == [1] * nodes
        loop.set_task_factory(counting)
        try:
            await pool.__aexit__(None, None, None)
        finally:
            loop.set_task_factory(None)
        assert pool.state.status == "stopped"
        return created

    async def main() -> None:
        assert await tasks_in_teardown(300) == await tasks_in_teardown(3)

    anyio.run(main)


class _RefusingSimulated(_RecordingSimulated):
    """`_RecordingSimulated` that also fails node 1 while the pool starts (Simulated's `fail`)."""

    def __init__(self, refuse: Sequence[int]) -> None:
        super().__init__(refuse)
        self.fail = {1: "bootstrapping"}


def test_a_start_that_fails_and_a_teardown_that_fails_name_both_in_the_error() -> None:
    # the start fails (node 1's bootstrap), the teardown after it cannot terminate node 0: the caller
    # learns of the leak first, the start's failure with it (as its cause and in the message)
    provider = _RefusingSimulated(refuse=[0])

    async def main() -> None:
        pool = sky.Pool(provider=provider, nodes=2)
        with pytest.raises(sky.TeardownIncomplete) as err:
            async with pool:
                raise AssertionError("the pool started")
        state = pool.state
        assert state.status == "leaking" and state.leaked == (state.nodes[0].provider_id,)
        assert state.nodes[0].state == "terminating" and state.nodes[1].state == "terminated"
        assert isinstance(err.value.__cause__, sky.ProvisionError)
        assert "node 1" in str(err.value.__cause__)
        assert state.nodes[0].provider_id in str(err.value) and "node(s) [0] refuse to go" in str(err.value)

    anyio.run(main)
