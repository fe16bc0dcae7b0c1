"""A DigitalOcean droplet that ends itself: the self-end script, the boot-time limit and the node token's checks.

DigitalOcean has no per-droplet identity and no scheduled action on a droplet, and a powered-off droplet is
billed like a running one (https://docs.digitalocean.com/products/droplets/details/pricing/): only an API
call deletes one. So a droplet ends itself only when the user gives skyhive a **node token** —
`sky.DigitalOcean(node_token=...)` or ``DIGITALOCEAN_NODE_TOKEN`` — a custom-scoped personal access token
with ``droplet:delete`` (and the scopes DigitalOcean requires with it: ``droplet:read``, ``regions:read``,
``sizes:read``, ``actions:read``, ``image:read``; https://docs.digitalocean.com/reference/api/scopes/).

With one, every droplet's ``user_data`` (`boot_block`, before anything else of the boot script):

- writes the token, as the ``Authorization`` header line curl reads with ``-H @FILE`` (never on a command
  line, never echoed), to `TOKEN_PATH` (root, 0600);
- writes `END_PATH` (root, 0700), the self-end script (`end_script`): it reads the droplet's id from the
  metadata service (``GET http://169.254.169.254/metadata/v1/id``,
  https://docs.digitalocean.com/reference/api/metadata/droplet-properties/) and sends
  ``DELETE https://api.digitalocean.com/v2/droplets/ID`` with the token
  (https://docs.digitalocean.com/reference/api/digitalocean/#tag/Droplets/operation/droplets_destroy);
  204 (or 404: already gone) ends it; a refusal (401/403: token revoked or without ``droplet:delete``) or
  an API it cannot reach falls back to ``shutdown -h now`` — the droplet stops working but bills on, so
  `skyhive ls` still shows it and `skyhive down` finishes it;
- arms the boot-time limit: a transient systemd timer (``systemd-run --on-active=N``, unit `TIMER`) that
  runs the self-end script `boot_limit` seconds after boot. Bootstrap lifts it (`LIMIT_OFF`), and the idle
  watchdog bootstrap starts runs the same script (`SHUTDOWN_COMMAND`).

The exposure, said plainly: ``user_data`` stays readable by every process on the droplet through the metadata
service for the droplet's life, and the token must be in it (the boot-time limit acts before any client has
logged in). A process on any of the pool's droplets can therefore read the token and, with ``droplet:delete``,
**delete any droplet of the account** (DigitalOcean's scopes are per resource type, not per droplet or tag).
That is why skyhive refuses the account's own token as node token, and a token that can read the account
(``account:read``: not a droplet-only token, e.g. a full-access or read-all token), before any create.
"""

from __future__ import annotations

import logging
import math
import shlex
from typing import Any

from ..base import ProvisionError
from .boot import END_SCRIPT, TIMER, TIMER_OFF, install_end_script

__all__ = ["NODE_TOKEN_ENV", "END_PATH", "TOKEN_PATH", "TIMER", "SHUTDOWN_COMMAND", "LIMIT_OFF", "API", "METADATA",
           "end_script", "boot_block", "check_node_token", "warn_cannot_end", "shown"]

log = logging.getLogger(__name__)

#: the environment variable a node token is read from when `DigitalOcean(node_token=)` is not given
NODE_TOKEN_ENV = "DIGITALOCEAN_NODE_TOKEN"
#: the self-end script on the droplet (root, 0700; `boot.py`'s, shared with GCP and Azure)
END_PATH = END_SCRIPT
#: the node token as curl's header line (root, 0600)
TOKEN_PATH = "/etc/skyhive/do-node-token"
#: what the idle watchdog runs (the login user is root on DigitalOcean images; `sudo -n` as everywhere else)
SHUTDOWN_COMMAND = f"sudo -n {END_PATH}"
#: what bootstrap runs to lift the limit: stop the timer; it fails only while the timer stays armed, so a droplet
#: bootstrapped again (no timer left) is fine
LIMIT_OFF = TIMER_OFF
#: DigitalOcean's API and the droplet's metadata service (the script's defaults; a test points its
#: SKYHIVE_DO_API / SKYHIVE_DO_METADATA at a fake)
API = "https://api.digitalocean.com"
METADATA = "http://169.254.169.254"


