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
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import PoolExists, PoolGone, ProvisionError
from ...paths import state_dir
from ...providers.base import Provider
from ...providers.features import Feature
from ...providers.local import Local
from ..nodes.keep import KeepContext, KeepSupport, cluster_key, keep_support_of
from . import attempt
from . import record as records
from .follow import follow_workers
from .cloud import machine_fields
from .kept import KeptProvider
from .kept_pool import KeptPool
from .procs import runs
from .record import ClusterRecord, WorkerEntry

if TYPE_CHECKING:
    from ..nodes.driver import PoolDriver

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


def kept_provider(name: str, provider: Provider) -> KeptProvider:
    """The provider of a new kept pool: `provider`, its running nodes kept by the keep support of their
    kind (`clusters/kept.py`, `runtime/nodes/keep.py`).

    Raises `ValueError` naming the provider and why for one that cannot keep a pool
    (`Feature.KEEP` not in `Provider.features`), and `PoolExists` when a pool by that name still runs."""
    records.check_name(name)
    reason = provider.features.why_not(Feature.KEEP, provider.name)
    if reason:
        raise ValueError(f"Pool(name={name!r}, keep=True): provider {provider.name!r} cannot keep a pool: {reason}")
    _no_live_pool(name)
    # the workers never leave by themselves: autostop is the pool's watchdog (`start_watchdog`)
    return KeptProvider(provider, KeepContext(pool=name, socket_dir=records.socket_dir(name),
                                              cluster=cluster_key(name, str(state_dir()))))


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
        if not old.leaking:  # what a killed client or autostop left on the nodes (marks, a socket dir)
            for failure in keep_support_of(old).leftovers(old):
                log.warning("pool %s: %s", name, failure)
        KeptPool(old).terminate_machines()  # its machines may still run (billed): terminated before it is forgotten
        records.remove(name)  # what is left of a pool whose workers all died


def attach_provider(rec: ClusterRecord, *, check: bool = True, nodes: int | None = None) -> Provider:
    """The provider that takes the workers of `rec` over (`nodes` of them: all when None), from the kind
    that keeps the pool. Raises `PoolGone` naming the pool and the workers that died where that is seen
    without a login (`check=False` skips it; an SSH pool's are checked by the takeover itself)."""
    return keep_support_of(rec).attach_provider(rec, nodes=nodes, check=check)


def live_workers(rec: ClusterRecord) -> list[WorkerEntry]:
    """The record's workers whose socket a worker still serves (a worker restarted by a client since the
    record was written serves the same socket under another pid). Asked where they run (an SSH pool's
    on its hosts, one login each); a host that cannot be reached counts as not live."""
    live, errors, _ = keep_support_of(rec).live(rec)
    for error in errors:
        log.warning("pool %s: %s", rec.name, error)
    return list(live)


def dead_workers(rec: ClusterRecord) -> list[WorkerEntry]:
    live = {(w.node, w.rank) for w in live_workers(rec)}
    return [w for w in rec.workers if (w.node, w.rank) not in live] if rec.workers else []


