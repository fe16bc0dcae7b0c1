"""Keeping Kubernetes pods (`KubernetesKeep`, the "kubernetes" kind's keep support): a new pool's running pods
reached with detached workers on a socket per (pool, node, rank) in each pod (`kept.KeptPodReach`); from the
record, the same pods reached again (`KeptPods`), which workers still serve their socket, the pool stopped
(its pods deleted: `skyhive down`), and each pod reached by a user (`access.PodAccess`: exec, port-forward).

The record's `provider_info` holds how the pods are reached — context, namespace, kubeconfig *path*, image,
python, the pods' names — never a credential. The calls here are synchronous (the CLI's); each runs its API
calls on an event loop of its own in a worker thread, so they also work from inside a running loop.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from ....errors import PoolGone, ProvisionError
from ....providers.base import ClusterSpec, NodeHandle, Provider
from ....providers.kubernetes import Kubernetes, PodReach
from ...common import bridge
from ...nodes.transport import Transport
from ...nodes.keep import KeepContext, KeepSupport, KeptRecord, KeptWorker, StopResult
from .access import PodAccess
from ..local.detached import CLUSTER_ENV
from .kept import RUN_DIR, KeptPodReach, kept_workers
from .shell import exec_command

__all__ = ["KubernetesKeep", "KeptPods", "KEEP"]

T = TypeVar("T")


def _run(make: Callable[[], Awaitable[T]]) -> T:
    return bridge.run(make, thread=True, name="skyhive-k8s-keep")


def _provider(rec: KeptRecord) -> Kubernetes:
    info = rec.provider_info
    return Kubernetes(context=info.get("context"), namespace=info.get("namespace") or "default",
                      image=info.get("image"), kubeconfig=info.get("kubeconfig"), python=info.get("python"))


def _reach(rec: KeptRecord, node: int, *, attach: bool) -> KeptPodReach:
    info = rec.provider_info
    return KeptPodReach(pod=info["pods"][node], namespace=info.get("namespace") or "default", context=info.get("context"),
                        kubeconfig=info.get("kubeconfig"), python=info.get("python"), cluster=rec.cluster,
                        pool=rec.name, attach=attach)


class KeptPods(Kubernetes):
    """The recorded pods of a kept pool, their workers taken over (`launch` makes nothing: it hands out the
    pods as they are); `terminate` deletes them as `Kubernetes` does."""

    def __init__(self, rec: KeptRecord, nodes: int | None = None) -> None:
        base = _provider(rec)
        super().__init__(context=base.context, namespace=base.namespace, image=base.image, kubeconfig=base.kubeconfig,
                         python=base.python)
        self.rec = rec
        self.count = rec.nodes if nodes is None else nodes

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        pods = self.rec.provider_info["pods"]
        missing = [n for n in nodes if n >= len(pods)]
        if missing:
            raise ProvisionError(f"pool {self.rec.name!r} has no pod for node(s) {missing}: it was made with "
                                 f"{len(pods)} (`skyhive down {self.rec.name}` then `launch -c` makes it anew)")
        return [NodeHandle(node=n, provider_id=pods[n], private_addr="", reach=_reach(self.rec, n, attach=True))
                for n in nodes]


class KubernetesKeep(KeepSupport):
    """The "kubernetes" kind's keep support (see `runtime/nodes/keep.py` and the module docstring)."""

    kind = "kubernetes"
    same_machine = False

    def keep_handle(self, handle: NodeHandle, ctx: KeepContext) -> NodeHandle:
        reach = handle.reach
        if isinstance(reach, KeptPodReach):
            return handle
        if not isinstance(reach, PodReach):
            raise ProvisionError(f"pool {ctx.pool}: node {handle.node} is reached as {type(reach).kind!r}, not as a "
                                 "pod", node=handle.node)
        fields = {f.name: getattr(reach, f.name) for f in dataclasses.fields(reach)}
        return dataclasses.replace(handle, reach=KeptPodReach(**fields, cluster=ctx.cluster, pool=ctx.pool))

    def record_fields(self, provider: Provider, handles: Sequence[NodeHandle], ctx: KeepContext) -> dict[str, Any]:
        described = provider.describe()
        pods = [h.provider_id for h in sorted(handles, key=lambda h: h.node)]
        info = {k: described.get(k) for k in ("context", "namespace", "image", "kubeconfig", "python")}
        return {"cwd": os.getcwd(), "socket_dir": "", "cluster": ctx.cluster, "provider_info": {**info, "pods": pods}}

    def workers(self, node: int, transport: Any, processes: Sequence[Any]) -> list[KeptWorker]:
        return [KeptWorker(node=node, rank=rank, pid=p.pid, socket=p.socket) for rank, p in kept_workers(processes)]

    def node_facts(self, transport: Any) -> dict[str, Any]:
        env = transport.node_env if isinstance(transport, Transport) else None
        return {} if env is None else {"env": {"python": env.python, "pythonpath": list(env.pythonpath)}}

    def attach_provider(self, rec: KeptRecord, *, nodes: int | None = None, check: bool = True) -> Provider:
        if check:
            gone = _run(lambda: _gone_pods(rec))
            if gone:
                raise PoolGone(f"pool {rec.name!r}: {'; '.join(gone)}; `skyhive down {rec.name}` cleans up, "
                               f"`skyhive launch -c {rec.name} TASK.yaml` starts it again")
        return KeptPods(rec, nodes)

    def live(self, rec: KeptRecord) -> tuple[list[Any], list[str], bool]:
        async def look() -> tuple[list[Any], list[str], bool]:
            live: list[Any] = []
            errors: list[str] = []
            autostopped = False
            provider = _provider(rec)
            for node in sorted({w.node for w in rec.workers}):
                reach = _reach(rec, node, attach=True)
                why = await provider.node_problem(NodeHandle(node=node, provider_id=reach.pod, private_addr="",
                                                             reach=reach))
                if why is not None:  # an ended pod: its autostop ended it (Succeeded), or it is lost
                    autostopped = autostopped or why.endswith("is Succeeded (Succeeded)")
                    errors.append(why)
                    continue
                try:
                    done = await exec_command(reach, f"ls -1 {shlex.quote(RUN_DIR + '/' + rec.cluster)} 2>/dev/null; true",
                                              timeout=30)
                except Exception as exc:  # noqa: BLE001 - a pod that cannot be asked counts as not live
                    errors.append(f"pod {reach.pod}: {exc}")
                    continue
                if done.exit_status != 0:
                    errors.append(f"pod {reach.pod}: {done.stderr.strip()}")
                    continue
                served = set(done.stdout.split())
                live.extend(w for w in rec.workers if w.node == node and os.path.basename(w.socket) in served)
            return sorted(live, key=lambda w: (w.node, w.rank)), [] if autostopped else errors, autostopped

        return _run(look)

    def start_watchdog(self, rec: KeptRecord, idle: float, *, command: str, state_dir: str,
                       wait_for: str = "jobs_and_ssh") -> int:
        """The autostop watchdog in each pod (`runtime/worker/watchdog.py`, watching the connections to the
        pool's sockets there): after `idle` seconds with none it ends the pool's workers and then the pod's
        container (its main process, `KEEPALIVE`): the pod is Succeeded, its CPUs and GPUs go back to the
        cluster. (A pod has no credentials to delete itself: `skyhive down` deletes the ended pods' objects.)
        Returns 0: it runs in the pods."""
        if wait_for != "jobs_and_ssh":  # (the watchdog runs on the nodes, away from the pool's job queue)
            raise ProvisionError(f"pool {rec.name!r}: resources.autostop.wait_for: {wait_for} is honoured on Local "
                                 f"pools only; here a job or a client keeps the pool up (jobs_and_ssh)")
        async def start() -> list[str]:
            failures = []
            for node in sorted({w.node for w in rec.workers}):
                try:
                    done = await exec_command(_reach(rec, node, attach=True), _watchdog_script(rec, node, idle), timeout=60)
                    json.loads(done.stdout.strip().splitlines()[-1])["pid"]
                except (ValueError, KeyError, IndexError, ProvisionError) as exc:
                    failures.append(f"node {node}: {exc}")
            return failures

        failures = _run(start)
        if failures:
            raise ProvisionError(f"pool {rec.name!r}: the autostop watchdog did not start in every pod: "
                                 f"{'; '.join(failures)}")
        return 0

    def stop_watchdog(self, rec: KeptRecord) -> None:
        async def stop() -> None:
            for node in sorted({w.node for w in rec.workers}):
                wd = shlex.quote(f"{_wd(rec)}/n{node}")
                kill = (f"for d in /proc/[0-9]*; do tr '\\0' '\\n' < $d/cmdline 2>/dev/null | grep -qxF -- {wd} && "
                        "kill -KILL ${d#/proc/}; done; true")
                await exec_command(_reach(rec, node, attach=True), kill, timeout=30)

        _run(stop)

    def stop(self, rec: KeptRecord, *, host_keys: Mapping[int, str] | None = None, skip: Collection[int] = (),
             keep_work: bool = False) -> StopResult:
        """The pool's pods deleted (every process in them ends; `keep_work` keeps nothing more: a pod's files
        go with it)."""
        provider = _provider(rec)
        pods = [p for n, p in enumerate(rec.provider_info.get("pods") or []) if n not in skip]
        handles = [NodeHandle(node=n, provider_id=p, private_addr="", reach=_reach(rec, n, attach=True))
                   for n, p in enumerate(pods)]
        try:
            _run(lambda: provider.terminate(handles))
        except ProvisionError as exc:
            return StopResult(0, (), (str(exc),))
        return StopResult(len(rec.workers), tuple(f"pod {p} (namespace {provider.namespace}) deleted" for p in pods))

    def access(self, rec: KeptRecord, node: int) -> Any:
        """How node `node` is reached: an exec for `skyhive ssh`, a port-forward for `forward` (`PodAccess`)."""
        pods = rec.provider_info.get("pods") or []
        if not 0 <= node < len(pods):
            raise ProvisionError(f"pool {rec.name!r} has no node {node} (it has {len(pods)})")
        return PodAccess(_reach(rec, node, attach=True))


