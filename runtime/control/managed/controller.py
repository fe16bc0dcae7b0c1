"""A managed job's controller: runs the job to its end without the client, recovering lost nodes.

    python -m skyhive.runtime.control.managed.controller JOB_ID

One controller per job, a detached process of this machine (its own session, no terminal, like a
named pool's agent: `control/agent.py`), holding the job's `controller.lock`. It folds the job's
events (`store.py`) and runs attempts until one ends the job:

- each attempt is a fresh pool (`<name>-job<ID>-<attempt>`) running the job's work (work.py: a task's
  steps — workdir, file mounts, setup, run —; function.py: a `@sky.compute` call) with `SKYHIVE_CHECKPOINT_DIR` (the job's checkpoint folder, the
  same across attempts), `SKYHIVE_JOB_ID` and one `SKYPILOT_TASK_ID` for every attempt;
- a node of a multi-node task lost (see below for how a loss is seen) → that node alone is replaced in
  the attempt's pool and the steps run again on every node (inplace.py); when it cannot be, as for
  one node:
- a node lost (its worker died, its host unreachable: `NodeExit.lost`; its machine gone in the
  provider's own listing: `Provider.machines_gone`, polled; an interruption notice from the node:
  `onnode/interruption.py`, the next attempt provisioned at the notice) → the pool is torn down, what it left on the machines swept
  (`Provider.down`; then a `stopped` event), and meanwhile a new attempt is provisioned on fresh nodes
  with the lost node's place tried last (`Provider.avoiding`: the SSH host, the cloud zone, the
  fallback's region); its work starts only once the lost attempt is stopped — a recovery, not counted
  against `max_restarts_on_errors`; after `max_recoveries` of them (`store.DEFAULT_MAX_RECOVERIES`) a lost
  node fails the job instead, naming the limit;
- the program failing (non-zero exit) → a new attempt while `max_restarts_on_errors` allows, else
  FAILED;
- `skyhive jobs cancel` (a `cancel` event) → the attempt's commands are stopped, its pool torn down,
  CANCELLED;
- at the end the outcome is an `ending` event (CLEANING), every pool of the job is swept once more, and
  only then the final event is written; a sweep that could not finish is a `leaked` event instead
  (LEAKED: `jobs cancel` starts the controller again, which sweeps again).

Restarted after dying (`ensure_controller` on any `jobs` command, or by hand), it goes on from the
events: the dead controller's pool went with it (Local workers exit with their client; elsewhere it is
swept first), so a new attempt starts. The lock makes sure only one controller runs a job.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import warnings
from typing import Any

import anyio

from ....providers.accelerators import AcceleratorWarning
from ....providers.features import Feature
from ..joblog import JobLog
from ...common import bridge, daemon
from ..steps import NodeExit
from ...onnode import interruption
from . import store
from .function import FunctionWork
from .events import (AttemptStarted, CancelAsked, ControllerStarted, Ended, Ending, ErrorExit, Leaked, Lost, Running,
                     Stopped, Unneeded, Waiting)
from .outcome import Outcome, Stop
from .policy import Action, RestartPolicy
from .inplace import SWEEP_TIMEOUT, replace_in_place, why_failed
from .watch import AFTER_NOTICE_WAIT, copy_and_watch, notice_text, watch_cancel, watch_machines, watch_notices
from .work import TaskWork, Work, work_id

log = logging.getLogger("skyhive.managed")

__all__ = ["ensure_controller", "controller_pid", "main"]

_MODULE = "skyhive.runtime.control.managed.controller"


def controller_pid(job_id: int) -> int | None:
    """The pid of the job's running controller, or None (-1: one is starting or leaving)."""
    return daemon.holder(str(store.lock_path(job_id)))


def ensure_controller(job_id: int) -> int | None:
    """Start the job's controller unless it runs or the job has ended; its pid (None: the job ended)."""
    if store.load(job_id).state in store.FINISHED:
        return None
    return daemon.ensure(_MODULE, str(job_id), lock_path=str(store.lock_path(job_id)),
                         what=f"managed job {job_id}: its controller")


