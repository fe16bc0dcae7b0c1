"""Opt-in smoke test against a REAL Kubernetes cluster: a 2-pod pool broadcasts, and nothing is left (no pod
of the pool in the namespace). Runs only with `SKYHIVE_REAL_K8S=1` and a kubeconfig (`KUBECONFIG`; the
context `SKYHIVE_K8S_CONTEXT`, else the current one; the namespace `SKYHIVE_K8S_NAMESPACE`, else default;
the image `SKYHIVE_K8S_IMAGE`, else python:3.12-slim). Costs what two small pods cost for a minute."""

from __future__ import annotations

import os
import socket

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("SKYHIVE_REAL_K8S") != "1" or not os.environ.get("KUBECONFIG"),
    reason="the real-cluster smoke test is opt-in: set SKYHIVE_REAL_K8S=1 and KUBECONFIG (no cluster is "
           "reachable from the test machines, and nothing here may reach one by accident)")


def where() -> str:
    return socket.gethostname()


@pytest.mark.anyio
async def test_a_two_pod_pool_on_a_real_cluster_leaves_nothing():
    pytest.importorskip("kubernetes")
    import skyhive as sky
    from skyhive.providers.kubernetes import POOL_LABEL, label_value
    from skyhive.providers.kubernetes_api import core_api

    provider = sky.Kubernetes(context=os.environ.get("SKYHIVE_K8S_CONTEXT"),
                              namespace=os.environ.get("SKYHIVE_K8S_NAMESPACE", "default"),
                              image=os.environ.get("SKYHIVE_K8S_IMAGE"), kubeconfig=os.environ["KUBECONFIG"])
    async with sky.Pool(provider=provider, nodes=2) as pool:
        hosts = await pool.broadcast(where)
        pool_id = pool.id
    assert len(set(hosts)) == 2 and all(h.startswith("sh-") for h in hosts)
    left = core_api(provider.kubeconfig, provider.context).list_namespaced_pod(provider.namespace, label_selector=f"{POOL_LABEL}={label_value(pool_id)}")
    assert left.items == [], [p.metadata.name for p in left.items]
