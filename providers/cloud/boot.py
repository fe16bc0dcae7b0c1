"""What every cloud node runs at its first boot, and what bootstrap waits for before it looks at the node.

The boot script (GCE ``startup-script`` metadata, Azure ``customData``, DigitalOcean ``user_data``)
installs `uv` (one static binary), so that bootstrap can install the client's Python version when the
image has another (Ubuntu 22.04 has 3.10), then writes a marker. `ready_command` waits for the marker;
for a pool that asked for an accelerator it then runs ``nvidia-smi -L`` and fails, naming the node's
problem, when the driver does not answer, so a GPU pool never turns `ready` on a machine that cannot use
its GPUs.
"""

from __future__ import annotations

import logging
import math
from typing import Any

__all__ = ["BOOT_SCRIPT", "BOOT_MARKER", "BOOT_LIMIT", "BOOT_LIMIT_MIN", "BOOT_LIMIT_MAX", "BOOT_LIMIT_ON",
           "BOOT_LIMIT_OFF", "END_SCRIPT", "TIMER", "TIMER_OFF", "install_end_script", "check_limit", "warn_off", "shown",
           "limit_on", "limited", "ready_command"]

log = logging.getLogger(__name__)

BOOT_MARKER = "/var/lib/skyhive-boot-done"

BOOT_SCRIPT = f"""#!/bin/sh
command -v uv >/dev/null 2>&1 || (curl -LsSf https://astral.sh/uv/install.sh |
    env UV_INSTALL_DIR=/usr/local/bin INSTALLER_NO_MODIFY_PATH=1 sh) || true
touch {BOOT_MARKER}
"""

#: The default boot-time limit (seconds; each cloud provider's `boot_limit` option): a node that no client has
#: bootstrapped within this time of its boot ends itself (docs/clouds.md, "Boot-time limit") — EC2 terminates it
#: (InstanceInitiatedShutdownBehavior); a GCE node deletes its own instance with its service account's token,
#: or shuts down and GCE stops it where it has none or is refused (its disk bills until `skyhive down`); an Azure
#: VM deletes itself with its managed identity (deallocated by its auto-shutdown schedule where the role could not
#: be granted); a DigitalOcean droplet with a node token deletes itself (powers off where refused; without
#: a token it has no limit). Bootstrap lifts it (`BOOT_LIMIT_OFF`, run last, after the node's idle watchdog
#: started), so a client killed between create and bootstrap leaves no running node for longer than this. Long
#: enough for a slow first boot, SSH retries and an environment built at bootstrap; a bootstrap that builds for
#: longer needs a larger `boot_limit`.
BOOT_LIMIT = 3600

#: the bounds of `boot_limit` (seconds): systemd's scheduled shutdown refuses non-root logins in its last 5
#: minutes and a first boot takes minutes, so a shorter limit could end a node before any client got in; Azure's
#: auto-shutdown is a time of day, so a limit past a day would wrap around to an earlier time
BOOT_LIMIT_MIN = 600
BOOT_LIMIT_MAX = 86400


