"""The errors a caller of a pool sees. Each names what failed and where."""

from __future__ import annotations

from ..protocol.errors import ProtocolError, SkyhiveError

__all__ = [
    "SkyhiveError",
    "ProtocolError",
    "WorkerLost",
    "TaskTimeout",
    "RemoteError",
    "SerializationError",
    "PoolClosed",
]


class WorkerLost(SkyhiveError):
    """The worker process running a task died or stopped answering before the task finished."""

    def __init__(self, message: str, *, node: int, local_rank: int = 0) -> None:
        super().__init__(message)
        self.node = node
        self.local_rank = local_rank


class TaskTimeout(SkyhiveError, TimeoutError):
    """A call did not finish within its `timeout=`; the task was cancelled on the node."""


class RemoteError(SkyhiveError):
    """A task raised an exception whose type could not be rebuilt here.

    `type_name` is the remote exception's qualified type name, `remote_message` its `str()`, and
    `remote_traceback` the formatted traceback from the node.
    """

    def __init__(self, type_name: str, message: str, traceback: str, *, node: int | None = None) -> None:
        where = f" on node {node}" if node is not None else ""
        super().__init__(f"{type_name}: {message} (raised{where}; its type could not be rebuilt here)")
        self.type_name = type_name
        self.remote_message = message
        self.remote_traceback = traceback
        self.node = node


class SerializationError(SkyhiveError, TypeError):
    """A function, argument or result could not be pickled (or unpickled)."""


class PoolClosed(SkyhiveError, RuntimeError):
    """The pool is not open (not entered yet, closing, or closed)."""
