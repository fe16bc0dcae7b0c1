"""Getting onto a named pool's nodes with OpenSSH: the pool's generated SSH config and known_hosts, and
the command lines of `skyhive ssh` and `skyhive forward`.

    <state dir>/ssh/                      0700
        NAME.config                       0600: `Host NAME` (node 0), `Host NAME-worker1`, ... (one per node)
        NAME.known_hosts                  0600: the host key each node showed when the pool was created

Each entry names the node's address, port and user, the pool's key (`IdentitiesOnly`), and pins the
recorded host key: `UserKnownHostsFile` is the pool's file only, `GlobalKnownHostsFile /dev/null`,
`StrictHostKeyChecking yes`, and `HostKeyAlias` the entry's name (so the key is found whatever the
address and port, and a changed key is refused, never learnt). The files are written whenever the
pool's record is saved and removed with it (`record.save`, `record.remove`); `skyhive ssh` writes them
again from the record before each login. `sshconfig.py` adds the one `Include` line to `~/.ssh/config`
that makes `ssh NAME`, `scp`, `rsync` and editors' remote-SSH find them.

A Local pool has no SSH: its nodes are processes of this machine; a session there is a local shell in
the node's working directory.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from ...paths import private_dir, state_dir
from .record import ClusterRecord

__all__ = ["NodeAddress", "alias", "node_addresses", "config_path", "known_hosts_path", "write_config",
           "remove_config", "remote_preamble", "ssh_argv", "local_dir", "session_env", "NoSSH"]

log = logging.getLogger("skyhive.clusters")


class NoSSH(ValueError):
    """The pool's nodes are not reached over SSH (a Local pool)."""


@dataclass(frozen=True, slots=True)
class NodeAddress:
    """How node `node` of a pool on SSH or cloud nodes is reached: its SSH alias, login and pinned key."""

    node: int
    alias: str
    user: str
    host: str
    port: int
    host_key: str  # "ssh-ed25519 AAAA...", "" when none was recorded


def alias(name: str, node: int) -> str:
    """The SSH alias of a pool's node: the pool's name for the head (node 0), `NAME-workerN` for node N."""
    return name if node == 0 else f"{name}-worker{node}"


def node_addresses(rec: ClusterRecord) -> list[NodeAddress]:
    """The nodes of the pool `rec` as SSH sees them, in node order; [] for a pool whose nodes are not on
    other hosts (Local)."""
    import getpass

    from ...providers.ssh import parse_host

    if not rec.on_hosts:
        return []
    hosts = list(rec.provider_info.get("hosts", ()))[: rec.nodes]
    out = []
    for node, spec in enumerate(hosts):
        user, host, port = parse_host(str(spec))
        out.append(NodeAddress(node=node, alias=alias(rec.name, node), user=user or getpass.getuser(), host=host,
                               port=port, host_key=rec.host_keys.get(str(node), "")))
    return out


def config_path(name: str) -> Path:
    """The pool's generated SSH config (see the module docstring)."""
    return state_dir() / "ssh" / f"{name}.config"


def known_hosts_path(name: str) -> Path:
    """The pool's generated known_hosts: the pinned host key of each node, under its alias."""
    return state_dir() / "ssh" / f"{name}.known_hosts"


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


def config_text(rec: ClusterRecord) -> str:
    """The pool's SSH config: one `Host` entry per node (see the module docstring)."""
    key = rec.provider_info.get("key")
    known = str(known_hosts_path(rec.name))
    lines = [f"# skyhive: named pool {rec.name!r} ({rec.provider}); written by skyhive, removed at `skyhive down "
             f"{rec.name}`"]
    for a in node_addresses(rec):
        lines += [f"Host {a.alias}",
                  f"  HostName {a.host}",
                  f"  Port {a.port}",
                  f"  User {_quote(a.user)}",
                  f"  HostKeyAlias {a.alias}",
                  f"  UserKnownHostsFile {_quote(known)}",
                  "  GlobalKnownHostsFile /dev/null",
                  "  StrictHostKeyChecking yes",
                  "  CheckHostIP no"]
        if key:
            lines += [f"  IdentityFile {_quote(os.path.abspath(os.path.expanduser(str(key))))}", "  IdentitiesOnly yes"]
        if not rec.provider_info.get("use_agent"):
            lines.append("  IdentityAgent none")
        lines += ["  ServerAliveInterval 15", ""]
    return "\n".join(lines) + "\n"


