"""Task files: the SkyPilot-compatible YAML subset that `skyhive launch` runs.

    name: train
    num_nodes: 2
    resources: {cloud: local, accelerators: L4:2, cpus: 8+}
    envs: {EPOCHS: 3}
    workdir: .
    setup: pip install -r requirements.txt     # once per node
    run: torchrun ... main.py                  # on every node

`load(path)` returns a frozen `Task`. A malformed file raises `TaskFileError` naming the file, the line
and the field; a key skyhive does not know (or knows from SkyPilot but does not support) is a warning
in `Task.warnings`, never an error, so existing task files run.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ...errors import TaskFileError
from ...providers.base import ProvisionError
from ...providers.registry import canonical

__all__ = ["TaskFileError", "Resources", "Task", "load", "loads", "parse_env_overrides"]

_TOP = ("name", "num_nodes", "resources", "envs", "secrets", "workdir", "setup", "run")
# SkyPilot keys that skyhive reads past (with a warning saying it ignores them)
_TOP_SKYPILOT = ("file_mounts", "config", "service", "inputs", "outputs", "event_callback", "volumes",
                 "experimental", "storage_mounts", "pool", "docker")
_RES = ("cloud", "provider", "infra", "accelerators", "cpus", "hosts")
_RES_SKYPILOT = ("memory", "disk_size", "disk_tier", "instance_type", "use_spot", "spot_recovery",
                 "job_recovery", "region", "zone", "image_id", "ports", "labels", "accelerator_args",
                 "network_tier", "any_of", "ordered", "autostop", "priority", "volumes")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ACCEL = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)(?::(\d+))?\Z")
_CPUS = re.compile(r"(\d+(?:\.\d+)?)(\+?)\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """What each node needs. `provider` None means Local; `cpus_or_more` is the `+` of `8+`."""

    provider: str | None = None
    accelerator: str | None = None
    accelerator_count: int = 0
    cpus: float | None = None
    cpus_or_more: bool = False
    hosts: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.accelerator:
            parts.append(f"{self.accelerator}:{self.accelerator_count}")
        if self.cpus is not None:
            parts.append(f"cpus {self.cpus:g}{'+' if self.cpus_or_more else ''}")
        return ", ".join(parts) or "any"


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A parsed task file. `envs`/`secrets` values are None where the file leaves them to `--env`."""

    name: str | None = None
    num_nodes: int = 1
    resources: Resources = field(default_factory=Resources)
    envs: tuple[tuple[str, str | None], ...] = ()
    secrets: tuple[tuple[str, str | None], ...] = ()
    workdir: str | None = None  # absolute
    setup: str | None = None
    run: str | None = None
    source: str = "<task>"
    warnings: tuple[str, ...] = ()
    lines: tuple[tuple[str, int], ...] = ()  # field path -> line, for errors found later

    def line_of(self, path: str) -> str:
        """`FILE:LINE` of a field (or of the nearest enclosing one), for messages."""
        lines = dict(self.lines)
        while path and path not in lines:
            path = path.rpartition(".")[0]
        return f"{self.source}:{lines[path]}" if path in lines else self.source

    def env(self) -> dict[str, str]:
        """The task's plain environment; raises `TaskFileError` for a variable left without a value."""
        return self._values(self.envs, "envs")

    def secret_env(self) -> dict[str, str]:
        return self._values(self.secrets, "secrets")

    def _values(self, pairs: tuple[tuple[str, str | None], ...], where: str) -> dict[str, str]:
        missing = [k for k, v in pairs if v is None]
        if missing:
            key = missing[0]
            raise TaskFileError(f"{self.line_of(f'{where}.{key}')}: {where}.{key} has no value: "
                                f"pass it with --env {key}=VALUE")
        return {k: v for k, v in pairs if v is not None}

    def with_overrides(self, *, nodes: int | None = None, provider: str | None = None,
                       hosts: tuple[str, ...] = (), env: Mapping[str, str] | None = None,
                       workdir: str | None = None) -> Task:
        """The task with command-line options applied (they win over the file)."""
        task = self
        if nodes is not None:
            if nodes < 1:
                raise TaskFileError(f"--nodes {nodes}: need at least one node")
            task = replace(task, num_nodes=nodes)
        res = task.resources
        if provider is not None:
            res = replace(res, provider=_provider_name(provider, "--provider"))
        if hosts:
            res = replace(res, hosts=tuple(hosts))
        task = replace(task, resources=res)
        if env:
            secret_names = {k for k, _ in task.secrets}
            envs = dict(task.envs)
            secrets = dict(task.secrets)
            for k, v in env.items():
                (secrets if k in secret_names else envs)[k] = v
            task = replace(task, envs=tuple(envs.items()), secrets=tuple(secrets.items()))
        if workdir is not None:
            task = replace(task, workdir=_workdir(workdir, "--workdir", os.getcwd(), None))
        return task


