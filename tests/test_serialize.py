"""Pickling calls: cached function pickles see rebound globals; plain fast path stays correct."""

from __future__ import annotations

import pickle

import cloudpickle

from skyhive.runtime.serialize import dump_args, dump_function, dump_value, load_value

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
