"""`shard()`: this node's part of a data set.

Every node of a pool calls `shard(x, y)` on the same data and gets its own part back, such that
the parts of all nodes are disjoint and (unless `drop_last` drops a few) cover the data. No
communication is needed: the split is a pure function of the length, the node, the node count and
the seed.

numpy and torch are never imported here; an argument is recognised as an `ndarray` or a `Tensor`
only if its library is already imported (an object of that type cannot exist otherwise).
"""

from __future__ import annotations

import operator
import random
import sys
from collections.abc import Sequence
from typing import Any, TypeVar, overload

from .instance import NotOnNodeError, instance_info

__all__ = ["shard"]

T = TypeVar("T")


@overload
def shard(
    array: T,
    /,
    *,
    shuffle: bool = ...,
    seed: int | str | bytes | None = ...,
    drop_last: bool = ...,
    node: int | None = ...,
    total_nodes: int | None = ...,
) -> T: ...


@overload
def shard(
    array: Any,
    other: Any,
    /,
    *arrays: Any,
    shuffle: bool = ...,
    seed: int | str | bytes | None = ...,
    drop_last: bool = ...,
    node: int | None = ...,
    total_nodes: int | None = ...,
) -> tuple[Any, ...]: ...


def shard(
    *arrays: Any,
    shuffle: bool = False,
    seed: int | str | bytes | None = 0,
    drop_last: bool = False,
    node: int | None = None,
    total_nodes: int | None = None,
) -> Any:
    """Return this node's part of each array.

    One array gives its part; several give a tuple of parts, aligned so that ``xs[i]`` still
    belongs with ``ys[i]``::

        x_train, y_train = sky.shard(x_train, y_train, shuffle=True, seed=epoch)
        x_train, y_train, x_test, y_test = sky.shard(x_train, y_train, x_test, y_test)

    The rule is Skyward's, so a program ported from it gets the same parts for the same inputs.

    **The split rule.** Let ``n`` be an array's length and ``order`` be ``[0, 1, …, n-1]``, or,
    with ``shuffle=True``, that list permuted by ``random.Random(seed).shuffle`` — the same
    permutation on every node and in every Python process for the same seed (default ``0``, so
    the nodes agree without being told). Node ``node`` gets the items ``order[j]`` for the
    positions ``j`` with ``j % total_nodes == node``, in that order: the parts of all nodes are
    disjoint, cover the data, and differ in length by at most one (a node may get nothing if
    ``n < total_nodes``). With ``drop_last=True`` each node instead gets the contiguous block
    ``order[node*k:(node+1)*k]`` with ``k = n // total_nodes``: equal parts (what a collective that
    expects equal batch counts needs), the last ``n % total_nodes`` items of ``order`` left out.

    **Several arrays.** Arrays of equal length are split with the same positions, so they stay
    aligned. Arrays of different lengths are accepted when they come in equal-length groups of
    consecutive arguments (``x_train, y_train, x_test, y_test``): each group is split by its own
    length. Anything else — ``shard(x, y)`` with ``len(x) != len(y)`` — is a `ValueError`, since
    no split could keep such arrays aligned (Skyward splits them silently, misaligned).

    **Types.** A ``list`` gives a list, a ``tuple`` a tuple, a numpy ``ndarray`` an ndarray and a
    torch ``Tensor`` a tensor (split along the first axis, on the same device; both are new
    arrays, not views). A ``range`` gives a ``range`` (a list when shuffled; its items
    equal Skyward's list). Any other ``collections.abc.Sequence`` gives a
    list of its items. ``str`` and ``bytes`` are refused (Skyward splits them into characters,
    which is almost always a mistake).

    **Which node.** ``node`` and ``total_nodes`` default to this worker's
    ``instance_info().node`` and ``.total_nodes``; either may be given alone (the other comes
    from ``instance_info()``). Off a node — the function run here to debug it — the defaults are
    node 0 of 1: ``shard()`` returns all the data. With several worker processes per node, split
    per process with ``node=info.rank, total_nodes=info.world_size``.

    Raises:
        TypeError: no array given; an argument of an unsupported type (named in the message);
            ``node``, ``total_nodes`` or ``seed`` of the wrong type.
        ValueError: arrays whose lengths cannot be aligned (the lengths are named);
            ``total_nodes < 1`` or ``node`` outside ``0..total_nodes-1``.
    """
    if not arrays:
        raise TypeError("shard() needs at least one array to split")
    lengths = _lengths(arrays)
    node, total_nodes = _resolve_node(node, total_nodes)
    seed = _as_seed(0 if seed is None else seed)

    positions: dict[int, list[int] | range] = {}
    for n in set(lengths):
        order: list[int] | range = range(n)
        if shuffle:
            order = list(order)
            random.Random(seed).shuffle(order)
        if drop_last:
            k = n // total_nodes
            positions[n] = order[node * k:(node + 1) * k]
        else:
            positions[n] = order[node::total_nodes]

    parts = tuple(_take(a, positions[n]) for a, n in zip(arrays, lengths, strict=True))
    return parts[0] if len(parts) == 1 else parts


