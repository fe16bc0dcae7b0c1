"""`skyhive launch`: run a task file's `setup` and `run` on a pool, SkyPilot style.

One pool per launch, torn down at the end. The steps on the nodes (resources checked, workdir and file
mounts once per machine, setup once per machine, run on every node; the first failing node stops the
others) are `steps.run_steps`, which a named pool's job agent runs too. SIGINT/SIGTERM stop every
node's script and tear the pool down (exit 130/143).
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import shutil
import signal
import sys
import tarfile
import time
import uuid
import warnings
from typing import Any, TextIO

import anyio
from anyio import CancelScope

from ...errors import LaunchError
from ...providers.accelerators import AcceleratorWarning
from ...providers.base import ClusterSpec, Provider
from ...providers.features import Feature
from ..common import bridge
from ..onnode import nodecmd
from ..commands.plan import plan_launch
from ..commands.resources import cluster_spec, node_requirements
from .steps import NodeExit, TaskSteps, pack_mounts, run_steps
from ..commands.taskfile import Task

__all__ = ["NodeExit", "LaunchError", "launch", "run_launch", "pack_workdir", "WORKDIR_LIMIT", "plan_spec",
           "cluster_info", "task_steps", "task_env"]

#: The largest workdir archive shipped to the nodes (compressed); past it, list what to skip in .skyignore.
WORKDIR_LIMIT = 256 << 20
_ALWAYS_SKIP = (".git", "__pycache__", "*.pyc")


def pack_workdir(path: str, *, limit: int = WORKDIR_LIMIT) -> bytes:
    """A tar.gz of `path`, without .git, __pycache__ and what `.skyignore` lists (shell patterns). A file
    (a `file_mounts` source) is packed alone. Both the workdir and the file mounts travel this way: as
    an argument of the node function that unpacks them, over the pool's own connection (pipes or SSH)."""
    if os.path.isfile(path):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            tar.add(path, arcname=os.path.basename(path), recursive=False)
        if buf.tell() > limit:
            raise LaunchError(f"{path} is larger than {limit >> 20} MiB compressed")
        return buf.getvalue()
    patterns = list(_ALWAYS_SKIP)
    ignore = os.path.join(path, ".skyignore")
    if os.path.isfile(ignore):
        with open(ignore, encoding="utf-8") as fh:
            patterns += [ln.strip().strip("/") for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]

    def skipped(rel: str) -> bool:
        name = os.path.basename(rel)
        return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for root, dirs, files in os.walk(path):
            rel_root = os.path.relpath(root, path)
            rel = (lambda n: n) if rel_root == "." else (lambda n: os.path.join(rel_root, n))
            dirs[:] = sorted(d for d in dirs if not skipped(rel(d)))
            for name in dirs:
                tar.add(os.path.join(root, name), arcname=rel(name), recursive=False)
            for name in sorted(files):
                if not skipped(rel(name)):
                    tar.add(os.path.join(root, name), arcname=rel(name), recursive=False)
            if buf.tell() > limit:
                raise LaunchError(f"{path} is larger than {limit >> 20} MiB compressed: list what "
                                  f"the nodes do not need in {ignore}")
    return buf.getvalue()


def plan_spec(task: Task, provider: Provider | None = None) -> ClusterSpec:
    """What a pool for `task` asks its provider for (to ask the provider's `plan` before launching)."""
    return cluster_spec(task, provider if provider is not None else plan_launch(task).provider)


def task_steps(task: Task, provider: Provider, *, work_id: str, task_id: str, setup: bool = True) -> TaskSteps:
    """What runs on the nodes for `task` (packed here: a workdir too large or a mount that does not
    exist fails before anything is created). `setup=False` leaves setup out (`skyhive exec`)."""
    return TaskSteps(work_id=work_id, task_id=task_id, setup=task.setup if setup else None, run=task.run,
                     archive=pack_workdir(task.workdir) if task.workdir else None,
                     mounts=pack_mounts(task, pack_workdir), requirements=node_requirements(task, provider),
                     cluster_info=cluster_info(work_id, task, provider), num_nodes=task.num_nodes,
                     own_home=Feature.NODE_HOMES in provider.features, buckets=task.bucket_mounts)


def task_env(task: Task) -> dict[str, str]:
    """The task's environment, with SKYHIVE_CHECKPOINT_DIR when it mounts a bucket to keep checkpoints
    on (`sky.checkpoint_dir()`: the same folder for every run of the task's name; docs/storage.md)."""
    env = task.env()
    if task.bucket_mounts:
        from ..storage.plugin import CHECKPOINT_ENV, checkpoint_path

        ckpt = checkpoint_path(task.bucket_mounts, task.name or "default")
        if ckpt is not None:
            env.setdefault(CHECKPOINT_ENV, ckpt)
    return env


def cluster_info(pool_id: str, task: Task, provider: Provider) -> str:
    """SKYPILOT_CLUSTER_INFO: a JSON object with the cluster's name, cloud, region and zone."""
    described = provider.describe()
    region = task.resources.region or described.get("region")
    zones = described.get("zones")
    zone = task.resources.zone or (zones[0] if isinstance(zones, list) and len(zones) == 1 else None)
    return json.dumps({"cluster_name": pool_id, "cloud": provider.name, "region": region, "zone": zone})


