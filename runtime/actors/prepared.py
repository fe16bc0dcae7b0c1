"""`Prepared`: a call pickled once, ready to be sent to any number of workers."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..serialize import dump_args, dump_function_cached, dump_value

__all__ = ["Prepared"]


class Prepared:
    """A function (by id, with its pickled bytes for a worker that has not seen it) and its pickled
    arguments. `kind` is "call" (or "setup" for the plugins' worker setup); `batch` marks a `map`
    chunk of `items` calls."""

    __slots__ = ("fn_id", "fn_bytes", "args", "buffers", "fn_name", "batch", "kind", "items")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
                 kind: str = "call", fn_name: str | None = None) -> None:
        pickled = dump_function_cached(fn)
        self.fn_id, self.fn_bytes = pickled.fn_id, pickled.payload
        self.args, self.buffers = dump_args(fn, args, kwargs)
        self.fn_name = fn_name or pickled.name
        self.batch = False
        self.kind = kind
        self.items = 1

    def __repr__(self) -> str:
        return f"<Prepared {self.fn_name} kind={self.kind} items={self.items}>"

    @classmethod
    def for_map(cls, fn: Callable[..., Any]) -> Prepared:
        """`fn` pickled once for `map`: its chunks come from `with_chunk`."""
        return cls(fn, (), {})

    def with_chunk(self, chunk: list[Any]) -> Prepared:
        """This function applied to each item of `chunk` (a `map` batch; the items pickled here)."""
        prep = copy.copy(self)
        prep.args, prep.buffers = dump_value(chunk)
        prep.batch, prep.kind, prep.items = True, "call", len(chunk)
        return prep
