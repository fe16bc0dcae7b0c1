"""What a `Pool` does differently when it is named and kept (`Pool(name=..., keep=True)`) or attached
(`Pool.attach(name)`): one attached client at a time (the record's lock), the record written once
the workers run, and on leaving either detach (the workers stay) or tear down and forget the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import PoolExists, PoolGone
from ...providers.base import Provider
from ...paths import state_dir
from ...providers.local import Local, LocalCluster
from ...providers.ssh import SSH
from ...providers.kept_cloud import KeptCloud, kept_cloud
from ...providers.ssh_cluster import KeptSSHReach, SSHCluster, cluster_key
from ..kinds.local.detached import server_pid, socket_path
from . import record as records
from .follow import follow_workers
from .procs import runs
from .record import ClusterRecord, WorkerEntry

if TYPE_CHECKING:
    from ..actors.pool_actor import PoolRuntime

log = logging.getLogger("skyhive.clusters")

__all__ = ["NamedPool", "keep_named", "keep_ports", "shutdown_on_autostop", "kept_provider", "start_watchdog", "set_autostop", "new_kept_pool", "attach_provider", "live_workers", "dead_workers", "AUTOSTOP_UNIT_ENV",
           "minute"]

#: Seconds in an autostop "minute" (tests shorten it; the default is 60).
AUTOSTOP_UNIT_ENV = "SKYHIVE_AUTOSTOP_MINUTE"


def minute() -> float:
    """How many seconds `-i 1` means (60 unless `SKYHIVE_AUTOSTOP_MINUTE` says otherwise, for tests)."""
    try:
        return float(os.environ.get(AUTOSTOP_UNIT_ENV, "60"))
    except ValueError:
        raise ValueError(f"{AUTOSTOP_UNIT_ENV}={os.environ[AUTOSTOP_UNIT_ENV]!r} is not a number of seconds") from None


#: Why a provider's pool cannot be kept (yet), by provider name (the error says it).
_CLOUD = ("kept cloud pools are built and tested for aws only (its instances' reach, idle watchdog and "
          "termination by recorded instance id); use a pool without a name, or give the instances to "
          "sky.SSH(hosts=...) to keep a pool on them")
_CANNOT_KEEP = {
    "slurm": "a Slurm allocation ends with the client's job (srun steps are children of it); keeping one "
             "would need a batch job holding the allocation, which is not built",
    "azure": _CLOUD, "gcp": _CLOUD, "digitalocean": _CLOUD,
}


def cannot_keep(provider: str) -> str:
    """Why pools of `provider` cannot be kept (outlive their client)."""
    return _CANNOT_KEEP.get(provider, "its nodes' workers cannot outlive the client yet (kept pools run on the "
                                      "local and ssh providers)")


def kept_provider(name: str, provider: Provider) -> Provider:
    """The provider of a new kept pool: `provider`'s nodes with detached workers (Local:
    `LocalCluster`; SSH: `SSHCluster`).

    Raises `ValueError` naming the provider and why for one whose nodes cannot outlive the client,
    and `PoolExists` when a pool by that name still runs."""
    records.check_name(name)
    if provider.name == "aws":  # its instances kept, their workers detached (providers/kept_cloud.py)
        _no_live_pool(name)
        return kept_cloud(provider, pool=name, socket_dir=records.socket_dir(name),
                          cluster=cluster_key(name, str(state_dir())))
    if type(provider) not in (Local, SSH):
        raise ValueError(f"Pool(name={name!r}, keep=True): provider {provider.name!r} cannot keep a pool: "
                         f"{cannot_keep(provider.name)}")
    _no_live_pool(name)
    # the workers never leave by themselves: autostop is the pool's watchdog (`start_watchdog`)
    if isinstance(provider, SSH):
        return SSHCluster.from_ssh(provider, pool=name, cluster=cluster_key(name, str(state_dir())))
    return LocalCluster(socket_dir=records.socket_dir(name), cwd=provider.cwd, build_env=provider.build_env)


def _no_live_pool(name: str) -> None:
    """Raise `PoolExists` when pool `name` still runs; forget what is left of one whose workers died."""
    try:
        old = records.load(name)
    except Exception:  # noqa: BLE001 - no record (or an unreadable one): a new pool
        old = None
    if old is not None:
        if live_workers(old):
            raise PoolExists(f"pool {name!r} already runs ({len(old.workers)} workers): attach to it with "
                             f"sky.Pool.attach({name!r}), or `skyhive down {name}` first")
        if old.on_hosts and not old.leaking:  # what a killed client or autostop left on the hosts (marks, a socket dir)
            from .remote import stop_remote

            stop_remote(old)
        if old.instances:  # its instances may still run (billed): terminated before it is forgotten
            from .cloud import terminate_instances

            terminate_instances(old)
        records.remove(name)  # what is left of a pool whose workers all died


def attach_provider(rec: ClusterRecord, *, check: bool = True) -> Provider:
    """The provider that takes the workers of `rec` over. Raises `PoolGone` naming the pool and the
    workers that died (an SSH pool's are checked by the takeover itself, on its hosts; `check=False`
    skips the local check too)."""
    if rec.on_hosts:
        from .remote import provider_of

        return provider_of(rec)
    dead = dead_workers(rec) if check else []
    if dead:
        which = ", ".join(f"node {w.node} worker {w.rank} (pid {w.pid})" for w in dead)
        raise PoolGone(f"pool {rec.name!r}: its workers died ({which}); `skyhive down {rec.name}` cleans up, "
                       f"`skyhive launch -c {rec.name} TASK.yaml` starts it again")
    return LocalCluster(socket_dir=rec.socket_dir, attach=True, cwd=rec.cwd)


def live_workers(rec: ClusterRecord) -> list[WorkerEntry]:
    """The record's workers whose socket a worker still serves (a worker restarted by a client since the
    record was written serves the same socket under another pid). An SSH pool's are asked on its
    hosts (one login each); a host that cannot be reached counts as not live."""
    if rec.on_hosts:
        from .remote import live_remote

        live, errors, _ = live_remote(rec)
        for error in errors:
            log.warning("pool %s: %s", rec.name, error)
        return live
    return [w for w in rec.workers if server_pid(w.socket) is not None]


def dead_workers(rec: ClusterRecord) -> list[WorkerEntry]:
    live = {(w.node, w.rank) for w in live_workers(rec)}
    return [w for w in rec.workers if (w.node, w.rank) not in live] if rec.workers else []


def keep_named(name: str | None, provider: Provider, *, keep: bool, autostop: float | None) -> tuple[LocalCluster, NamedPool]:
    """`Pool(name=..., keep=True, autostop=...)`: the provider of the new kept pool and its named half.
    Raises `ValueError` naming the argument, `PoolExists` when a pool by that name runs."""
    if not keep:
        raise ValueError("Pool(autostop=...) applies to a kept pool: pass keep=True and a name")
    if not name:
        raise ValueError("Pool(keep=True) needs a name= to find the pool again (Pool.attach(name))")
    if autostop is not None and not autostop > 0:
        raise ValueError(f"Pool(autostop={autostop!r}): need a positive number of minutes, or None")
    kept = kept_provider(name, provider)
    named = NamedPool(name, attach=False, keep=True, autostop_minutes=autostop)
    shutdown_on_autostop(kept, named)
    return kept, named


def shutdown_on_autostop(provider: Provider, named: NamedPool) -> None:
    """A new kept cloud pool's machines stop on an OS shutdown when its autostop stops it (not `--down`):
    the watchdog on a machine has no cloud credentials and stops it by shutting it down, its disks kept;
    otherwise they terminate (`Provider.shutdown_behavior`)."""
    if isinstance(provider, KeptCloud) and provider.can_stop:
        stops = named.autostop_minutes is not None and not named.autostop_down
        provider.shutdown_behavior = "stop" if stops else "terminate"


def keep_ports(named: NamedPool | None, ports: Any) -> None:
    """`Pool(ports=...)`: the kept pool's ports (SkyPilot's spellings), recorded in its shape as `launch -c`
    records `resources.ports`, opened once it runs (`NamedPool.open`). Raises `ValueError` naming the
    argument for a pool that is not kept or a bad port."""
    from .ports import parse_ports

    if named is None:
        raise ValueError("Pool(ports=...) applies to a kept pool (keep=True and a name): its ports are reached "
                         "with `skyhive forward NAME PORT`")
    try:
        ranges = parse_ports(ports)
    except ValueError as exc:
        raise ValueError(f"Pool(ports={ports!r}): {exc}") from None
    named.spec["ports"] = [list(r) for r in ranges]


def new_kept_pool(pool_class: Any, name: str, nodes: int, *, spec: dict[str, Any], autostop: float | None,
                  autostop_down: bool, provider: Provider | None = None) -> Any:
    """A `Pool` (`pool_class`, given by the caller: this module does not import pool.py), not entered,
    that creates the kept Local pool `name` (`skyhive launch -c`): its record also holds `spec` (what a
    later `launch -c` compares) and whether autostop takes it down."""
    pool = pool_class(provider=provider or Local(), nodes=nodes, name=name, keep=True, output=None, autostop=autostop)
    named = pool._named
    assert named is not None
    named.spec = dict(spec)
    named.autostop_down = autostop_down
    shutdown_on_autostop(pool.provider, named)
    return pool


class NamedPool:
    """The named-pool half of one `Pool`: entered around the pool's start, left around its close."""

    def __init__(self, name: str, *, attach: bool, keep: bool, spec: dict[str, Any] | None = None,
                 autostop_minutes: float | None = None, autostop_down: bool = False, who: str = "",
                 lock_timeout: float | None = 0.0) -> None:
        self.name = name
        self.attach = attach
        self.keep = keep
        self.spec = dict(spec or {})
        self.autostop_minutes = autostop_minutes
        self.autostop_down = autostop_down
        self.who = who
        self.lock_timeout = lock_timeout
        self.opened: list[str] = []  # the firewall rules opened for the pool's ports (`_open_ports`)
        self._lock = records.AttachLock(name, who=who)

    def __repr__(self) -> str:
        return f"<NamedPool {self.name} {'attached' if self.attach else 'new'} keep={self.keep}>"

    async def enter(self) -> None:
        """Take the pool's lock, waiting up to `lock_timeout` seconds (None: for ever) without blocking
        the event loop. Raises `PoolInUse` naming the holder when another client keeps it."""
        deadline = None if self.lock_timeout is None else time.monotonic() + self.lock_timeout
        while not self._lock.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                raise self._lock.busy()
            await anyio.sleep(0.1)
        if self.attach:  # autostop stops a pool only under this lock (`autostop.py`): look again now
            try:
                refuse_stopped(records.load(self.name))
            except BaseException:
                self._lock.release()
                if not (records.cluster_dir(self.name) / "record.json").exists():  # autodown forgot it meanwhile:
                    shutil.rmtree(records.cluster_dir(self.name), ignore_errors=True)  # leave no lock file behind
                raise

    async def open(self, pool: Any, enter: Callable[[], Awaitable[Any]]) -> Any:
        """Enter `pool` (the `Pool`; `enter` starts it) as this named pool: lock, (re)check the workers when
        attaching, start, write the record. A pool that fails to start is forgotten unless attached."""
        await self.enter()
        try:
            if self.attach:  # workers may have died since Pool.attach() looked
                pool.provider = attach_provider(records.load(self.name))
                if isinstance(pool.provider, SSHCluster):
                    pool.provider = pool.provider.for_nodes(pool.nodes)
            elif isinstance(pool.provider, SSHCluster):
                self._provisional(pool.provider, pool)
            await enter()
        except BaseException:
            self.leave(kept=self.attach)
            raise
        rt = pool._rt
        assert rt is not None and isinstance(pool.provider, (LocalCluster, SSHCluster, KeptCloud))
        try:
            self.started(rt, pool.provider, pool.processes_per_node)
            if not self.attach:
                await self._open_ports(pool.provider)
        except BaseException as exc:  # the pool runs but cannot be recorded: a new one is torn down
            try:  # (both are shielded from cancellation)
                if self.attach:
                    await rt.detach()
                else:
                    await rt.close(f"{type(exc).__name__}: {exc}")
            finally:
                try:
                    await rt._exit_tg()
                finally:
                    self.leave(kept=self.attach)
            raise
        # a worker started later (restarted, or a replaced node's: `replace_failed`) goes into the record
        rt.tg.start_soon(follow_workers, rt.log.subscribe(), self.name)
        return pool

    async def _open_ports(self, provider: Provider) -> None:
        """A new pool's ports opened on its firewall, for this client's address only, where the provider
        does that (`Provider.opens_ports`: AWS); they go with the pool's security group at down."""
        ports = [(int(lo), int(hi)) for lo, hi in self.spec.get("ports") or ()]
        if ports and provider.opens_ports:
            self.opened = await provider.open_ports(self.name, ports)
            log.info("pool %s: opened %s", self.name, ", ".join(self.opened))

    def started(self, rt: PoolRuntime, provider: Any, processes_per_node: int) -> None:
        """The workers run: write the record (a new pool) or check it still says the same (attached)."""
        from ..kinds.ssh.transport import SSHTransport, SSHWorker

        workers = []
        host_keys: dict[str, str] = {}
        node_envs: dict[str, dict[str, Any]] = {}
        for node in rt.nodes:
            if isinstance(node.transport, SSHTransport):
                host_keys[str(node.index)] = node.transport.host_key_text()
                env = node.transport.node_env
                if env is not None:
                    node_envs[str(node.index)] = {"python": env.python, "pythonpath": list(env.pythonpath)}
            for rank, proc in enumerate(node.processes):
                if proc is None:
                    continue
                if isinstance(proc, SSHWorker):
                    path = proc.socket
                else:
                    path = socket_path(provider.socket_dir if isinstance(provider, LocalCluster)
                                       else provider.kept_socket_dir, node.index, rank)
                workers.append(WorkerEntry(node=node.index, rank=rank, pid=proc.pid, socket=path))
        if self.attach:
            old = records.load(self.name)
            rec = ClusterRecord(**{**_fields(old), "workers": tuple(workers)})
        elif isinstance(provider, KeptCloud):
            rec = self._cloud_record(rt, provider, processes_per_node, tuple(workers), host_keys, node_envs)
        else:
            kept = isinstance(provider, SSHCluster)
            rec = ClusterRecord(name=self.name, provider="ssh" if kept else "local", nodes=len(rt.nodes),
                                processes_per_node=processes_per_node, concurrency=rt.context.concurrency,
                                task_threads=rt.context.task_threads,
                                cwd=os.getcwd() if kept else provider.cwd or os.getcwd(),
                                socket_dir="" if kept else provider.socket_dir, created=time.time(),
                                workers=tuple(workers), spec=self.spec, autostop_minutes=self.autostop_minutes,
                                autostop_down=self.autostop_down,
                                provider_info=provider.recorded() if kept else {},
                                cluster=provider.cluster if kept else "", host_keys=host_keys,
                                node_envs=node_envs)
        if not self.attach and self.autostop_minutes is not None:
            rec = dataclasses.replace(rec, watchdog_pid=start_watchdog(rec))
        records.save(rec)

    def _provisional(self, provider: SSHCluster, pool: Any) -> None:
        """Record a new SSH pool before any worker starts (no workers yet): a client killed while it
        creates the pool leaves a record that `skyhive down NAME` (or the next `launch -c NAME`) uses to
        clean its hosts — the workers have no idle timeout, nothing else would end them."""
        records.save(ClusterRecord(name=self.name, provider="ssh", nodes=pool.nodes,
                                   processes_per_node=pool.processes_per_node, cwd=os.getcwd(), socket_dir="",
                                   created=time.time(), spec=self.spec, provider_info=provider.recorded(),
                                   cluster=provider.cluster))

    def _cloud_record(self, rt: PoolRuntime, provider: KeptCloud, processes_per_node: int,
                      workers: tuple[WorkerEntry, ...], host_keys: dict[str, str],
                      node_envs: dict[str, dict[str, Any]]) -> ClusterRecord:
        """The record of a new kept cloud pool: its instance ids and the provider's description (what
        `down` terminates with), and how its nodes are reached (SSH: as an SSH pool's record says)."""
        handles = [node.handle for node in rt.nodes]
        assert all(h is not None for h in handles)
        info: dict[str, Any] = {"cloud": provider.describe(),  # type: ignore[attr-defined]
                                "instances": [h.provider_id for h in handles if h is not None]}
        reaches = [h.reach for h in handles if h is not None]
        on_hosts = all(isinstance(r, KeptSSHReach) for r in reaches)
        if on_hosts:
            first = reaches[0]
            assert isinstance(first, KeptSSHReach)
            info.update(hosts=[f"{r.user}@{r.host}:{r.port}" for r in reaches if isinstance(r, KeptSSHReach)],
                        key=first.key, known_hosts=None, python=first.python, use_agent=first.use_agent,
                        connect_timeout=first.connect_timeout, reconnect_timeout=first.reconnect_timeout)
        return ClusterRecord(name=self.name, provider=str(info["cloud"].get("provider", "cloud")), nodes=len(rt.nodes),
                             processes_per_node=processes_per_node, concurrency=rt.context.concurrency,
                             task_threads=rt.context.task_threads,
                             cwd=os.getcwd(), socket_dir="" if on_hosts else provider.kept_socket_dir,
                             created=time.time(), workers=workers, spec=self.spec,
                             autostop_minutes=self.autostop_minutes, autostop_down=self.autostop_down,
                             provider_info=info, cluster=provider.kept_cluster if on_hosts else "",
                             host_keys=host_keys if on_hosts else {}, node_envs=node_envs)

    def leave(self, *, kept: bool) -> None:
        """Release the lock; a pool not kept is forgotten (its record removed)."""
        try:
            if not kept:
                self._forget()
        finally:
            self._lock.release()


    def _forget(self) -> None:
        """Remove the record; an SSH pool's socket directories and jobs' working directories on its
        hosts go too (and whatever of it still runs there)."""
        try:
            rec = records.load(self.name)
        except Exception:  # noqa: BLE001 - no record (a pool that never started): nothing on any host
            rec = None
        if rec is not None and rec.on_hosts:
            from .remote import stop_remote

            _, failures = stop_remote(rec)
            if failures:
                log.warning("pool %s: could not clean up on every host: %s", self.name, "; ".join(failures))
        if rec is not None and rec.instances:
            from .cloud import terminate_instances

            terminate_instances(rec)
        records.remove(self.name)


