"""What AWS adds for a named pool's access and pauses: its instances stopped (EBS disks kept, billed for
storage only) and started again with the same ids (`Feature.STOP`), and the pool's `ports` opened
on its security group for the client's address only (`Feature.OPEN_PORTS`); the rules go with the
group when the pool is cleaned up.

EC2 API reference: StopInstances / StartInstances (`InstanceId.N`), DescribeInstances (state names
`pending`, `running`, `stopping`, `stopped`, `shutting-down`, `terminated`), AuthorizeSecurityGroupIngress
(`IpPermissions.N.IpProtocol/FromPort/ToPort/IpRanges.M.CidrIp`). An instance created with
`InstanceInitiatedShutdownBehavior=terminate` (skyhive's default: a shutdown from inside ends its
billing) still stops through the API: that behaviour applies to a shutdown from the OS only. A kept
pool whose autostop stops it (not `--down`) has its instances made with `stop` instead
(`shutdown_behavior`, ModifyInstanceAttribute when the autostop changes): the watchdog on an instance,
which has no cloud credentials, stops it by shutting its OS down, and EBS stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio

from ...errors import CloudAPIError
from ..base import ProvisionError

__all__ = ["EC2Access"]

log = logging.getLogger("skyhive.providers.aws")


class EC2Access:
    """Mixin of `AWS` (it uses the provider's `driver`, `call`, `timeouts`, `_owned_groups`, `network`)."""

    def _instances_sync(self, action: str, ids: Sequence[str]) -> None:
        params = {"Action": action}
        for i, instance in enumerate(ids, 1):
            params[f"InstanceId.{i}"] = instance
        self.driver.request(params)  # type: ignore[attr-defined]

    def _states_sync(self, ids: Sequence[str]) -> dict[str, str]:
        params = {"Action": "DescribeInstances"}
        for i, instance in enumerate(ids, 1):
            params[f"InstanceId.{i}"] = instance
        body = self.driver.request(params)  # type: ignore[attr-defined]
        states: dict[str, str] = {}
        for item in body.iter():
            if not item.tag.endswith("}item"):
                continue
            iid = next((c.text for c in item if c.tag.endswith("}instanceId")), None)
            state = next((c for c in item if c.tag.endswith("}instanceState")), None)
            if iid and state is not None:
                name = next((c.text for c in state if c.tag.endswith("}name")), None)
                states[iid] = str(name)
        return states

    async def _wait_for(self, ids: Sequence[str], want: str) -> None:
        timeouts: Any = self.timeouts  # type: ignore[attr-defined]
        deadline = time.monotonic() + timeouts.running
        while True:
            states = await self.call(self._states_sync, list(ids))  # type: ignore[attr-defined]
            if all(states.get(i) == want for i in ids):
                return
            gone = [i for i in ids if states.get(i) in ("shutting-down", "terminated")]
            if gone:
                raise ProvisionError(f"aws: instances {', '.join(gone)} were terminated (wanted {want})", kind="fatal")
            if time.monotonic() > deadline:
                raise ProvisionError(f"aws: instances not {want} after {timeouts.running:.0f} s: "
                                     + ", ".join(f"{i} {states.get(i, 'not listed')}" for i in ids), kind="fatal")
            await anyio.sleep(timeouts.poll)

    async def stop_nodes(self, ids: Sequence[str]) -> None:
        """Stop the instances `ids` (their disks kept) and wait until each is `stopped`."""
        await self.call(self._instances_sync, "StopInstances", list(ids))  # type: ignore[attr-defined]
        await self._wait_for(ids, "stopped")
        log.info("aws: instances %s stopped", ", ".join(ids))

    async def start_nodes(self, ids: Sequence[str]) -> None:
        """Start the stopped instances `ids` again and wait until each is `running`."""
        await self.call(self._instances_sync, "StartInstances", list(ids))  # type: ignore[attr-defined]
        await self._wait_for(ids, "running")
        log.info("aws: instances %s started", ", ".join(ids))

    async def node_states(self, ids: Sequence[str]) -> dict[str, str]:
        """DescribeInstances' state name of each of `ids` (an instance EC2 no longer lists is left out)."""
        return await self.call(self._states_sync, list(ids))  # type: ignore[attr-defined]

    def _shutdown_sync(self, ids: Sequence[str], behavior: str) -> None:
        for instance in ids:  # ModifyInstanceAttribute takes one instance and one attribute per call (its
            # `Attribute`/`Value` form: moto does not read the `InstanceInitiatedShutdownBehavior.Value` one)
            self.driver.request({"Action": "ModifyInstanceAttribute", "InstanceId": instance,  # type: ignore[attr-defined]
                                 "Attribute": "instanceInitiatedShutdownBehavior", "Value": behavior})

    async def set_shutdown_behavior(self, ids: Sequence[str], behavior: str) -> None:
        """Set `InstanceInitiatedShutdownBehavior` ("stop" or "terminate") of the instances `ids`: what an
        OS shutdown from inside does (a running instance may be changed)."""
        if behavior not in ("stop", "terminate"):
            raise ValueError(f"aws: shutdown behaviour {behavior!r}: 'stop' or 'terminate'")
        await self.call(self._shutdown_sync, list(ids), behavior)  # type: ignore[attr-defined]
        log.info("aws: instances %s %s on shutdown", ", ".join(ids), behavior)

    def _open_ports_sync(self, pool_id: str, ports: Sequence[tuple[int, int]]) -> list[str]:
        groups = self._owned_groups(pool_id)  # type: ignore[attr-defined]
        if not groups:
            raise ProvisionError(f"aws: pool {pool_id} has no security group to open ports on", kind="fatal")
        cidr = self.network.ssh_cidr()  # type: ignore[attr-defined]
        for lo, hi in ports:  # one call per range: a rule the group has already fails alone (below)
            params = {"Action": "AuthorizeSecurityGroupIngress", "GroupId": groups[0],
                      "IpPermissions.1.IpProtocol": "tcp", "IpPermissions.1.FromPort": str(lo),
                      "IpPermissions.1.ToPort": str(hi), "IpPermissions.1.IpRanges.1.CidrIp": cidr}
            try:
                self.driver.request(params)  # type: ignore[attr-defined]
            except CloudAPIError as exc:
                if exc.code != "InvalidPermission.Duplicate":  # EC2: "the specified rule already exists"
                    raise
                log.info("aws: pool %s: %s-%s/tcp from %s was open already", pool_id, lo, hi, cidr)
        return [f"{lo}-{hi}/tcp from {cidr}" if lo != hi else f"{lo}/tcp from {cidr}" for lo, hi in ports]

    async def open_ports(self, pool_id: str, ports: Sequence[tuple[int, int]]) -> list[str]:
        """Open `ports` (tcp ranges) on the pool's security group to the client's address only; the rules
        open, as text (a rule the group has already is kept: `skyhive start` of a stopped pool opens its
        ports again). They go with the group at cleanup."""
        if not ports:
            return []
        return await self.call(self._open_ports_sync, pool_id, list(ports))  # type: ignore[attr-defined]
