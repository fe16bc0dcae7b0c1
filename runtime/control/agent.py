"""The queue agent of a named pool: runs its jobs one after another, whoever submitted them.

    python -m skyhive.runtime.control.agent NAME

`skyhive launch -c` and `skyhive exec` only queue a job (`jobs.submit`) and make sure an agent runs
(`ensure_agent`); with `-d` they return at once, else they follow the job's log. The agent is a
small detached process of this machine (its own session, no terminal, its diagnostics in the pool's
`agent.log`): one per pool (it holds `agent.lock`), alive only while jobs wait. For each job it
attaches to the pool (`Pool.attach`: the same workers, takeover of their sockets, the pool's lock —
so a Python client attached meanwhile makes it wait its turn), marks the job RUNNING, runs its steps
as `skyhive launch` does (`commands/steps.py`: workdir and file mounts, `setup` once per machine if
the job has one, `run` on every node), writes what the nodes print to the job's log, and detaches. A
`skyhive cancel` of the running job cancels its tasks (the nodes' commands get SIGTERM, then
SIGKILL) and the next job starts. When the queue is empty the agent leaves; the workers' idle clock
(autostop) starts then.

Leaving is race-free: the agent releases its lock and looks at the queue once more; a job queued
after that look finds the lock free and starts a new agent.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import time
from typing import TYPE_CHECKING, Any

import anyio

from .joblog import JobLog
from .steps import run_steps
from ..clusters import jobs as jobq
from ..clusters import record as records
from ..clusters.jobs import agent_lock_path, agent_pid
from ..common import bridge, daemon

if TYPE_CHECKING:
    from ..nodes.driver import PoolDriver

log = logging.getLogger("skyhive.control.agent")

__all__ = ["ensure_agent", "agent_pid", "run_job", "main"]

_POLL = 0.3  # seconds between looks for a cancel request
_MODULE = "skyhive.runtime.control.agent"
#: seconds a starting agent waits for a lock held without a pid: `agent_pid()` probing the lock, or an agent
#: leaving (it empties the file, then unlocks) — not an agent at work (`daemon.serve`'s `patience`)
_PROBE_PATIENCE = 5.0


def ensure_agent(name: str) -> None:
    """Start the pool's agent unless one runs (it exits once it has nothing to do)."""
    daemon.ensure(_MODULE, name, lock_path=agent_lock_path(name), what=f"pool {name!r}: the job agent")


async def run_job(name: str, job: jobq.Job) -> jobq.Job | None:
    """Run the PENDING `job` on pool `name`: attach (waiting for a client attached now), mark it RUNNING,
    run it; the job as it ended (SUCCEEDED, FAILED or CANCELLED), or None when it was cancelled while
    it waited (it is left as `cancel` made it)."""
    from ...plugins.image import Image
    from ..pool import Pool

    # the secrets only to redact them from what this client logs; the scripts get the job's variables
    # with each call (`run_steps`), so nothing of one job stays in the workers for the next
    image = Image(secrets=job.secrets) if job.secrets else None
    code, detail, cancelled, phase = 1, "", False, ""
    running: jobq.Job | None = None
    with jobq.open_log(name, job.id) as fh:
        out = JobLog(fh, prefix=False)
        try:
            pool = Pool.attach(name, image=image, output=None, wait=None)
            async with anyio.create_task_group() as copier:
                async with pool:
                    running = _start(name, job.id)
                    if running is None:
                        return None
                    driver = pool.driver()
                    out.prefix = len(driver.nodes()) > 1
                    copier.start_soon(_copy_output, pool.output(), out)
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(_watch_cancel, name, job.id, scope)
                            code, detail, phase = await _run(driver, name, job)
                            tg.cancel_scope.cancel()
                    cancelled = scope.cancelled_caught
                # leaving detached the pool: the output stream ends after what it holds
        except Exception as exc:  # noqa: BLE001 - the job fails; the agent goes on with the next
            while isinstance(exc, ExceptionGroup):
                exc = exc.exceptions[0]
            code, detail = 1, f"{type(exc).__name__}: {exc}"
        if running is None:  # the pool could not be attached: the job fails unless cancelled meanwhile
            with jobq.queue_lock(name):
                running = jobq.load_job(name, job.id)
                if running.state != jobq.PENDING:
                    return None
        if cancelled:
            state, detail = jobq.CANCELLED, "cancelled while running"
        else:
            state = jobq.SUCCEEDED if code == 0 else jobq.FAILED_SETUP if phase == "setup" else jobq.FAILED
        out.note(f"job {job.id} {state.lower()}" + (f": {detail}" if detail else f" (exit code {code})"))
    return dataclasses.replace(running, state=state, ended=time.time(), exit_code=None if cancelled else code,
                               detail=detail, secrets={})


