"""A managed job's controller: runs the job to its end without the client, recovering lost nodes.

    python -m skyhive.runtime.managed.controller JOB_ID

One controller per job, a detached process of this machine (its own session, no terminal, like a
named pool's agent: `commands/agent.py`), holding the job's `controller.lock`. It folds the job's
events (`store.py`) and runs attempts until one ends the job:

- each attempt is a fresh pool (`<name>-job<ID>-<attempt>`) running the task's steps (`run_steps`:
  workdir, file mounts, setup, run) with `SKYHIVE_CHECKPOINT_DIR` (the job's checkpoint folder, the
  same across attempts), `SKYHIVE_JOB_ID` and one `SKYPILOT_TASK_ID` for every attempt;
- a node lost (its worker died, its host unreachable: `NodeExit.lost`; its machine gone in the
  provider's own listing: `Provider.machines_gone`, polled; an interruption notice from the node:
  `onnode/interruption.py`) → the pool is torn down, what it left on the machines swept
  (`Provider.down`), and a new attempt starts on fresh nodes with the lost node's place tried last
  (`Provider.avoiding`: the SSH host, the cloud zone) — a recovery, not counted against
  `max_restarts_on_errors`;
- the program failing (non-zero exit) → a new attempt while `max_restarts_on_errors` allows, else
  FAILED;
- `skyhive jobs cancel` (a `cancel` event) → the attempt's commands are stopped, its pool torn down,
  CANCELLED;
- at the end, every pool of the job is swept once more; what could not be finished is a `leaked` event.

Restarted after dying (`ensure_controller` on any `jobs` command, or by hand), it goes on from the
events: the dead controller's pool went with it (Local workers exit with their client; elsewhere it is
swept first), so a new attempt starts. The lock makes sure only one controller runs a job.
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
import warnings
from typing import Any

import anyio

from ...providers.accelerators import AcceleratorWarning
from ..commands.agent import _JobLog
from ..clusters.procs import lock_holder
from ..commands.steps import NodeExit, run_steps
from ..onnode import interruption
from . import store

log = logging.getLogger("skyhive.managed")

__all__ = ["ensure_controller", "controller_pid", "main"]

_POLL = 0.3  # seconds between looks for a cancel request
_NOTICE_GRACE = 30.0  # seconds a program has after an interruption notice (SKYHIVE_JOBS_NOTICE_GRACE)
_MACHINE_POLL = 5.0  # seconds between looks at the attempt's machines (SKYHIVE_JOBS_MACHINE_POLL)
_SWEEP_TIMEOUT = 120.0  # one pool's sweep of the machines at most
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


def _notice_text(notice: dict[str, Any]) -> str:
    return (f"interruption notice: {notice.get('action', '?')} at {notice.get('time', '?')}")


def _notice_grace() -> float:
    """Seconds a program is given after its node's interruption notice before the attempt is stopped
    (SKYHIVE_JOBS_NOTICE_GRACE, default 30: EC2 gives two minutes, the new attempt needs the rest)."""
    try:
        return max(0.0, float(os.environ.get("SKYHIVE_JOBS_NOTICE_GRACE", _NOTICE_GRACE)))
    except ValueError:
        return _NOTICE_GRACE


async def _copy_and_watch(job_id: int, stream: Any, out: _JobLog, notices: dict[int, dict[str, Any]]) -> None:
    """The pool's output into the job's log; a node's interruption notice line (`interruption.MARK`)
    noted in `notices` (node -> the notice) as it passes, and said in the log and the events."""
    async with stream:
        async for rec in stream:
            if interruption.MARK in rec.text and rec.node not in notices:
                raw = rec.text.split(interruption.MARK, 1)[1].splitlines()[0]
                try:
                    notice = json.loads(raw)
                except ValueError:
                    notice = {"action": raw.strip()}
                notices[rec.node] = notice if isinstance(notice, dict) else {"action": str(notice)}
                out.note(f"node {rec.node}: {_notice_text(notices[rec.node])}: the attempt ends in "
                         f"{_notice_grace():g} s, or when the program exits, and is recovered elsewhere")
                store.append(job_id, "notice", node=rec.node, notice=notices[rec.node])
            out.write(rec.node, rec.local_rank, rec.stream, rec.text)


async def _watch_notices(notices: dict[int, dict[str, Any]], gone: dict[int, str], scope: anyio.CancelScope) -> None:
    """After a node's interruption notice, the program's grace to checkpoint (it finds the notice in
    `$SKYHIVE_INTERRUPTION_NOTICE`); then the attempt is stopped as a lost node — before the cloud
    takes the machine."""
    while not notices:
        await anyio.sleep(0.1)
    node = min(notices)
    text = _notice_text(notices[node])
    await anyio.sleep(_notice_grace())
    gone[node] = text
    scope.cancel()


def _pool_settings() -> dict[str, float]:
    """The attempts' pool settings from the controller's environment: SKYHIVE_JOBS_HEARTBEAT_TIMEOUT, how
    long a silent node (its host cut off) is given before it counts as lost (default: the pool's)."""
    raw = os.environ.get("SKYHIVE_JOBS_HEARTBEAT_TIMEOUT")
    if not raw:
        return {}
    try:
        return {"heartbeat_timeout": float(raw)}
    except ValueError:
        log.warning("SKYHIVE_JOBS_HEARTBEAT_TIMEOUT=%r is not a number of seconds: ignored", raw)
        return {}


def _machine_poll() -> float:
    """Seconds between two looks at the attempt's machines (SKYHIVE_JOBS_MACHINE_POLL, default 5)."""
    try:
        return max(0.05, float(os.environ.get("SKYHIVE_JOBS_MACHINE_POLL", _MACHINE_POLL)))
    except ValueError:
        return _MACHINE_POLL


async def _watch_machines(provider: Any, rt: Any, gone: dict[int, str], scope: anyio.CancelScope) -> None:
    """Until cancelled: ask the provider whether it took one of the attempt's machines (a cloud instance
    terminated or stopped under the job: `Provider.machines_gone`); if so, note it in `gone` and stop the
    attempt (its steps, then its pool) at once rather than when the worker's link times out."""
    handles = [n.handle for n in rt.nodes if n.handle is not None]
    while True:
        await anyio.sleep(_machine_poll())
        try:
            found = await provider.machines_gone(handles)
        except Exception as exc:  # noqa: BLE001 - the provider's API down for a moment: the next look
            log.warning("looking at the attempt's machines failed: %s", exc)
            continue
        if found:
            gone.update({n: f"{why} (the provider took the machine)" for n, why in found.items()})
            scope.cancel()
            return


async def _watch_cancel(job_id: int, scope: anyio.CancelScope) -> None:
    while not _cancelled(job_id):
        await anyio.sleep(_POLL)
    scope.cancel()


def _checkpoint_env(job_id: int, task: Any, provider: Any) -> tuple[str, str]:
    """`SKYHIVE_CHECKPOINT_DIR` of every attempt, and what it is (for the log): this machine's folder on
    Local (its nodes are here); on another provider the task's checkpoint bucket mount (the folder
    `<mount>/<name>-job<ID>` there, which a fresh node fills from the bucket); without one a folder in
    the job's working directory on the node, which does not survive the node."""
    from ...providers.local import Local

    if isinstance(provider, Local):
        return str(store.checkpoint_dir(job_id)), "this machine's folder"
    if task.bucket_mounts:
        from ..storage.plugin import checkpoint_path

        ckpt = checkpoint_path(task.bucket_mounts, f"{task.name or 'job'}-job{job_id}")
        if ckpt is not None:
            return ckpt, "the checkpoint bucket mount"
    return (f"~/.skyhive/work/managed-job{job_id}/checkpoints",
            "a folder on the node: it does not survive the node (mount a bucket with mode MOUNT_CACHED to keep "
            "checkpoints across recoveries)")


async def _sweep(provider: Any, pool_ids: list[str]) -> list[str]:
    """What is left of these pools on the provider's machines stopped and removed (`Provider.down`: an
    SSH host's processes and sockets of the pool, a cloud's instances by tag); the pools it could not
    finish, each with why (a host still unreachable, an instance that would not go)."""
    if isinstance(provider, _local()):
        return []
    left = []
    for pool_id in pool_ids:
        try:
            with anyio.fail_after(_SWEEP_TIMEOUT):
                await provider.down(pool_id)
        except Exception as exc:  # noqa: BLE001 - said in the log and the job's detail; `skyhive down` can finish it
            left.append(f"{pool_id}: {type(exc).__name__}: {exc}")
    return left


class _Outcome:
    """One attempt's end: "ok" | "lost" | "error" | "cancelled" | "broken", the failure, why, the lost nodes'
    handles (what the next attempt avoids)."""

    def __init__(self, kind: str, failed: NodeExit | None = None, why: str = "", lost: tuple[Any, ...] = ()) -> None:
        self.kind, self.failed, self.why, self.lost = kind, failed, why, lost


async def _attempt(job_id: int, spec: dict[str, Any], attempt: int, out: _JobLog, avoid: list[Any]) -> _Outcome:
    """One attempt on a fresh pool (`avoid`: nodes lost before, whose places are taken last)."""
    from ...plugins.image import Image
    from ...errors import TeardownIncomplete
    from ..commands.launch import task_steps
    from ..commands.plan import plan_launch
    from ..commands.resources import cluster_spec
    from ..onnode import nodecmd
    from ..pool import Pool

    task = spec["task"]
    provider = spec.get("provider")
    if provider is None:
        planned = plan_launch(task)
        task, provider = planned.task, planned.provider
    if avoid:
        provider = provider.avoiding(avoid)
    name = task.name or "job"
    pool_id = f"{name}-job{job_id}-{attempt}"
    work_id = _work_id(job_id)
    steps = task_steps(task, provider, work_id=work_id, task_id=spec["task_id"])
    cspec = cluster_spec(task, provider)
    allocation = None if cspec.spot is None else ("spot" if cspec.spot else "on-demand")
    ckpt, what = _checkpoint_env(job_id, task, provider)
    env = {"SKYHIVE_CHECKPOINT_DIR": ckpt, **task.env(), "SKYHIVE_JOB_ID": str(job_id)}
    if provider.interruption_notices:  # the nodes watch their cloud's notice while `run` runs
        env[interruption.WATCH_ENV] = provider.interruption_notices
    if env["SKYHIVE_CHECKPOINT_DIR"] != ckpt:  # the task's own (a shared file system): kept
        ckpt, what = env["SKYHIVE_CHECKPOINT_DIR"], "the task's own"
    secrets = task.secret_env()
    image = Image(secrets=secrets) if secrets else None  # to redact them from the log; the scripts get them below
    store.append(job_id, "attempt", attempt=attempt, pool=pool_id, pid=os.getpid())
    if attempt == 1:
        out.note(f"checkpoints: SKYHIVE_CHECKPOINT_DIR={ckpt} ({what})")
    failed: NodeExit | None = None
    lost: tuple[Any, ...] = ()
    cancelled = False
    leak = ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AcceleratorWarning)
        async with anyio.create_task_group() as copier:
            try:
                async with Pool(provider=provider, nodes=task.num_nodes, name=pool_id, output=None, image=image,
                                accelerator=cspec.accelerator, cpus=cspec.cpus, memory_gb=cspec.memory_gb,
                                allocation=allocation, **_pool_settings()) as pool:
                    rt = pool._runtime
                    out.prefix = task.num_nodes > 1
                    notices: dict[int, dict[str, Any]] = {}
                    gone: dict[int, str] = {}
                    copier.start_soon(_copy_and_watch, job_id, pool.output(), out, notices)
                    where = ", ".join(str(n.handle.provider_id) for n in rt.nodes if n.handle is not None)
                    store.append(job_id, "running", attempt=attempt, pool=pool_id, nodes=where)
                    out.note(f"attempt {attempt} running on {where or provider.name}")
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(_watch_cancel, job_id, scope)
                            tg.start_soon(_watch_machines, provider, rt, gone, scope)
                            tg.start_soon(_watch_notices, notices, gone, scope)
                            failed = await run_steps(rt, steps, task_env={**env, **secrets})
                            tg.cancel_scope.cancel()
                    cancelled = scope.cancelled_caught and not gone
                    if gone:  # the provider took a machine: lost, whatever the steps said while stopped
                        node = min(gone)
                        failed = NodeExit(node=node, phase="run", code=1, lost=True,
                                          detail=gone[node])
                    if failed is not None and not failed.lost and failed.code > interruption.AFTER_NOTICE:
                        # the program failed after its node's interruption notice: not its own fault
                        code = failed.code - interruption.AFTER_NOTICE
                        with anyio.move_on_after(10):  # its notice line, still on its way through the output
                            while failed.node not in notices:
                                await anyio.sleep(0.05)
                        notice = notices.get(failed.node) or {"action": "(notice line not read yet)"}
                        failed = NodeExit(node=failed.node, phase=failed.phase, code=code, lost=True,
                                          detail=f"{_notice_text(notice)}; the program then exited {code}")
                    if failed is not None and failed.lost:
                        lost = tuple(rt.nodes[i].handle for i in (sorted(gone) or [failed.node])
                                     if rt.nodes[i].handle is not None)
                    if not isinstance(provider, _local()) and not lost:  # the job's working directory removed
                        # (after a lost node the job's last sweep removes it: nothing waits on a silent node)
                        with anyio.move_on_after(30, shield=True):
                            try:
                                await pool.broadcast(nodecmd.remove, work_id)
                            except Exception:  # noqa: BLE001 - a lost node keeps its copy: the sweep removes it
                                pass
            except TeardownIncomplete as exc:  # a node that could not be stopped (its host unreachable): swept later
                leak = f"the pool's teardown was incomplete: {exc}"
    if cancelled:
        return _Outcome("cancelled", why="cancelled while running")
    if leak and failed is None:
        failed = NodeExit(node=0, phase="teardown", code=1, detail=leak, lost=True)
    if failed is None:
        return _Outcome("ok")
    why = f"{failed.phase} failed on node {failed.node}: {failed.detail or f'exit code {failed.code}'}"
    return _Outcome("lost" if failed.lost else "error", failed, why, lost)


