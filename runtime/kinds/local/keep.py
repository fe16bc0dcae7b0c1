"""Keeping Local nodes (`LocalKeep`, the "local" kind's keep support): a named pool's workers on this
machine are the detached daemon (`detached.py`), each on a Unix socket `<socket dir>/n<node>-w<rank>.sock`
(0600, directory 0700, no TCP port), found again from the record by those paths and their pids. Nothing
of the pool is elsewhere: stopping it ends processes here, its autostop watchdog runs here.

A kind whose nodes are this machine under another name (a third party's, a cloud mapped to local
processes in tests) may declare this support as its own keep (`keep=".../local/keep:KEEP"`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from ....errors import PoolGone
from ....providers.base import DetachedLocalReach, LocalReach, NodeHandle, Provider
from ....providers.local import Local, LocalCluster
from ...nodes.keep import KeepContext, KeepSupport, KeptRecord, KeptWorker, NodeAccess
from ...common import daemon
from ...common.foreground import foreground
from ...common.procfs import proc_stat
from .detached import CLUSTER_ENV, DetachedWorker, is_worker_server, server_pid

__all__ = ["LocalKeep", "LocalAccess", "KEEP", "marked"]


class LocalAccess(NodeAccess):
    """A node of a kept pool on this machine: a session is a local shell (in `cwd`), a port is this
    machine's loopback."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd

    def describe(self) -> str:
        return "this machine"

    def ip(self) -> str | None:
        return "127.0.0.1"  # (SkyPilot's local clusters answer their loopback too)

    def run(self, argv: Sequence[str] | None, *, tty: bool) -> int:
        shell = os.environ.get("SHELL") or "/bin/sh"
        return foreground(list(argv) if argv is not None else [shell, "-l"], cwd=self.cwd if os.path.isdir(self.cwd)
                          else None)

    async def connect(self, port: int) -> anyio.abc.ByteStream:
        return await anyio.connect_tcp("127.0.0.1", int(port))


class LocalKeep(KeepSupport):
    """The "local" kind's keep support (see `runtime/nodes/keep.py`)."""

    kind = "local"
    same_machine = True

    def keep_handle(self, handle: NodeHandle, ctx: KeepContext) -> NodeHandle:
        reach = handle.reach
        if isinstance(reach, DetachedLocalReach):
            return handle
        cwd, build_env = (reach.cwd, reach.build_env) if isinstance(reach, LocalReach) else (None, False)
        kept = DetachedLocalReach(cwd=cwd or os.getcwd(), build_env=build_env, socket_dir=ctx.socket_dir)
        return NodeHandle(node=handle.node, provider_id=handle.provider_id, private_addr=handle.private_addr,
                          reach=kept, public_addr=handle.public_addr, accelerators=handle.accelerators,
                          accelerator=handle.accelerator, state=handle.state, extra=handle.extra)

    def record_fields(self, provider: Provider, handles: Sequence[NodeHandle], ctx: KeepContext) -> dict[str, Any]:
        cwd = next((h.reach.cwd for h in handles if isinstance(h.reach, LocalReach) and h.reach.cwd), None)
        return {"cwd": cwd or os.getcwd(), "socket_dir": ctx.socket_dir, "cluster": "", "provider_info": {}}

    def workers(self, node: int, transport: Any, processes: Sequence[Any]) -> list[KeptWorker]:
        return [KeptWorker(node=node, rank=rank, pid=proc.pid, socket=proc.socket)
                for rank, proc in enumerate(processes) if isinstance(proc, DetachedWorker)]

    def attach_provider(self, rec: KeptRecord, *, nodes: int | None = None, check: bool = True) -> Provider:
        dead = dead_workers(rec) if check else []
        if dead:
            which = ", ".join(f"node {w.node} worker {w.rank} (pid {w.pid})" for w in dead)
            raise PoolGone(f"pool {rec.name!r}: its workers died ({which}); `skyhive down {rec.name}` cleans up, "
                           f"`skyhive launch -c {rec.name} TASK.yaml` starts it again")
        return LocalCluster(socket_dir=rec.socket_dir, attach=True, cwd=rec.cwd)

    def live(self, rec: KeptRecord) -> tuple[list[Any], list[str], bool]:
        # (a worker restarted by a client since the record was written serves the same socket under another pid)
        return [w for w in rec.workers if server_pid(w.socket) is not None], [], False

    def worker_groups(self, rec: KeptRecord) -> list[int]:
        pids = {w.pid for w in rec.workers if is_worker_server(w.pid)}
        pids |= {pid for w in rec.workers if (pid := server_pid(w.socket)) is not None}  # restarted since
        return sorted(pids)

    def left_behind(self, rec: KeptRecord) -> list[int]:
        return marked(rec.socket_dir)

    def access(self, rec: KeptRecord, node: int) -> NodeAccess:
        return LocalAccess(rec.cwd or os.getcwd())

    def relaunch_provider(self, rec: KeptRecord) -> Provider:
        return Local(cwd=rec.cwd)

    def start_watchdog(self, rec: KeptRecord, idle: float, *, command: str, state_dir: str,
                       wait_for: str = "jobs_and_ssh") -> int:
        # (`--jobs-dir`: the pool's queue, beside its record in `state_dir`: `clusters/jobs.py`)
        report = daemon.start("skyhive.runtime.worker.watchdog", "--idle", f"{idle:g}", "--unix-dir", rec.socket_dir,
                              "--interval", f"{max(0.2, min(5.0, idle / 4)):g}", "--state-dir", state_dir,
                              "--wait-for", wait_for, "--jobs-dir", os.path.join(state_dir, "jobs"),
                              "--command", command, what=f"pool {rec.name!r}: the autostop watchdog")
        if not isinstance(report.get("pid"), int):
            raise RuntimeError(f"pool {rec.name!r}: the autostop watchdog did not start: it answered {report}")
        return report["pid"]


def dead_workers(rec: KeptRecord) -> list[Any]:
    live = {(w.node, w.rank) for w in LocalKeep().live(rec)[0]}
    return [w for w in rec.workers if (w.node, w.rank) not in live]


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def marked(socket_dir: str) -> list[int]:
    """Live processes of our user started under the named pool whose socket directory is
    `socket_dir` (they carry it in `SKYHIVE_CLUSTER`). A pool's name may be used by another state
    directory on this machine, so processes are never matched by the name."""
    needle = f"{CLUSTER_ENV}={socket_dir}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read() + b"\0"
        except OSError:
            continue
        if needle in environ and _alive(int(entry)):
            found.append(int(entry))
    return found


KEEP = LocalKeep()
