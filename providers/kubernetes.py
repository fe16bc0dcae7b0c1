"""`sky.Kubernetes`: a pool's nodes are pods of a cluster you already have, created through the official
client (`kubernetes_api.py`) and reached over `pods/exec` (the node kind `runtime/kinds/kubernetes/`: no
sshd in the pod, no port opened).

    sky.Kubernetes()                                  # the kubeconfig's current context, namespace "default"
    sky.Kubernetes(context="gke-prod", namespace="ml", image="python:3.12-slim", kubeconfig="~/.kube/other")

- **Names**: pod `sh-<pool>-<hash>-<node>`, a DNS-1123 name whatever the pool is called (lower-cased, other
  characters folded to '-', cut, with a hash of the pool's id so two pools never share one); labels
  `skyhive.dev/pool` (a valid label value, likewise) and `skyhive.dev/node`; the pool's id in an annotation.
- **Resources by the scheduler's rules**: the task's CPUs and memory as requests; GPUs as `nvidia.com/gpu`
  in limits (an extended resource: its request defaults to its limit); an accelerator model ("A100")
  becomes a node selector on the GPU product label (`nvidia.com/gpu.product`, NVIDIA's GPU feature
  discovery; `cloud.google.com/gke-accelerator` on GKE) when the cluster's nodes carry one that matches
  (listing nodes needs a cluster-wide `list nodes`: without it no selector is set, and the GPU count is
  the scheduler's only rule).
- **Pending**: a pod the scheduler cannot place (PodScheduled False, reason Unschedulable) fails its node
  after `unschedulable_timeout` seconds with the scheduler's own message ("0/3 nodes are available: 3
  Insufficient nvidia.com/gpu."); an image that cannot be pulled fails at once; any pod still Pending
  after `pending_timeout` fails. Whatever failed is deleted (`launch`'s contract: nothing is left).
- `terminate` deletes the pods and returns once they are gone; `list_owned` finds a pool's pods by label.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio

from ..errors import ProvisionError
from . import accelerators
from .base import ClusterSpec, NodeHandle, Provider, Reach
from .features import Feature, Features
from .kubernetes_api import api_error, core_api, kubernetes_client

log = logging.getLogger("skyhive.kubernetes")

__all__ = ["Kubernetes", "PodReach", "pod_name", "label_value", "POOL_LABEL", "NODE_LABEL", "DEFAULT_IMAGE"]

POOL_LABEL = "skyhive.dev/pool"
NODE_LABEL = "skyhive.dev/node"
POOL_ANNOTATION = "skyhive.dev/pool-id"
CONTAINER = "skyhive"
#: an image with Python >= 3.11 (bootstrap builds the Image's environment with it)
DEFAULT_IMAGE = "python:3.12-slim"
#: the container's main process: says its pid (a kept pool's autostop ends the container through it), waits,
#: and ends on SIGTERM (the pod's deletion) without waiting out its grace period
KEEPALIVE = ('echo $$ > "/tmp/skyhive-main-$HOSTNAME.pid"; trap \'exit 0\' TERM; '
             "while :; do sleep 3600 & wait $!; done")
#: the GPU product labels the scheduler can select on: NVIDIA GPU feature discovery's, GKE's
GPU_PRODUCT_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")
#: (verb, resource) a pool needs in its namespace: what `check` asks (docs/kubernetes.md: the Role)
NEEDED = (("create", "pods"), ("get", "pods"), ("list", "pods"), ("watch", "pods"), ("delete", "pods"),
          ("create", "pods/exec"), ("get", "pods/log"), ("create", "pods/portforward"), ("list", "events"))
#: container waiting reasons that never resolve by waiting
_FATAL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                            "CreateContainerError"})


def _slug(text: str, limit: int) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return s or "pool"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def pod_name(pool_id: str, node: int, launch: int = 0) -> str:
    """The pod of node `node` of pool `pool_id` (its `launch`-th replacement after the first): a DNS-1123
    subdomain (and label) of at most 63 characters."""
    return f"sh-{_slug(pool_id, 40)}-{_digest(pool_id)}-{node}" + (f"-r{launch}" if launch else "")


def label_value(pool_id: str) -> str:
    """`pool_id` as a label value: itself when valid, else folded, cut and made unique with a hash."""
    if len(pool_id) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", pool_id):
        return pool_id
    return f"{_slug(pool_id, 50)}-{_digest(pool_id)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodReach(Reach):
    """A node that is a pod, reached over `pods/exec` through the kubeconfig's context."""

    kind: ClassVar[str] = "kubernetes"
    pod: str
    namespace: str = "default"
    context: str | None = None
    kubeconfig: str | None = None
    container: str = CONTAINER
    python: str | None = None  # the interpreter bootstrap uses (None: it looks for python3.X, then python3)


