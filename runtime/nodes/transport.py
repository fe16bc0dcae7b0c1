"""What a transport gives a node actor: a way to start a worker process and a byte pipe to it.

Bytes flow in by callback (`Receiver.data_received`), straight into the protocol `Connection`: no
task sits between the pipe and the waiting caller. Flow control is explicit: `pause_reading` when
our consumers fall behind (the worker then blocks on its writes), `drain` when the worker does.

Every hook a transport, worker process or link may implement is declared here, with its default;
the node actor and the channel call them directly (no probing with `getattr`). Which transport serves
a node is decided by `registry` from the node's reach kind.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
import socket
from typing import Any, Protocol

from .shell import CommandResult, NodeEnv, Shell

__all__ = ["Receiver", "Link", "WorkerProcess", "CommandResult", "CollectionsReach", "Transport"]


class Receiver(Protocol):
    """What a link feeds (the worker channel)."""

    #: Why the worker is gone, once known: a link that gives up sets it before `eof_received`.
    lost_reason: str | None

    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> None: ...


class Link(Protocol):
    """A connected byte pipe to one worker process."""

    #: A Unix socket beside the pipe that passes memory files (large buffers in shared memory, see
    #: `shm`), or None when the worker does not share this machine's memory.
    fd_socket: socket.socket | None

    def write(self, data: bytes | memoryview) -> None: ...
    def writelines(self, pieces: Sequence[bytes | memoryview]) -> None: ...
    async def drain(self) -> None: ...
    async def write_direct(self, pieces: Sequence[bytes | memoryview]) -> None:
        """Write `pieces` and return once the link can take more (large buffers: no extra copy where
        the link can avoid one)."""
        ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


class WorkerProcess(abc.ABC):
    """A started worker: its pipe, and how to wait for or end it."""

    link: Link
    pid: int

    @abc.abstractmethod
    async def wait(self) -> int | None:
        """Wait for the worker to exit; its exit status (negative: killed by that signal)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the worker and every process it started. Idempotent."""

    @property
    @abc.abstractmethod
    def returncode(self) -> int | None:
        """The exit status once it exited, else None."""

    @property
    def reconnecting(self) -> bool:
        """True while the link to the worker is being re-established (the node actor does not count
        that as silence). Default: links that cannot reconnect never are."""
        return False

    def close_transport(self) -> None:
        """Release the pipe's OS resources once the worker has exited. Default: nothing to release."""

    def detach(self) -> None:
        """Close our link and leave the worker running (a named pool kept after its client leaves).
        Only detached workers can; the default raises `NotImplementedError`."""
        raise NotImplementedError(f"{type(self).__name__} cannot outlive its client")


@dataclass(frozen=True, slots=True)
class CollectionsReach:
    """Where a node's workers reach the pool's collections (`sky.dict` & co., runtime/collections/)."""

    #: the store's socket as the node sees it
    path: str
    #: seconds a worker keeps trying while the way to it is re-made (a reconnecting SSH connection); 0:
    #: a broken connection means the store is gone
    resume: float = 0.0


class Transport(abc.ABC):
    """How a node actor reaches one node."""

    async def connect(self) -> None:
        """Open the connection to the node (idempotent). Raises `NodeUnreachable` while the node does
        not answer (the node actor retries that for the provider's `connect_retry` seconds) and other
        `ProvisionError`s for what retrying cannot fix. Default: nothing to open."""

    def worker_info_env(self, info: Any) -> str:
        """The text of a worker's `COMPUTE_POOL` variable for its `InstanceInfo` `info`. Default: the
        whole info as JSON (what `instance_info()` on the node parses)."""
        return str(info.to_json())

    def worker_python(self) -> str:
        """The interpreter that runs workers on the node (bootstrap may still replace it)."""
        return "python3"

    #: what bootstrap prepared on the node (set by `use_env`), None before or without a bootstrap
    node_env: NodeEnv | None = None

    def shell(self) -> Shell:
        """The node's `Shell`, through which bootstrap prepares it (`runtime/bootstrap/`). Default: none,
        so a kind whose transport has no shell cannot use skyhive's bootstrap (it may declare its own, or
        none)."""
        raise NotImplementedError(f"{type(self).__name__} has no shell: its kind cannot use skyhive's bootstrap")

    async def use_env(self, env: NodeEnv) -> None:
        """Run the node's workers with what bootstrap prepared (`env`). Default: kept as `node_env`, for
        `start_worker` to read."""
        self.node_env = env

    @abc.abstractmethod
    async def start_worker(
        self, argv: Sequence[str], env: Mapping[str, str], receiver: Receiver, *, label: str
    ) -> WorkerProcess:
        """Start `argv` on the node with `env` added, its stdin/stdout as the protocol pipe."""

    @abc.abstractmethod
    async def run(self, command: str, *, env: Mapping[str, str] | None = None, timeout: float | None = None) -> CommandResult:
        """Run a shell command on the node (bootstrap); cancelling it ends the command."""

    async def reach_collections(self, client_path: str) -> CollectionsReach | str:
        """Make the pool's collections, served by the client on the Unix socket `client_path`, reachable
        from the node's workers (idempotent: called before each worker starts); where they reach it, or
        why they cannot (the error their tasks get from `sky.dict` & co.). Default: they cannot."""
        return (f"this pool's nodes ({type(self).__name__}) cannot reach its distributed collections "
                "(sky.dict & co. are served to Local, SSH and cloud nodes: docs/collections.md)")

    async def close(self) -> None:
        """Release the transport (connections); workers must have been stopped first."""

    def describe(self) -> dict[str, Any]:
        """Plain values that say where this transport goes (for logs)."""
        return {}
