"""A FAKE exec-based kind of node (tests/kinds/fake_exec/kind.py: "nodes" are local processes started only
through a command runner, the shape a Kubernetes kind has) lands by adding its provider, its transport and
shell, and its entry points — installed on disk as a distribution's `entry_points.txt`, found by the
registry as a third party's are — with no file under `runtime/`: skyhive's bootstrap prepares its nodes
over the shell it gives."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.runtime.events.types import NodeStateChanged
from tests.kinds.fake_exec import kind as fake

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake_exec_installed(tmp_path, monkeypatch):
    """The fake kind's distribution metadata on the path, as `pip install` would put it: its provider
    and transport are found by name through entry points, never registered in code."""
    site = tmp_path / "site"
    info = site / "fake_exec_kind-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-exec-kind\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(fake.ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    monkeypatch.setenv("FAKE_EXEC_ROOT", str(nodes))
    return nodes


def where_and_what() -> tuple[str, str, str, str, str]:
    import sys

    home = os.environ["HOME"]
    with open(os.path.join(home, "setup-saw")) as fh:
        saw = fh.read().strip()
    return home, os.getcwd(), os.environ["FAKE_GREETING"], saw, sys.executable


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.anyio
async def test_a_fake_exec_kind_lands_by_provider_transport_and_entry_point_only(fake_exec_installed):
    from skyhive.providers import registry
    from skyhive.runtime.nodes.registry import kinds, transport_kind

    assert "fake_exec" in registry.names() and "fake_exec" in kinds()
    provider = registry.from_cli("fake_exec")
    assert isinstance(provider, fake.FakeExec)
    image = sky.Image(env={"FAKE_GREETING": "hello"}, setup=['echo "$FAKE_GREETING from setup" > "$HOME/setup-saw"'])
    details = []
    homes = [str(fake_exec_installed / f"node-{i}") for i in range(2)]
    for attempt in range(2):
        async with sky.Pool(provider=provider, nodes=2, image=image) as pool:
            results = await pool.broadcast(where_and_what)
            ready = [e for e in pool._runtime.log.recent if isinstance(e, NodeStateChanged) and e.state == "ready"]
            details.append(sorted(e.detail for e in ready))
            kind = transport_kind(pool._runtime.nodes[0].handle)
            assert kind.kind == "fake_exec" and not kind.same_machine
            if attempt == 0:
                with pytest.raises(sky.WorkerLost):
                    await pool.run(die)
                assert len(await pool.broadcast(os.getpid)) == 2  # the lost worker was restarted, both nodes answer
        # each node ran in its own directory with the Image's variable, set up over the shell, with the
        # Python the node names (outside the client's virtualenv), not the client's
        assert results == [(h, h, "hello", "hello from setup", fake.node_python()) for h in homes]
        assert all(not fake.node_processes(h) for h in homes), "a fake node's process outlived its pool"
    assert all(" built in " in d for d in details[0]), details
    assert all(" cached " in d for d in details[1]), details  # the content cache, hit over the shell
    key = details[0][0].split()[1]
    assert all((Path(h) / ".skyhive" / "envs" / key / ".ready").exists() for h in homes)


def test_the_fake_kind_is_all_under_tests():
    """The fake exec kind needed no file under runtime/: nothing there names it."""
    hits = [p for p in (ROOT / "runtime").rglob("*.py") if "fake_exec" in p.read_text() or "FakeExec" in p.read_text()]
    assert hits == []
    assert Path(fake.__file__).resolve().is_relative_to(ROOT / "tests")
    assert sorted(p.name for p in Path(fake.__file__).parent.glob("*.py")) == [
        "__init__.py", "keep.py", "kind.py", "test_fake_exec_kept.py", "test_fake_exec_kind.py"]
