"""Ties by name follow the layers too (issue 37, done-when 5): a string in the source that names a module of
the project (`"skyhive.runtime.commands.agent"`, `"skyhive.runtime.bootstrap.node:bootstrap_node"`, the
`-m MODULE` of a command line) is a dependency the import graph does not see, so it may only point where an
import may (`tests/test_import_graph.py`'s LAYERS: down, or within its own folder). The one kind of name
exempt is a registration the packaging declares: an entry point in `pyproject.toml` (the built-in kinds, which
`runtime/nodes/registry.py` mirrors to find them without reading every package's metadata)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests.test_import_graph import LAYERS, ROOT, folder_of, modules, rank

_NAME = re.compile(r"skyhive(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")


def entry_points() -> set[str]:
    """Every "module:attr" the packaging registers as an entry point."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {value for group in data["project"].get("entry-points", {}).values() for value in group.values()}


def named_module(text: str, known: set[str]) -> str | None:
    """The project module `text` (a dotted name, maybe with ":attr") names: its longest known prefix."""
    parts = text.split(":", 1)[0].split(".")
    for end in range(len(parts), 1, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def string_ties(scan: dict[str, Path], known: set[str] | None = None) -> list[str]:
    """Each string in the modules `scan` naming a module of the project (`known`, default: those scanned)
    against the layers: 'module:line -> named (layers)'."""
    known = set(scan) if known is None else known
    registered = entry_points()
    bad = []
    for name, path in sorted(scan.items()):
        a = folder_of(name)
        tree = ast.parse(path.read_text(), str(path))
        prose = {id(body[0].value) for n in ast.walk(tree)  # docstrings say where things are: not a tie
                 if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                 and (body := n.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in prose:
                continue
            for text in _NAME.findall(node.value):
                target = named_module(text, known)
                if target is None or target == name or text in registered:
                    continue
                b = folder_of(target)
                if a != b and rank(b) >= rank(a):
                    bad.append(f"{name}:{node.lineno} -> {text} ({LAYERS[rank(a)][0]} -> {LAYERS[rank(b)][0]})")
    return bad


def test_no_module_is_tied_upwards_by_its_name():
    bad = string_ties(modules())
    assert not bad, ("a module named by a string above (or beside) the one naming it: import it downwards, or "
                     "let the upper one register itself:\n" + "\n".join(bad))


def test_the_scan_finds_a_tie_by_name_and_spares_a_registration(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text('"""A docstring may name skyhive.runtime.commands.agent: prose."""\n'
                    'AGENT = "skyhive.runtime.commands.agent"\n'
                    'ARGV = f"python -m skyhive.runtime.managed.controller {1}"\n'
                    'KIND = "skyhive.runtime.kinds.local:KIND"\n'  # an entry point: registered
                    'DOWN = "skyhive.runtime.common.daemon:serve"\n'  # below: fine
                    'SAME = "skyhive.runtime.nodes.keep"\n'  # its own folder: fine
                    'OTHER = "skyhive is a library"\n')
    found = string_ties({"skyhive.runtime.nodes.fake": fake}, set(modules()))
    assert [t.split(" -> ")[1].split(" (")[0] for t in found] == [
        "skyhive.runtime.commands.agent", "skyhive.runtime.managed.controller"], found


def test_the_layer_rows_have_unique_labels():
    labels = [label for label, _ in LAYERS]
    assert len(labels) == len(set(labels)), f"two rows of LAYERS share a label: {labels}"
