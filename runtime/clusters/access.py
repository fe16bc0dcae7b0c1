"""Getting onto a named pool's nodes: what a session runs there (`skyhive ssh`), through the node's access
(`KeptPool.access`: OpenSSH with the pool's generated config on SSH hosts, a local shell on this machine,
another kind's exec): into the job's working directory, with the job's environment, then the command or
a login shell.
"""

from __future__ import annotations

import shlex

from ...paths import state_dir
from .kept_pool import KeptPool
from .record import ClusterRecord

__all__ = ["session_argv", "session_env", "check_node"]


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


def check_node(rec: ClusterRecord, node: int) -> None:
    KeptPool(rec).check_node(node)


def session_argv(kept: KeptPool, node: int, command: list[str] | None) -> list[str]:
    """What a session on node `node` runs (`sh -c`): into the job's working directory (the node's own,
    else the one its machine shares; where none is, the pool's directory on this machine, the home
    elsewhere), with the job's environment, then `command` (joined with spaces, as ssh does) or, with
    None, a login shell."""
    rec = kept.rec
    if kept.here:  # the jobs' directories are this machine's state directory's
        work, fallback = shlex.quote(str(state_dir() / "work" / rec.name)), shlex.quote(rec.cwd) if rec.cwd else "~"
    else:
        work, fallback = f'"$HOME/.skyhive/work/{rec.name}"', '"$HOME"'
    lines = [f"cd {work}/node-{node} 2>/dev/null || cd {work}/node-0 2>/dev/null || cd {fallback}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(session_env(rec, node).items())]
    lines.append(" ".join(command) if command else 'exec "${SHELL:-/bin/sh}" -l')
    return ["sh", "-c", "\n".join(lines) + "\n"]
