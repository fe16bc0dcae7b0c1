"""Task files: the SkyPilot-compatible YAML subset that `skyhive launch` runs.

    name: train
    num_nodes: 2
    resources: {cloud: local, accelerators: L4:2, cpus: 8+, memory: 32+, use_spot: false}
    envs: {EPOCHS: 3}
    workdir: .
    file_mounts: {/data: ./data}               # local files and directories
    file_mounts: {/ds: s3://bucket/prefix, /ckpt: {name: runs, mode: MOUNT_CACHED}}   # buckets (docs/storage.md)
    setup: pip install -r requirements.txt     # once per machine
    run: torchrun ... main.py                  # on every node

`load(path)` returns a frozen `Task`. A malformed file raises `TaskFileError` naming the file, the line
and the field; a key skyhive does not know (or knows from SkyPilot but does not support) is a warning
in `Task.warnings`, never an error, so existing task files run.
"""

from __future__ import annotations

import difflib
import os
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ...errors import TaskFileError
from ...providers.base import ProvisionError
from ...providers.registry import canonical
from .taskfile_guard import BoundedLoader, read_task_text
from .taskfile_resources import Autostop, Resources, ResourcesParser
from ..storage.spec import is_bucket_uri
from .values import ENV_NAME as _ENV_NAME
from .values import TASK_NAME
from .values import accelerator_share, parse_accelerators, parse_amount, parse_env_overrides

__all__ = ["TaskFileError", "Resources", "Autostop", "FileMount", "Task", "load", "loads", "parse_env_overrides",
           "parse_amount", "parse_accelerators", "BUCKET_SCHEMES"]

#: Sources of `file_mounts` that name cloud storage: s3://, gs://, gcs://, r2:// are mounted
#: (runtime/storage/); the others are refused, saying so.
BUCKET_SCHEMES = ("s3://", "gs://", "gcs://", "r2://", "az://", "https://", "http://", "cos://", "oci://", "nebius://")

_TOP = ("name", "num_nodes", "resources", "envs", "secrets", "workdir", "file_mounts", "volumes", "setup", "run")
# SkyPilot keys that skyhive reads past (with a warning saying it ignores them): none changes where or how
# long the task runs
_TOP_SKYPILOT = ("config", "inputs", "outputs", "event_callback", "experimental", "storage_mounts", "docker")
# SkyPilot keys that would change where or how long the task runs and skyhive cannot honour: refused
_TOP_REFUSED = {
    "service": "skyhive does not serve (SkyServe's replicas, autoscaling); run the server as a task with "
               "`skyhive launch -c NAME` and reach it with `skyhive forward`",
    "pool": "skyhive's pools are named with `skyhive launch -c NAME`; submit to one with `skyhive exec NAME TASK`",
}
_NAME = TASK_NAME


