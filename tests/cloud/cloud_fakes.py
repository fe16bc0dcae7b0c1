"""Test-only stand-ins around the real AWS provider (moto answers every call); each says what it fakes.

- `LocalMappedAWS`: a real `sky.AWS` whose instances (in moto, with invented addresses) are each
  mapped to a local worker process, so a pool runs end to end without connecting to any moto address.
- `HostMappedAWS`: the same, each instance mapped to one of the tests' own sshd hosts (namespaces).
- `StagedLocalAWS`: `LocalMappedAWS` whose nodes are reached through a test-only reach kind
  ("staged-local": the local transport and bootstrap) that also awaits its `on_stage` hook at
  "connecting" and "bootstrapping", so a test can act exactly as a node enters those stages.
- `FaultInjectingFakeDriver`: wraps the real libcloud driver and raises chosen EC2 errors (capacity,
  quota, throttling) that moto cannot produce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from typing import ClassVar

from skyhive.errors import CloudAPIError
from skyhive.providers.base import ClusterSpec, LocalReach, NodeHandle, Reach
from skyhive.providers.cloud.aws import AWS
from skyhive.runtime.kinds.local.transport import LocalTransport
from skyhive.runtime.nodes.registry import register_transport


class LocalMappedAWS(AWS):
    """FAKE reach: a real AWS provider (moto) whose running nodes are reached as local workers.

    `on_stage(stage)` is awaited at "requested" (before `prepare`), "prepared" (key pair and security
    group made, no instance), "launch" (before any instance exists), "launched" (instances exist, not
    yet running), "running" (a node runs) and "terminate" (teardown began)."""

    def __init__(self, *args: Any, on_stage: Callable[[str], Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_stage = on_stage
        self.stages: list[str] = []

    async def _stage(self, stage: str) -> None:
        self.stages.append(stage)
        if self.on_stage is not None:
            await self.on_stage(stage)

    async def prepare(self, spec: ClusterSpec) -> None:
        await self._stage("requested")
        await super().prepare(spec)
        await self._stage("prepared")

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        await self._stage("launch")
        handles = await super().launch(spec, nodes)
        await self._stage("launched")
        return handles

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        running = await super().wait_running(handle, report)
        await self._stage("running")
        return self.map_node(running)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        await self._stage("terminate")
        await super().terminate(handles)

    def map_node(self, handle: NodeHandle) -> NodeHandle:
        """The handle as the runtime sees it: here, a local worker instead of moto's invented address."""
        return dataclasses.replace(handle, reach=LocalReach(), private_addr="127.0.0.1", public_addr=None)


