"""The queue agent of a named pool: runs its jobs, whoever submitted them, side by side when they fit.

    python -m skyhive.runtime.control.agent NAME

`skyhive launch -c` and `skyhive exec` only queue a job (`jobs.submit`) and make sure an agent runs
(`ensure_agent`); with `-d` they return at once, else they follow the job's log. The agent is a
small detached process of this machine (its own session, no terminal, its diagnostics in the pool's
`agent.log`): one per pool (it holds `agent.lock`), alive only while jobs wait. It attaches to the
pool (`Pool.attach`: the same workers, takeover of their sockets, the pool's lock — so a Python client
attached meanwhile makes it wait its turn) and, while it stays attached, starts the queued jobs as
`jobsched.to_start` lets them (in queue order; side by side when the resources they ask fit the node).
Each job is marked RUNNING and runs its steps as `skyhive launch` does (`commands/steps.py`: workdir
and file mounts, `setup` once per machine if the job has one, `run` on every node); what its calls
print goes to its own log (the calls' task ids tell the jobs apart). Once no job runs, the agent
detaches. A `skyhive cancel` of a running job cancels its tasks (the nodes' commands get SIGTERM,
then SIGKILL) and the jobs waiting for room start. When the queue is empty the agent leaves; the workers' idle clock
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

__all__ = ["ensure_agent", "agent_pid", "run_jobs", "main"]

_POLL = 0.3  # seconds between looks for a cancel request
_MODULE = "skyhive.runtime.control.agent"
#: seconds a starting agent waits for a lock held without a pid: `agent_pid()` probing the lock, or an agent
#: leaving (it empties the file, then unlocks) — not an agent at work (`daemon.serve`'s `patience`)
_PROBE_PATIENCE = 5.0


def ensure_agent(name: str) -> None:
    """Start the pool's agent unless one runs (it exits once it has nothing to do)."""
    daemon.ensure(_MODULE, name, lock_path=agent_lock_path(name), what=f"pool {name!r}: the job agent")


async def run_jobs(name: str, first: jobq.Job) -> list[jobq.Job]:
    """Attach to pool `name` (waiting for a client attached now) and run its PENDING jobs, `first` and
    those queued meanwhile, side by side as `jobsched.to_start` lets them; detach once none runs and none
    can join. The jobs as they ended (SUCCEEDED, FAILED, FAILED_SETUP or CANCELLED); a job cancelled
    while it waited is left as `cancel` made it. A job whose secrets were not known when the pool was
    attached (they are redacted from this client's log) waits for the next attach."""
    from ...plugins.image import Image
    from ..pool import Pool
    from ..commands import jobsched

    # the secrets only to redact them from what this client logs; the scripts get the job's variables
    # with each call (`run_steps`), so nothing of one job stays in the workers for the next
    secrets = dict(first.secrets)
    image = Image(secrets=secrets) if secrets else None
    ended: list[jobq.Job] = []
    logs: dict[int, tuple[set[int], JobLog]] = {}  # job id -> (its calls' task ids, its log)
    try:
        pool = Pool.attach(name, image=image, output=None, wait=None)
        async with anyio.create_task_group() as copier:
            async with pool:
                driver = pool.driver()
                cap = await _capacity(driver, pool.worker.threads)
                copier.start_soon(_copy_output, pool.output(), logs)
                running: dict[int, jobsched.Demand] = {}
                changed = anyio.Event()

                async def one(job: jobq.Job) -> None:
                    try:
                        ended.append(await _run_one(name, job, driver, logs))
                    finally:
                        running.pop(job.id, None)
                        changed.set()

                async with anyio.create_task_group() as tg:
                    while True:
                        jobq.reap_orphans(name)
                        waiting = []
                        for j in jobq.pending(name):  # up to a job with secrets this attach does not redact
                            if set(j.secrets.items()) - set(secrets.items()):
                                break
                            waiting.append(j)
                        count = jobsched.to_start([jobsched.demand_of(j.demand) for j in waiting],
                                                  list(running.values()), cap)
                        for job in waiting[:count]:
                            started = _start(name, job.id)
                            if started is not None:
                                log.warning("pool %s: job %d (%s) starts", name, job.id, job.name)
                                running[job.id] = jobsched.demand_of(job.demand)
                                tg.start_soon(one, started)
                        if not running:
                            break
                        changed = anyio.Event()
                        with anyio.move_on_after(_POLL):  # a job ends, or one is queued meanwhile
                            await changed.wait()
            # leaving detached the pool: the output stream ends after what it holds
    except Exception as exc:  # noqa: BLE001 - the jobs fail; the agent goes on with the next
        while isinstance(exc, ExceptionGroup):
            exc = exc.exceptions[0]
        detail = f"{type(exc).__name__}: {exc}"
        done = {j.id for j in ended}
        with jobq.queue_lock(name):
            # the jobs this agent started and did not end, and the first job if the pool could not be
            # attached (unless it was cancelled meanwhile), fail saying why
            failing = [j for j in jobq.list_jobs(name, setup_only=True) if j.id not in done and (
                (j.state == jobq.RUNNING and j.agent_pid == os.getpid()) or (j.id == first.id and j.state == jobq.PENDING))]
        for job in failing:
            with jobq.open_log(name, job.id) as fh:
                JobLog(fh, prefix=False).note(f"job {job.id} failed: {detail}")
            ended.append(dataclasses.replace(job, state=jobq.FAILED, ended=time.time(), exit_code=1,
                                             detail=detail, secrets={}))
    return ended