def _wd(rec: KeptRecord) -> str:
    return f"{RUN_DIR}/{rec.cluster}.wd"


def _watchdog_script(rec: KeptRecord, node: int, idle: float) -> str:
    """Starts the pool's watchdog in node `node`'s pod; its `autostop.sh` ends the pool's processes there, marks
    the pod autostopped and ends the container's main process."""
    sock_dir = f"{RUN_DIR}/{rec.cluster}"
    wd = f"{_wd(rec)}/n{node}"
    env = rec.node_envs.get(str(node), {})
    python = str(env.get("python") or "python3")
    pythonpath = ":".join(env.get("pythonpath") or ())
    stop = (f"for d in /proc/[0-9]*; do tr '\\0' '\\n' < $d/environ 2>/dev/null | "
            f"grep -qxF {shlex.quote(CLUSTER_ENV + '=' + sock_dir)} && kill -KILL ${{d#/proc/}}; done\n"
            f"echo autostop > {shlex.quote(sock_dir + '.autostop')}\n"
            'kill -TERM "$(cat "/tmp/skyhive-main-$HOSTNAME.pid")"\n')
    interval = max(0.2, min(5.0, idle / 4))
    return (f"set -e\numask 077\nmkdir -p {shlex.quote(wd)}\n"
            f"cat > {shlex.quote(wd + '/autostop.sh')} <<'SKYHIVE_AUTOSTOP_EOF'\n{stop}SKYHIVE_AUTOSTOP_EOF\n"
            f"PYTHONPATH={shlex.quote(pythonpath)} {shlex.quote(python)} -m skyhive.runtime.worker.watchdog "
            f"--idle {idle:g} --interval {interval:g} --unix-dir {shlex.quote(sock_dir)} --state-dir {shlex.quote(wd)} "
            f"--command {shlex.quote('sh ' + wd + '/autostop.sh')}\n")


async def _gone_pods(rec: KeptRecord) -> list[str]:
    """Why each of the pool's pods that is lost is lost ("pod sh-x-0 (namespace default) was deleted")."""
    provider = _provider(rec)
    gone = []
    for n, pod in enumerate(rec.provider_info.get("pods") or []):
        why = await provider.node_problem(NodeHandle(node=n, provider_id=pod, private_addr="",
                                                     reach=_reach(rec, n, attach=True)))
        if why is not None:
            gone.append(why)
    return gone


KEEP = KubernetesKeep()
