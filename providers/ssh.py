"""`SSH`: hosts you already have, reached over SSH. Implements `providers.base.Provider`.

Nothing is created or destroyed: `create` names the hosts (node 0, the head, first) and `destroy`
has nothing to do — the node actors stop their detached workers, and `keep_env=False` also removes
the environment bootstrap built on each host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .base import ClusterSpec, NodeHandle, Provider, ProvisionError, SSHReach

__all__ = [
    "SSH",
    "SSHHostReach",
    "SSHError",
    "HostUnreachable",
    "HostKeyChanged",
    "AuthenticationFailed",
    "parse_host",
]


class SSHError(ProvisionError):
    """An SSH host could not be reached or used; the message names the host and the cause."""


class HostUnreachable(SSHError):
    """No SSH connection to the host within the connect timeout (down, wrong address, filtered)."""


class HostKeyChanged(SSHError):
    """The host showed a key other than the pinned one (known_hosts, host_key, or first contact)."""


class AuthenticationFailed(SSHError):
    """The host refused our key for that user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SSHHostReach(SSHReach):
    """`SSHReach` with the SSH provider's connection settings."""

    connect_timeout: float = 10.0
    idle_timeout: float = 600.0
    reconnect_timeout: float = 60.0
    use_agent: bool = False
    keep_env: bool = True


_HOST = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s]+)(?::(?P<port>\d+))?$")


def parse_host(spec: str, *, user: str | None = None, port: int = 22) -> tuple[str | None, str, int]:
    """`host`, `user@host`, `user@host:port`, `[v6addr]:port` -> (user, host, port).

    Raises `ValueError` naming the entry when it is not one of those forms.
    """
    m = _HOST.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"SSH host {spec!r} is not 'host', 'user@host' or 'user@host:port'")
    host = m["host"].strip("[]")
    p = int(m["port"]) if m["port"] else port
    if not 0 < p < 65536:
        raise ValueError(f"SSH host {spec!r}: port {p} is out of range")
    return m["user"] or user, host, p


class SSH(Provider):
    """Your own hosts over SSH: `sky.SSH(hosts=["10.0.0.2", "me@10.0.0.3:2222"], key="~/.ssh/id_ed25519")`.

    - `user`: login user for hosts that do not name one (default: your local user name).
    - `key`: private key file; without it, the default identity files (`~/.ssh/id_*`). The SSH agent
      and `~/.ssh/config` are used only with `use_agent=True` (no config, ever).
    - `known_hosts`: a known_hosts file to check host keys against; without it, each host's key is
      pinned on first contact for the pool's lifetime (a different key on reconnect is refused).
    - `python`: the interpreter on the hosts (must match this Python's major.minor); default: found
      by bootstrap (`python3.X`, then `python3`).
    - `connect_timeout`, `reconnect_timeout` (how long a dropped connection is retried before the
      worker counts as lost), `idle_timeout` (a detached worker with no client exits after this).
    - `keep_env`: keep the environment bootstrap built (so the next pool starts warm). Default True.
    """

    name = "ssh"

    def __init__(self, hosts: list[str] | tuple[str, ...], *, user: str | None = None, key: str | None = None,
                 known_hosts: str | None = None, python: str | None = None, port: int = 22,
                 connect_timeout: float = 10.0, reconnect_timeout: float = 60.0, idle_timeout: float = 600.0,
                 use_agent: bool = False, keep_env: bool = True) -> None:
        if isinstance(hosts, str) or not hosts:
            raise ValueError("SSH(hosts=[...]) needs a non-empty list of hosts")
        self.hosts = tuple(parse_host(h, user=user, port=port) for h in hosts)
        self.user = user
        self.key = key
        self.known_hosts = known_hosts
        self.python = python
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        self.idle_timeout = idle_timeout
        self.use_agent = use_agent
        self.keep_env = keep_env
        for name in ("connect_timeout", "reconnect_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SSH({name}=...) must be > 0")

    def __repr__(self) -> str:
        return f"SSH(hosts={[self._show(h) for h in self.hosts]!r})"

    @staticmethod
    def _show(h: tuple[str | None, str, int]) -> str:
        user, host, port = h
        return (f"{user}@" if user else "") + host + (f":{port}" if port != 22 else "")

    async def create(self, spec: ClusterSpec) -> list[NodeHandle]:
        """Names the first `spec.nodes` hosts (declared in `Provider.create`); nothing is created."""
        if spec.nodes > len(self.hosts):
            raise ProvisionError(
                f"the pool asks for {spec.nodes} nodes but SSH(hosts=...) lists {len(self.hosts)}"
            )
        handles = []
        for i, (user, host, port) in enumerate(self.hosts[: spec.nodes]):
            reach = SSHHostReach(
                host=host, port=port, user=user, key=self.key, known_hosts=self.known_hosts, python=self.python,
                connect_timeout=self.connect_timeout, idle_timeout=self.idle_timeout,
                reconnect_timeout=self.reconnect_timeout, use_agent=self.use_agent, keep_env=self.keep_env,
            )
            handles.append(NodeHandle(node=i, provider_id=f"ssh:{self._show((user, host, port))}",
                                      private_addr=host, reach=reach))
        return handles

    async def destroy(self, handles: list[NodeHandle]) -> None:
        """Nothing to destroy (declared in `Provider.destroy`): the hosts are yours."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "hosts": [self._show(h) for h in self.hosts], "key": self.key,
                "known_hosts": self.known_hosts, "python": self.python}
