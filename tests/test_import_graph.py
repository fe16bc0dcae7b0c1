"""Dependencies point one way: the import graph, built from the source (every import, including those
inside functions and under `TYPE_CHECKING`), has no cycle; `protocol/` imports nothing else of the
project but its floor (`skyhive/errors.py`, `skyhive/paths.py`, which import nothing of it);
`providers/` and `plugins/` never import `skyhive.runtime`. Folder by folder, the project is a stack of
layers (`LAYERS` below, drawn in docs/design.md): a folder imports only folders below it."""

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
    assert "skyhive.runtime.control.launch" in g["skyhive.cli.launch"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles (each line: modules that import each other, maybe indirectly):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_protocol_imports_nothing_else_of_the_project_but_the_floor():
    bad = {m: sorted(t for t in ts if not t.startswith("skyhive.protocol") and t not in ("skyhive.errors", "skyhive.paths"))
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


# ---- folders as layers (issue 23) ------------------------------------------------------------------

#: The project's folders, bottom to top: a folder imports only folders of LOWER entries (never one of its
#: own entry, never one above); each row's label starts with its own number (its rank), so no two rows
#: read as one layer. docs/design.md draws the same table. "skyhive" is the face package
#: (`__init__.py`, `cli/`, `jobs.py`, `integrations.py`, `__main__.py`); `skyhive/errors.py` and
#: `skyhive/paths.py` are counted apart from it, as the project's floor. "skyhive.runtime" is the
#: runtime's top modules (pool.py, calls.py, compute.py, blocking.py, ...); each built-in kind of node is a
#: folder of its own (a kind's folder not named here is in the row "any other kind"). Any other new folder
#: must be placed here (the test says so).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("0 the floor", ("skyhive.errors", "skyhive.paths")),
    ("1 protocol", ("skyhive.protocol",)),
    ("2 providers", ("skyhive.providers",)),
    ("3 plugins", ("skyhive.plugins",)),
    ("4 runtime/common", ("skyhive.runtime.common",)),
    ("5 events, onnode", ("skyhive.runtime.events", "skyhive.runtime.onnode")),
    ("6 worker", ("skyhive.runtime.worker",)),
    ("7 output", ("skyhive.runtime.output",)),
    ("8 nodes (the node-kind SDK)", ("skyhive.runtime.nodes",)),
    ("9 bootstrap", ("skyhive.runtime.bootstrap",)),
    ("10 kinds: local, simulated", ("skyhive.runtime.kinds", "skyhive.runtime.kinds.local",
                                    "skyhive.runtime.kinds.simulated")),
    ("11 kinds: ssh", ("skyhive.runtime.kinds.ssh",)),
    ("12 kinds: slurm", ("skyhive.runtime.kinds.slurm",)),
    ("13 kinds: any other kind", ()),  # a new folder under runtime/kinds/ lands here without an edit of this table
    ("14 collections, storage", ("skyhive.runtime.collections", "skyhive.runtime.storage")),
    ("15 actors", ("skyhive.runtime.actors",)),
    ("16 clusters (named pools)", ("skyhive.runtime.clusters",)),
    ("17 the runtime's top modules", ("skyhive.runtime",)),
    ("18 commands (what to run)", ("skyhive.runtime.commands",)),
    ("19 control (what drives a live pool)", ("skyhive.runtime.control",)),
    ("20 dashboard", ("skyhive.runtime.dashboard",)),
    ("21 the face", ("skyhive",)),
]
RANK = {folder: i for i, (_, folders) in enumerate(LAYERS) for folder in folders}
OTHER_KINDS = next(i for i, (name, _) in enumerate(LAYERS) if name.endswith(" kinds: any other kind"))


def rank(folder: str) -> int:
    """A folder's row in LAYERS; a kind's folder not named there is in the row of other kinds."""
    if folder not in RANK and folder.startswith("skyhive.runtime.kinds."):
        return OTHER_KINDS
    return RANK[folder]


#: Edges against the layers that other branches of issue 23 remove (the lead deletes each line when
#: merging them). Module -> module, exactly; nothing else is excused.
ALLOWED_UPWARD: set[tuple[str, str]] = {
}

#: What the worker daemon and the on-node code may import: the floor, protocol/, runtime/common/ and onnode/;
#: plus, by name, the plugins' hook types the worker runs (`around_app`, `around_task`) and the node's
#: devices the resource check reads (both in layer 1, imported by a worker on purpose).
NODE_SIDE = ("skyhive.runtime.worker", "skyhive.runtime.onnode")
NODE_SIDE_MAY_IMPORT = ("skyhive.errors", "skyhive.paths", "skyhive.protocol", "skyhive.runtime.common",
                        "skyhive.runtime.onnode", "skyhive.runtime.worker")
NODE_SIDE_ALSO = {"skyhive.plugins.api", "skyhive.providers.accelerators"}


def folder_of(module: str) -> str:
    """The folder (a node of the layer table) `module` belongs to."""
    parts = module.split(".")
    if module in ("skyhive.errors", "skyhive.paths"):
        return module
    if len(parts) == 1 or parts[1] not in ("runtime", "protocol", "providers", "plugins"):
        return "skyhive"  # the face package
    if parts[1] != "runtime":
        return ".".join(parts[:2])
    if len(parts) >= 4 and parts[2] == "kinds":
        return ".".join(parts[:4])
    if len(parts) >= 3 and (ROOT / "runtime" / parts[2]).is_dir():
        return ".".join(parts[:3])
    return "skyhive.runtime"


def upward_edges(g: dict[str, set[str]]) -> list[str]:
    """Each import from a folder to one of its own layer entry or above: 'importer -> imported (layers)'."""
    bad = []
    for m, targets in sorted(g.items()):
        a = folder_of(m)
        for t in sorted(targets):
            b = folder_of(t)
            if a != b and rank(b) >= rank(a) and (m, t) not in ALLOWED_UPWARD:
                bad.append(f"{m} ({LAYERS[rank(a)][0]}) -> {t} ({LAYERS[rank(b)][0]})")
    return bad


def folder_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {folder_of(m): set() for m in g}
    for m, targets in g.items():
        out[folder_of(m)].update(folder_of(t) for t in targets if (m, t) not in ALLOWED_UPWARD)
    for f in out:
        out[f].discard(f)
    return out


def test_each_row_of_the_layers_has_its_own_label_numbered_by_its_rank():
    labels = [name for name, _ in LAYERS]
    assert len(set(labels)) == len(labels)
    assert [int(name.split()[0]) for name in labels] == list(range(len(LAYERS)))
    assert rank("skyhive.runtime.commands") < rank("skyhive.runtime.control") < rank("skyhive.runtime.dashboard")
    assert rank("skyhive.runtime") < rank("skyhive.runtime.control")


def test_every_folder_has_its_place_in_the_layers():
    found = {folder_of(m) for m in graph()}
    assert {f for f in found if f not in RANK and not f.startswith("skyhive.runtime.kinds.")} == set(), "place these folders in LAYERS (tests/test_import_graph.py, docs/design.md)"
    assert set(RANK) - found == set(), "LAYERS names folders that are gone"


def test_the_folders_form_a_dag_and_import_only_downwards():
    g = graph()
    bad = upward_edges(g)
    assert not bad, "imports against the layers (see LAYERS):\n" + "\n".join(bad)
    assert not cycles(folder_graph(g))


def test_the_layer_check_fails_on_an_import_upwards_naming_both_modules():
    g = {"skyhive.runtime.common.serialize": {"skyhive.runtime.actors.channel", "skyhive.errors"},
         "skyhive.runtime.actors.channel": {"skyhive.runtime.common.serialize"},
         "skyhive.runtime.events.log": {"skyhive.runtime.onnode.instance"},  # the same entry counts too
         "skyhive.runtime.onnode.instance": set(), "skyhive.errors": set()}
    bad = upward_edges(g)
    assert bad == ["skyhive.runtime.common.serialize (4 runtime/common) -> skyhive.runtime.actors.channel (15 actors)",
                   "skyhive.runtime.events.log (5 events, onnode) -> skyhive.runtime.onnode.instance (5 events, onnode)"]
    assert cycles(folder_graph(g)) == [["skyhive.runtime.actors", "skyhive.runtime.common"]]
    assert folder_of("skyhive.runtime.kinds.ssh.kept") == "skyhive.runtime.kinds.ssh"
    assert folder_of("skyhive.runtime.pool") == "skyhive.runtime" and folder_of("skyhive.cli") == "skyhive"
    assert folder_of("skyhive.providers.cloud.aws") == "skyhive.providers"
    # a kind of node not named in LAYERS (a new one) sits above the named kinds and below the actors
    g = {"skyhive.runtime.kinds.pod.transport": {"skyhive.runtime.kinds.ssh.transport", "skyhive.runtime.nodes.transport"},
         "skyhive.runtime.kinds.ssh.transport": set(), "skyhive.runtime.nodes.transport": set(),
         "skyhive.runtime.kinds.k8s.transport": {"skyhive.runtime.kinds.pod.transport"},
         "skyhive.runtime.kinds.local.transport": {"skyhive.runtime.kinds.pod.transport"}}
    assert upward_edges(g) == [
        "skyhive.runtime.kinds.k8s.transport (13 kinds: any other kind) -> skyhive.runtime.kinds.pod.transport (13 kinds: any other kind)",
        "skyhive.runtime.kinds.local.transport (10 kinds: local, simulated) -> skyhive.runtime.kinds.pod.transport (13 kinds: any other kind)"]


def test_the_allowed_upward_edges_still_exist():
    """An excused edge that is gone must leave the list, so the list only ever shrinks."""
    g = graph()
    assert {(m, t) for m, t in ALLOWED_UPWARD if t not in g.get(m, ())} == set()


def test_errors_and_paths_are_the_floor_importing_nothing_of_the_project():
    g = graph()
    assert g["skyhive.errors"] == set() and g["skyhive.paths"] == set()


def test_the_worker_and_on_node_code_import_only_the_floor_protocol_and_onnode():
    bad = {m: sorted(t for t in ts if not t.startswith(NODE_SIDE_MAY_IMPORT) and t not in NODE_SIDE_ALSO)
           for m, ts in graph().items() if m.startswith(NODE_SIDE)}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_the_node_kind_sdk_stands_on_the_floor_and_the_actors_import_no_kind():
    """runtime/nodes/ (what a kind imports) imports only common/, events/, protocol/, providers/, plugins/ and
    the floor; runtime/actors/ reaches every kind through the SDK's registry, never a kind's folder."""
    g = graph()
    sdk_may = ("skyhive.errors", "skyhive.paths", "skyhive.protocol", "skyhive.providers", "skyhive.plugins",
               "skyhive.runtime.common", "skyhive.runtime.events", "skyhive.runtime.nodes")
    bad = {m: sorted(t for t in ts if not t.startswith(sdk_may) and (m, t) not in ALLOWED_UPWARD)
           for m, ts in g.items() if m.startswith("skyhive.runtime.nodes")}
    assert not {m: ts for m, ts in bad.items() if ts}
    kinds = {m: sorted(t for t in ts if t.startswith("skyhive.runtime.kinds"))
             for m, ts in g.items() if m.startswith("skyhive.runtime.actors")}
    assert not {m: ts for m, ts in kinds.items() if ts}
