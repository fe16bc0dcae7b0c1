"""Keras 3 on the jax backend, trained data-parallel on two nodes.

    python examples/keras_training.py

Needs the keras extra (not in the demo's set-up): `.venv/bin/python -m pip install -e '.[keras]'`
(from the repository root; `python3 dev.py test` installs it too).

The keras plugin sets `KERAS_BACKEND=jax` before Keras is imported on the workers; with the jax
plugin it also installs Keras' `DataParallel` distribution across the processes. Each node feeds
`fit()` its own shard of the data (`sky.shard`), the gradients are averaged across the nodes, and
both end with the same weights.
"""

from __future__ import annotations

import hashlib

import numpy as np

import skyhive as sky


@sky.compute
@sky.stdout(only="head")
def train(x_full: np.ndarray, y_full: np.ndarray, epochs: int) -> dict:
    import keras

    x, y = sky.shard(x_full, y_full, shuffle=True, seed=42)  # this node's part, x[i] still matches y[i]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((x.shape[1],)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1, activation="sigmoid"),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=epochs, batch_size=32, verbose=0)
    for epoch, (loss, acc) in enumerate(zip(history.history["loss"], history.history["accuracy"])):
        print(f"Epoch {epoch}: loss={loss:.4f} accuracy={acc:.3f}")
    weights = b"".join(np.asarray(w).tobytes() for w in model.get_weights())
    return {
        "node": sky.instance_info().node,
        "backend": keras.backend.backend(),
        "samples": len(x),
        "shard": hashlib.sha256(x.tobytes()).hexdigest(),
        "losses": [float(v) for v in history.history["loss"]],
        "weights": hashlib.sha256(weights).hexdigest(),
    }


def dataset(n: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("float32")
    return x, y


def main() -> list[dict]:
    x, y = dataset()
    plugins = [sky.plugins.jax(), sky.plugins.keras(backend="jax")]
    with sky.Pool(provider=sky.Local(), nodes=2, plugins=plugins) as pool:
        results = train(x, y, epochs=4) @ pool
    for r in results:
        print(f"node {r['node']}: backend={r['backend']} samples={r['samples']} shard={r['shard'][:12]} "
              f"loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f} weights={r['weights'][:16]}")
    print(f"identical weights on every node: {len({r['weights'] for r in results}) == 1}")
    return results


if __name__ == "__main__":
    main()
