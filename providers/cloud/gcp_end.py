"""How a GCE node ends itself: it deletes its own instance through the Compute Engine API with its own
service account's token, and falls back to a guest shutdown (GCE then *stops* it) when that is refused.

The startup-script writes `END_SCRIPT` (root-owned, 0700) on the node at every boot; the node's idle
watchdog runs it (`shutdown_command`), and the boot-time limit runs it from a systemd timer set at the first
boot (`limit_on`). The script, in ``sh`` with ``curl``:

1. asks the VM's metadata server (``http://metadata.google.internal/computeMetadata/v1/``, header
   ``Metadata-Flavor: Google``) for the project (``project/project-id``), the zone (``instance/zone``,
   ``projects/NUMBER/zones/ZONE``), the instance's name (``instance/name``) and an access token of the
   instance's service account (``instance/service-accounts/default/token``:
   https://cloud.google.com/compute/docs/access/authenticate-workloads#applications,
   https://cloud.google.com/compute/docs/metadata/predefined-metadata-keys);
2. sends ``DELETE https://compute.googleapis.com/compute/v1/projects/P/zones/Z/instances/NAME``
   (https://cloud.google.com/compute/docs/reference/rest/v1/instances/delete), the token in a header read
   from curl's stdin (never on a command line, never printed); the boot disk goes with the instance
   (``autoDelete: true``);
3. when any of that fails — no service account (the metadata server answers 404), a token without a compute
   scope (403 ``ACCESS_TOKEN_SCOPE_INSUFFICIENT``), a service account without ``compute.instances.delete``
   (403 ``forbidden``: the default compute service account has the Editor role only where the project's
   organization does not enforce ``iam.automaticIamGrantsForDefaultServiceAccounts``,
   https://cloud.google.com/compute/docs/access/service-accounts#default_service_account) — it runs
   ``shutdown -h now``: GCE stops the instance (its machine stops billing; its disk until `skyhive down`).

The instance is created with the service account `SERVICE_ACCOUNT` ("default": the project's default
compute service account) and the one scope `SCOPE` (``compute``, read-write: the narrowest access scope that
allows ``instances.delete``; ``compute.readonly`` does not, and ``cloud-platform`` leaves everything to IAM:
https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam). A pool that keeps its disks
(`keep`) gets a script that only shuts the guest down (a stop), as before.

Attaching a service account needs ``iam.serviceAccounts.actAs`` on it for whoever creates the instance
(roles/iam.serviceAccountUser; Owner and Editor have it, Compute Instance Admin alone does not:
https://cloud.google.com/compute/docs/access/create-enable-service-accounts-for-instances,
https://cloud.google.com/compute/docs/access/iam). GCE refuses an insert without it in one of two shapes
(`act_as_refused`): the call answers 400 ``badRequest`` "The user does not have access to service account
'EMAIL'.  User: 'CALLER'.  Ask a project owner to grant you the iam.serviceAccountUser role on the service
account", or the insert's operation fails with code `ACT_AS_CODE`. `sky.GCP` then creates the pool's nodes
without the default account (`without_account_warning`); an account the user named by its email stays
required (`act_as_error`).

The shipped base URLs are the real ones; ``SKYHIVE_GCE_METADATA`` and ``SKYHIVE_GCE_API`` in the script's
environment replace them (the tests point them at a fake on 127.0.0.1).
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import CloudAPIError
from .boot import BOOT_MARKER, END_SCRIPT, TIMER, TIMER_OFF, install_end_script

__all__ = ["END_SCRIPT", "SCOPE", "SERVICE_ACCOUNT", "TIMER", "end_script", "limit_on",
           "startup_script", "service_accounts", "SHUTDOWN_COMMAND", "LIMIT_OFF", "ACT_AS", "ACT_AS_CODE",
           "act_as_refused", "act_as_error", "without_account_warning"]

#: the access scope the instance's service account is given: read-write Compute Engine, nothing else
SCOPE = "https://www.googleapis.com/auth/compute"
#: the service account attached by default ("default": the project's default compute service account)
SERVICE_ACCOUNT = "default"

METADATA = "http://metadata.google.internal"
API = "https://compute.googleapis.com"

#: what the idle watchdog runs (as the login user); a node whose startup-script never wrote the script
#: shuts down as before
SHUTDOWN_COMMAND = f"sudo -n {END_SCRIPT} || sudo shutdown -h now"

#: what bootstrap runs last to lift the boot-time limit: stops the timer (and a shutdown a node without
#: systemd-run scheduled instead); it fails only while either stays armed, so a node bootstrapped again
#: (nothing left to cancel) is not harmed
LIMIT_OFF = f"sudo -n shutdown -c 2>/dev/null; {TIMER_OFF} && [ ! -e /run/systemd/shutdown/scheduled ]"


def end_script(*, keep: bool = False) -> str:
    """The self-end script (see the module docstring); with `keep`, one that only shuts the guest down."""
    fallback = "exec shutdown -h now 'skyhive: this node ends itself'"
    if keep:
        return f"#!/bin/sh\n# skyhive: this pool keeps its disks: a guest shutdown (GCE stops the VM)\n{fallback}\n"
    return f"""#!/bin/sh
