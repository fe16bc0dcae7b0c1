"""A managed job's controller: runs the job to its end without the client, recovering lost nodes.

    python -m skyhive.runtime.managed.controller JOB_ID

One controller per job, a detached process of this machine (its own session, no terminal, like a
named pool's agent: `clusters/agent.py`), holding the job's `controller.lock`. It folds the job's
events (`store.py`) and runs attempts until one ends the job:

- each attempt is a fresh pool (`<name>-job<ID>-<attempt>`) running the task's steps (`run_steps`:
  workdir, file mounts, setup, run) with `SKYHIVE_CHECKPOINT_DIR` (the job's checkpoint folder, the
  same across attempts), `SKYHIVE_JOB_ID` and one `SKYPILOT_TASK_ID` for every attempt;
- a node lost (its worker died, its host unreachable: `NodeExit.lost`) → the pool is torn down and a
  new attempt starts on fresh nodes (a recovery; not counted against `max_restarts_on_errors`);
- the program failing (non-zero exit) → a new attempt while `max_restarts_on_errors` allows, else
  FAILED;
- `skyhive jobs cancel` (a `cancel` event) → the attempt's commands are stopped, its pool torn down,
  CANCELLED.

Restarted after dying (`ensure_controller` on any `jobs` command, or by hand), it goes on from the
events: the dead controller's pool went with it (Local workers exit with their client), so a new
attempt starts. The lock makes sure only one controller runs a job.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
import warnings
from typing import Any

import anyio

from ...providers.accelerators import AcceleratorWarning
from ..clusters.agent import _copy_output, _JobLog
from ..clusters.procs import lock_holder
from ..commands.steps import NodeExit, run_steps
from . import store

log = logging.getLogger("skyhive.managed")

__all__ = ["ensure_controller", "controller_pid", "main"]

_POLL = 0.3  # seconds between looks for a cancel request
_MODULE = "skyhive.runtime.managed.controller"


def controller_pid(job_id: int) -> int | None:
    """The pid of the job's running controller, or None (-1: one is starting or leaving)."""
    return lock_holder(store.lock_path(job_id))


def ensure_controller(job_id: int) -> int | None:
    """Start the job's controller unless it runs or the job has ended; its pid (None: the job ended)."""
    if store.load(job_id).state in store.FINISHED:
        return None
    pid = controller_pid(job_id)
    if pid is not None:
        return pid
    out = subprocess.run([sys.executable, "-m", _MODULE, str(job_id)], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"managed job {job_id}: its controller did not start: "
                           f"{(out.stderr or out.stdout).strip()[-2000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return int(report.get("pid") or 0) or controller_pid(job_id)


def _cancelled(job_id: int) -> bool:
    return store.load(job_id).cancel_requested


async def _watch_cancel(job_id: int, scope: anyio.CancelScope) -> None:
    while not _cancelled(job_id):
        await anyio.sleep(_POLL)
    scope.cancel()


async def _attempt(job_id: int, spec: dict[str, Any], attempt: int, out: _JobLog) -> tuple[str, NodeExit | None, str]:
    """One attempt on a fresh pool: ("ok"|"lost"|"error"|"cancelled"|"broken", the failure, detail)."""
    from ...plugins.image import Image
    from ..commands.launch import task_steps
    from ..commands.plan import plan_launch
    from ..commands.resources import cluster_spec
    from ..pool import Pool

    task = spec["task"]
    planned = plan_launch(task)
    task, provider = planned.task, planned.provider
    pool_id = f"{task.name or 'job'}-job{job_id}-{attempt}"
    steps = task_steps(task, provider, work_id=f"managed-job{job_id}", task_id=spec["task_id"])
    cspec = cluster_spec(task, provider)
    allocation = None if cspec.spot is None else ("spot" if cspec.spot else "on-demand")
    env = {**task.env(), "SKYHIVE_CHECKPOINT_DIR": str(store.checkpoint_dir(job_id)), "SKYHIVE_JOB_ID": str(job_id)}
    secrets = task.secret_env()
    image = Image(secrets=secrets) if secrets else None  # to redact them from the log; the scripts get them below
    store.append(job_id, "attempt", attempt=attempt, pool=pool_id, pid=os.getpid())
    failed: NodeExit | None = None
    cancelled = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AcceleratorWarning)
        async with anyio.create_task_group() as copier:
            async with Pool(provider=provider, nodes=task.num_nodes, name=pool_id, output=None, image=image,
                            accelerator=cspec.accelerator, cpus=cspec.cpus, memory_gb=cspec.memory_gb,
                            allocation=allocation) as pool:
                out.prefix = task.num_nodes > 1
                copier.start_soon(_copy_output, pool.output(), out)
                store.append(job_id, "running", attempt=attempt, pool=pool_id)
                with anyio.CancelScope() as scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_watch_cancel, job_id, scope)
                        failed = await run_steps(pool._runtime, steps, task_env={**env, **secrets})
                        tg.cancel_scope.cancel()
                cancelled = scope.cancelled_caught
    if cancelled:
        return "cancelled", None, "cancelled while running"
    if failed is None:
        return "ok", None, ""
    why = f"{failed.phase} failed on node {failed.node}: {failed.detail or f'exit code {failed.code}'}"
    return ("lost" if failed.lost else "error"), failed, why


