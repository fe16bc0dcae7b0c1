"""A kept Kubernetes pool through the real CLI, on the FAKE API server (tests/kinds/kubernetes/fakeapi):
`skyhive launch -c NAME task.yaml --infra k8s` keeps its workers detached in the pods (a socket each, reached
through a relay exec'd in the pod: no sshd, no port), `skyhive exec` takes them over, `skyhive ssh NAME --
echo hi` is an exec in the pod (the kind's `NodeAccess`), and `skyhive down NAME` deletes the pods."""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap
import time

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed (pip install -e '.[kubernetes]')")

from tests.clusters.test_access import listener_and_free_port  # noqa: E402
from tests.clusters.test_clusters import SKYHIVE, record, skyhive  # noqa: E402
from tests.procs import Lines  # noqa: E402
from tests.kinds.kubernetes.fakeapi.cluster import pod_processes  # noqa: E402


@pytest.fixture
def kube_task(tmp_path, fake_k8s, skyhive_home, monkeypatch):
    """A 2-node task file; every pool is taken down at the end."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH")])))
    task = tmp_path / "task.yaml"
    task.write_text(textwrap.dedent("""\
        name: kt
        num_nodes: 2
        run: echo "ran on $SKYPILOT_NODE_RANK in $HOSTNAME"
    """))
    try:
        yield task
    finally:
        from skyhive.runtime.clusters import record as records
        from skyhive.runtime.control.pools import down_cluster

        for name in records.names():
            down_cluster(name, quiet=True)


def test_launch_c_exec_and_down_leave_no_pod(kube_task, fake_k8s, skyhive_home, tmp_path):
    launched = skyhive("launch", "-y", "-c", "kt", str(kube_task), "--infra", "k8s", cwd=tmp_path, timeout=300)
    assert launched.returncode == 0, (launched.stdout[-3000:], launched.stderr[-3000:])
    pods = sorted(name for _, name in fake_k8s.cluster.pods)
    assert len(pods) == 2
    assert f"ran on 0 in {pods[0]}" in launched.stdout and f"ran on 1 in {pods[1]}" in launched.stdout
    rec = record(skyhive_home, "kt")
    assert (rec["keeper"], rec["provider"], rec["nodes"]) == ("kubernetes", "kubernetes", 2)
    assert rec["provider_info"]["pods"] == pods and "token" not in str(rec)
    assert all(w["socket"].startswith("/tmp/skyhive-pods/") for w in rec["workers"])

    # a later client takes the workers over, through relays exec'd in the pods
    again = skyhive("exec", "kt", "echo again on $SKYPILOT_NODE_RANK", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "again on 0" in again.stdout  # (an inline command runs on the head node)
    assert sorted(name for _, name in fake_k8s.cluster.pods) == pods  # the same pods
    status = skyhive("status", "kt", cwd=tmp_path)
    assert status.returncode == 0 and " UP " in status.stdout, status.stdout
    queue = skyhive("queue", "kt", cwd=tmp_path)
    assert queue.returncode == 0 and "SUCCEEDED" in queue.stdout, queue.stdout
    shown = skyhive("logs", "kt", "1", cwd=tmp_path)
    assert shown.returncode == 0 and f"ran on 1 in {pods[1]}" in shown.stdout, (shown.stdout, shown.stderr)

    uids = [p["metadata"]["uid"] for p in fake_k8s.cluster.pods.values()]
    down = skyhive("down", "kt", cwd=tmp_path, timeout=300)
    assert down.returncode == 0, down.stderr[-4000:]
    assert fake_k8s.cluster.pods == {}, "down left a pod"
    assert not [u for u in uids if pod_processes(u)]


def test_ssh_is_an_exec_in_the_pod(kube_task, fake_k8s, skyhive_home, tmp_path):
    """`skyhive ssh NAME -- echo hi` through the kind's access: `skyhive ssh` asks the keep support for the
    node's `NodeAccess`, no SSH anywhere."""
    launched = skyhive("launch", "-y", "-c", "kt", str(kube_task), "--infra", "k8s", cwd=tmp_path, timeout=300)
    assert launched.returncode == 0, launched.stderr[-4000:]
    done = skyhive("ssh", "kt", "--", "echo", "hi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hi"
    # (as with ssh, the words after -- are one command line for the node's shell)
    done = skyhive("ssh", "kt", "--node", "1", "--", "echo $HOSTNAME; exit 3", cwd=tmp_path)
    assert done.returncode == 3 and done.stdout.strip().endswith("-1")

    # forward: each connection over a port-forward to the pod's loopback (the fake's pods share this machine's)
    with listener_and_free_port() as (srv, remote, local):
        fwd = subprocess.Popen([*SKYHIVE, "forward", "kt", f"{remote}:{local}", "--node", "1"], cwd=tmp_path,
                               stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = Lines(fwd.stderr)
        try:
            err.wait_for(f"forwarding 127.0.0.1:{local} ->", 120, "skyhive forward's first line")
            with socket.create_connection(("127.0.0.1", local), timeout=30) as c:
                conn, _ = srv.accept()
                with conn:
                    c.sendall(b"ping")
                    assert conn.recv(4) == b"ping"
                    conn.sendall(b"pong")
                    assert c.recv(4) == b"pong"
        finally:
            fwd.terminate()
            fwd.wait(timeout=60)
    down = skyhive("down", "kt", cwd=tmp_path, timeout=300)
    assert down.returncode == 0 and fake_k8s.cluster.pods == {}


@pytest.mark.anyio
async def test_pod_access_runs_and_forwards(fake_k8s, capfd):
    """The kind's access on its own: `run` is an exec with this process's stdio and the command's exit
    status; `connect` a port-forward to a port on the pod's loopback (the fake's pods share this machine's)."""
    import socket

    import anyio

    import skyhive as sky
    from skyhive.providers.base import ClusterSpec
    from skyhive.runtime.kinds.kubernetes.keep import KEEP

    provider = sky.Kubernetes(kubeconfig=os.environ["KUBECONFIG"])
    handles = await provider.create(ClusterSpec(pool_id="acc", nodes=1))
    try:
        rec = type("Rec", (), {"name": "acc", "nodes": 1, "cluster": "c-acc", "workers": [],
                               "provider_info": {**provider.describe(), "pods": [handles[0].provider_id]}})()
        access = KEEP.access(rec, 0)
        assert access.describe() == f"pod {handles[0].provider_id} (namespace default)"
        assert access.ssh_config() is None
        code = await anyio.to_thread.run_sync(lambda: access.run(["sh", "-c", "echo hi; echo $HOSTNAME; exit 3"], tty=False))
        out = capfd.readouterr().out
        assert code == 3 and out.split() == ["hi", handles[0].provider_id]
        with pytest.raises(sky.ProvisionError, match="has no node 1"):
            KEEP.access(rec, 1)

        srv = socket.create_server(("127.0.0.1", 0))
        port = srv.getsockname()[1]
        try:
            stream = await access.connect(port)
            conn, _ = await anyio.to_thread.run_sync(srv.accept)
            with conn:
                await stream.send(b"ping")
                assert await anyio.to_thread.run_sync(conn.recv, 4) == b"ping"
                conn.sendall(b"pong")
                assert await stream.receive() == b"pong"
            await stream.aclose()
        finally:
            srv.close()
    finally:
        await provider.terminate(handles)
    assert fake_k8s.cluster.pods == {}


def test_check_says_whether_the_context_answers_and_what_it_may_do(fake_k8s, tmp_path, monkeypatch):
    from skyhive.runtime.commands.check import check

    lines = dict(check(("kubernetes",))["kubernetes"])
    assert lines["context"] == "reachable" and "may not" not in lines
    assert lines["may"] == ("create pods, get pods, list pods, watch pods, delete pods, create pods/exec, get pods/log, "
                            "create pods/portforward, list events in namespace default")
    fake_k8s.denied.update({("create", "pods/exec"), ("list", "events")})
    lines = dict(check(("kubernetes",))["kubernetes"])
    assert lines["may not"].startswith("create pods/exec, list events (docs/kubernetes.md")
    bad = tmp_path / "bad-kubeconfig"
    bad.write_text(open(os.environ["KUBECONFIG"]).read().replace(fake_k8s.TOKEN, "wrong-token"))
    monkeypatch.setenv("KUBECONFIG", str(bad))
    lines = dict(check(("kubernetes",))["kubernetes"])
    assert lines["context"] == "reachable" and lines["pods"].startswith("refused in namespace default: 401 Unauthorized")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert "not found" in dict(check(("kubernetes",))["kubernetes"])["context"]

def test_autostop_ends_the_pods_and_status_deletes_them(kube_task, fake_k8s, skyhive_home, tmp_path, monkeypatch):
    """`-i N`: a watchdog in each pod ends the pool's workers, then the container (the pod is Succeeded: its
    CPUs and GPUs go back to the cluster) once nobody was connected for N minutes (seconds here); the pods'
    objects are deleted by the next `skyhive status` (a pod has no credentials to delete itself)."""
    import time

    monkeypatch.setenv("SKYHIVE_AUTOSTOP_MINUTE", "15")  # -i 1: 15 s (the job runs first, attached)
    launched = skyhive("launch", "-y", "-c", "kt", str(kube_task), "--infra", "k8s", "-i", "1", cwd=tmp_path,
                       timeout=300)
    assert launched.returncode == 0, (launched.stdout[-3000:], launched.stderr[-4000:])
    uids = [p["metadata"]["uid"] for p in fake_k8s.cluster.pods.values()]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        phases = [p["status"]["phase"] for p in fake_k8s.cluster.pods.values()]
        if phases == ["Succeeded", "Succeeded"] and not [u for u in uids if pod_processes(u)]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"autostop did not end the pods: {phases}")
    # the next look at the pool finds it ended by its autostop, and deletes the ended pods (as a cloud
    # pool's autostopped instances are terminated), forgetting the pool
    status = skyhive("status", cwd=tmp_path)
    assert status.returncode == 0 and "no named pools" in status.stdout, (status.stdout, status.stderr)
    assert fake_k8s.cluster.pods == {}


def test_exec_on_a_pool_whose_worker_is_gone_names_the_pod(kube_task, fake_k8s, skyhive_home, tmp_path):
    """Taking a kept pod's worker over finds it by the process whose arguments are `--socket <its socket>`
    (issue 42). The finding script's own command line held that text too, so it found itself whenever its
    /proc entry came first in the glob's text order — always when no worker serves the socket: a dead
    worker was "taken over" under the script's pid instead of named."""
    import signal

    from tests.infra.sshd import process_alive

    launched = skyhive("launch", "-y", "-c", "kt", str(kube_task), "--infra", "k8s", cwd=tmp_path, timeout=300)
    assert launched.returncode == 0, (launched.stdout[-3000:], launched.stderr[-3000:])
    rec = record(skyhive_home, "kt")
    pods = rec["provider_info"]["pods"]
    dead = next(w["pid"] for w in rec["workers"] if w["node"] == 1)
    os.kill(dead, signal.SIGKILL)  # (the fake's pods share this machine's process table)
    deadline = time.monotonic() + 30
    while process_alive(dead) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(dead)
    again = skyhive("exec", "kt", "echo again", cwd=tmp_path, timeout=300)
    assert again.returncode != 0
    said = again.stdout + again.stderr  # (the job's agent reports why the job could not start)
    assert f"node 1 worker 0 in pod {pods[1]} is gone (nobody serves" in said, said[-4000:]