def _pool_settings() -> dict[str, Any]:
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


async def _sweep(provider: Any, pool_ids: list[str]) -> list[str]:
    """What is left of these pools on the provider's machines stopped and removed (`Provider.down`: an
    SSH host's processes and sockets of the pool, a cloud's instances by tag); the pools it could not
    finish, each with why (a host still unreachable, an instance that would not go)."""
    left = []
    for pool_id in pool_ids:
        try:
            with anyio.fail_after(SWEEP_TIMEOUT):
                await provider.down(pool_id)
        except Exception as exc:  # noqa: BLE001 - said in the log and the job's detail; `skyhive down` can finish it
            left.append(f"{pool_id}: {type(exc).__name__}: {exc}")
    return left


async def _attempt(job_id: int, spec: dict[str, Any], attempt: int, out: JobLog, avoid: list[Any],
                   policy: RestartPolicy, previous: Stop | None = None, on_lost: Any = None) -> Outcome:
    """One attempt on a fresh pool (`avoid`: nodes lost before, whose places are taken last).

    `previous` (a recovery): set once the lost attempt before this one is stopped and swept — this
    attempt's pool is provisioned meanwhile, but its steps (the user's code) start only after it, so two
    copies of the job never run at once; if it ended the job instead (its program finished after an
    interruption notice) this attempt is "unneeded" and runs nothing. `on_lost(outcome)`: called as
    soon as this attempt is known lost — at an interruption notice, before the program's grace; else
    before its pool is torn down — so that the next attempt's provisioning starts beside it."""
    from ....errors import TeardownIncomplete
    from ...pool import Pool

    work = work_for(job_id, spec, avoid, policy)
    provider = work.provider
    pool_id = f"{work.name}-job{job_id}-{attempt}"
    store.record(job_id, AttemptStarted(attempt=attempt, pool=pool_id, pid=os.getpid()))
    if attempt == 1:
        out.note(f"checkpoints: SKYHIVE_CHECKPOINT_DIR={work.checkpoint} ({work.checkpoint_what})")
    failed: NodeExit | None = None
    lost: tuple[Any, ...] = ()
    cancelled = False
    leak = ""
    unneeded: Outcome | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AcceleratorWarning)
        async with anyio.create_task_group() as copier:
            try:
                async with Pool(provider=provider, nodes=work.nodes, name=pool_id, output=None,
                                replace_failed=work.in_place, **work.pool_options(), **_pool_settings()) as pool:
                    driver = pool.driver()
                    out.prefix = work.nodes > 1
                    notices: dict[int, dict[str, Any]] = {}
                    gone: dict[int, str] = {}
                    copier.start_soon(copy_and_watch, job_id, pool.output(), out, notices)
                    where = ", ".join(str(n.handle.provider_id) for n in driver.nodes() if n.handle is not None)
                    store.record(job_id, Running(attempt=attempt, pool=pool_id, nodes=where))
                    out.note(f"attempt {attempt} running on {where or provider.name}")
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(watch_cancel, job_id, scope)
                            tg.start_soon(watch_machines, provider, driver, gone, scope, work.in_place)

                            def noticed(node: int, text: str) -> None:  # the next attempt provisions now
                                handle = driver.node(node).handle
                                if on_lost is not None:
                                    ends = NodeExit(node=node, phase="run", code=1, lost=True, detail=text)
                                    on_lost(Outcome("lost", ends, why_failed(ends), (handle,) if handle is not None else ()))

                            tg.start_soon(watch_notices, notices, gone, scope, driver if work.in_place else None, noticed)
                            if previous is not None and not previous.event.is_set():
                                out.note(f"attempt {attempt} waits for attempt {attempt - 1} to be stopped")
                                await previous.event.wait()
                            if previous is not None and previous.outcome is not None and previous.outcome.kind != "lost":
                                unneeded = previous.outcome  # it ended the job after its notice: nothing to run
                                tg.cancel_scope.cancel()
                            ran_on = [n.handle for n in driver.nodes()]  # (a lost node's replacement may come fast)

                            async def alone(node: int, lost_exit: NodeExit) -> NodeExit | None:
                                """`restart: node`: the lost node replaced and its steps run there alone."""
                                again = await replace_in_place(job_id, attempt, driver, lost_exit, ran_on, notices,
                                                               out, avoid, gang=False)
                                if again is None:
                                    return lost_exit
                                ran_on[node] = driver.node(node).handle
                                return await work.rerun_node(pool, node, on_lost=alone)

                            node_mode = work.in_place and work.restart_node
                            failed = (None if unneeded is not None
                                      else await work.run(pool, on_lost=alone if node_mode else None))
                            while work.in_place and not node_mode and failed is not None and not gone:
                                again = await replace_in_place(job_id, attempt, driver, failed, ran_on, notices, out, avoid)
                                if again is None:  # not a lost node, or it could not be replaced
                                    break
                                ran_on = [n.handle for n in driver.nodes()]
                                failed = await work.run(pool, fresh=again)
                            tg.cancel_scope.cancel()
                    cancelled = scope.cancelled_caught and not gone and unneeded is None
                    if gone:  # the provider took a machine: lost, whatever the steps said while stopped
                        node = min(gone)
                        failed = NodeExit(node=node, phase="run", code=1, lost=True,
                                          detail=gone[node])
                    if failed is not None and not failed.lost and failed.code > interruption.AFTER_NOTICE:
                        # the program failed after its node's interruption notice: not its own fault
                        code = failed.code - interruption.AFTER_NOTICE
                        with anyio.move_on_after(AFTER_NOTICE_WAIT):  # its notice line, still on its way through the output
                            while failed.node not in notices:
                                await anyio.sleep(0.05)
                        notice = notices.get(failed.node) or {"action": "(notice line not read yet)"}
                        failed = NodeExit(node=failed.node, phase=failed.phase, code=code, lost=True,
                                          detail=f"{notice_text(notice)}; the program then exited {code}")
                    if failed is not None and failed.lost:
                        lost = tuple(h for i in (sorted(gone) or [failed.node])
                                     if (h := driver.node(i).handle) is not None)
                        if on_lost is not None:  # the next attempt provisions while this pool is torn down
                            on_lost(Outcome("lost", failed, why_failed(failed), lost))
                    if not lost and unneeded is None:
                        await work.finished(pool)
            except TeardownIncomplete as exc:  # a node that could not be stopped (its host unreachable): swept later
                leak = f"the pool's teardown was incomplete: {exc}"
    if unneeded is not None:
        return Outcome("unneeded", why=f"attempt {attempt - 1} ended the job after its interruption notice",
                        previous=unneeded)
    if cancelled:
        return Outcome("cancelled", why="cancelled while running")
    if leak and failed is None:
        failed = NodeExit(node=0, phase="teardown", code=1, detail=leak, lost=True)
    if failed is None:
        return Outcome("ok")
    return Outcome("lost" if failed.lost else "error", failed, why_failed(failed), lost)


