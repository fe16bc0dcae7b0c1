"""`shard()`: disjoint, covering, aligned, type-preserving parts; clear errors."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Sequence

import pytest

import skyhive as sky
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.protocol.info import ENV_VAR, InstanceInfo
from skyhive.runtime.onnode.instance import NotOnNodeError, set_instance_info
from skyhive.runtime.onnode.shard import shard

# Speed is measured in bench/, never asserted in a test: no Hypothesis deadline.
no_deadline = settings(deadline=None)

lengths = st.integers(min_value=0, max_value=200)
node_counts = st.integers(min_value=1, max_value=12)
seeds = st.integers(min_value=-(2**64), max_value=2**64)


def all_parts(data, total_nodes, **kw):
    return [shard(data, node=k, total_nodes=total_nodes, **kw) for k in range(total_nodes)]


@pytest.fixture(autouse=True)
def _off_node(monkeypatch):
    """Every test starts outside a worker; tests that need one set it themselves."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    set_instance_info(None)
    yield
    set_instance_info(None)


# -- the split rule ---------------------------------------------------------------------------


@no_deadline
@given(n=lengths, total=node_counts, shuffle=st.booleans(), seed=seeds)
def test_parts_are_disjoint_and_cover(n, total, shuffle, seed):
    parts = all_parts(list(range(n)), total, shuffle=shuffle, seed=seed)
    flat = [x for p in parts for x in p]
    assert sorted(flat) == list(range(n))  # covers, and no item twice


@no_deadline
@given(n=lengths, total=node_counts, shuffle=st.booleans(), seed=seeds)
def test_lengths_differ_by_at_most_one(n, total, shuffle, seed):
    sizes = [len(p) for p in all_parts(list(range(n)), total, shuffle=shuffle, seed=seed)]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first nodes get the extra items