def known_hosts_text(rec: ClusterRecord) -> str:
    """The pool's known_hosts: `ALIAS KEYTYPE BASE64` for each node with a recorded host key."""
    return "".join(f"{a.alias} {a.host_key.strip()}\n" for a in node_addresses(rec) if a.host_key.strip())


def write_config(rec: ClusterRecord) -> Path | None:
    """Write the SSH config and known_hosts of the pool `rec` (0600, in the 0700 `ssh/` of the state
    directory); None (and nothing written) for a pool not on SSH hosts."""
    if not node_addresses(rec):
        return None
    directory = private_dir("ssh")
    _write_private(directory / f"{rec.name}.known_hosts", known_hosts_text(rec))
    _write_private(directory / f"{rec.name}.config", config_text(rec))
    return config_path(rec.name)


def remove_config(name: str) -> None:
    """Forget the pool's SSH entries (its config and known_hosts files)."""
    for path in (config_path(name), known_hosts_path(name)):
        path.unlink(missing_ok=True)


def _latest_env(name: str) -> dict[str, str]:
    """The environment of the pool's latest job (its `envs`; never its secrets, which would show on the
    node's command lines)."""
    from .jobs import list_jobs

    try:
        jobs = list_jobs(name)
    except (OSError, ValueError):
        return {}
    return dict(jobs[-1].env) if jobs else {}


def session_env(rec: ClusterRecord, node: int) -> dict[str, str]:
    """The variables a session on node `node` gets: the latest job's `envs`, the node's rank and the
    pool's size (SkyPilot's and skyhive's names)."""
    env = _latest_env(rec.name)
    for prefix in ("SKYPILOT", "SKYHIVE"):
        env[f"{prefix}_NODE_RANK"] = str(node)
        env[f"{prefix}_NUM_NODES"] = str(rec.nodes)
    return env


def remote_preamble(rec: ClusterRecord, node: int) -> str:
    """Shell lines run first on the node: into the job's working directory (the node's own, else the one
    its machine shares; the home when no job ran) with the job's environment."""
    work = f"$HOME/.skyhive/work/{rec.name}"
    lines = [f'cd "{work}/node-{node}" 2>/dev/null || cd "{work}/node-0" 2>/dev/null || cd "$HOME"']
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(session_env(rec, node).items())]
    return "\n".join(lines) + "\n"


def check_node(rec: ClusterRecord, node: int) -> None:
    if not 0 <= node < rec.nodes:
        raise ValueError(f"pool {rec.name!r} has nodes 0..{rec.nodes - 1}: there is no node {node}")


def ssh_argv(rec: ClusterRecord, node: int, command: list[str] | None, *, tty: bool | None = None,
             options: list[str] | None = None) -> list[str]:
    """The `ssh` command line for a session on node `node` of the pool `rec` (its config written
    first): `command` (joined with spaces, as ssh does) run in the job's directory with the job's
    environment, or with None an interactive login shell there (a pty). Raises `NoSSH` for a Local pool."""
    check_node(rec, node)
    path = write_config(rec)
    if path is None:
        raise NoSSH(f"pool {rec.name!r} runs on this machine ({rec.provider}): it has no SSH entries")
    remote = remote_preamble(rec, node)
    if command:
        remote += " ".join(command) + "\n"
    else:
        remote += 'exec "${SHELL:-/bin/sh}" -l\n'
    want_tty = (command is None) if tty is None else tty
    return ["ssh", "-F", str(path), *(["-t"] if want_tty else ["-T"]), *(options or []), alias(rec.name, node),
            remote]


def local_dir(rec: ClusterRecord, node: int) -> str:
    """A Local pool's node's working directory: the latest job's there (its own, else node 0's, which
    the nodes of one machine share), else the pool's directory."""
    work = state_dir() / "work" / rec.name
    for candidate in (work / f"node-{node}", work / "node-0"):
        if candidate.is_dir():
            return str(candidate)
    return rec.cwd or str(Path.home())
