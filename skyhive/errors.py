"""Every error a skyhive user can catch, in one tree under `SkyhiveError`.

    SkyhiveError
    ├── ProtocolError (LocalProtocolError, RemoteProtocolError)      the wire protocol
    ├── ProvisionError                 a node could not be created, reached or set up
    │   ├── NodeUnreachable            it did not answer (retried while a fresh node starts)
    │   ├── SSHError                   an SSH host could not be used
    │   │   ├── HostUnreachable        (also a NodeUnreachable)
    │   │   ├── HostKeyChanged
    │   │   └── AuthenticationFailed
    │   ├── BootstrapError             preparing the node's environment failed
    │   │   ├── PythonMismatch
    │   │   └── SetupFailed
    │   ├── SlurmError                 a Slurm command failed, or Slurm will not run the pool's job
    │   │   └── SlurmUnreachable       Slurm's controller did not answer (retried)
    │   ├── ProviderNotAvailable       a provider name this install cannot use ("not built yet")
    │   ├── TeardownIncomplete         the provider did not confirm a pool's nodes gone: it is leaking
    │   └── CloudAPIError              a cloud's API answered with an error (its code and message)
    ├── WorkerLost, TaskTimeout, RemoteError, SerializationError, PoolClosed    calls on a pool
    ├── OutputStalled, EventsStalled, NotOnNodeError
    ├── TaskFileError (LaunchError)    `skyhive launch`
    ├── PoolNotFound (PoolGone), PoolInUse, PoolExists    `skyhive logs/down`, named pools
    ├── ManagedJobError                a managed job ended without a result (`sky.jobs`)
    ├── WorkerRestarted, CoordinatorPortInUse, KerasBackendMismatch, HuggingFaceLoginError    plugins
    └── IllegalTransition              a lifecycle move the table forbids (a skyhive bug)

Defined here, on the project's floor: this module imports nothing of the project (nor does `paths.py`),
so every layer — the sans-IO protocol (`protocol/errors.py` re-exports its four), the runtime, the
providers, the plugins — raises the same classes without importing each other (`tests/test_import_graph.py`). Every message says what failed and
where (node, host, file, line) and, when there is one, what to do.

Not here, on purpose: control flow that never reaches a caller — `TaskCancelled` (a BaseException
raised inside a worker's task thread) and `WorkerGone` (the SSH link's internal signal).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "SkyhiveError", "ProtocolError", "LocalProtocolError", "RemoteProtocolError",
    "ProvisionError", "NodeUnreachable", "SSHError", "HostUnreachable", "HostKeyChanged", "AuthenticationFailed",
    "BootstrapError", "PythonMismatch", "SetupFailed", "SlurmError", "SlurmUnreachable", "ProviderNotAvailable", "CloudAPIError",
    "TeardownIncomplete", "NoSSH",
    "WorkerLost", "TaskTimeout", "RemoteError", "SerializationError", "PoolClosed",
    "OutputStalled", "EventsStalled", "NotOnNodeError", "TaskFileError", "LaunchError", "PoolNotFound", "PoolInUse",
    "PoolExists", "PoolGone",
    "WorkerRestarted", "CoordinatorPortInUse", "KerasBackendMismatch", "HuggingFaceLoginError",
    "IllegalTransition", "StorageError",
]


class SkyhiveError(Exception):
    """Base class of every error skyhive raises on purpose."""


class ProtocolError(SkyhiveError):
    """The wire protocol was broken: a bad frame, an unknown message, or a version mismatch."""


class LocalProtocolError(ProtocolError):
    """We misused the protocol (sent something the state machine does not allow)."""


class RemoteProtocolError(ProtocolError):
    """The peer misbehaved: it sent bytes that are not a valid frame or message."""


# ---- nodes -----------------------------------------------------------------------------------------

class ProvisionError(SkyhiveError):
    """A node could not be created, reached or set up. The message names the node/host and the cause.

    A cloud's failure also carries the provider's error `code`, its `kind` ("capacity", "quota",
    "transient", "fatal"), the `zones_tried` and what was `cleaned_up` before raising."""

    def __init__(self, message: str, *, host: str | None = None, node: int | None = None, code: str | None = None,
                 kind: str | None = None, zones_tried: Sequence[str] = (), cleaned_up: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.host = host
        self.node = node
        self.code = code
        self.kind = kind
        self.zones_tried = tuple(zones_tried)
        self.cleaned_up = tuple(cleaned_up)


class CloudAPIError(ProvisionError):
    """A cloud's API answered with an error: its `code` ("InsufficientInstanceCapacity", …), its message
    and the HTTP `status`. Provisioning classifies it by code (retry, next zone, stop)."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(f"{code}: {message}" if code else message or f"HTTP {status}", code=code)
        self.message = message
        self.status = status


class NodeUnreachable(ProvisionError):
    """A node did not answer a connection (refused, timed out). While a fresh node starts this is
    expected: the runtime retries it for the provider's `connect_retry` seconds."""


class SSHError(ProvisionError):
    """An SSH host could not be reached or used; the message names the host and the cause."""


class HostUnreachable(SSHError, NodeUnreachable):
    """No SSH connection to the host within the connect timeout (down, wrong address, filtered)."""


class HostKeyChanged(SSHError):
    """The host showed a key other than the pinned one (known_hosts, host_key, or first contact)."""


class AuthenticationFailed(SSHError):
    """The host refused our key for that user."""


