"""`SSHCluster`: the SSH hosts of a named pool (`Pool(sky.SSH(...), name=..., keep=True)`, `skyhive launch
-c NAME --provider ssh`), whose detached workers outlive the client.

On each host a worker listens on a socket whose path depends only on the pool, the node and the rank:

    <run dir>/<cluster>/n<node>-w<rank>.sock      run dir: ~/.skyhive/run (bootstrap's), 0700

where `cluster` is `c-<name>-<hash of the client's state directory>` (two state directories may both
have a pool "train" on the same host). So a client that attaches later finds every worker again
without asking anyone, and takes it over (`Hello(takeover=True)`). The workers never leave by
themselves (`idle_timeout` is infinite): the pool ends with `skyhive down NAME` (`down`, below) or
its autostop watchdog.

(The kind's keep support, `keep.py`, makes it; a new pool is made with the `SSH` provider itself, its
running nodes kept by `keep.SSHKeep.keep_handle`; this class reaches a recorded pool's hosts.) What a
later process needs is in the pool's record (`runtime/clusters/record.py`): `describe()` (hosts,
user, key *path*, known_hosts path, python, timeouts — never a secret) and the host key each host showed
(`host_keys`), pinned on every later connection.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....providers.base import SSHReach
from ....providers.ssh import SSH
from ....providers.ssh_sweep import SWEEP, collections_prefix, ere, kept_report, sweep_report
from ....providers.ssh_config import DEFAULT_CONFIG
from ...nodes.keep import cluster_key

log = logging.getLogger("skyhive.ssh")

__all__ = ["SSHCluster", "KeptSSHReach", "cluster_key", "socket_path", "sweep_script", "ATTACH_LOCK", "hold_script",
           "autostop_guard"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptSSHReach(SSHReach):
    """An SSH node of a named pool: its workers serve `<run dir>/<cluster>/n<node>-w<rank>.sock`; with
    `attach` they already run and the client takes them over. `pool` names the pool (in errors)."""

    cluster: str
    pool: str
    attach: bool = False


def socket_path(run_dir: str, cluster: str, node: int, rank: int) -> str:
    """Where worker `rank` of node `node` listens on its host."""
    return f"{run_dir}/{cluster}/n{node}-w{rank}.sock"


#: A file in a named pool's socket directory on a host. A client taking the pool's workers over holds a
#: shared lock on it (`hold_script`) for as long as it is attached; the host's autostop takes an exclusive
#: one without waiting before it stops anything (`autostop_guard`). So autostop never stops a pool in the
#: moment between a client's SSH login and its first connection to a worker's socket (which is all the
#: watchdog counts), and a client attaching while autostop runs waits for it and learns the pool stopped.
ATTACH_LOCK = "attach.lock"

#: Run with the socket directory and the autostop mark: prints "stopped" (autostop stopped the pool
#: here), "gone" (no socket directory) or "held", then holds the shared lock until its stdin closes
#: (the client's SSH connection ends). Without `flock` on the host it holds nothing and says "held".
_HOLD = r"""
[ -e "$2" ] && { echo stopped; exit 0; }
[ -d "$1" ] || { echo gone; exit 0; }
if command -v flock >/dev/null 2>&1; then
  exec flock -s "$1/attach.lock" sh -c '[ -e "$1" ] && { echo stopped; exit 0; }; echo held; exec cat >/dev/null' hold "$2"
