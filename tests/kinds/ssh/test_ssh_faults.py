"""A host that vanishes mid-pool (everything in its namespace killed, the namespace deleted) fails its node
with an error naming the host. (An sshd restarted mid-task, which the pool survives, is in
test_ssh_resume.py; a vanished host replaced by a spare with `replace_failed=True` in test_ssh_replace.py.)"""

from __future__ import annotations

import anyio
import pytest

import skyhive as sky
from tests.kinds.ssh.test_ssh_pool import ssh_for
from tests.kinds.ssh.test_ssh_resume import quick

pytestmark = pytest.mark.anyio


async def test_a_host_that_vanishes_fails_its_node_naming_it(make_netns_hosts):
    """Everything in the host's namespace is killed and the namespace deleted (a machine gone): the next
    call on it raises WorkerLost naming that host."""
    import os
    import signal
    import subprocess

    hosts = make_netns_hosts(2)
    async with sky.Pool(provider=ssh_for(hosts, connect_timeout=3, reconnect_timeout=5), nodes=2,
                        output=None) as pool:
        assert await pool.broadcast(quick, 1) == [2, 2]
        gone = hosts[1]
        pids = subprocess.run(["ip", "netns", "pids", gone.netns], capture_output=True, text=True).stdout.split()
        assert pids, f"nothing runs in {gone.netns}?"
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", gone.netns], check=True)
        with anyio.fail_after(60), pytest.raises(sky.WorkerLost, match=gone.host):
            await pool.broadcast(quick, 2, timeout=30)
