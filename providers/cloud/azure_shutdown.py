"""An Azure node's boot-time limit backstop: the VM's auto-shutdown schedule, set by the client at create and
deleted once the node is bootstrapped (`Provider.bootstrapped`).

A VM that shuts down from inside is "Stopped" and still billed for its compute; only a deallocation stops
the bill, and a VM can only be deallocated through ARM. The node's own self-end timer (`azure_end.py`) does
that first where the VM's managed identity was given a role; this schedule, `azure_end.BACKSTOP` seconds
later, needs no credential on the node, so it also covers a user who may not grant roles. Azure's own
auto-shutdown: a ``Microsoft.DevTestLab/schedules`` resource in the VM's resource group named
``shutdown-computevm-<vm>``, ``taskType: ComputeVmShutdownTask``, a daily time (``HHmm``) in a Windows time
zone, ``targetResourceId`` the VM (REST "Global Schedules - Create Or Update", api-version 2018-09-15:
https://learn.microsoft.com/rest/api/dtl/global-schedules/create-or-update; the VM's auto-shutdown, which
deallocates it: https://learn.microsoft.com/azure/virtual-machines/auto-shutdown-vm). The schedule is set
to the provider's `boot_limit` (default `boot.BOOT_LIMIT`) plus the backstop from now, rounded up to the minute; a client
that dies before bootstrap leaves a VM that Azure deallocates then (its disk and static public address bill on until `skyhive down` deletes the
pool's resource group, which holds the schedule too). A subscription that refuses the schedule (the
``Microsoft.DevTestLab`` resource provider not registered, a policy) keeps its VM without a limit, as
before, with a warning naming why; so does `Azure(boot_limit=None)` (no schedule is put).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from .base import ErrorKind
from .boot import BOOT_LIMIT

log = logging.getLogger(__name__)

__all__ = ["SCHEDULES_API", "schedule_path", "schedule_body", "set_limit", "lift"]

SCHEDULES_API = "2018-09-15"


def schedule_path(vm_path: str) -> str:
    """The auto-shutdown schedule of the VM at ARM path `vm_path` (its name is fixed by Azure)."""
    group, _, name = vm_path.partition("/providers/Microsoft.Compute/virtualMachines/")
    return f"{group}/providers/Microsoft.DevTestLab/schedules/shutdown-computevm-{name}"


def schedule_body(vm_path: str, location: str, now: float | None = None, limit: int = BOOT_LIMIT) -> dict[str, Any]:
    """The schedule's body: a daily shutdown at `limit` seconds from `now` (UTC, whole minutes up)."""
    at = time.gmtime(math.ceil(((time.time() if now is None else now) + limit) / 60) * 60)
    return {"location": location, "properties": {
        "status": "Enabled", "taskType": "ComputeVmShutdownTask", "timeZoneId": "UTC",
        "dailyRecurrence": {"time": f"{at.tm_hour:02d}{at.tm_min:02d}"}, "targetResourceId": vm_path,
        "notificationSettings": {"status": "Disabled", "timeInMinutes": 30}}}


def set_limit(azure: Any, vm_path: str, after: int = 0) -> None:
    """Put the VM's auto-shutdown schedule (just after its PUT), at `azure.boot_limit` + `after` seconds (the
    node's own self-end timer, `azure_end.py`, comes first; this deallocates a VM whose self-end was refused).
    A refusal other than a transient one is logged and the VM goes on without this backstop; a transient one
    is raised (the launch call is retried). With `azure.boot_limit` None (off) nothing is put."""
    if azure.boot_limit is None:
        return
    try:
        azure.arm(schedule_path(vm_path), SCHEDULES_API, "PUT",
                  schedule_body(vm_path, azure.region, limit=azure.boot_limit + after))
    except Exception as exc:
        if azure.classify(exc) is ErrorKind.TRANSIENT:
            raise
        log.warning("Azure VM %s has no boot-time limit (its auto-shutdown schedule was refused: %s); if this "
                    "client dies before bootstrap, it runs until skyhive down", vm_path.rsplit("/", 1)[-1], exc)


def lift(azure: Any, vm_path: str) -> None:
    """Delete the VM's auto-shutdown schedule: the node is bootstrapped (gone already, or none was put: nothing
    to do)."""
    if azure.boot_limit is None:
        return
    try:
        azure.arm(schedule_path(vm_path), SCHEDULES_API, "DELETE")
    except Exception as exc:
        if azure.classify(exc) is not ErrorKind.NOT_FOUND:
            raise
