"""What a managed job's controller watches while an attempt runs (controller.py): the job's output (a
node's interruption notice line noted as it passes), the grace after a notice, the provider's own view
of the attempt's machines, and a cancel request. Each stops the attempt by cancelling its scope."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

import anyio

from ..joblog import JobLog
from ...onnode import interruption
from . import store
from .events import Notice

if TYPE_CHECKING:
    from ...nodes.driver import PoolDriver

__all__ = ["cancelled", "notice_text", "copy_and_watch", "watch_notices", "watch_machines", "watch_cancel",
           "AFTER_NOTICE_WAIT"]

log = logging.getLogger("skyhive.managed")

_POLL = 0.3  # seconds between looks for a cancel request
_NOTICE_GRACE = 30.0  # seconds a program has after an interruption notice (SKYHIVE_JOBS_NOTICE_GRACE)
_MACHINE_POLL = 5.0  # seconds between looks at the attempt's machines (SKYHIVE_JOBS_MACHINE_POLL)
AFTER_NOTICE_WAIT = 10.0  # seconds a failure after a notice waits for the notice's line to be read


def cancelled(job_id: int) -> bool:
    return store.load(job_id).cancel_requested


def notice_text(notice: dict[str, Any]) -> str:
    return (f"interruption notice: {notice.get('action', '?')} at {notice.get('time', '?')}")


def _notice_grace() -> float:
    """Seconds a program is given after its node's interruption notice before the attempt is stopped
    (SKYHIVE_JOBS_NOTICE_GRACE, default 30: EC2 gives two minutes, the new attempt needs the rest)."""
    try:
        return max(0.0, float(os.environ.get("SKYHIVE_JOBS_NOTICE_GRACE", _NOTICE_GRACE)))
    except ValueError:
        return _NOTICE_GRACE


async def copy_and_watch(job_id: int, stream: Any, out: JobLog, notices: dict[int, dict[str, Any]]) -> None:
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
                out.note(f"node {rec.node}: {notice_text(notices[rec.node])}: the attempt ends in "
                         f"{_notice_grace():g} s, or when the program exits, and is recovered elsewhere")
                store.record(job_id, Notice(node=rec.node, notice=notices[rec.node]))
            out.write(rec.node, rec.local_rank, rec.stream, rec.text)


async def watch_notices(notices: dict[int, dict[str, Any]], gone: dict[int, str], scope: anyio.CancelScope,
                        driver: PoolDriver | None = None, noticed: Any = None) -> None:
    """After a node's interruption notice, the program's grace to checkpoint (it finds the notice in
    `$SKYHIVE_INTERRUPTION_NOTICE`); then the attempt is stopped as a lost node — before the cloud
    takes the machine. `noticed(node, text)` is told at the notice itself (the next attempt is
    provisioned during the grace). In place (`driver`: a pool that replaces its nodes, a multi-node task)
    only that node is replaced after its grace (`PoolDriver.replace`), the attempt going on; each
    notice once."""
    if driver is None:
        while not notices:
            await anyio.sleep(0.1)
        node = min(notices)
        text = notice_text(notices[node])
        if noticed is not None:
            noticed(node, text)
        await anyio.sleep(_notice_grace())
        gone[node] = text
        scope.cancel()
        return
    seen: set[tuple[int, int]] = set()  # (node, the handle noticed): a replacement's own notice counts anew
    async with anyio.create_task_group() as tg:
        while True:
            for node in sorted(notices):
                handle = driver.node(node).handle
                if handle is not None and (node, id(handle)) not in seen:
                    seen.add((node, id(handle)))
                    tg.start_soon(_replace_after_grace, driver, node, handle, notice_text(notices[node]), gone, scope)
            await anyio.sleep(0.1)


async def _replace_after_grace(driver: PoolDriver, node: int, handle: Any, text: str, gone: dict[int, str],
                               scope: anyio.CancelScope) -> None:
    """Node `node`'s grace after its notice, then it is replaced — unless it was already (its program
    exited first and the controller replaced it). A pool that cannot replace it ends the attempt."""
    await anyio.sleep(_notice_grace())
    if driver.node(node).handle is handle and not driver.replacing(node):
        if not driver.replace(node, f"{text}: its grace ended"):
            gone[node] = text
            scope.cancel()


def _machine_poll() -> float:
    """Seconds between two looks at the attempt's machines (SKYHIVE_JOBS_MACHINE_POLL, default 5)."""
    try:
        return max(0.05, float(os.environ.get("SKYHIVE_JOBS_MACHINE_POLL", _MACHINE_POLL)))
    except ValueError:
        return _MACHINE_POLL


async def watch_machines(provider: Any, driver: PoolDriver, gone: dict[int, str], scope: anyio.CancelScope,
                         in_place: bool = False) -> None:
    """Until cancelled: ask the provider whether it took one of the attempt's machines (a cloud instance
    terminated or stopped under the job: `Provider.machines_gone`); if so, note it in `gone` and stop the
    attempt (its steps, then its pool) at once rather than when the worker's link times out. In place
    (a multi-node task on a pool that replaces its nodes) only those nodes are replaced
    (`PoolDriver.replace`) and the attempt goes on; the nodes are looked up anew each time."""
    while True:
        await anyio.sleep(_machine_poll())
        asked = {n.index: n.handle for n in driver.nodes()
                 if n.handle is not None and not (in_place and n.replacing)}
        try:
            found = await provider.machines_gone(list(asked.values()))
        except Exception as exc:  # noqa: BLE001 - the provider's API down for a moment: the next look
            log.warning("looking at the attempt's machines failed: %s", exc)
            continue
        found = {n: why for n, why in found.items() if n in asked}
        if not found:
            continue
        for n, why in sorted(found.items()):
            why = f"{why} (the provider took the machine)"
            if in_place:
                if driver.node(n).handle is not asked[n] or driver.replacing(n) or driver.replace(n, why):
                    continue  # replaced already, or its replacement under way now
            gone[n] = why
        if gone:
            scope.cancel()
            return


async def watch_cancel(job_id: int, scope: anyio.CancelScope) -> None:
    while not cancelled(job_id):
        await anyio.sleep(_POLL)
    scope.cancel()