def _run(job_id: int) -> None:
    """Attempts until the job ends (its final event appended)."""
    spec = pickle.loads((store.job_dir(job_id) / "task.pkl").read_bytes())  # noqa: S301 - our own 0600 file
    with open(store.log_path(job_id), "a", encoding="utf-8") as fh:
        out = _JobLog(fh, prefix=False)
        while True:
            st = store.load(job_id)
            if st.state in store.FINISHED:
                return
            if st.cancel_requested:
                out.note(f"job {job_id} cancelled")
                store.append(job_id, "cancelled", detail="cancelled")
                return
            attempt = st.attempts + 1
            if st.attempts and st.state != store.RECOVERING:  # an attempt whose controller died
                out.note(f"the controller was restarted (pid {os.getpid()}): attempt {st.attempts} is gone; "
                         f"starting attempt {attempt}")
                store.append(job_id, "lost", detail=f"the controller of attempt {st.attempts} died")
            elif attempt > 1:
                out.note(f"recovery: starting attempt {attempt} on fresh nodes")
            try:
                outcome, failed, why = anyio.run(_attempt, job_id, spec, attempt, out)
            except Exception as exc:  # noqa: BLE001 - provisioning or a broken task: the job fails, saying so
                while isinstance(exc, ExceptionGroup):
                    exc = exc.exceptions[0]
                outcome, failed, why = "broken", None, f"{type(exc).__name__}: {exc}"
            out.flush_partial()
            if outcome == "ok":
                out.note(f"job {job_id} succeeded (attempt {attempt})")
                store.append(job_id, "succeeded", attempt=attempt)
                return
            if outcome == "cancelled":
                out.note(f"job {job_id} cancelled while running")
                store.append(job_id, "cancelled", detail=why)
                return
            if outcome == "lost":
                out.note(f"node lost ({why}): recovering (not counted against max_restarts_on_errors)")
                store.append(job_id, "lost", attempt=attempt, detail=why)
                continue
            st = store.load(job_id)
            if outcome == "error" and st.restarts_on_errors < st.max_restarts_on_errors:
                out.note(f"{why}: restarting ({st.restarts_on_errors + 1} of max_restarts_on_errors="
                         f"{st.max_restarts_on_errors})")
                store.append(job_id, "error", attempt=attempt, detail=why, code=failed.code if failed else 1)
                continue
            out.note(f"job {job_id} failed: {why}")
            store.append(job_id, "failed", attempt=attempt, detail=why, code=failed.code if failed else 1)
            return


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        sys.stderr.write(f"usage: python -m {_MODULE} JOB_ID\n")
        return 2
    job_id = int(args[0])
    store.load(job_id)  # LookupError for a job that does not exist
    fd = os.open(store.lock_path(job_id), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.stdout.write(json.dumps({"already": True}) + "\n")
        return 0
    from ..onnode.daemonize import daemonize

    ready_fd, _ = daemonize(str(store.job_dir(job_id) / "controller.log"))  # the lock is inherited
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    store.append(job_id, "controller", pid=os.getpid())
    os.write(ready_fd, json.dumps({"pid": os.getpid()}).encode())
    os.close(ready_fd)
    logging.basicConfig(level=logging.WARNING, format=f"skyhive-jobs[{os.getpid()}] %(asctime)s %(message)s")
    # SIGTERM (a shutdown, `jobs cancel` giving up waiting) is a cancel: the attempt's pool is torn down
    # by the usual path rather than left to the provider
    signal.signal(signal.SIGTERM, lambda *_: store.append(job_id, "cancel", reason="SIGTERM"))
    try:
        _run(job_id)
    except BaseException as exc:  # noqa: BLE001 - recorded: the job fails rather than stay RUNNING for ever
        log.exception("managed job %d: the controller failed", job_id)
        store.append(job_id, "failed", detail=f"the controller failed: {type(exc).__name__}: {exc}")
    finally:
        if store.load(job_id).state in store.FINISHED:  # Local: the nodes' directories are on this machine
            from ..onnode import nodecmd

            shutil.rmtree(nodecmd.work_root(f"managed-job{job_id}"), ignore_errors=True)
        os.ftruncate(fd, 0)
    return 0


if __name__ == "__main__":
    os._exit(main())
