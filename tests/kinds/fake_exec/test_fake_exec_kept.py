"""Access is a capability (issue 37, done-when 3): the FAKE exec kind (tests/kinds/fake_exec/), made keepable
by its own `KeepSupport` with access (tests/kinds/fake_exec/keep.py), is driven through the real CLI —
`skyhive launch -c`, `ssh NAME -- hostname`, `forward`, `ssh-config`, `stop`/`start`, `down` — with no
file under `runtime/` that knows it: the kind is registered only by the entry points this test installs,
as a third party's distribution would. A session and a forwarded port go through the kind's own runner (its
`kubectl exec`), never SSH."""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.clusters.test_access import listener_and_free_port
from tests.clusters.test_clusters import SKYHIVE, record, skyhive, wait_for
from tests.infra.sshd import process_alive
from tests.kinds.fake_exec import keep as fake_keep
from tests.kinds.fake_exec.kind import node_processes
from tests.procs import Lines

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def kept_fake_exec(tmp_path, monkeypatch, skyhive_home):
    """The kept fake kind's distribution metadata on the path of this process and of the `skyhive` commands
    (PYTHONPATH), as `pip install` would put it: found by name through its entry points only. Yields its
    nodes' root; at the end every pool is taken down and nothing of a node may be left running."""
    from skyhive.runtime.nodes.registry import unregister_transport

    site = tmp_path / "site"
    info = site / "fake_exec_kept-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-exec-kept\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(fake_keep.KEPT_ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), str(ROOT),
                                                                   os.environ.get("PYTHONPATH")])))
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    monkeypatch.setenv("FAKE_EXEC_ROOT", str(nodes))
    unregister_transport("fake_exec")  # (another test of this process may have found the plain kind)
    try:
        yield nodes
    finally:
        from skyhive.runtime.clusters import record as records
        from skyhive.runtime.control.pools import down_cluster

        for name in records.names():
            down_cluster(name, quiet=True)
        unregister_transport("fake_exec")
        homes = [str(p) for p in sorted(nodes.glob("node-*"))]
        assert all(not node_processes(h) for h in homes), "a fake node's process outlived its pool"


def test_no_file_under_runtime_knows_the_fake_exec_kind():
    assert not [p for p in (ROOT / "runtime").rglob("*.py") if "fake_exec" in p.read_text()]


def test_the_kind_declares_its_keep_support_through_its_entry_point_only(kept_fake_exec):
    from skyhive.runtime.nodes.keep import keep_support

    support = keep_support("fake_exec")
    assert isinstance(support, fake_keep.FakeExecKeep) and not support.same_machine