def parse_env_overrides(items: list[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`--env K=V` options (a bare `--env K` takes K from this environment), as a dict."""
    environ = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not _ENV_NAME.match(key):
            raise TaskFileError(f"--env {item}: {key!r} is not a valid environment variable name")
        if not sep:
            if key not in environ:
                raise TaskFileError(f"--env {key}: no value given and {key} is not set here")
            value = environ[key]
        out[key] = value
    return out


def load(path: str | os.PathLike[str], *, cwd: str | None = None) -> Task:
    """Read and check a task file; relative `workdir`s resolve against `cwd` (as SkyPilot does)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskFileError(f"cannot read task file {os.fspath(path)}: {exc.strerror or exc}") from None
    return loads(text, source=os.fspath(path), cwd=cwd)


def loads(text: str, *, source: str = "<task>", cwd: str | None = None) -> Task:
    return _Parser(text, source, cwd or os.getcwd()).task()


class _Parser:
    def __init__(self, text: str, source: str, cwd: str) -> None:
        self.source = source
        self.cwd = cwd
        self.warnings: list[tuple[int, str]] = []
        self.lines: dict[str, int] = {}
        self.loader = yaml.SafeLoader(text)

    def error(self, node: Node | None, path: str, problem: str) -> TaskFileError:
        where = f"{self.source}:{node.start_mark.line + 1}" if node is not None else self.source
        return TaskFileError(f"{where}: {path}: {problem}")

    def warn(self, node: Node, text: str) -> None:
        self.warnings.append((node.start_mark.line + 1, f"{self.source}:{node.start_mark.line + 1}: {text}"))

    def value(self, node: Node) -> Any:
        return self.loader.construct_object(node, deep=True)

    def task(self) -> Task:
        try:
            try:
                root = self.loader.get_single_node()
            except yaml.MarkedYAMLError as exc:
                mark = exc.problem_mark or exc.context_mark
                where = f"{self.source}:{mark.line + 1}:{mark.column + 1}" if mark else self.source
                raise TaskFileError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
            except yaml.YAMLError as exc:
                raise TaskFileError(f"{self.source}: not valid YAML: {exc}") from None
            if root is None:
                raise TaskFileError(f"{self.source}: the task file is empty (it needs at least `run`)")
            return self._task(root)
        finally:
            self.loader.dispose()

    def _mapping(self, node: Node, path: str, known: tuple[str, ...], skypilot: tuple[str, ...]) -> dict[str, Node]:
        if not isinstance(node, MappingNode):
            what = "the task file" if not path else path
            raise self.error(node, path or "(top level)", f"{what} must be a mapping of keys to values, "
                             f"got {_kind(node)}")
        out: dict[str, Node] = {}
        for knode, vnode in node.value:
            key = self.value(knode)
            full = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str):
                raise self.error(knode, full, "keys must be strings")
            if key in out:
                self.warn(knode, f"{full} appears twice; the last one is used")
            if key not in known:
                if key in skypilot:
                    self.warn(knode, f"{full} is not supported by skyhive yet; ignored")
                else:
                    near = difflib.get_close_matches(key, known, n=1)
                    hint = f" (did you mean {path + '.' if path else ''}{near[0]}?)" if near else ""
                    self.warn(knode, f"unknown key {full}{hint}; ignored")
                continue
            out[key] = vnode
            self.lines[full] = knode.start_mark.line + 1
        return out

    def _task(self, root: Node) -> Task:
        top = self._mapping(root, "", _TOP, _TOP_SKYPILOT)
        name = self._name(top.get("name"))
        num_nodes = self._int(top.get("num_nodes"), "num_nodes", default=1)
        resources = self._resources(top.get("resources"))
        envs = self._env(top.get("envs"), "envs")
        secrets = self._env(top.get("secrets"), "secrets")
        both = {k for k, _ in envs} & {k for k, _ in secrets}
        if both:
            raise self.error(top.get("secrets"), "secrets", f"{', '.join(sorted(both))} is also in envs")
        workdir = None
        if "workdir" in top:
            node = top["workdir"]
            raw = self.value(node)
            if raw is not None:
                if not isinstance(raw, str):
                    raise self.error(node, "workdir", f"expected a directory path, got {_kind(node)}")
                workdir = _workdir(raw, f"{self.source}:{node.start_mark.line + 1}: workdir", self.cwd,
                                   os.path.dirname(os.path.abspath(self.source)))
        setup = self._script(top.get("setup"), "setup")
        run = self._script(top.get("run"), "run")
        if run is None:
            self.warnings.append((0, f"{self.source}: the task has no `run` command: only setup will run"))
        warnings = tuple(text for _, text in sorted(self.warnings, key=lambda w: w[0]))  # in file order
        return Task(name=name, num_nodes=num_nodes, resources=resources, envs=envs, secrets=secrets,
                    workdir=workdir, setup=setup, run=run, source=self.source, warnings=warnings,
                    lines=tuple(self.lines.items()))

    def _name(self, node: Node | None) -> str | None:
        if node is None:
            return None
        value = self.value(node)
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not _NAME.match(value):
            raise self.error(node, "name", f"expected a name of letters, digits, '.', '_' and '-' "
                             f"(at most 63), got {value!r}")
        return value

    def _int(self, node: Node | None, path: str, *, default: int) -> int:
        if node is None:
            return default
        value = self.value(node)
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise self.error(node, path, f"expected a positive whole number, got {value!r}")
        return value

    def _script(self, node: Node | None, path: str) -> str | None:
        if node is None:
            return None
        value = self.value(node)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(node, path, f"expected a shell script (a string; use `{path}: |` for "
                             f"several lines), got {_kind(node)}")
        return value if value.strip() else None

    def _env(self, node: Node | None, path: str) -> tuple[tuple[str, str | None], ...]:
        if node is None or self.value(node) is None:
            return ()
        entries = self._mapping(node, path, _Any(), ())
        out: list[tuple[str, str | None]] = []
        for key, vnode in entries.items():
            if not _ENV_NAME.match(key):
                raise self.error(vnode, f"{path}.{key}", "not a valid environment variable name")
            value = self.value(vnode)
            if isinstance(value, (dict, list)):
                raise self.error(vnode, f"{path}.{key}", f"expected a plain value, got {_kind(vnode)}")
            out.append((key, None if value is None else str(value)))
        return tuple(out)

    def _resources(self, node: Node | None) -> Resources:
        if node is None or self.value(node) is None:
            return Resources()
        res = self._mapping(node, "resources", _RES, _RES_SKYPILOT)
        provider = None
        for key in ("cloud", "provider", "infra"):
            if key in res:
                raw = self.value(res[key])
                if raw is None:
                    continue
                if not isinstance(raw, str):
                    raise self.error(res[key], f"resources.{key}", f"expected a provider name, got {raw!r}")
                try:
                    provider = canonical(raw.split("/")[0])  # SkyPilot's infra: aws/us-east-1
                except ProvisionError as exc:
                    raise self.error(res[key], f"resources.{key}", str(exc)) from None
        accel, count = None, 0
        if "accelerators" in res:
            accel, count = self._accelerators(res["accelerators"])
        cpus, more = None, False
        if "cpus" in res:
            cnode = res["cpus"]
            raw = self.value(cnode)
            if raw is not None:
                m = _CPUS.match(str(raw).strip()) if not isinstance(raw, bool) else None
                if m is None or float(m.group(1)) <= 0:
                    raise self.error(cnode, "resources.cpus", f"expected a CPU count like 8 or 8+, got {raw!r}")
                cpus, more = float(m.group(1)), bool(m.group(2))
        hosts: tuple[str, ...] = ()
        if "hosts" in res:
            hnode = res["hosts"]
            raw = self.value(hnode)
            if isinstance(raw, str):
                raw = raw.split()
            if raw is not None and (not isinstance(raw, list) or not all(isinstance(h, str) and h for h in raw)):
                raise self.error(hnode, "resources.hosts", f"expected a list of host names, got {raw!r}")
            hosts = tuple(raw or ())
        return Resources(provider=provider, accelerator=accel, accelerator_count=count, cpus=cpus,
                         cpus_or_more=more, hosts=hosts)

    def _accelerators(self, node: Node) -> tuple[str | None, int]:
        raw = self.value(node)
        path = "resources.accelerators"
        if raw is None:
            return None, 0
        if isinstance(raw, (list, set)) and raw:
            if len(raw) > 1:
                self.warn(node, f"{path}: skyhive takes the first of several candidates ({sorted(map(str, raw))[0]!r} "
                          f"of {len(raw)})")
            raw = sorted(map(str, raw))[0] if isinstance(raw, set) else raw[0]
        if isinstance(raw, dict) and len(raw) == 1:
            ((name, count),) = raw.items()
            raw = f"{name}:{count}" if count is not None else str(name)
        m = _ACCEL.match(raw.strip()) if isinstance(raw, str) else None
        if m is None:
            raise self.error(node, path, f"expected NAME or NAME:COUNT like L4:2, got {raw!r}")
        count = int(m.group(2)) if m.group(2) is not None else 1
        if count < 1:
            raise self.error(node, path, f"the accelerator count must be at least 1, got {count}")
        return m.group(1), count


class _Any(tuple):  # type: ignore[type-arg]
    """`known` for a mapping whose keys are free (envs): everything is known."""

    def __contains__(self, item: object) -> bool:
        return True


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    if isinstance(node, ScalarNode):
        return f"{node.value!r}"
    return type(node).__name__


def _provider_name(name: str, where: str) -> str:
    try:
        return canonical(name)
    except ProvisionError as exc:
        raise TaskFileError(f"{where}: {exc}") from None


def _workdir(raw: str, where: str, cwd: str, task_dir: str | None) -> str:
    path = os.path.abspath(os.path.join(cwd, os.path.expanduser(raw)))
    if not os.path.isdir(path):
        hint = ""
        if task_dir is not None and os.path.isdir(os.path.join(task_dir, raw)):
            hint = (f" (relative paths are taken from the directory you run skyhive in, as in SkyPilot; "
                    f"it exists next to the task file: run from {task_dir} or give an absolute path)")
        raise TaskFileError(f"{where}: {raw!r} is not a directory{hint}")
    return path
