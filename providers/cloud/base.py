"""The one base of every libcloud cloud: the provider phases of `providers.base.Provider`, implemented once.

A cloud module (aws.py, …) supplies blocking primitives — create N tagged nodes in one zone, list nodes
by pool tag, terminate one node, delete what `prepare` made — and a table from its error codes to an
`ErrorKind`. This base owns the policy around them, the same for every cloud:

- every blocking call runs in a worker thread (`anyio.to_thread.run_sync`), never on the event loop;
- errors are classified by the provider's code: `transient` is retried with the provider's backoff,
  `capacity` moves on to the next zone, `quota` stops at once naming the quota, anything else is fatal;
  every zone of the region is tried before giving up;
- ownership is by tag only: `list_owned` lists by pool tag and state; nothing is remembered in memory
  that a second process could not find again;
- destroy is *terminate, then confirm gone*: re-list until nothing owned is pending or running. A
  ``NotFound`` answer is gone — except for an instance created moments ago, which may not be visible
  yet (eventual consistency): that one is retried until `visibility_grace` has passed;
- deleting what `prepare` made is retried while dependencies linger (a terminating instance's network
  interface keeps its security group in use);
- a final failure is a `ProvisionError` with the provider's code and message, the zones tried, and what
  was cleaned up before raising. Leaving by exception or cancellation cleans up shielded and bounded.
"""

from __future__ import annotations

import abc
import copy
import enum
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from ...errors import CloudAPIError
from ..features import Feature, Features
from ..base import ClusterSpec, NodeHandle, Provider, ProvisionError

