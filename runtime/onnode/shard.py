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

from .context import instance_info

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
    seed: int | str | bytes | None = None,
    drop_last: bool = False,
    node: int | None = None,
    total_nodes: int | None = None,
) -> Any:
    """Return this node's part of each array.

    One array gives its part; several give a tuple of parts, aligned so that ``xs[i]`` still
    belongs with ``ys[i]``::

        x_train, y_train = sky.shard(x_train, y_train, shuffle=True, seed=epoch)

    **The split rule.** Let ``n`` be the (common) length and ``order`` be ``[0, 1, …, n-1]``, or,
    with ``shuffle=True``, that list permuted by ``random.Random(seed).shuffle`` — the same
    permutation on every node and in every Python process for the same seed. Node ``node`` gets
    the items ``order[j]`` for the positions ``j`` with ``j % total_nodes == node``, in that order.
    So the parts of all nodes are disjoint and together cover the data, and their lengths differ by
    at most one (a node may get nothing if ``n < total_nodes``). With ``drop_last=True`` every part
    is cut to ``n // total_nodes`` items, so all nodes get the same number (what a collective that
    expects equal batch counts needs); the up to ``total_nodes - 1`` items at the end of ``order``
    are then left out.

    **Seeds.** With more than one node, ``shuffle=True`` requires a ``seed``: nodes do not talk to
    each other here, so only a shared seed gives them the same permutation (without one the parts
    would overlap and miss items). Pass e.g. the epoch number to reshuffle per epoch. With a single
    node a missing seed means a fresh random permutation.

    **Types.** A ``list`` gives a list, a ``tuple`` a tuple, a numpy ``ndarray`` an ndarray and a
    torch ``Tensor`` a tensor (split along the first axis, on the same device; both are new
    arrays, not views). A ``range`` gives a ``range`` (a list when shuffled, as a permutation is
    not a range). Any other ``collections.abc.Sequence`` gives a list of its items. ``str`` and
    ``bytes`` are refused, since splitting a text into characters is almost always a mistake.

    **Which node.** ``node`` and ``total_nodes`` default to this worker's
    ``instance_info().node`` and ``.total_nodes``; pass both to override. With several worker
    processes per node, split per process with ``node=info.rank, total_nodes=info.world_size``.

    Raises:
        TypeError: no array given; an argument of an unsupported type (named in the message);
            ``node``, ``total_nodes`` or ``seed`` of the wrong type.
        ValueError: arrays of different lengths (the lengths are named); only one of ``node`` and
            ``total_nodes`` given; ``total_nodes < 1`` or ``node`` outside ``0..total_nodes-1``;
            ``shuffle=True`` without a seed on more than one node.
        skyhive.runtime.onnode.context.NotOnNodeError: ``node``/``total_nodes`` not given and not running
            on a skyhive node.
    """
    if not arrays:
        raise TypeError("shard() needs at least one array to split")
    n = _common_length(arrays)
    node, total_nodes = _resolve_node(node, total_nodes)
    if shuffle and seed is None and total_nodes > 1:
        raise ValueError(
            f"shard(shuffle=True) across {total_nodes} nodes needs a seed: every node must draw "
            "the same permutation, or the parts overlap and miss items. Pass seed=<int> "
            "(e.g. the epoch number)."
        )
    if seed is not None:
        seed = _as_seed(seed)

    order: list[int] | range = range(n)
    if shuffle:
        order = list(order)
        random.Random(seed).shuffle(order)
    mine = order[node::total_nodes]
    if drop_last:
        mine = mine[: n // total_nodes]

    parts = tuple(_take(a, mine) for a in arrays)
    return parts[0] if len(parts) == 1 else parts


def _common_length(arrays: tuple[Any, ...]) -> int:
    """The shared length of `arrays`; raises `TypeError`/`ValueError` as `shard()` documents."""
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
    if len(set(lengths)) > 1:
        pairs = zip(arrays, lengths, strict=True)
        described = ", ".join(f"{_type_name(a)} of {n}" for a, n in pairs)
        raise ValueError(
            f"shard() needs arrays of the same length to keep them aligned, got lengths "
            f"{', '.join(map(str, lengths))} ({described})"
        )
    return lengths[0]


def _resolve_node(node: int | None, total_nodes: int | None) -> tuple[int, int]:
    """Fill in and validate `node`/`total_nodes` (both given, or both from `instance_info()`)."""
    if (node is None) != (total_nodes is None):
        given, missing = ("node", "total_nodes") if total_nodes is None else ("total_nodes", "node")
        raise ValueError(
            f"shard() got {given} but not {missing}: pass both, or neither to use this "
            "worker's instance_info()"
        )
    if node is None or total_nodes is None:
        info = instance_info()
        return info.node, info.total_nodes
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
