"""Fallback across providers and regions: `Pool(provider=[sky.AWS(region="us-east-1"), sky.AWS(region="us-west-2")])`.

The phases are declared in `providers.base.Provider`. `Fallback` tries its providers in order: each
one's `plan`, `prepare` and `launch`; a failure whose kind is "capacity", "quota", "unavailable" or
"refused" (every zone full, an account limit, an accelerator the region lacks, a machine or image the
cloud refused there) cleans up what that provider prepared and moves on, logging why; any other failure
(credentials, a cancelled launch) stops. The provider that launched the nodes serves them from then on. Which one was
used and why each earlier one was skipped is logged, reported as the first node state of every node
(so it lands in the pool's event log), and kept in `skipped`.

With ``order="price"`` (Skyward's ``selection="cheapest"``) the candidates are tried cheapest first: each
one's `plan` prices the pool's machine from the shipped tables (the spot price for a spot pool, where a
table has one); a candidate that cannot plan the pool, or whose price is unknown, goes last.

`skyhive down` rebuilds every candidate from the log and asks each for what it holds by tag, so a
client killed in the middle of a fallback leaves nothing behind in any region.

A managed job's recovery (`avoiding`): every node is marked with the candidate that launched it
(`NodeHandle.extra["fallback_member"]`: its cloud and region); after a loss, that candidate is tried
last — the job never goes straight back to the region that just preempted it — and itself avoids the
lost zones. `machines_gone` asks each node's own candidate.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import anyio

from .features import Feature, Features
from .base import ClusterSpec, NodeHandle, Provider, ProvisionError

__all__ = ["Fallback"]

log = logging.getLogger(__name__)

#: ProvisionError kinds after which the next provider is tried ("unavailable": nothing in that region
#: satisfies the pool, e.g. an accelerator it does not offer; "refused": the cloud refused this offer
#: itself — a machine, image or disk it will not create there — which says nothing about the next offer).
MOVE_ON = frozenset({"capacity", "quota", "unavailable", "refused"})

#: `NodeHandle.extra` key: the label ("aws us-east-1") of the candidate that launched the node
MEMBER = "fallback_member"

#: how candidates are ordered: as given, or by the price of the machine each plans for the pool
ORDERS = {"given": "given", "first": "given", "price": "price", "cheapest": "price"}  # Skyward: first/cheapest


def _price(plan: Mapping[str, Any], spot: bool) -> float:
    """A plan's hourly price per node (spot when asked and known); unknown or failed plans last."""
    price = plan.get("spot_price_per_hour") if spot else None
    if not isinstance(price, (int, float)):
        price = plan.get("price_per_hour")
    return float(price) if isinstance(price, (int, float)) and "error" not in plan else math.inf