def _work_id(job_id: int) -> str:
    """The job's working directory's name on its nodes, the same for every attempt."""
    return f"managed-job{job_id}"


def _local() -> type:
    from ...providers.local import Local

    return Local


def _rebuilt(saved: Any) -> Any:
    """The provider `commands._saved` kept with the job: itself, or rebuilt from its class and description."""
    if not isinstance(saved, dict):
        return saved
    import importlib

    module, _, qualname = str(saved["class"]).partition(":")
    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    return cls.from_description(saved["description"])


def _provider_of(spec: dict[str, Any]) -> Any:
    """The job's provider for its sweeps: the one given, else the task's (planned once)."""
    if spec.get("provider") is not None:
        return spec["provider"]
    if spec.get("planned") is None:
        from ..commands.plan import plan_launch

        spec["planned"] = plan_launch(spec["task"]).provider
    return spec["planned"]


def _run(job_id: int) -> None:
    """Attempts until the job ends (its final event appended), then what is left of its pools swept."""
    spec = pickle.loads((store.job_dir(job_id) / "task.pkl").read_bytes())  # noqa: S301 - our own 0600 file
    spec["provider"] = _rebuilt(spec.get("provider"))
    avoid: list[Any] = []  # nodes lost so far: the next attempts take their places last
    with open(store.log_path(job_id), "a", encoding="utf-8") as fh:
        out = _JobLog(fh, prefix=False)
        try:
            _attempts(job_id, spec, out, avoid)
        finally:
            st = store.load(job_id)
            if st.state in store.FINISHED and st.pools:
                try:
                    provider = _provider_of(spec)
                    # machines that outlive the job (SSH hosts) also keep its working directory, which
                    # a lost node could not remove: swept as what it is named after (nodecmd.work_root)
                    extra = [_work_id(job_id)] if provider.fixed_machines else []
                    left = anyio.run(_sweep, provider, st.pools + extra)
                except Exception as exc:  # noqa: BLE001 - the provider could not even be built
                    left = [f"{type(exc).__name__}: {exc}"]
                if left:
                    out.note("could not clean up after the job (`skyhive down POOL` finishes it): " + "; ".join(left))
                    store.append(job_id, "leaked", pools=left)


