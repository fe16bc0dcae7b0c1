"""The steps of a task on a pool's nodes, shared by `skyhive launch` (a pool of its own) and the job
agent of a named pool (`runtime/control/agent.py`), through the pool's `PoolDriver`; what runs is
`commands/steps.py`'s `TaskSteps`.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from anyio import CancelScope

from ...errors import NodeUnreachable, WorkerLost
from ..commands.steps import NodeExit, OnLost, TaskSteps, pack_mounts
from ..onnode import nodecmd, nodeprep
from ..onnode.interruption import AFTER_NOTICE

if TYPE_CHECKING:
    from ..nodes.driver import PoolDriver, WorkerRef

__all__ = ["NodeExit", "TaskSteps", "OnLost", "run_steps", "everywhere", "pack_mounts"]


async def run_steps(driver: PoolDriver, steps: TaskSteps, *, task_env: dict[str, str] | None = None,
                    fresh: frozenset[int] | None = None, only: frozenset[int] | None = None,
                    on_lost: OnLost | None = None) -> NodeExit | None:
    """Run `steps` on every node of the pool `driver` drives (see the module docstring); the first failure, or None.
    `task_env` (variables and secret values) goes to the scripts only, not to the workers (a named
    pool's job; `skyhive launch` gives them to its pool's workers as the Image instead). `fresh`: the
    steps ran on this pool before and only these nodes are new (a managed job's node replaced in place):
    `setup` runs on their machines only — the others made theirs —, everything else everywhere again.
    `only`: the steps on these nodes alone (a replacement joining a job whose other nodes run on; the
    job's buckets are then not released here). `on_lost(node, failure)`: called when a node is lost
    during `run` (or its program exits after an interruption notice) instead of stopping the others —
    what it returns is that node's outcome (None: it finished after all, elsewhere)."""
    channels = await driver.workers()
    if only is not None:
        channels = [c for c in channels if c.node in only]
    # a job on some of a named pool's nodes runs on the first N; the workdir, mounts and setup are for
    # every machine of the pool (as SkyPilot's setup on a cluster), so a later job on all nodes finds them
    some = 0 < steps.num_nodes < len(driver.nodes())
    runs_on = [i for i, c in enumerate(channels) if not some or c.node < steps.num_nodes]
    dirs: list[Any] = []
    failed, keys = await everywhere(driver, channels, "machine", nodeprep.machine_key)
    if failed is None and steps.requirements:
        failed, _ = await everywhere(driver, channels, "resources", nodeprep.require, steps.requirements)
    # one node per machine copies the file mounts (an absolute target is the machine's); without own
    # homes it also unpacks the workdir and runs setup for the nodes on that machine, which share them
    # (what setup made in the workdir is there for all); with own homes every node does both in its home
    own = steps.own_home
    firsts = {key: i for i, key in reversed(list(enumerate(keys)))}
    leaders = sorted(firsts.values())
    everyone = list(range(len(channels)))
    if failed is None:
        on = everyone if own else leaders
        failed, made = await everywhere(driver, [channels[i] for i in on], "workdir", nodecmd.prepare,
                                        steps.work_id, steps.archive, own)
        by_node = dict(zip(on, made))
        dirs = [by_node[i] if own else by_node[firsts[key]] for i, key in enumerate(keys)]
    if failed is None and steps.mounts:
        homes = ([[os.path.dirname(dirs[i]) for i, k in enumerate(keys) if k == keys[leader]] for leader in leaders]
                 if own else None)
        failed, _ = await everywhere(driver, [channels[i] for i in leaders], "file_mounts", nodeprep.install_mounts,
                                     steps.mounts, per_node=homes, per_node_last=True)
    prepared = None
    # buckets: checked (or made) here, downloaded on each machine — into each node's home with own homes
    on_buckets = everyone if own else leaders
    if failed is None and steps.buckets:
        from ..storage import node as storage_node
        from ..storage.buckets import prepare

        prepared = await anyio.to_thread.run_sync(lambda: prepare(steps.buckets))
        failed = await _storage_deps(driver, [channels[i] for i in leaders])
        if failed is None:
            failed, _ = await everywhere(driver, [channels[i] for i in on_buckets], "file_mounts", storage_node.install,
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
        failed = await _setup_and_run(driver, steps, channels, set_up, runs_on, dirs, some, task_env, failed, on_lost)
    finally:
        if prepared is not None:
            failed = await _finish_buckets(driver, [channels[i] for i in on_buckets], prepared, failed,
                                           release_them=only is None)
    return failed


async def _storage_deps(driver: PoolDriver, leaders: list[WorkerRef]) -> NodeExit | None:
    """boto3 on every machine: sent (runtime/storage/deps.py) to those whose Python lacks it."""
    from ..storage import deps

    bundle = await anyio.to_thread.run_sync(deps.bundle)
    failed, missing = await everywhere(driver, leaders, "file_mounts", deps.ensure, bundle.digest)
    lacking = [ch for ch, why in zip(leaders, missing) if why is not None]
    if failed is None and lacking:
        failed, _ = await everywhere(driver, lacking, "file_mounts", deps.ensure, bundle.digest, bundle.data)
    return failed


async def _finish_buckets(driver: PoolDriver, leaders: list[WorkerRef], prepared: Any,
                          failed: NodeExit | None, release_them: bool = True) -> NodeExit | None:
    """Cached mounts flushed and FUSE mounts unmounted on every machine, whatever the job's outcome (a
    flush that fails is the job's failure when nothing failed before); buckets not to keep deleted."""
    from ..storage import node as storage_node
    from ..storage.buckets import release

    with CancelScope(shield=True):
        flushed, _ = await everywhere(driver, leaders, "file_mounts", storage_node.finish)
        if release_them:
            await anyio.to_thread.run_sync(lambda: release(prepared, failed=False))
    return failed if failed is not None else flushed


async def _setup_and_run(driver: PoolDriver, steps: TaskSteps, channels: list[WorkerRef], set_up: list[int],
                         runs_on: list[int], dirs: list[Any], some: bool, task_env: dict[str, str] | None,
                         failed: NodeExit | None, on_lost: OnLost | None = None) -> NodeExit | None:
    own = steps.own_home
    for phase, on in (("setup", set_up), ("run", runs_on)):
        script = getattr(steps, phase)
        if failed is None and script:
            # the job's run sees its nodes only: SKYPILOT_NUM_NODES=N, NODE_IPS of nodes 0..N-1
            narrow = some and phase == "run"
            extra = (task_env or None, steps.num_nodes if narrow else 0, own)
            failed, _ = await everywhere(driver, [channels[i] for i in on], phase, nodecmd.run_script, script,
                                         steps.task_id, phase, steps.cluster_info, *extra,
                                         per_node=[dirs[i] for i in on], on_lost=on_lost if phase == "run" else None)
    return failed


async def everywhere(driver: PoolDriver, channels: list[WorkerRef], phase: str, fn: Callable[..., Any], *args: Any,
                     per_node: list[Any] | None = None, per_node_last: bool = False,
                     on_lost: OnLost | None = None) -> tuple[NodeExit | None, list[Any]]:
    """Run `fn` on every node at once; the first failure (non-zero int or exception) stops the rest.
    `per_node[i]` is channel i's first argument (its last with `per_node_last`). `on_lost`: a node lost
    (or exiting after its interruption notice) is handed to it instead, the others going on; its answer
    is that node's outcome."""
    results: list[Any] = [None] * len(channels)
    first: list[NodeExit] = []

    async def one(i: int, channel: WorkerRef, scope: CancelScope) -> None:
        if per_node is None:
            call_args = args
        else:
            call_args = (*args, per_node[i]) if per_node_last else (per_node[i], *args)
        try:
            value = await driver.call(channel, fn, call_args, name=phase)
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
