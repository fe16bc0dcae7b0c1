"""`sky.plugins.joblib()` and `sky.plugins.sklearn()`: joblib's `Parallel` runs its batches on the pool.

    with sky.Pool(nodes=3, plugins=[sky.plugins.sklearn()]):
        GridSearchCV(model, grid, n_jobs=-1).fit(X, y)        # the fits spread over the nodes
        Parallel(n_jobs=-1)(delayed(f)(i) for i in range(100)) # so do plain joblib calls

While the pool is open (`around_client`), a joblib backend named "skyhive" is joblib's default, so
code that calls `Parallel(...)` — scikit-learn's `n_jobs`, your own loops — needs no other change;
at exit the previous default comes back. Each batch joblib makes is one task on the least busy
worker (`Pool.submit`); `n_jobs=-1` means every worker process of the pool. Nested `Parallel`
calls inside a task use joblib's threads on that node.

`Parallel` blocks, so call it where blocking is fine: in a `with sky.Pool(...)` block, or, with an
async pool, in a thread (`await anyio.to_thread.run_sync(...)`); on the pool's event loop itself
the backend raises `RuntimeError` instead of hanging.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from .api import Plugin

__all__ = ["JoblibPlugin", "joblib", "sklearn", "BACKEND"]

#: The name the backend is registered under (`Parallel(backend="skyhive")` names it explicitly).
BACKEND = "skyhive"


class JoblibPlugin(Plugin):
    """See `joblib()` / `sklearn()`. The pool is held on the client only; nothing of it travels."""

    name = "joblib"

    def __init__(self, packages: Sequence[str] = ("joblib",), *, name: str = "joblib") -> None:
        self.packages = tuple(packages)
        self.name = name

    def __repr__(self) -> str:
        return f"<plugin {self.name} {' '.join(self.packages)}>"

    def transform(self, image: Any, pool: Any) -> Any:
        """The nodes need joblib (and scikit-learn for `sklearn()`) to unpickle the batches."""
        return image.with_pip(*self.packages)

    @contextlib.contextmanager
    def around_client(self, pool: Any) -> Iterator[None]:
        """Make the pool joblib's default backend while it is open; restore the previous one after."""
        import joblib.parallel as jp

        backend_class = _backend_class()
        previous_default, previous = jp.DEFAULT_BACKEND, jp.BACKENDS.get(BACKEND)
        jp.register_parallel_backend(BACKEND, lambda **kw: backend_class(pool, **kw), make_default=True)
        try:
            yield
        finally:
            jp.DEFAULT_BACKEND = previous_default
            if previous is None:
                jp.BACKENDS.pop(BACKEND, None)
            else:
                jp.BACKENDS[BACKEND] = previous


def _backend_class() -> type:
    """The backend class (built on first use: joblib is imported only on the client, when needed)."""
    from joblib._parallel_backends import ParallelBackendBase

    class SkyhiveBackend(ParallelBackendBase):
        """joblib backend: each batch is a task on the pool (`Pool.submit`)."""

        supports_retrieve_callback = True
        supports_timeout = True
        uses_threads = False
        supports_sharedmem = False

        def __init__(self, pool: Any, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.pool = pool
            self._futures: set[Any] = set()

        def configure(self, n_jobs: int = 1, parallel: Any = None, **kwargs: Any) -> int:
            if self.pool.in_event_loop():
                raise RuntimeError(
                    "joblib.Parallel blocks until its batches are done, and this thread runs the pool's "
                    "event loop: call it in a thread (await anyio.to_thread.run_sync(...)) or use "
                    "`with sky.Pool(...)`"
                )
            return super().configure(n_jobs=n_jobs, parallel=parallel, **kwargs)

        def effective_n_jobs(self, n_jobs: int | None) -> int:
            if n_jobs == 0:
                raise ValueError("n_jobs == 0 in Parallel has no meaning")
            workers = max(1, self.pool.workers)
            if n_jobs is None or n_jobs < 0:
                return max(1, workers + 1 + (n_jobs if n_jobs is not None else -1))
            return n_jobs

        def submit(self, func: Any, callback: Any = None) -> Any:
            future = self.pool.submit(func)
            self._futures.add(future)
            future.add_done_callback(self._futures.discard)
            if callback is not None:
                future.add_done_callback(callback)
            return future

        def retrieve_result_callback(self, future: Any) -> Any:
            return future.result()

        def abort_everything(self, ensure_ready: bool = True) -> None:
            for future in list(self._futures):
                future.cancel()  # cancels the task on its node

        def __reduce__(self) -> Any:  # a batch names its nested backend, never this one; be safe
            raise TypeError("the skyhive joblib backend stays on the client")

    return SkyhiveBackend


def joblib(*, packages: Sequence[str] = ("joblib",)) -> JoblibPlugin:
    """joblib's `Parallel(...)` runs on the pool while it is open (see the module docstring)."""
    return JoblibPlugin(packages, name="joblib")


def sklearn(*, packages: Sequence[str] = ("scikit-learn", "joblib")) -> JoblibPlugin:
    """scikit-learn on the nodes, and its `n_jobs` parallelism (GridSearchCV, cross_val_score,
    RandomForest...) on the pool: the joblib plugin with scikit-learn added to the Image."""
    return JoblibPlugin(packages, name="sklearn")
