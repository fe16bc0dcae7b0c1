"""FAKE ARM's managed identities, role assignments and instance metadata service (rules A11-A14, issue 38);
`FakeARM` (fake_arm.py) mixes `IdentityRules` in. Each rule names the reference it encodes:

- A11 a VM PUT with ``"identity": {"type": "SystemAssigned"}`` gets a service principal: the PUT's answer
  and every GET carry ``identity.principalId`` and ``tenantId``; the identity is deleted with its VM
  (https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/overview, "system-assigned";
  https://learn.microsoft.com/rest/api/compute/virtual-machines/create-or-update, ``identity``).
- A12 role assignments, ``PUT {scope}/providers/Microsoft.Authorization/roleAssignments/{guid}`` (api-version
  2022-04-01: https://learn.microsoft.com/azure/role-based-access-control/role-assignments-rest): the caller
  needs ``Microsoft.Authorization/roleAssignments/write`` — Owner or User Access Administrator have it, a
  Contributor's NotActions exclude it (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/general):
  otherwise 403 ``AuthorizationFailed`` ("does not have authorization to perform action ... over scope ...",
  https://learn.microsoft.com/azure/role-based-access-control/troubleshooting). The caller's role is
  `caller_role` (default ``Contributor``, what most users have). The name must be a GUID (400
  ``InvalidRoleAssignmentId``), the role a known built-in (400 ``RoleDefinitionDoesNotExist``), the principal
  one that exists (400 ``PrincipalNotFound``); a principal created less than `principal_lag` assignment
  attempts ago has not replicated and is ``PrincipalNotFound`` unless the body names ``principalType:
  ServicePrincipal`` (the reference's advice for a new service principal). The same principal, role and scope
  under another name is 409 ``RoleAssignmentExists``; an existing name with another principal or role is 400
  ``RoleAssignmentUpdateNotPermitted`` (both on the troubleshooting page). Assignments are their own resources: deleting their
  scope (the VM, the resource group) leaves them (the "Identity not found" orphans of the troubleshooting
  page); ``GET {scope}/providers/Microsoft.Authorization/roleAssignments`` lists those at, above and below the
  scope (Contributor may read), ``DELETE`` needs ``roleAssignments/delete`` (not a Contributor's).
- A13 the instance metadata service (https://learn.microsoft.com/azure/virtual-machines/instance-metadata-service;
  `imds(vm)` is the service as seen from one VM): every request needs the header ``Metadata: true`` (400
  otherwise); ``/metadata/identity/oauth2/token?resource=https://management.azure.com/`` answers the VM's
  identity's token (400 ``invalid_request`` "Identity not found" for a VM without one:
  https://learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token);
  ``/metadata/instance/compute/resourceId?format=text`` the VM's resource id as plain text.
- A14 a managed identity's token may do what its role assignments allow at scopes covering the target
  (https://learn.microsoft.com/azure/role-based-access-control/overview, "how Azure RBAC determines if a user
  has access"): Virtual Machine Contributor allows ``Microsoft.Compute/virtualMachines/*``, so delete and
  ``POST .../deallocate`` ("Virtual Machines - Deallocate": 202, power state ``deallocated``:
  https://learn.microsoft.com/rest/api/compute/virtual-machines/deallocate) of the VM it is scoped to; any
  other request, or none assigned, is 403 ``AuthorizationFailed``. NOT VERIFIED against real ARM: whether a
  VM-scoped role suffices for the VM's delete to take its NIC and public address along (deleteOption:
  Delete); the fake lets it (the node's script falls back to deallocate when ARM refuses the delete).
"""

from __future__ import annotations

import itertools
import re
import uuid
from typing import Any
from urllib.parse import parse_qs, urlparse

TENANT = "72f988bf-0000-0000-0000-000000000000"
#: built-in roles (ids are the same in every tenant) -> (actions, not-actions) the fake knows of
ROLES = {
    "8e3af657-a8ff-443c-a75c-2fe8c4bcb635": ("Owner", ("*",), ()),
    "b24988ac-6180-42a0-ab88-20f7382dd24c": ("Contributor", ("*",), ("Microsoft.Authorization/*/Delete",
                                                                    "Microsoft.Authorization/*/Write")),
    "18d7d88d-d35e-4fb5-a5c3-7773c20a72d9": ("User Access Administrator", ("*/read", "Microsoft.Authorization/*"), ()),
    "9980e02c-c2be-4d73-94e8-173b1dc7cf3c": ("Virtual Machine Contributor", (
        "Microsoft.Authorization/*/read", "Microsoft.Compute/virtualMachines/*", "Microsoft.Compute/disks/*",
        "Microsoft.Network/networkInterfaces/*"), ()),
}
ROLE_BY_NAME = {name: rid for rid, (name, _, _) in ROLES.items()}
_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ASSIGNMENTS = "/providers/microsoft.authorization/roleassignments"