def test_a_kept_fake_exec_pool_through_the_cli_ssh_forward_stop_start_down(kept_fake_exec, skyhive_home, tmp_path):
    homes = [kept_fake_exec / f"node-{i}" for i in range(2)]
    task = tmp_path / "task.yaml"
    task.write_text(textwrap.dedent("""\
        name: fx
        num_nodes: 2
        run: echo "ran on $SKYPILOT_NODE_RANK"
    """))
    launched = skyhive("launch", "-y", "-c", "fx", str(task), "--provider", "fake_exec", cwd=tmp_path)
    assert launched.returncode == 0, launched.stderr
    assert "ran on 0" in launched.stdout and "ran on 1" in launched.stdout
    rec = record(skyhive_home, "fx")
    assert (rec["keeper"], rec["provider"], rec["nodes"]) == ("fake_exec", "fake_exec", 2)
    pids = sorted(w["pid"] for w in rec["workers"])
    assert len(pids) == 2 and all(process_alive(p) for p in pids)

    # ssh: through the kind's runner (the node's own environment: its HOME, its marker), not SSH
    done = skyhive("ssh", "fx", "--", "hostname", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == socket.gethostname()
    done = skyhive("ssh", "fx", "--node", "1", "--", 'echo "$HOME" "$FAKE_EXEC_NODE" $SKYHIVE_NODE_RANK; exit 3',
                   cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == [str(homes[1]), str(homes[1]), "1"]
    assert "no node 2" in skyhive("ssh", "fx", "--node", "2", "--", "true", cwd=tmp_path).stderr
    # no SSH entries: the kind's nodes do not speak SSH
    done = skyhive("ssh-config", "fx", cwd=tmp_path)
    assert done.returncode == 0 and "not reached over SSH" in done.stdout, (done.stdout, done.stderr)
    assert not (Path(skyhive_home) / "ssh" / "fx.config").exists()
    status = skyhive("status", "fx", cwd=tmp_path)
    assert f"node 1: fake exec node 1 ({homes[1]})" in status.stdout, status.stdout

    # forward: each connection relayed through a relay the kind execs on the node
    with listener_and_free_port() as (srv, remote, local):
        fwd = subprocess.Popen([*SKYHIVE, "forward", "fx", f"{remote}:{local}", "--node", "1"], cwd=tmp_path,
                               stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = Lines(fwd.stderr)
        try:
            err.wait_for(f"forwarding 127.0.0.1:{local} -> fx-worker1:{remote}", 120, "skyhive forward's first line")
            with socket.create_connection(("127.0.0.1", local), timeout=30) as c:
                conn, _ = srv.accept()
                with conn:
                    c.sendall(b"ping")
                    assert conn.recv(4) == b"ping"
                    conn.sendall(b"pong")
                    assert c.recv(4) == b"pong"
                    assert node_processes(str(homes[1])), "the connection went through the node's exec"
        finally:
            fwd.terminate()
            fwd.wait(timeout=60)
        assert fwd.returncode == 0, err.rest()
    wait_for(lambda: not node_processes(str(homes[1])), 30, "the relay on the node to end with the forward")

    # stop: the workers end, the nodes stay; start: new workers on the same nodes; down: nothing left
    stopped = skyhive("stop", "-y", "fx", cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert "pool fx: stopped" in stopped.stderr
    assert not any(process_alive(p) for p in pids)
    assert "STOPPED (stop)" in skyhive("status", cwd=tmp_path).stdout
    assert all((h / ".running").exists() for h in homes)  # the nodes are kept
    started = skyhive("start", "-y", "fx", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    again = sorted(w["pid"] for w in record(skyhive_home, "fx")["workers"])
    assert len(again) == 2 and all(process_alive(p) for p in again) and again != pids
    assert " UP " in skyhive("status", cwd=tmp_path).stdout
    assert skyhive("ssh", "fx", "--", "hostname", cwd=tmp_path).stdout.strip() == socket.gethostname()

    down = skyhive("down", "fx", cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert not any(process_alive(p) for p in again)
    assert "no named pools" in skyhive("status", cwd=tmp_path).stdout
    assert not any((h / ".running").exists() for h in homes)  # the nodes released
    done = skyhive("ssh", "fx", "--", "hostname", cwd=tmp_path)
    assert done.returncode != 0 and "no named pool 'fx'" in done.stderr


def test_a_kind_that_declares_no_access_is_named_when_a_node_would_be_reached(kept_fake_exec):
    """The contract's default: a keep support without `access` refuses, naming the pool and the kind."""
    import skyhive as sky
    from skyhive.runtime.clusters.kept_pool import KeptPool
    from skyhive.runtime.clusters.record import ClusterRecord
    from skyhive.runtime.kinds.local.keep import LocalKeep
    from skyhive.runtime.nodes.keep import KeepSupport

    class Unreachable(LocalKeep):
        kind = "unreachable"
        access = KeepSupport.access  # declares none

    rec = ClusterRecord(name="x", provider="p", nodes=1, processes_per_node=1, cwd="/", socket_dir="", created=0.0,
                        keeper="unreachable")
    with pytest.raises(sky.ProvisionError, match=r"pool 'x' \(kind 'unreachable'\) cannot be reached: the kind "
                                                 r"declares no access"):
        Unreachable().access(rec, 0)
    assert KeptPool(rec).ssh_entries() == []  # (a kind not installed here: no entries, no error)
