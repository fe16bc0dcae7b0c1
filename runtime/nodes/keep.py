"""Keeping a pool: how a kind's nodes outlive their client and are found again (a named pool,
`Pool(name=..., keep=True)`, `skyhive launch -c`).

A kind that can be kept declares a `KeepSupport` with its `TransportKind` (`keep="module:attr"`, the
object an instance or a no-argument factory); `runtime/clusters/` talks to the nodes of a named pool only
through it. It says:

- how a running node of a new kept pool is reached so that its workers outlive the client
  (`keep_handle`: a detached worker per (pool, node, rank), no idle timeout), and what the pool's record
  holds of its nodes (`record_fields`, `provisional`);
- which workers a node runs, as the record lists them (`workers`), and what else of a node the record
  keeps (`node_facts`: the transport reports it — a host key, the interpreter bootstrap found);
- from the record: the provider that takes the workers over (`attach_provider`), which workers still
  live (`live`), how the pool's processes are stopped and what is left on the nodes cleaned up (`stop`),
  where the autostop watchdog runs (`start_watchdog`, `stop_watchdog`), and the provider that creates a
  stopped pool again over the same nodes (`relaunch_provider`, `skyhive start`);
- how a user reaches node N (`access`, a `NodeAccess`: `describe`, `run` for `skyhive ssh`, `connect` for
  `skyhive forward`, `ssh_config` for `skyhive ssh-config`). A kind without it can be kept, not reached.

What the record holds of the nodes (`provider_info`, `host_keys`, ...) is the keep support's own: above
it, only `runtime/clusters/kept_pool.py` (`KeptPool`) and the pool's machines (`clusters/cloud.py`) read it.

A provider that cannot keep a pool says so with the reason (`Feature.KEEP` not in its `Provider.features`); one that can
is wrapped (`runtime/clusters/kept.py`), and each running node is handed to the keep support of its
reach's kind. The record names the kind that keeps it (`keeper`), so a later process finds the same
support (a kind may reuse another's: a cloud's instances are kept as SSH nodes are).

Built in: "local" (`runtime/kinds/local/keep.py`: detached workers on this machine's Unix sockets; a
local shell, this machine's loopback) and "ssh" (`runtime/kinds/ssh/keep.py`: detached workers on the
hosts, their host keys pinned; `keep_access.py`: `ssh -F` with the pool's generated entries).
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import anyio
import anyio.abc
from anyio.streams.stapled import StapledByteStream

from ...providers.base import NodeHandle, Provider, ProvisionError

__all__ = ["NodeAccess", "ProcessStream", "KeepSupport", "KeepContext", "KeptWorker", "KeptRecord", "StopResult", "keep_support",
           "keep_support_of", "cluster_key", "node_name"]


def cluster_key(name: str, state_dir: str) -> str:
    """The key of pool `name` on machines other than the client's: the directory name of its sockets
    there, in its processes' environment (`c-NAME-HASH`, HASH of the client's state directory: two state
    directories may both have a pool "train" on the same host)."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:8]
    return f"c-{name}-{digest}"


def node_name(pool: str, node: int) -> str:
    """How a user names node `node` of the kept pool `pool`: the pool's name for the head (node 0),
    `POOL-workerN` for node N (SkyPilot's names; an SSH pool's aliases)."""
    return pool if node == 0 else f"{pool}-worker{node}"


@dataclass(frozen=True, slots=True, kw_only=True)
class KeepContext:
    """What a kind needs to keep the nodes of one new named pool."""

    pool: str  # the pool's name
    socket_dir: str  # this machine's directory for the pool's sockets (0700)
    cluster: str  # the pool's key, unique per client state directory (`c-NAME-HASH`): its sockets elsewhere


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptWorker:
    """One detached worker as the record lists it: where it listens (on its node's host) and its pid."""

    node: int
    rank: int
    pid: int
    socket: str


@dataclass(frozen=True, slots=True)
class StopResult:
    """What stopping a pool on its nodes did: processes ended, one line per node or host, failures (each
    naming the host and why: the record is kept)."""

    ended: int = 0
    done: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()


class KeptRecord(Protocol):
    """A named pool's record as a kind reads it (`runtime/clusters/record.py`'s `ClusterRecord`, frozen:
    each field read-only)."""

    @property
    def name(self) -> str: ...

    @property
    def provider(self) -> str: ...

    @property
    def nodes(self) -> int: ...

    @property
    def cwd(self) -> str: ...

    @property
    def socket_dir(self) -> str: ...

    @property
    def workers(self) -> Sequence[Any]: ...  # KeptWorker-shaped entries (node, rank, pid, socket)

    @property
    def autostop_down(self) -> bool: ...

    @property
    def watchdog_pid(self) -> int: ...

    @property
    def provider_info(self) -> dict[str, Any]: ...  # the keeping kind's own (and the machines', `runtime/clusters/cloud.py`)

    @property
    def cluster(self) -> str: ...

    @property
    def host_keys(self) -> dict[str, str]: ...

    @property
    def node_envs(self) -> dict[str, dict[str, Any]]: ...

    @property
    def keeper(self) -> str: ...

