"""The node-kind SDK (runtime/nodes/) and skyhive's bootstrap (runtime/bootstrap/) as layers: the SDK
imports nothing above it, bootstrap never asks which transport class it has, and the built-in kinds
declare themselves as a third party's would (`NodeKind`, `same_machine`)."""

from __future__ import annotations

import ast

import pytest

import functools

from tests.test_import_graph import ROOT
from tests.test_import_graph import graph as _graph

graph = functools.cache(_graph)

SDK_MAY_IMPORT = ("skyhive.runtime.nodes", "skyhive.runtime.common", "skyhive.runtime.events", "skyhive.protocol",
                  "skyhive.providers", "skyhive.plugins", "skyhive.errors", "skyhive.paths")


def test_the_sdk_imports_only_what_is_below_it():
    g = graph()
    above = {m: sorted(t for t in ts if not t.startswith(SDK_MAY_IMPORT))
             for m, ts in g.items() if m.startswith("skyhive.runtime.nodes")}
    assert {m: ts for m, ts in above.items() if ts} == {}
    # bootstrap sits on the SDK: never a kind, an actor or the pool
    low = ("skyhive.runtime.kinds", "skyhive.runtime.actors", "skyhive.runtime.pool", "skyhive.runtime.clusters",
           "skyhive.runtime.commands", "skyhive.runtime.collections")
    assert {m: sorted(t for t in ts if t.startswith(low))
            for m, ts in g.items() if m.startswith("skyhive.runtime.bootstrap") and any(t.startswith(low) for t in ts)} == {}


def test_kinds_reuse_kinds_below_them_never_in_a_cycle():
    g = graph()
    edges = {(m.split(".")[3], t.split(".")[3]) for m, ts in g.items() if m.startswith("skyhive.runtime.kinds.")
             for t in ts if t.startswith("skyhive.runtime.kinds.") and m.split(".")[3] != t.split(".")[3]}
    assert not {(a, b) for a, b in edges if (b, a) in edges}, edges
    assert ("local", "ssh") not in edges  # Local's bootstrap once borrowed the SSH bootstrap's cache key


def test_bootstrap_never_asks_which_transport_it_has():
    """No `isinstance` in bootstrap code (runtime/bootstrap/, and no kind keeps a bootstrap of its own
    but Simulated's failure injection): the node's Shell says what bootstrap needs."""
    found = []
    for path in (ROOT / "runtime" / "bootstrap").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
    assert not list((ROOT / "runtime" / "kinds").rglob("bootstrap.py"))


def test_srun_transports_are_transports_of_their_own():
    from skyhive.runtime.kinds.local.transport import LocalTransport
    from skyhive.runtime.kinds.slurm.srun import SrunTransport
    from skyhive.runtime.kinds.slurm.srun_ssh import SrunSSHTransport
    from skyhive.runtime.kinds.ssh.transport import SSHTransport

    assert not issubclass(SrunTransport, LocalTransport)
    assert not issubclass(SrunSSHTransport, SSHTransport)


def test_built_in_kinds_are_node_kinds_saying_whether_they_share_this_machine():
    from skyhive.runtime.nodes.registry import BOOTSTRAP_OVER_SHELL, NodeKind, TransportKind, node_kind

    assert TransportKind is NodeKind  # the older name, for the packages that use it
    same = {name: node_kind(name).same_machine for name in ("local", "local_detached", "ssh", "slurm", "simulated")}
    assert same == {"local": True, "local_detached": True, "ssh": False, "slurm": False, "simulated": True}
    assert all(node_kind(name).bootstrap == BOOTSTRAP_OVER_SHELL for name in ("local", "ssh", "slurm"))
    assert node_kind("no-such-kind") is None


@pytest.mark.anyio
async def test_the_registry_hands_a_bootstrapped_env_to_the_transport():
    """A bootstrap returns a `Prepared`; the registry gives its `NodeEnv` to the transport (`use_env`) and
    records its detail; a bootstrap of the older shape (the detail alone) still works."""
    from skyhive.runtime.nodes.registry import NodeKind
    from skyhive.runtime.nodes.shell import NodeEnv, Prepared
    from skyhive.runtime.nodes.transport import Transport

    class Bare(Transport):
        async def start_worker(self, *a, **k):  # pragma: no cover - never started
            raise AssertionError

        async def run(self, *a, **k):  # pragma: no cover - never run
            raise AssertionError

    env = NodeEnv(python="/opt/py/bin/python3", pythonpath=("/rt",))

    async def new_style(ctx, node, transport):
        return Prepared("env abc built", env)

    async def old_style(ctx, node, transport):
        return "done"

    t = Bare()
    assert await NodeKind("k", lambda h, c: t, new_style).bootstrap_node(None, 0, t) == "env abc built"  # type: ignore[arg-type]
    assert t.node_env is env
    other = Bare()
    assert await NodeKind("k", lambda h, c: other, old_style).bootstrap_node(None, 0, other) == "done"  # type: ignore[arg-type]
    assert other.node_env is None
    with pytest.raises(NotImplementedError, match="Bare has no shell"):
        other.shell()