class _Launch:
    def __init__(self, task: Task, provider: Provider, err: TextIO) -> None:
        self.task = task
        self.provider = provider
        self.err = err
        stem = task.name or "launch"
        self.pool_id = f"{stem}-{uuid.uuid4().hex[:6]}"
        self.task_id = f"skyhive-{time.strftime('%Y-%m-%d-%H-%M-%S')}-{self.pool_id}"

    def say(self, text: str) -> None:
        _tell(self.err, f"skyhive: {text}")

    async def run(self) -> int:
        from ...plugins.image import Image
        from ..pool import Pool

        task = self.task
        env, secrets = task_env(task), task.secret_env()
        image = Image(env=env, secrets=secrets) if env or secrets else None
        spec = cluster_spec(task, self.provider)
        allocation = None if spec.spot is None else ("spot" if spec.spot else "on-demand")
        steps = task_steps(task, self.provider, work_id=self.pool_id, task_id=self.task_id)
        failed: NodeExit | None = None
        self.say(f"launching {task.name or 'task'} on {task.num_nodes} {self.provider.name} node"
                 f"{'s' if task.num_nodes != 1 else ''} as pool {self.pool_id}")
        planned = self.provider.plan(spec)
        summary = planned.get("summary")
        if summary:  # the machine and what the pool costs, before anything is created
            self.say(f"machines: {summary}")
        if planned.get("warning"):  # asked of a machine that lacks it (Local's GPUs): said, recorded, run
            self.say(f"warning: {planned['warning']}")
        try:
            # Local warns (AcceleratorWarning) when a pool asks for accelerators it lacks: said once above
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", AcceleratorWarning)
                async with Pool(provider=self.provider, nodes=task.num_nodes, name=self.pool_id, output="all",
                                image=image, accelerator=spec.accelerator, cpus=spec.cpus, memory_gb=spec.memory_gb,
                                allocation=allocation) as pool:
                    failed = await run_steps(pool.driver(), steps)
                    if failed is not None:
                        self.report(failed)
                    if Feature.SAME_MACHINE not in self.provider.features:  # the nodes' copies are on them
                        with anyio.move_on_after(30, shield=True):
                            try:
                                await pool.broadcast(nodecmd.remove, self.pool_id)
                            except Exception as exc:  # a lost node keeps its copy; the run's outcome stands
                                self.say(f"warning: could not remove the nodes' workdir copies: {exc}")
        finally:
            if Feature.SAME_MACHINE in self.provider.features:  # the nodes' directories are on this machine
                shutil.rmtree(nodecmd.work_root(self.pool_id), ignore_errors=True)
        if failed is None:
            self.say(f"done: every node exited 0 (pool {self.pool_id}; `skyhive logs {self.pool_id}`)")
            return 0
        from ..commands.exitcodes import FAILED

        return FAILED  # SkyPilot's exit code for a failed job (the node's own is in the message)

    def report(self, failed: NodeExit) -> None:
        why = failed.detail or f"exit code {failed.code}"
        others = " (the other nodes' commands were stopped)" if self.task.num_nodes > 1 else ""
        self.say(f"{failed.phase} failed on node {failed.node}: {why}{others}")


async def launch(task: Task, *, provider: Provider | None = None, err: TextIO | None = None) -> int:
    """Run `task` on a new pool; the exit code (0, or 100 when a node's step failed: `exitcodes`).
    Cancellation tears down.
    Without `provider`, the task's own (`plan.plan_launch`: resources it cannot honour are an error)."""
    err = err or sys.stderr
    if provider is None:
        planned = plan_launch(task)
        task, provider = planned.task, planned.provider
    return await _Launch(task, provider, err).run()


def run_launch(task: Task, *, provider: Provider | None = None, err: TextIO | None = None) -> int:
    """`launch` from synchronous code, with SIGINT/SIGTERM stopping every node and tearing down.

    A first signal cancels the launch (teardown is bounded by the pool's stop_timeout); a second one
    says teardown is in progress; a third exits at once (then `skyhive down POOL` cleans up).
    """
    err = err or sys.stderr
    if provider is None:  # errors in the command line surface here, before anything starts
        planned = plan_launch(task)
        task, provider = planned.task, planned.provider
    received: list[int] = []
    failure: list[BaseException] = []

    async def watch(signals: Any, scope: CancelScope) -> None:
        async for signum in signals:
            received.append(signum)
            if len(received) == 1:
                _tell(err, f"\nskyhive: {signal.Signals(signum).name}: stopping every node's command and "
                           "tearing down")
                scope.cancel()
            elif len(received) == 2:
                _tell(err, "skyhive: still tearing down; signal again to exit at once")
            else:
                os._exit(128 + signum)

    async def main() -> int:
        code = 1
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()
                tg.start_soon(watch, signals, scope)
                with scope:
                    try:
                        code = await launch(task, provider=provider, err=err)
                    except Exception as exc:  # raised as itself, not inside the task group's ExceptionGroup
                        failure.append(exc)
                tg.cancel_scope.cancel()
        return 128 + received[0] if received else code

    code = bridge.run(main)
    if failure:
        raise failure[0]
    return code


def _tell(stream: TextIO, line: str) -> None:
    """A status line of the launch command for its user (the command's own output, not a log)."""
    stream.write(line + "\n")
    stream.flush()
