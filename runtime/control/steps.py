"""The steps of a task on a pool's nodes, shared by `skyhive launch` (a pool of its own) and the job
agent of a named pool (`runtime/commands/agent.py`).

On every node what the task's resources ask is checked (machines that exist already). Then the
workdir is unpacked, the `file_mounts` are copied and `setup` runs: on a provider with `node_homes`
(Local: nodes on the user's machine) on every node, each in its own home (`~/sky_workdir` there, as
on a fresh machine); elsewhere once per *machine* (nodes that share one share its files), in a
directory of its own. Then `run` on every node, in that directory. The directory stays for the next
job of a named pool (`exec` finds what `launch -c` shipped and setup made). A job that asks for fewer nodes than its named pool has
(`TaskSteps.num_nodes`) runs `run` on the first N nodes only, which see those N as the cluster.
Setup and run are bash scripts run by a skyhive function (`nodecmd.run_script`), so their output
streams back live through the pool. The first node whose
step fails decides the outcome; the other nodes' scripts are then stopped (as SkyPilot does: a
distributed job with a dead member would hang).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope

from ...errors import NodeUnreachable, WorkerLost
from ..onnode import nodecmd, nodeprep
from ..onnode.interruption import AFTER_NOTICE

if TYPE_CHECKING:
    from ..actors.channel import WorkerChannel
    from ..actors.pool_actor import PoolRuntime
    from ..commands.taskfile import Task

__all__ = ["NodeExit", "TaskSteps", "OnLost", "run_steps", "everywhere", "pack_mounts"]


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
    own_home: bool = False  # each node its own home (`Provider.node_homes`): workdir, mounts and setup per node
    buckets: tuple[Any, ...] = ()  # bucket file_mounts (runtime.storage.spec.Mount): access resolved when run


#: what a node lost during `run` becomes, given the node and its failure (`run_steps(on_lost=...)`)
OnLost = Callable[[int, "NodeExit"], Awaitable["NodeExit | None"]]


def pack_mounts(task: Task, pack: Callable[[str], bytes]) -> list[tuple[str, str, bytes, bool]]:
    """The task's file mounts, each packed with `pack` (a path that does not exist fails there)."""
    return [(m.target, m.source, pack(m.source), os.path.isdir(m.source)) for m in task.file_mounts]


async def run_steps(rt: PoolRuntime, steps: TaskSteps, *, task_env: dict[str, str] | None = None,
                    fresh: frozenset[int] | None = None, only: frozenset[int] | None = None,
                    on_lost: OnLost | None = None) -> NodeExit | None:
    """Run `steps` on every node of `rt` (see the module docstring); the first failure, or None.
    `task_env` (variables and secret values) goes to the scripts only, not to the workers (a named
    pool's job; `skyhive launch` gives them to its pool's workers as the Image instead). `fresh`: the
    steps ran on this pool before and only these nodes are new (a managed job's node replaced in place):
    `setup` runs on their machines only — the others made theirs —, everything else everywhere again.
    `only`: the steps on these nodes alone (a replacement joining a job whose other nodes run on; the
    job's buckets are then not released here). `on_lost(node, failure)`: called when a node is lost
    during `run` (or its program exits after an interruption notice) instead of stopping the others —
    what it returns is that node's outcome (None: it finished after all, elsewhere)."""
    channels = await rt.all_channels()
    if only is not None:
        channels = [c for c in channels if c.node in only]
    # a job on some of a named pool's nodes runs on the first N; the workdir, mounts and setup are for
    # every machine of the pool (as SkyPilot's setup on a cluster), so a later job on all nodes finds them
    some = 0 < steps.num_nodes < len(rt.nodes)
    runs_on = [i for i, c in enumerate(channels) if not some or c.node < steps.num_nodes]
    dirs: list[Any] = []
    failed, keys = await everywhere(rt, channels, "machine", nodeprep.machine_key)
    if failed is None and steps.requirements:
        failed, _ = await everywhere(rt, channels, "resources", nodeprep.require, steps.requirements)
    # one node per machine copies the file mounts (an absolute target is the machine's); without own
    # homes it also unpacks the workdir and runs setup for the nodes on that machine, which share them
    # (what setup made in the workdir is there for all); with own homes every node does both in its home
    own = steps.own_home
    firsts = {key: i for i, key in reversed(list(enumerate(keys)))}
    leaders = sorted(firsts.values())
    everyone = list(range(len(channels)))
    if failed is None:
        on = everyone if own else leaders
        failed, made = await everywhere(rt, [channels[i] for i in on], "workdir", nodecmd.prepare,
                                        steps.work_id, steps.archive, own)
        by_node = dict(zip(on, made))
        dirs = [by_node[i] if own else by_node[firsts[key]] for i, key in enumerate(keys)]
    if failed is None and steps.mounts:
        homes = ([[os.path.dirname(dirs[i]) for i, k in enumerate(keys) if k == keys[leader]] for leader in leaders]
                 if own else None)
        failed, _ = await everywhere(rt, [channels[i] for i in leaders], "file_mounts", nodeprep.install_mounts,
                                     steps.mounts, per_node=homes, per_node_last=True)
    prepared = None
    # buckets: checked (or made) here, downloaded on each machine — into each node's home with own homes
    on_buckets = everyone if own else leaders
    if failed is None and steps.buckets:
        from ..storage import node as storage_node
        from ..storage.buckets import prepare

        prepared = await anyio.to_thread.run_sync(lambda: prepare(steps.buckets))
        failed = await _storage_deps(rt, [channels[i] for i in leaders])
        if failed is None:
            failed, _ = await everywhere(rt, [channels[i] for i in on_buckets], "file_mounts", storage_node.install,
                                         prepared.mounts, steps.task_id,
                                         per_node=[os.path.dirname(dirs[i]) for i in on_buckets] if own else None,
                                         per_node_last=True)
    try:
        if fresh is not None:  # setup only where a fresh node is: one per machine, or each with own homes
            news = {keys[p] for p, c in enumerate(channels) if c.node in fresh}
            set_up = [p for p in (everyone if own else leaders)
                      if (channels[p].node in fresh if own else keys[p] in news)]
        else:
            set_up = everyone if own else leaders
        failed = await _setup_and_run(rt, steps, channels, set_up, runs_on, dirs, some, task_env, failed, on_lost)
    finally:
        if prepared is not None:
            failed = await _finish_buckets(rt, [channels[i] for i in on_buckets], prepared, failed,
                                           release_them=only is None)
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
                          failed: NodeExit | None, release_them: bool = True) -> NodeExit | None:
    """Cached mounts flushed and FUSE mounts unmounted on every machine, whatever the job's outcome (a
    flush that fails is the job's failure when nothing failed before); buckets not to keep deleted."""
    from ..storage import node as storage_node
    from ..storage.buckets import release

    with CancelScope(shield=True):
        flushed, _ = await everywhere(rt, leaders, "file_mounts", storage_node.finish)
        if release_them:
            await anyio.to_thread.run_sync(lambda: release(prepared, failed=False))
    return failed if failed is not None else flushed