def work_for(job_id: int, spec: dict[str, Any], avoid: list[Any], policy: RestartPolicy) -> Work:
    """The attempt's work from the job's saved spec: a `@sky.compute` call (`"call"` in it) or a task
    (its lost node restarted as `policy.restart` says)."""
    return FunctionWork(job_id, spec, avoid) if "call" in spec else TaskWork(job_id, spec, avoid, policy.restart)


def _rebuilt(saved: Any) -> Any:
    """The provider `commands._saved` kept with the job: itself, or rebuilt from its class and description."""
    if not isinstance(saved, dict):
        return saved
    if "fallback" in saved:
        from ....providers.fallback import Fallback

        return Fallback([_rebuilt(p) for p in saved["fallback"]], order=saved.get("order") or "given")
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
        from ...commands.plan import plan_launch

        spec["planned"] = plan_launch(spec["task"]).provider
    return spec["planned"]


def _run(job_id: int) -> None:
    """Attempts until the job's outcome is decided (`ending`), then what is left of its pools swept and
    only then the final event appended (`_clean_up`)."""
    spec = pickle.loads((store.job_dir(job_id) / "task.pkl").read_bytes())  # noqa: S301 - our own 0600 file
    spec["provider"] = _rebuilt(spec.get("provider"))
    avoid: list[Any] = store.load_avoided(job_id)  # nodes lost so far (kept across restarts): taken last
    with store.open_log(job_id) as fh:  # (escapes text naming a non-UTF-8 file)
        out = JobLog(fh, prefix=False)
        try:
            _attempts(job_id, spec, out, avoid)
        except Exception as exc:  # noqa: BLE001 - recorded: the job fails rather than stay RUNNING for ever
            log.exception("managed job %d: the controller failed", job_id)
            if not store.load(job_id).outcome:
                _end(job_id, out, "failed", detail=f"the controller failed: {type(exc).__name__}: {exc}")
        _clean_up(job_id, spec, out)


