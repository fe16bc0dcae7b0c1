"""Pools from the event log: `skyhive ls`, `down`, `logs`, `events`, `timeline`, on the Local provider."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import skyhive as sky
from skyhive.cli import main
from skyhive.providers import registry
from skyhive.providers.base import LocalReach, NodeHandle, Provider
from skyhive.runtime.events import timeline
from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.types import NodeStateChanged, PoolStarted, to_json
from skyhive.runtime.events.state import fold
from tests.procs import state_of

SKYHIVE = [sys.executable, "-m", "skyhive"]

HOLDER = textwrap.dedent("""\
    import subprocess, sys, time
    import skyhive as sky

    def stubborn():
        # ignores SIGTERM, so it outlives its worker when the client dies: `down` must find it
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
        return subprocess.Popen([sys.executable, "-c", code]).pid

    with sky.Pool(nodes=2, name=sys.argv[1]) as pool:
        print("ready", *pool.broadcast(stubborn), flush=True)
        time.sleep(600)
""")


def skyhive(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYHIVE, *args], capture_output=True, text=True, timeout=120)


def running(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Those of `pids` still running after `timeout` (a zombie has stopped: an orphan's zombie waits
    for this machine's init, which reaps lazily)."""
    deadline = time.monotonic() + timeout
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if state_of(p) not in (None, "Z")}
        time.sleep(0.05)
    return left


def test_ls_shows_a_running_pool_and_down_cleans_it_after_its_client_is_killed(tmp_path, skyhive_home):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), "held-pool"], stdout=subprocess.PIPE, text=True)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: lines.put(holder.stdout.readline()), daemon=True).start()
        line = lines.get(timeout=120)
        assert line.startswith("ready"), line
        stubborn = {int(p) for p in line.split()[1:]}
        listed = skyhive("ls")
        assert listed.returncode == 0, listed.stderr
        row = next(ln for ln in listed.stdout.splitlines() if ln.startswith("held-pool"))
        assert row.split()[1:6] == ["local", "2:", "2", "ready", "running"]
        refused = skyhive("down", "--all")  # its client still runs
        assert refused.returncode == 1 and f"in use by process {holder.pid}" in refused.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    events = list(read_log(pool_log_path("held-pool")))
    workers = {e.pid for e in events if e.kind == "worker_state" and e.pid}
    assert len(workers) == 2
    gone = skyhive("ls")
    assert "client gone (skyhive down held-pool)" in gone.stdout
    followed = skyhive("logs", "held-pool", "--follow")  # does not wait for a stop that never comes
    assert followed.returncode == 1 and f"the client of pool held-pool (pid {holder.pid}) is gone" in followed.stderr
    cleaned = skyhive("down", "--all")
    assert cleaned.returncode == 0, cleaned.stderr
    assert "held-pool: stopped (2 leftover processes killed" in cleaned.stdout
    assert running(stubborn | workers) == set()
    state = fold(read_log(pool_log_path("held-pool")))
    assert state.status == "stopped"
    assert state.error == f"cleaned up by skyhive down: client process {holder.pid} was gone"
    assert [n.state for n in state.nodes] == ["terminated", "terminated"]
    assert "no pools running" in skyhive("ls").stdout
    assert "held-pool" in skyhive("ls", "-a").stdout
    again = skyhive("down", "held-pool")
    assert again.returncode == 0 and "held-pool: already stopped" in again.stdout


def chatter(tag):
    info = sky.instance_info()
    print(f"hello from {info.node} {tag}")
    print(f"partial-{info.node}", end="")
    sys.stderr.write(f"warn {info.node}\n")
    return info.node