def check_limit(value: Any, where: str) -> int | None:
    """`value` as a boot-time limit in whole seconds (None: off), or `ValueError` naming it and `where`
    (``"AWS(boot_limit=...)"``). None or 0 turn the limit off; anything else must be a number of seconds in
    [`BOOT_LIMIT_MIN`, `BOOT_LIMIT_MAX`]."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: boot_limit must be seconds (a number), or None/0 for no limit, not {value!r}")
    if not BOOT_LIMIT_MIN <= value <= BOOT_LIMIT_MAX:
        raise ValueError(f"{where}: boot_limit={value!r} is outside {BOOT_LIMIT_MIN}..{BOOT_LIMIT_MAX} seconds (a "
                         "node refuses logins in the last 5 minutes before its scheduled shutdown, and Azure's "
                         "auto-shutdown is a time of day); None or 0 turns the limit off")
    return math.ceil(value)


def warn_off(cloud: str, pool_id: str) -> None:
    """Say, once per pool, that its nodes have no boot-time limit (`boot_limit=None`)."""
    log.warning("%s pool %s: boot_limit is off: if this client is killed between create and bootstrap, its nodes "
                "run (and bill) until `skyhive down %s`", cloud, pool_id, pool_id)


def shown(limit: int | None) -> str:
    """The limit as the plan shows it."""
    if limit is None:
        return "off (a client killed before bootstrap leaves its nodes running until skyhive down)"
    minutes = math.ceil(limit / 60)
    return f"{minutes} min after boot (a node no client bootstrapped by then shuts itself down)"


def limit_on(limit: int) -> str:
    """The boot script's line that sets a `limit`-second limit at the node's first boot only (GCE runs a
    startup-script at every boot; the marker is written at the end of the first): systemd's scheduled shutdown
    (whole minutes, rounded up), which outlives the script and refuses non-root logins only in its last 5
    minutes."""
    return (f"[ -e {BOOT_MARKER} ] || shutdown -h +{math.ceil(limit / 60)} "
            "'skyhive: boot-time limit, no client bootstrapped this node' >/dev/null 2>&1 || true")


#: the line for the default limit
BOOT_LIMIT_ON = limit_on(BOOT_LIMIT)

#: what bootstrap runs to lift it (as the login user: `sudo -n`, as the watchdog's `sudo shutdown -h now`); it
#: fails only while a shutdown stays scheduled (systemd-logind's /run/systemd/shutdown/scheduled): a node
#: bootstrapped again (a kept pool's next start) has nothing left to cancel
BOOT_LIMIT_OFF = "sudo -n shutdown -c 2>/dev/null || [ ! -e /run/systemd/shutdown/scheduled ]"

#: Where a node that ends itself through its cloud's API keeps the script that does it (GCP `gcp_end`, Azure
#: `azure_end`, DigitalOcean `do_end` each write their own body there; root, 0700, no secret in it): its idle
#: watchdog runs it, and its boot-time limit is a transient systemd timer, `TIMER`, that runs it
END_SCRIPT = "/usr/local/bin/skyhive-end"
TIMER = "skyhive-boot-limit"
#: what bootstrap runs to lift such a timer: it fails only while the timer stays armed, so a node bootstrapped
#: again (no timer left) is fine
TIMER_OFF = (f"sudo -n systemctl stop {TIMER}.timer 2>/dev/null; "
             f"! systemctl is-active --quiet {TIMER}.timer 2>/dev/null")


def install_end_script(body: str) -> str:
    """The boot-script lines that write `body` to `END_SCRIPT`: root, 0700, replaced whole (a node that boots
    again writes it again), the script's umask left as it was."""
    assert "SKYHIVE_END_EOF" not in body
    return (f"(umask 077; mkdir -p \"$(dirname {END_SCRIPT})\" && cat > {END_SCRIPT}.new <<'SKYHIVE_END_EOF'\n"
            f"{body.rstrip(chr(10))}\nSKYHIVE_END_EOF\nchmod 0700 {END_SCRIPT}.new && mv -f {END_SCRIPT}.new {END_SCRIPT})")


def limited(script: str, limit: int | None = BOOT_LIMIT) -> str:
    """`script` with a `limit`-second boot-time limit set first (before anything that may fail or hang);
    `script` unchanged when `limit` is None (off)."""
    if limit is None:
        return script
    head, _, rest = script.partition("\n")
    return f"{head}\n{limit_on(limit)}\n{rest}"


#: how long a node's first boot may take before bootstrap goes on anyway (seconds)
BOOT_WAIT = 600


def ready_command(gpu: bool, *, driver_wait: int = 600) -> str:
    """The shell command bootstrap runs before it probes the node (see `SSHReach.ready_command`). On a
    GPU node ``nvidia-smi -L`` is retried for `driver_wait` seconds (an image may install its driver at
    first boot), then the command fails naming the problem."""
    wait = (f"i=0; while [ ! -e {BOOT_MARKER} ] && [ $i -lt {BOOT_WAIT} ]; do sleep 1; i=$((i+1)); done; "
            "command -v uv >/dev/null 2>&1 || echo 'skyhive: uv was not installed at boot' >&2")
    if not gpu:
        return wait
    return (wait + f"; i=0; until nvidia-smi -L >/dev/null 2>&1; do i=$((i+1)); if [ $i -ge {driver_wait} ]; then "
            "echo 'skyhive: this GPU node has no working NVIDIA driver (nvidia-smi failed); use an image with "
            "the driver' >&2; exit 3; fi; sleep 1; done")
