"""`SSH`: hosts you already have, reached over SSH. Implements `providers.base.Provider`.

Nothing is created or destroyed: `create` names the hosts (node 0, the head, first); when a pool
closes, its node actors stop their detached workers (and `keep_env=False` also removes the environment
bootstrap built on each host), so `destroy` of the handles `create` returned has nothing to do.

After a client that died without closing its pool (`skyhive down`), `list_owned(pool_id)` logs in to
each host the pool used and finds what of that pool still runs there — the detached workers keep
running until their idle timeout, by design, so that a dropped connection can resume — and
`destroy` of those handles stops it: the login user's processes whose environment (`COMPUTE_POOL`,
which holds the pool id) or command line (the worker's socket path, named after the pool) says they
belong to the pool get SIGTERM, then SIGKILL, and the pool's sockets (with their `.log`/`.exit`
files) are removed, and the directories of its collections' forwarded sockets (`ssh_sweep.collections_prefix`)
that no live sshd forward still serves. Other pools' workers are never touched. Both are one shell script per host
(`ssh_sweep.py`), run over SSH with the pool's settings (key, `known_hosts`, no agent, no `~/.ssh/config`).
"""

from __future__ import annotations

import asyncio
import copy
import getpass
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio

from ..errors import AuthenticationFailed, HostKeyChanged, HostUnreachable, SSHError
from .ssh_config import DEFAULT_CONFIG, parse_host, resolve_host
from .features import Feature, Features
from .base import (
    SSH_CONNECT_TIMEOUT,
    SSH_IDLE_TIMEOUT,
    SSH_RECONNECT_TIMEOUT,
    ClusterSpec,
    NodeHandle,
    Provider,
    ProvisionError,
    SSHReach,
)
from .ssh_sweep import sweep_report, sweep_script

__all__ = [
    "SSH",
    "SSHError",
    "HostUnreachable",
    "HostKeyChanged",
    "AuthenticationFailed",
    "parse_host",
    "resolve_host",
    "connect_ssh",
]

log = logging.getLogger("skyhive.providers.ssh")


async def connect_ssh(*, host: str, port: int, user: str, key: str | None, known_hosts: Any, use_agent: bool,
                      connect_timeout: float, key_source: str, **options: Any) -> Any:
    """An isolated asyncssh connection, its failures mapped to `SSHError` subclasses naming the host.

    Isolated: no `~/.ssh/config`; the agent only with `use_agent`; only `key` (else the default
    identity files). `known_hosts` is what asyncssh takes (a path, imported keys, or None to accept
    the first key); `key_source` says where the expected key came from, for `HostKeyChanged`.
    `options` go to `asyncssh.connect` as they are (ciphers, keepalives, a client factory).
    Used by the SSH provider (sweeps for `skyhive down`) and the SSH transport (the pool's connection).
    """
    from .sshlib import asyncssh
    where = f"{user}@{host}" + (f":{port}" if port != 22 else "")
    kwargs: dict[str, Any] = dict(
        host=host, port=port, username=user, known_hosts=known_hosts, config=None,
        agent_path=() if use_agent else None, connect_timeout=connect_timeout, login_timeout=connect_timeout,
        **options,
    )
    if key:
        kwargs["client_keys"] = [os.path.expanduser(key)]
    try:
        with anyio.fail_after(connect_timeout + 1):
            return await asyncssh.connect(**kwargs)
    except asyncssh.HostKeyNotVerifiable as exc:
        raise HostKeyChanged(
            f"host {where}: its host key does not match {key_source} ({exc}); refusing to connect. "
            "If the host was reinstalled on purpose, update the pinned key.", host=host,
        ) from None
    except asyncssh.PermissionDenied as exc:
        raise AuthenticationFailed(
            f"host {where}: authentication failed for user {user} "
            f"with {'key ' + key if key else 'the default keys'} ({exc.reason or exc})", host=host,
        ) from None
    except (TimeoutError, asyncio.TimeoutError):
        raise HostUnreachable(
            f"host {where}: no SSH connection within {connect_timeout:g} s "
            "(host down, wrong address, or a firewall drops the packets)", host=host,
        ) from None
    except (OSError, asyncssh.Error) as exc:
        raise HostUnreachable(f"host {where}: cannot connect: {exc}", host=host) from None