def keep_named(name: str | None, provider: Provider, *, keep: bool, autostop: float | None) -> tuple[KeptProvider, NamedPool]:
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
    if isinstance(provider, KeptProvider) and Feature.STOP in provider.features:
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
                  autostop_down: bool, provider: Provider | None = None, worker: Any = None) -> Any:
    """A `Pool` (`pool_class`, given by the caller: this module does not import pool.py), not entered,
    that creates the kept Local pool `name` (`skyhive launch -c`): its record also holds `spec` (what a
    later `launch -c` compares) and whether autostop takes it down. `worker`: the workers' task slots."""
    pool = pool_class(provider=provider or Local(), nodes=nodes, name=name, keep=True, output=None, autostop=autostop,
                      worker=worker)
    named = pool.named
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
        self.keeper: KeepSupport | None = None  # the kind that keeps an attached pool (its record says)
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
        log_end = None if self.attach else attempt.mark(self.name)
        try:
            if self.attach:  # workers may have died since Pool.attach() looked
                rec = records.load(self.name)
                self.keeper = keep_support_of(rec)
                pool.provider = self.keeper.attach_provider(rec, nodes=pool.nodes)
            elif isinstance(pool.provider, KeptProvider):  # recorded before any worker starts, where the kind says
                kept, nodes, per_node = pool.provider, pool.nodes, pool.processes_per_node
                kept.on_launch(lambda keeper, inner: self._provisional(keeper, inner, kept.ctx, nodes, per_node))
            await enter()
        except BaseException:
            try:
                self.leave(kept=self.attach)
            finally:  # a new pool that made nothing leaves nothing in its name (`attempt.py`)
                if log_end is not None:
                    attempt.forget_if_nothing_made(self.name, log_end)
            raise
        driver = pool.driver()
        try:
            self.started(driver, pool.provider, pool.processes_per_node, pool.worker)
            if not self.attach:
                await self._open_ports(pool.provider)
        except BaseException as exc:  # the pool runs but cannot be recorded: a new one is torn down (and
            # forgotten), an attached one detached: the pool leaves as its block would (`Pool.__aexit__`)
            pool.keep = self.attach
            await pool.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        # a worker started later (restarted, or a replaced node's: `replace_failed`) goes into the record
        driver.spawn(follow_workers, driver.events(), self.name)
        return pool

    async def _open_ports(self, provider: Provider) -> None:
        """A new pool's ports opened on its firewall, for this client's address only, where the provider
        does that (`Feature.OPEN_PORTS`: AWS); they go with the pool's security group at down."""
        ports = [(int(lo), int(hi)) for lo, hi in self.spec.get("ports") or ()]
        if ports and Feature.OPEN_PORTS in provider.features:
            self.opened = await provider.open_ports(self.name, ports)
            log.info("pool %s: opened %s", self.name, ", ".join(self.opened))

    def started(self, driver: PoolDriver, provider: Provider, processes_per_node: int, worker: Any) -> None:
        """The workers run: write the record (a new pool) or check it still says the same (attached). What
        it holds of the nodes comes from the kind that keeps them (`KeepSupport.workers`, `node_facts`,
        `record_fields`): the transports report it, this walks none of them. `worker`: the pool's
        `sky.Worker` (its task processes and threads per rank, recorded)."""
        keeper = self.keeper if self.attach else provider.keeper if isinstance(provider, KeptProvider) else None
        if keeper is None:
            raise ProvisionError(f"pool {self.name}: no node of it runs, nothing to record")
        workers: list[WorkerEntry] = []
        host_keys: dict[str, str] = {}
        node_envs: dict[str, dict[str, Any]] = {}
        nodes = driver.nodes()
        for node in nodes:
            facts = keeper.node_facts(node.transport)
            if "host_key" in facts:
                host_keys[str(node.index)] = str(facts["host_key"])
            if "env" in facts:
                node_envs[str(node.index)] = dict(facts["env"])
            workers += [WorkerEntry(node=w.node, rank=w.rank, pid=w.pid, socket=w.socket)
                        for w in keeper.workers(node.index, node.transport, node.processes)]
        if self.attach:
            old = records.load(self.name)
            rec = dataclasses.replace(old, workers=tuple(workers))
        else:
            assert isinstance(provider, KeptProvider)
            inner = provider.inner
            handles = [node.handle for node in nodes if node.handle is not None]
            fields = keeper.record_fields(inner, handles, provider.ctx)
            info = dict(fields.pop("provider_info", {}))
            info.update(machine_fields(inner, handles))  # machines made to order: recorded by id (`cloud.py`)
            rec = ClusterRecord(name=self.name, provider=inner.name, nodes=len(nodes),
                                processes_per_node=processes_per_node, concurrency=worker.processes,
                                task_threads=worker.threads, created=time.time(), workers=tuple(workers),
                                spec=self.spec, autostop_minutes=self.autostop_minutes,
                                autostop_down=self.autostop_down, provider_info=info, host_keys=host_keys,
                                node_envs=node_envs, keeper=keeper.kind, **fields)
        if not self.attach and self.autostop_minutes is not None:
            rec = dataclasses.replace(rec, watchdog_pid=start_watchdog(rec))
        records.save(rec)

    def _provisional(self, keeper: KeepSupport, provider: Provider, ctx: KeepContext, nodes: int,
                     processes_per_node: int) -> None:
        """Record a new pool before any worker starts, where its kind says so (SSH hosts: no workers yet): a
        client killed while it creates the pool leaves a record that `skyhive down NAME` (or the next
        `launch -c NAME`) uses to clean its nodes — the workers have no idle timeout, nothing else would
        end them."""
        fields = keeper.provisional(provider, ctx, nodes)
        if fields is not None:
            records.save(ClusterRecord(name=self.name, provider=provider.name, nodes=nodes,
                                       processes_per_node=processes_per_node, created=time.time(), spec=self.spec,
                                       keeper=keeper.kind, **fields))

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
        if rec is not None:
            try:
                failures = keep_support_of(rec).leftovers(rec)
            except ProvisionError as exc:
                failures = [str(exc)]
            if failures:
                log.warning("pool %s: could not clean up on every host: %s", self.name, "; ".join(failures))
        if rec is not None:
            KeptPool(rec).terminate_machines()
        records.remove(self.name)


