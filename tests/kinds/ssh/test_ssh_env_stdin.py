"""Secrets and other variables reach SSH workers and bootstrap commands on the command's stdin, never on
a command line (which every user of the host can read in `ps` while the command starts)."""

from __future__ import annotations

import os
import secrets

import asyncssh
import pytest

import skyhive as sky
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = [pytest.mark.anyio]


def read_env(name: str) -> str | None:
    return os.environ.get(name)


async def test_a_secret_reaches_the_worker_and_no_command_line_has_it(sshd_host, monkeypatch):
    token = "s3cr3t-" + secrets.token_hex(8)
    sent: list[str] = []
    original = asyncssh.SSHClientConnection.create_process

    async def recording(self, command=None, *args, **kwargs):
        sent.append(str(command))
        return await original(self, command, *args, **kwargs)

    monkeypatch.setattr(asyncssh.SSHClientConnection, "create_process", recording)
    image = sky.Image(secrets={"SKYHIVE_T_TOKEN": token}, env={"SKYHIVE_T_PLAIN": "it's \"quoted\"\n$HOME"},
                      setup=["test -n \"$SKYHIVE_T_TOKEN\""])  # the bootstrap's setup sees it too
    async with sky.Pool(provider=ssh_for(sshd_host), image=image, output=None) as pool:
        assert await pool.run(read_env, "SKYHIVE_T_TOKEN") == token
        assert await pool.run(read_env, "SKYHIVE_T_PLAIN") == "it's \"quoted\"\n$HOME"  # exactly, not expanded
    assert any("worker.server" in c for c in sent) and any("-c" in c for c in sent), sent  # worker and script
    assert not [c for c in sent if token in c], "a secret was sent on a command line"


def test_names_the_shell_cannot_export_are_refused_naming_them():
    from skyhive.runtime.kinds.ssh.transport import env_stdin

    with pytest.raises(ValueError, match=r"'BAD-NAME'"):
        env_stdin({"OK": "1", "BAD-NAME": "2"})
    assert env_stdin({}) == ("", "")