async def _setup_and_run(rt: PoolRuntime, steps: TaskSteps, channels: list[WorkerChannel], set_up: list[int],
                         runs_on: list[int], dirs: list[Any], some: bool, task_env: dict[str, str] | None,
                         failed: NodeExit | None, on_lost: OnLost | None = None) -> NodeExit | None:
    own = steps.own_home
    for phase, on in (("setup", set_up), ("run", runs_on)):
        script = getattr(steps, phase)
        if failed is None and script:
            # the job's run sees its nodes only: SKYPILOT_NUM_NODES=N, NODE_IPS of nodes 0..N-1
            narrow = some and phase == "run"
            extra = (task_env or None, steps.num_nodes if narrow else 0, own)
            failed, _ = await everywhere(rt, [channels[i] for i in on], phase, nodecmd.run_script, script,
                                         steps.task_id, phase, steps.cluster_info, *extra,
                                         per_node=[dirs[i] for i in on], on_lost=on_lost if phase == "run" else None)
    return failed


async def everywhere(rt: PoolRuntime, channels: list[WorkerChannel], phase: str, fn: Callable[..., Any], *args: Any,
                     per_node: list[Any] | None = None, per_node_last: bool = False,
                     on_lost: OnLost | None = None) -> tuple[NodeExit | None, list[Any]]:
    """Run `fn` on every node at once; the first failure (non-zero int or exception) stops the rest.
    `per_node[i]` is channel i's first argument (its last with `per_node_last`). `on_lost`: a node lost
    (or exiting after its interruption notice) is handed to it instead, the others going on; its answer
    is that node's outcome."""
    results: list[Any] = [None] * len(channels)
    first: list[NodeExit] = []

    async def one(i: int, channel: WorkerChannel, scope: CancelScope) -> None:
        if per_node is None:
            call_args = args
        else:
            call_args = (*args, per_node[i]) if per_node_last else (per_node[i], *args)
        try:
            value = await rt.call_on(channel, fn, call_args, {}, fn_name=phase)
        except Exception as exc:
            lost = isinstance(exc, (WorkerLost, NodeUnreachable))
            failure = NodeExit(channel.node, phase, 1, f"{type(exc).__name__}: {exc}", lost=lost)
        else:
            results[i] = value
            if not (isinstance(value, int) and value != 0):
                return
            failure = NodeExit(channel.node, phase, value)
        if on_lost is not None and (failure.lost or failure.code > AFTER_NOTICE):
            again = await on_lost(channel.node, failure)
            if again is None:
                results[i] = 0
                return
            failure = again
        if not first:
            first.append(failure)
            scope.cancel()

    async with anyio.create_task_group() as tg:
        for i, channel in enumerate(channels):
            tg.start_soon(one, i, channel, tg.cancel_scope)
    return (first[0] if first else None), results