def start_watchdog(rec: ClusterRecord) -> int:
    """Start the pool's autostop watchdog (`runtime/worker/watchdog.py`, watching the connections to
    the workers' sockets); its pid. It runs `clusters.autostop NAME` after `autostop_minutes` idle."""
    assert rec.autostop_minutes is not None
    idle = rec.autostop_minutes * minute()
    if rec.on_hosts:  # one on each host, watching the pool's sockets there (see remote.py)
        from .remote import start_remote_watchdogs

        start_remote_watchdogs(rec, idle)
        return 0
    command = f"{shlex.quote(sys.executable)} -m skyhive.runtime.clusters.autostop {shlex.quote(rec.name)}"
    argv = [sys.executable, "-m", "skyhive.runtime.worker.watchdog", "--idle", f"{idle:g}", "--unix-dir",
            rec.socket_dir, "--interval", f"{max(0.2, min(5.0, idle / 4)):g}",
            "--state-dir", str(records.cluster_dir(rec.name)), "--command", command]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    try:
        return int(json.loads(done.stdout.strip().splitlines()[-1])["pid"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise RuntimeError(f"pool {rec.name!r}: the autostop watchdog did not start: "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}") from None


def set_autostop(rec: ClusterRecord, minutes: float, down: bool) -> ClusterRecord:
    """Give the running pool of `rec` a new autostop: its watchdog (if any) replaced by one for
    `minutes` (and `down`); the record saved and returned."""
    old = rec.watchdog_pid
    if rec.on_hosts:
        from .remote import stop_remote_watchdogs

        stop_remote_watchdogs(rec)
    elif old and runs(old, "skyhive.runtime.worker.watchdog"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(old, signal.SIGKILL)  # it leads its own session; it only watches
    if rec.instances:  # an OS shutdown (the watchdog on an instance) now stops or terminates them
        from .cloud import shutdown_behavior

        shutdown_behavior(rec, "terminate" if down else "stop")
    rec = dataclasses.replace(rec, autostop_minutes=minutes, autostop_down=down, watchdog_pid=0)
    rec = dataclasses.replace(rec, watchdog_pid=start_watchdog(rec))
    records.save(rec)
    return rec


def _fields(rec: ClusterRecord) -> dict[str, Any]:
    return {name: getattr(rec, name) for name in rec.__dataclass_fields__}


def refuse_stopped(rec: ClusterRecord) -> None:
    """Raise `PoolGone` when autostop stopped the pool of `rec` (checked by `Pool.attach`, and again once
    the attach lock is held: autostop stops a pool only while holding it)."""
    if rec.stopped == "stop":  # `skyhive stop` (commands/pause.py)
        raise PoolGone(f"pool {rec.name!r} was stopped by `skyhive stop {rec.name}`: `skyhive start {rec.name}` "
                       "starts it again")
    if rec.stopped:
        again = f"`skyhive start {rec.name}` (its instances, disks kept) or " if rec.instances else ""
        raise PoolGone(f"pool {rec.name!r} was stopped by {rec.stopped} (it was idle past its limit): "
                       f"{again}`skyhive launch -c {rec.name} TASK.yaml` starts it again")
