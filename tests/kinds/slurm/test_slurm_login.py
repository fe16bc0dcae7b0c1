"""Mode 2: the client drives Slurm through a login node over SSH (a namespace host on the cluster's
bridge running a real sshd, with the cluster's configuration as its /etc/slurm): sbatch/squeue/scancel
and the workers' srun all run there, as the test user."""

from __future__ import annotations

import pytest

import skyhive as sky
from skyhive.providers.ssh import HostKeyChanged
from tests.infra.slurm import LoginHost, SlurmCluster
from tests.kinds.slurm.test_slurm_pool import assert_clean, where

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def login(slurm_cluster: SlurmCluster, ssh_test_env) -> LoginHost:
    return slurm_cluster.login or slurm_cluster.add_login_host(ssh_test_env)


async def test_a_pool_through_a_login_node_runs_on_each_slurm_node(slurm_cluster: SlurmCluster, login: LoginHost) -> None:
    provider = sky.Slurm(login=f"{login.sshd.user}@{login.address}", key=str(login.sshd.client_key))
    async with sky.Pool(provider=provider, nodes=2, name="slurm-login", start_timeout=600) as pool:
        results = await pool.broadcast(where)
        user = slurm_cluster.run("squeue", "-h", "-n", "skyhive-slurm-login", "-o", "%u|%T").stdout.strip()
    assert user == f"{login.sshd.user}|RUNNING"  # submitted on the login node, as its user
    nodes = slurm_cluster.nodes
    assert [(r["host"], r["addrs"]) for r in results] == [(n.name, [n.address]) for n in nodes]
    assert {r["head"] for r in results} == {nodes[0].address}
    # the login node's key was pinned on first contact and carried to the workers' connection
    assert provider.runner.host_key == login.sshd.host_public_key
    assert_clean(slurm_cluster)


async def test_a_login_node_with_another_host_key_is_refused(slurm_cluster: SlurmCluster, login: LoginHost,
                                                             tmp_path) -> None:
    other = tmp_path / "known_hosts"
    key_type, _ = login.sshd.host_public_key.split(maxsplit=1)
    other.write_text(f"{login.address} {key_type} AAAAC3NzaC1lZDI1NTE5AAAAIGw8z5U3QqN2b8yxq6H4l5T1sYy0fW0wYv2oI7m9kP1b\n")
    provider = sky.Slurm(login=f"{login.sshd.user}@{login.address}", key=str(login.sshd.client_key),
                         known_hosts=str(other))
    with pytest.raises(HostKeyChanged, match=login.address):
        async with sky.Pool(provider=provider, nodes=1, name="slurm-badkey"):
            pass
    assert_clean(slurm_cluster)


def _read_env(name: str) -> str | None:
    import os

    return os.environ.get(name)


async def test_a_secret_reaches_the_job_step_and_no_command_line_has_it(slurm_cluster: SlurmCluster,
                                                                        login: LoginHost, monkeypatch) -> None:
    """The step's variables travel on the SSH channel's stdin, read by the login node's shell before it
    execs srun; `ps` on the login node (any user of it) never shows them."""
    import secrets

    import asyncssh

    token = "s3cr3t-" + secrets.token_hex(8)
    sent: list[str] = []
    for name in ("create_process", "create_session"):
        original = getattr(asyncssh.SSHClientConnection, name)

        def recording(original):
            async def record(self, *args, **kwargs):
                command = kwargs.get("command")
                if command is None:
                    command = next((a for a in args if isinstance(a, str)), None)
                sent.append(str(command))
                return await original(self, *args, **kwargs)
            return record

        monkeypatch.setattr(asyncssh.SSHClientConnection, name, recording(original))
    provider = sky.Slurm(login=f"{login.sshd.user}@{login.address}", key=str(login.sshd.client_key))
    image = sky.Image(secrets={"SKYHIVE_T_TOKEN": token}, env={"SKYHIVE_T_PLAIN": "a b'c"})
    async with sky.Pool(provider=provider, nodes=1, image=image, name="slurm-secret", start_timeout=600,
                        output=None) as pool:
        assert await pool.run(_read_env, "SKYHIVE_T_TOKEN") == token
        assert await pool.run(_read_env, "SKYHIVE_T_PLAIN") == "a b'c"
    steps = [c for c in sent if "srun" in c]
    assert steps, sent  # the worker's step was started through the login node
    assert not [c for c in sent if token in c], "a secret was sent on a command line"
    assert_clean(slurm_cluster)
