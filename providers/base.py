"""The provider interface: where nodes come from, one operation per phase of a node's life.

Each operation is declared once here, with its contract; every provider (Local, SSH, the clouds, Slurm,
Simulated) implements the same operations in its own small module, and its docstrings point back here.
The pool's node actors drive them per node:

    prepare(spec)                      once per pool: shared resources (key pair, security group), found
                                       again by tag so that re-running it is safe
    launch(spec, nodes) -> handles     ask for these node indices (one request for all of them where the
                                       provider can); handles carry ids, maybe no address yet
    wait_running(handle, report)       per node: until it runs; returns the handle with its addresses,
                                       calling `report(provider_state)` as the provider's state changes
    terminate(handles)                 per node or many at once; idempotent; gone is fine
    cleanup(pool_id)                   what `prepare` made; idempotent
    list_owned(pool_id) -> handles     what this provider still holds for a pool (by tag): `skyhive down`

Simple providers (Local, SSH) implement only `launch` (handles that already run) and `terminate`.
`create`/`destroy` compose the phases for code that wants all nodes at once.

Records crossing the boundary are frozen dataclasses: what to create (`ClusterSpec`), what was created
and how to reach it (`NodeHandle` with a reach). A reach names its `kind`; the runtime keeps a registry
from reach kind to transport, so a provider never imports the runtime and a new kind of node is a new
reach class plus a registered transport, with no edit of the pool actor.

Errors: a provider raises `ProvisionError` (or a subclass) naming the node/host and the cause. Only the
exception types a provider lists in `transient_errors` (or accepts in `is_transient`) are retried, with
the backoff of its `retry` policy; everything else fails the node at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ..errors import NodeUnreachable, ProvisionError
from .features import LEGACY, Feature, Features, fold_legacy

__all__ = [
    "ProvisionError",
    "NodeUnreachable",
    "ClusterSpec",
    "Reach",
    "LocalReach",
    "DetachedLocalReach",
    "SSHReach",
    "NodeHandle",
    "RetryPolicy",
    "Provider",
    "LIFECYCLE_STATES",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """What the pool asks a provider for."""

    pool_id: str
    nodes: int
    processes_per_node: int = 1
    accelerator: str | None = None  # "A100", "A100:8": the provider picks a machine that has it
    cpus: float | None = None  # at least this many vCPUs per node (exactly, with cpus_exact)
    memory_gb: float | None = None  # at least this much memory per node (exactly, with memory_exact)
    cpus_exact: bool = False  # SkyPilot's `cpus: 8` (exactly) as opposed to `8+`
    memory_exact: bool = False
    spot: bool | None = None  # None: the provider's own setting
    # "spot" | "on-demand" | "spot-if-available" (try spot, fall back) | "cheapest"; None: the
    # provider's default. `spot` agrees with it (True / False for the first two, else None).
    allocation: str | None = None
    tags: tuple[tuple[str, str], ...] = ()  # extra tags/labels the user asked for


#: SSH connection defaults, defined once (the SSH provider's arguments and `SSHReach` use them).
SSH_CONNECT_TIMEOUT = 10.0
SSH_IDLE_TIMEOUT = 600.0
SSH_RECONNECT_TIMEOUT = 60.0


class Reach:
    """How the runtime reaches a node: a frozen dataclass whose class names its `kind`.

    The runtime's transport registry maps `kind` to the transport that serves it ("local", "ssh", ...).
    """

    kind: ClassVar[str] = ""
    __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalReach(Reach):
    """The node is this machine: workers are local subprocesses."""

    kind: ClassVar[str] = "local"
    cwd: str | None = None
    # when this Python does not satisfy the pool's Image: build the Image's environment (cached by
    # content hash, as SSH nodes do) instead of refusing
    build_env: bool = False
    # workers started before the pool knew them (`Local.start_early`, `local_early.py`): the transport
    # takes them instead of spawning, while they last
    early: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    def __getstate__(self) -> list[Any]:
        # a reach saved (a managed job's avoided nodes) is data: its early workers are live processes of
        # this client and stay out of it
        return [() if f.name == "early" else getattr(self, f.name) for f in fields(self)]


@dataclass(frozen=True, slots=True, kw_only=True)
class DetachedLocalReach(LocalReach):
    """The node is this machine, and its workers are detached daemons that outlive the client (a named
    pool): each serves a Unix socket in `socket_dir` (0700). With `attach`, the workers already run
    and the client takes them over; else they are started. `idle_timeout` (seconds; inf: never) ends
    a worker that has had no client that long (the pool's autostop)."""

    kind: ClassVar[str] = "local_detached"
    socket_dir: str
    attach: bool = False
    idle_timeout: float = float("inf")


@dataclass(frozen=True, slots=True, kw_only=True)
class SSHReach(Reach):
    """The node is reached over SSH."""

    kind: ClassVar[str] = "ssh"
    host: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    proxy_jump: str | None = None  # "user@host:port" of a jump host (ssh_config's ProxyJump), else direct
    known_hosts: str | None = None
    host_key: str | None = None  # a pinned public key, when the provider knows it
    python: str | None = None
    connect_timeout: float = SSH_CONNECT_TIMEOUT  # one connection attempt
    idle_timeout: float = SSH_IDLE_TIMEOUT  # a detached worker with no client exits after this
    reconnect_timeout: float = SSH_RECONNECT_TIMEOUT  # a dropped link is retried this long
    use_agent: bool = False  # the ssh agent and ~/.ssh/config keys (never ~/.ssh/config itself)
    keep_env: bool = True  # keep the environment bootstrap built on the node (next pool starts warm)
    # > 0: bootstrap starts the node's idle watchdog, which runs `shutdown_command` after this many
    # seconds with no SSH client connected (cloud nodes: the last defence against a forgotten machine)
    idle_shutdown: float = 0.0
    shutdown_command: str = "sudo shutdown -h now"
    # run before bootstrap looks at the node, until it exits (a fresh cloud machine: wait for its first-boot
    # setup, e.g. `cloud-init status --wait`); "" for none
    ready_command: str = ""
    # run by bootstrap once the node is prepared (after its watchdog started): lifts the boot-time limit the
    # node's boot script set (a cloud node whose client died before bootstrap shuts itself down); "" for none
    boot_limit_off: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHandle:
    """A node the provider made (or named): its index in the pool, the provider's id, its addresses and
    how to reach it. `private_addr` is what peers use (MASTER_ADDR, the peers list); it may be empty
    between `launch` and `wait_running`."""

    node: int
    provider_id: str
    private_addr: str
    reach: Reach
    public_addr: str | None = None  # what the client uses when it differs from private_addr
    accelerators: int = 0
    accelerator: str | None = None  # the accelerator model ("A100"), when the provider knows it
    state: str = ""  # the provider's own state word when the handle was made ("pending", "RUNNING", ...)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Backoff for a provider's transient errors: `attempts` tries in all, the delay doubling from
    `initial_delay` up to `max_delay` seconds."""

    attempts: int = 5
    initial_delay: float = 1.0
    max_delay: float = 30.0

    def delays(self) -> list[float]:
        """The waits between attempts (len = attempts - 1)."""
        return [min(self.initial_delay * 2**i, self.max_delay) for i in range(max(self.attempts - 1, 0))]


#: The lifecycle states a provider's own states may be mapped to (see `Provider.state_map`).
LIFECYCLE_STATES = frozenset({"provisioning", "running", "terminating", "terminated", "failed"})


class Provider(abc.ABC):
    """Where nodes come from. Blocking SDK calls run in worker threads, never on the event loop."""

    #: Short name shown in events and `skyhive ls`; the registry and `--provider` use it.
    name: ClassVar[str] = "provider"

    #: Exception types from this provider that are worth retrying (throttling, a brief API outage).
    #: Only these (and what `is_transient` accepts) are retried; anything else fails at once.
    transient_errors: ClassVar[tuple[type[BaseException], ...]] = ()

    #: Backoff for transient errors.
    retry: ClassVar[RetryPolicy] = RetryPolicy()

    #: The provider's own node states (lower-case) -> lifecycle state names (`LIFECYCLE_STATES`).
    state_map: ClassVar[Mapping[str, str]] = {}

    #: The `ClusterSpec` requirements this provider chooses machines by: a subset of {"accelerator",
    #: "cpus", "memory_gb", "spot"}. `skyhive launch` refuses a requirement outside it — or, for a
    #: provider of `fixed_machines`, checks it on each node before setup (the machine is what it is).
    chooses: ClassVar[frozenset[str]] = frozenset()

    #: The `ClusterSpec` requirements this provider takes as advice: a machine without them warns, the
    #: request is recorded (the pool's `plan`, in its log) and the work runs — the same for
    #: `Pool(accelerator=...)` and a task file's `resources.accelerators` (Local: this machine is what it is).
    advisory: ClassVar[frozenset[str]] = frozenset()

    #: Task-file `resources` fields (SkyPilot's names: "region", "zone", "instance_type", "image_id",
    #: "disk_size") that this provider takes as constructor options -> the keyword argument. A field
    #: that no provider option takes is refused by `skyhive launch`, naming the field and the provider.
    resource_options: ClassVar[Mapping[str, str]] = {}

    #: What this provider can do, declared once (`providers/features.py`): the features it offers and,
    #: for each it cannot offer that a user may ask of it, why — the error that refuses it (`Feature.KEEP`
    #: refused: `Pool(name=..., keep=True)` and `skyhive launch -c` on it). By default a provider keeps
    #: pools (through the keep support its nodes' kind declares: `runtime/nodes/keep.py`) on machines that
    #: exist already, and nothing more. The names this replaced (`unsupported`, `can_stop`, `opens_ports`,
    #: `fixed_machines`, `bulk_teardown`, `node_homes`, `same_machine`, `interruption_notices`) are still
    #: read from a provider, derived from it; a subclass setting one of them has it folded in.
    features: ClassVar[Features] = Features(Feature.KEEP)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.features = fold_legacy(cls)

    unsupported = LEGACY["unsupported"]
    can_stop = LEGACY["can_stop"]
    opens_ports = LEGACY["opens_ports"]
    fixed_machines = LEGACY["fixed_machines"]
    bulk_teardown = LEGACY["bulk_teardown"]
    node_homes = LEGACY["node_homes"]
    same_machine = LEGACY["same_machine"]
    interruption_notices = LEGACY["interruption_notices"]

    async def stop_nodes(self, ids: Sequence[str]) -> None:
        """Stop the machines `ids` (disks kept); only where `Feature.STOP` is offered."""
        raise NotImplementedError(self.features.why_not(Feature.STOP, self.name))

    async def start_nodes(self, ids: Sequence[str]) -> None:
        """Start the stopped machines `ids` again (the same ones); only where `Feature.STOP` is offered."""
        raise NotImplementedError(self.features.why_not(Feature.STOP, self.name))

    async def open_ports(self, pool_id: str, ports: Sequence[tuple[int, int]]) -> list[str]:
        """Open `ports` on the pool's firewall for the client's address; only where `Feature.OPEN_PORTS`
        is offered (every pool's ports are reached through its SSH connection anyway)."""
        return []

    #: What a machine this provider creates does when its OS shuts down (where `can_stop`): "terminate"
    #: (the default: a machine that powers itself off ends its billing) or "stop" (its disks kept). A
    #: kept pool whose autostop stops it (not `--down`) sets "stop": the autostop watchdog on a machine
    #: has no cloud credentials, so it stops the machine by shutting its OS down.
    shutdown_behavior: str = "terminate"

    async def node_states(self, ids: Sequence[str]) -> dict[str, str]:
        """The provider's state of each machine of `ids` ("running", "stopped", ...; a machine not
        listed is gone); only where `Feature.STOP` is offered."""
        raise NotImplementedError(self.features.why_not(Feature.STOP, self.name))

    async def set_shutdown_behavior(self, ids: Sequence[str], behavior: str) -> None:
        """Make the machines `ids` "stop" or "terminate" when their OS shuts down; only where `Feature.STOP`
        is offered."""
        raise NotImplementedError(self.features.why_not(Feature.STOP, self.name))

    @property
    def max_nodes(self) -> int:
        """The most nodes one pool may ask of this provider: `Pool(nodes=...)` and a task's `num_nodes`
        past it are refused before anything is created (`providers/limits.py`; default 10,000 or
        `SKYHIVE_MAX_NODES`)."""
        from .limits import configured_max_nodes

        return configured_max_nodes()

    #: Seconds a node that runs but refuses connections (`NodeUnreachable`) is retried: a fresh VM's
    #: sshd starts a while after the cloud says "running". 0 for hosts that already run (SSH, Local).
    connect_retry: ClassVar[float] = 0.0

    # ---- the phases, driven per node by the runtime -----------------------------------------------

    async def prepare(self, spec: ClusterSpec) -> None:
        """Create what the pool's nodes share (key pair, security group), found again by tag so that a
        second call finds instead of duplicating. Default: nothing to prepare."""
        return None

    @abc.abstractmethod
    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """Ask for the nodes with these indices (node 0 is the head); one handle per index, same order.

        Handles carry the provider's id; addresses may still be unknown (`wait_running` fills them).
        Raises `ProvisionError` naming the cause; whatever this call created before raising has been
        terminated (or is found by `list_owned`, so `skyhive down` removes it).
        """

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        """Wait until the node runs and return its handle with addresses. Calls `report(state)` with the
        provider's own state word each time it changes (shown in progress and recorded as events).
        Raises `ProvisionError` if the node will never run. Default: the handle already runs."""
        return handle

    @abc.abstractmethod
    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        """Destroy these nodes. Idempotent: a node that is already gone (or never became visible) is not
        an error. For clouds: returns once the nodes are confirmed gone (or shutting down for good)."""

    async def cleanup(self, pool_id: str) -> None:
        """Delete what `prepare` made for `pool_id`, retrying while dependencies linger. Idempotent."""
        return None

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        """The nodes this provider still holds for `pool_id` (found by tag), for cleaning up after a crash."""
        return []

    async def bootstrapped(self, handle: NodeHandle) -> None:
        """Node `handle` is bootstrapped (its idle watchdog, where it has one, runs): lift what the provider set
        at create for a node no client would bootstrap (Azure's auto-shutdown schedule). Called by the pool
        once per node, from the client. Default: nothing."""
        return None

    async def node_problem(self, handle: NodeHandle) -> str | None:
        """Why this running node is lost as the provider sees it now (one sentence naming the node and
        the cause: a Slurm node whose slurmd stopped answering its controller), or None. Asked every
        `heartbeat_interval` while the node's workers run, by transports whose workers can outlive
        their node's agent (`runtime/kinds/slurm/srun.py`); cheap for many nodes (one scheduler query
        answers them all). Default: None (no view of the nodes' health beyond the workers')."""
        return None

    async def owned_summary(self, pool_id: str) -> str | None:
        """One short line for `skyhive ls` about what this provider holds for `pool_id` now ("job 12
        RUNNING"), when finding out is cheap (one scheduler query); None (the default) when it is not
        (logging in to hosts, cloud API calls): `skyhive ls` then shows only the pool's log."""
        return None

    # ---- policy ---------------------------------------------------------------------------------------

    def is_transient(self, exc: BaseException) -> bool:
        """Whether `exc` is worth retrying (default: one of `transient_errors`)."""
        return bool(self.transient_errors) and isinstance(exc, self.transient_errors)

    def lifecycle_state(self, provider_state: str) -> str | None:
        """The lifecycle state name for one of the provider's own states, or None if it has none."""
        return self.state_map.get(provider_state.lower())

    def head_port(self, spec: ClusterSpec) -> int:
        """The coordination port on the head node (MASTER_PORT, the JAX coordinator)."""
        return 29500

    def start_early(self, pool_id: str, nodes: int, workers_per_node: int, argv: Sequence[str],
                    env: Mapping[str, str]) -> None:
        """Called when a pool with nothing to set up on its nodes (no Image, plugins, mounts; not kept)
        is entered, before the client imports its runtime: a provider whose workers can start before
        their pool knows them runs `argv` for each, with `env` added (the mark that makes a worker wait
        for the rest of its environment, `runtime/worker/early.py`), for `launch` to hand over to pool
        `pool_id`'s nodes (Local: `local_early.py`). Must not raise for a start it could not make (the
        workers are then started as usual). Default: nothing."""

    def end_early(self, pool_id: str) -> None:
        """End what `start_early` started for `pool_id` and `launch` did not take (the pool closed or
        failed). Default: nothing."""

    def plan(self, spec: ClusterSpec) -> Mapping[str, Any]:
        """What `spec` will get and cost, in plain values, known before anything is created (a cloud: the
        instance type, its hourly price, the pool's cost per hour, and a one-line "summary"); recorded in
        the pool's log and shown before launch. Raises `ProvisionError` if nothing satisfies `spec`.
        Default: nothing to say."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Plain values that identify this provider's configuration (for the event log and `skyhive down`)."""
        return {"provider": self.name}

    def find_volume(self, name: str) -> Any:
        """The persistent volume `name` as this provider's cloud lists it (`providers.volumes.Volume`), or
        None when it does not exist (blocking: call it from a thread in async code). Raises `ProvisionError`
        for a provider that keeps no volumes (the default); AWS keeps them (`cloud/aws_volumes.py`)."""
        raise ProvisionError(f"{self.name}: this provider keeps no volumes")

    def delete_volume(self, name: str) -> None:
        """Delete the persistent volume `name` (what `skyhive volumes delete` asks, and nothing else).
        Raises `ProvisionError` naming what holds it (an instance it is attached to) or that this provider
        keeps no volumes (the default)."""
        raise ProvisionError(f"{self.name}: this provider keeps no volumes")

    @classmethod
    def check(cls) -> list[tuple[str, str]] | None:
        """What `skyhive check` says about this provider on this machine, as (item, status) lines, without
        making anything; None: nothing to check (not a cloud). The clouds override it (`LibcloudProvider`)."""
        return None

    @classmethod
    def infra(cls, text: str, parts: Sequence[str], **files: str | None) -> dict[str, Any]:
        """SkyPilot's `--infra` spelling `text` for this provider (`parts`: what follows its name, split at
        "/"): the `region`, `zone` and `hosts` it names and the provider's own `options` (name, value pairs).
        Raises `ValueError` saying what is expected. `files` name files a spelling may read
        (`ssh_node_pools`). Default, a cloud's: NAME, NAME/REGION, NAME/REGION/ZONE (`*`: any region)."""
        head = text.strip().split("/", 1)[0]
        if len(parts) > 2:
            raise ValueError(f"{text!r}: expected {head}, {head}/REGION or {head}/REGION/ZONE")
        region = parts[0] if parts and parts[0] not in ("", "*") else None
        zone = parts[1] if len(parts) == 2 and parts[1] else None
        return {"region": region, "zone": zone}

    def candidates(self) -> Sequence[Provider] | None:
        """The providers this one tries in turn (`Fallback`), each to be saved as itself where a pool's
        provider is saved (a managed job); None for a provider that provisions its nodes itself."""
        return None

    @classmethod
    def from_description(cls, desc: Mapping[str, Any]) -> Provider:
        """Rebuild the provider from its `describe()` (what `skyhive down` does with a pool's log).
        Default: `cls(**desc_without_"provider")`. Raises `ProvisionError` if that does not fit."""
        kwargs = {k: v for k, v in desc.items() if k != "provider"}
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ProvisionError(f"cannot rebuild provider {cls.name!r} from the pool's log ({kwargs!r}): {exc}") from None

    async def machines_gone(self, handles: Sequence[NodeHandle]) -> dict[int, str]:
        """Of these running nodes, those whose machine the provider itself reports gone or going (a
        cloud instance terminated, stopping or stopped: a spot preemption, someone's console), as node
        index -> why. What a managed job's controller polls, so it does not wait for the worker's link to
        time out. Default: none (a provider that cannot tell; the lost worker is noticed instead)."""
        return {}

    def avoiding(self, lost: Sequence[NodeHandle]) -> Provider:
        """This provider for a new pool after the nodes `lost` were lost (preempted, unreachable, their
        worker dead): the places they were on are tried last, or not at all — a managed job's recovery
        never goes straight back to the host or zone that just lost it. Default: itself (a provider with
        no choice of place)."""
        return self

    async def sweep_lost(self, pool_id: str, lost: Sequence[NodeHandle]) -> None:
        """What pool `pool_id` left on the machines of these lost nodes — a dead worker's orphaned
        programs — stopped, while the pool runs on (a managed job's node replaced in place: its program
        must not run beside the new round). Raises when that cannot be done (the machine unreachable),
        naming it. Default: nothing (a cloud instance the pool replaced was terminated with everything on
        it; a Local worker's programs die with its process group)."""
        return None

    def avoid_in_place(self, lost: Sequence[NodeHandle]) -> None:
        """A running pool lost these nodes and replaces them (`Pool(replace_failed=True)`; a managed job's
        node replaced in place, its other nodes kept): the places they were on are tried last by this
        provider's later launches. Unlike `avoiding`, the pool keeps this provider — its other nodes stay
        where they are. Default: nothing (a provider with no choice of place; an SSH pool's replacement
        takes a spare host, never one it handed out before)."""
        return None

    def released(self, pool_id: str, handles: Sequence[NodeHandle]) -> None:
        """A running pool gave these nodes back in good order (an elastic pool shrinking, `Pool(nodes=(min,
        max))`), after `terminate` confirmed them gone: a later `launch` for the same pool may hand their
        places out again. Default: nothing (a provider that makes a fresh machine per launch; an SSH pool
        may give the same host again)."""
        return None

    def for_nodes(self, nodes: int) -> Provider:
        """This provider narrowed to what a pool of `nodes` nodes used, for `skyhive down` (a provider
        naming hosts keeps only the first `nodes`). Default: itself."""
        return self

    # ---- compositions ---------------------------------------------------------------------------------

    async def create(self, spec: ClusterSpec) -> list[NodeHandle]:
        """All nodes at once: prepare, launch every index, wait for each. On failure, terminates what
        was launched (and cleans up) before raising."""
        await self.prepare(spec)
        handles: list[NodeHandle] = []
        try:
            handles = await self.launch(spec, range(spec.nodes))
            return [await self.wait_running(h, lambda _state: None) for h in handles]
        except BaseException:
            if handles:
                await self.terminate(handles)
            await self.cleanup(spec.pool_id)
            raise

    async def destroy(self, handles: Sequence[NodeHandle]) -> None:
        """Terminate these nodes. (Shared resources go with `cleanup`.)"""
        await self.terminate(handles)

    async def down(self, pool_id: str) -> list[NodeHandle]:
        """Destroy everything this provider holds for `pool_id` — its nodes (by tag), then what `prepare`
        made — and return the nodes that were found. What `skyhive down` calls."""
        owned = await self.list_owned(pool_id)
        if owned:
            await self.terminate(owned)
        await self.cleanup(pool_id)
        return owned
