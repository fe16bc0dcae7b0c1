"""The official `kubernetes` client, imported lazily (a `ProviderNotAvailable` saying what to install), and
a `CoreV1Api` for a kubeconfig's context or the in-cluster service account — shared by the provider
(`providers/kubernetes.py`) and the node kind (`runtime/kinds/kubernetes/`). The client is synchronous
(urllib3, websocket-client): callers run it in worker threads, never on the event loop.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from ..errors import ProviderNotAvailable, ProvisionError

log = logging.getLogger("skyhive.kubernetes")

__all__ = ["kubernetes_client", "core_api", "exec_api", "api_error", "INSTALL_HINT"]

INSTALL_HINT = "pip install 'skyhive[kubernetes]' (the official kubernetes client)"
_CLIENTS: dict[tuple[str | None, str | None], Any] = {}
_LOCK = threading.Lock()


def kubernetes_client() -> Any:
    """The `kubernetes` package, imported on first use; `ProviderNotAvailable` saying what to install."""
    try:
        import kubernetes
    except ImportError:
        raise ProviderNotAvailable(f"sky.Kubernetes needs the kubernetes client: {INSTALL_HINT}") from None
    return kubernetes


def core_api(kubeconfig: str | None, context: str | None) -> Any:
    """A `CoreV1Api` for `context` of `kubeconfig` (None: `KUBECONFIG`, else ~/.kube/config, each at its
    current context), or the pod's service account when no kubeconfig exists and this runs in a cluster.
    Raises `ProvisionError` naming the file and context when neither works."""
    key = (kubeconfig or os.environ.get("KUBECONFIG"), context)
    with _LOCK:
        api = _CLIENTS.get(key)
        if api is not None:
            return api
        k8s = kubernetes_client()
        path = key[0] or os.path.expanduser("~/.kube/config")
        try:
            if os.path.exists(path.split(os.pathsep)[0]) or key[0]:
                client = k8s.config.new_client_from_config(config_file=key[0], context=context)
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                conf = k8s.client.Configuration()
                k8s.config.load_incluster_config(client_configuration=conf)
                client = k8s.client.ApiClient(conf)
            else:
                raise ProvisionError(f"no kubeconfig at {path} and not running in a cluster: set KUBECONFIG or "
                                     "pass sky.Kubernetes(kubeconfig=...)")
        except (k8s.config.ConfigException, OSError, ValueError) as exc:
            raise ProvisionError(f"kubeconfig {path}" + (f", context {context!r}" if context else "")
                                 + f": {exc}") from None
        api = _CLIENTS[key] = k8s.client.CoreV1Api(client)
        return api


def exec_api(kubeconfig: str | None, context: str | None) -> Any:
    """A `CoreV1Api` of its own for one `pods/exec` or `portforward` stream: the client's `stream()` swaps its
    ApiClient's `call_api` while it connects, which would send another thread's calls on a shared client
    over a WebSocket; each stream gets a fresh ApiClient on the same configuration."""
    k8s = kubernetes_client()
    shared = core_api(kubeconfig, context)
    return k8s.client.CoreV1Api(k8s.client.ApiClient(shared.api_client.configuration))


def api_error(exc: BaseException) -> tuple[int, str, str]:
    """(HTTP status, the Status reason, its message) of a client error, for messages; (0, "", str) else."""
    import json

    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    if not isinstance(status, int):
        return 0, "", str(exc)
    try:
        parsed = json.loads(body or "{}")
    except ValueError:
        parsed = {}
    return status, str(parsed.get("reason") or getattr(exc, "reason", "")), str(parsed.get("message") or body or exc)