class NodeAccess(abc.ABC):
    """How a user reaches one node of a kept pool (`skyhive ssh`, `forward`, `ssh-config`)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The node as a user knows it: "ubuntu@10.0.0.3 port 22", "pod sh-train-0 (namespace default)"."""

    @abc.abstractmethod
    def run(self, argv: Sequence[str] | None, *, tty: bool) -> int:
        """Run `argv` (None: an interactive login shell) on the node with this process's stdin/stdout/stderr
        (a terminal when `tty`); its exit status."""

    @abc.abstractmethod
    async def connect(self, port: int) -> anyio.abc.ByteStream:
        """A byte stream to TCP `port` on the node's loopback (what `skyhive forward` relays each local connection to)."""

    def ssh_config(self) -> str | None:
        """`Host` lines for `skyhive ssh-config` where the node speaks SSH; None (the default) elsewhere."""
        return None

    def ip(self) -> str | None:
        """The node's address as `skyhive status --ip` prints it (SkyPilot's head IP); None (the default) where
        a user reaches the node by no address of its own (a pod reached over exec)."""
        return None


class ProcessStream(StapledByteStream):
    """A process's stdin and stdout as one byte stream: what `NodeAccess.connect` returns where a port is
    reached through a command (SSH's `ssh -W`, a relay exec'd on a pod). Closing it ends the process:
    SIGTERM, then SIGKILL after `grace` seconds, and waits for it (no zombie)."""

    def __init__(self, process: anyio.abc.Process, *, grace: float = 5.0) -> None:
        assert process.stdin is not None and process.stdout is not None
        super().__init__(process.stdin, process.stdout)
        self.process = process
        self.grace = grace

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await super().aclose()
        with anyio.CancelScope(shield=True):
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.terminate()
                with anyio.move_on_after(self.grace):
                    await self.process.wait()
                if self.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        self.process.kill()
                    await self.process.wait()


