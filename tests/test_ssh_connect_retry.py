"""A new cloud machine runs before its sshd listens: the first SSH connection is retried for
`SSHReach.connect_retry` seconds (real sshd, started late), and not at all without it."""

from __future__ import annotations

import anyio
import pytest

from skyhive.providers.base import SSHReach
from skyhive.providers.ssh import HostUnreachable
from skyhive.runtime.transport.ssh import SSHTransport
from tests.infra.sshd import find_free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_first_connection_is_retried_until_sshd_listens(ssh_test_env, make_sshd):
    port = find_free_port()
    reach = SSHReach(host="127.0.0.1", port=port, user=ssh_test_env.user.name, key=str(ssh_test_env.client_key.path),
                     connect_retry=30)
    transport = SSHTransport(reach, pool_id="p-retry-ssh")
    connected = anyio.Event()

    async def connect() -> None:
        await transport.connect()
        connected.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(connect)
            await anyio.sleep(1.5)  # refused meanwhile: still retrying, not failed
            assert not connected.is_set()
            make_sshd(port=port)
        assert connected.is_set()
    finally:
        await transport.close()


async def test_without_connect_retry_a_refused_port_fails_at_once(ssh_test_env):
    reach = SSHReach(host="127.0.0.1", port=find_free_port(), user=ssh_test_env.user.name,
                     key=str(ssh_test_env.client_key.path))
    with pytest.raises(HostUnreachable, match="cannot connect"):
        await SSHTransport(reach, pool_id="p-noretry-ssh").connect()
