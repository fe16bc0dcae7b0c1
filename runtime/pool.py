"""`Pool`: run Python functions on a pool of nodes and get their results back.

    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        per_node = await pool.broadcast(fn, x)   # one result per worker, in rank order
        one = await pool.run(fn, x)              # the least busy worker
        many = await pool.map(fn, items)         # spread over every worker, results in input order

`with sky.Pool(...) as pool:` gives the same methods, blocking (see `BlockingPool`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..errors import PoolClosed, TaskTimeout
from ..plugins.api import ClientHook
from ..providers.accelerators import Accelerator
from ..providers.base import Provider
from ..providers.local import Local
from .actors.pool_actor import PoolRuntime
from .actors.prepared import Prepared, map_batches
from .concurrency import Worker, check_plugins
from .events.state import PoolState
from .events.stream import EventStream
from .output.progress import wants_display
from .output.router import OutputStream
from .output.selection import OutputSpec, selector
from .resources import ALLOCATIONS, Resources
from .retry import NO_RETRIES, Retries, retries_of, with_retries
from .serialize import load_value
from .settings import Settings
from .streams import ItemStream, ResultStream

if TYPE_CHECKING:
    from ..plugins.image import Image
    from .actors.channel import WorkerChannel
    from .clusters.named import NamedPool
    from .blocking import BlockingPool
    from .compute import PendingCall

__all__ = ["Pool", "ComputePool", "Compute", "ALLOCATIONS"]

log = logging.getLogger("skyhive.pool")

T = TypeVar("T")
_UNSET: Any = object()


def _unwrap(fn: Any) -> Callable[..., Any]:
    inner = getattr(fn, "__skyhive_fn__", None)
    fn = inner if inner is not None else fn
    if not callable(fn):
        raise TypeError(f"expected a function, got {type(fn).__name__}")
    return fn


class Pool:
    """A pool of nodes from `provider`, each running `processes_per_node` worker processes.

    Parameters: `provider` (default `Local()`), `nodes`, `plugins` (hooks that set up distributed
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
    every node is needed), and any `Settings`
    field as a keyword (timeouts, heartbeats, restart
    limits).

    What each node must have: `accelerator` (`"A100"`, `"A100:8"` or `sky.accelerators.A100()`),
    `vcpus` (or `cpus`), `memory_gb`, `allocation` (`"spot"`, `"on-demand"`, `"spot-if-available"`,
    `"cheapest"`). Providers that create machines choose them by these; Local and SSH warn
    (`AcceleratorWarning`) when a node lacks the accelerator. Raises `ValueError`/`TypeError` naming
    the argument for a bad value.

    A named pool can outlive this client: with `keep=True` (and `name=`; Local nodes only for now)
    leaving the block detaches and leaves the workers running, `Pool.attach(name)` takes them over
    from another process, and `autostop=MINUTES` ends the workers once they have had no client that
    long. See docs/clusters.md.

    `async with` starts the nodes (raises `ProvisionError` if they cannot be started, after
    destroying what was created) and, on exit — normal, by exception or by cancellation — drains the
    workers, runs plugin teardown and destroys the nodes; exit is shielded from cancellation and
    bounded by `stop_timeout`. Entering can be cancelled; nothing is left behind.
    """

    def __init__(
        self,
        provider: Provider | Sequence[Provider] | None = None,
        nodes: int = 1,
        *,
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
        **settings: Any,
    ) -> None:
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise ValueError(f"Pool(nodes={nodes!r}): need a positive number of nodes")
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
            raise TypeError(f"Pool() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        selector(output, where="Pool(output)")
        if isinstance(provider, (list, tuple)):  # tried in order: capacity and quota move on to the next
            from ..providers.fallback import Fallback

            provider = Fallback(provider)
        self.provider = provider if provider is not None else Local()
        if not isinstance(self.provider, Provider):
            raise TypeError(f"Pool(provider=...) needs a skyhive provider, got {type(self.provider).__name__}")
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
        self._rt: PoolRuntime | None = None
        self._blocking: BlockingPool | None = None
        self._client_hooks = contextlib.ExitStack()
        self._retries = 0  # calls re-run after a lost worker (`retries=`)

    def __repr__(self) -> str:
        status = self._rt.log.state.status if self._rt is not None else "new"
        pid = f" {self._rt.pool_id}" if self._rt is not None else ""
        return f"<Pool{pid} {status} provider={self.provider!r} nodes={self.nodes} processes_per_node={self.processes_per_node}>"

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
        from .clusters.named import NamedPool, attach_provider

        rec = records.load(name)
        pool = cls(provider=attach_provider(rec), nodes=rec.nodes, processes_per_node=rec.processes_per_node,
                   output=output, name=name, image=image, worker=Worker(concurrency=rec.concurrency), **settings)
        pool.keep = keep
        pool._named = NamedPool(name, attach=True, keep=keep, lock_timeout=wait)
        return pool

    # ---- lifetime ----------------------------------------------------------------------------------

    async def __aenter__(self) -> Pool:
        if self._rt is not None:
            raise RuntimeError("a Pool can be entered once; make a new Pool for a new pool")
        if self._named is None:
            return await self._enter()
        return await self._named.open(self, self._enter)

    async def _enter(self) -> Pool:
        image = self.image
        spec_plugins = self.plugins
        if image is not None or spec_plugins:
            from ..plugins.api import apply_transforms

            image = apply_transforms(spec_plugins, image, self)
        self._rt = PoolRuntime(
            provider=self.provider, nodes=self.nodes, processes_per_node=self.processes_per_node,
            plugins=spec_plugins, image=image, output=self.output_spec, settings=self.settings,
            name=self.name, log_events=self.log_events, **self.resources,
            concurrency=self.worker.concurrency, replace_failed=self.replace_failed,
            progress=wants_display(self.progress), min_nodes=self.min_nodes,
        )
        self._rt.detach_on_failure = self._named is not None and self._named.attach
        await self._rt.start()
        try:
            for plugin in spec_plugins:  # client-side hooks, for the pool's lifetime
                if isinstance(plugin, ClientHook):
                    self._client_hooks.enter_context(plugin.around_client(self))
        except BaseException as exc:
            self._client_hooks.close()
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        rt = self._rt
        if rt is None:
            return
        if exc is None:
            error = ""
        elif isinstance(exc, anyio.get_cancelled_exc_class()):
            error = "cancelled"
        else:
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
                await rt._exit_tg()
            finally:
                if named is not None:
                    named.leave(kept=self.keep)

    def __enter__(self) -> BlockingPool:
        from .blocking import BlockingPool

        self._blocking = BlockingPool(self)
        return self._blocking.__enter__()

    def __exit__(self, *exc: Any) -> None:
        assert self._blocking is not None
        self._blocking.__exit__(*exc)

    @property
    def _runtime(self) -> PoolRuntime:
        if self._rt is None:
            raise PoolClosed("the pool is not open: use `async with Pool(...) as pool`")
        return self._rt

    @property
    def id(self) -> str:
        """The pool id (names its event log: `skyhive ls`, `skyhive down`)."""
        return self._runtime.pool_id

    @property
    def state(self) -> PoolState:
        """The pool's state, folded from its events."""
        return self._runtime.log.state

    @property
    def dropped(self) -> dict[int, str]:
        """The nodes left out when the pool started (`min_nodes`): node index -> why it failed."""
        return dict(self._runtime.membership.dropped)

    @property
    def log_path(self) -> str | None:
        path = self._runtime.log.path
        return str(path) if path is not None else None

    def statistics(self) -> dict[str, Any]:
        """A snapshot: nodes and their states, workers and their load, task counters, retries and
        node replacements (done, and under way)."""
        rt = self._runtime
        st = rt.log.state
        return {
            "pool_id": rt.pool_id,
            "status": st.status,
            "nodes": {n.index: n.state.value for n in rt.nodes},
            "workers": {(n.index, i): c.load for n in rt.nodes for i, c in enumerate(n.channels) if c is not None},
            "tasks_submitted": st.tasks_submitted,
            "tasks_in_flight": st.tasks_in_flight,
            "tasks_ok": st.tasks_ok,
            "tasks_failed": st.tasks_failed,
            "tasks_cancelled": st.tasks_cancelled,
            "tasks_lost": st.tasks_lost,
            "retries": self._retries,
            "replacements": st.replacements,  # nodes replaced (`replace_failed=True`)
            "replacing": sorted(i for i in range(len(rt.nodes)) if rt.loss_policy.replacing(i)),
            "output_records": rt.router.records,
            "output": rt.router.statistics(),
        }

    # ---- calls -------------------------------------------------------------------------------------

    @staticmethod
    def _options(output: Any, capture: bool) -> dict[str, Any] | None:
        if output is _UNSET and not capture:
            return None
        options: dict[str, Any] = {}
        if output is not _UNSET:
            options["show"] = selector(output, where="output")
        if capture:
            options["capture"] = True
        return options

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float | None = None,
                  output: OutputSpec = _UNSET, capture: bool = False, retries: int = 0,
                  retry_on: type[Exception] | tuple[type[Exception], ...] = (), **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the least busy worker and return its result.

        Raises what `fn` raised (same type, remote traceback in its notes; `RemoteError` if the type
        cannot be rebuilt here), `SerializationError` before sending if an argument cannot be pickled,
        `TaskTimeout` after `timeout` seconds (the task is cancelled on the node), `WorkerLost` if the
        worker died. `output` overrides the pool's output selection for this call; with `capture`
        the result is a `Captured` holding the value and the task's output. `retries=N` re-runs the
        call (on a worker picked anew) up to N times after `WorkerLost`, or after the exception types
        in `retry_on`; the error that ends a retried call has `attempts` (see `runtime/retry.py`).
        """
        return await self._run_call(fn, args, kwargs, timeout=timeout, options=self._options(output, capture),
                                    retries=retries_of(retries, retry_on))

    def stream(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ItemStream:
        """Run the generator function `fn(*args, **kwargs)` on the least busy worker and give its
        items as they are yielded there: `async for item in pool.stream(fn, x): ...`.

        Every argument goes to `fn`. The task's error is raised after the items before it; leaving
        the loop early cancels the task. Each item is one frame, so it must fit the frame limit
        (large arrays: return them, or yield smaller pieces). A time bound has its own spelling:
        `gen(x).with_timeout(s) >> pool` (`TaskTimeout` after the items that came in time).
        """
        return self._stream_call(fn, args, kwargs)

    def _stream_call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                     timeout: float | None = None) -> ItemStream:
        rt = self._runtime
        fn = _unwrap(fn)
        prep = Prepared(fn, args, kwargs)

        async def open_(on_item: Callable[[int, bytes], None]) -> tuple[Any, Any, Any]:
            channel = rt.pick_nowait() if rt.open else None
            if channel is None:
                channel = await rt.pick()
            call, fut = await rt.open_stream(channel, prep, on_item)
            return channel, call, fut

        return ItemStream(open_, rt, load_value, timeout=timeout, name=prep.fn_name)

    async def _run_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                        timeout: float | None = None, options: dict[str, Any] | None = None,
                        retries: Retries = NO_RETRIES) -> T:
        """`run` with the user's arguments as they are (`fn(x) >> pool`: none of them is an option)."""
        rt = self._runtime
        fn = _unwrap(fn)
        prep = Prepared(fn, args, kwargs)

        async def attempt() -> T:
            channel = rt.pick_nowait() if rt.open else None
            if channel is None:
                channel = await rt.pick()
            return await rt.run_one(channel, prep, timeout=timeout, options=options)  # type: ignore[no-any-return]

        if retries.count == 0:  # (two coroutines fewer per call)
            return await attempt()
        return await with_retries(attempt, retries, what=prep.fn_name, on_retry=self._count_retry)

    def _count_retry(self) -> None:
        self._retries += 1

    async def broadcast(self, fn: Callable[..., T], *args: Any, timeout: float | None = None,
                        output: OutputSpec = _UNSET, capture: bool = False, retries: int = 0,
                        retry_on: type[Exception] | tuple[type[Exception], ...] = (), **kwargs: Any) -> list[T]:
        """Run `fn(*args, **kwargs)` on every worker; one result each, in rank (node) order.

        The call is pickled once. If any worker raises, the others are cancelled and the first error
        is raised. Raises as `run` does; `retries` re-runs the whole broadcast (every worker).
        """
        return await self._broadcast_call(fn, args, kwargs, timeout=timeout, options=self._options(output, capture),
                                          retries=retries_of(retries, retry_on))

    async def _broadcast_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                              timeout: float | None = None, options: dict[str, Any] | None = None,
                              retries: Retries = NO_RETRIES) -> list[T]:
        """`broadcast` with the user's arguments as they are (`fn(x) @ pool`)."""
        rt = self._runtime
        fn = _unwrap(fn)
        prep = Prepared(fn, args, kwargs)

        async def attempt() -> list[T]:
            channels = await rt.all_channels()
            return await rt.run_prepared(channels, prep, timeout=timeout, options=options)  # type: ignore[no-any-return]

        return await with_retries(attempt, retries, what=prep.fn_name, on_retry=self._count_retry)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        """Start `fn(*args, **kwargs)` on the least busy worker, from any thread (joblib's backend, a
        thread pool of your own); a `concurrent.futures.Future`. Every argument goes to `fn`.

        Cancelling the future cancels the task. Waiting on the future (`.result()`) on the pool's
        own event loop would block that loop: there, `await pool.run(...)` instead (see
        `in_event_loop`).
        """
        return self._submit_call(fn, args, kwargs)

    def _submit_call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                     timeout: float | None = None) -> concurrent.futures.Future[T]:
        """`submit` with the user's arguments as they are (`fn(x) > pool`)."""
        return asyncio.run_coroutine_threadsafe(self._run_call(fn, args, kwargs, timeout=timeout), self._runtime.loop)

    def in_event_loop(self) -> bool:
        """True when called on the thread that runs the pool's event loop (blocking there hangs)."""
        try:
            return asyncio.get_running_loop() is self._runtime.loop
        except RuntimeError:
            return False

    @property
    def workers(self) -> int:
        """How many worker processes can take a task now (over all nodes)."""
        return sum(len(n.usable_channels()) for n in self._runtime.nodes)

    async def map(self, fn: Callable[[Any], T], iterable: Iterable[Any], *, timeout: float | None = None,
                  chunksize: int | None = None, output: OutputSpec = _UNSET, retries: int = 0,
                  retry_on: type[Exception] | tuple[type[Exception], ...] = ()) -> list[T]:
        """`[fn(x) for x in iterable]`, spread over every worker; results in input order.

        Items travel in batches (`chunksize`, by default about a quarter of each worker's share, at
        most 1,000, and at most about `prepared.BATCH_BYTES` pickled) with two batches in flight per worker,
        so cheap functions run at pipe speed and a slow worker takes fewer batches. The first error cancels the rest and is raised (its notes
        say which item). `timeout` bounds the whole map; `retries` re-runs a batch whose worker was lost.
        """
        rt = self._runtime
        fn = _unwrap(fn)
        items = list(iterable)
        if not items:
            return []
        if chunksize is not None and (not isinstance(chunksize, int) or chunksize < 1):
            raise ValueError(f"map(chunksize={chunksize!r}): need a positive integer")
        options = self._options(output, False)
        channels = [c for n in rt.members() for c in n.usable_channels()]
        workers = max(1, len(channels))
        size = chunksize or max(1, min(1000, math.ceil(len(items) / (workers * 4))))
        results: list[Any] = [None] * len(items)
        template = Prepared.for_map(fn)
        pending = map_batches(template, items, size)
        policy = retries_of(retries, retry_on)

        async def lane(home: WorkerChannel | None) -> None:
            # a lane keeps to its worker (two lanes per worker pull from the same batches, so a slow
            # worker takes fewer): picking the least busy per batch read every worker each time,
            # quadratic at 10,000 workers. A lane whose worker is lost picks a new one.
            for start, prep in pending:
                async def attempt(prep: Prepared = prep) -> Any:
                    nonlocal home
                    if home is None or not home.usable:
                        home = await rt.pick()
                    return await rt.run_one(home, prep, timeout=None, options=options)

                values = await with_retries(attempt, policy, what=template.fn_name, on_retry=self._count_retry)
                results[start:start + len(values)] = values

        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                async with anyio.create_task_group() as tg:
                    lanes = min(math.ceil(len(items) / size), workers * 2)
                    for i in range(lanes):
                        tg.start_soon(lane, channels[i % len(channels)] if channels else None)
        except TimeoutError:
            raise TaskTimeout(f"map of {template.fn_name} over {len(items)} items did not finish "
                              f"within timeout={timeout} s; it was cancelled") from None
        except BaseExceptionGroup as group:  # one lane's error cancels the others: raise that error
            raise _first(group) from None
        return results

    async def gather(self, calls: Sequence[PendingCall], *, timeout: float | None = None) -> list[Any]:
        """Run several pending calls (`f(x)` of `@sky.compute` functions), spread over the workers;
        their results in call order. `timeout` bounds each call that has none of its own."""
        return list(await self._gather_calls(calls, timeout=timeout))

    def gather_stream(self, calls: Sequence[PendingCall], *, ordered: bool = True,
                      timeout: float | None = None) -> ResultStream:
        """The results of `calls` as they are ready: an async iterator (`async for r in ...`), in
        call order or, with `ordered=False`, in completion order. The first error is raised at its
        turn and cancels the rest; leaving the loop early (`aclose()`) cancels what still runs."""
        rt = self._runtime

        def bound(call: PendingCall) -> Callable[[], Any]:
            return lambda: self._run_call(call.fn, call.args, call.kwargs, timeout=call.timeout or timeout,
                                          retries=call.retries)

        return ResultStream([bound(c) for c in calls], ordered=ordered, tg=rt.tg)

    _gather_stream = gather_stream

    async def _gather_calls(self, calls: Sequence[PendingCall], *, timeout: float | None = None) -> tuple[Any, ...]:
        results: list[Any] = [None] * len(calls)

        async def one(i: int, call: PendingCall) -> None:
            results[i] = await self._run_call(call.fn, call.args, call.kwargs, timeout=call.timeout or timeout,
                                              retries=call.retries)

        try:
            async with anyio.create_task_group() as tg:
                for i, call in enumerate(calls):
                    tg.start_soon(one, i, call)
        except BaseExceptionGroup as group:
            raise _first(group) from None
        return tuple(results)

    # ---- observing ---------------------------------------------------------------------------------

    def events(self, *, replay: bool = False, max_buffer: int | None = None) -> EventStream:
        """The pool's events as they happen (with `replay`, first the recent ones kept in memory).

        An async iterator (and async context manager) registered when created, so no event after
        this call is missed. It ends when the pool closes, after the events it holds. One that falls
        more than `max_buffer` characters behind (about 200 per event plus the text of output events;
        default 16 MiB) is detached and raises `EventsStalled` after the events it still holds.
        `break` or `aclose()` releases it.
        """
        if max_buffer is None:
            return self._runtime.log.subscribe(replay=replay)
        return self._runtime.log.subscribe(replay=replay, max_buffer=max_buffer)

    def output(self, *, max_buffer: int | None = None, stall_timeout: float | None = None) -> OutputStream:
        """Every piece of output the workers write, as `OutputRecord`s, whatever is printed.

        An async iterator (and async context manager) registered when created. If it falls more than
        `max_buffer` characters behind, the workers are slowed down (nothing is dropped); one that
        takes nothing for `stall_timeout` seconds while workers wait is detached and raises
        `OutputStalled` after the records it still holds. `break` or `aclose()` releases it.
        """
        kw: dict[str, Any] = {}
        if max_buffer is not None:
            kw["max_buffer"] = max_buffer
        if stall_timeout is not None:
            kw["stall_timeout"] = stall_timeout
        return self._runtime.router.subscribe(**kw)


#: The seeds' names for `Pool` (`sky.ComputePool(...)`, `sky.Compute(...)`): the same class.
ComputePool = Pool
Compute = Pool


def _first(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