class SSH(Provider):
    """Your own hosts over SSH: `sky.SSH(hosts=["10.0.0.2", "me@10.0.0.3:2222"], key="~/.ssh/id_ed25519")`.

    - `user`: login user for hosts that do not name one (default: your local user name).
    - `key`: private key file; without it, the host's `IdentityFile` in `ssh_config`, else the default
      identity files (`~/.ssh/id_*`). The SSH agent is used only with `use_agent=True`.
    - `ssh_config`: the OpenSSH client configuration read for each host name, as every SSH tool does
      (default `~/.ssh/config`; None: not read): its `HostName`, `User`, `Port`, `IdentityFile` and
      `ProxyJump` (one jump host, itself looked up there; reached with the same key and host-key
      checks). What the host entry itself says (`user@host:port`), then `user=`/`port=`/`key=`, win over
      the file. Nothing else of the file is used (`providers/ssh_config.py`).
    - `known_hosts`: a known_hosts file to check host keys against; without it, each host's key is
      pinned on first contact for the pool's lifetime (a different key on reconnect is refused).
    - `python`: the interpreter on the hosts (must match this Python's major.minor); default: found
      by bootstrap (`python3.X`, then `python3`).
    - `connect_timeout`, `reconnect_timeout` (how long a dropped connection is retried before the
      worker counts as lost), `idle_timeout` (a detached worker with no client exits after this).
    - `keep_env`: keep the environment bootstrap built (so the next pool starts warm). Default True.
    - `volumes`: persistent volumes (a task's `volumes:`): each a directory on the head node's host,
      `~/.skyhive/volumes/NAME`, linked at its mount point (`ssh_volumes.py`).

    Hosts listed beyond the pool's `nodes` are spares: with `Pool(replace_failed=True)` a node lost for
    good is replaced by the next spare not used yet (each host serves a pool once: a lost host is not
    taken again). `sky.SSH(hosts=[a, b, c])` with `nodes=2`: c is the spare.
    """

    @classmethod
    def infra(cls, text: str, parts: Sequence[str], **files: str | None) -> dict[str, Any]:
        """`ssh` (the hosts from --hosts) or `ssh/POOL`: the hosts and key of SkyPilot's SSH Node Pool POOL
        (`~/.sky/ssh_node_pools.yaml`, or `files["ssh_node_pools"]`)."""
        from .ssh_config import ssh_node_pool

        if not parts:
            return {}
        if len(parts) != 1 or not parts[0]:
            raise ValueError(f"{text!r}: expected ssh/POOL, one SSH Node Pool name")
        hosts, options = ssh_node_pool(parts[0], pools_file=files.get("ssh_node_pools"))
        return {"hosts": hosts, "options": options}

    name = "ssh"
    resource_options = {"volumes": "volumes"}  # a directory on the head host, linked at the mount point
    # your hosts (`--hosts`), kept by the ssh kind (whose watchdog on each host runs an autostop hook on the
    # head); a volume is a directory on the head host (`ssh_volumes.py`)
    features = Features(Feature.KEEP, Feature.HOSTS, Feature.AUTOSTOP_HOOK, Feature.VOLUMES)

    def __init__(self, hosts: list[str] | tuple[str, ...], *, user: str | None = None, key: str | None = None,
                 known_hosts: str | None = None, python: str | None = None, port: int = 22,
                 connect_timeout: float = SSH_CONNECT_TIMEOUT, reconnect_timeout: float = SSH_RECONNECT_TIMEOUT,
                 idle_timeout: float = SSH_IDLE_TIMEOUT,
                 use_agent: bool = False, keep_env: bool = True, ssh_config: str | None = DEFAULT_CONFIG,
                 host_options: Sequence[Sequence[str | None]] | None = None, volumes: Sequence[Any] = ()) -> None:
        if isinstance(hosts, str) or not hosts:
            raise ValueError("SSH(hosts=[...]) needs a non-empty list of hosts")
        if host_options is not None and len(host_options) != len(hosts):
            raise ValueError(f"SSH(host_options=...) gives {len(host_options)} entries for {len(hosts)} hosts")
        self.ssh_config = ssh_config
        self._specs = tuple(hosts)
        # per resolved host: its own key (IdentityFile) and jump host (ProxyJump), from ssh_config, or as
        # resolved before (`host_options`, a named pool's record: its aliases are never looked up again)
        self._via: dict[tuple[str | None, str, int], tuple[str | None, str | None]] = {}
        resolved = []
        for i, h in enumerate(hosts):
            host, via = resolve_host(h, user=user, port=port, ssh_config=ssh_config)
            if host_options is not None:
                own_key, jump = host_options[i]
                via = (own_key or None, jump or None)
            resolved.append(host)
            self._via[host] = via
        self.hosts = tuple(resolved)
        self.user = user
        self.key = key
        self.known_hosts = known_hosts
        self.python = python
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        self.idle_timeout = idle_timeout
        self.use_agent = use_agent
        self.keep_env = keep_env
        self._given: dict[str, set[int]] = {}  # pool id -> indices of the hosts handed out to it
        self.volumes: tuple[Any, ...] = ()
        if volumes:  # (a pool without volumes does not import them)
            from .volumes import mounts_of

            self.volumes = mounts_of(volumes)
        for name in ("connect_timeout", "reconnect_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SSH({name}=...) must be > 0")

    def __repr__(self) -> str:
        return f"SSH(hosts={[self._show(h) for h in self.hosts]!r})"

    def resolved(self) -> tuple[list[str], list[tuple[str | None, str | None]]]:
        """The hosts as `ssh_config` resolved them, once, when this provider was made (`ssh -G ALIAS`'s
        HostName, Port, User: `user@address:port`, every part written out) and per host its
        (IdentityFile, ProxyJump): what a named pool records, so that every later command reaches the
        same hosts however the file changes (`SSH(hosts, ssh_config=None, host_options=...)`)."""
        hosts = []
        for user, addr, port in self.hosts:
            where = f"[{addr}]" if ":" in addr else addr
            hosts.append(f"{user or getpass.getuser()}@{where}:{port}")
        return hosts, [self._via.get(h, (None, None)) for h in self.hosts]

    @staticmethod
    def _show(h: tuple[str | None, str, int]) -> str:
        user, host, port = h
        return (f"{user}@" if user else "") + host + (f":{port}" if port != 22 else "")

    #: a host (user, address, port) as the user wrote it: `user@host:port` (the SSH kind names hosts so)
    show_host = _show

    @property
    def host_specs(self) -> tuple[Any, ...]:
        """The hosts as given (before `ssh_config` resolved them): what a kept pool's provider is rebuilt from."""
        return self._specs

    async def sweep_host(self, host: tuple[str | None, str, int], script: str) -> str:
        """Run the shell `script` on `host` (one SSH command, no worker): its output."""
        return await self._sweep(host, script)

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """Names the hosts for these node indices, in list order (declared in `Provider.launch`);
        nothing is created."""
        if spec.nodes > len(self.hosts):
            raise ProvisionError(
                f"the pool asks for {spec.nodes} nodes but SSH(hosts=...) lists {len(self.hosts)}"
            )
        given = self._given.setdefault(spec.pool_id, set())
        handles = []
        for i in nodes:
            host = i if i not in given else self._spare(spec, i, given)
            given.add(host)
            handles.append(self._handle(i, self.hosts[host]))
            if i == 0 and self.volumes:  # the head node's host keeps the volumes, linked before its workers start
                from . import ssh_volumes

                await ssh_volumes.link_all(self, self.hosts[host], self.volumes)
        return handles

    def find_volume(self, name: str) -> Any:
        """See `Provider.find_volume` (a directory on the host that made it, `ssh_volumes.py`)."""
        from . import ssh_volumes

        return _blocking(lambda: ssh_volumes.find(self, name))

    def delete_volume(self, name: str) -> None:
        """See `Provider.delete_volume` (the directory and its link, on their host: `ssh_volumes.py`)."""
        from . import ssh_volumes

        _blocking(lambda: ssh_volumes.delete(self, name))

    def _spare(self, spec: ClusterSpec, node: int, given: set[int]) -> int:
        """The first spare host (listed beyond `spec.nodes`) not handed out yet, for node `node`."""
        for j in range(spec.nodes, len(self.hosts)):
            if j not in given:
                return j
        spares = [self._show(h) for h in self.hosts[spec.nodes:]]
        raise ProvisionError(
            f"node {node}: no spare host left to replace it: SSH(hosts=...) lists {len(self.hosts)} hosts for "
            f"{spec.nodes} nodes" + (f", and its spares ({', '.join(spares)}) are all used" if spares
                                    else " and no spare (list more hosts than nodes to have spares)"),
            node=node, kind="capacity")

    def released(self, pool_id: str, handles: Sequence[NodeHandle]) -> None:
        """See `Provider.released`: the hosts of these nodes may be handed out to the pool again."""
        given = self._given.get(pool_id)
        if given is None:
            return
        for handle in handles:
            if isinstance(handle.reach, SSHReach):
                host = self._host_of(handle)
                given.difference_update(i for i, h in enumerate(self.hosts) if h == host)

    def avoiding(self, lost: Sequence[NodeHandle]) -> SSH:
        """This provider with the hosts of the `lost` nodes moved to the end of the list (declared in
        `Provider.avoiding`): a new pool takes the other hosts first and a lost host only when nothing
        else is left. Handles that are not this provider's SSH hosts are ignored."""
        bad = {self._host_of(h) for h in lost if isinstance(h.reach, SSHReach)}
        if not bad & set(self.hosts):
            return self
        order = ([i for i, h in enumerate(self.hosts) if h not in bad]
                 + [i for i, h in enumerate(self.hosts) if h in bad])
        other = copy.copy(self)
        other.hosts = tuple(self.hosts[i] for i in order)
        other._specs = tuple(self._specs[i] for i in order)
        other._given = {}
        return other

    def for_nodes(self, nodes: int) -> SSH:
        """This provider with only the hosts a pool of `nodes` nodes used (the first ones), for `skyhive
        down`: hosts a pool never used hold nothing of it, and need not be reachable to clean it up.
        (A pool that replaced nodes used spares too, in list order: `skyhive down` counts them in.)"""
        if not 0 < nodes < len(self.hosts):
            return self
        other = copy.copy(self)
        other.hosts = self.hosts[:nodes]
        other._specs = self._specs[:nodes]
        return other

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        """The hosts where something of `pool_id` is left (declared in `Provider.list_owned`).

        Logs in to each host (at once, each within `connect_timeout`) and finds the pool's processes
        and sockets; a handle per host that has any, with `extra` = {"pool_id", "pids", "files"}. A host
        that cannot be reached or used gets a handle too, with `extra["error"]` saying why: what runs
        there is unknown, and `destroy` tries it again (and raises if it still fails).
        """
        script = sweep_script(pool_id, "list", 0)
        handles: list[NodeHandle] = []

        async def visit(index: int, host: tuple[str | None, str, int]) -> None:
            handle = self._handle(index, host)
            extra: dict[str, Any] = {"pool_id": pool_id}
            try:
                out = await self._sweep(host, script)
            except SSHError as exc:
                extra["error"] = str(exc)
            else:
                pids = [int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("P ")]
                files = [ln[2:] for ln in out.splitlines() if ln.startswith("F ")]
                if not pids and not files:
                    return
                extra.update(pids=pids, files=files)
                log.info("host %s: pool %s: processes %s, files %s", self._show(host), pool_id, pids, files)
            handles.append(replace(handle, extra=extra))

        async with anyio.create_task_group() as tg:
            for index, host in self._distinct_hosts():
                tg.start_soon(visit, index, host)
        return sorted(handles, key=lambda h: h.node)

    async def sweep_lost(self, pool_id: str, lost: Sequence[NodeHandle]) -> None:
        """See `Provider.sweep_lost`: on each lost node's host, the pool's processes (its dead worker's
        orphaned programs) and sockets, as `terminate` stops what `list_owned` found — that host only
        (the pool's other hosts run on). Raises `SSHError` naming a host it could not clean."""
        mine = [replace(h, extra={**h.extra, "pool_id": pool_id}) for h in lost if isinstance(h.reach, SSHReach)]
        if mine:
            await self.terminate(mine)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        """Stop what `list_owned` found (declared in `Provider.terminate`); idempotent.

        Handles from `launch` carry no pool id: the hosts are yours and the node actors stopped the
        workers, so there is nothing to do. For each handle from `list_owned`, on its host: SIGTERM to
        the pool's processes, SIGKILL to what is left 3 s later (and to any of the pool's processes
        that appeared meanwhile), then the pool's sockets removed. Raises `SSHError` naming every host
        where that failed (unreachable, or a process that would not die) and why.
        """
        todo = [h for h in handles if h.extra.get("pool_id")]
        failures: list[str] = []

        async def clean(handle: NodeHandle) -> None:
            pool_id = str(handle.extra["pool_id"])
            host = self._host_of(handle)
            where = self._show(host)
            try:
                out = await self._sweep(host, sweep_script(pool_id, "kill", 3.0))
            except SSHError as exc:
                failures.append(str(exc))
                return
            killed, left, removed = sweep_report(out)
            log.info("host %s: pool %s: stopped processes %s, removed %s", where, pool_id, killed, removed)
            if left:
                failures.append(f"host {where}: processes {', '.join(left)} of pool {pool_id} are still there "
                                f"after SIGKILL (stuck in the kernel?)")

        async with anyio.create_task_group() as tg:
            for handle in todo:
                tg.start_soon(clean, handle)
        if failures:
            pool_ids = sorted({str(h.extra["pool_id"]) for h in todo})
            again = (f"; run `skyhive down {pool_ids[0]}` again once that is fixed (`skyhive ls` "
                     f"lists the pool until it is cleaned up)") if len(pool_ids) == 1 else ""
            raise SSHError(
                f"pool {', '.join(pool_ids)}: could not clean up on " + "; ".join(failures)
                + f". A detached worker with no client exits by itself after its idle timeout "
                f"({self.idle_timeout:g} s){again}.",
                host=self._host_of(todo[0])[1] if todo else None,
            )

    # ---- cleanup over SSH ------------------------------------------------------------------------------

    def _distinct_hosts(self) -> list[tuple[int, tuple[str | None, str, int]]]:
        seen: dict[tuple[str, str, int], int] = {}
        out = []
        for index, (user, host, port) in enumerate(self.hosts):
            key = (user or getpass.getuser(), host, port)
            if key not in seen:
                seen[key] = index
                out.append((index, (user, host, port)))
        return out

    def _key_and_jump(self, host: tuple[str | None, str, int]) -> tuple[str | None, str | None]:
        """The key to log in to `host` with (`key=`, else its IdentityFile) and its jump host, if any."""
        own_key, jump = self._via.get(host, (None, None))
        return self.key or own_key, jump

    def _handle(self, index: int, host: tuple[str | None, str, int]) -> NodeHandle:
        user, addr, port = host
        key, jump = self._key_and_jump(host)
        reach = SSHReach(
            host=addr, port=port, user=user, key=key, proxy_jump=jump, known_hosts=self.known_hosts, python=self.python,
            connect_timeout=self.connect_timeout, idle_timeout=self.idle_timeout,
            reconnect_timeout=self.reconnect_timeout, use_agent=self.use_agent, keep_env=self.keep_env,
        )
        return NodeHandle(node=index, provider_id=f"ssh:{self._show(host)}", private_addr=addr, reach=reach)

    @staticmethod
    def _host_of(handle: NodeHandle) -> tuple[str | None, str, int]:
        reach = handle.reach
        assert isinstance(reach, SSHReach)
        return reach.user, reach.host, reach.port

    def _sweep_known_hosts(self, host: tuple[str | None, str, int]) -> Any:
        """What a cleanup login checks the host's key against (None: the key the host shows)."""
        return os.path.expanduser(self.known_hosts) if self.known_hosts else None

    def _sweep_key_source(self, host: tuple[str | None, str, int]) -> str:
        """Where the key a cleanup login checks came from, for `HostKeyChanged`."""
        return f"known_hosts {self.known_hosts}"

    async def _sweep(self, host: tuple[str | None, str, int], script: str) -> str:
        """Run the sweep `script` on `host`; its stdout. Raises `SSHError` subclasses naming the host."""
        from .sshlib import asyncssh
        user, addr, port = host
        user = user or getpass.getuser()
        where = self._show((user, addr, port))
        # the pool's own check: its known_hosts file; without one the pool pinned each host's key on
        # first contact and that key is not kept, so this login takes the key the host shows
        key, jump = self._key_and_jump(host)
        tunnel = None
        if jump is not None:  # the jump host is checked as the host is: the pool's known_hosts, else first contact
            j_user, j_addr, j_port = parse_host(jump)
            tunnel = await connect_ssh(
                host=j_addr, port=j_port, user=j_user or getpass.getuser(), key=key, use_agent=self.use_agent,
                known_hosts=self._sweep_known_hosts(host), connect_timeout=self.connect_timeout,
                key_source=f"known_hosts {self.known_hosts}")
        try:
            conn = await connect_ssh(
                host=addr, port=port, user=user, key=key, use_agent=self.use_agent,
                known_hosts=self._sweep_known_hosts(host), connect_timeout=self.connect_timeout,
                key_source=self._sweep_key_source(host), **({"tunnel": tunnel} if tunnel is not None else {}))
        except BaseException:
            if tunnel is not None:
                tunnel.close()
            raise
        try:
            async with conn:
                with anyio.fail_after(60):
                    result = await conn.run("sh -s", input=script, check=False)
        except (TimeoutError, asyncio.TimeoutError):
            raise SSHError(f"host {where}: the cleanup did not finish within 60 s", host=addr) from None
        except (OSError, asyncssh.Error) as exc:
            raise SSHError(f"host {where}: the cleanup failed: {exc}", host=addr) from None
        finally:
            if tunnel is not None:
                tunnel.close()
        stdout = str(result.stdout or "")
        if result.exit_status not in (0, 1) or (result.exit_status == 1 and "\nL " not in "\n" + stdout):
            raise SSHError(f"host {where}: the cleanup script failed (exit {result.exit_status}): "
                           f"{str(result.stderr or '').strip()[-1000:]}", host=addr)
        return stdout

    def describe(self) -> dict[str, Any]:
        # the hosts as given (an ssh_config alias is looked up again when `skyhive down` rebuilds this)
        desc = {"provider": self.name, "hosts": [str(h) for h in self._specs], "key": self.key,
                "known_hosts": self.known_hosts, "python": self.python, "use_agent": self.use_agent,
                "connect_timeout": self.connect_timeout, "idle_timeout": self.idle_timeout,
                "ssh_config": self.ssh_config}
        if self.volumes:
            desc["volumes"] = [[v.target, v.name, v.size_gb] for v in self.volumes]
        return desc


def _blocking(make: Any) -> Any:
    """Run the coroutine `make()` to its end from synchronous code (`skyhive volumes`), on an event loop of
    its own in a thread (so that it also works when called from inside a running loop)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="skyhive-ssh") as pool:
        return pool.submit(anyio.run, make).result()
