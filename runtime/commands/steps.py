"""The steps of a task on a pool's nodes, shared by `skyhive launch` (a pool of its own) and the job
agent of a named pool (`runtime/clusters/agent.py`).

On every node what the task's resources ask is checked (machines that exist already). Then once per
*machine* (nodes on one machine share its files and Python environment: Local nodes) the workdir is
unpacked into a directory of its own, the `file_mounts` are copied and `setup` runs there; then `run`
on every node, in its machine's directory. A job that asks for fewer nodes than its named pool has
(`TaskSteps.num_nodes`) runs `run` on the first N nodes only, which see those N as the cluster.
Setup and run are bash scripts run by a skyhive function (`nodecmd.run_script`), so their output
streams back live through the pool. The first node whose
step fails decides the outcome; the other nodes' scripts are then stopped (as SkyPilot does: a
distributed job with a dead member would hang).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope

from ..onnode import nodecmd, nodeprep

if TYPE_CHECKING:
    from ..actors.channel import WorkerChannel
    from ..actors.pool_actor import PoolRuntime
    from .taskfile import Task

__all__ = ["NodeExit", "TaskSteps", "run_steps", "everywhere", "pack_mounts"]


@dataclass(frozen=True, slots=True)
class NodeExit:
    """A node whose step ("workdir", "setup", "run") did not succeed: its exit code, and why if it did
    not simply exit."""

    node: int
    phase: str
    code: int
    detail: str = ""


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
    buckets: tuple[Any, ...] = ()  # bucket file_mounts (runtime.storage.spec.Mount): access resolved when run


def pack_mounts(task: Task, pack: Callable[[str], bytes]) -> list[tuple[str, str, bytes, bool]]:
    """The task's file mounts, each packed with `pack` (a path that does not exist fails there)."""
    return [(m.target, m.source, pack(m.source), os.path.isdir(m.source)) for m in task.file_mounts]


async def run_steps(rt: PoolRuntime, steps: TaskSteps, *, task_env: dict[str, str] | None = None) -> NodeExit | None:
    """Run `steps` on every node of `rt` (see the module docstring); the first failure, or None.
    `task_env` (variables and secret values) goes to the scripts only, not to the workers (a named
    pool's job; `skyhive launch` gives them to its pool's workers as the Image instead)."""
    channels = await rt.all_channels()
    # a job on some of a named pool's nodes runs on the first N; the workdir, mounts and setup are for
    # every machine of the pool (as SkyPilot's setup on a cluster), so a later job on all nodes finds them
    some = 0 < steps.num_nodes < len(rt.nodes)
    runs_on = [i for i, c in enumerate(channels) if not some or c.node < steps.num_nodes]
    dirs: list[Any] = []
    failed, keys = await everywhere(rt, channels, "machine", nodeprep.machine_key)
    if failed is None and steps.requirements:
        failed, _ = await everywhere(rt, channels, "resources", nodeprep.require, steps.requirements)
    # one node per machine unpacks the workdir, copies the file mounts and runs setup: the nodes on
    # that machine share them (what setup made in the workdir is there for all)
    firsts = {key: i for i, key in reversed(list(enumerate(keys)))}
    leaders = sorted(firsts.values())
    if failed is None:
        failed, made = await everywhere(rt, [channels[i] for i in leaders], "workdir", nodecmd.prepare,
                                        steps.work_id, steps.archive)
        by_leader = dict(zip(leaders, made))
        dirs = [by_leader[firsts[key]] for key in keys]
    if failed is None and steps.mounts:
        failed, _ = await everywhere(rt, [channels[i] for i in leaders], "file_mounts", nodeprep.install_mounts,
                                     steps.mounts)
    prepared = None
    if failed is None and steps.buckets:  # buckets: checked (or made) here, downloaded on each machine
        from ..storage import node as storage_node
        from ..storage.buckets import prepare

        prepared = await anyio.to_thread.run_sync(lambda: prepare(steps.buckets))
        failed = await _storage_deps(rt, [channels[i] for i in leaders])
        if failed is None:
            failed, _ = await everywhere(rt, [channels[i] for i in leaders], "file_mounts", storage_node.install,
                                         prepared.mounts, steps.task_id)
    try:
        failed = await _setup_and_run(rt, steps, channels, leaders, runs_on, dirs, some, task_env, failed)
    finally:
        if prepared is not None:
            failed = await _finish_buckets(rt, [channels[i] for i in leaders], prepared, failed)
    return failed


