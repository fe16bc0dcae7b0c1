"""`TaskCore`: what a worker does with one task — find its function (loaded once, asked for again
when this worker no longer holds it), load its arguments, run it (plugins' task hooks around it, a
generator streamed as `Item` frames), and answer with one `Result`. Transport-free: a subclass sends
the frames (`send`, `send_value`, `send_result`; `WorkerDaemon` over its file descriptors, the
simulated nodes' worker in memory) and owns the task's output streams (`_streams`).
"""

from __future__ import annotations

import abc
import contextlib
import os
import pickle
import time
from collections import OrderedDict
from collections.abc import Callable
from types import GeneratorType
from typing import Any

import cloudpickle

from ...protocol import Connection, Item, Message, ProtocolError, Result, Role, State, Submit, WantFunction
from ..onnode.setup import FN_CACHE_BYTES, FN_CACHE_LIMIT
from ..common.remote_errors import dump_exception
from ..common.serialize import INBAND_MAX, dump_inline, dump_value, function_name, load_value
from .capture import flush_streams

__all__ = ["TaskCore", "TaskCancelled"]

_loads = pickle.loads  # (load_value, for the usual arguments: pickled in band)
#: what `dump_value(None)` gives: the value of most calls that return nothing, pickled once
_NONE = pickle.dumps(None, protocol=5)
_NUMBERS = frozenset({int, float, bool})
_dumps = pickle.dumps


class TaskCancelled(BaseException):
    """Raised inside a task's thread when the client cancels it (a BaseException, like KeyboardInterrupt)."""


