"""FAKE Kubernetes cluster state (a test stand-in): pods, nodes, the scheduler, the pods' processes, and the
history a watch reads. Everything here runs on the fake API server's event loop (one thread).

- A pod is created Pending with no conditions; the fake scheduler then places it on the first node whose
  free allocatable resources and labels fit its requests and `nodeSelector` (PodScheduled True, nodeName),
  starts its container's command as a real local process, and marks it Running with Initialized,
  ContainersReady and Ready True. A pod nothing fits stays Pending with PodScheduled False, reason
  Unschedulable and the scheduler's message ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
  and a FailedScheduling event.
  https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-phase ,
  https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions ,
  https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#PodStatus
- Deleting a pod sets `metadata.deletionTimestamp` and `deletionGracePeriodSeconds` (the request's
  `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`, default 30): the pod is
  Terminating; its processes get SIGTERM, then SIGKILL when the grace period ends; the object goes once
  they are gone (a DELETED event).
  https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination
- Every change bumps the cluster's resourceVersion; a watch sends the events after the resourceVersion it
  names (ADDED, MODIFIED, DELETED), and one older than the compacted history gets an ERROR event with a
  410 Expired Status.
  https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes

A pod's processes carry `FAKE_K8S_POD=<its uid>` in their environment, so the fake (and a test) finds them all.
Its "filesystem" is the directory `<root>/<namespace>/<name>-<uid>` (its HOME and working directory), and
its own /tmp and hostname (the pod's name, as a real pod's): the container runs in mount and UTS namespaces of
its own with `<pod dir>/tmp` over /tmp, which every exec enters (`exec_argv`), so nothing a pod writes in /tmp
lands in this machine's, and each pod is a machine of its own to the code that asks (`os.uname()`).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import logging
import os
import signal
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from .rules import STANDARD_RESOURCES, Refused, parse_quantity, validate_pod

log = logging.getLogger("tests.fake_k8s")

__all__ = ["FakeCluster", "FakeNode", "MARKER", "NAME_KEY", "pod_processes", "matches"]

MARKER = "FAKE_K8S_POD"
NODE_PATH = "/usr/local/bin:/usr/bin:/bin"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_processes(uid: str) -> list[int]:
    """The pids of the processes of the fake pod `uid` (by their environment)."""
    needle = f"{MARKER}={uid}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if needle in fh.read() + b"\0":
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _signal_all(uid: str, sig: int) -> None:
    for pid in pod_processes(uid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class FakeNode:
    """A node of the fake cluster: its name, labels and allocatable resources (quantity strings)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=lambda: {"cpu": "8", "memory": "32Gi", "pods": "110"})

    def to_json(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name, **self.labels}},
                "status": {"allocatable": dict(self.allocatable), "capacity": dict(self.allocatable),
                           "conditions": [{"type": "Ready", "status": "True"}]}}


def _requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """A pod's requests as the scheduler sums them (an extended resource's request defaults to its limit)."""
    total: dict[str, Decimal] = {}
    for c in pod["spec"].get("containers") or []:
        res = c.get("resources") or {}
        asked = {k: parse_quantity(v) for k, v in (res.get("limits") or {}).items() if k not in STANDARD_RESOURCES}
        asked.update({k: parse_quantity(v) for k, v in (res.get("requests") or {}).items()})
        for k, v in asked.items():
            total[k] = total.get(k, Decimal(0)) + v
    return total