class SlurmError(ProvisionError):
    """A Slurm command failed, or Slurm will never run (or stopped) the pool's job; the message quotes
    the command and what Slurm said (its pending reason)."""


class SlurmUnreachable(SlurmError):
    """Slurm's controller did not answer a command (down, restarting, overloaded): worth retrying."""


class BootstrapError(ProvisionError):
    """Preparing a node's environment failed; the message names the host, the step and the output."""


class PythonMismatch(BootstrapError):
    """The node has no Python of the client's major.minor version (both versions are named)."""


class SetupFailed(BootstrapError):
    """A pip/apt install or a setup command failed on the node; its output is in the message."""


class ProviderNotAvailable(ProvisionError):
    """A provider name skyhive knows but this install cannot use (not built yet, or a missing package)."""


class NoSSH(SkyhiveError, ValueError):
    """The pool's nodes are not reached over SSH (a Local pool): no SSH entry, `skyhive ssh` opens a local
    shell instead."""


class TeardownIncomplete(ProvisionError):
    """A pool closed but its provider did not confirm everything gone: the pool is `leaking` (`skyhive
    ls` shows it) and `skyhive down POOL` retries until the provider confirms. `leaked` names what may
    still run (instance ids; "shared resources" when the provider's cleanup failed)."""

    def __init__(self, message: str, *, pool_id: str = "", leaked: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.pool_id = pool_id
        self.leaked = tuple(leaked)


# ---- calls on a pool -------------------------------------------------------------------------------

class WorkerLost(SkyhiveError):
    """The worker process running a task died or stopped answering before the task finished.

    `node` and `local_rank` say where (node -1: no one node); `nodes` names every node lost in the
    same call (a broadcast that lost several at once), in node order."""

    def __init__(self, message: str, *, node: int, local_rank: int = 0, nodes: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.node = node
        self.local_rank = local_rank
        self.nodes = tuple(nodes) or ((node,) if node >= 0 else ())


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


class EventsStalled(SkyhiveError):
    """A `pool.events()` iterator fell further behind than its `max_buffer` and was detached."""


class OutputStalled(SkyhiveError):
    """A `pool.output()` iterator took nothing for too long while output waited; it was detached."""


class NotOnNodeError(SkyhiveError, RuntimeError):
    """`instance_info()` was called outside a skyhive worker (and no `COMPUTE_POOL` is set)."""


# ---- the command line ------------------------------------------------------------------------------

class TaskFileError(SkyhiveError, ValueError):
    """A task file (or a command-line override of it) is malformed; the message names file, line and field."""


class LaunchError(TaskFileError):
    """The task cannot be launched as given (its workdir is too large, its provider is unusable, ...)."""


class PoolNotFound(SkyhiveError):
    """No pool log matches the given id (or a prefix matches several)."""


class PoolInUse(SkyhiveError):
    """`down` was asked to clean a pool whose client still runs (pass force to do it anyway); or a
    named pool is attached by another client."""


class PoolExists(SkyhiveError):
    """A named pool by that name already runs (attach to it, or take it down first)."""


class PoolGone(PoolNotFound):
    """A named pool's workers are no longer running (`skyhive down NAME` cleans up)."""


# ---- plugins ---------------------------------------------------------------------------------------

class WorkerRestarted(SkyhiveError, RuntimeError):
    """A worker process came back after a crash and cannot re-join the framework's process group."""


class CoordinatorPortInUse(SkyhiveError, RuntimeError):
    """The port for the JAX coordinator is already taken on the head node."""


class KerasBackendMismatch(SkyhiveError, RuntimeError):
    """Keras was already imported on the worker with another backend than the plugin's."""


class HuggingFaceLoginError(SkyhiveError, RuntimeError):
    """The worker could not log in to the Hugging Face Hub (the message never holds the token)."""


# ---- bugs ------------------------------------------------------------------------------------------

class IllegalTransition(SkyhiveError, RuntimeError):
    """A node was asked to move between two states the lifecycle does not connect (a skyhive bug)."""


# ---- object storage ---------------------------------------------------------------------------------

class StorageError(SkyhiveError, OSError):
    """A bucket could not be read or written (`runtime/storage/`): the message names the bucket, the key
    and the cause; `cause` is one of "no-credentials", "no-such-bucket", "access-denied", "no-such-key",
    "interrupted", "disk-full", "unsupported", "error"."""

    def __init__(self, message: str, *, bucket: str = "", key: str = "", cause: str = "error") -> None:
        super().__init__(message)
        self.bucket = bucket
        self.key = key
        self.cause = cause

    def __reduce__(self) -> tuple:  # type: ignore[type-arg]
        return (_storage_error, (str(self), self.bucket, self.key, self.cause))


def _storage_error(message: str, bucket: str, key: str, cause: str) -> StorageError:
    return StorageError(message, bucket=bucket, key=key, cause=cause)


# ---- managed jobs -----------------------------------------------------------------------------------

class ManagedJobError(SkyhiveError):
    """A managed job (`sky.jobs.launch(fn(...))`) ended without a result to give: cancelled, or failed
    other than by its function raising (that exception is raised itself). `job_id`, its `state`
    ("FAILED", "CANCELLED") and `detail` (why, as `skyhive jobs queue` shows it)."""

    def __init__(self, message: str, *, job_id: int = 0, state: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id
        self.state = state
        self.detail = detail
