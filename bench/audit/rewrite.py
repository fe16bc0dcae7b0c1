"""The only edits the audit makes to a program "as written" — each rule does one thing and says it did.

1. `import skyward` → `import skyhive` (Python): the module name in `import`/`from ... import` statements
   (`skyward.x` → `skyhive.x`), nothing else in the file (a string or comment that says "skyward" stays).
2. A cloud → `sky.Local()` (Python): a call of one of Skyward's cloud providers on the module's alias
   (`sky.AWS(...)`, `sky.VastAI(region="x")`, ...) becomes `sky.Local()`, its arguments dropped; in a
   SkyPilot task file a `cloud:`/`infra:` value becomes `local`; on a command line `--infra X`/`--cloud X`
   becomes `--infra local`/`--cloud local`.
3. `sky` → `skyhive` (CLI): the word `sky` where a shell command starts (line start, after `;`, `&&`,
   `||`, `|`, `$(`, `(` or an `ENV=value` prefix) — `sky launch` → `skyhive launch`; `sky` elsewhere
   (a path, a word in an echo) stays.

Each function returns the new text and the list of rules it applied (each applied rule once, with a count).
"""

from __future__ import annotations

import ast
import re

# Skyward's providers (skyward/__init__.py of the mirrored repository: `from .providers import ...`).
SKYWARD_CLOUDS = ("AWS", "GCP", "Container", "Hyperstack", "JarvisLabs", "LambdaCloud", "MassedCompute",
                  "Novita", "RunPod", "Scaleway", "TensorDock", "VastAI", "Verda", "Vultr", "Kubernetes")

_IMPORT = re.compile(r"^(\s*)(import|from)(\s+)skyward(?=[\s.,]|$)", re.M)
_IMPORT_MORE = re.compile(r"(,\s*)skyward(?=[\s.,]|$)")


def _aliases(tree: ast.AST) -> set[str]:
    """The names the skyward module is bound to (`import skyward as sky` → {"sky"})."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "skyward":
                    names.add(alias.asname or "skyward")
    return names


def _cloud_calls(source: str, tree: ast.AST, aliases: set[str], imported: set[str]) -> list[tuple[int, int]]:
    """(start, end) offsets of every call of a Skyward cloud: `alias.AWS(...)` or an imported `AWS(...)`."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets
        return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        hit = (isinstance(fn, ast.Attribute) and fn.attr in SKYWARD_CLOUDS
               and isinstance(fn.value, ast.Name) and fn.value.id in aliases) or \
              (isinstance(fn, ast.Name) and fn.id in imported)
        if hit:
            spans.append((offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)))
    # outermost first, no nested spans
    spans.sort()
    kept: list[tuple[int, int]] = []
    for start, end in spans:
        if kept and start < kept[-1][1]:
            continue
        kept.append((start, end))
    return kept


def rewrite_python(source: str) -> tuple[str, list[str]]:
    """Rules 1 and 2 on a Python program; the text is otherwise byte-for-byte the same."""
    applied: list[str] = []
    tree = ast.parse(source)
    aliases = _aliases(tree)
    imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and (node.module or "").split(".")[0] == "skyward" for a in node.names if a.name in SKYWARD_CLOUDS}
    spans = _cloud_calls(source, tree, aliases, imported)
    local = f"{sorted(aliases)[0]}.Local()" if aliases else "skyhive.Local()"
    for start, end in reversed(spans):
        source = source[:start] + local + source[end:]
    if spans:
        applied.append(f"cloud → {local} ×{len(spans)}")
        if not aliases:
            # the program imported its clouds by name: the Local it now calls needs the module
            source = "import skyhive\n" + source
    count = 0

    def fix(match: re.Match) -> str:
        nonlocal count
        count += 1
        return f"{match.group(1)}{match.group(2)}{match.group(3)}skyhive"

    lines = []
    for line in source.splitlines(keepends=True):
        new = _IMPORT.sub(fix, line)
        if new != line and new.lstrip().startswith("import"):
            new = _IMPORT_MORE.sub(lambda m: (m.group(1) + "skyhive"), new)
        lines.append(new)
    source = "".join(lines)
    if count:
        applied.insert(0, f"import skyward → import skyhive ×{count}")
    return source, applied


def rewrite_yaml(text: str) -> tuple[str, list[str]]:
    """Rule 2 on a SkyPilot task file: the value of each `cloud:`/`infra:` key (any mapping, any document of
    the file, `any_of`/`ordered` entries included) → `local`; every other byte, comments and block text (a
    `run:` script that says "cloud: aws") included, stays."""
    import yaml

    spans = []
    for doc in yaml.compose_all(text, Loader=yaml.SafeLoader):
        stack = [doc] if doc is not None else []
        while stack:
            node = stack.pop()
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if (isinstance(key, yaml.ScalarNode) and key.value in ("cloud", "infra")
                            and isinstance(value, yaml.ScalarNode) and value.value not in ("local", "")):
                        spans.append((value.start_mark.index, value.end_mark.index))
                    stack.append(value)
            elif isinstance(node, yaml.SequenceNode):
                stack.extend(node.value)
    for start, end in sorted(spans, reverse=True):
        text = text[:start] + "local" + text[end:]
    return text, ([f"cloud/infra → local ×{len(spans)}"] if spans else [])


_CLI_START = re.compile(r"(^|;|&&|\|\||\||\$\(|\()(\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)sky(?=\s|$)", re.M)
_CLI_CLOUD = re.compile(r"(--(?:infra|cloud))(\s+|=)(?!local\b)([^\s;&|)]+)")


def rewrite_command(command: str) -> tuple[str, list[str]]:
    """Rules 2 and 3 on a shell command line (a SkyPilot smoke test's step)."""
    applied: list[str] = []
    new, count = _CLI_START.subn(lambda m: f"{m.group(1)}{m.group(2)}skyhive", command)
    if count:
        applied.append(f"sky → skyhive ×{count}")
    new, clouds = _CLI_CLOUD.subn(lambda m: f"{m.group(1)}{m.group(2)}local", new)
    if clouds:
        applied.append(f"--infra/--cloud → local ×{clouds}")
    return new, applied
