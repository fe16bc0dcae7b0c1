"""No kind switches outside a kind's own folder (issue 23, point 2), read from the source (AST):

- no `isinstance`/`issubclass`/`type(x) is` against a specific provider, reach, transport or worker
  class, and
- no comparison of a provider's or reach's name (`provider.name == "aws"`, `reach.kind in ("ssh", ...)`)
  to a kind's or provider's name, and
- no lookup keyed by one in a table of kinds' or providers' names (`{"aws": ..., "gcp": ...}[cloud]`,
  `{"local": ...}.get(provider.name)`, or the same through a name bound to such a table in the file),

outside the home of that class or name: `runtime/kinds/<kind>/`, `providers/<kind>.py` and
`providers/<kind>_*.py`, and `providers/cloud/` for the clouds. Code elsewhere asks what it needs through a
declared capability (`Provider.features`, a kind's `KeepSupport`, ...).

The classes and names are found in the source too (a class deriving, at any depth, from `Provider`,
`Reach`, `Transport` or `WorkerProcess`; a provider class's `name = "..."`; a reach class's `kind`), and so
are the kinds' homes: `providers/<stem>.py` is a provider's home when it declares a provider class (its
`name` is the kind). A new kind — a new `providers/x.py` — is covered without editing this test.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("skyhive", "runtime", "providers", "plugins", "protocol")
ROOTS = {"Provider", "Reach", "Transport", "WorkerProcess"}

#: Exceptions to the rule, each entry (file, the class or name it switches on) -> how many times: none
#: (the last ones, `skyhive check`, the `--infra` spellings and a managed job's saved Fallback, now ask
#: `Provider.check`, `Provider.infra` and `Provider.candidates`). It only shrinks.
ALLOWED: dict[tuple[str, str], int] = {}


def _files(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in SOURCES for p in (root / folder).rglob("*.py"))


@functools.lru_cache(maxsize=None)
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _rel(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).as_posix()


@functools.lru_cache(maxsize=None)
def _defs(root: Path = ROOT) -> dict[str, tuple[str, ast.ClassDef]]:
    """Every class of the source under `root`: name -> (file, its definition) (the first one found)."""
    defs: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in _files(root):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                defs.setdefault(node.name, (_rel(path, root), node))
    return defs


def _root(defs: dict[str, tuple[str, ast.ClassDef]], name: str, seen: frozenset[str] = frozenset()) -> str | None:
    """Which of ROOTS the class `name` derives from (at any depth), or None."""
    if name in ROOTS:
        return name
    if name not in defs or name in seen:
        return None
    for base in _base_names(defs[name][1]):
        found = _root(defs, base, seen | {name})
        if found:
            return found
    return None


@functools.lru_cache(maxsize=None)
def provider_kinds(root: Path = ROOT) -> frozenset[str]:
    """The kinds whose home is a file of providers/: the `name` each provider class declared in a
    `providers/<stem>.py` says (read from the declarations, not listed here)."""
    defs = _defs(root)
    return frozenset(kind for name, (rel, node) in defs.items()
                     if rel.count("/") == 1 and rel.startswith("providers/") and _root(defs, name) == "Provider"
                     and (kind := _class_str(node, "name")))


def home_of(rel: str, kinds: frozenset[str] | None = None) -> str | None:
    """The kind (or "cloud") whose own files `rel` is, else None (`kinds`: the providers' kinds,
    `provider_kinds()`)."""
    parts = rel.split("/")
    if parts[:2] == ["runtime", "kinds"] and len(parts) > 3:
        return parts[2]
    if parts[:2] == ["providers", "cloud"]:
        return "cloud"
    if parts[0] == "providers" and len(parts) == 2:
        stem = parts[1][:-3]
        for kind in sorted(provider_kinds() if kinds is None else kinds):
            if stem == kind or stem.startswith(kind + "_"):
                return kind
    return None


def _base_names(node: ast.ClassDef) -> list[str]:
    out = []
    for b in node.bases:
        if isinstance(b, ast.Name):
            out.append(b.id)
        elif isinstance(b, ast.Attribute):
            out.append(b.attr)
    return out


def _class_str(node: ast.ClassDef, attr: str) -> str | None:
    for stmt in node.body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else (stmt.targets[0] if isinstance(stmt, ast.Assign)
                                                                       and len(stmt.targets) == 1 else None)
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(target, ast.Name) and target.id == attr and isinstance(value, ast.Constant) \
                and isinstance(value.value, str):
            return value.value
    return None


@functools.lru_cache(maxsize=None)
def specific_classes(root: Path = ROOT) -> tuple[dict[str, str], dict[str, str]]:
    """(class name -> its home kind, provider/kind name -> its home kind) of every specific provider,
    reach, transport and worker class in the source under `root`."""
    defs = _defs(root)
    kinds = provider_kinds(root)
    classes: dict[str, str] = {}
    names: dict[str, str] = {}
    for name, (rel, node) in defs.items():
        kind_root = _root(defs, name)
        if name in ROOTS or kind_root is None:
            continue
        home = home_of(rel, kinds)
        reach_kind = _class_str(node, "kind") if kind_root == "Reach" else None
        if rel == "providers/base.py" and reach_kind:  # the built-in reaches are declared with the ABCs
            home = reach_kind.split("_")[0]
        if home is None:
            continue  # not a kind's class (the kept-pool wrapper, a test double): nothing to switch on
        classes[name] = home
        if reach_kind:
            names[reach_kind] = home
        if kind_root == "Provider" and (provider_name := _class_str(node, "name")):
            names[provider_name] = home
    return classes, names


def _class_refs(node: ast.expr) -> list[str]:
    """The class names an isinstance's second argument (or a `type(x) is ...` operand) names."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # a lazy import helper: `_local()`
        return [f"{node.func.id}()"]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for elt in node.elts for n in _class_refs(elt)]
    return []