def pod_problem(pod: Any, name: str, namespace: str) -> str | None:
    """Why pod `name` is lost, as the API shows it now (`pod` None: it is gone), or None."""
    where = f"pod {name} (namespace {namespace})"
    if pod is None:
        return f"{where} was deleted"
    meta, status = pod.metadata, pod.status
    if meta.deletion_timestamp is not None:
        return f"{where} is being deleted (Terminating, grace period {meta.deletion_grace_period_seconds} s)"
    if status is not None and status.phase in ("Failed", "Succeeded", "Unknown"):
        why = status.reason or status.phase
        return f"{where} is {status.phase}" + (f": {why}: {status.message}" if status.message else f" ({why})")
    return None


class Kubernetes(Provider):
    """Pods of a Kubernetes cluster (see the module docstring). `context`: the kubeconfig context (None:
    its current one); `kubeconfig`: its path (None: `KUBECONFIG`, ~/.kube/config, or the in-cluster service
    account); `image`: the pods' image (a Python >= 3.11 in it); `python`: its interpreter when not on PATH."""

    name = "kubernetes"
    features: ClassVar[Features] = Features(Feature.KEEP, Feature.CREATES_MACHINES, Feature.CHECK, cannot={
        Feature.STOP: "a pod cannot be stopped and started again: `skyhive down NAME` deletes its pods",
        Feature.OPEN_PORTS: "a pod's ports are reached with `skyhive forward` (a port-forward over the API server), "
                            "not opened on a firewall",
        Feature.AUTOSTOP_HOOK: "the pool's autostop runs in its pods' own watchdog, which runs no hook yet: remove "
                               "the hook (autostop alone works there)"})
    chooses = frozenset({"accelerator", "cpus", "memory_gb"})
    state_map: ClassVar[dict[str, str]] = {"pending": "provisioning", "running": "running", "failed": "failed",
                                           "succeeded": "terminated", "terminating": "terminating"}
    #: seconds a pod may stay Unschedulable before its node fails with the scheduler's message
    unschedulable_timeout = 20.0
    pending_timeout = 600.0
    terminate_timeout = 120.0
    #: seconds a deleted pod's containers get to stop (the pod's terminationGracePeriodSeconds)
    grace_period = 5

    @classmethod
    def infra(cls, text: str, parts: Sequence[str], **files: str | None) -> dict[str, Any]:
        """`k8s` / `kubernetes` (the current context), or `k8s/CONTEXT`."""
        if len(parts) > 1 or (parts and not parts[0]):
            raise ValueError(f"{text!r}: expected k8s, kubernetes or k8s/CONTEXT")
        return {"options": (("context", parts[0]),) if parts else ()}

    def __init__(self, context: str | None = None, namespace: str = "default", image: str | None = None,
                 kubeconfig: str | None = None, *, python: str | None = None) -> None:
        if not namespace or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", namespace) or len(namespace) > 63:
            raise ValueError(f"namespace {namespace!r} is not a valid Kubernetes namespace name (a DNS-1123 label)")
        self.context = context
        self.namespace = namespace
        self.image = image or DEFAULT_IMAGE
        self.kubeconfig = kubeconfig
        self.python = python
        self._launches: dict[tuple[str, int], int] = {}  # (pool, node) -> pods made for it (a replacement: > 1)

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "context": self.context, "namespace": self.namespace, "image": self.image,
                "kubeconfig": self.kubeconfig, "python": self.python}

    def _api(self) -> Any:
        return core_api(self.kubeconfig, self.context)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(fn, *args, **kwargs)

    # ---- what a pod asks ---------------------------------------------------------------------------------

    def _gpu_selector(self, model: str) -> dict[str, str]:
        """A node selector for GPU `model` on the labels the cluster's nodes carry, or {} (none matches,
        or the nodes cannot be listed)."""
        try:
            nodes = self._api().list_node(_request_timeout=30).items
        except Exception as exc:  # noqa: BLE001 - forbidden (no cluster-wide list nodes) or unreachable
            log.info("kubernetes: cannot list nodes to find GPU %s (%s): no node selector", model, api_error(exc)[2])
            return {}
        want = model.lower().replace("-", "")
        for key in GPU_PRODUCT_LABELS:
            products = sorted({(n.metadata.labels or {}).get(key, "") for n in nodes} - {""})
            matching = [p for p in products if want in p.lower().replace("-", "")]
            if matching:
                return {key: matching[0]}
        return {}

    def pod_body(self, spec: ClusterSpec, node: int) -> dict[str, Any]:
        """The pod of `node` for `spec`."""
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        if spec.cpus:
            requests["cpu"] = f"{int(round(spec.cpus * 1000))}m"
        if spec.memory_gb:
            requests["memory"] = f"{int(round(spec.memory_gb * 1024))}Mi"
        selector: dict[str, str] = {}
        acc = accelerators.parse(spec.accelerator)
        if acc is not None:
            limits["nvidia.com/gpu"] = str(acc.count)
            if not accelerators.is_generic(acc.name):
                selector = self._gpu_selector(acc.name)
        container: dict[str, Any] = {"name": CONTAINER, "image": self.image, "command": ["/bin/sh", "-c", KEEPALIVE],
                                     "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(spec.pool_id, node, self._launches.get((spec.pool_id, node), 1) - 1),
                         "labels": {POOL_LABEL: label_value(spec.pool_id), NODE_LABEL: str(node),
                                    "app.kubernetes.io/managed-by": "skyhive"},
                         "annotations": {POOL_ANNOTATION: spec.pool_id}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": self.grace_period,
                     "containers": [container]}}
        if selector:
            body["spec"]["nodeSelector"] = selector
        return body

    def _handle(self, pod_name_: str, node: int, *, addr: str = "", state: str = "", gpus: int = 0,
                model: str | None = None) -> NodeHandle:
        return NodeHandle(node=node, provider_id=pod_name_, private_addr=addr, state=state, accelerators=gpus,
                          accelerator=model, reach=PodReach(pod=pod_name_, namespace=self.namespace, context=self.context,
                                                            kubeconfig=self.kubeconfig, python=self.python))

    # ---- the phases (see `Provider`) ---------------------------------------------------------------------

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        api = self._api()
        acc = accelerators.parse(spec.accelerator)
        made: list[NodeHandle] = []
        try:
            for node in nodes:
                self._launches[(spec.pool_id, node)] = self._launches.get((spec.pool_id, node), 0) + 1
                body = await asyncio.to_thread(self.pod_body, spec, node)
                name = body["metadata"]["name"]
                try:
                    await self._call(api.create_namespaced_pod, self.namespace, body, _request_timeout=60)
                except Exception as exc:  # noqa: BLE001 - ApiException: say the API's own reason
                    status, reason, message = api_error(exc)
                    raise ProvisionError(f"pod {name} (namespace {self.namespace}) was not created: "
                                         f"{status} {reason}: {message}", node=node) from None
                made.append(self._handle(name, node, state="Pending", gpus=acc.count if acc else 0,
                                         model=None if acc is None or accelerators.is_generic(acc.name) else acc.name))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.terminate(made)
            raise
        return made

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        api = self._api()
        name = handle.provider_id
        start = time.monotonic()
        unschedulable_since: float | None = None
        last = ""
        delay = 0.05
        while True:
            try:
                pod = await self._call(api.read_namespaced_pod, name, self.namespace, _request_timeout=30)
            except Exception as exc:  # noqa: BLE001
                status, reason, message = api_error(exc)
                if status == 404:
                    raise ProvisionError(f"pod {name} (namespace {self.namespace}) was deleted before it ran",
                                         node=handle.node) from None
                raise ProvisionError(f"pod {name}: {status} {reason}: {message}", node=handle.node) from None
            phase = pod.status.phase or "Pending"
            terminating = pod.metadata.deletion_timestamp is not None
            state = "Terminating" if terminating else phase
            if state != last:
                report(state)
                last = state
            if terminating or phase in ("Failed", "Succeeded", "Unknown"):
                raise ProvisionError(pod_problem(pod, name, self.namespace) or f"pod {name} is {phase}", node=handle.node)
            if phase == "Running":
                return NodeHandle(node=handle.node, provider_id=name, private_addr=pod.status.pod_ip or "",
                                  reach=handle.reach, accelerators=handle.accelerators, accelerator=handle.accelerator,
                                  state="Running")
            now = time.monotonic()
            cond = next((c for c in pod.status.conditions or () if c.type == "PodScheduled"), None)
            if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
                unschedulable_since = unschedulable_since or now
                if now - unschedulable_since >= self.unschedulable_timeout:
                    raise ProvisionError(f"pod {name} (namespace {self.namespace}) cannot be scheduled: {cond.message}",
                                         node=handle.node)
            else:
                unschedulable_since = None
            for cs in pod.status.container_statuses or ():
                waiting = cs.state.waiting if cs.state is not None else None
                if waiting is not None and waiting.reason in _FATAL_WAITING:
                    raise ProvisionError(f"pod {name}: container {cs.name}: {waiting.reason}: {waiting.message}",
                                         node=handle.node)
            if now - start > self.pending_timeout:
                raise ProvisionError(f"pod {name} was still {phase} after {self.pending_timeout:g} s", node=handle.node)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        api = self._api()
        names = [h.provider_id for h in handles]
        for name in names:
            try:
                await self._call(api.delete_namespaced_pod, name, self.namespace, _request_timeout=30)
            except Exception as exc:  # noqa: BLE001
                status, reason, message = api_error(exc)
                if status != 404:
                    raise ProvisionError(f"pod {name} (namespace {self.namespace}) was not deleted: {status} "
                                         f"{reason}: {message}") from None
        deadline = time.monotonic() + self.terminate_timeout
        pending = list(names)
        while pending:
            still = []
            for name in pending:
                try:
                    await self._call(api.read_namespaced_pod, name, self.namespace, _request_timeout=30)
                    still.append(name)
                except Exception as exc:  # noqa: BLE001
                    if api_error(exc)[0] != 404:
                        still.append(name)
            pending = still
            if pending and time.monotonic() > deadline:
                raise ProvisionError(f"pods {', '.join(pending)} (namespace {self.namespace}) were still there "
                                     f"{self.terminate_timeout:g} s after their deletion")
            if pending:
                await asyncio.sleep(0.1)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        api = self._api()
        pods = await self._call(api.list_namespaced_pod, self.namespace,
                                label_selector=f"{POOL_LABEL}={label_value(pool_id)}", _request_timeout=30)
        return [self._handle(p.metadata.name, int((p.metadata.labels or {}).get(NODE_LABEL, "0")),
                             addr=p.status.pod_ip or "", state=p.status.phase or "")
                for p in pods.items if (p.metadata.annotations or {}).get(POOL_ANNOTATION, pool_id) == pool_id]

    async def node_problem(self, handle: NodeHandle) -> str | None:
        try:
            pod = await self._call(self._api().read_namespaced_pod, handle.provider_id, self.namespace,
                                   _request_timeout=30)
        except Exception as exc:  # noqa: BLE001
            if api_error(exc)[0] == 404:
                return pod_problem(None, handle.provider_id, self.namespace)
            return None
        return pod_problem(pod, handle.provider_id, self.namespace)

    async def machines_gone(self, handles: Sequence[NodeHandle]) -> dict[int, str]:
        gone = {}
        for h in handles:
            why = await self.node_problem(h)
            if why is not None:
                gone[h.node] = why
        return gone

    @classmethod
    def check(cls) -> list[tuple[str, str]] | None:
        """Whether the kubeconfig's current context answers, and what this user may do in its namespace: each
        verb the pools use, asked with a SelfSubjectAccessReview (what `skyhive check` shows; nothing is made)."""
        provider = cls()
        where = f"namespace {provider.namespace}"
        try:
            api = provider._api()
        except ProvisionError as exc:
            return [("context", f"not found: {exc}")]
        try:
            api.list_namespaced_pod(provider.namespace, limit=1, _request_timeout=15)
        except Exception as exc:  # noqa: BLE001 - what `skyhive check` shows
            status, reason, message = api_error(exc)
            if status not in (401, 403):
                return [("context", f"not reachable: {message}")]
            lines = [("context", "reachable"), ("pods", f"refused in {where}: {status} {reason}: {message}")]
            if status == 401:
                return lines
        k8s = kubernetes_client()
        auth = k8s.client.AuthorizationV1Api(api.api_client)
        may, may_not = [], []
        for verb, resource in NEEDED:
            name, _, sub = resource.partition("/")
            review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"resourceAttributes": {"namespace": provider.namespace, "verb": verb, "resource": name,
                                                      **({"subresource": sub} if sub else {})}}}
            try:
                allowed = auth.create_self_subject_access_review(review, _request_timeout=15).status.allowed
            except Exception as exc:  # noqa: BLE001 - an API server without the review: say so, once
                return [("context", "reachable"), ("permissions", f"cannot be asked: {api_error(exc)[2]}")]
            (may if allowed else may_not).append(f"{verb} {resource}")
        lines = [("context", "reachable"), ("may", f"{', '.join(may) or 'nothing'} in {where}")]
        if may_not:
            lines.append(("may not", f"{', '.join(may_not)} (docs/kubernetes.md: the Role a pool needs)"))
        return lines