def _start(name: str, job_id: int) -> jobq.Job | None:
    """The job, now RUNNING — or None if it is no longer PENDING (cancelled while the agent waited for
    the pool). Under the queue lock, so a cancel cannot race it."""
    with jobq.queue_lock(name):
        job = jobq.load_job(name, job_id)
        if job.state != jobq.PENDING:
            return None
        job = dataclasses.replace(job, state=jobq.RUNNING, started=time.time(), agent_pid=os.getpid())
        jobq.save_job(name, job)
        return job


async def _run(driver: PoolDriver, name: str, job: jobq.Job) -> tuple[int, str, str]:
    """The job's steps on every node: (0, "", "") or (exit code, what failed where, the step)."""
    steps = pickle.loads(jobq.steps_path(name, job.id).read_bytes())  # noqa: S301 - our own 0600 file
    failed = await run_steps(driver, steps, task_env={**job.env, **job.secrets})
    if failed is None:
        return 0, "", ""
    return (failed.code or 1, f"{failed.phase} failed on node {failed.node}: {failed.detail or f'exit code {failed.code}'}",
            failed.phase)


async def _copy_output(stream: Any, out: JobLog) -> None:
    async with stream:
        async for rec in stream:
            out.write(rec.node, rec.local_rank, rec.stream, rec.text)


async def _watch_cancel(name: str, job_id: int, scope: anyio.CancelScope) -> None:
    while not jobq.cancel_requested(name, job_id):
        await anyio.sleep(_POLL)
    scope.cancel()


def _next(name: str) -> jobq.Job | None:
    """The next PENDING job (jobs left RUNNING by an agent that died are failed first)."""
    jobq.reap_orphans(name)
    return jobq.next_pending(name)


def main(argv: list[str] | None = None) -> int:
    arg = daemon.argument(argv, _MODULE, "NAME")
    if arg is None:
        return 2
    name = records.check_name(arg)
    return daemon.serve(agent_lock_path(name), str(records.cluster_dir(name) / "agent.log"),
                        lambda lease: _jobs(name, lease), patience=_PROBE_PATIENCE, log_name="skyhive-agent")


def _jobs(name: str, lease: daemon.Lease) -> int:
    """The agent's loop: the pool's jobs one after another until none waits."""
    while True:
        job = _next(name)
        if job is None:
            lease.release()  # leave, then look once more: a job queued now finds no agent
            if jobq.next_pending(name) is None or not lease.retake():  # (else another agent took over)
                return 0
            continue
        log.warning("pool %s: job %d (%s) starts", name, job.id, job.name)
        try:
            ended = bridge.run(run_job, name, job)
        except BaseException as exc:  # noqa: BLE001 - recorded; the queue goes on
            ended = dataclasses.replace(jobq.load_job(name, job.id), state=jobq.FAILED, ended=time.time(),
                                        exit_code=1, detail=f"{type(exc).__name__}: {exc}", secrets={})
        if ended is not None:
            jobq.save_job(name, ended)
        for leftover in (jobq.steps_path(name, job.id), jobq.log_path(name, job.id).with_suffix(".cancel")):
            leftover.unlink(missing_ok=True)
        log.warning("pool %s: job %d %s", name, job.id, ended.state if ended is not None else "skipped (cancelled)")


if __name__ == "__main__":
    os._exit(main())