fi
echo held
exec cat >/dev/null
"""


def hold_script(sock_dir: str, mark: str) -> str:
    """The command that holds the attach lock of the pool whose sockets are in `sock_dir` (see `_HOLD`)."""
    return f"sh -c {shlex.quote(_HOLD)} hold {shlex.quote(sock_dir)} {shlex.quote(mark)}"


def autostop_guard(sock_dir: str, name: str) -> str:
    """Shell lines that exit 75 (the watchdog's "not now", it watches on) while a client holds the attach
    lock of the pool whose sockets are in `sock_dir`; else they keep the lock, exclusively, until the
    script ends."""
    lock = shlex.quote(f"{sock_dir}/{ATTACH_LOCK}")
    return (f"if [ -d {shlex.quote(sock_dir)} ] && command -v flock >/dev/null 2>&1 && ( : >>{lock} ) 2>/dev/null; then\n"
            f"  exec 9>>{lock}\n"
            f"  flock -n -x 9 || {{ echo {shlex.quote(f'pool {name}: a client is attaching: not now')}; exit 75; }}\n"
            f"fi\n")


def sweep_script(cluster: str, name: str, mode: str, grace: float, *, then: str = "",
                 from_autostop: bool = False, keep_work: bool = False) -> str:
    """The SSH provider's cleanup sweep (`SWEEP`), for the named pool whose socket directory is
    `cluster`: its processes are those whose environment has `SKYHIVE_CLUSTER=<.../cluster>` (the
    workers and everything their jobs started) or whose command line names one of its sockets; its
    files are the socket directory, the autostop watchdog's directory (`<cluster>.wd`, its process is
    found by its command line), the autostop mark (`<cluster>.autostop`) and the directories of its
    collections' forwarded sockets that no live sshd forward serves (`ssh.collections_prefix`); with
    `mode` "kill" the jobs' working directories (`~/.skyhive/work/<name>`) go too (unless `keep_work`: `skyhive stop` keeps
    what is on the disks), and then the shell lines `then` run.

    The processes include a running autostop script (`<cluster>.wd/autostop.sh`, which writes the mark
    once it has stopped the pool): a `down` racing an autostop ends it, so no mark is written after the
    sweep removed the files. The autostop's own sweep (`from_autostop`) leaves it out: its forked
    subshells carry the same command line."""
    if not re.fullmatch(r"c-[A-Za-z0-9._-]+", cluster):
        raise ValueError(f"{cluster!r} is not a named pool's socket directory")
    script = "" if from_autostop else "|\\.wd/autostop\\.sh"
    variables = {
        "MODE": mode,
        "GRACE": str(max(1, round(grace * 10))),
        "RE_ENV": f"^SKYHIVE_CLUSTER=.*/{ere(cluster)}$",
        "RE_CMD": f"/{ere(cluster)}(/n[0-9]+-w[0-9]+\\.sock|\\.wd{script})$",
        "RE_FILE": f"^{ere(cluster)}(\\.wd|\\.autostop)?$",
        "RE_COLL": f"^{collections_prefix(cluster)}-[0-9a-f]+-n[0-9]+$",
        "RE_WORK": "^$",  # none: the work directory goes below, in "kill" mode unless keep_work
    }
    wipe = "" if keep_work else f'\nrm -rf -- "$HOME/.skyhive/work/"{shlex.quote(name)}'
    work = f"{wipe}\n{then}\n" if mode == "kill" else ""
    # the sweep's last line is its exit status: remove the work directory before it
    body = SWEEP.rstrip("\n")
    head, _, last = body.rpartition("\n")
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in variables.items()) + head + work + "\n" + last + "\n"


class SSHCluster(SSH):
    """The hosts of a named SSH pool (see the module docstring). Built from an `SSH` provider for a new
    pool (`from_ssh`) or from the pool's record to attach (`from_record`)."""

    def __init__(self, hosts: list[str] | tuple[str, ...], *, pool: str, cluster: str, attach: bool = False,
                 host_keys: Mapping[int, str] | None = None, **options: Any) -> None:
        options["idle_timeout"] = float("inf")  # the workers wait for the next client, however long
        options["keep_env"] = True  # detached workers run from the environment bootstrap built
        super().__init__(hosts, **options)
        self.pool = pool
        self.cluster = cluster
        self.attach = attach
        self.host_keys = dict(host_keys or {})

    def __repr__(self) -> str:
        return f"SSHCluster({self.pool!r}, hosts={[self._show(h) for h in self.hosts]!r}, attach={self.attach})"

    @classmethod
    def from_ssh(cls, ssh: SSH, *, pool: str, cluster: str) -> SSHCluster:
        hosts, host_options = ssh.resolved()  # the aliases as resolved when `ssh` was made, kept so
        return cls(hosts, pool=pool, cluster=cluster, key=ssh.key, ssh_config=None, host_options=host_options,
                   known_hosts=ssh.known_hosts, python=ssh.python, connect_timeout=ssh.connect_timeout,
                   reconnect_timeout=ssh.reconnect_timeout, use_agent=ssh.use_agent, volumes=ssh.volumes)

    @classmethod
    def from_record(cls, desc: Mapping[str, Any], *, pool: str, cluster: str, host_keys: Mapping[str, str],
                    attach: bool = True) -> SSHCluster:
        """The provider of a recorded pool: `desc` is what `recorded()` returned, `host_keys` the key each
        node's host showed (by node index, as JSON keys), pinned."""
        return cls(list(desc["hosts"]), pool=pool, cluster=cluster, attach=attach,
                   host_keys={int(k): v for k, v in host_keys.items()}, key=desc.get("key"),
                   known_hosts=desc.get("known_hosts"), python=desc.get("python"),
                   connect_timeout=float(desc.get("connect_timeout", 10.0)),
                   reconnect_timeout=float(desc.get("reconnect_timeout", 60.0)),
                   use_agent=bool(desc.get("use_agent", False)), ssh_config=desc.get("ssh_config", DEFAULT_CONFIG),
                   host_options=desc.get("host_options"))

    def recorded(self) -> dict[str, Any]:
        """What the pool's record keeps of this provider: where the hosts are and how to log in (the
        key's *path*, never its content)."""
        # the hosts resolved (an ~/.ssh/config alias: its HostName, Port, User, IdentityFile, ProxyJump),
        # never looked up again: `skyhive ssh`, `status`, `stop`/`start` reach what the pool was created on
        hosts, host_options = self.resolved()
        return {"provider": "ssh", "hosts": hosts, "host_options": [list(o) for o in host_options], "key": self.key,
                "known_hosts": self.known_hosts, "python": self.python, "use_agent": self.use_agent,
                "connect_timeout": self.connect_timeout, "reconnect_timeout": self.reconnect_timeout,
                "ssh_config": None}

    def describe(self) -> dict[str, Any]:
        return super().describe()  # `skyhive down` of the pool's log rebuilds a plain SSH provider

    def _handle(self, index: int, host: tuple[str | None, str, int]) -> Any:
        handle = super()._handle(index, host)
        plain = handle.reach
        assert isinstance(plain, SSHReach)
        key = self.host_keys.get(index)
        reach = KeptSSHReach(
            host=plain.host, port=plain.port, user=plain.user, key=plain.key, proxy_jump=plain.proxy_jump,
            known_hosts=None if key else plain.known_hosts, host_key=key or plain.host_key, python=plain.python,
            connect_timeout=plain.connect_timeout, idle_timeout=plain.idle_timeout,
            reconnect_timeout=plain.reconnect_timeout, use_agent=plain.use_agent, keep_env=True,
            cluster=self.cluster, pool=self.pool, attach=self.attach)
        return type(handle)(node=handle.node, provider_id=handle.provider_id, private_addr=handle.private_addr,
                            reach=reach)

    def _sweep_known_hosts(self, host: tuple[str | None, str, int]) -> Any:
        """The known hosts a cleanup login checks: the key recorded for that host, else the pool's file."""
        from ....providers.sshlib import asyncssh
        for index, h in enumerate(self.hosts):
            if h == host and index in self.host_keys:
                _, addr, port = host
                name = addr if port == 22 else f"[{addr}]:{port}"
                return asyncssh.import_known_hosts(f"{name} {self.host_keys[index]}\n")
        return super()._sweep_known_hosts(host)

    def _sweep_key_source(self, host: tuple[str | None, str, int]) -> str:
        if any(h == host and index in self.host_keys for index, h in enumerate(self.hosts)):
            return "the key it showed when the pool was created"
        return super()._sweep_key_source(host)

    async def down(self, nodes: int, *, grace: float = 3.0, skip: Collection[int] = (),
                   keep_work: bool = False) -> tuple[list[str], list[str]]:
        """Stop the pool on its first `nodes` hosts (but those of the node indices in `skip`): every
        process of it (SIGTERM, SIGKILL after `grace`), its socket directory and the jobs' working
        directories (kept with `keep_work`: `skyhive stop`). Returns (what was done, per host; failures naming the host). Each host is tried
        even when another fails."""
        import anyio

        from ....errors import SSHError

        done: list[str] = []
        failures: list[str] = []
        script = sweep_script(self.cluster, self.pool, "kill", grace, keep_work=keep_work)

        async def clean(host: tuple[str | None, str, int]) -> None:
            try:
                out = await self._sweep(host, script)
            except SSHError as exc:
                failures.append(str(exc))
                return
            killed, left, _ = sweep_report(out)
            done.append(f"{self._show(host)}: stopped {killed or 'nothing'}")
            for folder in kept_report(out):
                log.warning("pool %s: on host %s, files its workers could not upload to their bucket are kept in "
                            "%s (UNSENT.txt there lists them)", self.pool, self._show(host), folder)
            if left:
                failures.append(f"host {self._show(host)}: processes {', '.join(left)} of pool {self.pool} "
                                f"survived SIGKILL")

        async with anyio.create_task_group() as tg:
            for index, host in self._distinct_hosts_of(nodes):
                if index not in skip:
                    tg.start_soon(clean, host)
        return done, failures

    def _distinct_hosts_of(self, nodes: int) -> Sequence[tuple[int, tuple[str | None, str, int]]]:
        return [(i, h) for i, h in self._distinct_hosts() if i < nodes]
