"""Keeping SSH nodes (`SSHKeep`, the "ssh" kind's keep support; a cloud's instances are kept the same
way): a new pool's running nodes reached with detached workers on a socket per (pool, node, rank) and
no idle timeout (`KeptSSHReach`); from the record, the pool's hosts reached again (pinned host keys),
which of its workers still run, the pool stopped on every host, the autostop watchdog on each host.

The calls here are synchronous (the CLI's and the autostop's); each runs its SSH logins on an event loop
of its own in a worker thread, so they also work when called from inside a running loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import posixpath
import shlex
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from ....errors import ProvisionError, SSHError
from ....providers.base import NodeHandle, Provider, SSHReach
from ....providers.ssh import SSH
from ...common import bridge
from ...nodes.keep import KeepContext, KeepSupport, KeptRecord, KeptWorker, NodeAccess, StopResult
from .cluster import KeptSSHReach, SSHCluster, autostop_guard, sweep_script
from .transport import SSHTransport, SSHWorker

__all__ = ["SSHKeep", "KEEP", "provider_of", "live_remote", "stop_remote", "start_remote_watchdogs",
           "stop_remote_watchdogs"]

log = logging.getLogger("skyhive.kinds.ssh.keep")

ClusterRecord = KeptRecord
WorkerEntry = Any

T = TypeVar("T")


def _run(make: Callable[[], Awaitable[T]]) -> T:
    return bridge.run(make, thread=True, name="skyhive-cluster")


def provider_of(rec: ClusterRecord, *, attach: bool = True) -> SSHCluster:
    """The provider that reaches the hosts of the SSH pool `rec` (its host keys pinned)."""
    return SSHCluster.from_record(rec.provider_info, pool=rec.name, cluster=rec.cluster, host_keys=rec.host_keys,
                                  attach=attach)


def live_remote(rec: ClusterRecord) -> tuple[list[WorkerEntry], list[str], bool]:
    """(the workers of `rec` still serving their socket, the hosts that could not be asked and why,
    whether a host's autostop watchdog stopped the pool there). A worker on a host that cannot be
    reached counts as not live."""
    provider = provider_of(rec)
    script = sweep_script(rec.cluster, rec.name, "list", 0)
    nodes = sorted({w.node for w in rec.workers})

    async def look() -> tuple[list[WorkerEntry], list[str], bool]:
        live: list[WorkerEntry] = []
        errors: list[str] = []
        marks: list[str] = []

        async def one(node: int) -> None:
            try:
                out = await provider.sweep_host(provider.hosts[node], script)
            except SSHError as exc:
                errors.append(str(exc))
                return
            marks.extend(ln for ln in out.splitlines() if ln.startswith("F ") and ln.endswith(".autostop"))
            serving = [ln for ln in out.splitlines() if ln.startswith("P ") and "skyhive.runtime.worker.server" in ln]
            live.extend(w for w in rec.workers if w.node == node and any(f" {w.socket} " in f"{ln} " for ln in serving))

        await asyncio.gather(*(one(n) for n in nodes))
        return sorted(live, key=lambda w: (w.node, w.rank)), errors, bool(marks)

    return _run(look)


#: Seconds between the SIGTERM of `down`, `stop` and autostop and their SIGKILL on a host: a worker that ran a
#: cached bucket mount uploads what it still holds before it exits (runtime/storage/node.py, bounded below
#: this, as runtime/clusters/stop.py allows on this machine). The sweep goes on as soon as the pool's
#: processes are gone, so a pool without such a mount is not held up.
EXIT_GRACE = 60.0


def stop_remote(rec: ClusterRecord, *, host_keys: Mapping[int, str] | None = None,
                skip: Collection[int] = (), keep_work: bool = False) -> tuple[list[str], list[str]]:
    """Stop the SSH pool `rec` on each of its hosts: its processes, socket directory, jobs' working
    directories. (what was done per host, failures naming the host). `host_keys` pins other keys than
    the recorded ones (node -> key: a change the user confirmed, `hostkeys.py`); the hosts of the nodes
    in `skip` are not visited (their machine is gone); `keep_work` keeps the jobs' working directories
    (`skyhive stop`)."""
    provider = provider_of(rec)
    provider.host_keys.update(host_keys or {})
    return _run(lambda: provider.down(rec.nodes, grace=EXIT_GRACE, skip=skip, keep_work=keep_work))


#: Ends the pool's autostop watchdog on a host (found by its `--state-dir <run dir>/<cluster>.wd`).
_KILL_WATCHDOG = r"""
for d in /proc/[0-9]*; do
  [ -O "$d" ] || continue
  tr '\0' '\n' < "$d/cmdline" 2>/dev/null | grep -qxF -- "$WD" && kill -KILL "${d#/proc/}" 2>/dev/null
done
true
"""


#: bytes of an autostop hook's output kept in the autostop mark (its last ones)
HOOK_OUTPUT_BYTES = 65536


def hook_of(state_dir: str) -> tuple[str, float] | None:
    """The pool's autostop hook (its shell script, its time limit in seconds) as the layer that launched
    the pool saved it in the pool's state directory (`autostop-hook.json`, `control/autostop_hook.py`), or
    None when it has none."""
    try:
        with open(os.path.join(state_dir, "autostop-hook.json"), encoding="utf-8") as fh:
            saved = json.load(fh)
        return str(saved["hook"]), float(saved["timeout"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ProvisionError(f"the autostop hook saved in {state_dir}/autostop-hook.json cannot be read: {exc}") from None


def _hook_lines(name: str, hook: tuple[str, float], out: str) -> str:
    """Shell lines that run the autostop `hook` on the head host before the stop: in the jobs' directory
    (`~/.skyhive/work/NAME`, made where missing), as node 0 (SKYPILOT_NODE_RANK), for at most its time limit
    (then TERM, KILL 10 s later), its output and exit status in `out` (the stop goes on whatever it did:
    a hook never keeps a pool billed)."""
    script, timeout = hook
    work = f'"$HOME/.skyhive/work/"{shlex.quote(name)}'
    return (f"HOOK_RC=0\n"
            f"mkdir -p {work} && ( cd {work} && SKYPILOT_NODE_RANK=0 SKYHIVE_AUTOSTOP_HOOK=1 "
            f"timeout --kill-after=10 {timeout:g} bash -c {shlex.quote(script)} ) </dev/null >{out} 2>&1 "
            f"|| HOOK_RC=$?\n"
            f"HOOK_OUT=$(tail -c {HOOK_OUTPUT_BYTES} {out} 2>/dev/null)\n")


def _watchdog_script(rec: ClusterRecord, node: int, idle: float, old_only: bool = False,
                     hook: tuple[str, float] | None = None) -> str:
    sock_dir = posixpath.dirname(next(w.socket for w in rec.workers if w.node == node))
    run_dir = posixpath.dirname(sock_dir)
    wd = f"{run_dir}/{rec.cluster}.wd"
    head = f"WD={shlex.quote(wd)}\n" + _KILL_WATCHDOG
    if old_only:
        return head
    env = rec.node_envs.get(str(node), {})
    python = str(env.get("python") or "python3")
    pythonpath = ":".join(env.get("pythonpath") or ())
    mark_file = shlex.quote(run_dir + '/' + rec.cluster + '.autostop')
    mark = f"echo autostop > {mark_file}"
    head_hook = ""
    if hook is not None and node == min(w.node for w in rec.workers):  # the head node runs the hook, first
        head_hook = _hook_lines(rec.name, hook, shlex.quote(f"{wd}/hook.out"))  # (the sweep removes it)
        # what the hook did stays in the mark, after its first line (`skyhive status` relays it: `hook_report`)
        mark = (f"{{ echo autostop; echo \"hook: exit $HOOK_RC\"; printf '%s\\n' \"$HOOK_OUT\"; }} > {mark_file}")
    # a machine made to order powers itself off once the pool stopped there (`power_off`, recorded by the
    # pool's machines: `runtime/clusters/cloud.py`); it stops (disks kept: the mark is there when it starts
    # again, removed below) or terminates on an OS shutdown: either way its billing ends, client or not
    head += f"rm -f -- {mark_file}\n"
    power_off = str(rec.provider_info.get("power_off") or "")  # (what the record says the machine does then)
    if power_off:
        mark += "\n" + power_off
    keep_work = bool(power_off) and not rec.autostop_down  # a machine that stops keeps its disk
    stop = autostop_guard(sock_dir, rec.name) + head_hook + sweep_script(
        rec.cluster, rec.name, "kill", EXIT_GRACE, then=mark, from_autostop=True, keep_work=keep_work)
    interval = max(0.2, min(5.0, idle / 4))
    return (head + f"set -e\numask 077\nmkdir -p \"$WD\"\ncat > \"$WD/autostop.sh\" <<'SKYHIVE_AUTOSTOP_EOF'\n{stop}"
            f"SKYHIVE_AUTOSTOP_EOF\n"
            f"PYTHONPATH={shlex.quote(pythonpath)} {shlex.quote(python)} -m skyhive.runtime.worker.watchdog "
            f"--idle {idle:g} --interval {interval:g} --unix-dir {shlex.quote(sock_dir)} --state-dir \"$WD\" "
            f"--command \"sh $WD/autostop.sh\"\n")


def start_remote_watchdogs(rec: ClusterRecord, idle: float, hook: tuple[str, float] | None = None) -> None:
    """Start the autostop watchdog on each host of the SSH pool `rec` (ending one already there): after
    `idle` seconds with no connection to the pool's sockets on that host, it stops the pool's processes
    there, removes its sockets and leaves the mark `<cluster>.autostop` (what `skyhive status` reads). With
    a `hook` (script, seconds), the head host's watchdog runs it first (`_hook_lines`). Raises `SSHError`
    naming the hosts where it did not start."""
    provider = provider_of(rec)
    nodes = sorted({w.node for w in rec.workers})

    async def start() -> list[str]:
        failures: list[str] = []

        async def one(node: int) -> None:
            try:
                out = await provider.sweep_host(provider.hosts[node], _watchdog_script(rec, node, idle, hook=hook))
                json.loads(out.strip().splitlines()[-1])["pid"]
            except (SSHError, ValueError, KeyError, IndexError) as exc:
                failures.append(f"node {node}: {exc}")

        await asyncio.gather(*(one(n) for n in nodes))
        return failures

    failures = _run(start)
    if failures:
        raise SSHError(f"pool {rec.name!r}: the autostop watchdog did not start on every host: {'; '.join(failures)}")


def autostop_mark(rec: ClusterRecord) -> str:
    """The text of the autostop mark on the head host of the SSH pool `rec` ("" when there is none, or the
    host cannot be asked: logged)."""
    node = min(w.node for w in rec.workers)
    sock_dir = posixpath.dirname(next(w.socket for w in rec.workers if w.node == node))
    mark = shlex.quote(f"{posixpath.dirname(sock_dir)}/{rec.cluster}.autostop")
    provider = provider_of(rec)
    try:
        return _run(lambda: provider.sweep_host(provider.hosts[node], f"cat {mark} 2>/dev/null; exit 0\n"))
    except SSHError as exc:
        log.warning("pool %s: the autostop mark on node %d could not be read: %s", rec.name, node, exc)
        return ""


def stop_remote_watchdogs(rec: ClusterRecord) -> None:
    """End the autostop watchdog on each host of the SSH pool `rec` (its workers stay)."""
    provider = provider_of(rec)
    nodes = sorted({w.node for w in rec.workers})

    async def stop() -> None:
        await asyncio.gather(*(provider.sweep_host(provider.hosts[n], _watchdog_script(rec, n, 0, old_only=True))
                               for n in nodes))

    _run(stop)


class SSHKeep(KeepSupport):
    """The "ssh" kind's keep support (see `runtime/nodes/keep.py`): SSH hosts, and the clouds' instances."""

    kind = "ssh"
    same_machine = False

    def keep_handle(self, handle: NodeHandle, ctx: KeepContext) -> NodeHandle:
        reach = handle.reach
        if isinstance(reach, KeptSSHReach):
            return handle
        if not isinstance(reach, SSHReach):
            raise ProvisionError(f"pool {ctx.pool}: node {handle.node} is reached as {type(reach).kind!r}, not over "
                                 "SSH", node=handle.node)
        fields = {f.name: getattr(reach, f.name) for f in dataclasses.fields(reach)}
        # the workers wait for the next client, however long, and run from the environment bootstrap built;
        # the node's own idle watchdog (it powers a machine off once no SSH client is connected) is left
        # out: the pool's autostop replaces it
        fields.update(idle_timeout=float("inf"), idle_shutdown=0.0, keep_env=True)
        return dataclasses.replace(handle, reach=KeptSSHReach(**fields, cluster=ctx.cluster, pool=ctx.pool))

    def provisional(self, provider: Provider, ctx: KeepContext, nodes: int) -> dict[str, Any] | None:
        # your hosts: recorded before the first worker starts (the workers have no idle timeout: a client
        # killed while creating the pool would leave them to no one); a cloud's instances are found by tag
        if not isinstance(provider, SSH):
            return None
        return {"cwd": os.getcwd(), "socket_dir": "", "cluster": ctx.cluster,
                "provider_info": SSHCluster.from_ssh(provider, pool=ctx.pool, cluster=ctx.cluster).recorded()}

    def record_fields(self, provider: Provider, handles: Sequence[NodeHandle], ctx: KeepContext) -> dict[str, Any]:
        if isinstance(provider, SSH):
            info = SSHCluster.from_ssh(provider, pool=ctx.pool, cluster=ctx.cluster).recorded()
        else:  # a cloud's instances: how they are reached, as an SSH pool's hosts are
            reaches = [h.reach for h in handles if isinstance(h.reach, KeptSSHReach)]
            first = reaches[0]
            info = {"hosts": [f"{r.user}@{r.host}:{r.port}" for r in reaches], "key": first.key, "known_hosts": None,
                    "python": first.python, "use_agent": first.use_agent, "connect_timeout": first.connect_timeout,
                    "reconnect_timeout": first.reconnect_timeout}
        return {"cwd": os.getcwd(), "socket_dir": "", "cluster": ctx.cluster, "provider_info": info}

    def workers(self, node: int, transport: Any, processes: Sequence[Any]) -> list[KeptWorker]:
        return [KeptWorker(node=node, rank=rank, pid=proc.pid, socket=proc.socket)
                for rank, proc in enumerate(processes) if isinstance(proc, SSHWorker)]

    def node_facts(self, transport: Any) -> dict[str, Any]:
        if not isinstance(transport, SSHTransport):
            return {}
        facts: dict[str, Any] = {"host_key": transport.host_key_text()}
        env = transport.node_env
        if env is not None:
            facts["env"] = {"python": env.python, "pythonpath": list(env.pythonpath)}
        return facts

    def attach_provider(self, rec: KeptRecord, *, nodes: int | None = None, check: bool = True) -> Provider:
        # (its workers are checked by the takeover itself, on its hosts)
        provider = provider_of(rec)
        return provider if nodes is None else provider.for_nodes(nodes)

    def live(self, rec: KeptRecord) -> tuple[list[Any], list[str], bool]:
        return live_remote(rec)

    def stop(self, rec: KeptRecord, *, host_keys: Mapping[int, str] | None = None, skip: Collection[int] = (),
             keep_work: bool = False) -> StopResult:
        done, failures = stop_remote(rec, host_keys=host_keys, skip=skip, keep_work=keep_work)
        ended = sum(line.count(",") + 1 for line in done if "stopped [" in line)
        return StopResult(ended, tuple(done), tuple(failures))

    def autostop_report(self, rec: KeptRecord) -> str:
        # the head host's autostop mark: "autostop", then what its hook did (`_watchdog_script`)
        return autostop_mark(rec).partition("\n")[2].strip("\n")

    def start_watchdog(self, rec: KeptRecord, idle: float, *, command: str, state_dir: str,
                       wait_for: str = "jobs_and_ssh") -> int:
        if wait_for != "jobs_and_ssh":  # (the watchdog runs on the nodes, away from the pool's job queue)
            raise ProvisionError(f"pool {rec.name!r}: resources.autostop.wait_for: {wait_for} is honoured on Local "
                                 f"pools only; here a job or a client keeps the pool up (jobs_and_ssh)")
        # one on each host, watching the pool's sockets there; the head host's runs the pool's hook first
        start_remote_watchdogs(rec, idle, hook_of(state_dir))
        return 0

    def stop_watchdog(self, rec: KeptRecord) -> None:
        stop_remote_watchdogs(rec)

    def access(self, rec: KeptRecord, node: int) -> NodeAccess:
        from .keep_access import SSHAccess

        return SSHAccess(rec, node)

    def relaunch_provider(self, rec: KeptRecord) -> Provider:
        return hosts_provider(rec)


def hosts_provider(rec: KeptRecord) -> SSH:
    """A plain SSH provider over the SSH pool's recorded hosts, their host keys pinned (a known_hosts file
    of the pool's, written from the record): what `skyhive start` creates the pool again with."""
    from ....paths import private_dir
    from .keep_files import hosts_path, node_addresses

    info = rec.provider_info
    private_dir("ssh")
    known = hosts_path(rec.name)  # (removed with the pool's other SSH files, at `down`)
    lines = []
    for a in node_addresses(rec):
        where = a.host if a.port == 22 else f"[{a.host}]:{a.port}"
        if a.host_key:
            lines.append(f"{where} {a.host_key}\n")
    fd = os.open(known, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("".join(lines))
    os.chmod(known, 0o600)
    from ....providers.ssh_config import DEFAULT_CONFIG

    # the hosts as resolved at creation (an ~/.ssh/config alias is not looked up again: `host_options`)
    return SSH(hosts=list(info.get("hosts") or ()), key=info.get("key"), known_hosts=str(known),
               python=info.get("python"), use_agent=bool(info.get("use_agent")),
               connect_timeout=float(info.get("connect_timeout", 10.0)),
               ssh_config=info.get("ssh_config", DEFAULT_CONFIG), host_options=info.get("host_options"))


KEEP = SSHKeep()