def _end(job_id: int, out: JobLog, outcome: str, **data: Any) -> None:
    """The job's outcome decided: an `ending` event (state CLEANING); the final one follows the sweep."""
    out.flush_partial()
    store.record(job_id, Ending(outcome=outcome, data=data))


def _clean_up(job_id: int, spec: dict[str, Any], out: JobLog) -> None:
    """Every pool of the job swept (`Provider.down`: machines that outlive the job — SSH hosts — also
    lose its working directory, which a lost node could not remove), its working directory on this
    machine removed (Local nodes'), and then the final event — the job's end recorded once nothing of it
    runs. A sweep that could not finish is a `leaked` event instead (LEAKED: `jobs cancel` sweeps again)."""
    st = store.load(job_id)
    if not st.outcome or st.state in store.FINISHED:
        return
    if st.state == store.LEAKED:  # a sweep again (`jobs cancel`): CLEANING while it runs
        store.record(job_id, Ending(outcome=st.outcome, data=st.ending))
    try:
        provider = _provider_of(spec)
        extra = [work_id(job_id)] if Feature.CREATES_MACHINES not in provider.features else []
        left = bridge.run(_sweep, provider, st.pools + extra) if st.pools else []
    except Exception as exc:  # noqa: BLE001 - the provider could not even be built
        left = [f"{type(exc).__name__}: {exc}"]
    from ...onnode import nodecmd

    try:
        shutil.rmtree(nodecmd.work_root(work_id(job_id)), ignore_errors=False)
    except FileNotFoundError:
        pass
    except OSError as exc:
        left.append(f"{nodecmd.work_root(work_id(job_id))}: {exc.strerror or exc}")
    if left:
        out.note("could not clean up after the job (`skyhive jobs cancel " + str(job_id) + "` sweeps again, "
                 "`skyhive down POOL` finishes a pool): " + "; ".join(left))
        store.record(job_id, Leaked(pools=tuple(left)))
        return
    data = dict(st.ending)
    store.record(job_id, Ended(outcome=st.outcome, detail=str(data.pop("detail", "")), data=data))


def _attempts(job_id: int, spec: dict[str, Any], out: JobLog, avoid: list[Any]) -> None:
    bridge.run(_attempts_async, job_id, spec, out, avoid)