class Fallback(Provider):
    """Several providers tried in order (see the module docstring)."""

    name: ClassVar[str] = "fallback"
    #: (see `Provider.features`; an instance's are its candidates', `__init__`)
    features: ClassVar[Features] = Features(cannot={
        Feature.KEEP: "a pool tried on several providers in turn is not kept; name the one provider to keep it on"})

    def __init__(self, providers: Sequence[Provider], order: str = "given") -> None:
        if order not in ORDERS:
            raise ValueError(f"Fallback(order={order!r}): expected one of {', '.join(sorted(ORDERS))}")
        self.order = ORDERS[order]
        providers = list(providers)
        if not providers or not all(isinstance(p, Provider) for p in providers):
            raise TypeError(f"Fallback needs a non-empty list of skyhive providers, got {providers!r}")
        self.providers = providers
        self.chosen: Provider | None = None
        self.skipped: list[str] = []  # "aws us-east-1: capacity: ..." for each provider passed over
        self.connect_retry = max(p.connect_retry for p in providers)  # type: ignore[misc]
        # what every member chooses by (a member that cannot would otherwise be asked in vain)
        self.chooses = frozenset.intersection(*(p.chooses for p in providers))  # type: ignore[misc]
        # machines made to order when any candidate makes them; the nodes watch a cloud's interruption
        # notice when every candidate agrees on it
        notices = {p.features.notices for p in providers}
        self.features = type(self).features.replace(  # type: ignore[misc]
            offer=[Feature.CREATES_MACHINES] if any(Feature.CREATES_MACHINES in p.features for p in providers) else [],
            notices=notices.pop() if len(notices) == 1 else "")
        #: labels of candidates that just lost nodes: tried last, the most recent loss at the very end
        self.tried_last: tuple[str, ...] = ()

    def candidates(self) -> Sequence[Provider]:
        return self.providers

    def __repr__(self) -> str:
        return f"<Fallback {self.providers!r} chosen={self.chosen!r}>"

    # ---- describing ------------------------------------------------------------------------------------

    @property
    def max_nodes(self) -> int:
        """The most of any provider it tries (a pool is made by one of them)."""
        return max(p.max_nodes for p in self.providers)

    def describe(self) -> dict[str, Any]:
        return {"provider": self.name, "providers": [p.describe() for p in self.providers], "order": self.order}

    @classmethod
    def from_description(cls, desc: Mapping[str, Any]) -> Provider:
        from .registry import from_description

        return cls([from_description(d) for d in desc.get("providers") or []], order=desc.get("order") or "given")

    def _plans(self, spec: ClusterSpec) -> list[tuple[Provider, dict[str, Any]]]:
        """Each candidate with its plan (or {"error": why}), in the order they will be tried."""
        plans: list[tuple[Provider, dict[str, Any]]] = []
        for p in self.providers:
            try:
                plans.append((p, dict(p.plan(spec))))
            except ProvisionError as exc:
                plans.append((p, {"error": str(exc), "cloud": p.name, "region": p.describe().get("region")}))
        if self.order == "price":
            plans.sort(key=lambda pp: _price(pp[1], bool(spec.spot)))  # stable: ties keep the given order
        return plans

    def plan(self, spec: ClusterSpec) -> Mapping[str, Any]:
        """The first candidate's plan that can be made, with every candidate's plan or why not (in the
        order they will be tried: by price with ``order="price"``)."""
        plans = [plan for _, plan in self._plans(spec)]
        first = next((p for p in plans if "error" not in p), plans[0])
        return {**first, "candidates": plans, "order": self.order}

    def _label(self, provider: Provider) -> str:
        desc = provider.describe()
        return " ".join(str(x) for x in (provider.name, desc.get("region") or "") if x)

    # ---- the phases ------------------------------------------------------------------------------------

    async def prepare(self, spec: ClusterSpec) -> None:
        """Nothing yet: each candidate prepares when its turn to launch comes (see `launch`)."""

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        """See `Provider.launch`: the chosen provider if there is one, else each candidate in order."""
        if self.chosen is not None:
            return await self.chosen.launch(spec, nodes)
        errors: list[ProvisionError] = []
        ordered = [p for p, _ in self._plans(spec)] if self.order == "price" else list(self.providers)
        if self.tried_last:  # (stable: the others first, in their order)
            last = {label: i for i, label in enumerate(self.tried_last)}
            ordered.sort(key=lambda p: last.get(self._label(p), -1))
            log.info("pool %s: %s just lost a node: tried last", spec.pool_id, ", ".join(self.tried_last))
        for provider in ordered:
            try:
                provider.plan(spec)
                await provider.prepare(spec)
                handles = await provider.launch(spec, nodes)
            except ProvisionError as exc:
                if exc.kind not in MOVE_ON:
                    await self._shielded_cleanup(provider, spec.pool_id)
                    raise
                reason = f"{self._label(provider)}: {exc.kind or 'unavailable'}: {str(exc).splitlines()[0]}"
                log.warning("pool %s: skipping %s", spec.pool_id, reason)
                self.skipped.append(reason)
                errors.append(exc)
                await self._shielded_cleanup(provider, spec.pool_id)
                continue
            self.chosen = provider
            log.info("pool %s: using %s", spec.pool_id, self._label(provider))
            return handles
        raise ProvisionError(f"no provider could launch nodes {list(nodes)}: " + "; ".join(self.skipped),
                             kind=errors[-1].kind if errors else None, code=errors[-1].code if errors else None)

    async def wait_running(self, handle: NodeHandle, report: Callable[[str], None]) -> NodeHandle:
        chosen = self._require()
        if self.skipped:  # recorded in the pool's log as the node's first provider state
            report(f"using {self._label(chosen)} (skipped {'; '.join(self.skipped)})")
        running = await chosen.wait_running(handle, report)
        return dataclasses.replace(running, extra={**running.extra, MEMBER: self._label(chosen)})

    async def node_problem(self, handle: NodeHandle) -> str | None:
        return await self.chosen.node_problem(handle) if self.chosen is not None else None

    async def bootstrapped(self, handle: NodeHandle) -> None:
        await self._require().bootstrapped(handle)

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        for provider in [self.chosen] if self.chosen else self.providers:  # unknown owner: ask each
            await provider.terminate(handles)  # (a node another provider does not know is gone for it)

    async def cleanup(self, pool_id: str) -> None:
        for provider in self.providers:
            await provider.cleanup(pool_id)

    async def list_owned(self, pool_id: str) -> list[NodeHandle]:
        owned: list[NodeHandle] = []
        for provider in self.providers:
            owned += await provider.list_owned(pool_id)
        return owned

    async def down(self, pool_id: str) -> list[NodeHandle]:
        """Every candidate's `down`: each finds its own nodes by tag."""
        found: list[NodeHandle] = []
        for provider in self.providers:
            found += await provider.down(pool_id)
        return found

    # ---- a managed job's recovery ------------------------------------------------------------------------

    def _mine(self, provider: Provider, handles: Sequence[NodeHandle]) -> list[NodeHandle]:
        label = self._label(provider)
        return [h for h in handles if h.extra.get(MEMBER) == label]

    async def machines_gone(self, handles: Sequence[NodeHandle]) -> dict[int, str]:
        """See `Provider.machines_gone`: each node asked of the candidate that launched it."""
        gone: dict[int, str] = {}
        for provider in self.providers:
            mine = self._mine(provider, handles)
            if mine:
                gone.update(await provider.machines_gone(mine))
        return gone

    def avoiding(self, lost: Sequence[NodeHandle]) -> Fallback:
        """See `Provider.avoiding`: the candidates that launched the `lost` nodes are tried last (the one
        that lost a node most recently at the very end), each itself avoiding the places lost (a cloud's
        zones); a fresh fallback, nothing chosen yet."""
        labels = [str(h.extra[MEMBER]) for h in lost if h.extra.get(MEMBER)]
        if not labels:
            return self
        tried: list[str] = []
        for label in [*self.tried_last, *labels]:  # in order of loss: a label lost again moves to the end
            if label in tried:
                tried.remove(label)
            tried.append(label)
        other = Fallback([p.avoiding(mine) if (mine := self._mine(p, lost)) else p for p in self.providers],
                         order=self.order)
        other.tried_last = tuple(tried)
        return other

    async def sweep_lost(self, pool_id: str, lost: Sequence[NodeHandle]) -> None:
        """See `Provider.sweep_lost`: each node's candidate sweeps its own."""
        for provider in self.providers:
            mine = self._mine(provider, lost)
            if mine:
                await provider.sweep_lost(pool_id, mine)

    def avoid_in_place(self, lost: Sequence[NodeHandle]) -> None:
        """See `Provider.avoid_in_place`: the pool's nodes stay with the candidate it chose (one cloud and
        region for a gang), which tries the lost places last."""
        for provider in ([self.chosen] if self.chosen is not None else self.providers):
            mine = self._mine(provider, lost)
            if mine:
                provider.avoid_in_place(mine)

    def released(self, pool_id: str, handles: Sequence[NodeHandle]) -> None:
        """See `Provider.released`: told to the candidate each node came from."""
        for provider in ([self.chosen] if self.chosen is not None else self.providers):
            mine = self._mine(provider, handles)
            if mine:
                provider.released(pool_id, mine)

    # ---- policy ----------------------------------------------------------------------------------------

    def is_transient(self, exc: BaseException) -> bool:
        return any(p.is_transient(exc) for p in ([self.chosen] if self.chosen else self.providers))

    def lifecycle_state(self, provider_state: str) -> str | None:
        return (self.chosen or self.providers[0]).lifecycle_state(provider_state)

    def head_port(self, spec: ClusterSpec) -> int:
        return (self.chosen or self.providers[0]).head_port(spec)

    # ---- helpers ---------------------------------------------------------------------------------------

    def _require(self) -> Provider:
        if self.chosen is None:
            raise ProvisionError("fallback: no provider has launched nodes yet")
        return self.chosen

    async def _shielded_cleanup(self, provider: Provider, pool_id: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await provider.down(pool_id)
            except Exception as exc:
                log.error("pool %s: cleaning up %s failed: %s", pool_id, self._label(provider), exc)