@no_deadline
@given(n=lengths, total=node_counts, shuffle=st.booleans(), seed=seeds)
def test_drop_last_gives_equal_disjoint_parts(n, total, shuffle, seed):
    parts = all_parts(list(range(n)), total, shuffle=shuffle, seed=seed, drop_last=True)
    assert [len(p) for p in parts] == [n // total] * total
    flat = [x for p in parts for x in p]
    assert len(set(flat)) == len(flat) == n - n % total
    assert set(flat) <= set(range(n))


@no_deadline
@given(n=lengths, total=node_counts, seed=seeds, drop_last=st.booleans())
def test_follows_the_documented_rule(n, total, seed, drop_last):
    order = list(range(n))
    random.Random(seed).shuffle(order)
    for k in range(total):
        q = n // total  # drop_last: contiguous equal blocks (Skyward's rule)
        expected = order[k * q:(k + 1) * q] if drop_last else order[k::total]
        got = shard(
            list(range(n)), shuffle=True, seed=seed, drop_last=drop_last, node=k, total_nodes=total
        )
        assert got == expected
        plain = shard(list(range(n)), drop_last=drop_last, node=k, total_nodes=total)
        assert plain == (list(range(n))[k * q:(k + 1) * q] if drop_last else list(range(n))[k::total])


@no_deadline
@given(
    n=lengths,
    total=node_counts,
    seed=seeds | st.text("aé☃\U0001f600 0", max_size=8) | st.binary(max_size=8),
)
def test_same_seed_same_parts(n, total, seed):
    data = list(range(n))
    assert all_parts(data, total, shuffle=True, seed=seed) == all_parts(
        data, total, shuffle=True, seed=seed
    )


def test_different_seeds_shuffle_differently():
    data = list(range(100))
    a = shard(data, shuffle=True, seed=1, node=0, total_nodes=2)
    b = shard(data, shuffle=True, seed=2, node=0, total_nodes=2)
    assert a != b
    assert a != data[0::2]


@pytest.mark.parametrize("seed", [7, "epoch-3", b"\x00seed"])
def test_same_permutation_in_another_process(seed):
    """Nodes are separate processes (with their own hash seeds): they must agree."""
    code = (
        "import sys; from skyhive.runtime.onnode.shard import shard; "
        f"print(shard(list(range(50)), shuffle=True, seed={seed!r}, node=1, total_nodes=3))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    here = shard(list(range(50)), shuffle=True, seed=seed, node=1, total_nodes=3)
    assert out.strip() == repr(here)


def test_more_nodes_than_items():
    assert all_parts([1, 2], 4) == [[1], [2], [], []]
    assert all_parts([1, 2], 4, drop_last=True) == [[], [], [], []]


def test_shuffle_without_seed_on_one_node_is_a_permutation():
    part = shard(list(range(30)), shuffle=True, node=0, total_nodes=1)
    assert sorted(part) == list(range(30))


# -- alignment and types ----------------------------------------------------------------------


@no_deadline
@given(n=lengths, total=node_counts, shuffle=st.booleans(), seed=seeds, drop_last=st.booleans())
def test_several_arrays_stay_aligned(n, total, shuffle, seed, drop_last):
    xs = list(range(n))
    ys = tuple(f"label-{i}" for i in range(n))
    zs = range(1000, 1000 + n)
    for k in range(total):
        px, py, pz = shard(
            xs, ys, zs, shuffle=shuffle, seed=seed, drop_last=drop_last, node=k, total_nodes=total
        )
        assert len(px) == len(py) == len(pz)
        assert list(py) == [f"label-{x}" for x in px]
        assert list(pz) == [1000 + x for x in px]


def _kinds():
    import importlib.util

    kinds = ["list", "tuple", "range", "sequence"]
    kinds += [k for k in ("numpy", "torch") if importlib.util.find_spec(k) is not None]
    return kinds


class _Seq(Sequence):
    """A user-defined sequence (neither list nor tuple): its parts come back as lists."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i


def _make(kind, n):
    """A container of `kind` holding 0..n-1."""
    if kind == "list":
        return list(range(n))
    if kind == "tuple":
        return tuple(range(n))
    if kind == "range":
        return range(n)
    if kind == "sequence":
        return _Seq(n)
    if kind == "numpy":
        import numpy as np

        return np.arange(n, dtype=np.int32)
    import torch

    return torch.arange(n, dtype=torch.int64)


def _expected_type(kind, shuffle):
    if kind == "numpy":
        import numpy as np

        return np.ndarray
    if kind == "torch":
        import torch

        return torch.Tensor
    if kind == "range":
        return list if shuffle else range
    return {"list": list, "tuple": tuple, "sequence": list}[kind]


@no_deadline
@given(
    n=lengths,
    total=node_counts,
    shuffle=st.booleans(),
    seed=seeds,
    drop_last=st.booleans(),
    kinds=st.lists(st.sampled_from(_kinds()), min_size=1, max_size=4),
)
def test_any_mix_of_types_keeps_each_type_and_the_alignment(n, total, shuffle, seed, drop_last, kinds):
    arrays = [_make(kind, n) for kind in kinds]
    order = list(range(n))
    if shuffle:
        random.Random(seed).shuffle(order)
    seen = []
    for k in range(total):
        parts = shard(*arrays, shuffle=shuffle, seed=seed, drop_last=drop_last, node=k, total_nodes=total)
        parts = (parts,) if len(arrays) == 1 else parts
        assert isinstance(parts, tuple) and len(parts) == len(arrays)
        q = n // total
        want = order[k * q:(k + 1) * q] if drop_last else order[k::total]
        for kind, part in zip(kinds, parts):
            assert type(part) is _expected_type(kind, shuffle)
            if kind == "numpy":
                assert str(part.dtype) == "int32"
            values = part.tolist() if kind in ("numpy", "torch") else list(part)
            assert values == want  # every array's part holds the same items: aligned
        seen += want
    assert len(seen) == len(set(seen))  # disjoint
    assert len(seen) == (n - n % total if drop_last else n)  # covers (all but the dropped tail)


def test_one_array_gives_the_part_several_give_a_tuple():
    assert shard([1, 2, 3], node=0, total_nodes=2) == [1, 3]
    assert shard([1, 2, 3], [4, 5, 6], node=1, total_nodes=2) == ([2], [5])


@pytest.mark.parametrize("shuffle", [False, True])
def test_types_are_preserved(shuffle):
    kw = dict(shuffle=shuffle, seed=3, node=1, total_nodes=3)
    assert type(shard([1, 2, 3, 4], **kw)) is list
    assert type(shard((1, 2, 3, 4), **kw)) is tuple
    part = shard(range(10), **kw)
    if shuffle:
        assert type(part) is list  # a permutation of a range is not a range
    else:
        assert part == range(1, 10, 3)
        assert shard(range(10), drop_last=True, node=1, total_nodes=3) == range(3, 6)


def test_generic_sequence_gives_a_list():
    class Squares(Sequence):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            if not 0 <= i < 5:
                raise IndexError(i)
            return i * i

    assert shard(Squares(), node=0, total_nodes=2) == [0, 4, 16]


def test_numpy_arrays():
    np = pytest.importorskip("numpy")
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    px, py = shard(x, y, shuffle=True, seed=5, node=np.int64(1), total_nodes=np.int64(3))
    assert isinstance(px, np.ndarray) and px.dtype == np.float32 and px.shape == (3, 2)
    assert np.array_equal(px[:, 0], py * 2)  # rows stay with their labels
    assert not np.shares_memory(px, x)
    assert shard(np.arange(4), node=4, total_nodes=5).shape == (0,)
    # the same rule as for lists
    assert shard(y, shuffle=True, seed=5, node=2, total_nodes=3).tolist() == shard(
        list(range(10)), shuffle=True, seed=5, node=2, total_nodes=3
    )


def test_numpy_seed_is_accepted():
    np = pytest.importorskip("numpy")
    assert shard(list(range(10)), shuffle=True, seed=np.int64(4), node=0, total_nodes=2) == shard(
        list(range(10)), shuffle=True, seed=4, node=0, total_nodes=2
    )


def test_torch_tensors():
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    x = torch.arange(30, dtype=torch.float64).reshape(10, 3)
    labels = list(range(10))
    px, pl = shard(x, labels, shuffle=True, seed=9, drop_last=True, node=2, total_nodes=4)
    assert isinstance(px, torch.Tensor)
    assert px.dtype == torch.float64 and px.device == x.device and px.shape == (2, 3)
    assert px[:, 0].tolist() == [3.0 * i for i in pl]
    assert shard(torch.arange(3), node=0, total_nodes=4).tolist() == [0]


def test_numpy_and_torch_are_not_imported_by_the_module():
    code = (
        "import sys; import skyhive.runtime.onnode.shard as s; "
        "print(s.shard([1, 2, 3], node=0, total_nodes=1)); "
        "assert 'numpy' not in sys.modules and 'torch' not in sys.modules, "
        "sorted(m for m in ('numpy', 'torch') if m in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# -- node defaults ----------------------------------------------------------------------------


def _info(node, total):
    return InstanceInfo(
        node=node, total_nodes=total, head_addr="10.0.0.1", head_port=29500, pool_id="p-test"
    )


def test_defaults_come_from_instance_info():
    set_instance_info(_info(2, 3))
    assert shard(list(range(9))) == [2, 5, 8]


def test_defaults_come_from_the_environment_in_child_processes(monkeypatch):
    monkeypatch.setenv(ENV_VAR, _info(1, 2).to_json())
    assert shard([10, 11, 12, 13]) == [11, 13]


def test_explicit_node_overrides_instance_info():
    set_instance_info(_info(2, 3))
    assert shard(list(range(4)), node=0, total_nodes=2) == [0, 2]


def test_off_a_node_shard_returns_all_the_data():
    """A @compute function run here to debug it sees node 0 of 1 (as in Skyward)."""
    with pytest.raises(NotOnNodeError):
        sky.instance_info()
    assert shard([1, 2, 3]) == [1, 2, 3]
    assert shard([1, 2, 3], [4, 5, 6]) == ([1, 2, 3], [4, 5, 6])
    assert sorted(shard(list(range(10)), shuffle=True)) == list(range(10))


def test_shuffle_without_a_seed_uses_seed_0_on_every_node():
    set_instance_info(_info(0, 2))
    assert shard(list(range(10)), shuffle=True) == shard(list(range(10)), shuffle=True, seed=0)
    parts = [shard(list(range(10)), shuffle=True, node=k, total_nodes=2) for k in range(2)]
    assert sorted(parts[0] + parts[1]) == list(range(10))  # the nodes agree: disjoint, complete


def test_one_of_node_and_total_nodes_takes_the_other_from_instance_info():
    set_instance_info(_info(1, 3))
    assert shard(list(range(6)), node=0) == [0, 3]  # total_nodes=3 from instance_info
    assert shard(list(range(6)), total_nodes=2) == [1, 3, 5]  # node=1 from instance_info


def test_pairs_of_different_lengths_are_split_each_by_its_own_length():
    x_train, y_train = list(range(10)), [f"y{i}" for i in range(10)]
    x_test, y_test = list(range(100, 104)), [f"t{i}" for i in range(100, 104)]
    for k in range(3):
        xa, ya, xt, yt = shard(x_train, y_train, x_test, y_test, shuffle=True, seed=5, node=k, total_nodes=3)
        assert ya == [f"y{i}" for i in xa] and yt == [f"t{i}" for i in xt]
        assert xa == shard(x_train, shuffle=True, seed=5, node=k, total_nodes=3)
        assert xt == shard(x_test, shuffle=True, seed=5, node=k, total_nodes=3)


@pytest.mark.parametrize("lengths", [(10, 9), (10, 10, 4), (4, 10, 10), (3, 3, 5, 3)])
def test_lengths_that_cannot_stay_aligned_are_refused(lengths):
    with pytest.raises(ValueError, match="equal-length groups"):
        shard(*(list(range(n)) for n in lengths), node=0, total_nodes=2)


# -- errors -----------------------------------------------------------------------------------


def test_different_lengths_are_named():
    with pytest.raises(ValueError, match=r"lengths 10, 9 \(list of 10, tuple of 9\)"):
        shard(list(range(10)), tuple(range(9)), node=0, total_nodes=2)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(node=0, total_nodes=0), "total_nodes must be at least 1, got 0"),
        (dict(node=2, total_nodes=2), r"node must be in 0\.\.1 for total_nodes=2, got 2"),
        (dict(node=-1, total_nodes=2), r"node must be in 0\.\.1 for total_nodes=2, got -1"),
    ],
)
def test_bad_node_arguments(kw, message):
    with pytest.raises(ValueError, match=message):
        shard([1, 2, 3], **kw)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(node=0.0, total_nodes=2), "node must be an int, got float"),
        (dict(node=0, total_nodes="2"), "total_nodes must be an int, got str"),
        (dict(node=True, total_nodes=2), "node must be an int, got bool"),
        (dict(node=0, total_nodes=1, shuffle=True, seed=1.5), "seed must be an int, str or bytes"),
    ],
)
def test_wrongly_typed_arguments(kw, message):
    with pytest.raises(TypeError, match=message):
        shard([1, 2, 3], **kw)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": 1}, "argument 0 of type dict"),
        ({1, 2}, "argument 0 of type set"),
        ((i for i in range(3)), "argument 0 of type generator"),
        (42, "argument 0 of type int"),
        ("abc", "argument 0 is a str"),
        (b"abc", "argument 0 is a bytes"),
    ],
)
def test_unsupported_types_are_named(value, message):
    with pytest.raises(TypeError, match=message):
        shard(value, node=0, total_nodes=1)


def test_unsupported_type_in_second_position():
    with pytest.raises(TypeError, match="argument 1 of type dict.*shard the indices instead"):
        shard([1], {"a": 1}, node=0, total_nodes=1)


def test_zero_dimensional_array():
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match="argument 0 .*numpy.ndarray.* has no length"):
        shard(np.array(3), node=0, total_nodes=1)


def test_no_arrays():
    with pytest.raises(TypeError, match="at least one array"):
        shard(node=0, total_nodes=1)
