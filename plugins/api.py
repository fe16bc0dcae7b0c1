"""The plugin API: a plugin is a small object with optional hooks, each declared below as a Protocol
(`TransformHook`, `AppHook`, `TaskHook`) that the runtime checks with `isinstance`.

- `transform(image, pool) -> image` — client side, before the nodes are set up: add pip packages,
  indexes, environment variables (use the `Image.with_*` helpers so plugins do not clobber each other).
  `pool` is a `PoolView`: what a plugin may know of the pool (its provider's name, whether the nodes
  are this machine, the accelerator asked for, nodes, processes per node), never the pool itself.
- `around_app(info)` — on the worker, a context manager entered once per worker process before its
  first task and exited at shutdown (set up a process group in it, tear it down in its `finally`).
- `around_task(info)` — on the worker, a context manager around each task.

Hooks run in the order the plugins are listed. A plugin is pickled to the workers, so keep it a plain
object and import heavy frameworks (torch, jax) inside the worker-side hooks only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..errors import WorkerRestarted
from ..protocol.info import ENV_VAR, RESTART_ENV
from ..protocol.info import InstanceInfo as InstanceInfo

if TYPE_CHECKING:
    from .image import Image

__all__ = ["Plugin", "PoolView", "TransformHook", "AppHook", "TaskHook", "ClientHook", "InstanceInfo", "apply_transforms", "requirement",
           "refuse_if_restarted", "restarted_message", "with_plugin"]

F = TypeVar("F", bound=Callable[..., Any])

_CONSTRAINT = re.compile(r"\s*(===|==|!=|~=|<=|>=|<|>)")
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!*-]*\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolView:
    """What a plugin's `transform` sees of the pool it is applied to."""

    provider: str  # the provider's name ("local", "ssh", "aws", a third party's)
    same_machine: bool  # the nodes are this machine (its Python, files and devices): Local
    accelerator: str | None = None  # what the pool asked for ("A100:8"), None when nothing
    nodes: int = 1
    processes_per_node: int = 1


@runtime_checkable
class TransformHook(Protocol):
    """Client side, when the pool opens, before any node is set up."""

    def transform(self, image: Image, pool: PoolView | None) -> Image:
        """Return a new `Image` with what the plugin needs (use `Image.with_*`); never mutate `image`."""
        ...


@runtime_checkable
class AppHook(Protocol):
    """On each worker process, for its lifetime."""

    def around_app(self, info: InstanceInfo) -> AbstractContextManager[Any]:
        """A context manager entered before the worker's first task and exited at its shutdown (set
        up a process group in it, tear it down in its `finally`). Raising fails the worker's start."""
        ...


@runtime_checkable
class TaskHook(Protocol):
    """On each worker process, around every task."""

    def around_task(self, info: InstanceInfo) -> AbstractContextManager[Any]:
        """A context manager around one task (its exception is the task's)."""
        ...


@runtime_checkable
class ClientHook(Protocol):
    """Client side, for the pool's lifetime (the joblib plugin registers its backend here)."""

    def around_client(self, pool: Any) -> AbstractContextManager[Any]:
        """A context manager entered once the pool is open and exited before it closes (a raise
        while entering closes the pool and propagates)."""
        ...


class Plugin:
    """Optional base class; any object with some of the hook methods is a plugin."""

    name: str = "plugin"

    def __repr__(self) -> str:
        return f"<plugin {self.name}>"


def apply_transforms(plugins: Sequence[Any], image: Image | None, pool: PoolView | None) -> Image:
    """Run every plugin's `transform` in order, starting from `image` (an empty `Image` if None); `pool`
    is what they see of the pool (None: no pool, e.g. a plugin applied to an image alone)."""
    from .image import Image

    image = image if image is not None else Image()
    for plugin in plugins:
        if isinstance(plugin, TransformHook):
            image = plugin.transform(image, pool)
            if not isinstance(image, Image):
                raise TypeError(f"{plugin!r}.transform() must return an Image, got {type(image).__name__}")
    return image


# ---- helpers every framework plugin uses ------------------------------------------------------------

def requirement(package: str, version: str | None, *, where: str = "") -> str | None:
    """The pip requirement for `package` at `version`.

    `None` -> None (do not install); `"latest"` -> `package` (no pin); a bare version `"2.3.0"` ->
    `package==2.3.0`; a constraint (`">=2.3"`, `"~=2.3,<3"`, `"==2.3.0"`) is passed through.
    Raises `ValueError` (naming `where`, e.g. "torch(vision=...)") for anything else.
    """
    where = where or f"{package} version"
    if version is None:
        return None
    if not isinstance(version, str):
        raise TypeError(f"{where} must be a str or None, got {type(version).__name__}")
    text = version.strip()
    if text == "latest":
        return package
    if _CONSTRAINT.match(text):
        return package + text
    if _VERSION.match(text):
        return f"{package}=={text}"
    raise ValueError(
        f"{where} {version!r}: give \"latest\", a version (\"2.3.0\") or a constraint (\">=2.3\")"
    )


def refuse_if_restarted(framework: str, info: InstanceInfo) -> None:
    """Raise `WorkerRestarted` in a worker process restarted after a crash: its peers still hold the
    old process group / runtime, which a new process cannot rejoin (a clear error, not a hang)."""
    restarts = os.environ.get(RESTART_ENV, "0")
    if restarts != "0":
        raise WorkerRestarted(restarted_message(framework, info, restarts))


def restarted_message(framework: str, info: InstanceInfo, restarts: str) -> str:
    return (
        f"{framework}: the worker process of rank {info.rank} (node {info.node}, local rank "
        f"{info.local_rank}) was restarted after a crash ({restarts} restart(s)), and a restarted "
        f"process cannot re-join the {framework} process group the other ranks are still in. "
        "Close the pool and open a new one (resume training from a checkpoint)."
    )


# ---- the decorator form (`@sky.integrations.torch`) ------------------------------------------------

_entered: dict[str, contextlib.ExitStack] = {}  # per worker process: plugin name -> its open hook
_lock = threading.Lock()


def _enter_once(plugin: Any) -> None:
    text = os.environ.get(ENV_VAR)
    if not text or not isinstance(plugin, AppHook):
        return  # not on a node (or nothing to set up)
    key = getattr(plugin, "name", type(plugin).__name__)
    with _lock:
        if key in _entered:
            return
        stack = contextlib.ExitStack()
        stack.enter_context(plugin.around_app(InstanceInfo.from_json(text)))
        _entered[key] = stack  # kept open for the worker process's life, like around_app on the pool


def with_plugin(plugin: Any, fn: F) -> F:
    """`fn`, with `plugin`'s worker-side setup entered (once per process) before it runs on a node."""
    if not callable(fn):
        raise TypeError(f"@integrations.{getattr(plugin, 'name', 'plugin')} decorates a function, got {type(fn).__name__}")

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        _enter_once(plugin)
        return fn(*args, **kwargs)

    return run  # type: ignore[return-value]