@pytest.fixture
def talky_pool(skyhive_home):
    """A finished two-node pool that wrote output, and what `skyhive logs --follow` saw while it ran."""
    with sky.Pool(nodes=2, name="talky", output=None) as pool:
        follow = subprocess.Popen([*SKYHIVE, "logs", "talky", "--follow"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert pool.broadcast(chatter, "x") == [0, 1]
            assert pool.map(abs, range(-5, 5)) == [abs(i) for i in range(-5, 5)]
        except BaseException:
            follow.kill()
            raise
    try:
        followed, _ = follow.communicate(timeout=60)  # ends by itself once the pool has stopped
    finally:
        if follow.poll() is None:
            follow.kill()
    return list(read_log(pool_log_path("talky"))), followed


def test_logs_events_and_follow(talky_pool, capsys):
    events, followed = talky_pool
    assert "[node 0] hello from 0 x" in followed.splitlines()
    assert main(["logs", "talky"]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == ["[node 0] hello from 0 x", "[node 0] partial-0",
                                        "[node 1] hello from 1 x", "[node 1] partial-1"]
    assert sorted(err.splitlines()) == ["[node 0] warn 0", "[node 1] warn 1"]
    assert main(["logs", "talky", "--node", "1"]) == 0
    assert capsys.readouterr().out == "hello from 1 x\npartial-1\n"
    assert main(["events", "talky"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(events)
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds[0] == "pool_started" and kinds[-1] == "pool_stopped"
    assert main(["logs", "nope"]) == 1
    assert "no pool 'nope'" in capsys.readouterr().err


def test_timeline_png_and_html_show_each_node_states_in_time_order(talky_pool, tmp_path, capsys):
    from PIL import Image

    events, _ = talky_pool
    png, page = tmp_path / "t.png", tmp_path / "t.html"
    assert main(["timeline", "tal", "-o", str(png)]) == 0  # a unique prefix of the id will do
    with Image.open(png) as img:
        img.verify()
    with Image.open(png) as img:
        assert (img.format, img.size) == ("PNG", (1200, 258))
        pixels = img.convert("RGB")
        lay = timeline.layout(timeline.build(events))
        ready = [b for b in lay.boxes if b.text == "ready"]
        assert len(ready) == 2
        for box in ready:  # the ready span of each node is drawn in the ready colour
            colour = timeline.STATE_COLORS["ready"]
            rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
            assert pixels.getpixel((int(box.x) + 2, int(box.y) + 2)) == rgb
    tl = timeline.build(events)
    for node in (0, 1):
        (lane,) = [ln for ln in tl.lanes if ln.node == node and not ln.tasks]
        assert [s.kind for s in lane.spans] == ["requested", "provisioning", "running", "connecting",
                                                "bootstrapping", "ready", "draining", "terminating", "terminated"]
        starts = [s.start for s in lane.spans]
        assert starts == sorted(starts) and all(s.end >= s.start for s in lane.spans)
        (tasks,) = [ln for ln in tl.lanes if ln.node == node and ln.tasks]
        assert "chatter()" in [s.label for s in tasks.spans] and {s.kind for s in tasks.spans} == {"ok"}
    assert main(["timeline", "talky", "-o", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "<script" not in text
    assert "<title>node 1: ready," in text and "<title>worker 0 tasks: chatter() (ok)," in text
    assert main(["timeline", "talky", "-o", str(tmp_path / "t.jpg")]) == 1
    assert "use a .png or .html file name" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "t.jpg")


class FakeCloud(Provider):
    """A provider that owns machines (a stand-in: no cloud runs here); records what `down` destroys."""

    name = "fakecloud"
    destroyed: list[tuple[str, list[str]]] = []

    def __init__(self, region):
        self.region = region

    async def launch(self, spec, nodes):
        raise NotImplementedError

    async def list_owned(self, pool_id):
        return [NodeHandle(node=i, provider_id=f"{pool_id}-vm{i}", private_addr=f"10.0.0.{i + 2}",
                           reach=LocalReach()) for i in range(2)]

    async def terminate(self, handles):
        FakeCloud.destroyed.append((self.region, [h.provider_id for h in handles]))

    def describe(self):
        return {"provider": self.name, "region": self.region}


def test_down_rebuilds_the_provider_from_the_log_and_destroys_what_it_owns(monkeypatch, skyhive_home):
    monkeypatch.setitem(registry.PROVIDERS, "fakecloud", (__name__, "FakeCloud"))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a client pid that no longer runs
    path = pool_log_path("cloudy")
    path.parent.mkdir(parents=True, exist_ok=True)
    started = PoolStarted(pool_id="cloudy", seq=0, ts=time.time(), provider="fakecloud", nodes=2,
                          processes_per_node=1, pid=dead.pid, host=socket.gethostname(),
                          provider_config=FakeCloud("eu-west-9").describe())
    ready = [NodeStateChanged(pool_id="cloudy", seq=1 + i, ts=time.time(), node=i, state="requested")
             for i in range(2)]
    # the client died in the middle of writing a line
    path.write_text("".join(to_json(e) + "\n" for e in [started, *ready]) + '{"pool_id":"cloudy","seq":3,"t')
    assert "client gone" in skyhive("ls").stdout
    assert main(["down", "cloudy"]) == 0  # in this process: the fake provider is registered here only
    assert FakeCloud.destroyed == [("eu-west-9", ["cloudy-vm0", "cloudy-vm1"])]
    state = fold(read_log(path))  # every line parses: the torn one was dropped
    assert state.status == "stopped" and [n.state for n in state.nodes] == ["terminated", "terminated"]
    assert state.last_seq == 7
