"""Managed jobs from Python (`sky.jobs`): the same as `skyhive jobs ...` (docs/jobs.md).

    import skyhive as sky
    job_id = sky.jobs.launch("train.yaml")          # returns once submitted; the job runs without you
    sky.jobs.queue()                               # [{"id": 1, "state": "RUNNING", "recoveries": 0, ...}]
    sky.jobs.cancel(job_id)

    @sky.compute
    def train(epochs: int) -> float: ...
    job = sky.jobs.launch(train(epochs=3), provider=sky.SSH(hosts=[...]))   # a ManagedJob[float]
    loss = job.result()                            # or `await job`; later, elsewhere: sky.jobs.ManagedJob(job.id)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from skyhive.runtime.control.managed.handle import ManagedJob

if TYPE_CHECKING:
    from skyhive.plugins.image import Image
    from skyhive.providers.base import Provider
    from skyhive.runtime.compute import PendingCall

__all__ = ["launch", "queue", "cancel", "log", "ManagedJob"]

T = TypeVar("T")


@overload
def launch(task: PendingCall[T], *, name: str | None = None, max_restarts_on_errors: int | None = None,
           provider: Provider | Sequence[Provider] | None = None, image: Image | None = None) -> ManagedJob[T]: ...
@overload
def launch(task: str | os.PathLike[str], *, name: str | None = None, max_restarts_on_errors: int | None = None,
           provider: Provider | Sequence[Provider] | None = None) -> int: ...


def launch(task: Any, *, name: str | None = None, max_restarts_on_errors: int | None = None,
           provider: Provider | Sequence[Provider] | None = None, image: Image | None = None) -> Any:
    """Submit a managed job and start its controller; it runs without this process.

    - A task file (`"train.yaml"`): returns the job's id. `max_restarts_on_errors` overrides the file's
      `resources.job_recovery.max_restarts_on_errors`. `provider` (e.g. `sky.SSH(hosts=[...], key=...)`:
      hosts listed beyond the task's `num_nodes` are where a recovery goes) replaces the task's own; it
      is saved with the job for its controller. Raises `TaskFileError` (naming the file) for a task that
      cannot run, before anything is recorded.
    - `provider` may be a list (`[sky.AWS(region="us-east-1"), sky.AWS(region="us-west-2")]`), tried in
      order as a pool's is; a recovery tries the region (the candidate) that just lost a node last.
    - A call of a `@sky.compute` function (`train(epochs=3)`): runs it on one node of `provider` (default
      `sky.Local()`, with `image`'s packages and environment) and returns a `ManagedJob` whose `result()`
      (or `await`) gives the function's return value once the job ends. A lost node is recovered (the call
      runs again on a fresh node, `sky.checkpoint_dir()` the same); an exception of the function is
      restarted while `max_restarts_on_errors` (default 0) allows, then raised by `result()`.
    """
    from skyhive.runtime.compute import ComputeFunction, PendingCall

    chosen: Provider | None
    if isinstance(provider, (list, tuple)):
        from skyhive.providers.fallback import Fallback

        chosen = Fallback(provider)
    else:
        chosen = provider  # type: ignore[assignment]  # (another Sequence: refused by the submit, naming it)
    if isinstance(task, ComputeFunction):
        fn = getattr(task, "__name__", "fn")
        raise TypeError(f"sky.jobs.launch({fn}): call the function to say its arguments: sky.jobs.launch({fn}(...))")
    if isinstance(task, PendingCall):
        from skyhive.runtime.control.managed.commands import submit_call

        job_id = submit_call(task, name=name, provider=chosen, image=image,
                             max_restarts_on_errors=0 if max_restarts_on_errors is None else max_restarts_on_errors)
        return ManagedJob(job_id)
    if image is not None:
        raise TypeError("sky.jobs.launch(image=...) is for a @sky.compute call; a task file says its own setup")
    from skyhive.runtime.commands.taskfile import load
    from skyhive.runtime.control.managed.commands import submit_job

    return submit_job(load(os.fspath(task)), name=name, max_restarts_on_errors=max_restarts_on_errors,
                      provider=chosen)


def queue() -> list[dict[str, Any]]:
    """Every managed job as `skyhive jobs queue --json` prints it (state, attempts, recoveries, ...); a job
    whose record cannot be read is left out with a warning naming its folder."""
    from skyhive.runtime.control.managed import store

    return [st.as_dict() for st in map(store.load_listed, store.list_ids()) if st is not None]


def log(job_id: int) -> str:
    """The job's log so far (every attempt, each recovery marked); `LookupError` for no such job."""
    from skyhive.runtime.control.managed import store

    store.load(job_id)
    path = store.log_path(job_id)
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def cancel(job_id: int, *, wait: float = 120.0) -> str:
    """Cancel the job and wait (up to `wait` seconds) for its pool to be torn down; its state then.
    `LookupError` for no such job."""
    import io

    from skyhive.runtime.control.managed import store
    from skyhive.runtime.control.managed.commands import cancel_managed

    store.load(job_id)
    cancel_managed([job_id], wait=wait, err=io.StringIO())
    return store.load(job_id).state
