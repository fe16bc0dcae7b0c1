"""The "kubernetes" node kind's transport: workers started in a pod over `pods/exec`, the exec stream's
stdin/stdout carrying the protocol (as an SSH channel does; no sshd in the pod, no port opened), its
stderr the worker's diagnostics (logged).

A worker is `/bin/sh -c '<read env from stdin> exec python -m skyhive.runtime.worker ...'`: its environment
comes first on stdin (`shell.READ_ENV`), then the protocol. It exits when its stdin ends (the stream
closed); `kill` also sends SIGKILL to it by pid (a second exec), for a worker that hangs.

A pod's loss is seen from a watch on it (`PodWatch`: a `watch` of the pod by name, in a thread), not only
from silence: a pod deleted, Terminating, Failed or evicted fails each of its workers at once with the reason
named (`receiver.lost_reason`: "pod sh-train-0 (namespace default) was deleted"), and a worker whose stream
ends with a non-zero status is named after the pod's state when the pod is what went.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ....providers.base import NodeHandle
from ....providers.kubernetes import PodReach, pod_problem
from ....providers.kubernetes_api import api_error, core_api, exec_api, kubernetes_client
from ...nodes.shell import CommandResult, NodeEnv, Shell
from ...nodes.transport import Receiver, Transport, WorkerProcess
from .exec import ExecStream
from .kept import KeptPodReach, start_kept_worker
from .shell import READ_ENV, PodShell, env_block, exec_command

if TYPE_CHECKING:
    from ...nodes.context import NodeContext

log = logging.getLogger("skyhive.kubernetes")

__all__ = ["PodTransport", "ExecWorker", "PodWatch", "kubernetes_transport"]


class _ExecLink:
    """The worker's protocol pipe: an exec stream's stdin and stdout (see `nodes.transport.Link`)."""

    def __init__(self, stream: ExecStream) -> None:
        self.fd_socket: socket.socket | None = None  # a pod shares no memory with this machine
        self.stream = stream

    def write(self, data: bytes | memoryview) -> None:
        self.stream.write(data)

    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None:
        for piece in pieces:
            self.stream.write(piece)

    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        self.writelines(pieces)
        await self.stream.drain()

    async def drain(self) -> None:
        await self.stream.drain()

    def pause_reading(self) -> None:
        self.stream.pause_reading()

    def resume_reading(self) -> None:
        self.stream.resume_reading()

    def close(self) -> None:
        self.stream.close_stdin()


class ExecWorker(WorkerProcess):
    """A worker in a pod, over its exec stream."""

    def __init__(self, transport: PodTransport, receiver: Receiver, label: str) -> None:
        self.transport = transport
        self.receiver = receiver
        self.label = label
        self.pid = 0  # the worker's pid in the pod, once its first stderr line said it
        self._code: int | None = None
        self._done = asyncio.Event()
        self._err = b""
        self.stream: ExecStream | None = None
        self.link: Any = None

    def on_data(self, channel: int, data: bytes) -> None:
        if channel == 1:
            self.receiver.data_received(data)
            return
        *lines, self._err = (self._err + data).split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace")
            if not self.pid and line.startswith("skyhive-worker-pid "):
                self.pid = int(line.split()[1])
                continue
            log.warning("%s: %s", self.label, self.transport.redact(line))

    def on_end(self, code: int | None, error: str) -> None:
        self.transport.spawn(self._ended(code, error))

    async def _ended(self, code: int | None, error: str) -> None:
        if code != 0 and self.receiver.lost_reason is None:
            why = await self.transport.pod_problem()
            if why is not None:
                self.receiver.lost_reason = why
            elif code is None:
                self.receiver.lost_reason = f"pod {self.transport.reach.pod}: {error}"
        self._code = code if code is not None else -9
        self.receiver.eof_received()
        self._done.set()

    async def wait(self) -> int | None:
        await self._done.wait()
        return self._code

    @property
    def returncode(self) -> int | None:
        return self._code if self._done.is_set() else None

    def kill(self) -> None:
        stream = self.stream
        if stream is None or self._done.is_set():
            return
        if self.pid:
            self.transport.spawn(self.transport.kill_pid(self.pid))
        stream.close()


class PodWatch:
    """A watch on one pod (a thread running the client's `watch` by field selector, from the pod's current
    resourceVersion, again after each timeout): `on_lost(why)` on the loop, once, when it is deleted,
    Terminating, Failed or Succeeded."""

    def __init__(self, reach: PodReach, on_lost: Callable[[str], None]) -> None:
        self.reach = reach
        self.on_lost = on_lost
        self.stopped = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watch: Any = None

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self._run, name=f"k8s-watch-{self.reach.pod}", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()
        if self.watch is not None:
            self.watch.stop()

    def _lost(self, why: str) -> None:
        if not self.stopped.is_set() and self.loop is not None and not self.loop.is_closed():
            self.stopped.set()
            self.loop.call_soon_threadsafe(self.on_lost, why)

    def _run(self) -> None:
        k8s = kubernetes_client()
        api = core_api(self.reach.kubeconfig, self.reach.context)
        name, ns = self.reach.pod, self.reach.namespace
        version = ""
        while not self.stopped.is_set():
            try:
                if not version:
                    pod = api.read_namespaced_pod(name, ns, _request_timeout=30)
                    version = pod.metadata.resource_version
                    if (why := pod_problem(pod, name, ns)) is not None:
                        self._lost(why)
                        return
                self.watch = k8s.watch.Watch()
                for event in self.watch.stream(api.list_namespaced_pod, ns, field_selector=f"metadata.name={name}",
                                               resource_version=version, timeout_seconds=5, _request_timeout=60):
                    if self.stopped.is_set():
                        return
                    obj = event["object"]
                    version = obj.metadata.resource_version or version
                    why = pod_problem(None if event["type"] == "DELETED" else obj, name, ns)
                    if why is not None:
                        self._lost(why)
                        return
            except Exception as exc:  # noqa: BLE001 - a dropped watch (410 Expired: list again) is retried
                status = api_error(exc)[0]
                if status == 404:
                    self._lost(pod_problem(None, name, ns) or "")
                    return
                version = "" if status == 410 else version
                log.debug("pod %s: watch ended (%s); watching again", name, exc)
                self.stopped.wait(1.0)


class PodTransport(Transport):
    """How a node actor reaches one pod (see the module docstring)."""

    def __init__(self, reach: PodReach, *, node: int = 0, redact: Callable[[str], str] | None = None,
                 start_timeout: float = 120.0) -> None:
        self.reach = reach
        self.node = node
        self.redact = redact or (lambda text: text)
        self.start_timeout = start_timeout
        self.workers: list[ExecWorker] = []
        self.watch: PodWatch | None = None
        self.lost: str | None = None
        self.kept_links: list[tuple[Receiver, Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any) -> None:
        """Run `coro` as a task of this transport's (it records its own errors)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def shell(self) -> Shell:
        return PodShell(self.reach)

    def worker_python(self) -> str:
        return self.reach.python or "python3"

    async def run(self, command: str, *, env: Mapping[str, str] | None = None,
                  timeout: float | None = None) -> CommandResult:
        return await exec_command(self.reach, command, env=env, timeout=timeout)

    async def pod_problem(self) -> str | None:
        """Why the pod is lost now (deleted, Terminating, Failed), or None; asked when a worker's stream ended."""
        if self.lost is not None:
            return self.lost
        api = core_api(self.reach.kubeconfig, self.reach.context)
        try:
            pod = await asyncio.to_thread(api.read_namespaced_pod, self.reach.pod, self.reach.namespace,
                                          _request_timeout=15)
        except Exception as exc:  # noqa: BLE001
            return pod_problem(None, self.reach.pod, self.reach.namespace) if api_error(exc)[0] == 404 else None
        return pod_problem(pod, self.reach.pod, self.reach.namespace)

    def _pod_lost(self, why: str) -> None:
        """The watch saw the pod go: each running worker is failed with the reason."""
        self.lost = why
        log.warning("%s: its workers are lost", why)
        for worker in list(self.workers):
            if worker.returncode is None:
                if worker.receiver.lost_reason is None:
                    worker.receiver.lost_reason = why
                if worker.stream is not None:
                    worker.stream.close()
        for receiver, link in list(self.kept_links):
            if receiver.lost_reason is None:
                receiver.lost_reason = why
            link.close()

    async def kill_pid(self, pid: int) -> None:
        try:
            await exec_command(self.reach, f"kill -KILL {int(pid)} 2>/dev/null; true", timeout=15)
        except Exception as exc:  # noqa: BLE001 - best effort: the worker also exits when its stdin ends
            log.debug("pod %s: killing worker %d: %s", self.reach.pod, pid, exc)

    async def start_worker(self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *,
                           label: str) -> WorkerProcess:
        node_env = self.node_env or NodeEnv(python=argv[0])
        if isinstance(self.reach, KeptPodReach):  # a kept pool: a detached worker on its socket, maybe a takeover
            kept = await start_kept_worker(self.reach, self.node, node_env, env, receiver, label=label,
                                           start_timeout=self.start_timeout)
            self.kept_links.append((receiver, kept.link))
            self._watch_pod()
            return kept
        argv = [node_env.python, *argv[1:]]
        env = dict(env)
        if node_env.pythonpath:  # the runtime bootstrap shipped comes first, not a `skyhive/` folder in cwd
            argv = [argv[0], "-P", *argv[1:]]
            env["PYTHONPATH"] = ":".join(node_env.pythonpath)
        cd = f"cd {shlex.quote(node_env.cwd)} && " if node_env.cwd else ""
        command = f'{READ_ENV}{cd}echo "skyhive-worker-pid $$" >&2 && exec {shlex.join(argv)}'
        worker = ExecWorker(self, receiver, f"{label} (pod {self.reach.pod})")
        stream = ExecStream(exec_api(self.reach.kubeconfig, self.reach.context), self.reach.namespace, self.reach.pod,
                            self.reach.container, ["/bin/sh", "-c", command], on_data=worker.on_data,
                            on_end=worker.on_end)
        worker.stream = stream
        worker.link = _ExecLink(stream)
        await stream.open()
        stream.write(env_block(env))
        self.workers.append(worker)
        self._watch_pod()
        return worker

    def _watch_pod(self) -> None:
        if self.watch is None:
            self.watch = PodWatch(self.reach, self._pod_lost)
            self.watch.start()

    async def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None

    def describe(self) -> dict[str, Any]:
        return {"transport": "kubernetes", "pod": self.reach.pod, "namespace": self.reach.namespace,
                "context": self.reach.context}


def kubernetes_transport(handle: NodeHandle, ctx: NodeContext) -> PodTransport:
    """The registered factory for reach kind "kubernetes" (see `registry`)."""
    reach = handle.reach
    assert isinstance(reach, PodReach)
    return PodTransport(reach, node=handle.node, redact=ctx.log.redact, start_timeout=ctx.settings.start_timeout)
