"""The FAKE API server speaks the protocol: the official `kubernetes` client drives it (create, watch, exec
with stdin, a non-zero exit on channel 3), and it refuses what the real API server refuses, answering each
refusal with a `Status` (the rules and their reference pages: fakeapi/rules.py, fakeapi/cluster.py)."""

from __future__ import annotations

import json
import os
import time

import pytest

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed (pip install -e '.[kubernetes]')")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from kubernetes.stream import stream  # noqa: E402

from tests.kinds.kubernetes.conftest import gpu_nodes  # noqa: E402
from tests.kinds.kubernetes.fakeapi.cluster import pod_processes  # noqa: E402


def api() -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))


def pod_body(name: str, **container: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "fake-test"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "python:3.11-slim",
                                     "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"], **container}]}}


def wait_phase(v1: client.CoreV1Api, name: str, phase: str, timeout: float = 60) -> client.V1Pod:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = v1.read_namespaced_pod(name, "default")
        if pod.status.phase == phase:
            return pod
        time.sleep(0.05)
    raise AssertionError(f"pod {name} never reached {phase}")


def delete_and_wait(v1: client.CoreV1Api, name: str) -> None:
    try:
        v1.delete_namespaced_pod(name, "default")
    except ApiException as exc:
        assert exc.status == 404  # gone already (a pod never scheduled goes at once)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            v1.read_namespaced_pod(name, "default")
        except ApiException as exc:
            assert exc.status == 404
            return
        time.sleep(0.05)
    raise AssertionError(f"pod {name} was never deleted")


def test_the_fake_listens_on_loopback_only_and_says_it_is_a_fake(fake_k8s):
    import urllib.request

    assert fake_k8s.url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(f"{fake_k8s.url}/version", timeout=10) as resp:
        assert resp.headers["server"].startswith("FAKE kube-apiserver")
    listening = [ln.split() for ln in open("/proc/net/tcp").read().splitlines()[1:] + open("/proc/net/tcp6").read().splitlines()[1:]]
    ours = [cols[1] for cols in listening if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == fake_k8s.port]
    assert ours == ["0100007F:%04X" % fake_k8s.port], ours  # 127.0.0.1 only


def test_create_watch_running_with_conditions_exec_with_stdin_and_delete_terminating(fake_k8s):
    v1 = api()
    created = v1.create_namespaced_pod("default", pod_body("fake-one"))
    assert created.status.phase == "Pending" and not created.status.conditions
    w = watch.Watch()
    seen = []
    for event in w.stream(v1.list_namespaced_pod, "default", label_selector="app=fake-test",
                          resource_version=created.metadata.resource_version, timeout_seconds=30):
        pod = event["object"]
        seen.append((event["type"], pod.status.phase))
        if pod.status.phase == "Running":
            w.stop()
    assert seen[-1] == ("MODIFIED", "Running")
    running = v1.read_namespaced_pod("fake-one", "default")
    conditions = {c.type: c.status for c in running.status.conditions}
    assert conditions == {"PodScheduled": "True", "Initialized": "True", "Ready": "True", "ContainersReady": "True"}
    assert running.spec.node_name in ("fake-node-1", "fake-node-2")
    assert int(running.metadata.resource_version) > int(created.metadata.resource_version)

    # exec with stdin: the command reads what the client writes (binary, channel 0) and answers on channel 1
    ws = stream(v1.connect_get_namespaced_pod_exec, "fake-one", "default", command=["sh", "-c", "read x; echo got-$x; echo oops >&2"],
                stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)
    assert ws.subprotocol == "v5.channel.k8s.io"
    ws.write_stdin(b"hello\n")
    ws.run_forever(timeout=30)
    assert ws.read_stdout() == b"got-hello\n" and ws.read_stderr() == b"oops\n"
    assert ws.returncode == 0

    # stdin's end with v5's close signal: `cat` sees EOF and exits
    ws = stream(v1.connect_get_namespaced_pod_exec, "fake-one", "default", command=["cat"], stdin=True, stdout=True,
                stderr=True, tty=False, _preload_content=False, binary=True)
    ws.write_stdin(b"abc")
    ws.close_channel(0)
    ws.run_forever(timeout=30)
    assert ws.read_stdout() == b"abc" and ws.returncode == 0

    uid = running.metadata.uid
    assert pod_processes(uid), "the pod's container runs as a local process"
    deleted = v1.delete_namespaced_pod("fake-one", "default")
    assert deleted.metadata.deletion_timestamp is not None and deleted.metadata.deletion_grace_period_seconds == 2
    delete_and_wait(v1, "fake-one")
    assert not pod_processes(uid)