async def _attempts_async(job_id: int, spec: dict[str, Any], out: JobLog, avoid: list[Any]) -> None:
    """Attempts until the job's outcome is decided. A lost attempt is reported before its pool is torn
    down: the next attempt is provisioned while the lost one is stopped and swept (a `stopped` event),
    and runs the steps only after that. Returns once every attempt has stopped."""
    previous: Stop | None = None  # the last lost attempt: set once it is stopped and swept
    full = 0  # attempts in a row that found no capacity anywhere
    policy = RestartPolicy.of(spec, store.load(job_id))  # what follows each attempt (policy.py)
    restarted = True  # the first turn of this controller: an earlier one may have died mid-recovery
    async with anyio.create_task_group() as attempts:
        while True:
            st = store.load(job_id)
            if st.state in store.FINISHED or st.outcome:
                return
            if st.cancel_requested:
                out.note(f"job {job_id} cancelled")
                _end(job_id, out, "cancelled", detail="cancelled")
                return
            attempt = st.attempts + 1
            died = st.attempts and st.state not in (store.RECOVERING, store.PENDING)  # its controller died
            if died and st.recoveries >= policy.max_recoveries:
                return _out_of_recoveries(job_id, out, st, st.attempts, f"the controller of attempt {st.attempts} died")
            if died:
                out.note(f"the controller was restarted (pid {os.getpid()}): attempt {st.attempts} is gone; "
                         f"starting attempt {attempt}")
                store.record(job_id, Lost(detail=f"the controller of attempt {st.attempts} died"))
                left = await _sweep(_provider_of(spec), st.pools[-1:])  # what it left on the machines
                if left:
                    out.note("could not clean up the dead controller's pool: " + "; ".join(left))
            elif attempt > 1:
                if restarted:  # the lost attempt's stop was not seen by this controller: swept first
                    left = await _sweep(_provider_of(spec), st.pools[-1:])
                    if left:
                        out.note("could not clean up the lost attempt's pool: " + "; ".join(left))
                out.note(f"recovery: starting attempt {attempt} on fresh nodes" if st.state != store.PENDING
                         else f"starting attempt {attempt}")
            restarted = False
            decided, stopped = anyio.Event(), Stop()
            box: dict[str, Outcome] = {}

            def report(res: Outcome, box: dict[str, Outcome] = box, decided: anyio.Event = decided) -> None:
                box.setdefault("res", res)
                decided.set()

            attempts.start_soon(_one_attempt, job_id, spec, attempt, out, avoid, previous, report, stopped, policy)
            await decided.wait()
            res = box["res"]
            if res.kind == "unneeded" and res.previous is not None:  # the one before ended the job after all
                out.note(f"attempt {attempt} was not needed: {res.why} ({res.previous.kind})")
                store.record(job_id, Unneeded(attempt=attempt, detail=res.why))
                await stopped.event.wait()
                res, attempt = res.previous, attempt - 1
            st = store.load(job_id)  # (this attempt's recoveries in place counted)
            decision = policy.decide(res, st, full)
            if decision.action is not Action.RECOVER:  # a recovery provisions while the lost attempt stops
                await stopped.event.wait()
            full = full + 1 if decision.action is Action.WAIT else 0
            if decision.action is Action.SUCCEED:
                out.note(f"job {job_id} succeeded (attempt {attempt})")
                _end(job_id, out, "succeeded", attempt=attempt)
                return
            if decision.action is Action.CANCEL:
                out.note(f"job {job_id} cancelled while running")
                _end(job_id, out, "cancelled", detail=decision.why)
                return
            if decision.action is Action.RECOVER:
                places = [str(h.provider_id) for h in res.lost]
                out.note(f"node lost ({res.why}): recovering (not counted against max_restarts_on_errors)"
                         + (f"; {', '.join(places)} is tried last" if places else ""))
                avoid.extend(h for h in res.lost if h not in avoid)
                store.save_avoided(job_id, avoid)
                store.record(job_id, Lost(attempt=attempt, detail=res.why, places=tuple(places)))
                previous = stopped
                continue
            if decision.action is Action.WAIT:  # no room anywhere now: tried again until cancelled
                out.note(f"no capacity for attempt {attempt} ({res.why}): trying again in {decision.delay:g} s "
                         f"(`skyhive jobs cancel {job_id}` gives up)")
                store.record(job_id, Waiting(attempt=attempt, detail=res.why, retry_in=decision.delay))
                with anyio.move_on_after(decision.delay):
                    while not store.load(job_id).cancel_requested:
                        await anyio.sleep(0.3)
                continue
            if decision.action is Action.RESTART:
                out.note(f"{res.why}: restarting ({st.restarts_on_errors + 1} of max_restarts_on_errors="
                         f"{st.max_restarts_on_errors})")
                store.record(job_id, ErrorExit(attempt=attempt, detail=res.why, code=decision.code))
                continue
            if decision.out_of_recoveries:
                return _out_of_recoveries(job_id, out, st, attempt, f"node lost ({res.why})")
            out.note(f"job {job_id} failed: {res.why}")
            _end(job_id, out, "failed", attempt=attempt, detail=res.why, code=decision.code)
            return


