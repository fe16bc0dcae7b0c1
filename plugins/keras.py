"""`sky.plugins.keras()`: Keras 3 on the nodes, with its backend chosen before Keras is imported.

Keras reads `KERAS_BACKEND` once, at import: `transform` puts it in the image's environment, so it is
set when the worker process starts, before any task (or plugin) can import Keras.

With the jax backend and the jax plugin on a pool of several processes, the first task also installs
Keras' `DataParallel` distribution over every process's devices, with `auto_shard_dataset=False`:
each process feeds `fit()` its own part of the data (`sky.shard()`), and the gradients are averaged
across processes, so the replicas stay identical; the same random seed is set on every process,
so layers with random state (Dropout) agree too. Other backends delegate to their framework's own
distributed set-up (for torch: the torch plugin's process group).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import KerasBackendMismatch
from .api import InstanceInfo, Plugin, requirement

if TYPE_CHECKING:
    from .image import Image

__all__ = ["KerasPlugin", "keras", "BACKENDS"]

BACKENDS = ("jax", "torch", "tensorflow", "numpy", "openvino")
# the package a backend needs, when the keras plugin is the one to add it (torch comes with its own
# plugin, which knows the right wheel index)
_BACKEND_PACKAGES = {"jax": "jax", "tensorflow": "tensorflow"}


class KerasPlugin(Plugin):
    """See `keras()`. A plain object: it is pickled to the workers and imports keras only there."""

    name = "keras"

    def __init__(self, backend: str = "jax", *, version: str = "latest", data_parallel: bool = True,
                 seed: int | None = None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"keras(backend={backend!r}): use one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.requirement = requirement("keras", version, where="keras(version=...)")
        self.data_parallel = data_parallel
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"keras(seed={seed!r}): need a non-negative int, or None for one per pool")
        self.seed = seed
        self._distributed = False  # worker side: the DataParallel distribution is installed

    def __repr__(self) -> str:
        return f"<plugin keras backend={self.backend}>"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_distributed": False}

    def transform(self, image: Image, pool: Any) -> Image:
        """Add keras (and jax or tensorflow for those backends) and `KERAS_BACKEND`."""
        packages = [self.requirement, _BACKEND_PACKAGES.get(self.backend)]
        return image.with_pip(*(p for p in packages if p)).with_env(KERAS_BACKEND=self.backend)

    @contextlib.contextmanager
    def around_app(self, info: InstanceInfo) -> Iterator[None]:
        """Set `KERAS_BACKEND` (again, for images built without `transform`); refuse a Keras that
        something already imported with another backend (raises `KerasBackendMismatch`)."""
        os.environ["KERAS_BACKEND"] = self.backend
        keras = sys.modules.get("keras")
        if keras is not None:
            current = keras.backend.backend()
            if current != self.backend:
                raise KerasBackendMismatch(
                    f"keras plugin: Keras was imported with the {current!r} backend before the plugin "
                    f"could select {self.backend!r} (list the keras plugin before plugins that import it)"
                )
        yield

    @contextlib.contextmanager
    def around_task(self, info: InstanceInfo) -> Iterator[None]:
        """Before the first task: Keras data parallelism across the jax processes (see the module)."""
        if not self._distributed:
            self._distributed = True
            if self.data_parallel and self.backend == "jax" and _jax_processes() > 1:
                import jax
                import keras

                distribution = keras.distribution.DataParallel(devices=jax.devices())
                distribution.auto_shard_dataset = False  # the data is already sharded per process
                keras.distribution.set_distribution(distribution)
                # Layers with random state (Dropout, initializers) draw their seeds from Keras' global
                # generator; under DataParallel every process must hold the same values, or jax
                # refuses them ("passed to device_put is not the same on each process"). The same
                # seed on every process of the pool (the user's own set_random_seed still wins).
                keras.utils.set_random_seed(self.seed if self.seed is not None else shared_seed(info))
        yield


def shared_seed(info: InstanceInfo) -> int:
    """A seed every process of the pool derives alike (from the pool id), different per pool."""
    import hashlib  # (on use: a pool without keras does not pay for it)

    return int.from_bytes(hashlib.sha256(info.pool_id.encode()).digest()[:4], "little")


def _jax_processes() -> int:
    """How many processes share the jax runtime, without initializing jax when no plugin did."""
    if "jax" not in sys.modules or int(os.environ.get("JAX_NUM_PROCESSES", "1")) < 2:
        return 1
    import jax

    return jax.process_count()


def keras(backend: str = "jax", *, version: str = "latest", data_parallel: bool = True,
          seed: int | None = None) -> KerasPlugin:
    """Keras 3 with `backend` ("jax", "torch", "tensorflow", "numpy", "openvino") on every worker.

    Combine with the backend's plugin for distributed training: `[sky.plugins.jax(),
    sky.plugins.keras(backend="jax")]`. `version` follows the torch plugin's rules ("latest", a
    version, a constraint). `data_parallel=False` leaves Keras' distribution alone (each process
    then trains its own model). With data parallelism, `seed` is given to
    `keras.utils.set_random_seed` on every process before the first task (None: one derived from
    the pool id), so layers with random state (Dropout) agree across processes.

    Raises `ValueError` for an unknown backend or a bad version.
    """
    return KerasPlugin(backend, version=version, data_parallel=data_parallel, seed=seed)
