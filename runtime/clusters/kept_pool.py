"""A kept pool: its record with behaviour (`KeptPool`). What the record holds of the pool's nodes is the
business of the kind that keeps them (its `KeepSupport`, `runtime/nodes/keep.py`) and of the pool's machines
when they were made to order (`cloud.py`); everything else — the commands, the dashboard, autostop — asks
a `KeptPool`: where its nodes are, which workers live, how node N is reached (`access`), how the pool is
stopped, started again over the same nodes, and taken down.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from ...providers.base import Provider
from ..nodes.keep import KeepSupport, NodeAccess, keep_support, keep_support_of
from . import cloud
from . import record as records
from .record import ClusterRecord

__all__ = ["KeptPool"]

log = logging.getLogger("skyhive.clusters")


class KeptPool:
    """The kept pool of the record `rec` (see the module docstring)."""

    def __init__(self, rec: ClusterRecord) -> None:
        self.rec = rec

    @classmethod
    def load(cls, name: str) -> KeptPool:
        """The kept pool `name`; raises `PoolNotFound` naming it (and the pools there are)."""
        return cls(records.load(name))

    def __repr__(self) -> str:
        return f"<KeptPool {self.rec.name} kept by {self.rec.keeper!r}>"

    @property
    def name(self) -> str:
        return self.rec.name

    @functools.cached_property
    def support(self) -> KeepSupport:
        """The keep support of the kind that keeps the pool. Raises `ProvisionError` naming the pool and the
        kind when that kind is not installed here."""
        return keep_support_of(self.rec)

    # ---- where its nodes are ------------------------------------------------------------------------

    @property
    def here(self) -> bool:
        """Whether the pool's nodes are this machine (the keeping kind's `same_machine`); a kind not
        installed here: whether the record names no socket directory elsewhere (`cluster`)."""
        try:
            support = keep_support(self.rec.keeper)
        except Exception:  # noqa: BLE001 - a kind whose package is broken: the record's own word
            support = None
        return support.same_machine if support is not None else not self.rec.cluster

    @property
    def machines(self) -> list[str]:
        """The ids of the pool's machines made to order (what `down` terminates); [] on fixed machines."""
        return cloud.instance_ids(self.rec)

    @property
    def machines_stopped(self) -> bool:
        """Whether the pool's machines are stopped (nothing of it runs on them: nobody to ask there)."""
        return bool(self.machines and self.rec.stopped)

    def where(self) -> str:
        """Where the pool runs, for `skyhive status`: its machines' ids, its hosts, or "local"."""
        if self.machines:
            return f"{self.rec.provider}:{','.join(self.machines)}"
        if self.here:
            return "local"
        hosts = [str(h) for h in list(self.rec.provider_info.get("hosts", ()))[: self.rec.nodes]]
        if hosts:
            return ",".join(hosts)
        try:
            return ",".join(self.access(n).describe() for n in range(self.rec.nodes))
        except Exception:  # noqa: BLE001 - a kind that cannot say: its name
            return f"{self.rec.keeper} nodes"

    # ---- reaching a node ------------------------------------------------------------------------------

    def check_node(self, node: int) -> None:
        if not 0 <= node < self.rec.nodes:
            raise ValueError(f"pool {self.rec.name!r} has nodes 0..{self.rec.nodes - 1}: there is no node {node}")

    def access(self, node: int) -> NodeAccess:
        """How node `node` is reached (`skyhive ssh`, `forward`, `ssh-config`): the keeping kind's word.
        Raises `ValueError` for a node the pool does not have, `ProvisionError` naming the pool and the
        kind when the kind declares no access."""
        self.check_node(node)
        return self.support.access(self.rec, node)

    def ssh_entries(self) -> list[str]:
        """The `Host` lines of each node that speaks SSH (`NodeAccess.ssh_config`), in node order; [] for a
        pool none of whose nodes does (or whose kind declares no access)."""
        from ...errors import ProvisionError

        out = []
        for node in range(self.rec.nodes):
            try:
                lines = self.access(node).ssh_config()
            except (ProvisionError, ValueError):
                return []
            if lines:
                out.append(lines)
        return out

    # ---- its workers -----------------------------------------------------------------------------------

    def live(self) -> tuple[list[Any], list[str], bool]:
        """(the workers still serving, the nodes that could not be asked and why, whether the pool's own
        autostop stopped it on its nodes), asked where they run; none while its machines are stopped."""
        if not self.rec.workers or self.machines_stopped:
            return [], [], False
        return self.support.live(self.rec)

    def attach_provider(self, *, check: bool = True, nodes: int | None = None) -> Provider:
        return self.support.attach_provider(self.rec, nodes=nodes, check=check)

    def plan_provider(self) -> Provider:
        """The provider a job of the pool is planned for (its SKYPILOT_CLUSTER_INFO, node checks): its
        machines' provider (no cloud call), else the one that reaches its nodes."""
        if self.machines:
            return cloud.machines_provider(self.rec)
        return self.attach_provider(check=False)

    # ---- stop, start, down -----------------------------------------------------------------------------

    def can_stop_machines(self) -> bool:
        return bool(self.machines) and cloud.can_stop(self.rec)

    def stoppable(self, provider: Provider | None = None) -> Provider | None:
        """The provider that stops the pool's machines (None for a pool on fixed machines); `ValueError`
        naming the pool when its machines cannot be stopped and started again."""
        return cloud.stoppable(self.rec, provider) if self.machines else None

    def stop_machines(self, provider: Provider | None = None) -> bool:
        """Stop the pool's machines (disks kept) and wait for it; False (nothing done) on fixed machines or
        where the provider cannot."""
        return bool(self.machines) and cloud.stop_instances(self.rec, provider)

    def machine_states(self) -> dict[str, str] | None:
        return cloud.instance_states(self.rec) if self.machines else None

    def set_autostop_shutdown(self, down: bool) -> None:
        """What an OS shutdown of the pool's machines does now that its autostop is `down` or not."""
        if self.machines:
            cloud.shutdown_behavior(self.rec, "terminate" if down else "stop")

    def relaunch_provider(self, provider: Provider | None = None) -> tuple[Provider, str]:
        """The provider that creates the stopped pool again over the same nodes (`skyhive start`), and what
        was done to get there (a line for the user, "" for nothing): its machines started again (the same
        ids), or the nodes as the keeping kind finds them again. `provider` replaces the one rebuilt from
        the record (tests)."""
        if self.machines:
            resumed = cloud.start_instances(self.rec, provider)
            return resumed, f"instances {', '.join(self.machines)} running again"
        return provider or self.support.relaunch_provider(self.rec), ""

    def terminate_machines(self, *, why: str = "") -> list[str]:
        """Terminate the pool's machines made to order (by id), once the provider confirms: the ids; []
        on fixed machines. `TeardownIncomplete` keeps the record, marked leaking."""
        return cloud.terminate_instances(self.rec, why=why) if self.machines else []