class KeepSupport(abc.ABC):
    """How the nodes of one kind are kept and found again (see the module docstring)."""

    #: The kind's name, as records name it (`ClusterRecord.keeper`) and the registry knows it.
    kind: ClassVar[str] = ""

    #: True when the workers run on this machine (their sockets, their processes are here): no login
    #: reaches them, `skyhive ssh` opens a local shell.
    same_machine: ClassVar[bool] = False

    # ---- a new kept pool ------------------------------------------------------------------------------

    @abc.abstractmethod
    def keep_handle(self, handle: NodeHandle, ctx: KeepContext) -> NodeHandle:
        """`handle` (a running node of this kind) reached as a kept pool's node: its workers detached, on a
        socket per (pool, node, rank), with no idle timeout. Raises `ProvisionError` naming the node."""

    def provisional(self, provider: Provider, ctx: KeepContext, nodes: int) -> dict[str, Any] | None:
        """The record fields to save before the first worker of a new pool on `provider` starts (so that
        `skyhive down NAME` can clean up after a client killed while creating it), or None (the default:
        nothing is left on the nodes that the pool's own teardown would not end)."""
        return None

    @abc.abstractmethod
    def record_fields(self, provider: Provider, handles: Sequence[NodeHandle], ctx: KeepContext) -> dict[str, Any]:
        """What the record of a new pool holds of its nodes (`cwd`, `socket_dir`, `cluster`, `provider_info`
        — never a secret), given the provider the pool was made with and its running nodes."""

    @abc.abstractmethod
    def workers(self, node: int, transport: Any, processes: Sequence[Any]) -> list[KeptWorker]:
        """The detached workers node `node` runs (`processes`: its worker objects by rank, None for a
        rank without one), as the record lists them."""

    def node_facts(self, transport: Any) -> dict[str, Any]:
        """What the record keeps of one node, as its transport reports it: {"host_key": "ssh-ed25519 ...",
        "env": {"python", "pythonpath"}}; {} (the default) when there is nothing."""
        return {}

    # ---- a recorded pool --------------------------------------------------------------------------------

    @abc.abstractmethod
    def attach_provider(self, rec: KeptRecord, *, nodes: int | None = None, check: bool = True) -> Provider:
        """The provider whose nodes take the recorded workers over (`nodes` of them; None: as recorded). Raises `PoolGone`
        naming the workers that died where this can be seen without a login (`check=False` skips it)."""

    @abc.abstractmethod
    def live(self, rec: KeptRecord) -> tuple[list[Any], list[str], bool]:
        """(the record's workers that a worker still serves, the hosts that could not be asked and why,
        whether the pool's own autostop stopped it on its nodes). A worker that cannot be reached is not live."""

    def autostop_report(self, rec: KeptRecord) -> str:
        """What the pool's autostop on its nodes left to say once it stopped the pool there (its hook's exit
        status and output, `hook: exit N` then the output's last lines), "" when nothing (the default: a
        watchdog on this machine runs the hook as a job of the pool, whose log holds its output)."""
        return ""

    def worker_groups(self, rec: KeptRecord) -> list[int]:
        """This machine's worker processes of the pool, each leading its process group (ended with the
        pool's agent and watchdog: SIGTERM, then SIGKILL). Default: none here."""
        return []

    def left_behind(self, rec: KeptRecord) -> list[int]:
        """This machine's processes the pool's jobs left in sessions of their own (torchrun's trainers),
        asked once the workers are ended. Default: none here."""
        return []

    def stop(self, rec: KeptRecord, *, host_keys: Mapping[int, str] | None = None, skip: Collection[int] = (),
             keep_work: bool = False) -> StopResult:
        """Stop the pool on its nodes elsewhere (processes, sockets, the jobs' working directories unless
        `keep_work`), after `worker_groups` and `left_behind` were ended here; `host_keys` pins other keys than the recorded
        ones, the nodes in `skip` are not visited. Default: nothing elsewhere."""
        return StopResult()

    def leftovers(self, rec: KeptRecord) -> list[str]:
        """Clean up what a pool whose client is gone (or that is forgotten) left on its nodes elsewhere; the
        failures, naming the host. Default: `stop` (nothing elsewhere)."""
        return list(self.stop(rec).failures)

    def start_watchdog(self, rec: KeptRecord, idle: float, *, command: str, state_dir: str,
                       wait_for: str = "jobs_and_ssh") -> int:
        """Start the pool's autostop watchdog (`runtime/worker/watchdog.py`), `idle` seconds; where it runs on
        this machine it runs the shell line `command` (`python -m skyhive.runtime.clusters.autostop NAME`)
        and keeps its lock and log in `state_dir`. Its pid here, 0 where it runs elsewhere (on the nodes).
        `wait_for` (`resources.autostop.wait_for`): what keeps the pool from being idle — "jobs_and_ssh" a
        connection to its workers; "jobs" and "none" only where the watchdog runs on this machine, beside the
        pool's job queue (`launch -c` refuses them elsewhere first). Raises naming the pool where it did not
        start."""
        raise NotImplementedError(f"nodes of kind {self.kind!r} have no autostop watchdog")

    def stop_watchdog(self, rec: KeptRecord) -> None:
        """End the pool's autostop watchdog where it runs elsewhere (this machine's is ended by pid)."""
        return None

    def relaunch_provider(self, rec: KeptRecord) -> Provider:
        """The provider that creates the stopped pool `rec` again over the same nodes (`skyhive start`): its
        nodes as recorded, reached as when it was made. Default: raises `ProvisionError` naming the pool and
        the kind (its nodes cannot be found again: `skyhive down` and `launch -c` make it anew)."""
        raise ProvisionError(f"pool {rec.name!r} (kind {self.kind!r}) cannot be started again over the same nodes: the "
                             f"kind does not say how; `skyhive down {rec.name}` then `skyhive launch -c {rec.name}` "
                             "makes it anew")

    # ---- reaching a node ----------------------------------------------------------------------------------

    def access(self, rec: KeptRecord, node: int) -> NodeAccess:
        """How node `node` of the kept pool `rec` is reached. Default: raises ProvisionError naming the pool and
        the kind ("pool 'x' (kind 'y') cannot be reached: the kind declares no access")."""
        raise ProvisionError(f"pool {rec.name!r} (kind {self.kind!r}) cannot be reached: the kind declares no access")



def _resolve(target: Any, kind: str) -> KeepSupport:
    if isinstance(target, str):
        from importlib import import_module

        module, _, attr = target.partition(":")
        try:
            target = getattr(import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ProvisionError(f"the keep support of node kind {kind!r} ({target}) cannot be loaded: {exc}") from exc
    if isinstance(target, type):
        target = target()
    if not isinstance(target, KeepSupport):
        raise ProvisionError(f"the keep support of node kind {kind!r} is not a KeepSupport: {target!r}")
    return target


def keep_support(kind: str) -> KeepSupport | None:
    """The keep support node kind `kind` declares (`TransportKind.keep`), None when it declares none
    (or no kind by that name is registered)."""
    from .registry import node_kind

    entry = node_kind(kind)
    if entry is None or entry.keep is None:
        return None
    return _resolve(entry.keep, kind)


def keep_support_of(rec: KeptRecord) -> KeepSupport:
    """The keep support that keeps the pool of `rec` (its `keeper`). Raises `ProvisionError` naming the
    pool and the kind when that kind is not installed here or declares none."""
    support = keep_support(rec.keeper)
    if support is None:
        raise ProvisionError(f"pool {rec.name!r} is kept by node kind {rec.keeper!r}, which declares no keep support "
                             "here (is the package that provides it installed?)")
    return support
