"""A 300 KiB `run:` script on a real OpenSSH host (issue 36 point 9): the node's side of `launch`
(`nodecmd.run_script`, what every task path — launch, a named pool's agent, a managed job — calls on
each node) runs it from a private file there, not as one 128 KiB-limited argument, and removes the file."""

from __future__ import annotations

import pytest

import skyhive as sky
from skyhive.runtime.onnode import nodecmd
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def scripts_left() -> list[str]:
    from skyhive.paths import state_dir

    folder = state_dir() / "scripts"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def test_a_300_kib_run_script_on_an_ssh_host(sshd_host):
    out = sshd_host.home / "long-script.out"  # (the host shares this machine's filesystem)
    line = "# " + "x" * 78 + "\n"
    script = line * (300 * 1024 // len(line) + 1) + 'echo "run ok $SKYPILOT_NODE_RANK" > "$OUT_FILE"\nexit 7\n'
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1) as pool:
        home = str(sshd_host.home)
        code = await pool.run(nodecmd.run_script, home, script, "task-1", "run",
                              task_env={"OUT_FILE": str(out)})
        try:
            assert code == 7  # the script ran to its end: its own exit status
            assert out.read_text() == "run ok 0\n"
        finally:
            out.unlink(missing_ok=True)
        assert await pool.run(scripts_left) == []  # its file removed
