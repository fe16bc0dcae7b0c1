"""The worker-side task core shared by every worker: find a task's function, run it, build its `Result`.

Used by the process daemon (`runtime/worker/daemon.py`) and by the in-process worker of simulated
nodes (`runtime/transport/memory.py`), so both unpickle, run and answer a task the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import cloudpickle

from ...protocol import Item, Result, Submit
from ..serialize import dump_exception, dump_inline, dump_value
from .setup import FN_CACHE_LIMIT

__all__ = ["load_function", "invoke", "result_message", "cancelled_result"]


def load_function(fns: dict[bytes, Callable[..., Any]], sub: Submit) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The task's function (cached in `fns` by its id), and the out-of-band buffers of its arguments.
    A large function travels as buffer 0 (option ``fn_buffer``), with every call."""
    buffers = sub.buffers
    payload: Any = sub.fn
    if sub.options.get("fn_buffer"):
        if not buffers:
            raise RuntimeError("task announced its function as a buffer and sent none (client bug)")
        payload, buffers = buffers[0], buffers[1:]
    fn = fns.get(sub.fn_id)
    if fn is None:
        if not payload:
            raise RuntimeError("worker does not hold the function this task refers to (client bug)")
        fn = cloudpickle.loads(payload)
        if len(fns) >= FN_CACHE_LIMIT:
            fns.clear()
        fns[sub.fn_id] = fn
    return fn, buffers


def invoke(fn: Callable[..., Any], args: Any, batch: bool, stream: int | None,
           send_item: Callable[[Item], None]) -> Any:
    """Call `fn`: on each item of a map batch, or once with ``(args, kwargs)``. A generator's items are
    returned as a list, or, when `stream` is a task id, sent one by one as `Item`s (the count returned)."""
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
    if inspect.isgenerator(value):
        if stream is None:  # not asked to stream (`pool.run`): the items, as a list
            return list(value)
        count = 0
        for item in value:
            send_item(Item(task_id=stream, index=count, value=dump_inline(item, f"item {count}")))
            count += 1
        return count
    return value


def cancelled_result(task_id: int, message: str) -> Result:
    """The `Result` of a cancelled task."""
    return Result(task_id=task_id, ok=False, value=b"", cancelled=True, error_type="TaskCancelled",
                  error_message=message)


def result_message(task_id: int, ok: bool, value: Any) -> tuple[Result, list[Any]]:
    """The `Result` (and its out-of-band buffers) for a task that returned `value` (ok) or raised it."""
    if ok:
        try:
            data, buffers = dump_value(value, "result")
            return Result(task_id=task_id, ok=True, value=data,
                          buffer_sizes=tuple(memoryview(b).nbytes for b in buffers)), buffers
        except Exception as exc:  # the result could not be pickled: report that instead
            value = exc
    data, type_name, message, tb = dump_exception(value)
    return Result(task_id=task_id, ok=False, value=data, error_type=type_name, error_message=message,
                  traceback=tb), []
