"""The record's shape is the kept pool's secret (issue 37, done-when 2), read from the source (AST): what
a kept pool's record holds of its nodes — `.instances`, `.on_hosts`, `provider_info[...]` — is read only by
the kept-pool module (`runtime/clusters/kept_pool.py`), the pool's machines made to order
(`runtime/clusters/cloud.py`) and the keep supports of the kinds (`runtime/kinds/*/keep*.py`). Everything
else — the commands, the dashboard, autostop, the CLI — asks a `KeptPool` (status, stop, start, down,
`access(node)`), which asks the kind's `KeepSupport`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("skyhive", "runtime", "providers", "plugins", "protocol")
#: Where the record's shape may be read: the kept-pool module, the machines' code, the keep supports.
OWNERS = ("runtime/clusters/kept_pool.py", "runtime/clusters/cloud.py", "runtime/kinds/*/keep*.py")
ATTRIBUTES = {"instances", "on_hosts"}


def shape_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each `x.instances`, `x.on_hosts` and `x.provider_info[...]` in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES:
            found.append((node.lineno, f".{node.attr}"))
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "provider_info"):
            found.append((node.lineno, "provider_info[...]"))
    return found


def owned(rel: str) -> bool:
    return any(Path(rel).match(pattern) for pattern in OWNERS)


def offenders(root: Path = ROOT) -> list[str]:
    out = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if owned(rel):
                continue
            for line, what in sorted(shape_reads(ast.parse(path.read_text(), rel))):
                out.append(f"{rel}:{line}: {what}")
    return out


def test_the_check_sees_each_way_of_reading_the_shape():
    code = ("a = rec.instances\nif rec.on_hosts: pass\nb = rec.provider_info['cloud']\n"
            "c = rec.provider_info.get('hosts')\nd = info['instances']\n")
    assert shape_reads(ast.parse(code)) == [(1, ".instances"), (2, ".on_hosts"), (3, "provider_info[...]")]
    assert owned("runtime/kinds/ssh/keep.py") and owned("runtime/kinds/ssh/keep_access.py")
    assert owned("runtime/kinds/other/keep.py")  # a new kind's keep support, without an edit here
    assert owned("runtime/clusters/kept_pool.py") and not owned("runtime/clusters/named.py")
    assert not owned("runtime/commands/access.py") and not owned("runtime/kinds/ssh/transport.py")


def test_only_the_kept_pool_and_the_keep_supports_read_the_records_shape():
    found = offenders()
    assert not found, ("the record's shape read outside the kept-pool module and the keep supports (ask a "
                       "`KeptPool`, or the kind's `KeepSupport`):\n" + "\n".join(found))
