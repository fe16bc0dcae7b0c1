"""`Pool`: run Python functions on a pool of nodes and get their results back.

    async with sky.Pool(provider=sky.Local(), nodes=2) as pool:
        per_node = await pool.broadcast(fn, x)   # one result per worker, in rank order
        one = await pool.run(fn, x)              # the least busy worker
        many = await pool.map(fn, items)         # spread over every worker, results in input order

`with sky.Pool(...) as pool:` gives the same methods, blocking (see `BlockingPool`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..errors import PoolClosed, TaskTimeout
from ..providers.base import Provider
from ..providers.local import Local
from .actors.pool_actor import PoolRuntime
from .actors.prepared import Prepared
from .events.state import PoolState
from .events.stream import EventStream
from .output.router import OutputStream
from .output.selection import OutputSpec, selector
from .settings import Settings

if TYPE_CHECKING:
    from .blocking import BlockingPool
    from .compute import PendingCall

__all__ = ["Pool"]

T = TypeVar("T")
#: Upper bound on one pickled `map` batch: large items make smaller batches, so a batch neither
#: holds a worker's pipe for long nor makes one worker take a disproportionate share.
BATCH_BYTES = 8 * 1024 * 1024
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
    random one), `log_events` (write the JSONL event log under the state directory), and any
    `Settings` field as a keyword (timeouts, heartbeats, restart limits).

    `async with` starts the nodes (raises `ProvisionError` if they cannot be started, after
    destroying what was created) and, on exit — normal, by exception or by cancellation — drains the
    workers, runs plugin teardown and destroys the nodes; exit is shielded from cancellation and
    bounded by `stop_timeout`. Entering can be cancelled; nothing is left behind.
    """

    def __init__(
        self,
        provider: Provider | None = None,
        nodes: int = 1,
        *,
        plugins: Sequence[Any] = (),
        image: Any = None,
        processes_per_node: int = 1,
        output: OutputSpec = "all",
        name: str | None = None,
        log_events: bool = True,
        accelerator: str | None = None,
        cpus: float | None = None,
        memory_gb: float | None = None,
        **settings: Any,
    ) -> None:
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise ValueError(f"Pool(nodes={nodes!r}): need a positive number of nodes")
        if not isinstance(processes_per_node, int) or processes_per_node < 1:
            raise ValueError(f"Pool(processes_per_node={processes_per_node!r}): need a positive integer")
        unknown = set(settings) - Settings.names()
        if unknown:
            raise TypeError(f"Pool() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        selector(output, where="Pool(output)")
        self.provider = provider if provider is not None else Local()
        if not isinstance(self.provider, Provider):
            raise TypeError(f"Pool(provider=...) needs a skyhive provider, got {type(self.provider).__name__}")
        self.nodes = nodes
        self.processes_per_node = processes_per_node
        self.plugins = tuple(plugins)
        self.image = image
        self.output_spec = output
        self.name = name
        self.log_events = log_events
        # what each node must have: a cloud provider picks the cheapest machine that has it, and plugins
        # read `accelerator` (torch: the CUDA wheel index for an NVIDIA GPU)
        self.accelerator, self.cpus, self.memory_gb = accelerator, cpus, memory_gb
        self.resources = {"accelerator": accelerator, "cpus": cpus, "memory_gb": memory_gb}
        self.settings = Settings(**settings)
        self._rt: PoolRuntime | None = None
        self._blocking: BlockingPool | None = None

    def __repr__(self) -> str:
        status = self._rt.log.state.status if self._rt is not None else "new"
        pid = f" {self._rt.pool_id}" if self._rt is not None else ""
        return f"<Pool{pid} {status} provider={self.provider!r} nodes={self.nodes} processes_per_node={self.processes_per_node}>"

    # ---- lifetime ----------------------------------------------------------------------------------

    async def __aenter__(self) -> Pool:
        if self._rt is not None:
            raise RuntimeError("a Pool can be entered once; make a new Pool for a new pool")
        image = self.image
        spec_plugins = self.plugins
        if image is not None or spec_plugins:
            from ..plugins.api import apply_transforms

            image = apply_transforms(spec_plugins, image, self)
        self._rt = PoolRuntime(
            provider=self.provider, nodes=self.nodes, processes_per_node=self.processes_per_node,
            plugins=spec_plugins, image=image, output=self.output_spec, settings=self.settings,
            name=self.name, log_events=self.log_events, **self.resources,
        )
        await self._rt.start()
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
            await rt.close(error)
        finally:
            await rt._exit_tg()

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
    def log_path(self) -> str | None:
        path = self._runtime.log.path
        return str(path) if path is not None else None

    def statistics(self) -> dict[str, Any]:
        """A snapshot: nodes and their states, workers and their load, task counters."""
        rt = self._runtime
        st = rt.log.state
        return {
            "pool_id": rt.pool_id,
            "status": st.status,
            "nodes": {n.index: n.state.value for n in rt.nodes},
            "workers": {(c.node, c.local_rank): c.load for n in rt.nodes for c in n.channels if c is not None},
            "tasks_submitted": st.tasks_submitted,
            "tasks_in_flight": st.tasks_in_flight,
            "tasks_ok": st.tasks_ok,
            "tasks_failed": st.tasks_failed,
            "tasks_cancelled": st.tasks_cancelled,
            "tasks_lost": st.tasks_lost,
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
                  output: OutputSpec = _UNSET, capture: bool = False, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the least busy worker and return its result.

        Raises what `fn` raised (same type, remote traceback in its notes; `RemoteError` if the type
        cannot be rebuilt here), `SerializationError` before sending if an argument cannot be pickled,
        `TaskTimeout` after `timeout` seconds (the task is cancelled on the node), `WorkerLost` if the
        worker died. `output` overrides the pool's output selection for this call; with `capture`
        the result is a `Captured` holding the value and the task's output.
        """
        rt = self._runtime
        fn = _unwrap(fn)
        prep = Prepared(fn, args, kwargs)
        channel = rt.pick_nowait() if rt.open else None
        if channel is None:
            channel = await rt.pick()
        return await rt.run_one(channel, prep, timeout=timeout, options=self._options(output, capture))

    async def broadcast(self, fn: Callable[..., T], *args: Any, timeout: float | None = None,
                        output: OutputSpec = _UNSET, capture: bool = False, **kwargs: Any) -> list[T]:
        """Run `fn(*args, **kwargs)` on every worker; one result each, in rank (node) order.

        The call is pickled once. If any worker raises, the others are cancelled and the first error
        is raised. Raises as `run` does.
        """
        rt = self._runtime
        fn = _unwrap(fn)
        prep = Prepared(fn, args, kwargs)
        channels = await rt.all_channels()
        return await rt.run_prepared(channels, prep, timeout=timeout, options=self._options(output, capture))

    async def map(self, fn: Callable[[Any], T], iterable: Iterable[Any], *, timeout: float | None = None,
                  chunksize: int | None = None, output: OutputSpec = _UNSET) -> list[T]:
        """`[fn(x) for x in iterable]`, spread over every worker; results in input order.

        Items travel in batches (`chunksize`, by default about a quarter of each worker's share, at
        most 1,000, and at most about `BATCH_BYTES` pickled) with two batches in flight per worker,
        so cheap functions run at pipe speed and a slow worker takes fewer batches. The first error cancels the rest and is raised (its notes
        say which item). `timeout` bounds the whole map.
        """
        rt = self._runtime
        fn = _unwrap(fn)
        items = list(iterable)
        if not items:
            return []
        if chunksize is not None and (not isinstance(chunksize, int) or chunksize < 1):
            raise ValueError(f"map(chunksize={chunksize!r}): need a positive integer")
        options = self._options(output, False)
        workers = max(1, len([c for n in rt.nodes for c in n.usable_channels()]))
        size = chunksize or max(1, min(1000, math.ceil(len(items) / (workers * 4))))
        results: list[Any] = [None] * len(items)
        template = Prepared.for_map(fn)
        pending = _batches(template, items, size)

        async def lane() -> None:
            for start, prep in pending:
                channel = await rt.pick()
                values = await rt.run_one(channel, prep, timeout=None, options=options)
                results[start:start + len(values)] = values

        try:
            with anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext():
                async with anyio.create_task_group() as tg:
                    for _ in range(min(math.ceil(len(items) / size), workers * 2)):
                        tg.start_soon(lane)
        except TimeoutError:
            raise TaskTimeout(f"map of {template.fn_name} over {len(items)} items did not finish "
                              f"within timeout={timeout} s; it was cancelled") from None
        except BaseExceptionGroup as group:  # one lane's error cancels the others: raise that error
            raise _first(group) from None
        return results

    async def gather(self, calls: Sequence[PendingCall], *, timeout: float | None = None) -> list[Any]:
        """Run several pending calls (`f(x)` of `@sky.compute` functions), spread over the workers."""
        results: list[Any] = [None] * len(calls)

        async def one(i: int, call: PendingCall) -> None:
            results[i] = await self.run(call.fn, *call.args, timeout=timeout, **call.kwargs)

        try:
            async with anyio.create_task_group() as tg:
                for i, call in enumerate(calls):
                    tg.start_soon(one, i, call)
        except BaseExceptionGroup as group:
            raise _first(group) from None
        return results

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


def _batches(template: Prepared, items: list[Any], size: int) -> Iterator[tuple[int, Prepared]]:
    """(start, pickled batch) for `map`: at most `size` items, and at most about `BATCH_BYTES` once
    pickled — a batch found larger is pickled again with fewer items, and later batches start from
    that smaller count."""
    start = 0
    while start < len(items):
        prep = template.with_chunk(items[start:start + size])
        nbytes = prep.args_nbytes
        if nbytes > BATCH_BYTES and prep.items > 1:
            size = max(1, prep.items * BATCH_BYTES // nbytes)
            continue
        yield start, prep
        start += prep.items


def _first(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

