"""`Local`: every node is a set of worker processes on this machine."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .features import Feature, Features
from .base import ClusterSpec, DetachedLocalReach, LocalReach, NodeHandle, Provider, ProvisionError

__all__ = ["Local", "LocalCluster"]

log = logging.getLogger("skyhive.local")


class Local(Provider):
    """Nodes are worker processes on this machine, using this Python (the embedded default).

    When this Python satisfies the pool's Image, the workers run in it (the fast path). Otherwise (a
    package missing, a pin not met, apt/setup/includes) the Image's environment is built once under the
    state directory — a venv, cached by the Image's content hash and shared by every node and pool of
    this machine, exactly as on SSH nodes (one build at a time per environment: the others wait and
    reuse it) — and the workers run in it; its steps are logged and recorded as `NodeProgress` events,
    bounded by `Settings.build_timeout`. `build_env=False` refuses such a pool instead, naming each
    difference (for machines where nothing may be installed).

    Each node gets its own `instance_info()`; `head_addr` is 127.0.0.1 and `head_port` a free port
    picked for the pool. Nothing outlives the pool: workers exit when the client's pipe closes.
    """

    @classmethod
    def infra(cls, text: str, parts: Sequence[str], **files: str | None) -> dict[str, Any]:
        """`local`: this machine, nothing more to say."""
        if parts:
            raise ValueError(f"{text!r}: local has no regions or zones (this machine is the one node)")
        return {}

    name = "local"
    #: the nodes are this machine; a task file's steps never touch this user's home (`runtime/onnode/nodecmd.py`)
    features = Features(Feature.KEEP, Feature.SAME_MACHINE, Feature.NODE_HOMES, Feature.AUTOSTOP_HOOK, Feature.VOLUMES)

    resource_options = {"volumes": "volumes"}  # a directory linked at the mount point (`local_volumes.py`)

    def __init__(self, *, cwd: str | None = None, build_env: bool = True, volumes: Sequence[Any] = ()) -> None:
        self.cwd = cwd
        self.build_env = bool(build_env)
        self.volumes: tuple[Any, ...] = ()
        if volumes:  # (a pool without volumes does not import them: every script's pool is one)
            from .volumes import mounts_of

            self.volumes = mounts_of(volumes)
        self._launched: dict[tuple[str, int], int] = {}  # (pool, node) -> launches (a replacement: > 1)
        # pool -> its workers started early, and how many per node; held until the pool ends (`end_early`)
        self._early: dict[str, tuple[list[Any], int]] = {}

    advisory = frozenset({"accelerator"})  # this machine is what it is: a missing GPU warns, the work runs

    def __repr__(self) -> str:
        return "Local()" if self.build_env else "Local(build_env=False)"

    def describe(self) -> dict[str, Any]:
        desc: dict[str, Any] = {"provider": self.name}
        if self.volumes:
            desc["volumes"] = [[v.target, v.name, v.size_gb] for v in self.volumes]
        return desc

    def find_volume(self, name: str) -> Any:
        """See `Provider.find_volume` (a directory, `local_volumes.py`)."""
        from . import local_volumes

        return local_volumes.find(name)

    def delete_volume(self, name: str) -> None:
        """See `Provider.delete_volume` (a directory and its links, `local_volumes.py`)."""
        from . import local_volumes

        local_volumes.delete(name, self.volumes)

    def plan(self, spec: ClusterSpec) -> dict[str, object]:
        """What was asked of this machine that it lacks (recorded in the pool's log; declared in
        `Provider.plan`): `{"accelerator": "L4:2", "warning": "..."}`, or nothing."""
        if not spec.accelerator:
            return {}
        from .accelerators import local_devices, mismatch, parse  # (it reads its tables on import)

        message = mismatch(parse(spec.accelerator), local_devices(), where="Local (this machine)")
        return {"accelerator": str(spec.accelerator), "warning": message} if message else {}

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """Handles for these node indices, already running (declared in `Provider.launch`)."""
        cwd = self.cwd or os.getcwd()
        unmet = _unmet(spec)
        if unmet:  # one rule with a task's `resources.cpus`/`memory`: what does not fit is refused
            raise ProvisionError(f"Local (this machine, {socket.gethostname()}): {unmet}; Local runs on this machine "
                                 "as it is and cannot pick a bigger one: ask for what it has, or none",
                                 node=min(nodes, default=0), kind="fatal")
        devices: tuple[str, ...] = ()
        if spec.accelerator:  # this machine is what it is: say so when it lacks what was asked
            from .accelerators import local_devices, warn_missing

            devices = local_devices()
            warn_missing(spec.accelerator, devices, where="Local (this machine)")
        if 0 in nodes and self.volumes:
            from . import local_volumes

            local_volumes.link_all(self.volumes, self.describe())
        handles = []
        for i in nodes:
            # a node launched again for the same index (a replacement) gets an id of its own
            n = self._launched[(spec.pool_id, i)] = self._launched.get((spec.pool_id, i), 0) + 1
            early = self._early_of(spec.pool_id, i) if n == 1 else ()  # its workers, if started early
            handles.append(NodeHandle(
                node=i, provider_id=f"local-{spec.pool_id}-{i}" + (f".{n - 1}" if n > 1 else ""),
                private_addr="127.0.0.1", reach=LocalReach(cwd=cwd, build_env=self.build_env, early=early),
                accelerators=len(devices), accelerator=devices[0] if devices else None))
        return handles

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        """Nothing to do (declared in `Provider.terminate`): the node actors stop the worker processes."""
        return None

    def start_early(self, pool_id: str, nodes: int, workers_per_node: int, argv: Sequence[str],
                    env: Mapping[str, str]) -> None:
        """Spawn every node's workers now, before the client's runtime is imported: they import their
        modules beside the client, then wait for the rest of their environment (`local_early.py`);
        `launch` hands them to the nodes' transports. A spawn that fails is logged; the nodes then
        start theirs as usual."""
        if pool_id in self._early or sys.platform != "linux":  # (their exit is seen through a pidfd: Linux)
            return
        from .local_early import start_early

        try:
            started = start_early(nodes * workers_per_node, self.cwd or os.getcwd(), argv, env)
        except OSError as exc:
            log.warning("Local: starting %d workers early failed (%s); they start with their nodes",
                        nodes * workers_per_node, exc)
            return
        self._early[pool_id] = (started, workers_per_node)

    def _early_of(self, pool_id: str, node: int) -> tuple[Any, ...]:
        started, per_node = self._early.get(pool_id, ((), 1))
        return tuple(started[node * per_node:(node + 1) * per_node])

    def end_early(self, pool_id: str) -> None:
        """End the workers started early for `pool_id` that no node's transport took — still here, or
        handed to a node that failed first (see `Provider.end_early`)."""
        started, _ = self._early.pop(pool_id, ((), 1))
        for worker in started:
            if worker.taken:
                worker.reap()  # (ended with its node: reaped here if a start cut short left it unwaited)
            else:
                worker.discard()

    def head_port(self, spec: ClusterSpec) -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])


class LocalCluster(Local):
    """Local nodes of a named pool: their workers are detached daemons (`runtime/worker/server.py`)
    that outlive the client, each on a Unix socket in `socket_dir` (0700; no TCP port). With
    `attach`, the workers already run and the client takes them over (`Pool.attach`). `idle_timeout`
    seconds without a client end a worker (autostop; inf: never). `terminate` does nothing: the
    client either detaches (the workers stay) or shuts them down (`Shutdown`) when the pool closes.
    """

    def __init__(self, *, socket_dir: str, attach: bool = False, idle_timeout: float = float("inf"),
                 cwd: str | None = None, build_env: bool = False) -> None:
        super().__init__(cwd=cwd, build_env=build_env)
        self.socket_dir = socket_dir
        self.attach = attach
        self.idle_timeout = idle_timeout

    def __repr__(self) -> str:
        return f"LocalCluster(socket_dir={self.socket_dir!r}, attach={self.attach})"

    def describe(self) -> dict[str, object]:
        return {"provider": self.name}  # `skyhive down` rebuilds a plain Local: the workers are processes here

    def start_early(self, pool_id: str, nodes: int, workers_per_node: int, argv: Sequence[str],
                    env: Mapping[str, str]) -> None:
        """Nothing: its workers are daemons started by the nodes' own transport (`detached.py`)."""

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """Handles whose reach is a `DetachedLocalReach` (declared in `Provider.launch`)."""
        plain = await super().launch(spec, nodes)
        return [
            NodeHandle(node=h.node, provider_id=h.provider_id, private_addr=h.private_addr,
                       reach=DetachedLocalReach(cwd=self.cwd or os.getcwd(), build_env=self.build_env,
                                                socket_dir=self.socket_dir,
                                                # a node launched again (`replace_failed`) is a new worker
                                                attach=self.attach and self._launched[(spec.pool_id, h.node)] == 1,
                                                idle_timeout=self.idle_timeout),
                       accelerators=h.accelerators, accelerator=h.accelerator)
            for h in plain
        ]


def _unmet(spec: ClusterSpec) -> str:
    """What of `spec.cpus`/`spec.memory_gb` this machine lacks ("" when it has them): `Pool(vcpus=64)`
    and a task's `cpus: 64+` alike (an exact count means "at least" on a machine that exists)."""
    problems = []
    cores = os.cpu_count() or 1
    if spec.cpus is not None and cores < spec.cpus:
        problems.append(f"cpus={spec.cpus:g} (Pool(vcpus=/cpus=), resources.cpus) was asked for, but it has {cores} CPUs")
    memory = _memory_gb()
    if spec.memory_gb is not None and memory is not None and memory < spec.memory_gb:
        problems.append(f"memory_gb={spec.memory_gb:g} (Pool(memory_gb=), resources.memory) was asked for, "
                        f"but it has {memory:.1f} GB")
    return "; ".join(problems)


def _memory_gb() -> float | None:
    """This machine's memory in GB (`/proc/meminfo`), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)  # kB -> GiB
    except (OSError, ValueError, IndexError):
        pass
    return None