# skyhive: this node deletes its own instance (its boot disk with it); a guest shutdown when refused
md="${{SKYHIVE_GCE_METADATA:-{METADATA}}}/computeMetadata/v1"
api="${{SKYHIVE_GCE_API:-{API}}}/compute/v1"
ask() {{ curl -sf --noproxy '*' --max-time 10 -H 'Metadata-Flavor: Google' "$md/$1"; }}
project=$(ask project/project-id) && zone=$(ask instance/zone) && name=$(ask instance/name) &&
    token=$(ask instance/service-accounts/default/token | sed -n 's/.*"access_token" *: *"\\([^"]*\\)".*/\\1/p')
if [ -n "$project" ] && [ -n "$zone" ] && [ -n "$name" ] && [ -n "$token" ]; then
    code=$(printf 'Authorization: Bearer %s\\n' "$token" | curl -s --max-time 60 -o /dev/null -w '%{{http_code}}' \\
        -H @- -X DELETE "$api/projects/$project/zones/${{zone##*/}}/instances/$name")
    if [ "$code" = 200 ]; then
        echo "skyhive-end: deleting instance $name in ${{zone##*/}}" >&2
        exit 0
    fi
    echo "skyhive-end: the delete of instance $name was refused (HTTP $code); shutting down (GCE stops it)" >&2
else
    echo "skyhive-end: no service account token or instance identity from the metadata server; shutting down" >&2
fi
{fallback}
"""


def limit_on(limit: int) -> str:
    """The line that arms a `limit`-second boot-time limit at the first boot only (GCE runs the
    startup-script at every boot; `BOOT_MARKER` is written at the end of the first): a systemd timer that runs
    `END_SCRIPT`; where ``systemd-run`` fails, systemd's scheduled shutdown (a stop) as before."""
    return (f"[ -e {BOOT_MARKER} ] || systemd-run --quiet --unit={TIMER} --on-active={limit}s {END_SCRIPT} "
            f">/dev/null 2>&1 || shutdown -h +{math.ceil(limit / 60)} "
            "'skyhive: boot-time limit, no client bootstrapped this node' >/dev/null 2>&1 || true")


def startup_script(base: str, limit: int | None, *, keep: bool = False) -> str:
    """`base` (the boot script) with the self-end script written and the boot-time limit armed first
    (before anything that may fail or hang); no limit line when `limit` is None."""
    head, _, rest = base.partition("\n")
    armed = f"{limit_on(limit)}\n" if limit is not None else ""
    return f"{head}\n{install_end_script(end_script(keep=keep))}\n{armed}{rest}"


def service_accounts(email: str | None) -> list[dict[str, Any]]:
    """The insert body's ``serviceAccounts``: `email` with `SCOPE`; none when `email` is None (the node then
    has no token and its self-end script falls back to a shutdown)."""
    return [] if email is None else [{"email": email, "scopes": [SCOPE]}]


#: the permission the creator of an instance needs on the service account it attaches
ACT_AS = "iam.serviceAccounts.actAs"
#: the insert operation's error code when the creator lacks `ACT_AS` (the call itself answered 200)
ACT_AS_CODE = "SERVICE_ACCOUNT_ACCESS_DENIED"
#: what the refusal's message says when the call itself is refused (400 ``badRequest``), lower case
_ACT_AS_TEXT = ("does not have access to service account", ACT_AS.lower())
_GRANT = ("grant it with `gcloud iam service-accounts add-iam-policy-binding ACCOUNT --member=user:YOU "
          "--role=roles/iam.serviceAccountUser` (serviceAccount:EMAIL for a key's account; or a role that "
          "includes it on the project, as Editor does)")


def act_as_refused(exc: BaseException) -> bool:
    """Whether `exc` is GCE refusing an insert because its caller may not act as the service account it
    attaches: the operation's code `ACT_AS_CODE`, or a 400/403 answer whose message says so."""
    if not isinstance(exc, CloudAPIError):
        return False
    text = exc.message.lower()
    return exc.code == ACT_AS_CODE or (exc.status in (400, 403) and any(t in text for t in _ACT_AS_TEXT))


def act_as_error(account: str, project: str, exc: CloudAPIError) -> CloudAPIError:
    """The error a pool whose named `account` was refused gets: fatal (a permission: no other offer of the
    cloud does better, so 403), naming `ACT_AS`, the account and how to grant it."""
    grant = _GRANT.replace("ACCOUNT", account)
    return CloudAPIError(ACT_AS_CODE, f"creating an instance with service account {account!r} in project "
                         f"{project} needs {ACT_AS} on that account for the credentials skyhive uses: {grant}; or "
                         f"pass GCP(service_account=None) for nodes without a token, which stop instead of deleting "
                         f"themselves ({exc.message})", 403)


def without_account_warning(pool_id: str, project: str) -> str:
    """The warning, once per pool, that its nodes are created without the default service account."""
    return (f"gcp: pool {pool_id}: the credentials skyhive uses lack {ACT_AS} on project {project}'s default "
            f"compute service account, so its nodes are created without a service account: a node that ends itself "
            f"(idle watchdog, boot-time limit) can only stop, not delete itself, and a stopped node's disk bills "
            f"until `skyhive down {pool_id}`. To let nodes delete themselves, "
            f"{_GRANT.replace('ACCOUNT', 'NUMBER-compute@developer.gserviceaccount.com')}")