class TaskCore(abc.ABC):
    """The task-running half of a worker (see the module docstring)."""

    _streams: tuple[Any, ...]  # the task's stdout and stderr (flushed when it ends)
    app_stack: contextlib.ExitStack  # the plugins' `around_app` contexts (entered by the setup task)

    def __init__(self) -> None:
        self.conn = Connection(Role.WORKER)
        self.task_started = 0.0
        self.fns: dict[bytes, Callable[..., Any]] = {}
        # the pickled size of each function loaded into `fns`, oldest first, and their sum: bounded by
        # FN_CACHE_BYTES as `fns` is by FN_CACHE_LIMIT (see `_hold`; a warm call never touches these)
        self._fn_sizes: OrderedDict[bytes, int] = OrderedDict()
        self.fn_bytes_held = 0
        self.current: int | None = None
        self.in_user_code = False
        self.cancel_requested: int | None = None
        self.cancelled_queued: set[int] = set()
        self.task_hooks: list[Any] = []
        self.setup_info: Any = None
        # tasks that came without their function's bytes, which this worker no longer holds: they wait
        # for the client's `Function` (see `_wants_function`); and those whose function the client
        # could not send (they fail as tasks of a function this worker does not hold)
        self.parked: dict[int, Submit] = {}
        self.no_function: set[int] = set()

    # ---- what a subclass provides ------------------------------------------------------------------

    @abc.abstractmethod
    def send(self, msg: Message) -> None:
        """Send one message to the client."""

    @abc.abstractmethod
    def send_value(self, task_id: int, value: bytes) -> None:
        """Send the successful `Result` of `task_id` whose pickled value is `value` (no buffers)."""

    @abc.abstractmethod
    def send_result(self, msg: Result, buffers: list[Any]) -> None:
        """Send `msg` and its out-of-band `buffers`."""

    # ---- one task ----------------------------------------------------------------------------------

    def execute(self, sub: Submit) -> None:
        task_id = sub.task_id
        if task_id in self.cancelled_queued:
            self.cancelled_queued.discard(task_id)
            self.send_result(Result(task_id=task_id, ok=False, value=b"", cancelled=True,
                                    error_type="TaskCancelled", error_message="cancelled before it started"), [])
            return
        fn = self.fns.get(sub.fn_id)
        if fn is None and not sub.fn and self._wants_function(sub):
            return  # parked until the client sends the function (see dispatch)
        self.task_started = time.monotonic()
        self.current = task_id
        ok, cancelled = True, False
        value: Any = None
        try:
            options, batch = sub.options, sub.batch
            if fn is None or options:
                fn, buffers = self._function(sub)
            else:  # (the common warm call: a function it holds, no options)
                buffers = sub.buffers
            if not sub.args:
                args = load_value(sub.args, buffers)
            else:  # (`buffers=()` costs pickle ~55 ns more than no buffers at all)
                args = _loads(sub.args, buffers=buffers) if buffers else _loads(sub.args)
            # from here on the task's arguments live only as long as the task needs them: the Result
            # goes out after they are dropped, so a memfd the client passed is no longer held by
            # us when the client learns the call ended (its `MemfdPool` can refill it at once)
            del sub, buffers
            if options:
                if options.get("kind") == "setup":
                    self._setup(fn)
                else:
                    value = self._call(fn, args, batch, task_id if options.get("stream") else None)
            elif batch or self.task_hooks:
                value = self._call(fn, args, batch)
            else:  # a plain call, as `_call` makes it (one stack frame, not three, on every call)
                self.in_user_code = True
                a, kw = args
                value = fn(*a, **kw)
                if value.__class__ is GeneratorType:  # not asked to stream (`pool.run`): the items
                    value = list(value)
        except TaskCancelled:
            ok, cancelled = False, True
        except BaseException as exc:  # noqa: BLE001 - everything a task raises goes back to the caller
            ok, value = False, exc
        finally:
            self.in_user_code = False
            self.cancel_requested = None
            flush_streams(self._streams)
        self.current = None
        args = a = kw = None  # noqa: F841 - dropped before the Result (see above)
        self._reply(task_id, ok, cancelled, value, fn)

    def _call(self, fn: Callable[..., Any], args: Any, batch: bool, stream: int | None = None) -> Any:
        if not self.task_hooks:
            self.in_user_code = True
            return self._invoke(fn, args, batch, stream)
        with contextlib.ExitStack() as stack:
            for hook in self.task_hooks:
                stack.enter_context(hook(self.setup_info))
            self.in_user_code = True
            return self._invoke(fn, args, batch, stream)

    def _invoke(self, fn: Callable[..., Any], args: Any, batch: bool, stream: int | None = None) -> Any:
        if batch:
            out = []
            for i, item in enumerate(args):
                try:
                    out.append(fn(item))
                except Exception as exc:
                    exc.add_note(f"(map item {i} of this batch)")
                    raise
            return out
        a, kw = args
        value = fn(*a, **kw)
        if isinstance(value, GeneratorType):  # (inspect.isgenerator, without its Python frame)
            if stream is None:  # not asked to stream (`pool.run`): the items, as a list
                return list(value)
            return self._stream(stream, value)
        return value

    def _stream(self, task_id: int, items: Any) -> int:
        """Send each item the generator yields as an `Item` frame, as it is yielded; the count."""
        count = 0
        for item in items:
            self.send(Item(task_id=task_id, index=count, value=dump_inline(item, f"item {count}")))
            count += 1
        return count

    def _function(self, sub: Submit) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The task's function, and the out-of-band buffers of its arguments. A large function
        travels as buffer 0 (option ``fn_buffer``), with every call."""
        buffers = sub.buffers
        payload: Any = sub.fn
        if sub.options.get("fn_buffer"):
            if not buffers:
                raise RuntimeError("task announced its function as a buffer and sent none (client bug)")
            payload, buffers = buffers[0], buffers[1:]
        fn = self.fns.get(sub.fn_id)
        if fn is None:
            if not payload:
                raise RuntimeError("worker does not hold the function this task refers to (client bug)")
            fn = cloudpickle.loads(payload)
            self._hold(sub.fn_id, fn, memoryview(payload).nbytes)
        return fn, buffers

    def _hold(self, fn_id: bytes, fn: Callable[..., Any], size: int) -> None:
        """Keep `fn` (its pickle `size` bytes) loaded, first dropping the oldest functions held while
        FN_CACHE_LIMIT of them are, or while they and it would pass FN_CACHE_BYTES (one larger than
        that alone is still held, alone). Oldest by load, not by use: a warm call stays one dict
        lookup. The client learns of no drop: it sends a dropped small function again when this
        worker asks (`WantFunction`), and a large one with each task once the distinct functions it
        sent here pass either bound (see `WorkerChannel.carries_buffers`)."""
        fns, sizes = self.fns, self._fn_sizes
        self.fn_bytes_held -= sizes.pop(fn_id, 0)  # (dropped from `fns` by `forget_functions`'s caller)
        while sizes and (len(fns) >= FN_CACHE_LIMIT or self.fn_bytes_held + size > FN_CACHE_BYTES):
            old, old_size = sizes.popitem(last=False)
            fns.pop(old, None)
            self.fn_bytes_held -= old_size
        fns[fn_id] = fn
        sizes[fn_id] = size
        self.fn_bytes_held += size

    def forget_functions(self) -> None:
        """Drop every loaded function (a new client that knows of none takes this worker over)."""
        self.fns.clear()
        self._fn_sizes.clear()
        self.fn_bytes_held = 0

    def _wants_function(self, sub: Submit) -> bool:
        """`sub` came without its function's bytes and this worker does not hold it (its cache of
        loaded functions was cleared where the client could not tell): ask the client for it and
        park the task (True) — unless the function travels as a buffer (`fn_buffer`: then it is
        there), the client already could not send it, or the connection can no longer ask (after
        `Shutdown`): the task then fails, saying so (False)."""
        if sub.task_id in self.no_function:
            self.no_function.discard(sub.task_id)
            return False
        if sub.options.get("fn_buffer") or self.conn.state is not State.READY:
            return False
        self.parked[sub.task_id] = sub
        try:
            self.send(WantFunction(task_id=sub.task_id))
        except (OSError, ProtocolError):
            pass  # the client is gone; the reader ends the process
        return True

    def _setup(self, setup: Any) -> None:
        # (here: a pool without plugins never sends a setup, and its workers never import the plugins)
        from ...plugins.api import AppHook, TaskHook
        from ..onnode.instance import instance_info

        self._apply_env(setup.env)
        if self.setup_info is not None:  # a detached worker taken over by a new client: set up already
            return
        info = instance_info()
        self.setup_info = info
        for plugin in setup.plugins:
            if isinstance(plugin, AppHook):
                self.app_stack.enter_context(plugin.around_app(info))
            if isinstance(plugin, TaskHook):
                self.task_hooks.append(plugin.around_task)

    def _apply_env(self, env: dict[str, str]) -> None:
        """The pool's worker environment: this process's from now on."""
        os.environ.update(env)

    def _reply(self, task_id: int, ok: bool, cancelled: bool, value: Any, fn: Any = None) -> None:
        if cancelled:
            msg = Result(task_id=task_id, ok=False, value=b"", cancelled=True,
                         error_type="TaskCancelled", error_message="cancelled while running")
            self.send_result(msg, [])
            return
        if ok:
            if value is None:
                self.send_value(task_id, _NONE)
                return
            if value.__class__ in _NUMBERS:  # (what dump_value does with them, without its call)
                data = _dumps(value, 5)
                if len(data) <= INBAND_MAX:  # (but a huge int)
                    self.send_value(task_id, data)
                    return
            try:
                data, buffers = dump_value(value, f"the result of {function_name(fn)}" if fn is not None else "result")
                if not buffers:  # most values: one frame, packed from a template
                    self.send_value(task_id, data)
                    return
                sizes = tuple(memoryview(b).nbytes for b in buffers)
                self.send_result(Result(task_id=task_id, ok=True, value=data, buffer_sizes=sizes), buffers)
                return
            except Exception as exc:  # the result could not be pickled: report that instead
                value = exc
        data, type_name, message, tb = dump_exception(value)
        self.send_result(Result(task_id=task_id, ok=False, value=data, error_type=type_name,
                                error_message=message, traceback=tb), [])

