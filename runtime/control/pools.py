"""`skyhive launch -c NAME`, `exec`, `status` and `down NAME`: named pools that outlive the command.

A named pool's nodes are Local nodes whose workers are detached daemons (`runtime/clusters/`). The
commands never run a job themselves: `launch -c` creates the pool when it does not run (or reuses it
when the task asks for the same shape), then, like `exec`, queues a job and makes sure the pool's
agent runs it (`control/agent.py`); without `-d` they then follow the job's log to its end and exit
with its exit code. Ctrl-C while following stops following only: the job goes on (`skyhive cancel`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import TextIO


from ...errors import LaunchError, PoolGone, PoolNotFound, SSHError, TeardownIncomplete
from ...providers.base import Provider
from ...providers.features import Feature
from ...providers.local import Local
from ..clusters import jobs as jobq
from ..clusters import record as records
from ..common import bridge
from .agent import ensure_agent
from ..clusters.named import dead_workers, live_workers, new_kept_pool, set_autostop
from ..clusters.kept_pool import KeptPool
from ..clusters.procs import alive
from ..clusters.stop import stop_pool
from .launch import task_env, task_steps
from .steps import TaskSteps
from .autostop_hook import save_hook
from ..commands.taskfile import Task

__all__ = ["task_spec", "launch_cluster", "exec_task", "down_cluster", "status_rows", "print_status", "follow_job",
           "FOLLOW_POLL"]

log = logging.getLogger("skyhive.control.pools")

FOLLOW_POLL = 0.2  # seconds between looks at a followed job's log
#: seconds a followed job's end waits for the pool's agent to let the pool go (`_let_go`)
LET_GO_WAIT = 60.0
#: task slots of a named pool's workers: how many of its jobs can run side by side on a node
JOB_SLOTS = 8


def task_spec(task: Task) -> dict[str, object]:
    """What a named pool is made of, as `launch -c` compares it: nodes, provider and resources."""
    spec: dict[str, object] = {"num_nodes": task.num_nodes, "provider": task.resources.provider or "local",
                               "resources": task.resources.describe()}
    if task.resources.ports:  # (only when set: the pools recorded before ports existed compare equal)
        spec["ports"] = [list(r) for r in task.resources.ports]
    return spec


def _say(err: TextIO, text: str) -> None:
    """A status line of the command for its user (the command's own output, not a log)."""
    err.write(f"skyhive: {text}\n")
    err.flush()


def _require_keepable(task: Task, command: str) -> None:
    """Refuse a provider that says it cannot keep a pool (`Feature.KEEP` not in its features), with its reason."""
    from ...providers.registry import provider_class

    if task.resources.alternatives:
        raise LaunchError(f"{command}: {task.line_of('resources')}: resources.any_of / ordered (or several "
                          f"accelerators) search offers on several providers, and a named pool is kept on one: "
                          f"name it (e.g. infra: aws/us-east-1), or launch without -c to search")
    provider = task.resources.provider or "local"
    reason = provider_class(provider).features.why_not(Feature.KEEP, provider)
    if reason:
        raise LaunchError(f"{command}: provider {provider!r} cannot keep a named pool: {reason} "
                          f"(`skyhive launch` without -c runs a task on {provider} once)")


def _provider_of(name: str) -> Provider:
    """The provider a job of pool `name` is planned for (its SKYPILOT_CLUSTER_INFO, node checks)."""
    kept = KeptPool.load(name)
    if kept.here:
        return Local()
    # its machines' provider (region, zone for SKYPILOT_CLUSTER_INFO; no cloud call), else its nodes as the
    # kind that keeps it reaches them
    return kept.plan_provider()


def launch_cluster(task: Task, name: str, *, detach_run: bool = False, idle_minutes: float | None = None,
                   down: bool = False, out: TextIO | None = None, err: TextIO | None = None,
                   provider: Provider | None = None) -> int:
    """`skyhive launch -c NAME TASK`: create pool `name` on `provider` (the task's: Local when None; SSH
    hosts work too) or reuse it when it runs with the same shape, queue the task (setup, then run) and,
    unless `detach_run`, follow it; the job's exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    records.check_name(name)
    _require_keepable(task, f"launch -c {name}")
    if idle_minutes is not None and idle_minutes <= 0:
        raise ValueError(f"-i {idle_minutes:g}: autostop needs a positive number of minutes")
    autostop = task.resources.autostop  # the task file's; -i / --down win over it, as in SkyPilot
    if autostop is not None and autostop.hook:  # honoured where the provider declares it (providers/features.py)
        chosen = provider or Local()
        reason = chosen.features.why_not(Feature.AUTOSTOP_HOOK, chosen.name)
        if reason:
            raise LaunchError(f"{task.line_of('resources.autostop')}: resources.autostop.hook: {reason}")
    if (autostop is not None and autostop.wait_for != "jobs_and_ssh"
            and Feature.SAME_MACHINE not in (provider or Local()).features):
        raise LaunchError(f"{task.line_of('resources.autostop')}: resources.autostop.wait_for: {autostop.wait_for}: on "
                          f"SSH hosts and cloud machines the pool's autostop runs on the machines themselves, away "
                          f"from its job queue, and waits for jobs and clients (jobs_and_ssh); remove the key (or "
                          f"launch on Local)")
    if autostop is not None and idle_minutes is None:
        idle_minutes, down = autostop.idle_minutes, down or autostop.down
    if down and idle_minutes is None:
        idle_minutes = 5.0  # SkyPilot's default for --down alone
    spec = task_spec(task)
    if provider is not None:
        spec["provider"] = provider.name
    # every check that needs no pool, before one exists: a variable or secret without a value, a
    # workdir too large, a mount that does not exist (a pool created first stayed UP, billed, for a
    # task that could never run)
    job_env = (task_env(task), task.secret_env())
    try:
        rec: records.ClusterRecord | None = records.load(name)
    except PoolNotFound:
        rec = None
    if rec is not None:  # a cloud pool whose autostop shut its instances down: stopped, disks kept
        from ..clusters.stop import stopped_by_shutdown

        rec = stopped_by_shutdown(rec)
    machines = bool(rec is not None and KeptPool(rec).machines)
    if rec is not None and (rec.stopped == "stop" or (rec.stopped and machines)):
        # `skyhive stop` or a cloud pool's autostop: the same nodes started again, disks kept
        from ..commands.pause import start_cluster

        start_cluster(name, provider=provider if machines else None, err=err)
        rec = records.load(name)
    if rec is not None and (dead_workers(rec) or not rec.workers):
        _say(err, f"pool {name} is stopped (its workers are gone): starting it again")
        down_cluster(name, err=err, quiet=True)
        rec = None
    if rec is not None:
        # fewer nodes than the pool has fit it (the job runs on the first N, as SkyPilot's launch on a cluster)
        differs = [f"{k}: pool has {rec.spec.get(k)!r}, task asks {v!r}" for k, v in spec.items()
                   if rec.spec.get(k) != v and not (k == "num_nodes" and task.num_nodes < rec.nodes)]
        if differs:
            raise LaunchError(f"pool {name!r} exists with another shape ({'; '.join(differs)}): `skyhive exec {name}` "
                              f"runs on it as it is, `skyhive down {name}` first to launch it anew")
        _say(err, f"reusing pool {name} ({rec.nodes} node{'s' if rec.nodes != 1 else ''})")
        if idle_minutes is not None:  # SkyPilot resets autostop on a reused cluster the same way
            save_hook(name, autostop, own_home=Feature.NODE_HOMES in _provider_of(name).features)
            set_autostop(rec, idle_minutes, down)
            _say(err, f"pool {name}: autostop after {idle_minutes:g} min idle{' (then down)' if down else ''}")
        job = _queue(task, name, setup=True)
    else:
        provider = provider or Local()
        steps = _steps(task, name, provider, setup=True)
        save_hook(name, autostop, own_home=Feature.NODE_HOMES in provider.features)  # (before the watchdog starts: it runs the hook)
        _create(task, name, spec, idle_minutes, down, err, provider)
        try:  # a failure after creation tears down what was created
            job = _submit(task, name, steps, job_env, setup=True)
            ensure_agent(name)
        except BaseException:
            _say(err, f"pool {name}: the job could not be queued: taking the new pool down again")
            down_cluster(name, err=err, quiet=True)
            raise
    return _after_submit(name, job, detach_run, out, err)


def _create(task: Task, name: str, spec: dict[str, object], idle_minutes: float | None, down: bool,
            err: TextIO, provider: Provider) -> None:
    _say(err, f"creating pool {name}: {task.num_nodes} {provider.name} node{'s' if task.num_nodes != 1 else ''}"
              + (f", autostop after {idle_minutes:g} min idle{' (then down)' if down else ''}" if idle_minutes else ""))

    from ..pool import Pool

    from ..concurrency import Worker

    # task slots for the jobs that run side by side (commands/jobsched.py): threads that wait on a script
    pool = new_kept_pool(Pool, name, task.num_nodes, spec=spec, autostop=idle_minutes, autostop_down=down,
                         provider=provider, worker=Worker(concurrency=JOB_SLOTS))

    async def create() -> None:
        async with pool:
            pass  # started, recorded, its ports opened (on the pool's firewall, this client's address only)

    bridge.run(create)
    if pool.named.opened:
        _say(err, f"pool {name}: opened {', '.join(pool.named.opened)}")


def _queue(task: Task, name: str, *, setup: bool) -> jobq.Job:
    return _submit(task, name, _steps(task, name, _provider_of(name), setup=setup), (task_env(task), task.secret_env()),
                   setup=setup)


def _steps(task: Task, name: str, provider: Provider, *, setup: bool) -> TaskSteps:
    """The job's steps, packed here (a workdir too large or a mount that does not exist raises)."""
    return task_steps(task, provider, work_id=name, task_id=f"skyhive-{name}-{time.strftime('%Y-%m-%d-%H-%M-%S')}",
                      setup=setup)


def _submit(task: Task, name: str, steps: TaskSteps, env: tuple[dict[str, str], dict[str, str]], *,
            setup: bool) -> jobq.Job:
    import pickle

    res = task.resources
    gpus = res.accelerator_share or (float(res.accelerator_count) if res.accelerator else 0.0)
    demand = {k: v for k, v in (("gpus", gpus), ("cpus", res.cpus), ("memory_gb", res.memory)) if v}
    return jobq.submit(name, job_name=task.name or "task", steps=pickle.dumps(steps), with_setup=setup,
                       env=env[0], secrets=env[1], setup_only=task.run is None, demand=demand)


def _after_submit(name: str, job: jobq.Job, detach_run: bool, out: TextIO, err: TextIO) -> int:
    ensure_agent(name)
    if job.id < 0:  # setup only: SkyPilot gives it no job id, nor does the queue's listing
        _say(err, f"setup of {job.name} queued on pool {name} (the task has no `run`: no job id)")
    else:
        _say(err, f"job {job.id} ({job.name}) queued on pool {name}")
    if detach_run and job.id < 0:
        return 0
    if detach_run:
        _say(err, f"`skyhive logs {name} {job.id} --follow` streams it, `skyhive queue {name}` lists the jobs")
        return 0
    try:
        code = follow_job(name, job.id, out)
        _let_go(name, job.id)
        return code
    except KeyboardInterrupt:
        _say(err, f"stopped following; job {job.id} goes on (`skyhive cancel {name} {job.id}` stops it)")
        return 130


def _let_go(name: str, job_id: int) -> None:
    """After the followed job `job_id` ended: wait (at most `LET_GO_WAIT` s) for the pool's agent to leave the
    pool unless another job keeps it busy, so that what the user does next (`Pool.attach(name)`, a script's
    `with`) finds the pool free — the agent detaches a moment after its last job's end, and an attach meanwhile
    was refused with `PoolInUse` naming the agent."""
    agent = jobq.agent_pid(name)
    deadline = time.monotonic() + LET_GO_WAIT
    while agent is not None and alive(agent) and time.monotonic() < deadline:
        if any(j.state in (jobq.PENDING, jobq.RUNNING) and j.id != job_id for j in jobq.list_jobs(name, setup_only=True)):
            return  # (the agent stays for those)
        time.sleep(FOLLOW_POLL)


def exec_task(task: Task, name: str, *, detach_run: bool = False, out: TextIO | None = None,
              err: TextIO | None = None) -> int:
    """`skyhive exec NAME TASK`: queue the task's `run` (no setup) on the running pool `name`; the
    job's exit code unless `detach_run`. Raises `PoolNotFound`/`PoolGone` naming the pool."""
    out, err = out or sys.stdout, err or sys.stderr
    _require_keepable(task, f"exec {name}")
    kept = KeptPool.load(name)
    rec = kept.rec
    live, unreachable, _ = kept.live()
    if unreachable and len(live) < len(rec.workers) and not kept.here and not rec.stopped:
        from ..clusters.hostkeys import not_reached  # (a host-key change, or hosts that do not answer: said so)

        raise not_reached(rec, unreachable, command=f"exec {name}")
    if not rec.workers or len(live) < len(rec.workers):
        raise PoolGone(f"pool {name!r} is not running (its workers are gone): `skyhive launch -c {name} TASK.yaml` "
                       f"starts it again")
    # fewer nodes than the pool has: the job runs on the first N (`TaskSteps.num_nodes`), as SkyPilot's
    # exec places it; more is an error naming both counts
    if task.num_nodes > rec.nodes:
        raise LaunchError(f"the task asks for {task.num_nodes} nodes; pool {name!r} has {rec.nodes} (a job runs "
                          f"on at most every node of its pool: `--num-nodes {rec.nodes}` or fewer, or another pool)")
    from ..commands.resources import provider_for

    provider_for(task)  # what the pool's provider cannot honour (--use-spot, --region, -t, ...) is refused, not ignored
    return _after_submit(name, _queue(task, name, setup=False), detach_run, out, err)


def follow_job(name: str, job_id: int, out: TextIO, *, follow: bool = True,
               sleep: Callable[[float], None] = time.sleep) -> int:
    """Copy job `job_id`'s log to `out` (with `follow`, until the job ends); the job's exit code as
    SkyPilot gives it (`exitcodes`: 0, 100 failed, 103 cancelled; 0 while it still runs without `follow`)."""
    path = jobq.log_path(name, job_id)
    offset = 0
    while True:
        job = jobq.load_job(name, job_id)  # read before the log: what the log holds then is complete
        with contextlib.suppress(FileNotFoundError), open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
            offset += len(data)
            if data:
                out.write(data.decode(errors="replace"))
                out.flush()
        if job.state in jobq.FINISHED:
            from ..commands.exitcodes import of_state

            return of_state(job.state)
        if not follow:
            return 0
        if job.state == jobq.RUNNING and job.agent_pid and not alive(job.agent_pid):
            out.flush()
            raise RuntimeError(f"pool {name!r}: the agent running job {job_id} (pid {job.agent_pid}) is gone")
        sleep(FOLLOW_POLL)


# ---- down ------------------------------------------------------------------------------------------


def down_cluster(name: str, *, err: TextIO | None = None, quiet: bool = False, force: bool = False,
                 accept_host_keys: Collection[str] = (), ask: Callable[[str], str] | None = None) -> int:
    """`skyhive down NAME`: stop the pool's agent, watchdog and workers (and everything their jobs
    started), record the pool stopped in its log, forget it. Returns how many processes were ended.
    Raises `PoolNotFound` naming the pool when there is no such named pool.

    An SSH pool whose host shows another key than the recorded one is refused (`SSHError`), unless
    `force`: then each such host is named with both fingerprints (a warning, always) and cleaned up as
    the user chooses by fingerprint — `accept_host_keys`, or `ask` (a terminal's prompt) — see
    `clusters/hostkeys.py`."""
    err = err or sys.stderr
    if records.load(name).leaking:  # its processes were stopped by the `down` that left it leaking
        return _finish_leaking(name, err=err, quiet=quiet)
    from ..clusters.stop import stopped_by_shutdown

    stopped_by_shutdown(records.load(name))  # instances that stopped themselves: nothing to reach on them
    try:
        ended = stop_pool(name, why=f"skyhive down {name}")
    except SSHError as exc:
        rec = records.load(name)
        if KeptPool(rec).here:
            raise
        from ..clusters.hostkeys import changed_host_keys, decide

        changed = changed_host_keys(rec)
        if not changed:
            raise
        if not force:
            raise SSHError(f"{exc}. " + "; ".join(c.describe() for c in changed) + f": if that is expected (the "
                           f"host was reinstalled or replaced), `skyhive down --force {name}` lets you choose by "
                           f"fingerprint", host=changed[0].host) from None
        choice = decide(changed, accept=set(accept_host_keys), ask=ask, warn=lambda text: _say(err, text), pool=name)
        forgotten = ", ".join(c.host for c in changed if c.node in choice.forget)
        ended = stop_pool(name, why=f"skyhive down --force {name}" + (
            f" after host-key changes; not stopped on {forgotten} (its machine is gone)" if forgotten else
            " after host-key changes the user confirmed"), host_keys=choice.pin, skip=choice.forget)
    # a cloud pool: its instances terminated (by id) before it is forgotten (TeardownIncomplete: the record
    # kept, marked leaking)
    ended += len(KeptPool.load(name).terminate_machines(why=f"skyhive down {name}"))
    records.remove(name)
    if not quiet:
        _say(err, f"pool {name}: down ({ended} process{'es' if ended != 1 else ''} ended)")
    return ended


def _finish_leaking(name: str, *, err: TextIO, quiet: bool) -> int:
    """`down` of a cloud pool a former `down` left leaking: terminate its instances and delete its
    security group and key pair again (`TeardownIncomplete` while the provider still fails: the record
    stays); once the provider confirms, the pool's log says stopped and the record is forgotten.
    `--force` changes nothing here: instances that may still run are never forgotten."""
    kept = KeptPool.load(name)
    # its log said leaking: now stopped
    ids = kept.terminate_machines(why=f"skyhive down {name}: the provider confirmed {', '.join(kept.rec.leaking)} gone")
    records.remove(name)
    if not quiet:
        _say(err, f"pool {name}: down (instances {', '.join(ids)} terminated)")
    return 0


# ---- status ----------------------------------------------------------------------------------------


def status_rows(now: float | None = None, names: Sequence[str] = ()) -> list[dict[str, object]]:
    """One row per named pool (only `names` when given: raises `PoolNotFound` for one that is not a
    named pool): name, nodes, resources, state, idle time, autostop, jobs."""
    now = now or time.time()
    rows = []
    known = records.names()
    missing = [n for n in names if n not in known]
    if missing:
        raise PoolNotFound(f"no named pool {', '.join(missing)} (`skyhive status` lists them)")
    for name in names or known:
        try:
            rec = records.load(name)
        except (PoolNotFound, ValueError):
            continue
        unreachable: list[str] = []
        if not rec.leaking:  # its instances may have stopped themselves (autostop on them)
            from ..clusters.stop import stopped_by_shutdown

            rec = stopped_by_shutdown(rec)
        kept = KeptPool(rec)
        if rec.leaking:  # its teardown was not confirmed: shown until `skyhive down NAME` finishes it
            rows.append(_leaking_row(rec))
            continue
        live: list[records.WorkerEntry]
        if not kept.here and kept.machines_stopped:  # its instances are stopped: no one to ask
            live = []
        elif not kept.here:  # asked on its nodes; a node's watchdog may have stopped it (autostop)
            live, unreachable, autostopped = kept.support.live(rec)
            if autostopped and not live and not unreachable and not rec.autostop_down and kept.stop_machines():
                # the instances did not shut down: stopped here
                rec = dataclasses.replace(rec, stopped="autostop", watchdog_pid=0)
                records.save(rec)
                kept = KeptPool(rec)
                autostopped = False
            if autostopped and not live and not unreachable:
                if not rec.stopped:  # (once: the first `status` that finds the pool stopped there)
                    _keep_hook_report(rec, kept.support.autostop_report(rec))
                if rec.autostop_down or kept.machines:  # autodown (a cloud pool's always): forgotten here
                    try:
                        down_cluster(name, quiet=True)
                    except TeardownIncomplete:  # the record kept, marked leaking (and logged)
                        rows.append(_leaking_row(records.load(name)))
                    continue
                if not rec.stopped:
                    rec = dataclasses.replace(rec, stopped="autostop")
                    records.save(rec)
        else:
            live = live_workers(rec)
        jobq.reap_orphans(name)
        all_jobs = jobq.list_jobs(name, setup_only=True)
        running = [j for j in all_jobs if j.state == jobq.RUNNING]
        pending = [j for j in all_jobs if j.state == jobq.PENDING]
        if not rec.workers:
            state = "INIT (being created, or its client died: `skyhive down NAME` cleans up)"
        elif unreachable and len(live) < len(rec.workers):
            state = f"UNKNOWN ({len(unreachable)} host{'s' if len(unreachable) != 1 else ''} unreachable)"
        elif len(live) == len(rec.workers) and rec.workers:
            state = "UP"
        elif rec.stopped:
            state = f"STOPPED ({rec.stopped})"
        elif not live:
            state = "STOPPED (workers gone)"
        else:
            state = f"DEGRADED ({len(rec.workers) - len(live)} of {len(rec.workers)} workers gone)"
        last = max([j.ended or 0.0 for j in all_jobs] + [rec.created])
        idle = "-" if running or pending or state != "UP" else _age(now - last)
        autostop = "-" if rec.autostop_minutes is None else f"{rec.autostop_minutes:g} min" + (
            " (down)" if rec.autostop_down else "")
        rows.append({"name": name, "nodes": rec.nodes, "where": kept.where(),
                     "resources": str(rec.spec.get("resources") or "-"),
                     "state": state, "idle": idle, "autostop": autostop,
                     "jobs": f"{len(running)} running, {len(pending)} pending",
                     "workers": [{"node": w.node, "rank": w.rank, "pid": w.pid} for w in rec.workers]})
    return rows


def _keep_hook_report(rec: records.ClusterRecord, report: str) -> None:
    """What the autostop hook did on the pool's head node (its exit status and output, from the node's
    autostop mark), logged and kept in the pool's `autostop-hook.log` (kept while the pool is: an autodown
    pool's goes with it)."""
    if not report:
        return
    log.info("pool %s: autostop hook on its head node: %s", rec.name, report)
    path = records.cluster_dir(rec.name) / "autostop-hook.log"
    if path.parent.is_dir() and not path.exists():  # (once: later `status` calls find the same mark)
        path.write_text(report + "\n")
        path.chmod(0o600)


def _leaking_row(rec: records.ClusterRecord) -> dict[str, object]:
    return {"name": rec.name, "nodes": rec.nodes, "where": KeptPool(rec).where(),
            "resources": str(rec.spec.get("resources") or "-"),
            "state": f"LEAKING: {', '.join(rec.leaking)} (`skyhive down {rec.name}`)", "idle": "-",
            "autostop": "-", "jobs": "-", "workers": []}


def print_status(out: TextIO | None = None, *, names: Sequence[str] = (), as_json: bool = False) -> int:
    """The named pools (only `names` when given) as a table, or one JSON object per pool."""
    out = out or sys.stdout
    rows = status_rows(names=names)
    if as_json:
        for row in rows:
            out.write(json.dumps(row) + "\n")
        return 0
    if not rows:
        out.write("no named pools (`skyhive launch -c NAME TASK.yaml` creates one)\n")
        return 0
    columns = ("name", "nodes", "where", "resources", "state", "idle", "autostop", "jobs")
    table = [[str(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(columns)]
    out.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    for t in table:
        out.write("  ".join(v.ljust(w) for v, w in zip(t, widths)).rstrip() + "\n")
    return 0


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"