async def _capacity(driver: PoolDriver, slots: int) -> Any:
    """What the pool's first node has for jobs (`jobsched.Capacity`): its GPUs, CPUs and memory, and the
    task slots of its workers."""
    from ..onnode.nodeprep import node_capacity
    from ..commands.jobsched import Capacity

    workers = await driver.workers()
    gpus, cpus, memory = await driver.call(workers[0], node_capacity, name="capacity")
    return Capacity(gpus=float(max(gpus, 1)), cpus=cpus, memory_gb=memory, slots=max(1, slots))


async def _run_one(name: str, job: jobq.Job, driver: PoolDriver, logs: dict[int, tuple[set[int], JobLog]]) -> jobq.Job:
    """The RUNNING `job` on the attached pool: its steps, its output into its log, a cancel watched."""
    code, detail, phase, cancelled = 1, "", "", False
    with jobq.open_log(name, job.id) as fh:
        out = JobLog(fh, prefix=len(driver.nodes()) > 1)
        ids: set[int] = set()
        logs[job.id] = (ids, out)
        try:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_watch_cancel, name, job.id, scope)
                    with driver.collect_task_ids(ids):
                        code, detail, phase = await _run(driver, name, job)
                    tg.cancel_scope.cancel()
            cancelled = scope.cancelled_caught
        except Exception as exc:  # noqa: BLE001 - the job fails; the others go on
            while isinstance(exc, ExceptionGroup):
                exc = exc.exceptions[0]
            code, detail = 1, f"{type(exc).__name__}: {exc}"
        if cancelled:
            state, detail = jobq.CANCELLED, "cancelled while running"
        else:
            state = jobq.SUCCEEDED if code == 0 else jobq.FAILED_SETUP if phase == "setup" else jobq.FAILED
        # a setup-only task has no job id (its id is negative, SkyPilot's numbering): it is named by its task
        what = f"job {job.id}" if job.id > 0 else f"setup of {job.name}"
        out.note(f"{what} {state.lower()}" + (f": {detail}" if detail else f" (exit code {code})"))
        logs.pop(job.id, None)
    log.warning("pool %s: %s %s", name, what, state)
    ended = dataclasses.replace(job, state=state, ended=time.time(), exit_code=None if cancelled else code,
                                detail=detail, secrets={})
    jobq.save_job(name, ended)
    for leftover in (jobq.steps_path(name, job.id), jobq.log_path(name, job.id).with_suffix(".cancel")):
        leftover.unlink(missing_ok=True)
    return ended


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


async def _copy_output(stream: Any, logs: dict[int, tuple[set[int], JobLog]]) -> None:
    """Each record into the log of the job whose call wrote it."""
    async with stream:
        async for rec in stream:
            for ids, out in list(logs.values()):
                if rec.task in ids:
                    out.write(rec.node, rec.local_rank, rec.stream, rec.text)
                    break


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
    """The agent's loop: the pool's jobs, side by side where they fit (`run_jobs`), until none waits."""
    while True:
        job = _next(name)
        if job is None:
            lease.release()  # leave, then look once more: a job queued now finds no agent
            if jobq.next_pending(name) is None or not lease.retake():  # (else another agent took over)
                return 0
            continue
        try:
            for ended in bridge.run(run_jobs, name, job):
                jobq.save_job(name, ended)
        except BaseException as exc:  # noqa: BLE001 - recorded; the queue goes on
            with jobq.queue_lock(name):
                for stuck in jobq.list_jobs(name, setup_only=True):  # what this agent started fails, saying why
                    if stuck.state == jobq.RUNNING and stuck.agent_pid == os.getpid():
                        jobq.save_job(name, dataclasses.replace(stuck, state=jobq.FAILED, ended=time.time(), exit_code=1,
                                                                detail=f"{type(exc).__name__}: {exc}", secrets={}))
        if jobq.load_job(name, job.id).state in jobq.FINISHED:  # (one cancelled while it waited too)
            for leftover in (jobq.steps_path(name, job.id), jobq.log_path(name, job.id).with_suffix(".cancel")):
                leftover.unlink(missing_ok=True)


if __name__ == "__main__":
    os._exit(main())
