"""joblib and scikit-learn on the pool: with `plugins=[sky.plugins.sklearn()]`, `Parallel(n_jobs=-1)`
and `GridSearchCV(n_jobs=-1)` run their batches on the nodes — the code inside the `with` block is
plain joblib / scikit-learn.

    python examples/joblib_parallel.py

Needs the sklearn extra (not in the demo's set-up): `.venv/bin/python -m pip install -e '.[sklearn]'`
(from the repository root; `python3 dev.py test` installs it too).
"""

from __future__ import annotations

import os

from joblib import Parallel, delayed

import skyhive as sky


def double(x: int) -> tuple[int, int]:
    return x * 2, os.getpid()


if __name__ == "__main__":
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV, train_test_split
    from sklearn.svm import SVC

    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X[:600], y[:600], test_size=0.25, random_state=0)

    with sky.Compute(provider=sky.Local(), nodes=2, worker=sky.Worker(concurrency=2),
                     plugins=[sky.plugins.sklearn()]) as compute:
        results = Parallel(n_jobs=-1)(delayed(double)(i) for i in range(100))
        print(f"joblib: {len(results)} results, first {[r[0] for r in results[:5]]}, "
              f"on {len({pid for _, pid in results})} worker processes (client {os.getpid()} not among them: "
              f"{os.getpid() not in {pid for _, pid in results}})")

        search = GridSearchCV(SVC(), {"C": [0.1, 1, 10], "kernel": ["rbf", "poly"]}, cv=3, n_jobs=-1)
        search.fit(X_train, y_train)
        print(f"grid search: best {search.best_params_}, cv={search.best_score_:.3f}, "
              f"test={search.score(X_test, y_test):.3f}, tasks on the pool: {compute.statistics()['tasks_ok']}")