def test_a_non_zero_exit_arrives_on_channel_3_as_a_status(fake_k8s):
    v1 = api()
    v1.create_namespaced_pod("default", pod_body("fake-exit"))
    wait_phase(v1, "fake-exit", "Running")
    ws = stream(v1.connect_get_namespaced_pod_exec, "fake-exit", "default", command=["sh", "-c", "exit 7"], stdin=False,
                stdout=True, stderr=True, tty=False, _preload_content=False)
    ws.run_forever(timeout=30)
    assert ws.returncode == 7
    # the raw channel-3 Status, as the real server writes it
    ws = stream(v1.connect_get_namespaced_pod_exec, "fake-exit", "default", command=["sh", "-c", "exit 3"], stdin=False,
                stdout=True, stderr=True, tty=False, _preload_content=False)
    ws.run_forever(timeout=30)
    err = json.loads(ws.read_channel(3))
    assert err["status"] == "Failure" and err["reason"] == "NonZeroExitCode"
    assert err["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    # v4 only (an older client): the same framing, exit status on channel 3
    from kubernetes.stream.ws_client import WSClient, get_websocket_url

    conf = v1.api_client.configuration
    url = get_websocket_url(f"{conf.host}/api/v1/namespaces/default/pods/fake-exit/exec",
                            [("command", ["sh", "-c", "echo v4; exit 2"]), ("stdout", "true"), ("stderr", "true")])
    ws = WSClient(conf, url, {"authorization": f"Bearer {fake_k8s.TOKEN}",
                              "sec-websocket-protocol": "v4.channel.k8s.io"}, capture_all=True)
    assert ws.subprotocol == "v4.channel.k8s.io"
    ws.run_forever(timeout=30)
    assert ws.read_stdout() == "v4\n" and ws.returncode == 2
    # a subprotocol the server does not speak is refused
    with pytest.raises(Exception, match="400|Handshake|handshake"):
        WSClient(conf, url, {"authorization": f"Bearer {fake_k8s.TOKEN}",
                             "sec-websocket-protocol": "channel.k8s.io"}, capture_all=True)
    delete_and_wait(v1, "fake-exit")


def _refusal(exc: ApiException) -> dict:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def test_names_labels_quantities_and_extended_resources_are_refused_as_the_real_server_does(fake_k8s):
    v1 = api()
    bad = [
        (pod_body("Train_GPT2.v1"), "metadata.name"),  # upper case and '_' are no DNS subdomain
        (pod_body("x" * 254), "metadata.name"),
        ({**pod_body("ok-labels"), "metadata": {"name": "ok-labels", "labels": {"pool": "Train GPT2"}}}, "metadata.labels"),
        ({**pod_body("ok-labels"), "metadata": {"name": "ok-labels", "labels": {"pool": "x" * 64}}}, "metadata.labels"),
        (pod_body("bad-cpu", resources={"requests": {"cpu": "two"}}), "spec.containers[0].resources.requests[cpu]"),
        (pod_body("bad-mem", resources={"limits": {"memory": "1GB"}}), "spec.containers[0].resources.limits[memory]"),
        (pod_body("gpu-req", resources={"requests": {"nvidia.com/gpu": "1"}}), "spec.containers[0].resources.limits[nvidia.com/gpu]"),
        (pod_body("gpu-neq", resources={"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}),
         "spec.containers[0].resources.requests[nvidia.com/gpu]"),
        (pod_body("gpu-half", resources={"limits": {"nvidia.com/gpu": "500m"}}), "spec.containers[0].resources.limits[nvidia.com/gpu]"),
        (pod_body("cpu-over", resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}), "spec.containers[0].resources.requests[cpu]"),
    ]
    for body, field in bad:
        with pytest.raises(ApiException) as caught:
            v1.create_namespaced_pod("default", body)
        assert caught.value.status == 422, body
        status = _refusal(caught.value)
        assert status["reason"] == "Invalid" and field in [c["field"] for c in status["details"]["causes"]], (field, status)
    assert fake_k8s.cluster.pods == {}

    # quantities in every valid spelling pass; a GPU asked in limits only gets the request from it
    ok = pod_body("quantities", resources={"requests": {"cpu": "500m", "memory": "1.5Gi"},
                                           "limits": {"cpu": "1", "memory": "2e9"}})
    v1.create_namespaced_pod("default", ok)
    with pytest.raises(ApiException) as caught:
        v1.create_namespaced_pod("default", ok)
    assert caught.value.status == 409
    status = _refusal(caught.value)
    assert status["reason"] == "AlreadyExists" and status["details"] == {"kind": "pods", "name": "quantities"}
    with pytest.raises(ApiException) as caught:
        v1.read_namespaced_pod("no-such-pod", "default")
    assert caught.value.status == 404 and _refusal(caught.value)["reason"] == "NotFound"
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(client.ApiClient(client.Configuration(host=fake_k8s.url))).list_namespaced_pod("default")
    assert caught.value.status == 401 and _refusal(caught.value)["reason"] == "Unauthorized"
    delete_and_wait(v1, "quantities")


@pytest.mark.parametrize("fake_nodes", [gpu_nodes()])
def test_unschedulable_with_the_schedulers_message_then_deleted_at_once(fake_k8s):
    v1 = api()
    body = pod_body("too-many-gpus", resources={"limits": {"nvidia.com/gpu": "4"}})
    created = v1.create_namespaced_pod("default", body)
    assert created.spec.containers[0].resources.requests == {"nvidia.com/gpu": "4"}  # defaulted from the limit
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pod = v1.read_namespaced_pod("too-many-gpus", "default")
        if pod.status.conditions:
            break
        time.sleep(0.05)
    cond = pod.status.conditions[0]
    assert (pod.status.phase, cond.type, cond.status, cond.reason) == ("Pending", "PodScheduled", "False", "Unschedulable")
    assert cond.message.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    events = v1.list_namespaced_event("default", field_selector="involvedObject.name=too-many-gpus").items
    assert [e.reason for e in events] == ["FailedScheduling"]
    # a GPU the cluster has is placed on the labelled node; a selector nothing matches is unschedulable
    v1.create_namespaced_pod("default", pod_body("one-gpu", resources={"limits": {"nvidia.com/gpu": "1"}}))
    assert wait_phase(v1, "one-gpu", "Running").spec.node_name == "fake-gpu-1"
    h100 = pod_body("h100")
    h100["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    v1.create_namespaced_pod("default", h100)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not v1.read_namespaced_pod("h100", "default").status.conditions:
        time.sleep(0.05)
    assert "2 node(s) didn't match Pod's node affinity/selector" in v1.read_namespaced_pod("h100", "default").status.conditions[0].message
    # a pod never scheduled is deleted without a grace period
    deleted = v1.delete_namespaced_pod("too-many-gpus", "default")
    assert deleted.metadata.deletion_grace_period_seconds == 0
    for name in ("too-many-gpus", "one-gpu", "h100"):
        delete_and_wait(v1, name)


def test_a_watch_from_a_compacted_resource_version_is_expired(fake_k8s):
    v1 = api()
    v1.create_namespaced_pod("default", pod_body("fake-rv"))
    wait_phase(v1, "fake-rv", "Running")
    fake_k8s.cluster.compacted = fake_k8s.cluster.rv
    w = watch.Watch()
    with pytest.raises(ApiException) as caught:
        for _ in w.stream(v1.list_namespaced_pod, "default", resource_version="1", timeout_seconds=10):
            pass
    assert caught.value.status == 410
    delete_and_wait(v1, "fake-rv")
