"""What the dashboard's buttons do: the same code the CLI runs, so each is recorded as the CLI's is.

`down` of a named pool is `skyhive down NAME` (`control.pools.down_cluster`: its agent, watchdog
and workers stopped, `PoolStopped` appended to its log, its record removed); of any other pool it is
`skyhive down POOL [--force]` (`commands.inventory.down`: the provider's nodes destroyed, leftover
processes killed, the closing events appended). `cancel` is `skyhive cancel NAME JOB`
(`control.queue.cancel_jobs`); `cancel_managed_job` is `skyhive jobs cancel ID`
(`managed.commands.cancel_managed`: the cancel recorded, then its controller waited for while it tears
the job's pool down). Each blocks (processes are waited for): the app runs them in a thread.
"""

from __future__ import annotations

import io
import logging

from ...paths import state_dir
from ..control.pools import down_cluster
from ..events.inventory import down, find
from ..control.queue import cancel_jobs, is_named
from ..control.managed import store as managed_store
from ..control.managed.commands import cancel_managed

__all__ = ["down_pool", "cancel_job", "cancel_managed_job"]

log = logging.getLogger("skyhive.dashboard")


def down_pool(pool_id: str, *, force: bool = False) -> str:
    """Take pool `pool_id` down as `skyhive down` does; what happened, in a sentence. Raises what
    `skyhive down` raises: `PoolInUse` (its client runs: pass `force`), `PoolNotFound`,
    `ProvisionError` (the provider failed to destroy its nodes: the log is left as it was)."""
    if is_named(pool_id):
        err = io.StringIO()
        ended = down_cluster(pool_id, err=err)
        log.info("dashboard: pool %s taken down (%d process(es) ended)", pool_id, ended)
        return f"pool {pool_id}: down ({ended} process{'es' if ended != 1 else ''} ended)"
    report = down(find(pool_id), force=force)  # its PoolStopped says why, as after `skyhive down`
    if report.already_stopped:
        return f"pool {report.pool_id}: already stopped"
    text = (f"pool {report.pool_id}: stopped ({report.killed} leftover processes killed, "
            f"{report.destroyed} provider nodes destroyed)")
    if report.warning:
        text += f"; warning: {report.warning}"
    log.info("dashboard: %s", text)
    return text


def cancel_job(name: str, job_id: int) -> str:
    """Cancel job `job_id` of named pool `name` as `skyhive cancel NAME JOB` does; what it said.
    Raises `PoolNotFound`/`LookupError` naming the pool and job."""
    err = io.StringIO()
    cancel_jobs(name, [job_id], err=err)
    return err.getvalue().strip().removeprefix("skyhive: ")


def cancel_managed_job(job_id: int) -> str:
    """Cancel managed job `job_id` as `skyhive jobs cancel ID` does (its controller stops its pool and
    records it cancelled; this waits for that); what it said. `LookupError` for a job that does not
    exist, `ValueError` for one that has already ended, `RuntimeError` when its controller did not finish."""
    if not (state_dir() / "managed" / str(job_id) / "events.jsonl").exists():  # (`load` would make its folder)
        raise LookupError(f"there is no managed job {job_id} (`skyhive jobs queue` lists them)")
    st = managed_store.load(job_id)
    if st.state in managed_store.FINISHED:
        raise ValueError(f"managed job {job_id} has already ended ({st.state})")
    err = io.StringIO()
    code = cancel_managed([job_id], err=err)
    text = err.getvalue().strip().replace("skyhive: ", "")
    if code != 0:
        raise RuntimeError(text or f"managed job {job_id}: `skyhive jobs cancel` failed")
    log.info("dashboard: managed %s", text)
    return f"managed {text}"
