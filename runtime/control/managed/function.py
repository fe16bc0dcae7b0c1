"""A `@sky.compute` call run as a managed job (`sky.jobs.launch(train(epochs=3), provider=...)`).

The call (its function by value when it is the user's own code, as a pool sends it) is saved with the
job; each attempt of the job's controller runs it on a fresh 1-node pool (`FunctionWork`) and writes
its outcome to `SKYHIVE_HOME/managed/<ID>/result.pkl` (0600): the value it returned, or the exception it
raised. A lost worker or node is a recovery, as for a task file (the call runs again on the next
attempt, with the same `SKYHIVE_CHECKPOINT_DIR`); an exception of the function is the program's own
failure, restarted while `max_restarts_on_errors` allows. The client reads the outcome through
`ManagedJob.result()` (handle.py) — after it exited and came back, too.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from typing import Any

from ....errors import NodeUnreachable, SerializationError, WorkerLost
from ..steps import NodeExit
from . import store
from .work import Work, checkpoint_env

__all__ = ["FunctionWork", "result_path", "save_outcome", "load_outcome"]


def result_path(job_id: int) -> Any:
    return store.job_dir(job_id) / "result.pkl"


def save_outcome(job_id: int, outcome: dict[str, Any]) -> None:
    """The call's outcome (`{"ok": True, "value": ...}` or `{"ok": False, "error": exc}`) written whole
    (a temporary file renamed), 0600; an exception that cannot be pickled is kept as its type and text."""
    from ...common.serialize import cloud_dumps

    try:
        data = cloud_dumps(outcome)
    except Exception as exc:  # noqa: BLE001 - said instead of the value
        if outcome.get("ok"):
            raise SerializationError(f"the managed job's result cannot be pickled: {type(exc).__name__}: {exc}") from None
        err = outcome["error"]
        data = cloud_dumps({"ok": False, "error": None, "type": type(err).__qualname__, "message": str(err)})
    path = result_path(job_id)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def load_outcome(job_id: int) -> dict[str, Any] | None:
    """The outcome the job's last attempt wrote, or None (no attempt got that far)."""
    try:
        data = result_path(job_id).read_bytes()
    except FileNotFoundError:
        return None
    return pickle.loads(data)  # noqa: S301 - our own 0600 file, written by the job's controller


class FunctionWork(Work):
    """One attempt of a function job: the call on a 1-node pool, its outcome saved."""

    def __init__(self, job_id: int, spec: dict[str, Any], avoid: list[Any]) -> None:
        provider = spec["provider"]
        if avoid:
            provider = provider.avoiding(avoid)
        self.job_id, self.provider, self.nodes, self.name = job_id, provider, 1, spec["name"]
        self.fn, self.args, self.kwargs, self.timeout = pickle.loads(spec["call"])  # noqa: S301 - our own file
        self.checkpoint, self.checkpoint_what = checkpoint_env(job_id, None, provider)
        self.env = {"SKYHIVE_CHECKPOINT_DIR": self.checkpoint, "SKYHIVE_JOB_ID": str(job_id),
                    "SKYPILOT_TASK_ID": spec["task_id"]}
        self.image = spec.get("image")

    def pool_options(self) -> dict[str, Any]:
        from ....plugins.image import Image

        image = self.image or Image()
        return {"image": dataclasses.replace(image, env={**image.env, **self.env})}

    async def run(self, pool: Any, fresh: frozenset[int] | None = None, on_lost: Any = None) -> NodeExit | None:
        from ...compute import PendingCall

        try:
            value = await (PendingCall(self.fn, self.args, self.kwargs, self.timeout) >> pool)
        except (WorkerLost, NodeUnreachable) as exc:  # the node, not the function: a recovery
            node = max(int(getattr(exc, "node", 0) or 0), 0)
            return NodeExit(node=node, phase="call", code=1, lost=True, detail=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the function's own failure: kept for `result()` to raise
            save_outcome(self.job_id, {"ok": False, "error": exc})
            return NodeExit(node=0, phase="call", code=1, detail=f"{type(exc).__name__}: {exc}")
        save_outcome(self.job_id, {"ok": True, "value": value})
        return None
