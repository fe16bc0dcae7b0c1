"""Providers and plugins from other installed packages, found by name through entry points.

The test builds a tiny distribution on disk — a package and its `.dist-info` with `entry_points.txt`
— and puts it on the path (as `pip install` would put it in site-packages). Its provider, "tinycloud",
is a stand-in cloud (nothing real provisions here): its nodes run on this machine, and each "VM" is a
marker file in a directory the test owns, so the test can see what `skyhive down` destroys.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.runtime.events.log import pool_log_path, read_log
from skyhive.runtime.events.state import fold
from skyhive.runtime.events.types import NodeStateChanged, PoolStarted, to_json

PACKAGE = '''\
"""tinycloud: a third party's skyhive provider, reach kind and plugin (a test stand-in)."""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from skyhive.providers.base import NodeHandle, Provider, Reach
from skyhive.runtime.nodes.registry import TransportKind


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyReach(Reach):
    """A node of tinycloud: served by the transport this package registers for kind "tinykind"."""

    kind: ClassVar[str] = "tinykind"


def tiny_transport(handle, ctx):
    """The transport for kind "tinykind": a tinycloud "VM" is this machine."""
    from skyhive.runtime.kinds.local.transport import LocalTransport

    return LocalTransport(redact=ctx.log.redact)


def _vms() -> Path:
    return Path(os.environ["TINYCLOUD_STATE"])


#: kind "tinykind": its transport, and how its nodes are kept (a named pool): a "VM" is this machine, so
#: they are kept as Local nodes are (detached workers on this machine's Unix sockets)
KIND = TransportKind("tinykind", tiny_transport, keep="skyhive.runtime.kinds.local.keep:KEEP")


class TinyCloud(Provider):
    name = "tinycloud"
    fixed_machines = False  # its "VMs" are made to order: a kept pool records them, `down` terminates them

    async def launch(self, spec, nodes):
        handles = []
        for i in nodes:
            (_vms() / f"{spec.pool_id}.{i}").write_text("running")
            handles.append(NodeHandle(node=i, provider_id=f"{spec.pool_id}.{i}", private_addr="127.0.0.1",
                                      reach=TinyReach()))
        return handles

    async def terminate(self, handles):
        for h in handles:
            (_vms() / h.provider_id).unlink(missing_ok=True)

    async def list_owned(self, pool_id):
        return [NodeHandle(node=int(p.suffix[1:]), provider_id=p.name, private_addr="127.0.0.1", reach=TinyReach())
                for p in sorted(_vms().glob(f"{pool_id}.*"))]


class Stamp:
    name = "stamp"

    def transform(self, image, pool):
        return image.with_env(TINY_STAMP="stamped")


def stamp():
    return Stamp()


# ---- "tinyshell": tinycloud's VMs that do not share the client's Python; skyhive's bootstrap prepares
# them over the Shell their transport gives (a VM's home is a directory the test owns)

import sys

from skyhive.runtime.kinds.local.shell import LocalShell, run_here
from skyhive.runtime.kinds.local.transport import LocalTransport
from skyhive.runtime.nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyShellReach(Reach):
    kind: ClassVar[str] = "tinyshell"
    home: str


class TinyShell(LocalShell):
    """A tinyshell VM's commands: `sh -c` in its home, with HOME there; its Python named, not this one."""

    same_machine = False

    def __init__(self, home):
        super().__init__(where=f"tinyshell VM {home}", cwd=home)
        self.python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)

    async def run(self, command, *, env=None, timeout=None, on_line=None, lifeline=False):
        return await run_here(command, env={**(env or {}), "HOME": self.cwd}, timeout=timeout, cwd=self.cwd,
                              on_line=on_line, lifeline=lifeline)


class TinyShellTransport(LocalTransport):
    def __init__(self, home, redact):
        super().__init__(cwd=home, redact=redact)
        self.home = home

    def shell(self):
        return TinyShell(self.home)


def tinyshell_transport(handle, ctx):
    return TinyShellTransport(handle.reach.home, ctx.log.redact)


TINYSHELL = NodeKind("tinyshell", tinyshell_transport, bootstrap=BOOTSTRAP_OVER_SHELL)