def start_watchdog(rec: ClusterRecord) -> int:
    """Start the pool's autostop watchdog (`runtime/worker/watchdog.py`, watching the connections to
    the workers' sockets) where the kind that keeps it runs it (this machine, or each host); its pid
    here (0: on the nodes). It runs `clusters.autostop NAME` after `autostop_minutes` idle."""
    assert rec.autostop_minutes is not None
    idle = rec.autostop_minutes * minute()
    # a pool with an autostop hook runs it first: the hook's runner, as the layer that saved the hook names it
    # (`control/autostop_hook.py`, which then runs `clusters.autostop`)
    module = "skyhive.runtime.clusters.autostop"
    hook = records.cluster_dir(rec.name) / "autostop-hook.json"  # (`autostop.SETTINGS_FILE`)
    with contextlib.suppress(FileNotFoundError, ValueError):
        module = str(json.loads(hook.read_text()).get("runner") or module)
    command = f"{shlex.quote(sys.executable)} -m {module} {shlex.quote(rec.name)}"
    from .autostop import wait_for_of  # (`resources.autostop.wait_for`, saved beside the hook)

    return keep_support_of(rec).start_watchdog(rec, idle, command=command,
                                               state_dir=str(records.cluster_dir(rec.name)),
                                               wait_for=wait_for_of(rec.name))


def set_autostop(rec: ClusterRecord, minutes: float | None, down: bool) -> ClusterRecord:
    """Give the running pool of `rec` a new autostop: its watchdog (if any) replaced by one for
    `minutes` (and `down`); `minutes=None` cancels it (no watchdog). The record saved and returned."""
    old = rec.watchdog_pid
    keep_support_of(rec).stop_watchdog(rec)  # one on the nodes
    if old and runs(old, "skyhive.runtime.worker.watchdog"):  # one here
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(old, signal.SIGKILL)  # it leads its own session; it only watches
    KeptPool(rec).set_autostop_shutdown(down)  # an OS shutdown (the watchdog on a machine) now stops or terminates it
    rec = dataclasses.replace(rec, autostop_minutes=minutes, autostop_down=down and minutes is not None, watchdog_pid=0)
    if minutes is not None:
        rec = dataclasses.replace(rec, watchdog_pid=start_watchdog(rec))
    records.save(rec)
    return rec


def refuse_stopped(rec: ClusterRecord) -> None:
    """Raise `PoolGone` when autostop stopped the pool of `rec` (checked by `Pool.attach`, and again once
    the attach lock is held: autostop stops a pool only while holding it)."""
    if rec.stopped == "stop":  # `skyhive stop` (commands/pause.py)
        raise PoolGone(f"pool {rec.name!r} was stopped by `skyhive stop {rec.name}`: `skyhive start {rec.name}` "
                       "starts it again")
    if rec.stopped:
        again = f"`skyhive start {rec.name}` (its instances, disks kept) or " if KeptPool(rec).machines else ""
        raise PoolGone(f"pool {rec.name!r} was stopped by {rec.stopped} (it was idle past its limit): "
                       f"{again}`skyhive launch -c {rec.name} TASK.yaml` starts it again")