def _looks_like_a_name_of_kind(node: ast.expr) -> bool:
    """`x.name`, `x.kind`, `provider`, `kind`, `rec.provider`, `type(r).kind`, `getattr(x, "name", None)`: what
    names a provider or a kind."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
        return node.args[1].value in {"name", "kind"}
    if isinstance(node, ast.Attribute):
        return node.attr in {"name", "kind", "provider", "cloud"}
    if isinstance(node, ast.Name):
        return "provider" in node.id or "cloud" in node.id or node.id in {"kind", "reach_kind"}
    return False


def _table_keys(node: ast.expr, tables: dict[str, list[str]]) -> list[str] | None:
    """The string keys of the table `node` is: a dict literal, or a name bound to one in the file."""
    if isinstance(node, ast.Dict):
        return [s for k in node.keys if k is not None for s in _strings(k)]
    if isinstance(node, ast.Name) and node.id in tables:
        return tables[node.id]
    if isinstance(node, ast.Attribute) and node.attr in tables:  # `self.TABLE`, `module.TABLE`
        return tables[node.attr]
    return None


def _registration(table: ast.Dict) -> bool:
    """A table of where each name is declared ("module:attr"), as `runtime/nodes/registry.py` mirrors the
    kinds' entry points: a registry, not a switch."""
    return bool(table.values) and all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                                      and ":" in v.value and " " not in v.value for v in table.values)


def _lookup(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(the table, the key) of `table[key]` or `table.get(key, ...)`, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return node.value, node.slice
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return node.func.value, node.args[0]
    return None


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def switches(root: Path = ROOT, known: tuple[dict[str, str], dict[str, str]] | None = None) -> Counter[tuple[str, str]]:
    """(file, the class or name switched on) -> count, for each switch outside that class's or name's home
    (in the source under `root`; `known`: the classes and names, by default this project's)."""
    classes, names = known or specific_classes()
    kinds = provider_kinds(root) | provider_kinds()
    found: Counter[tuple[str, str]] = Counter()
    for path in _files(root):
        rel = _rel(path, root)
        here = home_of(rel, kinds)
        tree = ast.parse(path.read_text(), str(path))
        # names bound to a table of kinds' names in this file (`CLOUD_OF = {"aws": ..., "gcp": ...}`)
        tables: dict[str, list[str]] = {}
        for a in ast.walk(tree):
            if isinstance(a, (ast.Assign, ast.AnnAssign)) and isinstance(a.value, ast.Dict) \
                    and not _registration(a.value):
                keys = _table_keys(a.value, {}) or []
                if any(k in names for k in keys):
                    for t in a.targets if isinstance(a, ast.Assign) else [a.target]:
                        if isinstance(t, (ast.Name, ast.Attribute)):
                            tables[t.id if isinstance(t, ast.Name) else t.attr] = keys
        # local-import helpers returning a kind's class (`def _local(): from ... import Local; return Local`)
        helpers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                   and any(isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and s.value.id in classes
                           for s in f.body)}
        for node in ast.walk(tree):
            refs: list[str] = []
            lookup = _lookup(node)
            if lookup is not None and _looks_like_a_name_of_kind(lookup[1]) \
                    and not (isinstance(lookup[0], ast.Dict) and _registration(lookup[0])):
                for s in _table_keys(lookup[0], tables) or []:
                    if s in names and names[s] != here:
                        found[(rel, repr(s))] += 1
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in {"isinstance", "issubclass"} and len(node.args) == 2:
                refs = _class_refs(node.args[1])
            elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn, ast.Eq,
                                                                         ast.NotEq)) for op in node.ops):
                operands = [node.left, *node.comparators]
                if any(isinstance(o, ast.Call) and isinstance(o.func, ast.Name) and o.func.id == "type"
                       for o in operands):
                    refs = [r for o in operands for r in _class_refs(o) if not r.startswith("type(")]
                if any(_looks_like_a_name_of_kind(o) for o in operands):
                    for o in operands:
                        for s in _strings(o):
                            if s in names and names[s] != here:
                                found[(rel, repr(s))] += 1
            for ref in refs:
                home = classes.get(ref) or ("helper" if ref.endswith("()") and ref[:-2] in helpers else None)
                if home is not None and home != here:
                    found[(rel, ref)] += 1
    return found