def _lengths(arrays: tuple[Any, ...]) -> list[int]:
    """Each array's length; raises `TypeError`/`ValueError` as `shard()` documents."""
    lengths = []
    for i, a in enumerate(arrays):
        _check_supported(a, i)
        try:
            lengths.append(len(a))
        except TypeError:  # a 0-d ndarray or tensor has a type we accept but no length
            raise TypeError(
                f"shard() argument {i} ({_type_name(a)}) has no length (a 0-d array?); "
                "it needs a first axis to split along"
            ) from None
    if len(set(lengths)) > 1 and not _in_equal_groups(lengths):
        described = ", ".join(f"{_type_name(a)} of {n}" for a, n in zip(arrays, lengths, strict=True))
        raise ValueError(
            f"shard() needs arrays of the same length to keep them aligned, got lengths "
            f"{', '.join(map(str, lengths))} ({described}); arrays of different lengths must come in "
            "equal-length groups of at least two (x_train, y_train, x_test, y_test)"
        )
    return lengths


def _in_equal_groups(lengths: list[int]) -> bool:
    """True when `lengths` is runs of at least two equal values (x_train, y_train, x_test, y_test)."""
    run = 1
    for prev, cur in zip(lengths, lengths[1:]):
        if cur == prev:
            run += 1
        elif run < 2:
            return False
        else:
            run = 1
    return run >= 2


def _resolve_node(node: int | None, total_nodes: int | None) -> tuple[int, int]:
    """Fill in (from `instance_info()`, or node 0 of 1 off a node) and validate `node`/`total_nodes`."""
    if node is None or total_nodes is None:
        try:
            info = instance_info()
            here = (info.node, info.total_nodes)
        except NotOnNodeError:
            here = (0, 1)  # run here to debug it: all the data
        node = here[0] if node is None else node
        total_nodes = here[1] if total_nodes is None else total_nodes
    node = _as_int("node", node)
    total_nodes = _as_int("total_nodes", total_nodes)
    if total_nodes < 1:
        raise ValueError(f"shard() total_nodes must be at least 1, got {total_nodes}")
    if not 0 <= node < total_nodes:
        raise ValueError(
            f"shard() node must be in 0..{total_nodes - 1} for total_nodes={total_nodes}, "
            f"got {node}"
        )
    return node, total_nodes


def _as_int(name: str, value: Any) -> int:
    """`value` as a plain int (numpy integers welcome); `TypeError` naming `name` otherwise."""
    if isinstance(value, bool):
        raise TypeError(f"shard() {name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"shard() {name} must be an int, got {_type_name(value)}") from None


def _as_seed(seed: Any) -> int | str | bytes:
    """`seed` as one of the types `random.Random` seeds identically in every process."""
    if isinstance(seed, (int, str, bytes)):
        return seed
    try:
        return operator.index(seed)  # numpy integers and the like
    except TypeError:
        raise TypeError(
            f"shard() seed must be an int, str or bytes, got {_type_name(seed)}"
        ) from None


def _check_supported(a: Any, i: int) -> None:
    """Raise `TypeError` naming the type unless `_take` knows how to split `a`."""
    if _is_ndarray(a) or _is_tensor(a):
        return
    if isinstance(a, (str, bytes, bytearray)):
        raise TypeError(
            f"shard() argument {i} is a {_type_name(a)}: split a list of items, not characters "
            "(wrap it in a list if you really mean one item)"
        )
    if isinstance(a, Sequence):
        return
    raise TypeError(
        f"shard() cannot split argument {i} of type {_type_name(a)}: it takes lists, tuples, "
        "ranges, other sequences, numpy arrays and torch tensors. For other containers shard "
        "the indices instead: idx = shard(range(len(data)))"
    )


def _take(a: Any, mine: list[int] | range) -> Any:
    """The items of `a` at the positions `mine`, as the same type as `a` where it can be."""
    if isinstance(a, range):
        if isinstance(mine, range):
            return a[mine.start : mine.stop : mine.step]
        return [a[i] for i in mine]
    if _is_ndarray(a):
        np = sys.modules["numpy"]
        return a[np.asarray(mine, dtype=np.intp)]
    if _is_tensor(a):
        torch = sys.modules["torch"]
        return a[torch.as_tensor(list(mine), dtype=torch.long, device=a.device)]
    if isinstance(a, tuple):
        return tuple(a[i] for i in mine)
    return [a[i] for i in mine]


def _is_ndarray(a: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(a, np.ndarray)


def _is_tensor(a: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, getattr(torch, "Tensor", ()))


def _type_name(a: Any) -> str:
    t = type(a)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
