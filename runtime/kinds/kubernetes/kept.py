"""The workers of a kept Kubernetes pool (`KeptPodReach`): detached in their pod, each serving a Unix socket
whose path depends only on the pool, node and rank (`/tmp/skyhive-pods/<cluster>/n<node>-w<rank>.sock`,
0600 in a 0700 directory), so that they outlive the client and a later client finds them again without
asking anyone, and takes them over (`Hello(takeover=True)`).

The client reaches a worker's socket through a relay it execs in the pod (`RELAY`: stdin to the socket, the
socket to stdout — `kubectl exec -i ... -- socat - UNIX:sock`), under a `ResumableLink` (a dropped exec stream
is opened again and the protocol resumes). Still no sshd and no port in the pod.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....errors import ProvisionError
from ....providers.kubernetes import PodReach
from ....providers.kubernetes_api import exec_api
from ...nodes.resumable import ResumableLink, WorkerGone, connect_detached
from ...nodes.shell import NodeEnv
from ...nodes.transport import Receiver, WorkerProcess
from ...onnode.setup import python_version, skyhive_version
from ..local.detached import CLUSTER_ENV
from .exec import ExecStream
from .shell import exec_command

log = logging.getLogger("skyhive.kubernetes")

__all__ = ["KeptPodReach", "KeptPodWorker", "start_kept_worker", "socket_path", "RELAY", "RUN_DIR"]

#: where a kept pool's sockets are in its pods
RUN_DIR = "/tmp/skyhive-pods"

#: Run with `python -c RELAY unix:PATH` or `python -c RELAY tcp:PORT` in the pod: stdin to the socket, the
#: socket to stdout; exits 3 (saying why on stderr) when nothing listens there.
RELAY = r"""
import os, socket, sys, threading
kind, _, where = sys.argv[1].partition(":")
try:
    if kind == "unix":
        conn = socket.socket(socket.AF_UNIX); conn.connect(where)
    else:
        conn = socket.create_connection(("127.0.0.1", int(where)))
except OSError as exc:
    sys.stderr.write(f"nothing listens on {sys.argv[1]}: {exc}\n"); sys.exit(3)
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        conn.sendall(data)
    try:
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
while True:
    data = conn.recv(65536)
    if not data:
        break
    os.write(1, data)
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptPodReach(PodReach):
    """A pod of a named pool: its workers serve `socket_path(...)`; with `attach` they already run and the
    client takes them over. `pool` names the pool (in errors), `cluster` is its key (`c-NAME-HASH`)."""

    cluster: str
    pool: str
    attach: bool = False


def socket_path(cluster: str, node: int, rank: int) -> str:
    """Where worker `rank` of node `node` of the kept pool `cluster` listens in its pod."""
    return f"{RUN_DIR}/{cluster}/n{node}-w{rank}.sock"


class _RelayChannel:
    """An exec'd relay as the channel a `ResumableLink` writes to (asyncssh's channel calls it makes)."""

    def __init__(self, stream: ExecStream) -> None:
        self.stream = stream

    def write(self, data: bytes | memoryview) -> None:
        self.stream.write(data)

    def write_eof(self) -> None:
        self.stream.close_stdin()

    def close(self) -> None:
        self.stream.close()

    def pause_reading(self) -> None:
        self.stream.pause_reading()

    def resume_reading(self) -> None:
        self.stream.resume_reading()


async def open_relay(reach: PodReach, python: str, target: str, factory: Callable[[], Any]) -> tuple[Any, Any]:
    """An exec'd relay to `target` ("unix:PATH", "tcp:PORT") in the pod, as (channel, session) for a
    `ResumableLink`: the session made by `factory` hears its bytes and its end."""
    session = factory()
    err: list[bytes] = []

    def on_data(channel: int, data: bytes) -> None:
        if channel == 1:
            session.data_received(data, None)
        else:
            err.append(data)

    def on_end(code: int | None, error: str) -> None:
        why = None if code == 0 else ConnectionError(b"".join(err).decode(errors="replace").strip() or error
                                                      or f"the relay exited {code}")
        session.connection_lost(why)

    stream = ExecStream(exec_api(reach.kubeconfig, reach.context), reach.namespace, reach.pod, reach.container,
                        [python, "-c", RELAY, target], on_data=on_data, on_end=on_end)
    await stream.open()
    chan = _RelayChannel(stream)
    session.connection_made(chan)
    return chan, session


