"""An Azure VM that ends itself: its idle watchdog and its boot-time limit delete the VM through ARM with the
VM's own managed identity (issue 38).

A VM shut down from its OS is "Stopped" and still billed; only ARM ends the bill
(https://learn.microsoft.com/azure/virtual-machines/states-billing). So each VM is created with a
system-assigned managed identity (``"identity": {"type": "SystemAssigned"}`` in its PUT; the identity and its
service principal are deleted with the VM:
https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/overview), and the client gives
that identity the built-in role "Virtual Machine Contributor" scoped to the VM alone (REST "Role Assignments -
Create", ``PUT {vm}/providers/Microsoft.Authorization/roleAssignments/{guid}``, api-version 2022-04-01:
https://learn.microsoft.com/azure/role-based-access-control/role-assignments-rest; the role's actions include
``Microsoft.Compute/virtualMachines/*``: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/compute#virtual-machine-contributor).
It can then delete or deallocate that VM and nothing else.

On the node, the boot script writes `END_PATH` (root, 0700; the script holds no secret: it asks the
instance metadata service, IMDS, for a token when it runs:
https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token, and for the
VM's resource id: https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service). It DELETEs
the VM ("Virtual Machines - Delete": its NIC, public address and OS disk go with it, ``deleteOption:
Delete``), and when ARM refuses that, deallocates it ("Virtual Machines - Deallocate"; the compute bill ends,
the disk bills until ``skyhive down``); when ARM refuses both it exits 1 naming the answers. The idle
watchdog runs it (`SHUTDOWN_COMMAND`), and at first boot the boot script arms a systemd timer
(`TIMER_UNIT`) that runs it at the boot-time limit; bootstrap stops the timer (`BOOT_LIMIT_OFF`).

The refusal to plan for: creating a role assignment needs ``Microsoft.Authorization/roleAssignments/write``
(Owner, User Access Administrator, Role Based Access Control Administrator), which a Contributor lacks (403
``AuthorizationFailed``). Then `grant` warns once per pool, the pool's VMs get no idle watchdog, and the
boot-time limit falls back to the VM's auto-shutdown schedule (`azure_shutdown.py`, set a little after the
timer as a backstop: it deallocates). A new identity may not have replicated yet (400 ``PrincipalNotFound``):
the assignment names ``principalType: ServicePrincipal``, as the reference advises, and is retried.
Role assignments are their own resources (``Microsoft.Authorization``) and are not documented to go with
the VM or its resource group, so `revoke` deletes the pool's at ``skyhive down``.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from .base import ErrorKind
from .boot import BOOT_MARKER, BOOT_SCRIPT, END_SCRIPT, TIMER, TIMER_OFF, install_end_script

log = logging.getLogger(__name__)

__all__ = ["END_PATH", "TIMER_UNIT", "SHUTDOWN_COMMAND", "BOOT_LIMIT_OFF", "BACKSTOP", "AUTH_API", "VM_CONTRIBUTOR",
           "end_script", "boot_script", "grant", "revoke", "assignment_path"]

END_PATH = END_SCRIPT  # (`boot.py`'s, shared with GCP and DigitalOcean)
TIMER_UNIT = TIMER
#: what the idle watchdog runs (as the login user)
SHUTDOWN_COMMAND = f"sudo -n {END_PATH} idle"
#: what bootstrap runs to lift the boot-time limit: stop the timer (fails only while it stays active)
BOOT_LIMIT_OFF = TIMER_OFF
#: seconds after the timer at which the auto-shutdown schedule deallocates a VM whose self-end was refused
BACKSTOP = 600
AUTH_API = "2022-04-01"
#: built-in role "Virtual Machine Contributor" (its id is the same in every tenant)
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
COMPUTE_API = "2023-03-01"
#: ARM error codes of a principal that has not replicated yet; retried this many times, this far apart
_NOT_YET, _TRIES, _PAUSE = ("PrincipalNotFound",), 6, 5.0


def end_script(imds: str = "http://169.254.169.254", arm: str = "https://management.azure.com") -> str:
    """The self-end script (POSIX sh, curl). `SKYHIVE_IMDS` / `SKYHIVE_ARM` in its environment replace the
    two base URLs (tests point them at a fake); the token goes to curl on its stdin, never on a command line
    or in a log."""
    return f"""#!/bin/sh
# skyhive-end: this Azure VM deletes itself (else deallocates itself) with its managed identity (skyhive)
IMDS="${{SKYHIVE_IMDS:-{imds}}}"
ARM="${{SKYHIVE_ARM:-{arm}}}"
say() {{ logger -t skyhive-end "$*" 2>/dev/null; echo "skyhive-end: $*" >&2; }}
token=$(curl -sS --max-time 20 --noproxy '*' -H 'Metadata: true' \\
  "$IMDS/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fmanagement.azure.com%2F" |
  sed -n 's/.*"access_token" *: *"\\([^"]*\\)".*/\\1/p')
[ -n "$token" ] || {{ say "IMDS gave no token (this VM has no managed identity)"; exit 2; }}
id=$(curl -sS --max-time 20 --noproxy '*' -H 'Metadata: true' \\
  "$IMDS/metadata/instance/compute/resourceId?api-version=2021-02-01&format=text")
