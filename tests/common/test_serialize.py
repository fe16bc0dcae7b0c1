"""Pickling calls: cached function pickles see rebound globals; plain fast path stays correct."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from skyhive.runtime.common.serialize import INBAND_MAX, OOB_MIN, _pack, dump_args, dump_function, dump_value, load_value

SCALE = 2


def scaled(x):
    return x * SCALE


def test_cached_function_pickle_sees_a_rebound_global():
    global SCALE
    fid1, p1 = dump_function(scaled)
    assert dump_function(scaled) == (fid1, p1)  # cached
    SCALE = 3
    try:
        fid2, p2 = dump_function(scaled)
        assert fid2 != fid1
        assert cloudpickle.loads(p2)(2) == 6
    finally:
        SCALE = 2


def test_a_plain_function_given_new_defaults_or_code_is_pickled_again():
    """A function naming no global and closing over nothing is checked by its code and defaults."""
    def plain(x, k=1):
        return x + k

    fid1, _ = dump_function(plain)
    assert dump_function(plain)[0] == fid1  # cached
    plain.__defaults__ = (10,)
    fid2, p2 = dump_function(plain)
    assert fid2 != fid1 and cloudpickle.loads(p2)(1) == 11
    plain.__code__ = (lambda x, k=1: x * k).__code__
    fid3, p3 = dump_function(plain)
    assert fid3 not in (fid1, fid2) and cloudpickle.loads(p3)(2) == 20


@pytest.mark.parametrize("args, kwargs", [
    ((3,), {}),
    ((1.5, True, None, 2 + 1j, -(10 ** 40)), {}),
    (("text", b"bytes", "x" * (OOB_MIN - 1)), {"n": 2, "s": "é"}),
    ((), {"only": 7}),
    (("x" * OOB_MIN,), {}),          # large enough to leave the pickle: the general path lifts it
    ((b"y" * OOB_MIN, 1), {}),
    ((10 ** 700_000,), {}),          # a pickle over INBAND_MAX: travels as a buffer
    ((1, [2, 3]), {}),               # a list: not an atom, the general path
    ((1,), {"k": (2,)}),
])
def test_small_arguments_pickle_to_the_bytes_the_general_path_gives(args, kwargs):
    data, buffers = dump_args(scaled, args, kwargs)
    want_data, want_buffers = _pack((args, kwargs))
    assert data == want_data and [bytes(b) for b in buffers] == [bytes(b) for b in want_buffers]
    assert load_value(data, buffers) == (args, kwargs)
    if any(isinstance(a, (str, bytes)) and len(a) >= OOB_MIN for a in args) or len(pickle.dumps(args)) > INBAND_MAX:
        assert buffers  # what is large still leaves the in-band pickle


def test_closures_are_not_confused():
    def make(k):
        return lambda x: x + k

    a, b = make(1), make(2)
    assert dump_function(a)[0] != dump_function(b)[0]


class Point:
    def __init__(self, x):
        self.x = x


def test_plain_and_cloudpickle_paths_round_trip():
    data, bufs = dump_args(scaled, (1, "a", [1.5, None], {"k": b"v"}), {"z": (1, 2)})
    assert load_value(data, tuple(bufs)) == ((1, "a", [1.5, None], {"k": b"v"}), {"z": (1, 2)})
    data, _ = dump_value(Point(3))  # a user class: by value, via cloudpickle
    assert load_value(data).x == 3
    assert pickle.loads(dump_value(lambda: 5)[0])() == 5


def test_an_argument_of_a_user_class_travels_by_value(tmp_path):
    # a class from the user's own module that the node cannot import (as on an SSH host)
    import importlib.util
    import subprocess
    import sys

    src = tmp_path / "my_private_module.py"
    src.write_text("class Box:\n    def __init__(self, v):\n        self.v = v\n")
    spec = importlib.util.spec_from_file_location("my_private_module", src)
    module = importlib.util.module_from_spec(spec)
    sys.modules["my_private_module"] = module
    spec.loader.exec_module(module)
    try:
        data, _ = dump_args(scaled, (module.Box(41),), {})
    finally:
        del sys.modules["my_private_module"]
    code = "import pickle, sys; (a, kw) = pickle.loads(sys.stdin.buffer.read()); print(a[0].v + 1)"
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, cwd="/", check=True)
    assert out.stdout.strip() == b"42"


def test_user_class_instances_nested_at_any_depth_travel_by_value(tmp_path):
    # the same class inside a list, a dict and a map batch (a list of items), and a result
    import importlib.util
    import subprocess
    import sys
    import uuid

    name = f"my_private_nested_{uuid.uuid4().hex[:8]}"
    src = tmp_path / f"{name}.py"
    src.write_text("class Box:\n    def __init__(self, v):\n        self.v = v\n")
    spec = importlib.util.spec_from_file_location(name, src)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    try:
        nested, _ = dump_args(scaled, ([module.Box(40)], {"k": (module.Box(2),)}), {})
        batch, _ = dump_value([module.Box(1), [module.Box(2)]])
    finally:
        del sys.modules[name]
    code = ("import pickle, sys; (a, kw) = pickle.loads(sys.stdin.buffer.read()); "
            "print(a[0][0].v + a[1]['k'][0].v)")
    out = subprocess.run([sys.executable, "-c", code], input=nested, capture_output=True, cwd="/", check=True)
    assert out.stdout.strip() == b"42"
    code = "import pickle, sys; b = pickle.loads(sys.stdin.buffer.read()); print(b[0].v + b[1][0].v)"
    out = subprocess.run([sys.executable, "-c", code], input=batch, capture_output=True, cwd="/", check=True)
    assert out.stdout.strip() == b"3"


def test_large_values_leave_the_pickle_and_come_back_whole():
    from skyhive.runtime.common.serialize import INBAND_MAX

    blob = b"\x01\x02" * 1_000_000
    text = "é" * 1_000_000 + "\udc80"  # a lone surrogate survives too
    for value in (blob, bytearray(blob), text, [text, {"k": (blob,)}], [blob, blob]):
        data, buffers = dump_value(value)
        assert len(data) <= INBAND_MAX and buffers
        assert load_value(data, tuple(memoryview(b) for b in buffers)) == value
    data, buffers = dump_value([blob, blob])
    assert sum(memoryview(b).nbytes for b in buffers) < 2 * len(blob) + INBAND_MAX  # once, not twice
    mv = memoryview(blob)
    data, buffers = dump_value(mv)
    back = load_value(data, tuple(buffers))
    assert isinstance(back, memoryview) and back.tobytes() == blob


def test_a_memoryview_leaves_the_pickle_only_from_oob_min_and_comes_back_as_a_memoryview():
    # a small view went out of band like a large one: a 10-byte argument then cost a call three times
    # a 10-byte bytes (its own Chunk frame, or shared memory on Local)
    from skyhive.runtime.common.serialize import OOB_MIN, dump_args, load_value

    for size, out_of_band in ((10, False), (OOB_MIN - 1, False), (OOB_MIN, True)):
        raw = bytes(range(256)) * (size // 256) + bytes(size % 256)
        for view in (memoryview(raw), memoryview(bytearray(raw)).cast("B", (size,))):
            data, buffers = dump_args(len, (view,), {})
            assert bool(buffers) is out_of_band, (size, buffers)
            (back,), _ = load_value(data, tuple(memoryview(b) for b in buffers))
            assert type(back) is memoryview and back.tobytes() == raw and back.format == "B"
    ints = memoryview(bytearray(4 * 6)).cast("i", (2, 3))  # format and shape survive, small or not
    for view in (ints, memoryview(bytearray(4 * OOB_MIN)).cast("i", (OOB_MIN // 2, 2))):
        data, buffers = dump_args(len, (view,), {})
        (back,), _ = load_value(data, tuple(memoryview(b) for b in buffers))
        assert (back.format, back.shape, back.tobytes()) == (view.format, view.shape, view.tobytes())
    strided = memoryview(bytes(range(20)))[::2]  # not contiguous: copied into the pickle
    data, buffers = dump_args(len, (strided,), {})
    (back,), _ = load_value(data, tuple(buffers))
    assert not buffers and back.tobytes() == bytes(range(0, 20, 2))


def test_a_large_in_band_pickle_travels_as_a_buffer():
    from skyhive.runtime.common.serialize import INBAND_MAX

    value = list(range(200_000))  # no single large object: the pickle itself is large
    data, buffers = dump_value(value)
    assert len(data) <= INBAND_MAX and len(buffers) == 1
    assert load_value(data, tuple(buffers)) == value


HUGE = 1 << 2_400_000  # a 300 KB pickle


@pytest.mark.parametrize("value", [0, -1, 2**64, None, True, False, 2.5, float("inf"), 3j, HUGE],
                         ids=lambda v: "huge" if v is HUGE else repr(v))
def test_scalars_round_trip_and_a_huge_one_still_travels_as_a_buffer(value):
    from skyhive.runtime.common.serialize import INBAND_MAX

    data, buffers = dump_value(value)
    assert len(data) <= INBAND_MAX
    assert len(buffers) == (1 if value is HUGE else 0)
    assert load_value(data, tuple(buffers)) == value


def test_more_buffers_than_a_message_may_announce_are_packed_together():
    np = pytest.importorskip("numpy")
    from skyhive.protocol.codec import MAX_BUFFERS

    arrays = [np.full(4, i) for i in range(MAX_BUFFERS + 10)]
    data, buffers = dump_value(arrays)
    assert len(buffers) <= MAX_BUFFERS
    back = load_value(data, tuple(buffers))
    assert len(back) == len(arrays) and all((a == b).all() for a, b in zip(back, arrays))
