"""No kind switches outside a kind's own folder (issue 23, point 2), read from the source (AST):

- no `isinstance`/`issubclass`/`type(x) is` against a specific provider, reach, transport or worker
  class, and
- no comparison of a provider's or reach's name (`provider.name == "aws"`, `reach.kind in ("ssh", ...)`)
  to a kind's or provider's name,

outside the home of that class or name: `runtime/kinds/<kind>/`, `providers/<kind>.py` and
`providers/<kind>_*.py`, and `providers/cloud/` for the clouds. Code elsewhere asks what it needs through a
declared capability (`Provider.unsupported`, `Provider.same_machine`, a kind's `KeepSupport`, ...).

The classes and names are found in the source too (a class deriving, at any depth, from `Provider`,
`Reach`, `Transport` or `WorkerProcess`; a provider class's `name = "..."`; a reach class's `kind`), so a
new kind is covered without editing this test.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("skyhive", "runtime", "providers", "plugins", "protocol")
ROOTS = {"Provider", "Reach", "Transport", "WorkerProcess"}
KINDS = ("local", "ssh", "slurm", "simulated")

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


def home_of(rel: str) -> str | None:
    """The kind (or "cloud") whose own files `rel` is, else None."""
    parts = rel.split("/")
    if parts[:2] == ["runtime", "kinds"] and len(parts) > 3:
        return parts[2]
    if parts[:2] == ["providers", "cloud"]:
        return "cloud"
    if parts[0] == "providers" and len(parts) == 2:
        stem = parts[1][:-3]
        for kind in KINDS:
            if stem == kind or stem.startswith(kind + "_"):
                return kind
        if stem == "fallback":
            return "fallback"
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


@functools.lru_cache(maxsize=1)
def specific_classes() -> tuple[dict[str, str], dict[str, str]]:
    """(class name -> its home kind, provider/kind name -> its home kind) of every specific provider,
    reach, transport and worker class in the source."""
    defs: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in _files():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                defs.setdefault(node.name, (_rel(path), node))

    def root(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        if name in ROOTS:
            return name
        if name not in defs or name in seen:
            return None
        for base in _base_names(defs[name][1]):
            found = root(base, seen | {name})
            if found:
                return found
        return None

    classes: dict[str, str] = {}
    names: dict[str, str] = {}
    for name, (rel, node) in defs.items():
        kind_root = root(name)
        if name in ROOTS or kind_root is None:
            continue
        home = home_of(rel)
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
        return node.attr in {"name", "kind", "provider"}
    if isinstance(node, ast.Name):
        return "provider" in node.id or node.id in {"kind", "reach_kind"}
    return False


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
    found: Counter[tuple[str, str]] = Counter()
    for path in _files(root):
        rel = _rel(path, root)
        here = home_of(rel)
        tree = ast.parse(path.read_text(), str(path))
        # local-import helpers returning a kind's class (`def _local(): from ... import Local; return Local`)
        helpers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                   and any(isinstance(s, ast.Return) and isinstance(s.value, ast.Name) and s.value.id in classes
                           for s in f.body)}
        for node in ast.walk(tree):
            refs: list[str] = []
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
                       f"(Provider.unsupported, same_machine, the kind's KeepSupport): {sorted(extra.items())}")
    gone = {k: n for k, n in ALLOWED.items() if found.get(k, 0) < n}
    assert not gone, f"the allow-list only shrinks: remove or lower these entries now that they are gone: {gone}"
