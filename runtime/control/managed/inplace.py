"""A node of a multi-node managed job replaced inside its attempt's pool (docs/jobs.md, "What is
recovered"): the other nodes keep their machines, the lost one's place is tried last, what it left on its
machine is stopped, and the steps run again on every node with setup on the new one only. The controller
(controller.py) calls `replace_in_place` when an attempt's steps end with a lost node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from ..joblog import JobLog
from ..steps import NodeExit
from ...onnode import interruption
from . import store
from .events import Replaced, Running
from .watch import notice_text

if TYPE_CHECKING:
    from ...nodes.driver import PoolDriver

__all__ = ["replace_in_place", "why_failed", "SWEEP_TIMEOUT"]

SWEEP_TIMEOUT = 120.0  # one pool's (or one lost machine's) sweep at most


def why_failed(failed: NodeExit) -> str:
    return f"{failed.phase} failed on node {failed.node}: {failed.detail or f'exit code {failed.code}'}"


async def replace_in_place(job_id: int, attempt: int, driver: PoolDriver, failed: NodeExit, ran_on: list[Any],
                           notices: dict[int, dict[str, Any]], out: JobLog, avoid: list[Any],
                           gang: bool = True) -> frozenset[int] | None:
    """A multi-node attempt whose node `failed.node` was lost (its worker or host, its machine taken, its
    interruption notice): that node alone is replaced in the attempt's pool (`Pool(replace_failed=True)`,
    the lost place tried last: `Provider.avoid_in_place`), the other nodes' scripts having stopped; the
    nodes to run the steps again with (`fresh`: setup runs there only). None: not a lost node, or no
    replacement came — the attempt ends and a new one starts on fresh nodes (`lost`). `ran_on`: the
    nodes' handles when the steps started (the lost one may be replaced already). `gang` False
    (`job_recovery.restart: node`): the other nodes' programs go on; only this node starts again."""
    from ....errors import WorkerLost

    index = failed.node
    count = len(driver.nodes())
    if not 0 <= index < count or index >= len(ran_on):
        return None
    old = ran_on[index]
    if not failed.lost and failed.code > interruption.AFTER_NOTICE and index in notices:
        # its program exited after the node's interruption notice: the node goes now, not at the grace's end
        why = f"{notice_text(notices[index])}; the program then exited {failed.code - interruption.AFTER_NOTICE}"
        if driver.node(index).handle is old and not driver.replacing(index) and not driver.replace(index, why):
            return None
        failed = NodeExit(node=index, phase=failed.phase, code=1, lost=True, detail=why)
    if not failed.lost:
        return None
    if (st := store.load(job_id)).recoveries >= st.max_recoveries:  # a lost attempt: the controller fails the job
        return None
    old_id = str(old.provider_id) if old is not None else f"node {index}"
    out.note(f"node {index} lost ({why_failed(failed)}): replacing only it, the other {count - 1} kept; "
             + ("run restarts on every node together" if gang else "the others' run goes on")
             + " (not counted against max_restarts_on_errors)")
    if old is not None:
        avoid.append(old)
        store.save_avoided(job_id, avoid)
    store.record(job_id, Replaced(attempt=attempt, node=index, detail=why_failed(failed), places=(old_id,)))
    # the other nodes' scripts were cancelled (`everywhere`): their calls end once the scripts are gone
    # (or their workers are killed after cancel_grace, and lost in turn) — each end a pool event
    if gang:
        settings = driver.settings
        await driver.quiet(timeout=settings.cancel_grace + settings.stop_timeout + 5)
    # what the lost node left on its machine (its dead worker's program) stopped, beside its replacement
    left: list[str] = []
    refused: list[WorkerLost] = []

    async def sweep() -> None:
        if old is None:
            return
        try:
            with anyio.fail_after(SWEEP_TIMEOUT):
                await driver.provider.sweep_lost(driver.pool_id, [old])
        except Exception as exc:  # noqa: BLE001 - said in the log; the job's last sweep tries again
            left.append(f"{old_id}: {type(exc).__name__}: {exc}")

    async def replacement() -> None:
        try:
            await driver.workers()  # the replacement ready (bounded by start_timeout), or WorkerLost
        except WorkerLost as exc:
            refused.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(sweep)
        tg.start_soon(replacement)
    if left:
        out.note("could not clean up the lost node's machine yet (retried when the job ends): " + "; ".join(left)
                 + " -- a copy may still run there")
    if refused:
        out.note(f"node {index} could not be replaced in place ({refused[0]}): starting a new attempt")
        return None
    notices.pop(index, None)  # a notice of the replacement counts anew
    new = driver.node(index).handle
    where = ", ".join(str(n.handle.provider_id) for n in driver.nodes() if n.handle is not None)
    store.record(job_id, Running(attempt=attempt, pool=driver.pool_id, nodes=where))
    out.note(f"node {index} replaced ({old_id} -> {new.provider_id if new is not None else '?'}): "
             + (f"run starts again on {where}" if gang else f"its steps start on {new.provider_id if new else '?'}"))
    return frozenset({index})