def _error(status: int, code: str, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": code, "message": message}}


def _allows(role_id: str, action: str) -> bool:
    _, actions, not_actions = ROLES.get(role_id, ("", (), ()))

    def match(pattern: str) -> bool:
        return re.fullmatch(re.escape(pattern.lower()).replace(r"\*", ".*"), action.lower()) is not None

    return any(map(match, actions)) and not any(map(match, not_actions))


def _action(method: str, key: str) -> str:
    """The RBAC action of a request (the few the fake needs)."""
    verb = {"GET": "read", "PUT": "write", "DELETE": "delete"}.get(method, "action")
    if _ASSIGNMENTS in key:
        return f"Microsoft.Authorization/roleAssignments/{verb}"
    if "/virtualmachines/" in key:
        if method == "POST" and key.endswith("/deallocate"):
            return "Microsoft.Compute/virtualMachines/deallocate/action"
        return f"Microsoft.Compute/virtualMachines/{verb}"
    if "/providers/" in key:
        namespace, rtype = (key.split("/providers/")[-1].split("/") + [""])[:2]
        return f"{namespace}/{rtype}/{verb}"
    return f"Microsoft.Resources/subscriptions/resourceGroups/{verb}"


class IdentityRules:
    """A11-A14 (see the module docstring); state lives on the `FakeARM` instance."""

    resources: dict[str, dict]
    subscription: str

    def _identity_init(self) -> None:
        self.caller_role = "Contributor"  # A12: the role of the client's credential, on the whole subscription
        self.caller_id = "11111111-2222-3333-4444-555555555555"
        self.principals: dict[str, str] = {}  # A11: principal id -> its VM's key
        self.principal_lag = 1  # A12: assignment attempts before a new principal has replicated
        self._young: dict[str, int] = {}
        self.assignments: dict[str, dict] = {}  # A12: lower-case id -> {id, name, properties}
        self.vm_tokens: dict[str, str] = {}  # A13: token -> principal id
        self._serial = itertools.count(1)

    # ---- A11 ---------------------------------------------------------------------------------------------

    def _identity_of(self, data: dict) -> dict | None:
        if ((data.get("identity") or {}).get("type") or "").lower() != "systemassigned":
            return None
        principal = str(uuid.uuid4())
        self._young[principal] = self.principal_lag
        return {"type": "SystemAssigned", "principalId": principal, "tenantId": TENANT}

    def _identity_created(self, key: str, stored: dict) -> None:
        principal = (stored.get("identity") or {}).get("principalId")
        if principal:
            self.principals[principal] = key

    def _identity_gone(self, key: str) -> None:
        for principal, vm in list(self.principals.items()):
            if vm == key or vm.startswith(key + "/"):
                self.principals.pop(principal)

    # ---- A12 / A14: who may do what ----------------------------------------------------------------------

    def _authorized(self, token: str, method: str, path: str) -> tuple[int, dict] | None:
        """None when the bearer of `token` may send this request, else the 403 ARM answers."""
        key = path.lower().rstrip("/")
        action = _action(method, key)
        principal = self.vm_tokens.get(token)
        if principal is None:  # the client's credential: `caller_role` on the whole subscription
            who, allowed = self.caller_id, _allows(ROLE_BY_NAME[self.caller_role], action)
        else:
            who = principal
            allowed = principal in self.principals and any(
                a["properties"]["principalId"] == principal and _allows(a["properties"]["roleDefinitionId"].rsplit(
                    "/", 1)[-1], action) and (key + "/").startswith(a["properties"]["scope"].lower() + "/")
                for a in self.assignments.values())
        if allowed:
            return None
        scope = path.split("/providers/Microsoft.Authorization")[0] if _ASSIGNMENTS in key else path
        return _error(403, "AuthorizationFailed", f"The client '{who}' with object id '{who}' does not have "
                      f"authorization to perform action '{action}' over scope '{scope}' or the scope is invalid. If "
                      "access was recently granted, please refresh your credentials.")

    def _assignments(self, method: str, path: str, data: Any) -> tuple[int, Any]:
        """A12: role assignments at any scope."""
        scope, _, name = path.partition("/providers/Microsoft.Authorization/roleAssignments")
        name = name.strip("/")
        if method == "GET" and not name:
            low = scope.lower().rstrip("/") + "/"
            return 200, {"value": [a for a in self.assignments.values() if low.startswith(
                a["properties"]["scope"].lower() + "/") or a["properties"]["scope"].lower().startswith(low)]}
        key = path.lower()
        if method == "DELETE":
            gone = self.assignments.pop(key, None)
            return (200, gone) if gone else (204, None)
        if method == "GET":
            return (200, self.assignments[key]) if key in self.assignments else _error(
                404, "RoleAssignmentNotFound", f"The role assignment '{name}' is not found.")
        if not _GUID.fullmatch(name):
            return _error(400, "InvalidRoleAssignmentId", f"The role assignment ID '{name}' is not valid. The role "
                                                          "assignment ID must be a GUID.")
        props = (data or {}).get("properties") or {}
        role = str(props.get("roleDefinitionId") or "")
        if role.rsplit("/", 1)[-1] not in ROLES or not role.lower().startswith(
                f"/subscriptions/{self.subscription}/providers/microsoft.authorization/roledefinitions/"):
            return _error(400, "RoleDefinitionDoesNotExist", f"The specified role definition with ID "
                                                             f"'{role.rsplit('/', 1)[-1]}' does not exist.")
        principal = str(props.get("principalId") or "")
        lagging = self._young.get(principal, 0) > 0
        if lagging:
            self._young[principal] -= 1
        if principal not in self.principals or (lagging and props.get("principalType") != "ServicePrincipal"):
            return _error(400, "PrincipalNotFound", f"Principal {principal.replace('-', '')} does not exist in the "
                                                    f"directory {TENANT}. Check that you have the correct principal "
                                                    "ID. If you are creating this principal and then immediately "
                                                    "assigning a role, this error might be related to a replication "
                                                    "delay. In this case, set the role assignment principalType "
                                                    "property to a value, such as ServicePrincipal, User, or Group.")
        if scope.lower() not in self.resources:
            return _error(404, "ResourceNotFound", f"The Resource '{scope}' was not found.")
        known = self.assignments.get(key)
        if known and (known["properties"]["principalId"], known["properties"]["roleDefinitionId"].lower()) != (
                principal, role.lower()):
            return _error(400, "RoleAssignmentUpdateNotPermitted", "Tenant ID, application ID, principal ID, and "
                                                                   "scope are not allowed to be updated.")
        for other in self.assignments.values():
            o = other["properties"]
            if other["id"].lower() != key and (o["principalId"], o["roleDefinitionId"].lower(), o["scope"].lower()) \
                    == (principal, role.lower(), scope.lower()):
                return _error(409, "RoleAssignmentExists", "The role assignment already exists.")
        stored = {"id": path, "name": name, "type": "Microsoft.Authorization/roleAssignments", "properties": {
            "roleDefinitionId": role, "principalId": principal, "principalType": props.get("principalType") or
            "ServicePrincipal", "scope": scope}}
        self.assignments[key] = stored
        return 201, stored

    # ---- A13 ---------------------------------------------------------------------------------------------

    def imds(self, vm_path: str) -> "FakeIMDS":
        """The instance metadata service as VM `vm_path` sees it."""
        return FakeIMDS(self, vm_path)

    def _imds_answer(self, vm_path: str, url: str, headers: Any) -> tuple[int, Any]:
        if str(headers.get("Metadata", "")).lower() != "true":
            return 400, {"error": "Bad request. Required metadata header not specified"}
        parsed = urlparse(url)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        vm = self.resources.get(vm_path.lower())
        if parsed.path == "/metadata/instance/compute/resourceId" and query.get("format") == "text":
            return (200, vm["id"]) if vm else (404, {"error": "Not found"})
        if parsed.path == "/metadata/identity/oauth2/token" and query.get("resource") == "https://management.azure.com/":
            principal = ((vm or {}).get("identity") or {}).get("principalId")
            if principal not in self.principals:
                return 400, {"error": "invalid_request", "error_description": "Identity not found"}
            token = f"eyJ0.fake-mi-{next(self._serial)}"
            self.vm_tokens[token] = principal
            return 200, {"access_token": token, "expires_in": "86399", "expires_on": "9999999999",
                         "resource": "https://management.azure.com/", "token_type": "Bearer"}
        return 400, {"error": "invalid_request", "error_description": f"FAKE IMDS does not implement {parsed.path}"}


class FakeIMDS:
    """A13: the instance metadata service of one VM (a `FakeEndpoint`; `fake_serve.serve` puts it on loopback)."""

    hosts = ("169.254.169.254",)

    def __init__(self, arm: IdentityRules, vm_path: str) -> None:
        self.arm, self.vm_path = arm, vm_path

    def answer(self, method: str, url: str, headers: Any, body: bytes | None) -> tuple[int, Any]:
        return self.arm._imds_answer(self.vm_path, url, headers)
