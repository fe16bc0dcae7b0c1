"""`providers.delegating.Delegating`, the base of every provider that wraps another (a Spec's candidate, a
named pool's provider): every operation of `Provider` reaches the wrapped one — a method added to
`Provider` and not forwarded here would make each wrapper silently take `Provider`'s default ("stop is
not offered", "no volumes")."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from skyhive.providers.base import ClusterSpec, LocalReach, NodeHandle, Provider
from skyhive.providers.delegating import Delegating
from skyhive.providers.features import Feature, Features
from skyhive.runtime.clusters.kept import KeptProvider
from skyhive.runtime.nodes.keep import KeepContext
from skyhive.runtime.spec import SpecProvider

#: `Provider`'s compositions of its own phases (they call the wrapper's forwarded phases) and its
#: class-level constructors: nothing to forward.
_NOT_FORWARDED = {"create", "destroy", "candidates", "check", "infra", "from_description"}


def _operations() -> list[str]:
    names = []
    for name, value in vars(Provider).items():
        if name.startswith("_") or name in _NOT_FORWARDED:
            continue
        if callable(value) or isinstance(value, property):
            names.append(name)
    return sorted(names)


def test_every_operation_of_provider_is_forwarded() -> None:
    missing = [name for name in _operations() if name not in vars(Delegating)]
    assert not missing, f"Delegating takes Provider's default for {missing}: forward them to `inner`"


class _Recording(Provider):
    """A provider that answers each operation with a value naming it, and records the requests it got."""

    name = "recording"
    features = Features(Feature.KEEP, Feature.STOP)

    def __init__(self) -> None:
        self.specs: list[ClusterSpec] = []
        self.calls: list[str] = []

    def plan(self, spec: ClusterSpec) -> Mapping[str, Any]:
        self.specs.append(spec)
        return {"summary": "planned"}

    async def prepare(self, spec: ClusterSpec) -> None:
        self.specs.append(spec)

    async def launch(self, spec: ClusterSpec, nodes: Sequence[int]) -> list[NodeHandle]:
        self.specs.append(spec)
        return [NodeHandle(node=n, provider_id=f"m{n}", private_addr="127.0.0.1", reach=LocalReach()) for n in nodes]

    def head_port(self, spec: ClusterSpec) -> int:
        self.specs.append(spec)
        return 1234

    async def terminate(self, handles: Sequence[NodeHandle]) -> None:
        self.calls.append("terminate")

    async def stop_nodes(self, ids: Sequence[str]) -> None:
        self.calls.append(f"stop {list(ids)}")

    async def node_states(self, ids: Sequence[str]) -> dict[str, str]:
        return {i: "stopped" for i in ids}

    def find_volume(self, name: str) -> Any:
        return f"volume {name}"

    def avoiding(self, lost: Sequence[NodeHandle]) -> Provider:
        self.calls.append("avoiding")
        return self


def _wrappers(inner: _Recording) -> list[tuple[str, Delegating]]:
    return [("SpecProvider", SpecProvider(inner, {"accelerator": "L4"})),
            ("KeptProvider", KeptProvider(inner, KeepContext(pool="p", socket_dir="/nonexistent", cluster="c-p-0")))]


@pytest.mark.parametrize("which", ["SpecProvider", "KeptProvider"])
def test_a_wrapper_offers_what_its_provider_offers(which: str) -> None:
    inner = _Recording()
    wrapper = dict(_wrappers(inner))[which]
    assert wrapper.name == "recording"
    assert Feature.STOP in wrapper.features
    assert asyncio.run(wrapper.node_states(["m0"])) == {"m0": "stopped"}
    asyncio.run(wrapper.stop_nodes(["m0"]))
    assert inner.calls == ["stop ['m0']"]
    assert wrapper.find_volume("data") == "volume data"
    wrapper.shutdown_behavior = "stop"
    assert inner.shutdown_behavior == "stop"
    again = wrapper.avoiding([])
    assert type(again) is type(wrapper) and again.inner is inner


def test_a_spec_candidate_puts_its_fields_in_every_request() -> None:
    inner = _Recording()
    wrapper = SpecProvider(inner, {"accelerator": "L4", "spot": True})
    spec = ClusterSpec(pool_id="p-1", nodes=2)
    wrapper.plan(spec)
    asyncio.run(wrapper.prepare(spec))
    handles = asyncio.run(wrapper.launch(spec, [0, 1]))
    assert wrapper.head_port(spec) == 1234
    assert [h.node for h in handles] == [0, 1]
    assert [(s.accelerator, s.spot) for s in inner.specs] == [("L4", True)] * 4


def test_forwarded_signatures_match_provider() -> None:
    for name in _operations():
        ours, theirs = vars(Delegating)[name], vars(Provider)[name]
        if isinstance(theirs, property):
            continue
        assert isinstance(ours, Callable)  # type: ignore[arg-type]
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters), name
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), name
