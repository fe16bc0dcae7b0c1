"""What runs on a pool's nodes for one task (the "what"; `runtime/control/steps.py` runs it): the steps
(`TaskSteps`: workdir, file mounts, setup, run, as `skyhive launch -c` and `exec` queue them — pickled in a
named pool's queue, so they keep this module's name), and how a node's step ended (`NodeExit`)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .taskfile import Task

__all__ = ["NodeExit", "TaskSteps", "OnLost", "pack_mounts"]


@dataclass(frozen=True, slots=True)
class NodeExit:
    """A node whose step ("workdir", "setup", "run") did not succeed: its exit code, and why if it did
    not simply exit."""

    node: int
    phase: str
    code: int
    detail: str = ""
    lost: bool = False  # the node's worker was lost (died, unreachable): not the program's own failure


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSteps:
    """What runs on the nodes for one task: `work_id` names the machines' working directory,
    `task_id` is SKYPILOT_TASK_ID; `archive` is the packed workdir, `mounts` the packed file mounts
    (target, source, tar.gz, is a directory). No secrets here (they reach the workers as the pool's
    Image)."""

    work_id: str
    task_id: str
    setup: str | None = None
    run: str | None = None
    archive: bytes | None = None
    mounts: list[tuple[str, str, bytes, bool]] = field(default_factory=list)
    requirements: dict[str, Any] = field(default_factory=dict)
    cluster_info: str = ""
    num_nodes: int = 0  # the task's nodes: fewer than the pool has run on its first N (`skyhive exec`)
    own_home: bool = False  # each node its own home (`Feature.NODE_HOMES`): workdir, mounts and setup per node
    buckets: tuple[Any, ...] = ()  # bucket file_mounts (runtime.storage.spec.Mount): access resolved when run


#: what a node lost during `run` becomes, given the node and its failure (`run_steps(on_lost=...)`)
OnLost = Callable[[int, "NodeExit"], Awaitable["NodeExit | None"]]


def pack_mounts(task: Task, pack: Callable[[str], bytes]) -> list[tuple[str, str, bytes, bool]]:
    """The task's file mounts, each packed with `pack` (a path that does not exist fails there)."""
    return [(m.target, m.source, pack(m.source), os.path.isdir(m.source)) for m in task.file_mounts]