def _out_of_recoveries(job_id: int, out: JobLog, st: store.JobState, attempt: int, loss: str) -> None:
    """The job fails: `loss` came after the last recovery its `max_recoveries` allows."""
    why = (f"{loss} after {st.recoveries} recoveries, the job's limit (max_recoveries={st.max_recoveries}: "
           "resources.job_recovery.max_recoveries or SKYHIVE_JOBS_MAX_RECOVERIES)")
    out.note(f"job {job_id} failed: {why}")
    _end(job_id, out, "failed", attempt=attempt, detail=why, code=1)


async def _one_attempt(job_id: int, spec: dict[str, Any], attempt: int, out: JobLog, avoid: list[Any],
                       previous: Stop | None, report: Any, stopped: Stop, policy: RestartPolicy) -> None:
    """An attempt, its outcome `report`ed (a lost one before its teardown), then — lost — its pool swept
    (`Provider.down`: an orphaned program on a node only unreachable from here stopped too); `stopped`
    set once nothing of it runs (what the next attempt's steps wait for)."""
    try:
        try:
            res = await _attempt(job_id, spec, attempt, out, avoid, policy, previous, report)
        except Exception as exc:  # noqa: BLE001 - provisioning or a broken task: the job fails, saying so
            from ....errors import ProvisionError

            while isinstance(exc, ExceptionGroup):
                exc = exc.exceptions[0]
            res = Outcome("broken", why=f"{type(exc).__name__}: {exc}",
                           capacity=isinstance(exc, ProvisionError) and exc.kind == "capacity")
        if previous is not None:  # never stopped before the attempt it replaced
            await previous.event.wait()
        out.flush_partial()
        if res.kind == "lost":
            left = await _sweep(_provider_of(spec), store.load(job_id).pools[attempt - 1:attempt])
            if left:
                out.note("could not clean up the lost attempt's pool yet (retried when the job ends): "
                         + "; ".join(left) + f" -- attempt {attempt + 1} runs anyway: a copy may still run there")
            store.record(job_id, Stopped(attempt=attempt, leaked=tuple(left)))
        stopped.outcome = res
        report(res)
    finally:
        stopped.event.set()


def main(argv: list[str] | None = None) -> int:
    arg = daemon.argument(argv, _MODULE, "JOB_ID", check=str.isdigit)
    if arg is None:
        return 2
    job_id = int(arg)
    store.load(job_id)  # LookupError for a job that does not exist
    # SIGTERM (a shutdown, `jobs cancel` giving up waiting) is a cancel: the attempt's pool is torn down
    # by the usual path rather than left to the provider
    return daemon.serve(str(store.lock_path(job_id)), str(store.job_dir(job_id) / "controller.log"),
                        lambda _: _supervise(job_id), log_name="skyhive-jobs",
                        started=lambda: store.record(job_id, ControllerStarted(pid=os.getpid())),
                        on_term=lambda: store.record(job_id, CancelAsked(reason="SIGTERM")))


def _supervise(job_id: int) -> int:
    """The job run to its end; a controller failing is recorded (never left RUNNING, never shown ended
    uncleaned)."""
    try:
        _run(job_id)
    except BaseException as exc:  # noqa: BLE001 - recorded: never left RUNNING, never shown ended uncleaned
        log.exception("managed job %d: the controller failed", job_id)
        st = store.load(job_id)
        if st.state not in store.FINISHED and st.state != store.LEAKED:
            if not st.outcome:
                store.record(job_id, Ending(outcome="failed",
                                            data={"detail": f"the controller failed: {type(exc).__name__}: {exc}"}))
            if st.pools:  # it may have left something: shown, and `jobs cancel` sweeps again
                store.record(job_id, Leaked(pools=(f"the controller failed before its sweep: {exc}",)))
            else:  # no pool was ever made: nothing to clean up
                store.record(job_id, Ended(outcome="failed", detail=f"the controller failed: {type(exc).__name__}: {exc}"))
    return 0


if __name__ == "__main__":
    os._exit(main())