def test_the_scan_sees_the_kinds_classes_and_names():
    """The rule below is only as good as what it knows: the built-in kinds' classes and names are found."""
    classes, names = specific_classes()
    for cls, home in {"Local": "local", "LocalCluster": "local", "LocalReach": "local", "DetachedLocalReach": "local",
                      "LocalTransport": "local", "DetachedWorker": "local", "SSH": "ssh", "SSHReach": "ssh",
                      "KeptSSHReach": "ssh", "SSHCluster": "ssh", "SSHTransport": "ssh", "SSHWorker": "ssh",
                      "Slurm": "slurm", "AWS": "cloud", "LibcloudProvider": "cloud", "Simulated": "simulated"}.items():
        assert classes.get(cls) == home, (cls, classes.get(cls))
    for name, home in {"local": "local", "ssh": "ssh", "aws": "cloud", "gcp": "cloud", "slurm": "slurm",
                       "local_detached": "local"}.items():
        assert names.get(name) == home, (name, names.get(name))
    assert "KeptProvider" not in classes  # the kept-pool wrapper is no kind's: code may ask for it


def test_the_scan_catches_each_shape_of_switch(tmp_path):
    """Each shape the rule forbids is caught (a rule that cannot fail is no rule)."""
    src = tmp_path / "runtime" / "clusters"
    src.mkdir(parents=True)
    (src / "bad.py").write_text(
        "def f(provider, reach, t):\n"
        "    if isinstance(provider, Local): pass\n"
        "    if type(provider) not in (Local, SSH): pass\n"
        "    if provider.name == 'aws': pass\n"
        "    if type(reach).kind in ('ssh', 'local'): pass\n"
        "    if isinstance(t, (SSHTransport, object)): pass\n"
        "    if getattr(getattr(provider, 'provider', None), 'name', None) == 'local': pass\n")
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "ssh.py").write_text("def g(provider):\n    return isinstance(provider, SSH) or provider.name == 'ssh'\n")
    found = switches(tmp_path, specific_classes())
    assert found == Counter({("runtime/clusters/bad.py", "Local"): 2, ("runtime/clusters/bad.py", "SSH"): 1,
                             ("runtime/clusters/bad.py", "'aws'"): 1, ("runtime/clusters/bad.py", "'ssh'"): 1,
                             ("runtime/clusters/bad.py", "'local'"): 2,
                             ("runtime/clusters/bad.py", "SSHTransport"): 1}), found


def test_no_kind_switch_outside_a_kinds_own_folder():
    found = switches()
    extra = {k: n for k, n in found.items() if n > ALLOWED.get(k, 0)}
    assert not extra, ("a kind switch outside that kind's folder: ask a declared capability instead "
                       f"(Provider.features, the kind's KeepSupport): {sorted(extra.items())}")
    gone = {k: n for k, n in ALLOWED.items() if found.get(k, 0) < n}
    assert not gone, f"the allow-list only shrinks: remove or lower these entries now that they are gone: {gone}"


def test_the_kinds_homes_come_from_the_providers_declarations():
    """No hand-kept list: each `providers/<stem>.py` declaring a provider class is that kind's home."""
    assert {"local", "ssh", "slurm", "simulated", "fallback"} <= provider_kinds()
    assert "aws" not in provider_kinds()  # the clouds live in providers/cloud/, one home for all of them
    assert home_of("providers/ssh_config.py") == "ssh" and home_of("providers/registry.py") is None


def test_a_new_provider_module_is_covered_without_editing_the_test(tmp_path):
    (tmp_path / "providers").mkdir()
    (tmp_path / "providers" / "xcloud.py").write_text(
        "class XCloud(Provider):\n    name = 'xcloud'\n\n"
        "def own(provider):\n    return provider.name == 'xcloud' or {'xcloud': 1}[provider.name]\n")
    (tmp_path / "providers" / "xcloud_api.py").write_text("def f(cloud):\n    return cloud == 'xcloud'\n")
    src = tmp_path / "runtime" / "commands"
    src.mkdir(parents=True)
    (src / "bad.py").write_text(
        "WHERE = {'xcloud': 'a cloud', 'elsewhere': 'x'}\n"
        "REGISTERED = {'xcloud': 'skyhive_x.kind:KIND'}\n"  # a registration: where each kind is declared
        "def f(provider, cloud, rec):\n"
        "    if provider.name == 'xcloud': pass\n"
        "    a = {'xcloud': 1, 'other': 2}[cloud]\n"
        "    b = {'xcloud': 'this machine'}.get(provider.name, 'existing machines')\n"
        "    c = WHERE[rec.cloud]\n"
        "    d = WHERE.get(cloud)\n"
        "    e = REGISTERED[cloud]\n"
        "    g = WHERE['xcloud']\n"  # a constant key: not a lookup by a kind's name
        "    return a, b, c, d, e, g\n")
    assert provider_kinds(tmp_path) == {"xcloud"}
    found = switches(tmp_path, specific_classes(tmp_path))
    assert found == Counter({("runtime/commands/bad.py", "'xcloud'"): 5}), found
