"""`sky.Kubernetes` pools on the FAKE API server (tests/kinds/kubernetes/fakeapi), driven through the official
client: pods created by the scheduler's rules, workers bootstrapped and run over `pods/exec`, a pod's loss
seen and named, nothing left behind."""

from __future__ import annotations

import os
import socket
import time

import anyio
import pytest

pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed (pip install -e '.[kubernetes]')")

import skyhive as sky  # noqa: E402
from skyhive.providers.base import ClusterSpec  # noqa: E402
from tests.kinds.kubernetes.conftest import gpu_nodes  # noqa: E402
from tests.kinds.kubernetes.fakeapi.cluster import pod_processes  # noqa: E402


def where() -> tuple[str, str, str]:
    return os.environ["HOSTNAME"], os.environ["FAKE_K8S_POD"], socket.gethostname()


def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


def provider() -> sky.Kubernetes:
    return sky.Kubernetes(kubeconfig=os.environ["KUBECONFIG"])


def all_uids(fake) -> set[str]:
    return {h[2]["metadata"]["uid"] for h in fake.cluster.history}


@pytest.mark.anyio
async def test_a_two_pod_pool_broadcasts_and_leaves_no_pod_and_no_process(fake_k8s):
    async with sky.Pool(provider=provider(), nodes=2) as pool:
        results = await pool.broadcast(where)
        pods = sorted(fake_k8s.cluster.pods)
    names = [name for _, name in pods]
    assert len(names) == 2 and [r[0] for r in results] == names  # node i ran in pod i
    assert all(n.startswith("sh-") and n.endswith(f"-{i}") for i, n in enumerate(names))
    # every command, the workers included, went over pods/exec
    assert {e["pod"] for e in fake_k8s.execs} == set(names)
    assert all(e["protocol"] == "v5.channel.k8s.io" for e in fake_k8s.execs)
    assert fake_k8s.cluster.pods == {}, "a pod outlived its pool"
    assert not [u for u in all_uids(fake_k8s) if pod_processes(u)], "a pod's process outlived its pool"


@pytest.mark.anyio
@pytest.mark.parametrize("fake_nodes", [gpu_nodes()])
async def test_names_gpu_limits_and_selector_then_unschedulable_fails_naming_the_scheduler_and_leaves_nothing(fake_k8s):
    spec = ClusterSpec(pool_id="Train_GPT2.v1", nodes=1, accelerator="A100", cpus=2, memory_gb=4)
    body = await anyio.to_thread.run_sync(provider().pod_body, spec, 0)
    assert body["metadata"]["name"] == "sh-train-gpt2-v1-3922b8-0"
    assert body["metadata"]["labels"]["skyhive.dev/pool"] == "Train_GPT2.v1"
    container = body["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "2000m", "memory": "4096Mi"}, "limits": {"nvidia.com/gpu": "1"}}
    assert body["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    # the real wire: a named pool of an odd name is accepted by the API server's rules, its GPU placed
    async with sky.Pool(provider=provider(), nodes=1, name="Train_GPT2.v1", accelerator="A100") as pool:
        assert len(await pool.broadcast(where)) == 1
        sent = fake_k8s.cluster.requests_seen[-1]
        assert sent["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert [p["spec"]["nodeName"] for p in fake_k8s.cluster.pods.values()] == ["fake-gpu-1"]
    assert fake_k8s.cluster.pods == {}


@pytest.mark.anyio
async def test_a_gpu_on_a_cluster_without_gpus_fails_within_60s_with_the_schedulers_reason_leaving_no_pod(fake_k8s):
    started = time.monotonic()
    with pytest.raises(sky.ProvisionError) as caught:
        async with sky.Pool(provider=provider(), nodes=1, accelerator="gpu:1") as pool:
            await pool.broadcast(where)
    assert time.monotonic() - started < 60
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu" in str(caught.value)
    assert fake_k8s.cluster.pods == {}


def hostname() -> str:
    return os.environ["HOSTNAME"]


@pytest.mark.anyio
async def test_a_pod_deleted_from_outside_fails_the_next_call_naming_it_and_replace_failed_replaces_it(fake_k8s):
    settings = dict(heartbeat_interval=1.0, heartbeat_timeout=10.0)
    async with sky.Pool(provider=provider(), nodes=2, **settings) as pool:
        names = await pool.broadcast(hostname)
        victim = names[1]
        started = time.monotonic()
        fake_k8s.call(fake_k8s.cluster.delete_pod("default", victim, None))
        with pytest.raises(sky.WorkerLost) as caught:
            await pool.broadcast(slow, 30)
        assert time.monotonic() - started < 10.0 + 5
        assert f"pod {victim}" in str(caught.value)
    assert fake_k8s.cluster.pods == {}

    async with sky.Pool(provider=provider(), nodes=2, replace_failed=True, **settings) as pool:
        names = await pool.broadcast(hostname)
        fake_k8s.call(fake_k8s.cluster.delete_pod("default", names[1], None))
        deadline = time.monotonic() + 120
        while True:
            try:
                now = await pool.broadcast(hostname)
                if now[1] != names[1]:
                    break
            except sky.WorkerLost:
                pass
            assert time.monotonic() < deadline, "node 1 was never replaced"
            await anyio.sleep(0.5)
        assert now[0] == names[0] and now[1] != names[1]
    assert fake_k8s.cluster.pods == {}
