"""`sky.plugins.joblib()` / `sky.plugins.sklearn()`: while the pool is open, joblib's `Parallel` (and so
scikit-learn's `n_jobs`) runs its batches on the pool's workers, unchanged user code; at exit joblib's
previous default comes back."""

from __future__ import annotations

import os

import anyio
import pytest

import skyhive as sky

joblib = pytest.importorskip("joblib", reason="joblib is not installed here (pip install -e '.[dev]')")
from joblib import Parallel, delayed  # noqa: E402
import joblib.parallel as jp  # noqa: E402


def where(x):
    return x * 2, sky.instance_info().node, os.getpid()


def explode(x):
    if x == 3:
        raise KeyError(f"item {x}")
    return x


def test_parallel_runs_on_the_nodes_in_order():
    before = jp.DEFAULT_BACKEND
    with sky.Compute(provider=sky.Local(), nodes=2, plugins=[sky.plugins.joblib()]) as compute:
        results = Parallel(n_jobs=-1)(delayed(where)(i) for i in range(40))
        assert compute.statistics()["tasks_ok"] >= 2
    assert [r[0] for r in results] == [2 * i for i in range(40)]
    assert {r[1] for r in results} == {0, 1}  # both nodes took batches
    assert os.getpid() not in {r[2] for r in results}
    assert jp.DEFAULT_BACKEND == before and "skyhive" not in jp.BACKENDS


def test_a_failing_job_raises_its_error():
    with sky.Compute(provider=sky.Local(), nodes=1, plugins=[sky.plugins.joblib()]):
        with pytest.raises(KeyError, match="item 3"):
            Parallel(n_jobs=2)(delayed(explode)(i) for i in range(6))


def test_n_jobs_counts_the_pools_workers():
    with sky.Compute(provider=sky.Local(), nodes=2, processes_per_node=2, plugins=[sky.plugins.joblib()]):
        assert joblib.effective_n_jobs(-1) == 4
        assert joblib.effective_n_jobs(-2) == 3
        assert joblib.effective_n_jobs(3) == 3


@pytest.mark.anyio
async def test_on_the_pools_event_loop_parallel_refuses_instead_of_hanging():
    async with sky.Pool(nodes=1, plugins=[sky.plugins.joblib()]):
        with pytest.raises(RuntimeError, match="event loop"):
            Parallel(n_jobs=2)(delayed(abs)(i) for i in range(4))
        with anyio.fail_after(120):  # in a thread it works
            got = await anyio.to_thread.run_sync(lambda: Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(4)))
    assert got == [0, 1, 2, 3]


def test_grid_search_with_n_jobs_spreads_over_the_nodes_unchanged():
    sklearn = pytest.importorskip("sklearn", reason="scikit-learn is not installed here")
    del sklearn
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    X, y = X[:400], y[:400]
    grid = {"C": [0.1, 1, 10], "kernel": ["rbf", "poly"]}
    here = GridSearchCV(SVC(), grid, cv=3, n_jobs=1).fit(X, y)
    with sky.Compute(provider=sky.Local(), nodes=2, plugins=[sky.plugins.sklearn()]) as compute:
        remote = GridSearchCV(SVC(), grid, cv=3, n_jobs=-1).fit(X, y)
        stats = compute.statistics()
    assert remote.best_params_ == here.best_params_ and remote.best_score_ == here.best_score_
    assert stats["tasks_ok"] >= 2  # the fits ran as pool tasks
    assert sum(1 for load in stats["workers"].values() if load == 0) == 2  # ...and none is left running


def test_plugins_add_their_packages_to_the_image():
    assert sky.plugins.sklearn().transform(sky.Image(), None).pip == ("scikit-learn", "joblib")
    assert sky.plugins.joblib().transform(sky.Image(), None).pip == ("joblib",)
