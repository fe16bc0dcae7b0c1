"""The boot script every cloud node gets (uv) and the readiness check before bootstrap probes a node: a
GPU node whose driver does not answer fails clearly instead of turning `ready`."""

from __future__ import annotations

import subprocess
import types

import anyio
import pytest

from skyhive.errors import BootstrapError
from skyhive.providers.base import SSHReach
from skyhive.providers.cloud.boot import BOOT_MARKER, BOOT_SCRIPT, ready_command
from skyhive.runtime.nodes.transport import CommandResult


def test_the_boot_script_installs_uv_and_marks_the_boot_done():
    assert "astral.sh/uv/install.sh" in BOOT_SCRIPT and "UV_INSTALL_DIR=/usr/local/bin" in BOOT_SCRIPT
    assert BOOT_SCRIPT.rstrip().endswith(f"touch {BOOT_MARKER}")
    assert "nvidia-smi" not in ready_command(gpu=False) and "nvidia-smi -L" in ready_command(gpu=True)


def test_the_gpu_readiness_check_fails_without_a_driver_and_passes_with_one(tmp_path):
    """The real command, run by sh, with the marker present and nvidia-smi missing / present on PATH."""
    marker = tmp_path / "boot-done"
    marker.touch()
    command = ready_command(gpu=True, driver_wait=2).replace(BOOT_MARKER, str(marker))
    env = {"PATH": str(tmp_path / "bin") + ":/usr/bin:/bin"}
    missing = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)
    assert missing.returncode == 3 and "no working NVIDIA driver" in missing.stderr
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    assert subprocess.run(["sh", "-c", command], env=env, capture_output=True).returncode == 0


class _NotReadyTransport:
    """FAKE transport: records commands; the ready command fails as a GPU node without a driver does."""

    def __init__(self) -> None:
        self.reach = SSHReach(host="203.0.113.9", ready_command=ready_command(gpu=True))
        self.where = "203.0.113.9"
        self.commands: list[str] = []

    async def connect(self) -> None:
        pass

    async def run(self, command: str, **kwargs) -> CommandResult:
        self.commands.append(command)
        if command == self.reach.ready_command:
            return CommandResult(command, 3, "", "skyhive: this GPU node has no working NVIDIA driver")
        raise AssertionError(f"bootstrap went on after a failed readiness check: {command[:80]}")


def test_bootstrap_stops_when_the_node_is_not_ready():
    from skyhive.runtime.bootstrap import remote
    from skyhive.runtime.kinds.ssh.shell import SSHShell

    ctx = types.SimpleNamespace(image=None, settings=types.SimpleNamespace(start_timeout=30),
                                log=types.SimpleNamespace(redact=lambda s: s))
    transport = _NotReadyTransport()
    with pytest.raises(BootstrapError, match="not ready \\(exit 3\\).*no working NVIDIA driver"):
        anyio.run(remote._bootstrap, ctx, 0, SSHShell(transport), lambda text: None)
    assert transport.commands == [transport.reach.ready_command]  # no probe, no environment built
