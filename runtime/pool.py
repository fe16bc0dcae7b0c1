"""`Pool`: run Python functions on a pool of nodes and get their results back.

    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        per_node = await pool.broadcast(fn, x)   # one result per worker, in rank order
        one = await pool.run(fn, x)              # the least busy worker
        many = await pool.map(fn, items)         # spread over every worker, results in input order

`with sky.Pool(...) as pool:` gives the same methods, blocking (see `BlockingPool`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import PoolClosed
from ..providers.base import Provider
from ..providers.features import Feature
from ..providers.limits import check_node_count
from ..providers.local import Local
from .calls import PoolCalls
from .pool_views import PoolViews
from .concurrency import Worker, check_plugins
from .common.selection import OutputSpec, selector
from .options import Options, with_options
from .pool_args import check_elastic, check_nodes, check_pool_args
from .resources import ALLOCATIONS, Resources
from .common.settings import Settings
from .spec import Spec

if TYPE_CHECKING:
    from .actors.pool_actor import PoolRuntime
    from ..plugins.image import Image
    from ..providers.accelerators import Accelerator
    from .clusters.named import NamedPool
    from .blocking import BlockingPool
    from .nodes.driver import PoolDriver

__all__ = ["Pool", "ComputePool", "Compute", "ALLOCATIONS"]

log = logging.getLogger("skyhive.pool")



class Pool(PoolViews, PoolCalls):
    """A pool of nodes from `provider`, each running `processes_per_node` worker processes.

    Parameters: `provider` (default `Local()`; a list: tried in turn, `order="price"` — Skyward's
    `selection="cheapest"` — cheapest first, see `providers.fallback`), `nodes`, `plugins` (hooks that set up distributed
    frameworks, see `skyhive.plugins`), `image` (the nodes' environment, `sky.Image`),
    `processes_per_node`, `output` (which nodes' output is printed here: "all", "head", a node
    index, a tuple of them, a predicate on `InstanceInfo`, or None), `name` (the pool id; default a
    random one), `log_events` (write the JSONL event log under the state directory), `worker`
    (`sky.Worker(concurrency=N)`: N task slots per rank, see `concurrency`), `replace_failed`
    (True: a node whose worker is lost for good is destroyed and a fresh one asked of the provider
    for the same index — SSH: a spare host listed beyond `nodes`; see `runtime/actors/replace.py`
    and docs/replacement.md), `progress` (draw the per-node provisioning display on stderr while the
    pool starts: None, the default, draws it only when stderr is a terminal), `min_nodes` (start
    with the nodes that could be provisioned when at least this many could: the others are left
    out, recorded and destroyed — see `runtime/actors/membership.py` and docs/min_nodes.md; default:
    every node is needed), `mounts` (buckets at paths on every node, Local included:
    `{"/data": "s3://b/p", "/ckpt": sky.Bucket("runs", mode="MOUNT_CACHED")}`, see docs/storage.md and
    `sky.checkpoint_dir()`), `nodes=(min, max)` (an elastic pool: it starts with `min` nodes, adds nodes
    while calls wait for a free worker, up to `max` and as the provider can, and gives back a node idle
    for `autoscale_idle_timeout` seconds (default 60), never below `min`; `autoscale_cooldown`: seconds
    between two growths — see `runtime/actors/autoscale.py` and docs/elastic.md), any `Settings`
    field as a keyword (timeouts, heartbeats, restart limits), and Skyward's `options=sky.Options(...)`
    (each field the keyword it means, runtime/options.py).

    What each node must have: `accelerator` (`"A100"`, `"A100:8"` or `sky.accelerators.A100()`),
    `vcpus` (or `cpus`), `memory_gb`, `allocation` (`"spot"`, `"on-demand"`, `"spot-if-available"`,
    `"cheapest"`). Providers that create machines choose them by these; Local and SSH warn
    (`AcceleratorWarning`) when a node lacks the accelerator. Raises `ValueError`/`TypeError` naming
    the argument for a bad value.

    A named pool can outlive this client: with `keep=True` (and `name=`; Local nodes only for now)
    leaving the block detaches and leaves the workers running, `Pool.attach(name)` takes them over
    from another process, and `autostop=MINUTES` ends the workers once they have had no client that
    long. See docs/clusters.md. A kept pool's `ports` (SkyPilot's spellings: `8888`, `"8000-8010"`, or
    a list) are reached with `skyhive forward NAME PORT`, and on a cloud that opens ports (AWS) are
    opened on the pool's firewall for this client's address only, until the pool goes down (docs/access.md).

    `async with` starts the nodes (raises `ProvisionError` if they cannot be started, after
    destroying what was created) and, on exit — normal, by exception or by cancellation — drains the
    workers, runs plugin teardown and destroys the nodes; exit is shielded from cancellation and
    bounded by `stop_timeout`. Entering can be cancelled; nothing is left behind. When the provider
    does not confirm every node gone, exit raises `TeardownIncomplete` naming them (the block's own
    error as its cause): the pool is `leaking` until `skyhive down` finishes it.
    """

    def __init__(
        self,
        provider: Provider | Sequence[Provider] | Spec | None = None,
        nodes: int | tuple[int, int] | Spec = 1,
        *more_specs: Spec,
        plugins: Sequence[Any] = (),
        image: Image | None = None,
        processes_per_node: int = 1,
        output: OutputSpec = "all",
        name: str | None = None,
        log_events: bool = True,
        accelerator: str | Accelerator | None = None,
        vcpus: float | None = None,
        memory_gb: float | None = None,
        allocation: str | None = None,
        worker: Worker | None = None,
        cpus: float | None = None,
        replace_failed: bool = False,
        progress: bool | None = None,
        keep: bool = False,
        autostop: float | None = None,
        min_nodes: int | None = None,
        order: str = "given",
        selection: str | None = None,
        mounts: Mapping[str, Any] | None = None,
        ports: Any = None,
        autoscale_idle_timeout: float | None = None,
        autoscale_cooldown: float | None = None,
        options: Options | None = None,
        **settings: Any,
    ) -> None:
        if options is not None:  # Skyward's sky.Options: each field becomes the keyword it means (runtime/options.py)
            (selection, worker, progress, autoscale_idle_timeout, autoscale_cooldown), settings = with_options(
                options, selection, worker, progress, autoscale_idle_timeout, autoscale_cooldown, settings=settings)
        if isinstance(provider, Spec) or isinstance(nodes, Spec) or more_specs:  # Skyward's multi-provider form
            from .spec import pool_arguments

            specs = [s for s in (provider, nodes) if isinstance(s, Spec)] + list(more_specs)
            shape = pool_arguments(specs, selection or "cheapest", {"accelerator": accelerator, "vcpus": vcpus, "cpus": cpus,
                                                      "memory_gb": memory_gb, "allocation": allocation})
            provider, nodes = shape.pop("provider"), shape.pop("nodes")
            accelerator, vcpus, memory_gb, allocation = (shape[k] for k in ("accelerator", "vcpus", "memory_gb",
                                                                            "allocation"))
            order, selection = "given", None  # the Specs come back in the order to try (priced by spec.py)
        nodes, self.elastic = check_nodes(nodes, autoscale_idle_timeout, autoscale_cooldown)  # (min, max, idle timeout) or None
        if self.elastic is not None:
            check_elastic(self.elastic, min_nodes=min_nodes, replace_failed=replace_failed, keep=keep,
                           autostop=autostop)
        if not isinstance(processes_per_node, int) or processes_per_node < 1:
            raise ValueError(f"Pool(processes_per_node={processes_per_node!r}): need a positive integer")
        if not isinstance(replace_failed, bool):
            raise TypeError(f"Pool(replace_failed={replace_failed!r}): need True or False")
        self.replace_failed = replace_failed
        if min_nodes is not None and (not isinstance(min_nodes, int) or isinstance(min_nodes, bool)
                                      or not 1 <= min_nodes <= nodes):
            raise ValueError(f"Pool(min_nodes={min_nodes!r}): need a whole number from 1 to nodes={nodes}")
        self.min_nodes = min_nodes
        unknown = set(settings) - Settings.names()
        if unknown:
            from .common.suggest import unexpected_keywords

            own = set(inspect.signature(Pool.__init__).parameters) - {"self", "settings"}
            raise TypeError(unexpected_keywords("Pool()", unknown, own | Settings.names()))
        selector(output, where="Pool(output)")
        if isinstance(provider, (list, tuple)):  # tried in order: capacity and quota move on to the next
            from ..providers.fallback import Fallback

            provider = Fallback(provider, order=selection or order)  # "price"/"cheapest": cheapest first
        chosen = provider if provider is not None else Local()
        if not isinstance(chosen, Provider):
            raise TypeError(f"Pool(provider=...) needs a skyhive provider, got {type(chosen).__name__}")
        self.provider: Provider = chosen
        most = self.elastic[1] if self.elastic is not None else nodes
        check_node_count(self.provider, most, f"Pool(nodes={self._nodes_text(nodes)})")  # at once: no pool log, no node record
        plugins = check_pool_args(plugins=plugins, image=image, name=name, log_events=log_events, progress=progress,
                                  keep=keep, autostop=autostop, processes_per_node=processes_per_node,
                                  settings=settings)  # runtime/pool_args.py
        self.nodes = nodes
        self.processes_per_node = processes_per_node
        self.plugins = tuple(plugins)
        self.image = image
        self.output_spec = output
        self.progress = progress
        self.name = name
        self.log_events = log_events
        self.settings = Settings(**settings)
        need = Resources.of(accelerator=accelerator, vcpus=vcpus, cpus=cpus, memory_gb=memory_gb,
                            allocation=allocation)  # see runtime/resources.py
        self.accelerator, self.memory_gb, self.allocation = need.accelerator, need.memory_gb, need.allocation
        self.vcpus = self.cpus = need.cpus
        self.resources: dict[str, Any] = need.as_dict()
        if worker is not None and not isinstance(worker, Worker):
            raise TypeError(f"Pool(worker=...) needs sky.Worker(concurrency=..., executor=...), got {type(worker).__name__}")
        self.worker = worker if worker is not None else Worker()
        check_plugins(self.worker, self.plugins)
        self.keep = bool(keep)
        self._named: NamedPool | None = None
        if keep or autostop is not None:  # a named pool whose nodes outlive this client (runtime/clusters/)
            from .clusters.named import keep_named

            self.provider, self._named = keep_named(name, self.provider, keep=keep, autostop=autostop)
        if ports is not None:  # a kept pool's `resources.ports` (runtime/clusters/named.py opens them)
            from .clusters.named import keep_ports

            keep_ports(self._named, ports)
        self._rt: PoolRuntime | None = None
        self._collections: Any = None  # the pool's sky.dict & co. while it is open (runtime/collections/)
        self._blocking: BlockingPool | None = None
        self.start_warnings: list[tuple[str, type[Warning]]] = []  # warnings held while the pool starts (`__aenter__`)
        self._client_hooks = contextlib.ExitStack()
        self._running = contextlib.AsyncExitStack()  # the runtime's task group, while the pool runs (`_enter`)
        self._retries = 0  # calls re-run after a lost worker (`retries=`)
        self.mounts: tuple[Any, ...] = ()  # bucket mounts (runtime/storage/, docs/storage.md)
        if mounts is not None:  # (a pool without mounts does not import the storage package)
            from .storage.plugin import parse_mounts

            self.mounts = parse_mounts(mounts)
        self._storage: Any = None
        self._pool_id: str | None = None  # chosen when its workers start early (`_start_early`), else by the runtime

    def __repr__(self) -> str:
        status = self._rt.log.state.status if self._rt is not None else "new"
        pid = f" {self._rt.pool_id}" if self._rt is not None else ""
        nodes = self._nodes_text(self.nodes)
        if self.elastic is not None and self._rt is not None:
            nodes = f"{len(self._rt.members())} of {nodes}"  # the nodes it has now, in its range
        return f"<Pool{pid} {status} provider={self.provider!r} nodes={nodes} processes_per_node={self.processes_per_node}>"

    def _nodes_text(self, nodes: int) -> str:
        return f"({self.elastic[0]}, {self.elastic[1]})" if self.elastic is not None else str(nodes)

    @classmethod
    def attach(cls, name: str, *, keep: bool = True, output: OutputSpec = "all", wait: float | None = 0.0,
               image: Image | None = None, **settings: Any) -> Pool:
        """The named pool `name` (kept by `Pool(name=..., keep=True)` or `skyhive launch -c`), to enter
        from this process: `with sky.Pool.attach("train") as pool: pool.broadcast(fn)`.

        Entering takes the workers over (the same processes, plugins already set up); leaving detaches
        and leaves them running, or with `keep=False` shuts them down and forgets the pool. One client
        at a time: `wait` seconds (None: for ever) for another one to leave. An `image`'s secrets are
        redacted from this client's log (the workers keep the environment they were started with).
        Raises `PoolNotFound` for an unknown name, `PoolGone` when its workers died, `PoolInUse` when
        another client stays attached (all naming the pool).
        """
        from .clusters import record as records
        from .clusters.named import NamedPool, attach_provider, refuse_stopped

        rec = records.load(name)
        refuse_stopped(rec)
        pool = cls(provider=attach_provider(rec), nodes=rec.nodes, processes_per_node=rec.processes_per_node,
                   output=output, name=name, image=image, worker=Worker.of_record(rec.concurrency, rec.task_threads),
                   **settings)
        pool.keep = keep
        pool._named = NamedPool(name, attach=True, keep=keep, lock_timeout=wait)
        return pool

    # ---- lifetime ----------------------------------------------------------------------------------

    def _start_early(self) -> None:
        """Before the runtime is imported, a pool with nothing to set up on its nodes has its provider
        start the workers (Local: `providers/local_early.py`); its nodes take them, the close ends the rest."""
        if self._rt is None and self.image is None and not self.plugins and not self.mounts and self._named is None:
            from .actors.worker_argv import WORKER_ARGV
            from .onnode.early import early_env

            self._pool_id = self.name or f"pool-{os.urandom(5).hex()}"  # (the workers carry it from their spawn)
            self.provider.start_early(self._pool_id, self.nodes, self.processes_per_node * self.worker.processes,
                                      [sys.executable, *WORKER_ARGV], early_env(self._pool_id))

    def _end_early(self) -> None:
        if self._pool_id is not None:
            self.provider.end_early(self._pool_id)

    async def __aenter__(self) -> Pool:
        if self._rt is not None:
            raise RuntimeError("a Pool can be entered once; make a new Pool for a new pool")
        if self._blocking is None:  # (`__enter__` did it before starting its event loop)
            self._start_early()
        from ..providers.held_warnings import held_warnings, warn_held

        # a node's AcceleratorWarning is raised on the event loop (maybe another thread): shown at the
        # caller's `Pool(` line instead — here, or by `BlockingPool.__enter__` in the caller's thread
        try:
            with held_warnings() as self.start_warnings:
                entered = await (self._enter() if self._named is None else self._named.open(self, self._enter))
        except BaseException:
            self._end_early()
            raise
        finally:
            if self._blocking is None:
                warn_held(self.start_warnings)
        from .common import active

        self._active = active.enter(self)  # `f(x) >> sky` in this block (runtime/common/active.py)
        return entered

    async def _enter(self) -> Pool:
        image = self.image
        spec_plugins = self.plugins
        if self.mounts:
            from .storage.pool import open_mounts

            self._storage, plugin = await open_mounts(self.mounts, self.name,
                                                      same_python=Feature.SAME_MACHINE in self.provider.features)
            spec_plugins = (plugin, *spec_plugins)
        if image is not None or spec_plugins:
            from ..plugins.api import PoolView, apply_transforms

            view = PoolView(provider=self.provider.name, same_machine=Feature.SAME_MACHINE in self.provider.features,
                            accelerator=self.accelerator, nodes=self.nodes, processes_per_node=self.processes_per_node)
            image = apply_transforms(spec_plugins, image, view)
        # the runtime, imported here: the workers started early (`_start_early`) start meanwhile
        from .actors.pool_actor import PoolRuntime
        from .interrupt import install_hook
        from .output.progress import wants_display

        self._rt = PoolRuntime(
            provider=self.provider, nodes=self.nodes, processes_per_node=self.processes_per_node,
            plugins=spec_plugins, image=image, output=self.output_spec, settings=self.settings,
            name=self._pool_id or self.name, log_events=self.log_events, **self.resources,
            concurrency=self.worker.processes, task_threads=self.worker.threads, replace_failed=self.replace_failed,
            progress=wants_display(self.progress), min_nodes=self.min_nodes, elastic=self.elastic,
        )
        self._rt.detach_on_failure = self._named is not None and self._named.attach
        install_hook()
        # sky.dict & co.: served here; each node's transport makes them reachable there (runtime/collections/)
        from .collections.store import ENV_VAR as COLLECTIONS_ENV
        from .collections.store import CollectionStore, socket_path

        self._collections = CollectionStore(socket_path(self._rt.pool_id)).start()
        self._rt.worker_env[COLLECTIONS_ENV] = self._collections.path
        self._running = contextlib.AsyncExitStack()  # the runtime's task group: entered with `async with`
        try:
            await self._running.enter_async_context(self._rt.running())
            await self._rt.start()
        except BaseException:
            try:
                await self._running.aclose()
            finally:
                self._close_collections()
                await self._close_mounts(failed=True)
            raise
        try:
            if spec_plugins:  # client-side hooks, for the pool's lifetime (without plugins: not imported)
                from ..plugins.api import ClientHook

                for plugin in spec_plugins:
                    if isinstance(plugin, ClientHook):
                        self._client_hooks.enter_context(plugin.around_client(self))
        except BaseException as exc:
            self._client_hooks.close()
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        import anyio

        from .common import active
        from .interrupt import cancel_in_flight, closed_by_interrupt

        active.leave(getattr(self, "_active", None))
        self._active = None
        rt = self._rt
        if rt is None:
            return
        if exc is None:
            error = ""
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            error = "cancelled"
            closed_by_interrupt(rt.pool_id)  # Ctrl-C under anyio.run: one line, not tracebacks (interrupt.py)
            cancel_in_flight(rt)
        else:
            if isinstance(exc, KeyboardInterrupt):
                closed_by_interrupt(rt.pool_id)
                cancel_in_flight(rt)  # what runs on the nodes stops now, not when it is done
            error = f"{type(exc).__name__}: {exc}"
        try:
            self._client_hooks.close()
        except Exception:  # noqa: BLE001 - a plugin's teardown must not keep the nodes running
            log.exception("a plugin's around_client teardown failed")
        named = self._named
        try:
            if named is not None and self.keep:
                await rt.detach()
            else:
                await rt.close(error)
        finally:
            try:
                await self._running.aclose()  # the runtime's task group left
            finally:
                self._close_collections()
                self._end_early()  # workers started early that no node took (a node failed)
                if named is not None:
                    named.leave(kept=self.keep)
                if not (named is not None and self.keep):
                    await self._close_mounts()
        leak = rt.leak_error(error)
        if leak is not None:  # what may still run (and cost) outranks the block's own error, which it names
            if isinstance(exc, anyio.get_cancelled_exc_class()):  # a cancellation goes on: said, not raised
                log.error("%s", leak)
                return
            raise leak from exc

    def _close_collections(self) -> None:
        store, self._collections = getattr(self, "_collections", None), None
        if store is not None:
            store.close()

    async def _close_mounts(self, *, failed: bool = False) -> None:
        if self._storage is not None:
            from .storage.pool import close_mounts

            storage, self._storage = self._storage, None
            await close_mounts(storage, failed=failed)

    def __enter__(self) -> BlockingPool:
        if self._rt is None and self._blocking is None:
            self._start_early()  # before the event loop's thread and the runtime are set up
        try:
            from .blocking import BlockingPool

            self._blocking = BlockingPool(self)
            return self._blocking.__enter__()
        except BaseException:
            self._end_early()
            raise

    def __exit__(self, *exc: Any) -> None:
        assert self._blocking is not None
        self._blocking.__exit__(*exc)

    @property
    def _runtime(self) -> PoolRuntime:
        if self._rt is None:
            raise PoolClosed("the pool is not open: use `async with Pool(...) as pool`")
        return self._rt

    @property
    def named(self) -> NamedPool | None:
        """The named-pool half of a kept (`keep=True`, `autostop=`) or attached pool
        (`runtime/clusters/named.py`: its record, its lock, what `launch -c` sets on it), else None."""
        return self._named

    def driver(self) -> PoolDriver:
        """What drives this open pool from outside it (`runtime/control/`: a task's steps, a managed
        job's node replaced in place): its nodes as views, replacing one, waiting until no call runs,
        calls on chosen workers — the `PoolDriver` contract (`runtime/nodes/driver.py`). Raises
        `PoolClosed` before the pool is entered; once it is closed, the driver's waits and calls raise it."""
        from .actors.driver import RuntimeDriver

        return RuntimeDriver(self._runtime)


#: The seeds' names for `Pool` (`sky.ComputePool(...)`, `sky.Compute(...)`): the same class.
ComputePool = Pool
Compute = Pool
