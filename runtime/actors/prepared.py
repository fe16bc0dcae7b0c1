"""`Prepared`: a call pickled once, ready to be sent to any number of workers."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from ...protocol.cache import NO_KEY
from ...protocol.codec import submit_tail
from ..common.serialize import INBAND_MAX, NO_ARGS, PickledFunction, dump_args, dump_function_cached, dump_value
from ..common.shm import SharedFiles
from ..common.keys import content_key

__all__ = ["Prepared", "map_batches", "BATCH_BYTES"]

#: A call whose arguments pickle to at most this many bytes, with no buffer, is kept with its function
#: (`Prepared.for_call`): the next call with the same arguments reuses it.
REUSE_MAX = 512


class Prepared:
    """A function (by id, with its pickled bytes for a worker that has not seen it) and its pickled
    arguments. `kind` is "call" (or "setup" for the plugins' worker setup); `batch` marks a `map`
    chunk of `items` calls.

    A large function (a closure over much data: its pickle over `INBAND_MAX`) travels as buffer 0
    (`fn_in_buffer`), with every call, so that it never makes a message frame large (see
    `protocol.codec.MAX_MESSAGE`); `buffers` then starts with it."""

    __slots__ = ("fn_id", "fn_bytes", "args", "buffers", "fn_name", "batch", "kind", "items", "fn_in_buffer",
                 "_keys", "_sizes", "_tail", "_tail_fn", "_shared")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                 kind: str = "call", fn_name: str | None = None) -> None:
        pickled = dump_function_cached(fn)
        self._fill(pickled, *dump_args(fn, args, kwargs), kind, fn_name)

    @classmethod
    def for_call(cls, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared:
        """`Prepared(fn, args, kwargs)` for a call: the very object of the last call of `fn` when the
        arguments pickle to the same bytes again and carry no buffer (`fn()`, `step(3)`, called again
        and again). Nothing in such a `Prepared` changes once made, so sharing it is safe, and it
        saves making one per call and packing its `Submit` again (see `submit_tail`)."""
        pickled = dump_function_cached(fn)
        last = pickled.last_call
        if not args and not kwargs:  # (what `dump_args` gives for none, without its call)
            if last is not None and last.args is NO_ARGS:
                return last  # type: ignore[no-any-return]
            data, buffers = NO_ARGS, []
        else:
            data, buffers = dump_args(fn, args, kwargs)
            if last is not None and not buffers and last.args == data:
                return last  # type: ignore[no-any-return]
        prep = cls.__new__(cls)
        prep._fill(pickled, data, buffers, "call", None)
        if not prep.buffers and len(data) <= REUSE_MAX:
            pickled.last_call = prep  # (kept with the function's pickle: it goes when that does)
        return prep

    def _fill(self, pickled: PickledFunction, args: bytes, buffers: list[Any], kind: str, fn_name: str | None) -> None:
        self.fn_id, self.fn_bytes = pickled.fn_id, pickled.payload
        self.fn_in_buffer = len(self.fn_bytes) > INBAND_MAX
        self._set_args(args, buffers)
        self.fn_name = fn_name or pickled.name
        self.batch = False
        self.kind = kind
        self.items = 1

    def _set_args(self, args: bytes, buffers: list[Any]) -> None:
        self.args = args
        self.buffers = [self.fn_bytes, *buffers] if self.fn_in_buffer else buffers
        self._keys: tuple[int, bytes] | None = None
        self._sizes: tuple[int, ...] | None = None
        self._tail: bytes | None = None  # its Submit without the function's bytes (see submit_tail)
        self._tail_fn: bytes | None = None  # ... and with them
        # made when a buffer first goes in shared memory (most calls have none: no object, and no
        # finalizer to run, per call)
        self._shared: SharedFiles | None = None

    @property
    def shared(self) -> SharedFiles:
        """Its large buffers in shared memory, for Local workers (made once, whatever the workers)."""
        if self._shared is None:
            self._shared = SharedFiles()
        return self._shared

    @property
    def has_shared(self) -> bool:
        """Whether some of its buffers went in shared memory (memfds to release after the call)."""
        return self._shared is not None and bool(self._shared.fds)

    def release_shared(self, *, reusable: bool) -> None:
        """Close (or hand back for reuse, see `SharedFiles.close`) the memfds made for this call."""
        if self._shared is not None:
            self._shared.close(reusable=reusable)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The byte size of each buffer (computed once, whatever the number of workers)."""
        if self._sizes is None:
            self._sizes = tuple(memoryview(b).nbytes for b in self.buffers)
        return self._sizes

    def submit_tail(self, with_fn: bool, options: dict[str, Any]) -> bytes:
        """This call's `Submit` packed but for its task id (`protocol.codec.submit_tail`; no buffers):
        with the function's bytes or without (a worker that holds it). Packed once for the default
        options, however many workers and calls."""
        if options:
            return submit_tail(fn_id=self.fn_id, fn=self.fn_bytes if with_fn else b"", args=self.args,
                               batch=self.batch, options=options)
        tail = self._tail_fn if with_fn else self._tail
        if tail is None:
            tail = submit_tail(fn_id=self.fn_id, fn=self.fn_bytes if with_fn else b"", args=self.args,
                               batch=self.batch, options={})
            if with_fn:
                self._tail_fn = tail
            else:
                self._tail = tail
        return tail

    def content_keys(self, min_size: int) -> bytes:
        """One content key per buffer (`protocol.cache.NO_KEY` for those under `min_size` bytes),
        concatenated; b"" when no buffer is that large. Computed once, whatever the number of workers."""
        if self._keys is None or self._keys[0] != min_size:
            sizes = [memoryview(b).nbytes for b in self.buffers]
            keys = b""
            if any(size >= min_size for size in sizes):
                keys = b"".join(
                    NO_KEY if size < min_size
                    else self.fn_id if i == 0 and self.fn_in_buffer  # the function's content key
                    else content_key(b)
                    for i, (b, size) in enumerate(zip(self.buffers, sizes))
                )
            self._keys = (min_size, keys)
        return self._keys[1]

    @property
    def args_nbytes(self) -> int:
        """Bytes of the pickled arguments, in band and out of band (the function not counted)."""
        buffers = self.buffers[1:] if self.fn_in_buffer else self.buffers
        return len(self.args) + sum(memoryview(b).nbytes for b in buffers)

    def __repr__(self) -> str:
        return f"<Prepared {self.fn_name} kind={self.kind} items={self.items}>"

    @classmethod
    def for_map(cls, fn: Callable[..., Any]) -> Prepared:
        """`fn` pickled once for `map`: its chunks come from `with_chunk`."""
        return cls(fn, (), {})

    def with_chunk(self, chunk: list[Any]) -> Prepared:
        """This function applied to each item of `chunk` (a `map` batch; the items pickled here)."""
        prep = copy.copy(self)
        prep._set_args(*dump_value(chunk, "map items"))
        prep.batch, prep.kind, prep.items = True, "call", len(chunk)
        return prep


#: Upper bound on one pickled `map` batch: large items make smaller batches, so a batch neither
#: holds a worker's pipe for long nor makes one worker take a disproportionate share.
BATCH_BYTES = 8 * 1024 * 1024


def map_batches(template: Prepared, items: list[Any], size: int) -> Iterator[tuple[int, Prepared]]:
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
