"""The FAKE API server for these tests (tests/kinds/kubernetes/fakeapi: labelled as a fake, listening on
127.0.0.1 only) and a kubeconfig that reaches it, as `KUBECONFIG`. After each test, nothing of it is left:
no pod object and no process of any pod (checked, then killed so one failure does not spill over)."""

from __future__ import annotations

import pytest

from tests.kinds.kubernetes.fakeapi.cluster import FakeNode, pod_processes
from tests.kinds.kubernetes.fakeapi.server import FakeAPIServer

#: the fake cluster's nodes: two CPU nodes without GPUs (unless a test gives others)
CPU_NODES = [FakeNode("fake-node-1"), FakeNode("fake-node-2")]


def gpu_nodes() -> list[FakeNode]:
    """A cluster with one labelled A100 node (NVIDIA's GPU feature discovery labels) and one CPU node."""
    return [FakeNode("fake-gpu-1", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2"},
                     allocatable={"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"}),
            FakeNode("fake-node-1")]


@pytest.fixture
def fake_nodes() -> list[FakeNode]:
    return [FakeNode(n.name, dict(n.labels), dict(n.allocatable)) for n in CPU_NODES]


@pytest.fixture
def fake_k8s(tmp_path, monkeypatch, fake_nodes):
    """FAKE: an API server with `fake_nodes`, reached through `KUBECONFIG` (context "fake", namespace default)."""
    root = tmp_path / "fake-k8s-pods"
    root.mkdir()
    server = FakeAPIServer(str(root), fake_nodes).start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    try:
        yield server
    finally:
        left = server.call(_left(server))
        server.stop()
        assert not left, f"the test left pods (or their processes) behind: {left}"


async def _left(server: FakeAPIServer) -> list[str]:
    import asyncio

    cluster = server.cluster
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60  # a pod being deleted finishes its grace period
    while any(p["metadata"].get("deletionTimestamp") for p in cluster.pods.values()) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    left = [f"pod {ns}/{name} ({p['status'].get('phase')}, processes {pod_processes(p['metadata']['uid'])})"
            for (ns, name), p in cluster.pods.items()]
    uids = {h[2]["metadata"]["uid"] for h in cluster.history} - {p["metadata"]["uid"] for p in cluster.pods.values()}
    left += [f"processes {pids} of a deleted pod" for uid in uids if (pids := pod_processes(uid))]
    await cluster.shutdown()
    return left
