"""A named pool's generated SSH files: its config and known_hosts (what `skyhive ssh`, `ssh NAME`, `scp`,
`rsync` and editors' remote-SSH use to reach its nodes).

    <state dir>/ssh/                      0700
        NAME.config                       0600: `Host NAME` (node 0), `Host NAME-worker1`, ... (one per node)
        NAME.known_hosts                  0600: the host key each node showed when the pool was created
        NAME.hosts                        0600: the same keys by address, for the SSH provider of `skyhive start`

Each entry names the node's address, port and user, the pool's key (`IdentitiesOnly`), and pins the
recorded host key: `UserKnownHostsFile` is the pool's file only, `GlobalKnownHostsFile /dev/null`,
`StrictHostKeyChecking yes`, and `HostKeyAlias` the entry's name (so the key is found whatever the
address and port, and a changed key is refused, never learnt). The files are written whenever the
pool's record is saved and removed with it (`record.save`, `record.remove`); `skyhive ssh` writes them
again from the record before each login. `sshconfig.py` adds the one `Include` line to `~/.ssh/config`
that makes `ssh NAME` find them. (The record module imports this one: the record is taken as the
`KeptRecord` protocol of `nodes/keep.py`, named `PoolRecord` here.) They are the SSH kind's keep support's (`keep_access.py` runs `ssh -F` with
them): a record whose `provider_info` names no hosts (a pool on this machine, another kind's) has none.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....paths import private_dir, state_dir
from ...nodes.keep import KeptRecord as PoolRecord  # (what the SSH files are made from: a pool's record)
from ...nodes.keep import node_name

__all__ = ["PoolRecord", "NodeAddress", "alias", "node_addresses", "config_path", "known_hosts_path", "config_text",
           "known_hosts_text", "write_config", "host_block", "remove_config", "hosts_path"]

log = logging.getLogger("skyhive.clusters")


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """How node `node` of a pool on SSH or cloud nodes is reached: its SSH alias, login and pinned key."""

    node: int
    alias: str
    user: str
    host: str
    port: int
    host_key: str  # "ssh-ed25519 AAAA...", "" when none was recorded
    identity_file: str = ""  # the host's own key (its ~/.ssh/config IdentityFile, resolved at creation)
    proxy_jump: str = ""  # `user@address:port` of its jump host (its ProxyJump), "" when none


def alias(name: str, node: int) -> str:
    """The SSH alias of a pool's node: its name (`node_name`: the pool's name for the head, `NAME-workerN`
    for node N)."""
    return node_name(name, node)


def node_addresses(rec: PoolRecord) -> list[NodeAddress]:
    """The nodes of the pool `rec` as SSH sees them, in node order; [] for a pool whose nodes are not on
    other hosts (Local)."""
    import getpass

    from ....providers.ssh import parse_host

    hosts = list(rec.provider_info.get("hosts", ()))[: rec.nodes]
    options = list(rec.provider_info.get("host_options") or ())  # (IdentityFile, ProxyJump) per host
    out = []
    for node, spec in enumerate(hosts):
        user, host, port = parse_host(str(spec))
        own_key, jump = options[node] if node < len(options) else (None, None)
        out.append(NodeAddress(node=node, alias=alias(rec.name, node), user=user or getpass.getuser(), host=host,
                               port=port, host_key=rec.host_keys.get(str(node), ""), identity_file=own_key or "",
                               proxy_jump=jump or ""))
    return out


def config_path(name: str) -> Path:
    """The pool's generated SSH config (see the module docstring)."""
    return state_dir() / "ssh" / f"{name}.config"


def known_hosts_path(name: str) -> Path:
    """The pool's generated known_hosts: the pinned host key of each node, under its alias."""
    return state_dir() / "ssh" / f"{name}.known_hosts"


def hosts_path(name: str) -> Path:
    """The pool's pinned host keys by address (`[host]:port KEY`): the known_hosts file of the plain SSH
    provider that `skyhive start` brings the pool back with (`commands/pause.py`); removed with the rest."""
    return state_dir() / "ssh" / f"{name}.hosts"


def _quote(value: str) -> str:
    """A value in ssh_config: quoted when it holds a space (ssh_config's quoting is double quotes)."""
    if any(c in value for c in '"\n'):
        raise ValueError(f"{value!r} cannot be written into an SSH config file")
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def host_block(rec: PoolRecord, a: NodeAddress) -> str:
    """The `Host` entry of one node of the pool `rec` (see the module docstring)."""
    key = rec.provider_info.get("key")
    known = str(known_hosts_path(rec.name))
    lines = [f"Host {a.alias}",
             f"  HostName {a.host}",
             f"  Port {a.port}",
             f"  User {_quote(a.user)}",
             f"  HostKeyAlias {a.alias}",
             f"  UserKnownHostsFile {_quote(known)}",
             "  GlobalKnownHostsFile /dev/null",
             "  StrictHostKeyChecking yes",
             "  CheckHostIP no"]
    if key or a.identity_file:  # the pool's key, else the host's own (its ~/.ssh/config's, resolved at creation)
        path = os.path.abspath(os.path.expanduser(str(key or a.identity_file)))
        lines += [f"  IdentityFile {_quote(path)}", "  IdentitiesOnly yes"]
    if a.proxy_jump:
        lines.append(f"  ProxyJump {_quote(a.proxy_jump)}")
    if not rec.provider_info.get("use_agent"):
        lines.append("  IdentityAgent none")
    lines += ["  ServerAliveInterval 15", ""]
    return "\n".join(lines) + "\n"


def config_text(rec: PoolRecord) -> str:
    """The pool's SSH config: one `Host` entry per node (see the module docstring)."""
    head = (f"# skyhive: named pool {rec.name!r} ({rec.provider}); written by skyhive, removed at `skyhive down "
            f"{rec.name}`\n")
    return head + "".join(host_block(rec, a) for a in node_addresses(rec))


def known_hosts_text(rec: PoolRecord) -> str:
    """The pool's known_hosts: `ALIAS KEYTYPE BASE64` for each node with a recorded host key."""
    return "".join(f"{a.alias} {a.host_key.strip()}\n" for a in node_addresses(rec) if a.host_key.strip())


def write_config(rec: PoolRecord) -> Path | None:
    """Write the SSH config and known_hosts of the pool `rec` (0600, in the 0700 `ssh/` of the state
    directory); None (and nothing written) for a pool not on SSH hosts."""
    if not node_addresses(rec):
        return None
    directory = private_dir("ssh")
    _write_private(directory / f"{rec.name}.known_hosts", known_hosts_text(rec))
    _write_private(directory / f"{rec.name}.config", config_text(rec))
    return config_path(rec.name)


def remove_config(name: str) -> None:
    """Forget the pool's SSH files (its config, known_hosts and hosts files)."""
    for path in (config_path(name), known_hosts_path(name), hosts_path(name)):
        path.unlink(missing_ok=True)
