"""What every cloud node runs at its first boot, and what bootstrap waits for before it looks at the node.

The boot script (GCE ``startup-script`` metadata, Azure ``customData``, DigitalOcean ``user_data``)
installs `uv` (one static binary), so that bootstrap can install the client's Python version when the
image has another (Ubuntu 22.04 has 3.10), then writes a marker. `ready_command` waits for the marker;
for a pool that asked for an accelerator it then runs ``nvidia-smi -L`` and fails, naming the node's
problem, when the driver does not answer, so a GPU pool never turns `ready` on a machine that cannot use
its GPUs.
"""

from __future__ import annotations

__all__ = ["BOOT_SCRIPT", "BOOT_MARKER", "BOOT_LIMIT", "BOOT_LIMIT_ON", "BOOT_LIMIT_OFF", "limited", "ready_command"]

BOOT_MARKER = "/var/lib/skyhive-boot-done"

BOOT_SCRIPT = f"""#!/bin/sh
command -v uv >/dev/null 2>&1 || (curl -LsSf https://astral.sh/uv/install.sh |
    env UV_INSTALL_DIR=/usr/local/bin INSTALLER_NO_MODIFY_PATH=1 sh) || true
touch {BOOT_MARKER}
"""

#: The boot-time limit (seconds): a node that no client has bootstrapped within this time of its boot shuts
#: itself down — on EC2 it terminates (InstanceInitiatedShutdownBehavior), on GCE it stops (the machine stops
#: costing; its disk waits for `skyhive down`). Bootstrap lifts it (`BOOT_LIMIT_OFF`, run last, after the
#: node's idle watchdog started), so a client killed between create and bootstrap leaves no running node for
#: longer than this. Long enough for a slow first boot, SSH retries and an environment built at bootstrap.
BOOT_LIMIT = 3600

#: the boot script's line that sets the limit at the node's first boot only (GCE runs a startup-script at every
#: boot; the marker is written at the end of the first): systemd's scheduled shutdown, which outlives the
#: script and refuses non-root logins only in its last 5 minutes
BOOT_LIMIT_ON = (f"[ -e {BOOT_MARKER} ] || shutdown -h +{BOOT_LIMIT // 60} "
                 "'skyhive: boot-time limit, no client bootstrapped this node' >/dev/null 2>&1 || true")

#: what bootstrap runs to lift it (as the login user: `sudo -n`, as the watchdog's `sudo shutdown -h now`); it
#: fails only while a shutdown stays scheduled (systemd-logind's /run/systemd/shutdown/scheduled): a node
#: bootstrapped again (a kept pool's next start) has nothing left to cancel
BOOT_LIMIT_OFF = "sudo -n shutdown -c 2>/dev/null || [ ! -e /run/systemd/shutdown/scheduled ]"


def limited(script: str) -> str:
    """`script` with the boot-time limit set first (before anything that may fail or hang)."""
    head, _, rest = script.partition("\n")
    return f"{head}\n{BOOT_LIMIT_ON}\n{rest}"


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
