"""SkyPilot's `--infra` and `resources.infra` spellings, turned into a provider and its options.

    local                      this machine (Local)
    aws  |  aws/us-east-1  |  aws/us-east-1/us-east-1a  |  aws/*/us-east-1a   a cloud, its region, its zone
    ssh/POOL                   the hosts of SSH Node Pool POOL in ~/.sky/ssh_node_pools.yaml (SkyPilot's file:
                               `POOL: {hosts: [HOST | {ip: HOST, user: U, identity_file: K}], user: U,
                               identity_file: K}`); `ssh` alone takes the hosts from --hosts
    slurm  |  slurm/LOGIN  |  slurm/LOGIN/PARTITION   this machine's Slurm, or the one reached by logging in
                               to LOGIN (a host or ~/.ssh/config alias), in that partition

`parse_infra(text)` gives an `Infra`; a name it cannot use is a `ValueError` saying what it expects
(the task file and the option name where it came from are added by the caller).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from ...providers.base import ProvisionError
from ...providers.registry import canonical

__all__ = ["Infra", "parse_infra", "ssh_node_pool", "SSH_NODE_POOLS"]

#: SkyPilot's file of SSH Node Pools (read where `--infra ssh/POOL` names one).
SSH_NODE_POOLS = "~/.sky/ssh_node_pools.yaml"


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
    except ProvisionError as exc:
        raise ValueError(str(exc)) from None
    if provider == "ssh":
        if not rest:
            return Infra(provider)
        if len(rest) != 1 or not rest[0]:
            raise ValueError(f"{text!r}: expected ssh/POOL, one SSH Node Pool name")
        return ssh_node_pool(rest[0], pools_file=pools_file)
    if provider == "slurm":
        if len(rest) > 2 or any(not part for part in rest):
            raise ValueError(f"{text!r}: expected slurm, slurm/LOGIN or slurm/LOGIN/PARTITION")
        options = [("login", rest[0])] if rest and rest[0] != "*" else []
        if len(rest) == 2:
            options.append(("partition", rest[1]))
        return Infra(provider, options=tuple(options))
    if provider == "local":
        if rest:
            raise ValueError(f"{text!r}: local has no regions or zones (this machine is the one node)")
        return Infra(provider)
    if len(rest) > 2:
        raise ValueError(f"{text!r}: expected {head}, {head}/REGION or {head}/REGION/ZONE")
    region = rest[0] if rest and rest[0] not in ("", "*") else None
    zone = rest[1] if len(rest) == 2 and rest[1] else None
    return Infra(provider, region=region, zone=zone)


def ssh_node_pool(name: str, *, pools_file: str | None = None) -> Infra:
    """SSH Node Pool `name` from SkyPilot's `~/.sky/ssh_node_pools.yaml` as SSH hosts (head first) and
    the pool's user and key. A missing file or pool, a password, or hosts with different keys is a
    `ValueError` naming the file and the pool."""
    path = os.path.expanduser(pools_file or SSH_NODE_POOLS)
    try:
        with open(path, encoding="utf-8") as fh:
            pools = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        raise ValueError(f"ssh/{name}: no SSH Node Pools file {path} (SkyPilot's format: `{name}: {{hosts: "
                         f"[HOST, ...]}}`), or pass the hosts with --hosts") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"ssh/{name}: cannot read {path}: {exc}") from None
    if not isinstance(pools, dict) or name not in pools:
        known = ", ".join(sorted(map(str, pools))) if isinstance(pools, dict) and pools else "none"
        raise ValueError(f"ssh/{name}: {path} has no pool {name!r} (it has: {known})")
    pool = pools[name]
    if not isinstance(pool, dict) or not isinstance(pool.get("hosts"), list) or not pool["hosts"]:
        raise ValueError(f"ssh/{name}: {path}: pool {name!r} needs a non-empty `hosts` list")
    user, key = pool.get("user"), pool.get("identity_file")
    hosts: list[str] = []
    for entry in pool["hosts"]:
        if isinstance(entry, dict):
            if "password" in entry or "password" in pool:
                raise ValueError(f"ssh/{name}: {path}: passwords are not supported; skyhive logs in with keys")
            host = entry.get("ip")
            if not isinstance(host, str) or not host:
                raise ValueError(f"ssh/{name}: {path}: a host entry needs `ip`, got {entry!r}")
            if entry.get("identity_file") not in (None, key):
                if key is not None or len(pool["hosts"]) > 1:
                    raise ValueError(f"ssh/{name}: {path}: hosts with different identity files are not "
                                     f"supported (one key per pool)")
                key = entry["identity_file"]
            host_user = entry.get("user") or user
            hosts.append(f"{host_user}@{host}" if host_user else host)
        elif isinstance(entry, str) and entry:
            hosts.append(f"{user}@{entry}" if user and "@" not in entry else entry)
        else:
            raise ValueError(f"ssh/{name}: {path}: expected a host name or a mapping, got {entry!r}")
    options = (("key", os.path.expanduser(str(key))),) if key else ()
    return Infra("ssh", hosts=tuple(hosts), options=options)