case "$id" in /subscriptions/*/virtualMachines/*) ;; *) say "IMDS gave no resource id ($id)"; exit 2 ;; esac
arm() {{ printf 'Authorization: Bearer %s\\n' "$token" | curl -sS --max-time 60 -o /dev/null -w '%{{http_code}}' \\
  -X "$1" -H @- -H 'Content-Length: 0' "$ARM$id$2"; }}
deleted=$(arm DELETE "?api-version={COMPUTE_API}")
case "$deleted" in 200|202|204) say "${{1:-}}: ARM deletes this VM ($deleted)"; exit 0 ;; esac
deallocated=$(arm POST "/deallocate?api-version={COMPUTE_API}")
case "$deallocated" in 200|202) say "${{1:-}}: ARM deallocates this VM ($deallocated; delete: $deleted)"; exit 0 ;; esac
say "${{1:-}}: ARM refused this VM's identity: delete $deleted, deallocate $deallocated"
exit 1
"""


def boot_script(deadline: float | None) -> str:
    """The VM's customData: `boot.BOOT_SCRIPT` with the self-end script written first and, at first boot
    only, a systemd timer that runs it at `deadline` (epoch seconds; at least a minute from the boot); None:
    no timer (``boot_limit=None``)."""
    head, _, rest = BOOT_SCRIPT.partition("\n")
    lines = [head, install_end_script(end_script())]
    if deadline is not None:
        lines.append(f"[ -e {BOOT_MARKER} ] || {{ left=$(({int(deadline)} - $(date +%s))); [ $left -ge 60 ] || "
                     f"left=60; systemd-run --unit={TIMER_UNIT} --on-active=${{left}}s {END_PATH} boot-limit "
                     ">/dev/null 2>&1 || true; }")
    return "\n".join(lines) + "\numask 022\n" + rest  # (then the boot script, with the usual umask)


def assignment_path(vm_path: str, principal: str) -> str:
    """The role assignment of VM `vm_path`'s identity `principal` (its name a GUID derived from both: a retried
    PUT is the same assignment; a VM created again under the same name — the next zone — has a new identity,
    and ARM refuses to change an assignment's principal)."""
    name = uuid.uuid5(uuid.NAMESPACE_URL, f"{vm_path.lower()}#{principal}")
    return f"{vm_path}/providers/Microsoft.Authorization/roleAssignments/{name}"


def grant(azure: Any, vm_path: str, principal: str | None, warned: set[str], pool_id: str) -> bool:
    """Give the VM's identity (`principal`) Virtual Machine Contributor on the VM; whether it has it. A
    refusal for want of permission is warned about once per pool (`warned`) and is False; a transient
    refusal is raised (the launch call is retried)."""
    if not principal:
        log.warning("Azure VM %s: ARM returned no managed identity: no idle watchdog", vm_path.rsplit("/", 1)[-1])
        return False
    subscription = vm_path.split("/")[2]
    body = {"properties": {
        "roleDefinitionId": f"/subscriptions/{subscription}/providers/Microsoft.Authorization/roleDefinitions/{VM_CONTRIBUTOR}",
        "principalId": principal, "principalType": "ServicePrincipal"}}
    for attempt in range(_TRIES):
        try:
            azure.arm(assignment_path(vm_path, principal), AUTH_API, "PUT", body)
            return True
        except Exception as exc:
            code = azure.error_code(exc)
            if code == "RoleAssignmentExists":
                return True
            if code in _NOT_YET and attempt + 1 < _TRIES:
                time.sleep(_PAUSE)
                continue
            if azure.classify(exc) is ErrorKind.TRANSIENT:
                raise
            if pool_id not in warned:
                warned.add(pool_id)
                log.warning("Azure pool %s has no idle watchdog: giving its VMs' managed identity a role on "
                            "their VM was refused (%s); that needs Microsoft.Authorization/roleAssignments/write "
                            "(Owner or User Access Administrator) on the subscription or resource group. Its VMs "
                            "run until `skyhive down %s`; before bootstrap the auto-shutdown schedule still "
                            "deallocates them", pool_id, exc, pool_id)
            return False
    return False


def revoke(azure: Any, group_path: str) -> None:
    """Delete the role assignments scoped inside the resource group at `group_path` (the VMs' own)."""
    try:
        found = azure.arm(f"{group_path}/providers/Microsoft.Authorization/roleAssignments", AUTH_API)
    except Exception as exc:
        if azure.classify(exc) is ErrorKind.NOT_FOUND:
            return
        raise
    inside = group_path.lower() + "/"
    for item in (found or {}).get("value", []):
        scope = str((item.get("properties") or {}).get("scope") or "")
        if scope.lower().startswith(inside) and VM_CONTRIBUTOR in str(item["properties"].get("roleDefinitionId")):
            try:
                azure.arm(str(item["id"]), AUTH_API, "DELETE")
            except Exception as exc:
                kind = azure.classify(exc)
                if kind is ErrorKind.TRANSIENT:
                    raise
                if kind is not ErrorKind.NOT_FOUND:  # never a failed teardown for it: said, and left
                    log.warning("Azure role assignment %s (a VM's identity, scope %s) was not deleted: %s; delete "
                                "it with `az role assignment delete --ids %s`", item["id"], scope, exc, item["id"])