def _attempts(job_id: int, spec: dict[str, Any], out: _JobLog, avoid: list[Any]) -> None:
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
            left = anyio.run(_sweep, _provider_of(spec), st.pools[-1:])  # what it left on the machines
            if left:
                out.note("could not clean up the dead controller's pool: " + "; ".join(left))
        elif attempt > 1:
            out.note(f"recovery: starting attempt {attempt} on fresh nodes")
        try:
            res = anyio.run(_attempt, job_id, spec, attempt, out, avoid)
        except Exception as exc:  # noqa: BLE001 - provisioning or a broken task: the job fails, saying so
            while isinstance(exc, ExceptionGroup):
                exc = exc.exceptions[0]
            res = _Outcome("broken", why=f"{type(exc).__name__}: {exc}")
        out.flush_partial()
        if res.kind == "ok":
            out.note(f"job {job_id} succeeded (attempt {attempt})")
            store.append(job_id, "succeeded", attempt=attempt)
            return
        if res.kind == "cancelled":
            out.note(f"job {job_id} cancelled while running")
            store.append(job_id, "cancelled", detail=res.why)
            return
        if res.kind == "lost":
            places = [str(h.provider_id) for h in res.lost]
            out.note(f"node lost ({res.why}): recovering (not counted against max_restarts_on_errors)"
                     + (f"; {', '.join(places)} is tried last" if places else ""))
            avoid.extend(res.lost)
            store.append(job_id, "lost", attempt=attempt, detail=res.why, places=places)
            # the lost attempt's pool swept before the next starts: no second copy of the program
            # running on a node that is only unreachable from here
            left = anyio.run(_sweep, _provider_of(spec), store.load(job_id).pools[-1:])
            if left:
                out.note("could not clean up the lost attempt's pool yet (retried when the job ends): " + "; ".join(left))
            continue
        st = store.load(job_id)
        code = res.failed.code if res.failed else 1
        if res.kind == "error" and st.restarts_on_errors < st.max_restarts_on_errors:
            out.note(f"{res.why}: restarting ({st.restarts_on_errors + 1} of max_restarts_on_errors="
                     f"{st.max_restarts_on_errors})")
            store.append(job_id, "error", attempt=attempt, detail=res.why, code=code)
            continue
        out.note(f"job {job_id} failed: {res.why}")
        store.append(job_id, "failed", attempt=attempt, detail=res.why, code=code)
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

            shutil.rmtree(nodecmd.work_root(_work_id(job_id)), ignore_errors=True)
        os.ftruncate(fd, 0)
    return 0


if __name__ == "__main__":
    os._exit(main())