class HostMappedAWS(LocalMappedAWS):
    """FAKE reach: a real AWS provider (moto) whose node i is reached as the test's own SSH host i
    (`hosts`: (address, user) pairs; `key`, `known_hosts`: the test client's) — moto's addresses are
    replaced before anything connects."""

    def __init__(self, *args: Any, hosts: Sequence[tuple[str, str]], key: str, known_hosts: str,
                 ready_command: str | None = None, boot_limit_off: str = "true", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hosts, self.key, self.known_hosts = list(hosts), key, known_hosts
        self.ready_command = ready_command  # instead of AWS's (cloud-init is not on the test hosts)
        # instead of AWS's `sudo -n shutdown -c`: the test hosts are no booted machines with a scheduled shutdown
        self.boot_limit_off = boot_limit_off

    def map_node(self, handle: NodeHandle) -> NodeHandle:
        address, user = self.hosts[handle.node]
        reach = dataclasses.replace(handle.reach, host=address, user=user, key=self.key, known_hosts=self.known_hosts,
                                    boot_limit_off=self.boot_limit_off)
        if self.ready_command is not None:
            reach = dataclasses.replace(reach, ready_command=self.ready_command)
        return dataclasses.replace(handle, reach=reach, private_addr=address, public_addr=None)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StagedReach(Reach):
    """FAKE reach kind "staged-local": a local node whose connect and bootstrap first await the stage
    hook of the `StagedLocalAWS` that made it (found by pool id)."""

    kind: ClassVar[str] = "staged-local"
    pool_id: str


_STAGED: dict[str, StagedLocalAWS] = {}


class StagedLocalAWS(LocalMappedAWS):
    """FAKE reach: `LocalMappedAWS` whose nodes also report "connecting" and "bootstrapping" to `on_stage`."""

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        _STAGED[spec.pool_id] = self
        return await super().launch(spec, nodes)

    def map_node(self, handle: NodeHandle) -> NodeHandle:
        return dataclasses.replace(handle, reach=StagedReach(pool_id=handle.extra["pool_id"]),
                                   private_addr="127.0.0.1", public_addr=None)


class _StagedTransport(LocalTransport):
    def __init__(self, provider: StagedLocalAWS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.provider = provider

    async def connect(self) -> None:
        await self.provider._stage("connecting")
        await super().connect()


def _staged_transport(handle: NodeHandle, ctx: Any) -> _StagedTransport:
    return _StagedTransport(_STAGED[handle.reach.pool_id], redact=ctx.log.redact)


async def _staged_bootstrap(ctx: Any, node: int, transport: _StagedTransport) -> Any:
    from skyhive.runtime.bootstrap.node import bootstrap_node

    await transport.provider._stage("bootstrapping")
    return await bootstrap_node(ctx, node, transport)


register_transport("staged-local", _staged_transport, bootstrap=_staged_bootstrap)


#: the HTTP status EC2 answers an error code with (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html:
#: client errors 400, AuthFailure 401, UnauthorizedOperation 403, server errors 500); others: 400
EC2_STATUS = {"AuthFailure": 401, "UnauthorizedOperation": 403, "InternalError": 500}


class FaultInjectingFakeDriver:
    """FAKE: the real libcloud EC2 driver (talking to moto) with injected errors on `run_instances` (one
    RunInstances call per zone attempt, for every node still missing).

    `faults` maps a zone name (or "*") to a list of EC2 error codes, one per call in that zone: a code
    is raised instead of creating, None lets that call through to moto; past the list, all go through.
    For EC2's own error bodies over HTTP, see `tests.infra.ec2_fault_proxy.FakeEC2FaultProxy`."""

    def __init__(self, driver: Any, faults: dict[str, list[str | None]] | None = None, *, invisible_for: int = 0,
                 on_create: Callable[[], None] | None = None) -> None:
        self._driver = driver
        self.faults = {zone: list(codes) for zone, codes in (faults or {}).items()}
        self.create_calls: list[str] = []
        self.create_counts: list[int] = []  # MaxCount of each call
        # eventual consistency, as EC2 has it: a new instance is missing from the next `invisible_for`
        # listings, and terminating it meanwhile answers InvalidInstanceID.NotFound
        self.invisible_for = invisible_for
        self._hidden: dict[str, int] = {}
        self.on_create = on_create  # called (in the worker thread) before each create goes through
        self.terminate_calls: list[str] = []

    def list_instances(self, *args: Any, **kwargs: Any) -> Any:
        nodes = [n for n in self._driver.list_instances(*args, **kwargs) if self._hidden.get(n.id, 0) <= 0]
        for node_id in self._hidden:
            self._hidden[node_id] -= 1
        return nodes

    def destroy_node(self, node: Any) -> Any:
        self.terminate_calls.append(node.id)
        if self._hidden.get(node.id, 0) > 0:
            raise CloudAPIError("InvalidInstanceID.NotFound", f"The instance ID '{node.id}' does not exist", 400)
        return self._driver.destroy_node(node)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def run_instances(self, params: dict[str, str]) -> Any:
        subnet = params["NetworkInterface.1.SubnetId"]
        zone = self._driver.ex_list_subnets(subnet_ids=[subnet])[0].extra["zone"]
        self.create_calls.append(zone)
        self.create_counts.append(int(params["MaxCount"]))
        for key in (zone, "*"):
            if self.faults.get(key):
                code = self.faults[key].pop(0)
                if code is not None:
                    raise CloudAPIError(code, f"injected by the test in {zone}", EC2_STATUS.get(code, 400))
                break
        if self.on_create is not None:
            self.on_create()
        nodes = self._driver.run_instances(params)
        if self.invisible_for:
            for node in nodes:
                self._hidden[node.id] = self.invisible_for
        return nodes


async def cancel_now(scope: anyio.CancelScope) -> None:
    """Cancel `scope` and reach a checkpoint, so the cancellation lands here."""
    scope.cancel()
    await anyio.sleep(0)
