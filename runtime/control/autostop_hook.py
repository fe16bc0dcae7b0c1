"""A named pool's autostop hook (`resources.autostop.hook`): a shell script run on the head node before
the pool is stopped or taken down for being idle — to save a checkpoint, push logs, say goodbye.

    python -m skyhive.runtime.control.autostop_hook NAME

is what the pool's watchdog runs when it has a hook (`hook_path(NAME)` exists; `clusters.named` picks
the command): the hook is queued as a job of the pool (`autostop hook`, on the first node, in the
directory the pool's jobs run in, its output in the job's log: `skyhive logs NAME JOB`), waited for
(at most `hook_timeout` seconds: then it is cancelled), and then `clusters.autostop` stops the pool as
it would have without a hook. A hook that fails or runs out of time is logged, and the stop goes on
(SkyPilot's rule: a hook never keeps a pool billed). When a job waits or a client is attached, nothing
runs and the watchdog watches on (the hook runs at the next idle time) — as `wait_for` says: with `jobs`
an attached client does not count, with `none` nothing does (the jobs are cancelled, then the hook runs).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shlex
import sys
import time
from pathlib import Path

from ..clusters import jobs as jobq
from ..clusters import record as records
from ..clusters.autostop import KEEP_WATCHING, cancel_jobs
from ..clusters.autostop import main as autostop_main
from ..commands.taskfile_resources import Autostop

log = logging.getLogger("skyhive.control.autostop_hook")
#: this module, as the watchdog of a pool with a hook runs it (`python -m RUNNER NAME`)
RUNNER = "skyhive.runtime.control.autostop_hook"

__all__ = ["hook_path", "save_hook", "load_hook", "run_hook", "main", "HOOK_JOB"]

#: the name of the hook's job in the pool's queue
HOOK_JOB = "autostop-hook"
#: seconds given to the job agent to start and attach, on top of the hook's own timeout
_GRACE = 120.0


def hook_path(name: str) -> Path:
    return records.cluster_dir(name) / "autostop-hook.json"


def save_hook(name: str, autostop: Autostop | None, *, own_home: bool) -> None:
    """Remember pool `name`'s hook (or forget it: `autostop` None or without one)."""
    path = hook_path(name)
    if autostop is None or (not autostop.hook and autostop.wait_for == "jobs_and_ssh"):
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    # `runner`: what the pool's watchdog runs instead of `clusters.autostop` (named here, by the layer that
    # drives the pool, so that `clusters/` needs no name of a module above it)
    # `wait_for` (what keeps the pool from being idle) is read by the watchdog's starter and by `clusters.autostop`
    tmp.write_text(json.dumps({"hook": autostop.hook, "timeout": autostop.hook_timeout, "own_home": own_home,
                               "runner": RUNNER, "wait_for": autostop.wait_for}))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def load_hook(name: str) -> dict[str, object] | None:
    try:
        return dict(json.loads(hook_path(name).read_text()))
    except FileNotFoundError:
        return None


def run_hook(name: str) -> str:
    """Run pool `name`'s hook as a job and wait for it; what happened ("no hook", "busy: ...", the job's
    end state)."""
    from .agent import ensure_agent
    from .steps import TaskSteps

    hook = load_hook(name)
    if hook is None or not hook.get("hook"):
        return "no hook"
    wait_for = str(hook.get("wait_for") or "jobs_and_ssh")
    lock = records.AttachLock(name, who="autostop hook")
    if not lock.try_acquire():
        if wait_for == "jobs_and_ssh":
            return f"busy: {lock.busy()}"
        # `jobs`, `none`: an attached client does not keep the pool up, and a job (the hook is one) waits for
        # it: the pool stops without its hook rather than stay billed for the hook's timeout
        log.warning("pool %s: the autostop hook did not run: %s (wait_for: %s)", name, lock.busy(), wait_for)
        return "hook skipped: a client is attached"
    lock.release()
    if wait_for != "none" and any(j.state in (jobq.PENDING, jobq.RUNNING) for j in jobq.list_jobs(name)):
        return "busy: a job is queued or running"
    if wait_for == "none":  # a hard limit: the jobs make way for the hook, then the pool stops
        cancel_jobs(name)
    timeout = float(hook["timeout"])  # type: ignore[arg-type]
    script = f"timeout --kill-after=10 {timeout:g} bash -c {shlex.quote(str(hook['hook']))}"
    steps = TaskSteps(work_id=name, task_id=f"skyhive-{name}-autostop-hook", run=script, num_nodes=1,
                      own_home=bool(hook.get("own_home")))
    job = jobq.submit(name, job_name=HOOK_JOB, steps=pickle.dumps(steps), with_setup=False, env={}, secrets={})
    ensure_agent(name)
    deadline = time.monotonic() + timeout + _GRACE
    while True:
        state = jobq.load_job(name, job.id).state
        if state in jobq.FINISHED:
            break
        if time.monotonic() > deadline:
            jobq.request_cancel(name, job.id)
            log.warning("pool %s: the autostop hook (job %d) did not end in %g s: cancelled", name, job.id, timeout)
            state = "TIMED OUT"
            break
        time.sleep(0.2)
    while jobq.agent_pid(name) is not None and time.monotonic() < deadline + 30:  # it detaches, then leaves
        time.sleep(0.1)
    if state != jobq.SUCCEEDED:
        log.warning("pool %s: the autostop hook (job %d) ended %s; stopping anyway", name, job.id, state)
    return f"hook job {job.id}: {state}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m skyhive.runtime.control.autostop_hook NAME\n")
        return 2
    name = records.check_name(args[0])
    outcome = run_hook(name)
    sys.stdout.write(f"pool {name}: {outcome}\n")
    sys.stdout.flush()
    if outcome.startswith("busy"):
        return KEEP_WATCHING
    return autostop_main([name])


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="skyhive: %(message)s")
    sys.exit(main())