@dataclass(frozen=True, slots=True)
class FileMount:
    """One `file_mounts` entry: a local file or directory (absolute `source`) copied to `target` on every
    node (absolute, or relative to the node user's home, as in SkyPilot). `raw_*` are the file's spellings
    (`$VAR`/`${VAR}` are the task's `envs`, filled in again when `--env` changes them); `base` is the
    directory relative sources are taken from."""

    target: str
    source: str
    raw_target: str = field(default="", compare=False, repr=False)
    raw_source: str = field(default="", compare=False, repr=False)
    base: str = field(default="", compare=False, repr=False)

    @staticmethod
    def resolve(raw_target: str, raw_source: str, envs: Mapping[str, str], base: str, where: str) -> FileMount:
        """The mount with `envs` filled in and the source made absolute; raises `TaskFileError` (prefixed
        with `where`) when the source does not exist."""
        target = string.Template(raw_target).safe_substitute(envs)
        raw = string.Template(raw_source).safe_substitute(envs)
        source = os.path.abspath(os.path.join(base, os.path.expanduser(raw)))
        if not target.strip() or "\0" in target:
            raise TaskFileError(f"{where}: the destination path is empty")
        if not os.path.exists(source):
            raise TaskFileError(f"{where}: the source {raw_source!r} does not exist ({source}; relative paths are "
                                f"taken from the directory you run skyhive in, as in SkyPilot)")
        return FileMount(target=target, source=source, raw_target=raw_target, raw_source=raw_source, base=base)


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A parsed task file. `envs`/`secrets` values are None where the file leaves them to `--env`."""

    name: str | None = None
    num_nodes: int = 1
    resources: Resources = field(default_factory=Resources)
    envs: tuple[tuple[str, str | None], ...] = ()
    # the values never appear in repr() (nor in any message): only their names
    secrets: tuple[tuple[str, str | None], ...] = field(default=(), repr=False)
    workdir: str | None = None  # absolute
    file_mounts: tuple[FileMount, ...] = ()
    bucket_mounts: tuple[Any, ...] = ()  # runtime.storage.spec.Mount: buckets (s3://, the long form)
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
            flag = "--secret" if where == "secrets" else "--env"
            raise TaskFileError(f"{self.line_of(f'{where}.{key}')}: {where}.{key} has no value: "
                                f"pass it with {flag} {key}=VALUE (or {flag} {key} to take it from your environment)")
        return {k: v for k, v in pairs if v is not None}

    def with_overrides(self, *, nodes: int | None = None, provider: str | None = None,
                       hosts: tuple[str, ...] = (), env: Mapping[str, str] | None = None,
                       workdir: str | None = None, secrets: Mapping[str, str] | None = None,
                       resources: Mapping[str, Any] | None = None) -> Task:
        """The task with command-line options applied (they win over the file). `env` values of names
        the file declares as secrets stay secrets; `secrets` are secrets whatever the file says;
        `resources` replaces `Resources` fields (already checked, e.g. by `taskflags`)."""
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
        if resources:
            res = replace(res, **resources)
        task = replace(task, resources=res)
        if env or secrets:
            secret_names = {k for k, _ in task.secrets} | set(secrets or ())
            envs = dict(task.envs)
            values = dict(task.secrets)
            for k, v in {**(env or {}), **(secrets or {})}.items():
                if k in secret_names:
                    envs.pop(k, None)
                    values[k] = v
                else:
                    envs[k] = v
            task = replace(task, envs=tuple(envs.items()), secrets=tuple(values.items()))
            known = {k: v for k, v in task.envs if v is not None}  # file_mounts see envs, not secrets
            task = replace(task, file_mounts=tuple(
                FileMount.resolve(m.raw_target, m.raw_source, known, m.base,
                                  f"{task.line_of(f'file_mounts.{m.raw_target}')}: file_mounts.{m.raw_target}")
                if "$" in m.raw_target + m.raw_source else m for m in task.file_mounts))
        if workdir is not None:
            task = replace(task, workdir=_workdir(workdir, "--workdir", os.getcwd(), None))
        return task


def load(path: str | os.PathLike[str], *, cwd: str | None = None) -> Task:
    """Read and check a task file; relative `workdir`s resolve against `cwd` (as SkyPilot does)."""
    text = read_task_text(path)  # a small UTF-8 text file, or TaskFileError naming what it is
    return loads(text, source=os.fspath(path), cwd=cwd)


def loads(text: str, *, source: str = "<task>", cwd: str | None = None) -> Task:
    return _Parser(text, source, cwd or os.getcwd()).task()


class _Parser(ResourcesParser):
    def __init__(self, text: str, source: str, cwd: str) -> None:
        self.source = source
        self.cwd = cwd
        self.warnings: list[tuple[int, str]] = []
        self.lines: dict[str, int] = {}
        self.buckets: list[Any] = []  # bucket file_mounts (runtime/storage/)
        self.loader = BoundedLoader(text)  # SafeLoader, nesting bounded (taskfile_guard.py)

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
            try:
                return self._task(root)
            except yaml.MarkedYAMLError as exc:  # a value the safe loader refuses to build (a python tag)
                mark = exc.problem_mark or exc.context_mark
                where = f"{self.source}:{mark.line + 1}:{mark.column + 1}" if mark else self.source
                raise TaskFileError(f"{where}: {' '.join(str(exc.problem or exc.context).split())} (task files "
                                    f"hold plain values)") from None
        finally:
            self.loader.dispose()

    def _mapping(self, node: Node, path: str, known: tuple[str, ...], skypilot: tuple[str, ...],
                 refused: Mapping[str, str] | None = None) -> dict[str, Node]:
        """The mapping's keys (`known` ones) and values; a key of `skypilot` is a warning, one of `refused` an
        error naming the key and what to do (it would change where or how long the task runs)."""
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
            if refused and key in refused:
                raise self.error(knode, full, f"not supported: {refused[key]} (remove the key to run)")
            if key not in known:
                if key in skypilot:
                    self.warn(knode, f"{full} is not supported by skyhive yet; ignored")
                else:
                    near = difflib.get_close_matches(key, known, n=1)
                    hint = f" (did you mean {path + '.' if path else ''}{near[0]}?)" if near else ""
                    if not path:  # a top-level typo (`rnu:`) would run nothing and succeed: SkyPilot refuses it too
                        raise self.error(knode, full, f"unknown key{hint}; the task file's keys are "
                                         f"{', '.join(known)}")
                    self.warn(knode, f"unknown key {full}{hint}; ignored")
                continue
            out[key] = vnode
            self.lines[full] = knode.start_mark.line + 1
        return out

    def _task(self, root: Node) -> Task:
        top = self._mapping(root, "", _TOP, _TOP_SKYPILOT, _TOP_REFUSED)
        name = self._name(top.get("name"))
        num_nodes = self._int(top.get("num_nodes"), "num_nodes", default=1)
        resources = self._volumes(top.get("volumes"), self._resources(top.get("resources")))
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
        file_mounts = self._file_mounts(top.get("file_mounts"), {k: v for k, v in envs if v is not None})
        setup = self._script(top.get("setup"), "setup")
        run = self._script(top.get("run"), "run")
        if run is None:
            self.warnings.append((0, f"{self.source}: the task has no `run` command: only setup will run"))
        warnings = tuple(text for _, text in sorted(self.warnings, key=lambda w: w[0]))  # in file order
        return Task(name=name, num_nodes=num_nodes, resources=resources, envs=envs, secrets=secrets,
                    workdir=workdir, file_mounts=file_mounts, setup=setup, run=run, source=self.source, warnings=warnings,
                    bucket_mounts=tuple(self.buckets),
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

    def _file_mounts(self, node: Node | None, envs: Mapping[str, str]) -> tuple[FileMount, ...]:
        if node is None or self.value(node) is None:
            return ()
        entries = self._mapping(node, "file_mounts", _Any(), ())
        out = []
        for target, vnode in entries.items():
            path = f"file_mounts.{target}"
            raw = self.value(vnode)
            if isinstance(raw, dict) or (isinstance(raw, str) and is_bucket_uri(raw)):
                self.buckets.append(_bucket_mount(self, str(target), raw, vnode, path, envs))
                continue
            if isinstance(raw, str) and raw.startswith(BUCKET_SCHEMES):
                raise self.error(vnode, path, f"{raw}: this kind of storage is not supported; skyhive mounts "
                                 f"s3://, gs:// and r2:// buckets and copies local files and directories")
            if not isinstance(raw, str) or not raw.strip():
                raise self.error(vnode, path, f"expected a local file or directory, got {_kind(vnode)}")
            where = f"{self.source}:{vnode.start_mark.line + 1}: {path}"
            out.append(FileMount.resolve(target, raw, envs, self.cwd, where))
        return tuple(out)


def _bucket_mount(self: _Parser, target: str, raw: Any, vnode: Node, path: str, envs: Mapping[str, str]) -> Any:
    """A bucket `file_mounts` entry as a `runtime.storage.spec.Mount` (envs filled in, a local `source`
    taken from the directory skyhive runs in); `TaskFileError` naming the line and the entry."""
    from ..storage.spec import mount_of

    def fill(value: Any) -> Any:
        return string.Template(value).safe_substitute(envs) if isinstance(value, str) else value

    if isinstance(raw, dict):
        raw = {k: fill(v) for k, v in raw.items()}
        src = raw.get("source")
        if isinstance(src, str) and not is_bucket_uri(src):
            raw["source"] = os.path.abspath(os.path.join(self.cwd, os.path.expanduser(src)))
            if not os.path.exists(raw["source"]):
                raise TaskFileError(f"{self.source}:{vnode.start_mark.line + 1}: {path}.source: {src!r} does not "
                                    f"exist ({raw['source']}; relative paths are taken from the directory you run "
                                    f"skyhive in, as in SkyPilot)")
    try:
        return mount_of(fill(target), raw, where=f"{self.source}:{vnode.start_mark.line + 1}: {path}")
    except (ValueError, TypeError) as exc:
        raise TaskFileError(str(exc)) from None


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
