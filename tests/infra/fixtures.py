"""pytest fixtures for real OpenSSH hosts.

Load them from ``tests/conftest.py`` with either::

    from tests.infra.fixtures import *  # noqa: F401,F403
    # or
    pytest_plugins = ["tests.infra.fixtures"]

Fixtures (each skips with the reason when this machine cannot provide it: not root, no sshd /
ssh-keygen / ip, no namespace privileges; any other failure is a test error, never a pass):

- ``ssh_test_env`` (session): :class:`~tests.infra.sshd.SshTestEnv` — login user, client key pair.
- ``sshd_host`` (session): one :class:`~tests.infra.sshd.Sshd` on 127.0.0.1 and a free port. Shared by
  the whole run: tests that restart it, rotate its key or kill its sessions should use ``make_sshd``.
- ``make_sshd`` (function): ``make_sshd(**Sshd kwargs) -> Sshd``, started; closed after the test.
- ``netns_hosts`` (session): :class:`~tests.infra.netns.NetnsHosts` with 3 namespace hosts.
- ``make_netns_hosts`` (function): ``make_netns_hosts(count=2, **kwargs) -> NetnsHosts``, created;
  torn down after the test (for tests that partition, kill or rotate hosts).
- ``slurm_cluster`` (session): :class:`~tests.infra.slurm.SlurmCluster`, a controller and 2 slurmd nodes
  with 2 fake GPUs each; ``SLURM_CONF`` points at it for the session.
"""

from __future__ import annotations

import os

import pytest

from .netns import NetnsHosts, check_netns_support
from .slurm import SlurmCluster, check_slurm_support
from .sshd import InfraUnavailable, SshTestEnv, Sshd

__all__ = ["ssh_test_env", "sshd_host", "make_sshd", "netns_hosts", "make_netns_hosts", "slurm_cluster"]


@pytest.fixture(scope="session")
def ssh_test_env():
    try:
        env = SshTestEnv.create()
    except InfraUnavailable as e:
        pytest.skip(f"real sshd unavailable: {e}")
    try:
        yield env
    finally:
        env.close()


def _start_sshd(env: SshTestEnv, **kwargs) -> Sshd:
    server = Sshd(env, **kwargs)
    try:
        server.start()
    except BaseException:
        server.close()
        raise
    return server


@pytest.fixture(scope="session")
def sshd_host(ssh_test_env):
    server = _start_sshd(ssh_test_env)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def make_sshd(ssh_test_env):
    servers: list[Sshd] = []

    def make(**kwargs) -> Sshd:
        server = _start_sshd(ssh_test_env, **kwargs)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        errors = []
        for server in reversed(servers):
            try:
                server.close()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]


def _create_netns_hosts(env: SshTestEnv, count: int, **kwargs) -> NetnsHosts:
    try:
        check_netns_support()
    except InfraUnavailable as e:
        pytest.skip(f"network-namespace hosts unavailable: {e}")
    hosts = NetnsHosts(env, count, **kwargs)
    try:
        hosts.create()
    except InfraUnavailable as e:
        hosts.close()
        pytest.skip(f"network-namespace hosts unavailable: {e}")
    except BaseException:
        hosts.close()
        raise
    return hosts


@pytest.fixture(scope="session")
def netns_hosts(ssh_test_env):
    hosts = _create_netns_hosts(ssh_test_env, 3)
    try:
        yield hosts
    finally:
        hosts.close()


@pytest.fixture
def make_netns_hosts(ssh_test_env):
    made: list[NetnsHosts] = []

    def make(count: int = 2, **kwargs) -> NetnsHosts:
        hosts = _create_netns_hosts(ssh_test_env, count, **kwargs)
        made.append(hosts)
        return hosts

    try:
        yield make
    finally:
        errors = []
        for hosts in reversed(made):
            try:
                hosts.close()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture(scope="session")
def slurm_cluster():
    try:
        check_slurm_support()
    except InfraUnavailable as e:
        pytest.skip(f"Slurm test cluster unavailable: {e}")
    cluster = SlurmCluster(2, gpus=2)
    try:
        cluster.create()
    except BaseException:
        cluster.close()
        raise
    before = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.close()
