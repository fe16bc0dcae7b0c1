"""Which transport serves a node: a registry keyed by the node's reach kind (`Reach.kind`).

A provider says how a node is reached with a `Reach` (`LocalReach`, `SSHReach`, or its own); the node
actor looks the reach's `kind` up here to make the node's `Transport` and to bootstrap the node. So a
new kind of node (a Slurm allocation, a simulated node) is a reach class, a transport and one
declaration, with no edit of the runtime. Every kind — the built-in ones in `runtime/kinds/<kind>/`
too — is found through the entry-point group `skyhive.transports`: the entry point's name is the kind,
its object a `TransportKind` (or a bare factory), loaded when a node of that kind first appears:

    [project.entry-points."skyhive.transports"]
    mykind = "mypackage.kind:KIND"       # KIND = TransportKind("mykind", "mypackage.transport:factory")

`register_transport(kind, factory, bootstrap=...)` does the same in code (a test, a program that
defines its kind inline); a registration in code wins over an entry point of the same name.
`factory(handle, ctx)` returns a `Transport` for the node (`ctx` is the node's `NodeContext`);
`bootstrap(ctx, node, transport)` prepares the node's environment and returns the detail recorded with
the node's `ready` event ("cached", "built in 3.1 s", or ""). Without a bootstrap the node is taken as
ready to run workers. Factories may be given as "module:attribute" strings, imported on first use (so
declaring "ssh" does not import asyncssh).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ...providers.base import NodeHandle, ProvisionError

if TYPE_CHECKING:
    from .context import NodeContext
    from .transport import Transport

log = logging.getLogger("skyhive.transport")

__all__ = ["TransportKind", "TransportFactory", "Bootstrap", "register_transport", "unregister_transport",
           "transport_kind", "kind_named", "kinds",
           "ENTRY_POINT_GROUP"]

TransportFactory = Callable[[NodeHandle, "NodeContext"], "Transport"]
Bootstrap = Callable[["NodeContext", int, "Transport"], Awaitable[str]]

#: Entry-point group through which other packages add reach kinds.
ENTRY_POINT_GROUP = "skyhive.transports"


@dataclass(frozen=True, slots=True)
class TransportKind:
    """How nodes of one reach kind are served: a transport factory and, optionally, a bootstrap."""

    kind: str
    factory: TransportFactory | str
    bootstrap: Bootstrap | str | None = None
    # how the kind's nodes are kept and found again (a named pool): a `nodes.keep.KeepSupport`, or
    # "module:attr" naming one; None: its pools cannot be kept
    keep: Any = None

    def make_transport(self, handle: NodeHandle, ctx: NodeContext) -> Transport:
        """The transport for `handle`'s node."""
        return _resolve(self.factory, self.kind)(handle, ctx)  # type: ignore[no-any-return]

    async def bootstrap_node(self, ctx: NodeContext, node: int, transport: Transport) -> str:
        """Prepare the node's environment; the detail for its `ready` event."""
        if self.bootstrap is None:
            return ""
        return await _resolve(self.bootstrap, self.kind)(ctx, node, transport)  # type: ignore[no-any-return]


_KINDS: dict[str, TransportKind] = {}
_entry_points_loaded = False


def register_transport(kind: str, factory: TransportFactory | str, *,
                       bootstrap: Bootstrap | str | None = None, keep: Any = None) -> TransportKind:
    """Serve nodes whose reach has `kind` with `factory` (and `bootstrap`). Registering a kind again
    replaces it (the last registration wins). Returns the registered entry."""
    if not kind or not isinstance(kind, str):
        raise ValueError(f"register_transport: kind must be a non-empty string, not {kind!r}")
    entry = TransportKind(kind, factory, bootstrap, keep)
    _KINDS[kind] = entry
    return entry


def unregister_transport(kind: str) -> None:
    """Forget `kind` (a test or a plugin that registered it for a while). Unknown kinds are ignored."""
    _KINDS.pop(kind, None)


def kinds() -> list[str]:
    """The reach kinds registered so far (entry points included; a built-in kind registers when its
    module is first imported)."""
    _load_entry_points()
    return sorted(_KINDS)


def kind_named(kind: str) -> TransportKind | None:
    """The registered entry for reach kind `kind` (its entry point loaded when needed), or None."""
    entry = _KINDS.get(kind)
    if entry is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=kind):
            _load(ep)
        entry = _KINDS.get(kind)
    return entry


def transport_kind(handle: NodeHandle) -> TransportKind:
    """The registered entry for `handle.reach.kind`; raises `ProvisionError` naming the node if none."""
    kind = type(handle.reach).kind
    entry = kind_named(kind)
    if entry is None:
        raise ProvisionError(
            f"node {handle.node}: no transport is registered for reach kind {kind!r} "
            f"({type(handle.reach).__name__}); registered: {', '.join(kinds()) or 'none'}. "
            "Call skyhive.runtime.nodes.registry.register_transport(kind, factory).", node=handle.node)
    return entry


def _resolve(target: Any, kind: str) -> Any:
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    try:
        return getattr(import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ProvisionError(f"the transport for reach kind {kind!r} ({target}) cannot be loaded: {exc}") from exc


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _load(ep)


def _load(ep: Any) -> None:
    """Register the kind of entry point `ep` (unless code registered it already); a broken one is logged."""
    if ep.name in _KINDS:
        return  # registered in code: that wins
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken plugin package must not break other kinds
        log.warning("entry point %s = %s (group %s) failed to load: %s", ep.name, ep.value, ENTRY_POINT_GROUP, exc)
        return
    if isinstance(obj, TransportKind):
        _KINDS[ep.name] = TransportKind(ep.name, obj.factory, obj.bootstrap, obj.keep)
    elif callable(obj):
        _KINDS[ep.name] = TransportKind(ep.name, obj)
    else:
        log.warning("entry point %s (group %s) is neither a TransportKind nor a factory", ep.name, ENTRY_POINT_GROUP)