def end_script() -> str:
    """The self-end script (see the module docstring). It says what it does on stderr (the watchdog's log, the
    journal of the timer's unit), never the token."""
    return f"""#!/bin/sh
# skyhive: delete this droplet through DigitalOcean's API with the pool's scoped node token; power off if refused
api="${{SKYHIVE_DO_API:-{API}}}"
meta="${{SKYHIVE_DO_METADATA:-{METADATA}}}"
token="${{SKYHIVE_DO_TOKEN_FILE:-{TOKEN_PATH}}}"
fallback() {{
    echo "skyhive-end: $1; powering off instead (a powered-off droplet is still billed: skyhive down ends it)" >&2
    exec shutdown -h now
}}
id=$(curl -fsS --max-time 10 "$meta/metadata/v1/id") || fallback "no droplet id from $meta"
case "$id" in ''|*[!0-9]*) fallback "the metadata service answered no droplet id";; esac
[ -r "$token" ] || fallback "no node token at $token"
tries=0
while :; do
    code=$(curl -sS -o /dev/null -w '%{{http_code}}' --max-time 30 -X DELETE -H @"$token" "$api/v2/droplets/$id")
    case "$code" in
        204|404) echo "skyhive-end: droplet $id deleted (HTTP $code)" >&2; exit 0;;
        429|5*|000) tries=$((tries+1)); [ $tries -lt 5 ] || fallback "DELETE droplet $id failed (HTTP $code)";
                    sleep $((tries*5));;
        *) fallback "DELETE droplet $id refused (HTTP $code)";;
    esac
done
"""


def boot_block(token: str, limit: int | None) -> str:
    """The lines put first in a droplet's user data: the token file, the self-end script, and (`limit` seconds,
    None: none) the boot-time limit's timer. The token is written by `printf` from the script's own text
    (cloud-init runs the script as root and does not log it; ``set -x`` is never on)."""
    if any(c in token for c in "\n\r'") or not token.strip():
        raise ProvisionError("digitalocean: the node token holds a newline or quote: not a DigitalOcean token",
                             kind="fatal")
    header = shlex.quote(f"Authorization: Bearer {token.strip()}")
    lines = [f"(umask 077; mkdir -p {shlex.quote(TOKEN_PATH.rsplit('/', 1)[0])} && "
             f"printf '%s\\n' {header} > {TOKEN_PATH})",
             install_end_script(end_script())]
    if limit is not None:
        lines.append(f"systemd-run --unit={TIMER} --on-active={int(limit)}s {END_PATH} >/dev/null 2>&1 || "
                     f"echo 'skyhive: the boot-time limit could not be armed' >&2")
    return "\n".join(lines) + "\n"


def check_node_token(node_token: str, account_token: str | None, call: Any) -> None:
    """Refuse, before anything is created, a node token that must not go on a node: the account's own token,
    one DigitalOcean does not accept (401), one that cannot read droplets (``droplet:read``, required with
    ``droplet:delete``: 403), and one that can read the account (``account:read``: not a droplet-only token).
    `call(path)` sends ``GET path`` with the node token and returns the HTTP status. ``droplet:delete`` itself
    cannot be seen without deleting (DigitalOcean has no call that lists a token's scopes): a token without it
    is found out when a droplet tries to end itself (it powers off instead)."""
    if account_token and node_token.strip() == account_token.strip():
        raise ProvisionError(f"digitalocean: the node token is the account's token (DIGITALOCEAN_ACCESS_TOKEN): a "
                             f"token with full access must never be put on a node (any process there can read "
                             f"it). Create a custom-scoped token with droplet:delete (and its required scopes) "
                             f"and give it as DigitalOcean(node_token=...) or {NODE_TOKEN_ENV}", kind="fatal")
    status = call("/v2/droplets?per_page=1")
    if status == 401:
        raise ProvisionError("digitalocean: the node token is refused by DigitalOcean (401: revoked or mistyped)",
                             kind="fatal")
    if status == 403:
        raise ProvisionError("digitalocean: the node token cannot read droplets (403): create it with the scope "
                             "droplet:delete, which requires droplet:read", kind="fatal")
    if call("/v2/account") < 400:
        raise ProvisionError("digitalocean: the node token can read the account (account:read): it is not a "
                             "droplet-only token (a full-access or read-all token?) and must not be put on a node; "
                             "create one with only droplet:delete and the scopes it requires", kind="fatal")


def warn_cannot_end(pool_id: str) -> None:
    """Say, once per pool, that its droplets cannot end themselves and how to let them."""
    log.warning("digitalocean pool %s: no node token: its droplets cannot end themselves (no boot-time limit, no "
                "idle watchdog); a client killed leaves them running and billed until `skyhive down %s`. Give a "
                "custom-scoped token with droplet:delete as DigitalOcean(node_token=...) or %s to let them delete "
                "themselves (see docs/clouds.md)", pool_id, pool_id, NODE_TOKEN_ENV)


def shown(has_token: bool, limit: int | None, idle: float | None) -> str:
    """What the plan says about the pool's droplets ending themselves (never the token)."""
    if not has_token:
        return ("off: no node token (a droplet cannot end itself; a client killed leaves it running until "
                "skyhive down)")
    parts = [f"{math.ceil(limit / 60)} min after boot" if limit is not None else "none",
             f"idle watchdog {math.ceil(idle / 60)} min" if idle else "no idle watchdog"]
    return f"{'; '.join(parts)} (the droplet deletes itself with the node token; powers off if refused)"
