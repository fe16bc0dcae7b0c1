"""`NodeTable`: the pool state's node records — an immutable sequence that shares structure.

A pool's state is rebuilt by a pure reducer, one event at a time, and read between events (a node
actor reads its own lifecycle state before each transition). With the records in a plain tuple,
every node event copied all of them: at 10,000 nodes and ~9 lifecycle events each, start-up and
teardown spent most of their time copying tuples, and the garbage made Python's collector walk
the heap again and again.

A `NodeTable` keeps the records in chunks of `CHUNK`; changing records makes a new table that
shares every chunk it did not touch (a two-level persistent vector, as in Clojure or
`pyrsistent`): a change costs O(CHUNK + n / CHUNK) references copied instead of O(n), and the old
table is left as it was, so `apply` stays pure. Changes are made through a `NodeTableBuilder` (a
"transient"): any number of edits, then `finish()` once.

It reads as a tuple of `NodeRecord`s: `len`, indexing (negative too), slicing (a tuple), iteration,
`==` with another `NodeTable` or any tuple of the same records, and the same hash as that tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any, Generic, TypeVar, overload

#: The record type (the state's `NodeRecord`; not imported here: state.py imports this module).
NodeRecord = TypeVar("NodeRecord")

__all__ = ["NodeTable", "NodeTableBuilder", "CHUNK"]

#: Records per chunk: a change copies one chunk and the table of chunks (64 and n / 64 references).
CHUNK = 64


class NodeTable(Sequence[NodeRecord]):
    """An immutable sequence of node records sharing structure with the tables it was made from."""

    __slots__ = ("_chunks", "_len")

    _chunks: tuple[tuple[NodeRecord, ...], ...]
    _len: int

    def __init__(self, records: Iterable[NodeRecord] = ()) -> None:
        items = tuple(records)
        self._chunks = tuple(items[i:i + CHUNK] for i in range(0, len(items), CHUNK))
        self._len = len(items)

    @classmethod
    def _of(cls, chunks: tuple[tuple[NodeRecord, ...], ...], length: int) -> NodeTable:
        table = object.__new__(cls)
        table._chunks = chunks
        table._len = length
        return table

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> NodeRecord: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[NodeRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> NodeRecord | tuple[NodeRecord, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"node {index} is outside 0..{self._len - 1}")
        return self._chunks[index // CHUNK][index % CHUNK]

    def __iter__(self) -> Iterator[NodeRecord]:
        return chain.from_iterable(self._chunks)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeTable):
            # chunks are canonical (all full but the last), so equal tables have equal chunks;
            # shared chunks compare by identity first
            return self._len == other._len and self._chunks == other._chunks
        if isinstance(other, tuple):
            return self._len == len(other) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # the same as the equal tuple's

    def __repr__(self) -> str:
        return f"NodeTable({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NodeTable, (tuple(self),))

    def builder(self) -> NodeTableBuilder:
        """A builder starting from this table (which it leaves unchanged)."""
        return NodeTableBuilder(self)


#: The table with no nodes (a state before `PoolStarted`).
EMPTY = NodeTable()


class NodeTableBuilder(Generic[NodeRecord]):
    """Edits to a `NodeTable`, collected: `b[i]`, `b[i] = record`, `len(b)`, `b.append(record)`;
    then `finish()` makes the new table, copying only the chunks that changed."""

    __slots__ = ("_base", "_changed", "_len")

    def __init__(self, base: NodeTable) -> None:
        self._base = base
        self._changed: dict[int, NodeRecord] = {}
        self._len = len(base)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> NodeRecord:
        record = self._changed.get(index)
        if record is None:
            if not 0 <= index < self._len:
                raise IndexError(f"node {index} is outside 0..{self._len - 1}")
            return self._base[index]
        return record

    def __setitem__(self, index: int, record: NodeRecord) -> None:
        if not 0 <= index < self._len:
            raise IndexError(f"node {index} is outside 0..{self._len - 1}")
        self._changed[index] = record

    def append(self, record: NodeRecord) -> None:
        self._changed[self._len] = record
        self._len += 1

    def finish(self) -> NodeTable:
        """The table with every edit applied (the base table is unchanged)."""
        base = self._base
        if not self._changed:
            return base
        chunks = list(base._chunks)
        by_chunk: dict[int, list[int]] = {}
        for index in self._changed:
            by_chunk.setdefault(index // CHUNK, []).append(index)
        for c in sorted(by_chunk):  # appended chunks come after the base's, in order
            indices = by_chunk[c]
            chunk = list(chunks[c]) if c < len(chunks) else []
            for index in sorted(indices):
                offset = index % CHUNK
                if offset < len(chunk):
                    chunk[offset] = self._changed[index]
                else:  # appended: indices beyond the base come in order
                    chunk.append(self._changed[index])
            if c < len(chunks):
                chunks[c] = tuple(chunk)
            else:
                chunks.append(tuple(chunk))
        return NodeTable._of(tuple(chunks), self._len)
