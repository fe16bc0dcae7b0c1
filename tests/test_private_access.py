"""No private reach-through (issue 37, done-when 1), read from the source with `ast`:

- the pool's actors (`runtime/actors/`) are imported only by themselves and by `runtime/pool.py` (with
  its views, `runtime/pool_views.py`) and `runtime/calls.py` — every import counts, inside functions and under `TYPE_CHECKING` too; what drives
  a live pool from above goes through `Pool.driver()` (`runtime/nodes/driver.py`);
- `obj._name` is read only where `_name` is the folder's own: a private name is used in the folder
  (directory) that defines it (a `def`/`class`, an assignment to `self._name` or to a class or module
  attribute, a same-folder import); `self._x`, `cls._x`, `super()._x` and dunders are always fine;
- `from module import _name` only from a module of the same folder.

A few private names of the standard library that are its public interface (`os._exit`,
`sys._getframe`, a named tuple's `_replace`/`_asdict`/`_fields`/`_make`) are not reach-through.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_graph import PACKAGES, ROOT

ACTORS = "skyhive.runtime.actors"
#: the modules (besides the actors themselves) that may import the actors
ACTORS_MAY_BE_IMPORTED_BY = {"skyhive.runtime.pool", "skyhive.runtime.pool_views", "skyhive.runtime.calls"}
#: the standard library's documented "private" names
STDLIB_PUBLIC = {"_exit", "_getframe", "_current_frames", "_replace", "_asdict", "_fields", "_make",
                 "_field_defaults",
                 "_SubParsersAction"}  # (argparse's type of `add_subparsers()`: it has no public name)
#: another library's internals read on purpose, where it has no public way: (file, attribute) -> why
THIRD_PARTY = {
    ("runtime/storage/wire.py", "_proxy_config"): "botocore's URLLib3Session: its proxies (read, then checked)",
    ("runtime/storage/wire.py", "_timeout"): "botocore's URLLib3Session: its timeouts",
    ("runtime/storage/wire.py", "_socket_options"): "botocore's URLLib3Session: its socket options",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def sources() -> dict[str, tuple[Path, str]]:
    """module name -> (path, its folder relative to the root)."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = (path, str(path.parent.relative_to(ROOT)))
    return out


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def defined_private(tree: ast.AST) -> set[str]:
    """The private names a module defines (or imports from its own folder: checked apart)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name) and _private(sub.id):
                        names.add(sub.id)
                    elif isinstance(sub, ast.Attribute) and _private(sub.attr):
                        names.add(sub.attr)
        elif isinstance(node, ast.alias) and _private(node.asname or node.name.split(".")[-1]):
            names.add(node.asname or node.name.split(".")[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value) \
                and node.value.isidentifier():  # `__slots__ = ("_x",)`, `setattr(obj, "_x", ...)`
            names.add(node.value)
    return names


def _is_own(base: ast.expr) -> bool:
    """`self`, `cls`, `super()`: the object's own class reaching its own member."""
    if isinstance(base, ast.Name):
        return base.id in ("self", "cls", "mcs")
    return isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"


def violations(files: dict[str, tuple[Path, str]] | None = None) -> list[str]:
    """Each reach-through: 'path:line: what'."""
    files = sources() if files is None else files
    trees = {m: ast.parse(p.read_text(), str(p)) for m, (p, _) in files.items()}
    folder_of = {m: f for m, (_, f) in files.items()}
    own: dict[str, set[str]] = {}
    for m, tree in trees.items():
        own.setdefault(folder_of[m], set()).update(defined_private(tree))
    bad = []
    for m, tree in trees.items():
        path, folder = files[m]
        where = path.relative_to(ROOT)
        in_actors = m == ACTORS or m.startswith(ACTORS + ".")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                else:
                    base = _absolute(m, path, node)
                    targets = [base] + [f"{base}.{a.name}" for a in node.names]
                    for a in node.names:
                        src = files.get(base) or files.get(f"{base}.{a.name}")
                        if _private(a.name) and base.startswith("skyhive") and (src is None or src[1] != folder):
                            bad.append(f"{where}:{node.lineno}: imports {a.name} from {base} (another folder's private name)")
                if not in_actors and m not in ACTORS_MAY_BE_IMPORTED_BY and any(
                        t == ACTORS or t.startswith(ACTORS + ".") for t in targets):
                    bad.append(f"{where}:{node.lineno}: imports the pool's actors ({ACTORS}): use Pool.driver()")
            elif isinstance(node, ast.Attribute) and _private(node.attr) and not _is_own(node.value):
                if (node.attr in STDLIB_PUBLIC or node.attr in own.get(folder, ())
                        or (str(where), node.attr) in THIRD_PARTY):
                    continue
                bad.append(f"{where}:{node.lineno}: reads {ast.unparse(node)} (private to another folder)")
    return sorted(set(bad))


def test_no_private_reach_through_across_folders():
    bad = violations()
    assert not bad, "private reach-through (see this test's docstring):\n" + "\n".join(bad)


def _write(tmp: Path, files: dict[str, str]) -> dict[str, tuple[Path, str]]:
    out = {}
    for rel, text in files.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        parts = list(Path(rel).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(["skyhive", *parts])] = (path, str(path.parent.relative_to(ROOT)) if path.is_relative_to(ROOT)
                                               else str(path.parent))
    return out


def test_the_check_finds_each_kind_of_reach_through(tmp_path, monkeypatch):
    import tests.test_private_access as me

    monkeypatch.setattr(me, "ROOT", tmp_path)
    files = _write(tmp_path, {
        "runtime/actors/pool_actor.py": "class PoolRuntime:\n    def _secret(self):\n        self._n = 1\n",
        "runtime/pool.py": "from .actors.pool_actor import PoolRuntime\n_rt = None\n",
        "runtime/control/steps.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from ..actors.pool_actor import PoolRuntime\n"
            "from ..pool import _rt\n"
            "def f(pool):\n    return pool._runtime, pool._n\n"),
        "runtime/control/ok.py": (
            "import os\nfrom .steps import f\n_cache = {}\n"
            "class A:\n    def _m(self):\n        return self._m, super()._x, _cache, os._exit, A()._m\n"),
    })
    bad = violations(files)
    assert bad == [
        f"runtime/control/steps.py:3: imports the pool's actors (skyhive.runtime.actors): use Pool.driver()",
        f"runtime/control/steps.py:4: imports _rt from skyhive.runtime.pool (another folder's private name)",
        f"runtime/control/steps.py:6: reads pool._n (private to another folder)",
        f"runtime/control/steps.py:6: reads pool._runtime (private to another folder)",
    ]
