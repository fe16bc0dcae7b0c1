"""SkyPilot's `--infra` and `resources.infra` spellings, turned into a provider and its options.

    local                      this machine (Local)
    aws  |  aws/us-east-1  |  aws/us-east-1/us-east-1a  |  aws/*/us-east-1a   a cloud, its region, its zone
    ssh/POOL                   the hosts of SSH Node Pool POOL in ~/.sky/ssh_node_pools.yaml (SkyPilot's file:
                               `POOL: {hosts: [HOST | {ip: HOST, user: U, identity_file: K}], user: U,
                               identity_file: K}`); `ssh` alone takes the hosts from --hosts
    k8s  |  kubernetes  |  k8s/CONTEXT                the kubeconfig's current context (or CONTEXT): pods
    slurm  |  slurm/LOGIN  |  slurm/LOGIN/PARTITION   this machine's Slurm, or the one reached by logging in
                               to LOGIN (a host or ~/.ssh/config alias), in that partition

`parse_infra(text)` gives an `Infra`; a name it cannot use is a `ValueError` saying what it expects
(the task file and the option name where it came from are added by the caller).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...providers.base import ProvisionError
from ...providers.registry import canonical, provider_class
from ...providers.ssh_config import SSH_NODE_POOLS, ssh_node_pool

__all__ = ["Infra", "parse_infra", "ssh_node_pool", "SSH_NODE_POOLS"]


@dataclass(frozen=True, slots=True)
class Infra:
    """Where a task runs: the provider's registry name, a cloud's region and zone, SSH hosts, and the
    provider's own options (`Slurm(login=, partition=)`, `SSH(user=, key=)`)."""

    provider: str
    region: str | None = None
    zone: str | None = None
    hosts: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = field(default=())


def parse_infra(text: str, *, pools_file: str | None = None) -> Infra:
    """`text` as SkyPilot's `--infra` (see the module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected an infra like local, aws/us-east-1 or ssh/POOL, got {text!r}")
    head, *rest = text.strip().split("/")
    try:
        provider = canonical(head)
        cls = provider_class(provider)
    except ProvisionError as exc:
        raise ValueError(str(exc)) from None
    said = cls.infra(text.strip(), rest, ssh_node_pools=pools_file)  # each provider reads its own spelling
    return Infra(provider, region=said.get("region"), zone=said.get("zone"), hosts=tuple(said.get("hosts") or ()),
                 options=tuple(said.get("options") or ()))
