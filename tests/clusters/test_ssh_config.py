"""`sky.SSH(hosts=["myalias"])` reads `~/.ssh/config` as every SSH tool does (issue 26 point 7): Host
patterns, HostName, User, Port, IdentityFile, ProxyJump — against real sshd hosts, with a temporary HOME
(never the machine user's ~/.ssh)."""

from __future__ import annotations

import getpass
import textwrap

import pytest

import skyhive as sky
from skyhive.providers.ssh import resolve_host
from skyhive.providers.ssh_config import HostConfig, lookup


@pytest.fixture
def home(tmp_path, monkeypatch):
    (tmp_path / ".ssh").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def write_config(home, text: str) -> None:
    (home / ".ssh" / "config").write_text(textwrap.dedent(text))


def test_lookup_follows_ssh_configs_rules(home):
    write_config(home, """\
        # the first value of each keyword wins; Host patterns with * ? and !negation
        Host gpu? !gpu9
            HostName 10.0.0.%h
            User trainer
        Host gpu1
            Port 2222
            User ignored-not-first
        Include extra.conf
        Host *
            IdentityFile ~/.ssh/id_pool
            Port 22
        """)
    (home / ".ssh" / "extra.conf").write_text("Host gpu*\n  ProxyJump bastion\nHost bastion\n  HostName 192.0.2.1\n"
                                              "  User jumper\n  Port 2200\n")
    assert lookup("gpu1") == HostConfig(hostname="10.0.0.gpu1", user="trainer", port=2222,
                                        identity_file=str(home / ".ssh" / "id_pool"), proxy_jump="bastion")
    assert lookup("gpu9").user is None and lookup("gpu9").proxy_jump == "bastion"  # negated in the first block
    assert lookup("other") == HostConfig(port=22, identity_file=str(home / ".ssh" / "id_pool"))
    assert lookup("gpu1", None) == HostConfig()  # ssh_config=None: not read
    # resolved for the provider: the entry's own user/port win, then user=/port=, then the file
    (user, addr, port), (key, jump) = resolve_host("gpu1")
    assert (user, addr, port, jump) == ("trainer", "10.0.0.gpu1", 2222, "jumper@192.0.2.1:2200")
    assert resolve_host("me@gpu1:23")[0] == ("me", "10.0.0.gpu1", 23)
    assert resolve_host("gpu1", user="ops", port=2022)[0] == ("ops", "10.0.0.gpu1", 2022)


def test_what_the_config_cannot_say_is_an_error_naming_the_file(home):
    write_config(home, "Host a\n  Port twenty\nHost b\n  ProxyJump j1,j2\nMatch host c\n  User x\n")
    with pytest.raises(ValueError, match="Port 'twenty' for host 'a' is not a number"):
        sky.SSH(hosts=["a"])
    assert lookup("c") == HostConfig()  # a Match block is skipped, not evaluated
    (home / ".ssh" / "config").write_text("Host b\n  ProxyJump j1,j2\n")
    with pytest.raises(ValueError, match="ProxyJump 'j1,j2' .* one jump host is supported"):
        sky.SSH(hosts=["b"])


def whoami() -> str:
    return getpass.getuser()


@pytest.mark.slow
def test_an_alias_from_ssh_config_reaches_the_real_host(home, sshd_host, skyhive_home):
    write_config(home, f"""\
        Host myalias
            HostName {sshd_host.host}
            User {sshd_host.user}
            Port {sshd_host.port}
            IdentityFile {sshd_host.client_key}
        """)
    provider = sky.SSH(hosts=["myalias"], known_hosts=str(sshd_host.known_hosts_path))
    with sky.Pool(provider=provider, nodes=1) as pool:
        assert pool.run(whoami) == sshd_host.user
    assert provider.describe()["hosts"] == ["myalias"]  # `skyhive down` looks the alias up again


@pytest.mark.slow
def test_proxy_jump_goes_through_the_jump_host(home, sshd_host, make_sshd, skyhive_home, tmp_path):
    jump = make_sshd(extra_config=["LogLevel DEBUG1"])  # its log shows the forwarded connection
    known = tmp_path / "known_hosts"
    known.write_text(sshd_host.known_hosts_line + "\n" + jump.known_hosts_line + "\n")
    write_config(home, f"""\
        Host target
            HostName {sshd_host.host}
            Port {sshd_host.port}
            ProxyJump bastion
        Host bastion
            HostName {jump.host}
            Port {jump.port}
        Host *
            User {sshd_host.user}
            IdentityFile {sshd_host.client_key}
        """)
    with sky.Pool(provider=sky.SSH(hosts=["target"], known_hosts=str(known)), nodes=1) as pool:
        assert pool.run(whoami) == sshd_host.user
    assert "direct-tcpip" in jump.log_text() and f"port {sshd_host.port}" in jump.log_text()
