"""Getting onto a named pool's nodes: the command lines of `skyhive ssh` (OpenSSH with the pool's
generated config, `sshfiles.py`), and a Local pool's session (a local shell: its nodes are this machine),
in the job's working directory with the job's environment.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from ...errors import NoSSH
from ...paths import state_dir
from .record import ClusterRecord
from .sshfiles import alias, write_config

__all__ = ["remote_preamble", "ssh_argv", "local_dir", "session_env", "check_node", "NoSSH"]


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