class FakeCluster:
    """The fake's state. `root`: where pods' directories go; `nodes`: the cluster's nodes."""

    def __init__(self, root: str, nodes: list[FakeNode] | None = None, *, schedule_delay: float = 0.05) -> None:
        self.root = Path(root)
        self.nodes = nodes or [FakeNode("fake-node-1")]
        self.schedule_delay = schedule_delay
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []  # Kubernetes Event objects (FailedScheduling, Killing)
        self.rv = 1
        self.history: list[tuple[int, str, dict[str, Any]]] = []  # (resourceVersion, type, object)
        self.compacted = 0  # a watch from below this resourceVersion is Expired
        self.changed = asyncio.Event()  # replaced by a fresh one at each change: a watch waits on the current one
        self.mains: dict[str, asyncio.subprocess.Process] = {}  # pod uid -> its container's main process
        self.tasks: set[asyncio.Task[Any]] = set()
        self.requests_seen: list[dict[str, Any]] = []  # every pod body a client POSTed (tests read the wire)

    # ---- changes -------------------------------------------------------------------------------------

    async def _emit(self, kind: str, pod: dict[str, Any]) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, copy.deepcopy(pod)))
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests_seen.append(copy.deepcopy(body))
        validate_pod(body)
        name = body["metadata"]["name"]
        if (namespace, name) in self.pods:
            raise Refused("AlreadyExists", f'pods "{name}" already exists', name=name)
        pod = copy.deepcopy(body)
        pod.update(apiVersion="v1", kind="Pod")
        meta = pod["metadata"]
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
        spec = pod["spec"]
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("restartPolicy", "Always")
        for c in spec["containers"]:  # an extended resource's request defaults to its limit
            res = c.setdefault("resources", {})
            for k, v in (res.get("limits") or {}).items():
                res.setdefault("requests", {}).setdefault(k, v)
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        self.pods[(namespace, name)] = pod
        await self._emit("ADDED", pod)
        self._spawn(self._schedule(namespace, name))
        return copy.deepcopy(pod)

    def _fits(self, node: FakeNode, pod: dict[str, Any]) -> tuple[bool, list[str]]:
        """Whether `pod` fits on `node` now, and the scheduler's reasons when it does not."""
        reasons = []
        selector = pod["spec"].get("nodeSelector") or {}
        labels = node.to_json()["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons.append("node(s) didn't match Pod's node affinity/selector")
        used: dict[str, Decimal] = {}
        for other in self.pods.values():
            if other["spec"].get("nodeName") == node.name and other is not pod:
                for k, v in _requests(other).items():
                    used[k] = used.get(k, Decimal(0)) + v
        for k, v in sorted(_requests(pod).items()):
            have = parse_quantity(node.allocatable.get(k, "0"))
            if used.get(k, Decimal(0)) + v > have:
                reasons.append(f"Insufficient {k}")
        return not reasons, reasons

    async def _schedule(self, namespace: str, name: str) -> None:
        await asyncio.sleep(self.schedule_delay)
        pod = self.pods.get((namespace, name))
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod["spec"].get("nodeName"):
            return
        counts: dict[str, int] = {}
        for node in self.nodes:
            ok, reasons = self._fits(node, pod)
            if ok:
                await self._bind(pod, node)
                return
            for r in reasons:
                counts[r] = counts.get(r, 0) + 1
        n = len(self.nodes)
        detail = ", ".join(f"{c} {r}" for r, c in sorted(counts.items()))
        message = (f"0/{n} nodes are available: {detail}. preemption: 0/{n} nodes are available: "
                   f"{n} No preemption victims found for incoming pod.")
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": message, "lastProbeTime": None, "lastTransitionTime": _now()}]
        self.events.append({"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "FailedScheduling",
                            "message": message, "metadata": {"name": f"{name}.{self.rv}", "namespace": namespace},
                            "involvedObject": {"kind": "Pod", "name": name, "namespace": namespace,
                                               "uid": pod["metadata"]["uid"]}})
        await self._emit("MODIFIED", pod)

    def pod_dir(self, pod: Mapping[str, Any]) -> Path:
        meta = pod["metadata"]
        return self.root / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"

    def exec_argv(self, pod: Mapping[str, Any], command: list[str]) -> list[str] | None:
        """`command` run inside the running pod's mount namespace, or None when its container is not running."""
        main = self.mains.get(pod["metadata"]["uid"])
        if main is None or main.returncode is not None:
            return None
        return ["nsenter", "-t", str(main.pid), "-m", "-u", "--", *command]

    def pod_env(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        """A process's environment in `pod`: the container's env, HOME its directory, a bare PATH, the marker."""
        home = str(self.pod_dir(pod))
        env = {"HOME": home, "PATH": NODE_PATH, "HOSTNAME": pod["metadata"]["name"], MARKER: pod["metadata"]["uid"]}
        for e in container.get("env") or []:
            env[e["name"]] = str(e.get("value", ""))
        return env

    async def _bind(self, pod: dict[str, Any], node: FakeNode) -> None:
        now = _now()
        pod["spec"]["nodeName"] = node.name
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]
        await self._emit("MODIFIED", pod)
        home = self.pod_dir(pod)
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        (home / "tmp").mkdir(mode=0o1777, exist_ok=True)
        container = pod["spec"]["containers"][0]
        argv = [*(container.get("command") or ["sleep", "infinity"]), *(container.get("args") or [])]
        # the container's own /tmp and hostname, as a pod has its own filesystem and its name as hostname:
        # mount and UTS namespaces of the container's (its main process, then every exec entering them:
        # `nsenter`) with the pod's tmp/ over /tmp
        argv = ["unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c",
                'mount --bind "$0" /tmp && hostname "$1" && shift && exec "$@"', str(home / "tmp"),
                pod["metadata"]["name"], *argv]
        try:
            proc = await asyncio.create_subprocess_exec(*argv, cwd=home, env=self.pod_env(pod, container),
                                                        stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            pod["status"].update(phase="Failed", message=f"failed to start container: {exc}")
            await self._emit("MODIFIED", pod)
            return
        self.mains[pod["metadata"]["uid"]] = proc
        pod["status"].update(phase="Running", hostIP="127.0.0.1", podIP="127.0.0.1", startTime=now)
        pod["status"]["conditions"] = [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
        pod["status"]["containerStatuses"] = [{"name": container["name"], "ready": True, "restartCount": 0,
                                               "image": container["image"],
                                               "imageID": f"fake://{container['image']}",
                                               "containerID": f"fake://{pod['metadata']['uid']}", "started": True,
                                               "state": {"running": {"startedAt": now}}}]
        await self._emit("MODIFIED", pod)
        self._spawn(self._watch_main(pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"], proc))

    async def _watch_main(self, namespace: str, name: str, uid: str, proc: asyncio.subprocess.Process) -> None:
        """The container's main process exited by itself: the container ends with every process in it, and
        the pod Succeeded or Failed (restartPolicy Never is all the fake does)."""
        code = await proc.wait()
        pod = self.pods.get((namespace, name))
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        while pod_processes(uid):
            _signal_all(uid, signal.SIGKILL)
            await asyncio.sleep(0.02)
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        await self._emit("MODIFIED", pod)

    async def delete_pod(self, namespace: str, name: str, grace: int | None) -> dict[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise Refused("NotFound", f'pods "{name}" not found', name=name)
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp"):
            if grace is None:
                grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            if not pod["spec"].get("nodeName"):
                grace = 0  # never scheduled: nothing runs, it goes at once
            meta.update(deletionTimestamp=_now(), deletionGracePeriodSeconds=grace)
            await self._emit("MODIFIED", pod)
            self._spawn(self._terminate(namespace, name, meta["uid"], grace))
        return copy.deepcopy(pod)

    async def _terminate(self, namespace: str, name: str, uid: str, grace: int) -> None:
        _signal_all(uid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while pod_processes(uid) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        while pod_processes(uid):
            _signal_all(uid, signal.SIGKILL)
            await asyncio.sleep(0.02)
        main = self.mains.pop(uid, None)
        if main is not None:
            await main.wait()
        pod = self.pods.pop((namespace, name), None)
        if pod is not None:
            self._spawn(self._schedule_waiting())
            await self._emit("DELETED", pod)

    async def _schedule_waiting(self) -> None:
        """Resources were freed: the scheduler tries the pods it could not place again."""
        for (ns, name), pod in list(self.pods.items()):
            if not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                await self._schedule(ns, name)

    # ---- reads ---------------------------------------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise Refused("NotFound", f'pods "{name}" not found', name=name)
        return copy.deepcopy(pod)

    def list_pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for (ns, _), p in sorted(self.pods.items()) if ns == namespace and matches(p, selector)]

    async def shutdown(self) -> None:
        """Kill every pod's processes and forget them (the fake goes away)."""
        for task in list(self.tasks):
            task.cancel()
        for pod in list(self.pods.values()):
            uid = pod["metadata"]["uid"]
            while pod_processes(uid):
                _signal_all(uid, signal.SIGKILL)
                await asyncio.sleep(0.02)
            main = self.mains.pop(uid, None)
            if main is not None:
                await main.wait()
        self.pods.clear()


#: the key under which `matches` sees an object's name (the field selector metadata.name=NAME)
NAME_KEY = "@metadata.name"


def matches(obj: Mapping[str, Any], selector: str) -> bool:
    """Whether `obj`'s labels match an equality-based label selector ("a=b,c!=d,e").
    https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"""
    labels = {**(obj["metadata"].get("labels") or {}), NAME_KEY: obj["metadata"]["name"]}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            k = k.strip().rstrip("=")
            if labels.get(k) != v.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True