class TinyShellCloud(TinyCloud):
    name = "tinyshell"

    async def launch(self, spec, nodes):
        handles = await super().launch(spec, nodes)
        homes = _vms().parent / "homes"
        for h in handles:  # a VM's disk outlives the pool (a second pool finds its environment built)
            (homes / f"vm-{h.node}").mkdir(parents=True, exist_ok=True)
        return [NodeHandle(node=h.node, provider_id=h.provider_id, private_addr=h.private_addr,
                           reach=TinyShellReach(home=str(homes / f"vm-{h.node}"))) for h in handles]
'''

ENTRY_POINTS = '''\
[skyhive.providers]
tinycloud = tinycloud:TinyCloud
tinyshell = tinycloud:TinyShellCloud

[skyhive.plugins]
stamp = tinycloud:stamp

[skyhive.transports]
tinykind = tinycloud:KIND
tinyshell = tinycloud:TINYSHELL
'''


@pytest.fixture
def tinycloud(tmp_path, monkeypatch):
    """The distribution on sys.path (this process) and PYTHONPATH (the `skyhive` commands)."""
    site = tmp_path / "site"
    (site / "tinycloud").mkdir(parents=True)
    (site / "tinycloud" / "__init__.py").write_text(PACKAGE)
    info = site / "tinycloud-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinycloud\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    state = tmp_path / "vms"
    state.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TINYCLOUD_STATE", str(state))
    try:
        yield state
    finally:
        sys.modules.pop("tinycloud", None)
        if "stamp" in vars(sky.plugins):
            delattr(sky.plugins, "stamp")


def skyhive(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhive", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180)


def test_launch_uses_a_third_party_provider_by_name_and_terminates_its_nodes(tinycloud, tmp_path):
    """Its provider by name, and its nodes (reach kind "tinykind") served by the transport it registers."""
    from skyhive.providers import registry

    assert "tinycloud" in registry.names()
    (tmp_path / "task.yaml").write_text(textwrap.dedent("""\
        name: tiny
        num_nodes: 2
        run: echo "hello from node $SKYHIVE_NODE_RANK"
    """))
    done = skyhive("launch", "task.yaml", "--provider", "tinycloud", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hello from node 0" in done.stdout and "hello from node 1" in done.stdout
    assert "2 tinycloud nodes" in done.stderr
    assert list(tinycloud.iterdir()) == []  # both "VMs" were terminated when the pool closed


def test_down_finds_a_third_party_provider_by_name_from_the_pools_log(tinycloud, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()  # the pool's client is gone, its two "VMs" are still there
    for i in range(2):
        (tinycloud / f"orphan.{i}").write_text("running")
    path = pool_log_path("orphan")
    path.parent.mkdir(parents=True, exist_ok=True)
    started = PoolStarted(pool_id="orphan", seq=0, ts=time.time(), provider="tinycloud", nodes=2,
                          processes_per_node=1, pid=dead.pid, host=socket.gethostname(),
                          provider_config={"provider": "tinycloud"})
    nodes = [NodeStateChanged(pool_id="orphan", seq=1 + i, ts=time.time(), node=i, state="running")
             for i in range(2)]
    path.write_text("".join(to_json(e) + "\n" for e in [started, *nodes]))
    done = skyhive("down", "orphan", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tinycloud.iterdir()) == []
    assert fold(read_log(path)).status == "stopped"


def test_a_third_party_plugin_is_a_factory_under_sky_plugins(tinycloud):
    assert "stamp" in sky.plugins.installed()

    def stamp():
        return os.environ["TINY_STAMP"]

    with sky.Pool(nodes=1, plugins=[sky.plugins.stamp()]) as pool:
        assert pool.run(stamp) == "stamped"


@pytest.mark.anyio
async def test_a_third_party_kind_gets_skyhives_bootstrap_over_its_shell(tinycloud):
    """Its kind declares skyhive's bootstrap (`BOOTSTRAP_OVER_SHELL`) and its transport a `Shell`: an
    Image's variables and setup reach its VMs (the runtime shipped, the setup run there, the content cache
    hit by a second pool) with no edit of skyhive — and no transport class of skyhive's asked about."""
    from skyhive.providers import registry

    def seen() -> tuple[str, str, str]:
        with open("setup-saw") as fh:  # workers start in the VM's home, as bootstrap found it
            return os.getcwd(), os.environ["TINY_GREETING"], fh.read().strip()

    image = sky.Image(env={"TINY_GREETING": "hi"}, setup=['echo "$TINY_GREETING from setup" > "$HOME/setup-saw"'])
    details = []
    for _ in range(2):
        async with sky.Pool(provider=registry.from_cli("tinyshell"), nodes=2, image=image) as pool:
            homes = [str(tinycloud.parent / "homes" / f"vm-{i}") for i in range(2)]
            assert await pool.broadcast(seen) == [(h, "hi", "hi from setup") for h in homes]
            details.append([e.detail for e in pool._runtime.log.recent
                            if isinstance(e, NodeStateChanged) and e.state == "ready"])
    assert all(" built in " in d for d in details[0]) and len(details[0]) == 2, details
    assert all(" cached " in d for d in details[1]) and len(details[1]) == 2, details
    assert list(tinycloud.iterdir()) == []  # the VMs were terminated


def test_a_provider_that_is_not_built_yet_says_so(tmp_path, monkeypatch, capsys):
    from skyhive.cli import main
    from skyhive.providers import registry

    # a name skyhive plans (in PROVIDERS) whose module this install does not have
    monkeypatch.setitem(registry.PROVIDERS, "zzcloud", ("skyhive.providers.zzcloud", "ZZCloud"))
    assert "zzcloud" not in registry.names() and "zzcloud" in registry.planned()
    assert sorted(n for n in registry.PROVIDERS if n not in registry.names()) == registry.planned()
    with pytest.raises(sky.ProviderNotAvailable, match="provider 'zzcloud' .*not built yet"):
        registry.from_cli("zzcloud")
    with pytest.raises(sky.ProvisionError, match="unknown provider 'nomad'.*not built yet: .*zzcloud"):
        registry.canonical("nomad")
    (tmp_path / "t.yaml").write_text("run: echo hi\n")
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "t.yaml", "--provider", "zzcloud"]) == 1
    assert "not built yet" in capsys.readouterr().err


def test_a_third_party_kind_keeps_a_named_pool_launch_detach_attach_down(tinycloud, tmp_path):
    """keep=True on the third party's provider and kind, with nothing of it in skyhive (issue 23, point 3):
    the pool is made and left (its "VMs" and workers stay), a new process attaches to the same workers
    (what they loaded is still there), `skyhive down` ends the workers and terminates the VMs by the ids
    its record holds."""
    from tinycloud import TinyCloud

    from skyhive.runtime.clusters import record as records
    from tests.infra.sshd import process_alive

    def load(value):
        import builtins

        builtins.tiny_loaded = value  # the worker keeps it: the next client finds it
        return os.getpid()

    with sky.Pool(provider=TinyCloud(), nodes=2, name="tiny", keep=True) as pool:
        pids = sorted(pool.broadcast(load, "weights"))
    assert sorted(p.name for p in tinycloud.iterdir()) == ["tiny.0", "tiny.1"]  # the "VMs" stay
    assert all(process_alive(pid) for pid in pids)  # and their workers
    rec = records.load("tiny")
    from skyhive.runtime.clusters.kept_pool import KeptPool

    assert (rec.provider, rec.keeper, KeptPool(rec).machines) == ("tinycloud", "local", ["tiny.0", "tiny.1"])

    script = textwrap.dedent("""\
        import builtins, json, os
        import skyhive as sky
        with sky.Pool.attach("tiny") as pool:
            print(json.dumps(sorted(pool.broadcast(lambda: (os.getpid(), builtins.tiny_loaded)))))
    """)
    attached = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                              cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    assert [tuple(x) for x in json.loads(attached.stdout)] == [(pid, "weights") for pid in pids]

    done = skyhive("down", "tiny", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tinycloud.iterdir()) == []  # terminated by the recorded ids
    assert not any(process_alive(pid) for pid in pids)  # (`down` waits until they are gone)
    assert "tiny" not in records.names()
    assert fold(read_log(pool_log_path("tiny"))).status == "stopped"

