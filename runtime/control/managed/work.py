"""What one attempt of a managed job runs on its pool: a task file's steps (`TaskWork`) or a
`@sky.compute` call (`function.FunctionWork`). The controller (controller.py) owns everything around
it — the pool, the output, the watchers for cancel, machines gone and interruption notices, recovery."""

from __future__ import annotations

import abc
from typing import Any

from ..steps import NodeExit, OnLost
from ....providers.features import Feature
from ...onnode import interruption
from . import store

__all__ = ["Work", "TaskWork", "work_id", "checkpoint_env"]


def work_id(job_id: int) -> str:
    """The job's working directory's name on its nodes, the same for every attempt."""
    return f"managed-job{job_id}"


def checkpoint_env(job_id: int, task: Any, provider: Any) -> tuple[str, str]:
    """`SKYHIVE_CHECKPOINT_DIR` of every attempt, and what it is (for the log): this machine's folder on
    Local (its nodes are here); on another provider the task's checkpoint bucket mount (the folder
    `<mount>/<name>-job<ID>` there, which a fresh node fills from the bucket); without one a folder in
    the job's working directory on the node, which does not survive the node. (`task` None: a function
    job, which has no mounts of its own.)"""
    if Feature.SAME_MACHINE in provider.features:  # the nodes share this machine's files (Local)
        return str(store.checkpoint_dir(job_id)), "this machine's folder"
    if task is not None and task.bucket_mounts:
        from ...storage.plugin import checkpoint_path

        ckpt = checkpoint_path(task.bucket_mounts, f"{task.name or 'job'}-job{job_id}")
        if ckpt is not None:
            return ckpt, "the checkpoint bucket mount"
    return (f"~/.skyhive/work/{work_id(job_id)}/checkpoints",
            "a folder on the node: it does not survive the node (mount a bucket with mode MOUNT_CACHED to keep "
            "checkpoints across recoveries)")


class Work(abc.ABC):
    """One attempt's work: the pool it needs (`provider`, `nodes`, `pool_options`), the checkpoint
    folder (`checkpoint`, `checkpoint_what` for the log), and `run` on the pool once it is up."""

    provider: Any
    nodes: int
    name: str
    checkpoint: str
    checkpoint_what: str

    @abc.abstractmethod
    def pool_options(self) -> dict[str, Any]:
        """Keyword arguments of the attempt's `Pool` besides provider, nodes, name and output."""

    @property
    def in_place(self) -> bool:
        """Whether a lost node is replaced inside the attempt's pool (its other nodes kept, the work run
        again on all of them: `run(pool, fresh=...)`) rather than by a new attempt on fresh nodes."""
        return False

    @property
    def restart_node(self) -> bool:
        """With `in_place`: only the replaced node's work starts again (`rerun_node`), the others going on
        (`run(on_lost=...)`); else every node's restarts together."""
        return False

    @abc.abstractmethod
    async def run(self, pool: Any, fresh: frozenset[int] | None = None, on_lost: OnLost | None = None) -> NodeExit | None:
        """Run the job's user code on the pool: None when it succeeded, else the node that did not
        (`lost=True`: its worker or machine was lost, a recovery; otherwise the user's own failure).
        `fresh` (with `in_place`): it ran on this pool before and these nodes replaced lost ones.
        `on_lost` (with `restart_node`): a node lost while the others go on is handed to it."""

    async def rerun_node(self, pool: Any, node: int, on_lost: OnLost | None = None) -> NodeExit | None:
        """The work on `node` alone, a replacement joining the others (`restart_node`)."""
        raise NotImplementedError(f"{type(self).__name__} does not restart one node alone")

    async def finished(self, pool: Any) -> None:
        """After a run that lost no node, before the pool is torn down (default: nothing)."""
        return None


class TaskWork(Work):
    """A task file's steps (workdir, file mounts, setup, run) with the job's environment."""

    def __init__(self, job_id: int, spec: dict[str, Any], avoid: list[Any], restart: str = "gang") -> None:
        from ..launch import task_steps
        from ...commands.plan import plan_launch
        from ...commands.resources import cluster_spec

        task = spec["task"]
        provider = spec.get("provider")
        if provider is None:
            planned = plan_launch(task)
            task, provider = planned.task, planned.provider
        if avoid:
            provider = provider.avoiding(avoid)
        self.job_id, self.task, self.provider = job_id, task, provider
        self.nodes, self.name = task.num_nodes, task.name or "job"
        self.steps = task_steps(task, provider, work_id=work_id(job_id), task_id=spec["task_id"])
        self.cspec = cluster_spec(task, provider)
        ckpt, what = checkpoint_env(job_id, task, provider)
        env = {"SKYHIVE_CHECKPOINT_DIR": ckpt, **task.env(), "SKYHIVE_JOB_ID": str(job_id)}
        if provider.features.notices:  # the nodes watch their cloud's notice while `run` runs
            env[interruption.WATCH_ENV] = provider.features.notices
        if env["SKYHIVE_CHECKPOINT_DIR"] != ckpt:  # the task's own (a shared file system): kept
            ckpt, what = env["SKYHIVE_CHECKPOINT_DIR"], "the task's own"
        self.checkpoint, self.checkpoint_what = ckpt, what
        self.secrets = task.secret_env()
        self.env = env
        self.restart = restart  # `RestartPolicy.restart`: "gang" or "node"

    def pool_options(self) -> dict[str, Any]:
        from ....plugins.image import Image

        cspec = self.cspec
        allocation = None if cspec.spot is None else ("spot" if cspec.spot else "on-demand")
        # the secrets in the Image only to redact them from the log; the scripts get them in `run`
        image = Image(secrets=self.secrets) if self.secrets else None
        return {"image": image, "accelerator": cspec.accelerator, "cpus": cspec.cpus, "memory_gb": cspec.memory_gb,
                "allocation": allocation}

    @property
    def in_place(self) -> bool:
        """A multi-node task: a lost node is replaced alone, the healthy machines (and what setup made
        on them) kept; `run` restarts on every node together (its peers' ranks and addresses change,
        and a process group — torch, jax — cannot take a new member). One node: a new attempt."""
        return self.nodes > 1

    @property
    def restart_node(self) -> bool:
        """`resources.job_recovery.restart: node` (the job's `RestartPolicy`): nodes that work alone."""
        return self.restart == "node"

    async def run(self, pool: Any, fresh: frozenset[int] | None = None, on_lost: OnLost | None = None) -> NodeExit | None:
        from ..steps import run_steps

        return await run_steps(pool.driver(), self.steps, task_env={**self.env, **self.secrets}, fresh=fresh,
                               on_lost=on_lost)

    async def rerun_node(self, pool: Any, node: int, on_lost: OnLost | None = None) -> NodeExit | None:
        """Every step on `node` alone (workdir, file mounts, setup, run): a replacement joining the job."""
        from ..steps import run_steps

        return await run_steps(pool.driver(), self.steps, task_env={**self.env, **self.secrets},
                               only=frozenset({node}), on_lost=on_lost)

    async def finished(self, pool: Any) -> None:
        """The job's working directory removed from the nodes (off Local; after a lost node the job's
        last sweep removes it instead: nothing waits on a silent node)."""
        import anyio

        from ...onnode import nodecmd

        if Feature.SAME_MACHINE in self.provider.features:  # the nodes' folders are this machine's: none there
            return
        with anyio.move_on_after(30, shield=True):
            try:
                await pool.broadcast(nodecmd.remove, work_id(self.job_id))
            except Exception:  # noqa: BLE001 - a lost node keeps its copy: the sweep removes it
                pass