async def _storage_deps(rt: PoolRuntime, leaders: list[WorkerChannel]) -> NodeExit | None:
    """boto3 on every machine: sent (runtime/storage/deps.py) to those whose Python lacks it."""
    from ..storage import deps

    bundle = await anyio.to_thread.run_sync(deps.bundle)
    failed, missing = await everywhere(rt, leaders, "file_mounts", deps.ensure, bundle.digest)
    lacking = [ch for ch, why in zip(leaders, missing) if why is not None]
    if failed is None and lacking:
        failed, _ = await everywhere(rt, lacking, "file_mounts", deps.ensure, bundle.digest, bundle.data)
    return failed


async def _finish_buckets(rt: PoolRuntime, leaders: list[WorkerChannel], prepared: Any,
                          failed: NodeExit | None) -> NodeExit | None:
    """Cached mounts flushed and FUSE mounts unmounted on every machine, whatever the job's outcome (a
    flush that fails is the job's failure when nothing failed before); buckets not to keep deleted."""
    from ..storage import node as storage_node
    from ..storage.buckets import release

    with CancelScope(shield=True):
        flushed, _ = await everywhere(rt, leaders, "file_mounts", storage_node.finish)
        await anyio.to_thread.run_sync(lambda: release(prepared, failed=False))
    return failed if failed is not None else flushed


async def _setup_and_run(rt: PoolRuntime, steps: TaskSteps, channels: list[WorkerChannel], leaders: list[int],
                         runs_on: list[int], dirs: list[Any], some: bool, task_env: dict[str, str] | None,
                         failed: NodeExit | None) -> NodeExit | None:
    for phase, on in (("setup", leaders), ("run", runs_on)):
        script = getattr(steps, phase)
        if failed is None and script:
            # the job's run sees its nodes only: SKYPILOT_NUM_NODES=N, NODE_IPS of nodes 0..N-1
            narrow = some and phase == "run"
            extra = (task_env or None, steps.num_nodes) if narrow else (task_env,) if task_env else ()
            failed, _ = await everywhere(rt, [channels[i] for i in on], phase, nodecmd.run_script, script,
                                         steps.task_id, phase, steps.cluster_info, *extra,
                                         per_node=[dirs[i] for i in on])
    return failed


async def everywhere(rt: PoolRuntime, channels: list[WorkerChannel], phase: str, fn: Callable[..., Any], *args: Any,
                     per_node: list[Any] | None = None) -> tuple[NodeExit | None, list[Any]]:
    """Run `fn` on every node at once; the first failure (non-zero int or exception) stops the rest."""
    results: list[Any] = [None] * len(channels)
    first: list[NodeExit] = []

    async def one(i: int, channel: WorkerChannel, scope: CancelScope) -> None:
        call_args = (per_node[i], *args) if per_node is not None else args
        try:
            value = await rt.call_on(channel, fn, call_args, {}, fn_name=phase)
        except Exception as exc:
            failure = NodeExit(channel.node, phase, 1, f"{type(exc).__name__}: {exc}")
        else:
            results[i] = value
            if not (isinstance(value, int) and value != 0):
                return
            failure = NodeExit(channel.node, phase, value)
        if not first:
            first.append(failure)
            scope.cancel()

    async with anyio.create_task_group() as tg:
        for i, channel in enumerate(channels):
            tg.start_soon(one, i, channel, tg.cancel_scope)
    return (first[0] if first else None), results
