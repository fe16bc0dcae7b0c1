"""`Call`: one task in flight on a worker, as its channel and the output router see it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ...protocol import Result

__all__ = ["Call"]


class Call:
    """One task in flight on a worker: the caller's future and what the router needs to know.

    The fields most calls leave as they are read through class defaults until set (then they live in
    the instance's `__dict__`): a call makes its object with seven fields, not fifteen."""

    __slots__ = ("task_id", "future", "options", "fn_name", "fn_id", "new_fn", "fn_bytes", "__dict__")

    abandoned = False
    started = False
    outputs: list[tuple[int, str]] | None = None
    on_item: Callable[[int, bytes], None] | None = None  # a streamed task's items go here
    cached: tuple[int, ...] = ()  # buffers sent by reference (the worker's content cache)
    buffers: Sequence[Any] = ()  # kept while some are by reference, for a `Missing`
    shared: tuple[int, ...] = ()  # buffers passed in shared memory (a Local worker)
    announced = False  # its Submit announced buffers: `send_buffers` sends those not cached/shared

    def __init__(self, task_id: int, future: asyncio.Future[Result] | None, options: Any, fn_name: str,
                 fn_id: bytes = b"", new_fn: bool = False, fn_bytes: bytes = b"") -> None:
        self.task_id = task_id
        self.future = future
        self.options = options
        self.fn_name = fn_name
        self.fn_id = fn_id  # its function's id
        self.new_fn = new_fn  # it carries its function's bytes
        self.fn_bytes = fn_bytes  # ... which go again if the worker asks (`WantFunction`); b"" for a large one
