"""What every cloud node runs at its first boot, and what bootstrap waits for before it looks at the node.

The boot script (GCE ``startup-script`` metadata, Azure ``customData``, DigitalOcean ``user_data``)
installs `uv` (one static binary), so that bootstrap can install the client's Python version when the
image has another (Ubuntu 22.04 has 3.10), then writes a marker. `ready_command` waits for the marker;
for a pool that asked for an accelerator it then runs ``nvidia-smi -L`` and fails, naming the node's
problem, when the driver does not answer, so a GPU pool never turns `ready` on a machine that cannot use
its GPUs.
"""

from __future__ import annotations

__all__ = ["BOOT_SCRIPT", "BOOT_MARKER", "ready_command"]

BOOT_MARKER = "/var/lib/skyhive-boot-done"

BOOT_SCRIPT = f"""#!/bin/sh
command -v uv >/dev/null 2>&1 || (curl -LsSf https://astral.sh/uv/install.sh |
    env UV_INSTALL_DIR=/usr/local/bin INSTALLER_NO_MODIFY_PATH=1 sh) || true
touch {BOOT_MARKER}
"""

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
