"""A task group is entered only with `async with` (issue 23): never by hand (`tg.__aenter__()`) and closed
through a private helper from several places, as the pool's once was. Read from the source (AST)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("skyhive", "runtime", "providers", "plugins", "protocol")


def entered_by_hand(root: Path = ROOT) -> list[str]:
    """`file:line` of each `create_task_group()` that is not the context expression of an `async with`."""
    found = []
    for path in sorted(p for folder in SOURCES for p in (root / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        in_async_with = {id(item.context_expr) for node in ast.walk(tree) if isinstance(node, ast.AsyncWith)
                         for item in node.items}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "create_task_group"
                                               or getattr(node.func, "id", None) == "create_task_group"):
                if id(node) not in in_async_with:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_task_groups_are_entered_only_with_async_with():
    assert entered_by_hand() == []


def test_the_rule_sees_a_task_group_entered_by_hand(tmp_path):
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "bad.py").write_text(
        "import anyio\n"
        "async def f():\n"
        "    tg = anyio.create_task_group()\n"
        "    await tg.__aenter__()\n"
        "    async with anyio.create_task_group() as ok:\n"
        "        pass\n")
    assert entered_by_hand(tmp_path) == ["runtime/bad.py:3"]