__all__ = ["ErrorKind", "CloudTimeouts", "LibcloudProvider", "ACTIVE_STATES"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Provider states (lower-case, EC2 words; other clouds map theirs onto these) that still cost money or
#: may still start: a pool is not gone while any of its nodes is in one of them.
ACTIVE_STATES = ("pending", "running", "stopping", "stopped")


class ErrorKind(enum.Enum):
    """What an error of the cloud means for the caller."""

    TRANSIENT = "transient"  # throttling, a brief outage: retry the same call with backoff
    CAPACITY = "capacity"  # this zone has no room for the request: try the next zone
    QUOTA = "quota"  # the account may not have more: stop at once and say which quota
    NOT_FOUND = "not_found"  # the resource does not exist (gone, or not yet visible)
    DEPENDENCY = "dependency"  # still in use by something being deleted: retry the deletion later
    FATAL = "fatal"  # bad request, bad credentials, …: stop
    #: the cloud refused this offer itself (a machine, image or disk it will not create here: a 4xx answer
    #: other than authentication) — the pool stops on this cloud, and a `Fallback` moves to its next offer
    REFUSED = "refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class CloudTimeouts:
    """How long the base waits, in seconds: `poll` between listings; until a node runs (`running`);
    until terminated nodes are confirmed gone (`terminate`); for `prepare`'s resources to be deletable
    (`cleanup`); and how long a just-created node may be invisible (`visibility_grace`)."""

    poll: float = 2.0
    running: float = 600.0
    terminate: float = 600.0
    cleanup: float = 300.0
    visibility_grace: float = 60.0


def named_machine(cloud: str, spec: ClusterSpec, given: str | None, default: str, examples: str) -> str:
    """The machine of a cloud with no accelerator table: `given`, else `default`. A pool that asks for an
    accelerator must name its machine (`given`): refused otherwise, naming the request and `examples`
    of machines that carry one; with a named machine the accelerator is taken on trust, and logged."""
    if spec.accelerator and given is None:
        raise ProvisionError(
            f"{cloud}: cannot choose a machine for accelerator {spec.accelerator!r}: skyhive has no {cloud} "
            f"machine table (no offline source prices its GPUs or lists where they are). Name one that carries "
            f"it: {examples}", kind="unavailable")
    if spec.accelerator:
        log.info("%s: pool %s: accelerator %s taken as given by machine %s (not checked: no table)",
                 cloud, spec.pool_id, spec.accelerator, given)
    return given or default


class LibcloudProvider(Provider):
    """A cloud reached through an apache-libcloud driver. Subclasses implement the blocking primitives
    (``*_sync`` methods, run in worker threads) and `error_code`; the phases are declared in
    `providers.base.Provider` and implemented here once."""

    #: exact provider error codes -> kind; codes ending in ".NotFound" are NOT_FOUND unless listed.
    error_kinds: ClassVar[Mapping[str, ErrorKind]] = {}

    features: ClassVar[Features] = Features(Feature.KEEP, Feature.CREATES_MACHINES, Feature.CHECK, Feature.AUTOSTOP_HOOK)

    #: a fresh machine runs (for the cloud) a while before its sshd answers: retried this long
    connect_retry: ClassVar[float] = 300.0

    #: the cloud's `launch_sync` retries its own create call (idempotently: it counts what already runs
    #: before each retry); the base then calls it once per zone instead of retrying it whole
    retries_launch: ClassVar[bool] = False

    #: zones where a node was just lost (`avoiding`): tried last
    avoided_zones: tuple[str, ...] = ()

    def __init__(self, *, timeouts: CloudTimeouts | None = None) -> None:
        self.timeouts = timeouts or CloudTimeouts()
        self._listings: dict[str, tuple[float, list[NodeHandle]]] = {}  # pool -> (when it began, nodes)
        self._listing_locks: dict[str, anyio.Lock] = {}

    @classmethod
    def check(cls) -> list[tuple[str, str]]:
        """What `skyhive check` says about this cloud on this machine: (item, status) lines — whether
        credentials were found and, where the cloud's API can say, the quotas that matter. Blocking; makes
        nothing. The default says where the cloud's usual credentials were found (`offers.credentials`);
        a cloud whose API can say more (AWS: quotas) overrides it."""
        from .offers import credentials

        where = credentials().get(cls.name)
        return [("credentials", f"found: {where}" if where else "none found")]

    # ---- what a cloud implements (blocking; called in worker threads) ------------------------------

    def error_code(self, exc: BaseException) -> str | None:
        """The provider's error code carried by `exc`, or None if it is not an API error (a cloud whose
        driver raises something else than `CloudAPIError` overrides this)."""
        return exc.code if isinstance(exc, CloudAPIError) else None

    @abc.abstractmethod
    def zones_sync(self, spec: ClusterSpec) -> list[str]:
        """The zones to try, in order (all the region's zones that offer the chosen machine)."""

    @abc.abstractmethod
    def prepare_sync(self, spec: ClusterSpec) -> None:
        """Create (or find again, by tag) what the pool's nodes share."""

    @abc.abstractmethod
    def launch_sync(self, spec: ClusterSpec, nodes: Sequence[int], zone: str) -> list[NodeHandle]:
        """Create one node per index in `zone`, tagged at creation with the pool id and node index."""

    @abc.abstractmethod
    def list_sync(self, pool_id: str, states: Sequence[str] | None = ACTIVE_STATES) -> list[NodeHandle]:
        """The pool's nodes found by tag, in these provider states (None: any state), by node index."""

    @abc.abstractmethod
    def terminate_sync(self, provider_id: str) -> None:
        """Ask the cloud to terminate one node (raises the cloud's NotFound error if it has none)."""

    @abc.abstractmethod
    def cleanup_sync(self, pool_id: str) -> list[str]:
        """Delete what `prepare_sync` made for `pool_id`; return what was deleted ("key pair X", …).
        Raises the cloud's error (classified DEPENDENCY) while something still uses a resource."""

    # ---- classification and calls ------------------------------------------------------------------

    def classify(self, exc: BaseException) -> ErrorKind:
        """The kind of `exc`: by the provider's code, else connection trouble is transient."""
        code = self.error_code(exc)
        if code is not None:
            kind = self.error_kinds.get(code)
            if kind is not None:
                return kind
            return ErrorKind.NOT_FOUND if code.endswith(".NotFound") else ErrorKind.FATAL
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return ErrorKind.TRANSIENT
        try:  # requests' connection errors are not OSErrors
            import requests

            if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
                return ErrorKind.TRANSIENT
        except ImportError:  # pragma: no cover - libcloud depends on requests
            pass
        return ErrorKind.FATAL

    def is_transient(self, exc: BaseException) -> bool:
        return self.classify(exc) is ErrorKind.TRANSIENT

    def refusal(self, exc: BaseException, kind: ErrorKind) -> ErrorKind:
        """`kind`, or REFUSED where the create call was answered with a refusal of what it asked for: a
        fatal (or not-found: a machine type or image the zone lacks) 4xx API answer other than 401/403
        (credentials and permissions stay fatal: no other offer of the same cloud would do better)."""
        status = exc.status if isinstance(exc, CloudAPIError) else None
        if kind in (ErrorKind.FATAL, ErrorKind.NOT_FOUND) and status is not None and 400 <= status < 500 \
                and status not in (401, 403):
            return ErrorKind.REFUSED
        return kind

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking call in a worker thread, retrying transient errors with the `retry` backoff."""
        delays = self.retry.delays()
        for attempt in range(len(delays) + 1):
            try:
                return await anyio.to_thread.run_sync(functools.partial(fn, *args))
            except Exception as exc:
                if attempt == len(delays) or not self.is_transient(exc):
                    raise
                log.info("%s: %s failed transiently (%s); retrying in %.1f s", self.name,
                         getattr(fn, "__name__", fn), exc, delays[attempt])
                await anyio.sleep(delays[attempt])
        raise AssertionError("unreachable")

    def _error(self, what: str, exc: BaseException, kind: ErrorKind, *, zones: Sequence[str] = (),
               cleaned: Sequence[str] = ()) -> ProvisionError:
        code = self.error_code(exc)
        if kind is ErrorKind.NOT_FOUND:  # something the request names does not exist: nothing to retry
            kind = ErrorKind.FATAL
        text = f"{self.name}: {what}: {exc}"
        if zones:
            text += f" (zones tried: {', '.join(zones)})"
        if cleaned:
            text += f"; cleaned up: {', '.join(cleaned)}"
        err = ProvisionError(text, code=code, kind=kind.value, zones_tried=zones, cleaned_up=cleaned)
        err.__cause__ = exc
        return err

    # ---- the phases ----------------------------------------------------------------------------------

    async def prepare(self, spec: ClusterSpec) -> None:
        """See `Provider.prepare`."""
        try:
            await self.call(self.prepare_sync, spec)
        except Exception as exc:
            cleaned = await self._shielded_cleanup(spec.pool_id)
            raise self._error("preparing the pool's shared resources failed", exc, self.classify(exc),
                              cleaned=cleaned) from exc

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """See `Provider.launch`: every zone in turn; capacity moves on, quota and fatal errors stop."""
        nodes = list(nodes)
        zones = self._in_order(await self.call(self.zones_sync, spec))
        if not zones:
            raise ProvisionError(f"{self.name}: no zone of this region offers the requested machine", kind="fatal")
        tried: list[str] = []
        failures: list[str] = []
        cleaned: list[str] = []
        last: Exception | None = None
        settled = False  # the nodes of a failed zone were already terminated
        try:
            for zone in zones:
                tried.append(zone)
                try:
                    if self.retries_launch:
                        handles = await anyio.to_thread.run_sync(functools.partial(self.launch_sync, spec, nodes, zone))
                    else:
                        handles = await self.call(self.launch_sync, spec, nodes, zone)
                    # a cancellation that arrived while the create call ran in its thread lands here, so
                    # that the nodes it made are terminated below instead of returned to nobody
                    await anyio.lowlevel.checkpoint()
                    return handles
                except Exception as exc:
                    kind = self.refusal(exc, self.classify(exc))
                    if kind is not ErrorKind.CAPACITY:
                        cleaned = await self._shielded_terminate_nodes(spec.pool_id, nodes)
                        settled = True
                        what = f"launching nodes {nodes} in {zone} failed"
                        if kind is ErrorKind.QUOTA:
                            what = f"quota {self.error_code(exc)} reached in {zone} (no other zone tried)"
                        elif kind is ErrorKind.REFUSED:
                            what = f"the cloud refused nodes {nodes} in {zone}"
                        raise self._error(what, exc, kind, zones=tried, cleaned=cleaned) from exc
                    log.warning("%s: no capacity in %s (%s); trying the next zone", self.name, zone, exc)
                    failures.append(f"{zone}: {exc}")
                    last = exc
                    # nodes this zone did create before it ran out must not stay behind (or be doubled)
                    cleaned += await self._shielded_terminate_nodes(spec.pool_id, nodes)
        except BaseException:
            if not settled:  # cancelled, or failed outside the classified path: by tag, shielded
                await self._shielded_terminate_nodes(spec.pool_id, nodes)
            raise
        assert last is not None
        raise self._error(f"no capacity for nodes {nodes} in any zone ({'; '.join(failures)})",
                          last, ErrorKind.CAPACITY, zones=tried, cleaned=cleaned) from last

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        """See `Provider.wait_running`: polls the pool's listing until the node runs with an address."""
        pool_id = handle.extra.get("pool_id", "")
        deadline = time.monotonic() + self.timeouts.running
        last_state = handle.state
        while True:
            found = {h.provider_id: h for h in await self._list_fresh(pool_id)}
            current = found.get(handle.provider_id)
            if current is not None:
                if current.state != last_state:
                    last_state = current.state
                    report(current.state)
                if current.state == "running" and current.private_addr:
                    return current
                if self.lifecycle_state(current.state) in ("terminating", "terminated", "failed"):
                    raise ProvisionError(f"{self.name}: node {handle.node} ({handle.provider_id}) went "
                                         f"{current.state} before it ran", node=handle.node, kind="fatal")
            elif not self._young(handle):
                raise ProvisionError(f"{self.name}: node {handle.node} ({handle.provider_id}) is not listed "
                                     f"by the cloud", node=handle.node, kind="fatal")
            if time.monotonic() > deadline:
                raise ProvisionError(f"{self.name}: node {handle.node} ({handle.provider_id}) not running after "
                                     f"{self.timeouts.running:.0f} s (last state {last_state or 'unknown'})",
                                     node=handle.node, kind="fatal")
            await anyio.sleep(self.timeouts.poll)

    async def machines_gone(self, handles: Sequence[NodeHandle]) -> dict[int, str]:
        """See `Provider.machines_gone`: one fresh listing per pool; a node whose instance is in a state
        that maps to terminating/terminated/failed, or that is no longer listed (past the visibility grace)."""
        gone: dict[int, str] = {}
        pools: dict[str, list[NodeHandle]] = {}
        for h in handles:
            if h.extra.get("pool_id"):
                pools.setdefault(str(h.extra["pool_id"]), []).append(h)
        for pool_id, hs in pools.items():
            states = {h.provider_id: h.state for h in await self._list_fresh(pool_id)}
            for h in hs:
                state = states.get(h.provider_id)
                if state is None and not self._young(h):
                    gone[h.node] = f"instance {h.provider_id} is no longer listed by {self.name}"
                elif state is not None and self.lifecycle_state(state) in ("terminating", "terminated", "failed"):
                    gone[h.node] = f"instance {h.provider_id} is {state}"
        return gone

    def avoiding(self, lost: Sequence[NodeHandle]) -> LibcloudProvider:
        """See `Provider.avoiding`: the zones the `lost` nodes were in are tried last by the new pool
        (after every other zone of the region that offers the machine)."""
        zones = {str(h.extra["zone"]) for h in lost if h.extra.get("zone")}
        if not zones:
            return self
        other = copy.copy(self)
        other.avoided_zones = tuple(sorted(set(self.avoided_zones) | zones))
        return other

    def avoid_in_place(self, lost: Sequence[NodeHandle]) -> None:
        """See `Provider.avoid_in_place`: a replacement for a node of this pool goes to the zone it was
        in only after every other zone of the region that offers the machine."""
        zones = {str(h.extra["zone"]) for h in lost if h.extra.get("zone")}
        if zones - set(self.avoided_zones):
            self.avoided_zones = tuple(sorted(set(self.avoided_zones) | zones))

    def _in_order(self, zones: list[str]) -> list[str]:
        """`zones` with the avoided ones (where a node was just lost) moved to the end."""
        if not self.avoided_zones:
            return zones
        last = [z for z in zones if z in self.avoided_zones]
        if last:
            log.info("%s: zones %s just lost a node: tried last", self.name, ", ".join(last))
        return [z for z in zones if z not in self.avoided_zones] + last

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        """See `Provider.terminate`: terminate, then re-list until none of them is pending or running."""
        if not handles:
            return
        by_id = {h.provider_id: h for h in handles}
        pending = set(by_id)
        deadline = time.monotonic() + self.timeouts.terminate
        accepted: set[str] = set()  # the cloud took the terminate call: absent from a listing now means gone
        while True:
            for provider_id in sorted(pending):
                try:
                    await self.call(self.terminate_sync, provider_id)
                    accepted.add(provider_id)
                except Exception as exc:  # NotFound: gone, or not visible yet: the listing decides
                    if self.classify(exc) is not ErrorKind.NOT_FOUND:
                        raise self._error(f"terminating {provider_id} failed", exc, self.classify(exc)) from exc
            states: dict[str, str] = {}
            for pool_id in {by_id[i].extra.get("pool_id", "") for i in pending}:
                states.update((h.provider_id, h.state) for h in await self._list_fresh(pool_id))
            pending = {i for i in pending if states.get(i) in ACTIVE_STATES
                       or (i not in states and i not in accepted and self._young(by_id[i]))}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ProvisionError(f"{self.name}: nodes {sorted(pending)} still not terminated after "
                                     f"{self.timeouts.terminate:.0f} s; run `skyhive down` again", kind="fatal")
            await anyio.sleep(self.timeouts.poll)

    async def cleanup(self, pool_id: str) -> None:
        """See `Provider.cleanup`: retried while dependencies linger, bounded by `timeouts.cleanup`."""
        await self._cleanup(pool_id)

    async def _cleanup(self, pool_id: str) -> list[str]:
        deadline = time.monotonic() + self.timeouts.cleanup
        deleted: list[str] = []
        while True:
            try:
                deleted += await self.call(self.cleanup_sync, pool_id)
                self._listings.pop(pool_id, None)
                self._listing_locks.pop(pool_id, None)
                return deleted
            except Exception as exc:
                kind = self.classify(exc)
                if kind is not ErrorKind.DEPENDENCY or time.monotonic() > deadline:
                    raise self._error("deleting the pool's shared resources failed", exc, kind,
                                      cleaned=deleted) from exc
                log.info("%s: pool %s: %s; retrying", self.name, pool_id, exc)
            await anyio.sleep(self.timeouts.poll)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        """See `Provider.list_owned`: by pool tag, nodes that are pending, running or stopped."""
        return await self.call(self.list_sync, pool_id, ACTIVE_STATES)

    async def create(self, spec: ClusterSpec) -> list[NodeHandle]:
        """See `Provider.create`; on any failure or cancellation everything tagged with the pool is
        destroyed (found by tag, so a node whose handle never came back is not forgotten), shielded. The
        pool is planned first, as a pool's start does: what the cloud does not sell is refused before any call."""
        self.plan(spec)
        try:
            await self.prepare(spec)
            handles = await self.launch(spec, range(spec.nodes))
            return [await self.wait_running(h, lambda _state: None) for h in handles]
        except BaseException as failure:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeouts.terminate + self.timeouts.cleanup):
                try:
                    cleaned = (await self._down(spec.pool_id))[1]
                except Exception as exc:
                    log.error("%s: pool %s: cleaning up after a failed start failed: %s", self.name, spec.pool_id, exc)
                    cleaned = [f"nothing: cleaning up failed ({exc}); run `skyhive down {spec.pool_id}`"]
                if isinstance(failure, ProvisionError) and cleaned:
                    failure.cleaned_up += tuple(cleaned)
                    failure.add_note(f"cleaned up: {', '.join(cleaned)}")
            raise

    async def down(self, pool_id: str) -> list[NodeHandle]:
        """See `Provider.down`: nodes by tag terminated and confirmed gone, then `prepare`'s resources."""
        return (await self._down(pool_id))[0]

    async def _down(self, pool_id: str) -> tuple[list[NodeHandle], list[str]]:
        """`down`, also saying what it removed."""
        owned = await self.list_owned(pool_id)
        if owned:
            await self.terminate(owned)
        return owned, [f"instance {h.provider_id}" for h in owned] + await self._cleanup(pool_id)

    # ---- helpers -------------------------------------------------------------------------------------

    async def _list_fresh(self, pool_id: str) -> list[NodeHandle]:
        """The pool's nodes in any state, from a listing that began after this call did. Concurrent
        callers (every node of a pool waiting to run, or to be gone) share one listing instead of
        making one API call each."""
        asked = time.monotonic()
        lock = self._listing_locks.setdefault(pool_id, anyio.Lock())
        async with lock:
            cached = self._listings.get(pool_id)
            if cached is not None and cached[0] >= asked:
                return cached[1]
            began = time.monotonic()
            nodes = await self.call(self.list_sync, pool_id, None)
            self._listings[pool_id] = (began, nodes)
            return nodes

    def _young(self, handle: NodeHandle) -> bool:
        launched = handle.extra.get("launched_at")
        return isinstance(launched, (int, float)) and time.time() - launched < self.timeouts.visibility_grace

    async def _shielded_terminate_nodes(self, pool_id: str, nodes: Sequence[int]) -> list[str]:
        """Terminate this pool's nodes with these indices (found by tag), shielded; what was terminated."""
        with anyio.CancelScope(shield=True):
            try:
                owned = [h for h in await self.list_owned(pool_id) if h.node in set(nodes)]
                await self.terminate(owned)
                return [f"instance {h.provider_id}" for h in owned]
            except Exception as exc:
                log.error("%s: pool %s: terminating nodes %s after a failed launch failed: %s",
                          self.name, pool_id, list(nodes), exc)
                return []

    async def _shielded_cleanup(self, pool_id: str) -> list[str]:
        with anyio.CancelScope(shield=True):
            try:
                return await self._cleanup(pool_id)
            except Exception as exc:
                log.error("%s: pool %s: cleanup failed: %s", self.name, pool_id, exc)
                return []