class KeptPodWorker(WorkerProcess):
    """A detached worker in a pod, reached through a `ResumableLink` over exec'd relays."""

    def __init__(self, reach: PodReach, link: ResumableLink, pid: int, sock: str) -> None:
        self.reach = reach
        self.link = link  # type: ignore[assignment]
        self.resumable = link  # (the same, typed as what it is)
        self.pid = pid
        self.socket = sock
        self._kill_task: asyncio.Task[None] | None = None

    def detach(self) -> None:
        """Leave the worker running (the client leaves a kept pool): close the link only."""
        self.resumable.close()

    @property
    def reconnecting(self) -> bool:
        return self.resumable.reconnecting

    async def wait(self) -> int | None:
        await self.resumable.finished.wait()
        if self._kill_task is not None:
            await asyncio.shield(self._kill_task)
        return self.returncode

    @property
    def returncode(self) -> int | None:
        if self.resumable.exit_status is not None:
            return self.resumable.exit_status
        if self._kill_task is not None and self._kill_task.done():
            return -9
        return None

    def kill(self) -> None:
        self.resumable.close()
        if self._kill_task is None and self.resumable.exit_status is None:
            command = (f"grep -q skyhive.runtime.worker.server /proc/{int(self.pid)}/cmdline 2>/dev/null && "
                       f"kill -KILL -- -{int(self.pid)} 2>/dev/null; rm -f {shlex.quote(self.socket)}; true")
            self._kill_task = asyncio.get_running_loop().create_task(self._kill(command))

    async def _kill(self, command: str) -> None:
        try:
            await exec_command(self.reach, command, timeout=15)
        except Exception as exc:  # noqa: BLE001 - best effort: the pod's deletion ends it anyway
            log.warning("pod %s: could not kill worker %d: %s", self.reach.pod, self.pid, exc)


async def _server_pid(reach: PodReach, sock: str) -> int | None:
    """The pid of the live worker serving `sock` in the pod, or None (never connects to it): the process
    whose arguments are `--socket SOCK`, not one whose command line merely holds that text — this
    script's own does (it found itself whenever its /proc entry came first in the glob's text order)."""
    find = (f"for d in /proc/[0-9]*; do tr '\\0' '\\n' < $d/cmdline 2>/dev/null | grep -A1 -xF -- --socket | "
            f"grep -qxF -- {shlex.quote(sock)} && echo ${{d#/proc/}} && exit 0; done; true")
    done = await exec_command(reach, find, timeout=30)
    text = done.stdout.strip().splitlines()
    return int(text[0]) if text and text[0].isdigit() else None


async def start_kept_worker(reach: KeptPodReach, node: int, node_env: NodeEnv, env: Mapping[str, str],
                            receiver: Receiver, *, label: str, start_timeout: float) -> KeptPodWorker:
    """Start worker `rank` (from the node actor's `label`, "node N worker R") of the kept pool's pod on its
    socket, or take the running one over when the client attaches. Raises `ProvisionError` naming the pool,
    node and pod when an attached pool's worker is gone."""
    rank = int(label.rsplit(" ", 1)[-1])
    sock = socket_path(reach.cluster, node, rank)
    if reach.attach:
        pid = await _server_pid(reach, sock)
        if pid is None:
            raise ProvisionError(f"pool {reach.pool}: node {node} worker {rank} in pod {reach.pod} is gone (nobody "
                                 f"serves {sock}); `skyhive down {reach.pool}` cleans up", node=node)
    else:
        full_env = {**env, CLUSTER_ENV: f"{RUN_DIR}/{reach.cluster}"}
        if node_env.pythonpath:
            full_env["PYTHONPATH"] = ":".join(node_env.pythonpath)
        cd = f"cd {shlex.quote(node_env.cwd)} && " if node_env.cwd else ""
        command = (f"{cd}exec {shlex.quote(node_env.python)} -m skyhive.runtime.worker.server "
                   f"--socket {shlex.quote(sock)} --idle-timeout inf")
        done = await exec_command(reach, command, env=full_env, timeout=start_timeout)
        try:
            pid = int(json.loads(done.stdout.strip().splitlines()[-1])["pid"])
        except (ValueError, KeyError, IndexError):
            raise ProvisionError(f"pool {reach.pool}: the worker in pod {reach.pod} did not start (exit "
                                 f"{done.exit_status}): {(done.stderr or done.stdout).strip()[-2000:]}", node=node) from None

    async def opener(factory: Callable[[], Any]) -> tuple[Any, Any]:
        probe = await exec_command(reach, f"test -S {shlex.quote(sock)}", timeout=30)
        if probe.exit_status != 0:
            raise WorkerGone(f"the worker in pod {reach.pod} is gone (its socket {sock} no longer exists)")
        return await open_relay(reach, node_env.python, f"unix:{sock}", factory)

    def new_link() -> ResumableLink:
        return ResumableLink(receiver, opener, label=f"{label} (pod {reach.pod})", reconnect_timeout=60.0,
                             skyhive_version=skyhive_version(), python_version=python_version(), takeover=reach.attach)

    return await connect_detached(new_link, lambda link: KeptPodWorker(reach, link, pid, sock), takeover=reach.attach,
                                  timeout=start_timeout)


def kept_workers(processes: Sequence[Any]) -> list[tuple[int, KeptPodWorker]]:
    """(rank, worker) of the kept workers among a node's `processes`."""
    return [(rank, p) for rank, p in enumerate(processes) if isinstance(p, KeptPodWorker)]
