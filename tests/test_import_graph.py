"""Dependencies point one way: the import graph, built from the source (every import, including those
inside functions and under `TYPE_CHECKING`), has no cycle; `protocol/` imports nothing else of the
project; `providers/` and `plugins/` never import `skyhive.runtime`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: source folder -> the package it is installed as (pyproject's package-dir)
PACKAGES = {"skyhive": "skyhive", "runtime": "skyhive.runtime", "protocol": "skyhive.protocol",
            "providers": "skyhive.providers", "plugins": "skyhive.plugins"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (a `from package import submodule` counts as the submodule)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_the_modules_and_their_imports():
    g = graph()
    assert "skyhive.runtime.actors.pool_actor" in g and "skyhive.protocol.connection" in g
    assert "skyhive.runtime.actors.node" in g["skyhive.runtime.actors.pool_actor"]
    # a lazy import inside a function is an edge too
    assert "skyhive.runtime.output.captured" in g["skyhive.runtime.actors.dispatch"]
    assert "skyhive.runtime.commands.launch" in g["skyhive.cli"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (each line: modules that import each other, maybe indirectly):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_protocol_imports_nothing_else_of_the_project():
    bad = {m: sorted(t for t in ts if not t.startswith("skyhive.protocol"))
           for m, ts in graph().items() if m.startswith("skyhive.protocol")}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_providers_and_plugins_never_import_the_runtime():
    bad = {m: sorted(t for t in ts if t.startswith("skyhive.runtime"))
           for m, ts in graph().items() if m.startswith(("skyhive.providers", "skyhive.plugins"))}
    assert not {m: ts for m, ts in bad.items() if ts}


#: Modules that host workers in the client process on purpose: a simulated node's worker IS the daemon's
#: `Worker`, run on the client's event loop (issue 14: the real worker-side logic, no copy of it).
WORKER_HOSTS = {"skyhive.runtime.kinds.simulated.transport"}


def test_the_client_does_not_import_the_worker_daemon():
    """What client and worker share (versions, WorkerSetup) lives in runtime/onnode/setup.py."""
    bad = {m: sorted(t for t in ts if t.startswith("skyhive.runtime.worker"))
           for m, ts in graph().items() if not m.startswith("skyhive.runtime.worker") and m not in WORKER_HOSTS}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_the_node_actor_does_not_know_the_pool_actor():
    g = graph()
    assert "skyhive.runtime.actors.pool_actor" not in g["skyhive.runtime.actors.node"]
    assert not any(t.startswith("skyhive.runtime.actors.pool") for t in g["skyhive.runtime.bootstrap.remote"])


def test_a_framework_plugin_does_not_import_another_plugin():
    """Shared helpers live in plugins/api.py; plugins/torch.py is not a library for jax or keras."""
    shared = {"skyhive.plugins", "skyhive.plugins.api", "skyhive.plugins.image"}
    bad = {m: sorted(t for t in ts if t.startswith("skyhive.plugins") and t not in shared)
           for m, ts in graph().items() if m.startswith("skyhive.plugins.") and m not in shared}
    assert not {m: ts for m, ts in bad.items() if ts}
