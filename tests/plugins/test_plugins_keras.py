"""The keras plugin: the backend is chosen before Keras is imported, and a tiny model trains
data-parallel on two nodes (jax backend) from `sky.shard`ed data."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

import skyhive as sky
from skyhive.plugins.keras import KerasBackendMismatch

# found, not imported: Keras would pick its backend in this process at import
if importlib.util.find_spec("keras") is None or importlib.util.find_spec("jax") is None:
    pytest.skip("keras and jax are not installed", allow_module_level=True)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import keras_training  # noqa: E402  (examples/keras_training.py)


def test_transform_sets_the_backend_in_the_image_and_adds_the_packages():
    image = sky.plugins.keras().transform(sky.Image(env={"A": "1"}), None)
    assert image.pip == ("keras", "jax") and dict(image.env) == {"A": "1", "KERAS_BACKEND": "jax"}
    image = sky.plugins.keras("torch", version="3.5.0").transform(sky.Image(), None)
    assert image.pip == ("keras==3.5.0",) and image.env["KERAS_BACKEND"] == "torch"
    with pytest.raises(ValueError, match="backend"):
        sky.plugins.keras("theano")


def test_a_keras_imported_with_another_backend_is_refused(monkeypatch):
    # a stand-in module: the test process must not import the real Keras with some backend
    fake = types.SimpleNamespace(backend=types.SimpleNamespace(backend=lambda: "tensorflow"))
    monkeypatch.setitem(sys.modules, "keras", fake)
    monkeypatch.setenv("KERAS_BACKEND", "")  # restored after the test, whatever the hook sets
    info = sky.InstanceInfo(node=0, total_nodes=1, head_addr="127.0.0.1", head_port=1, pool_id="p")
    with pytest.raises(KerasBackendMismatch, match="'tensorflow' backend before the plugin could select 'jax'"):
        with sky.plugins.keras("jax").around_app(info):
            pass


@pytest.mark.slow
@pytest.mark.anyio
async def test_tiny_model_trains_data_parallel_on_two_nodes_from_sharded_data():
    x, y = keras_training.dataset()
    plugins = [sky.plugins.jax(), sky.plugins.keras(backend="jax")]
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=plugins) as pool:
        results = await pool.broadcast(keras_training.train, x, y, 3, capture=True)
    first, second = (r.value for r in results)
    assert first["backend"] == second["backend"] == "jax"
    assert first["samples"] == second["samples"] == len(x) // 2
    assert first["shard"] != second["shard"]  # each node trained on its own shard...
    assert first["weights"] == second["weights"]  # ...and the gradients were averaged across nodes
    assert first["losses"][-1] < first["losses"][0]
    assert results[0].stdout.count("Epoch ") == 3 and results[1].stdout == ""


def train_with_dropout(x_full, y_full):
    """A model with Dropout and no seed of the user's: its random state must agree across processes."""
    import hashlib

    import keras
    import numpy as np

    x, y = sky.shard(x_full, y_full, shuffle=True, seed=42)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dropout(0.3), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy")
    model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    return hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()


@pytest.mark.slow
def test_dropout_under_data_parallel_needs_no_seed_from_the_user():
    x, y = keras_training.dataset(256)
    plugins = [sky.plugins.jax(), sky.plugins.keras(backend="jax")]
    with sky.Pool(provider=sky.Local(), nodes=2, plugins=plugins, output=None) as pool:
        weights = pool.broadcast(train_with_dropout, x, y)  # was: "not the same on each process"
    assert weights[0] == weights[1]


def test_keras_seed_is_checked():
    with pytest.raises(ValueError, match="seed"):
        sky.plugins.keras(seed=-1)
    assert sky.plugins.keras(seed=7).seed == 7
