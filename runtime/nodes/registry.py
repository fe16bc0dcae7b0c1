"""Which transport serves a node: a registry keyed by the node's reach kind (`Reach.kind`).

A provider says how a node is reached with a `Reach` (`LocalReach`, `SSHReach`, or its own); the node
actor looks the reach's `kind` up here to make the node's `Transport` and to bootstrap the node. So a
new kind of node (a Slurm allocation, a simulated node) is a reach class, a transport and one
declaration, with no edit of the runtime. Other packages' kinds are found through the entry-point
group `skyhive.transports` (skyhive declares its own there too, but finds them by name, `_BUILT_IN`,
without reading every installed package's metadata): the entry point's name is the kind, its object a
`NodeKind` (or a bare factory), loaded when a node of that kind first appears:

    [project.entry-points."skyhive.transports"]
    mykind = "mypackage.kind:KIND"       # KIND = NodeKind("mykind", "mypackage.transport:factory")

`register_transport(kind, factory, bootstrap=...)` does the same in code (a test, a program that
defines its kind inline); a registration in code wins over an entry point of the same name.
`factory(handle, ctx)` returns a `Transport` for the node (`ctx` is the node's `NodeContext`);
`bootstrap(ctx, node, transport)` prepares the node's environment and returns a `Prepared`: the detail
recorded with the node's `ready` event ("cached", "built in 3.1 s", or "") and the `NodeEnv` handed to the
transport (`Transport.use_env`); an older bootstrap may return the detail alone. Without a bootstrap the
node is taken as ready to run workers. Factories may be given as "module:attribute" strings, imported on first use (so
declaring "ssh" does not import asyncssh).

A kind is declared once, as a `NodeKind` (`TransportKind` is its older name, kept for the packages that
use it): the reach kind, the transport factory, the bootstrap (skyhive's own, `BOOTSTRAP_OVER_SHELL`,
prepares any node over the transport's `Shell`), and whether its nodes share this machine's Python and
files (`same_machine`: what a plugin or `skyhive launch` asks instead of "is this Local?").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ...providers.base import NodeHandle, ProvisionError

if TYPE_CHECKING:
    from .context import NodeContext
    from .shell import Prepared
    from .transport import Transport

log = logging.getLogger("skyhive.transport")

__all__ = ["NodeKind", "TransportKind", "TransportFactory", "Bootstrap", "register_transport",
           "unregister_transport", "transport_kind", "node_kind", "kinds", "BOOTSTRAP_OVER_SHELL",
           "ENTRY_POINT_GROUP"]

TransportFactory = Callable[[NodeHandle, "NodeContext"], "Transport"]
#: `bootstrap(ctx, node, transport)`: a `Prepared` (the `ready` detail and the workers' `NodeEnv`), or
#: the detail alone (a bootstrap that sets its transport up itself)
Bootstrap = Callable[["NodeContext", int, "Transport"], Awaitable["Prepared | str"]]

#: Entry-point group through which other packages add reach kinds.
ENTRY_POINT_GROUP = "skyhive.transports"

#: skyhive's bootstrap, for any kind whose transport has a `Shell` (`Transport.shell()`): the Image's
#: environment built on the node over it (runtime wheels, venv, pip, env, setup; cached by content), or —
#: for a node that shares this machine's Python (`Shell.same_machine`) — checked or built here. A kind
#: declares it by this name; the SDK does not know the bootstrap (it sits above, `runtime/bootstrap/`):
#: the pool that bootstraps a node hands it in (`NodeKind.bootstrap_node(..., over_shell=...)`).
BOOTSTRAP_OVER_SHELL = "over-shell"


@dataclass(frozen=True, slots=True)
class NodeKind:
    """One kind of node, declared once: how its nodes are reached (`kind`, the `Reach.kind` of its
    provider's handles), the transport factory, the bootstrap (None: nodes are ready as they come), and
    whether its nodes share this machine's Python and files (`same_machine`: Local; never a remote host)."""

    kind: str
    factory: TransportFactory | str
    bootstrap: Bootstrap | str | None = None
    same_machine: bool = False
    # how the kind's nodes are kept and found again (a named pool): a `nodes.keep.KeepSupport`, or
    # "module:attr" naming one; None: its pools cannot be kept
    keep: Any = None

    def make_transport(self, handle: NodeHandle, ctx: NodeContext) -> Transport:
        """The transport for `handle`'s node."""
        return _resolve(self.factory, self.kind)(handle, ctx)  # type: ignore[no-any-return]

    async def bootstrap_node(self, ctx: NodeContext, node: int, transport: Transport, *,
                             over_shell: Bootstrap | None = None) -> str:
        """Prepare the node's environment, hand it to the transport (`Transport.use_env`); the detail
        for its `ready` event. `over_shell`: skyhive's bootstrap, for a kind that declares
        `BOOTSTRAP_OVER_SHELL` (the caller's: this SDK does not import it)."""
        if self.bootstrap is None:
            return ""
        if self.bootstrap == BOOTSTRAP_OVER_SHELL:
            if over_shell is None:
                raise ProvisionError(f"node {node}: kind {self.kind!r} is bootstrapped over its shell, and no "
                                     "bootstrap was handed in (NodeKind.bootstrap_node(..., over_shell=...))", node=node)
            run: Bootstrap = over_shell
        else:
            run = _resolve(self.bootstrap, self.kind)
        done = await run(ctx, node, transport)
        if isinstance(done, str):  # a bootstrap that set its transport up itself
            return done
        if done.env is not None:
            await transport.use_env(done.env)
        return str(done.detail)


#: The older name of `NodeKind` (packages declare their kinds with it).
TransportKind = NodeKind

_KINDS: dict[str, NodeKind] = {}
_entry_points_loaded = False
#: skyhive's own kinds (also declared as its entry points, for `kinds()`): found by name without
#: reading every installed package's metadata (importing importlib.metadata and scanning ~300
#: distributions' entry points was ~30-60 ms of every pool's start on a machine with many packages)
_BUILT_IN = {
    "local": "skyhive.runtime.kinds.local:KIND",
    "local_detached": "skyhive.runtime.kinds.local:DETACHED",
    "ssh": "skyhive.runtime.kinds.ssh:KIND",
    "slurm": "skyhive.runtime.kinds.slurm:KIND",
    "simulated": "skyhive.runtime.kinds.simulated:KIND",
    "kubernetes": "skyhive.runtime.kinds.kubernetes:KIND",
}


def register_transport(kind: str, factory: TransportFactory | str, *,
                       bootstrap: Bootstrap | str | None = None, same_machine: bool = False,
                       keep: Any = None) -> NodeKind:
    """Serve nodes whose reach has `kind` with `factory` (and `bootstrap`). Registering a kind again
    replaces it (the last registration wins). Returns the registered entry."""
    if not kind or not isinstance(kind, str):
        raise ValueError(f"register_transport: kind must be a non-empty string, not {kind!r}")
    entry = NodeKind(kind, factory, bootstrap, same_machine, keep)
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


def node_kind(kind: str) -> NodeKind | None:
    """The declaration of reach kind `kind` (registered in code, else one of skyhive's own, else from its
    entry point), or None."""
    entry = _KINDS.get(kind)
    if entry is None and kind in _BUILT_IN:
        entry = _KINDS[kind] = _resolve(_BUILT_IN[kind], kind)
    if entry is None:
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP, name=kind):
            _load(ep)
        entry = _KINDS.get(kind)
    return entry


def transport_kind(handle: NodeHandle) -> NodeKind:
    """The registered entry for `handle.reach.kind`; raises `ProvisionError` naming the node if none."""
    kind = type(handle.reach).kind
    entry = node_kind(kind)
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
    from importlib.metadata import entry_points

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
    if isinstance(obj, NodeKind):
        _KINDS[ep.name] = dataclasses.replace(obj, kind=ep.name)
    elif callable(obj):
        _KINDS[ep.name] = NodeKind(ep.name, obj)
    else:
        log.warning("entry point %s (group %s) is neither a NodeKind nor a factory", ep.name, ENTRY_POINT_GROUP)
