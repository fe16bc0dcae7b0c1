"""What a provider can do, declared in one place: `Provider.features`, a `Features` value.

Each provider class says what it offers and, for what it cannot do that a user may ask of it, why (the
reason is the error that refuses it), as SkyPilot's clouds declare their unsupported features with a
reason each:

    class Slurm(Provider):
        features = Features(cannot={Feature.KEEP: "a Slurm allocation ends with the client's job ..."})

    class AWS(EC2Access, LibcloudProvider):
        features = Features(Feature.KEEP, Feature.CREATES_MACHINES, Feature.STOP, Feature.OPEN_PORTS,
                            Feature.CHECK, notices="aws")

Code that needs a capability asks the declaration (`Feature.STOP in provider.features`,
`provider.features.why_not(Feature.KEEP, provider.name)`), never the provider's name. The names this
declaration replaced (`unsupported`, `can_stop`, `opens_ports`, `fixed_machines`, `bulk_teardown`,
`node_homes`, `same_machine`, `interruption_notices`) are still read from a provider (derived from its
features), and a subclass that still sets one of them as a class attribute has it folded into its
features (`fold_legacy`, run by `Provider.__init_subclass__`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Feature", "Features", "fold_legacy", "LEGACY"]


class Feature(enum.Enum):
    """One thing a provider may offer; the value is its name in `Provider.unsupported`."""

    #: a pool kept past its client (`Pool(name=..., keep=True)`, `skyhive launch -c`); its nodes are then
    #: kept by the keep support their kind declares (`runtime/nodes/keep.py`)
    KEEP = "keep"
    #: its machines are made to order (a cloud: a kept pool records them, `down` terminates them); without
    #: it the machines exist already (this machine, your hosts, a Slurm cluster)
    CREATES_MACHINES = "creates_machines"
    #: stop a pool's machines, disks kept, and start the same ones again (`stop_nodes`, `start_nodes`,
    #: `node_states`, `set_shutdown_behavior`): `skyhive stop`/`start`, autostop of a cloud pool
    STOP = "stop"
    #: open a pool's `resources.ports` on its firewall for the client's address (`open_ports`)
    OPEN_PORTS = "open_ports"
    #: letting go of its nodes costs no round trip per node (they live in this process): one `terminate`
    #: for all of them (`runtime/actors/teardown.py`)
    BULK_TEARDOWN = "bulk_teardown"
    #: the nodes share the user's own machine: a task file's steps give each node a home of its own
    NODE_HOMES = "node_homes"
    #: the nodes are this machine, with its Python, files and devices (Local)
    SAME_MACHINE = "same_machine"
    #: it runs on the hosts the user names (`skyhive launch --provider NAME --hosts ...`, `hosts=`)
    HOSTS = "hosts"
    #: `skyhive check` reports on it (`Provider.check`: a cloud's credentials)
    CHECK = "check"
    #: a named pool's autostop runs `resources.autostop.hook` on its head node before it stops the pool
    #: (`control/autostop_hook.py` on this machine; on SSH hosts and cloud machines the watchdog there runs
    #: it: `runtime/kinds/ssh/keep.py`)
    AUTOSTOP_HOOK = "autostop_hook"
    #: persistent volumes (`volumes:`, `providers/volumes.py`): `find_volume`, `delete_volume` and the
    #: `volumes` option (`Provider.resource_options`)
    VOLUMES = "volumes"

    @property
    def what(self) -> str:
        return _WHAT[self]


_WHAT = {
    Feature.KEEP: "keep a pool past its client",
    Feature.CREATES_MACHINES: "create machines to order",
    Feature.STOP: "stop machines and start them again",
    Feature.OPEN_PORTS: "open ports on its firewall",
    Feature.BULK_TEARDOWN: "let go of all its nodes at once",
    Feature.NODE_HOMES: "give each node a home of its own",
    Feature.SAME_MACHINE: "run its nodes on this machine",
    Feature.HOSTS: "run on hosts you name",
    Feature.CHECK: "be checked by `skyhive check`",
    Feature.AUTOSTOP_HOOK: "run an autostop hook before its autostop",
    Feature.VOLUMES: "keep persistent volumes",
}


class Features:
    """A provider's declaration: the features it offers, a reason for each one it cannot offer that a
    user may ask of it, and the cloud whose interruption notice its nodes watch (`notices`: a name a
    module of `runtime/onnode/notices/` declares; "" none)."""

    __slots__ = ("offered", "lacking", "notices")

    def __init__(self, *offered: Feature, cannot: Mapping[Feature, str] | None = None, notices: str = "") -> None:
        lacking = dict(cannot or {})
        both = set(offered) & set(lacking)
        if both:
            raise ValueError(f"Features: {', '.join(sorted(f.value for f in both))} both offered and not")
        for f in (*offered, *lacking):
            if not isinstance(f, Feature):
                raise TypeError(f"Features: {f!r} is not a Feature")
        self.offered: frozenset[Feature] = frozenset(offered)
        self.lacking: Mapping[Feature, str] = lacking
        self.notices: str = notices

    def __contains__(self, feature: object) -> bool:
        return feature in self.offered

    def why_not(self, feature: Feature, provider: str = "this provider") -> str | None:
        """None when `feature` is offered; else why not (the declared reason, or a plain one)."""
        if feature in self.offered:
            return None
        return self.lacking.get(feature) or f"provider {provider!r} cannot {feature.what}"

    def replace(self, *, offer: Iterable[Feature] = (), drop: Mapping[Feature, str | None] | None = None,
                notices: str | None = None) -> Features:
        """These features with `offer` added and `drop` taken away (each with its reason, or None)."""
        dropped = dict(drop or {})
        offered = (self.offered | set(offer)) - set(dropped)
        lacking = {f: r for f, r in self.lacking.items() if f not in offered}
        lacking.update({f: r for f, r in dropped.items() if r})
        return Features(*sorted(offered, key=_order), cannot=lacking,
                        notices=self.notices if notices is None else notices)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Features) and (self.offered, dict(self.lacking), self.notices) == \
            (other.offered, dict(other.lacking), other.notices)

    def __hash__(self) -> int:
        return hash((self.offered, self.notices))

    def __repr__(self) -> str:
        parts = [f"Feature.{f.name}" for f in sorted(self.offered, key=_order)]
        if self.lacking:
            parts.append("cannot={" + ", ".join(f"Feature.{f.name}: {r!r}" for f, r in self.lacking.items()) + "}")
        if self.notices:
            parts.append(f"notices={self.notices!r}")
        return f"Features({', '.join(parts)})"


def _order(f: Feature) -> int:
    return list(Feature).index(f)


class Legacy:
    """One of the names the declaration replaced, read from a provider or its class (derived from its
    features). Not a data descriptor: a subclass (or instance) may still set it; `fold_legacy` folds a
    class's into its features."""

    def __init__(self, read: Any) -> None:
        self.read = read

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self.read((obj if obj is not None else owner).features)


#: the old names: bool flags -> the feature (negated: True when the feature is NOT offered)
_FLAGS: dict[str, tuple[Feature, bool]] = {
    "can_stop": (Feature.STOP, False), "opens_ports": (Feature.OPEN_PORTS, False),
    "bulk_teardown": (Feature.BULK_TEARDOWN, False), "node_homes": (Feature.NODE_HOMES, False),
    "same_machine": (Feature.SAME_MACHINE, False), "fixed_machines": (Feature.CREATES_MACHINES, True)}

#: The old names as `Legacy` readers, installed on `Provider`.
LEGACY: dict[str, Legacy] = {
    **{name: Legacy(lambda fs, f=f, neg=neg: (f not in fs) if neg else (f in fs)) for name, (f, neg) in _FLAGS.items()},
    "unsupported": Legacy(lambda fs: {f.value: r for f, r in fs.lacking.items()}),
    "interruption_notices": Legacy(lambda fs: fs.notices),
}


def fold_legacy(cls: type) -> Features:
    """`cls.features` with what `cls` (or a class between it and the class that declared its features)
    still sets by an old name folded in; from then on `cls` reads every old name from its features (a
    value set by an old name is not left to contradict a declaration made below it)."""
    features = _folded(cls)
    for name, reader in LEGACY.items():
        if not isinstance(next(vars(c)[name] for c in cls.__mro__ if name in vars(c)), Legacy):
            setattr(cls, name, reader)
    return features


def _folded(cls: type) -> Features:
    mro = cls.__mro__
    owner = next(i for i, c in enumerate(mro) if "features" in vars(c))
    features: Features = vars(mro[owner])["features"]
    for name in (*_FLAGS, "unsupported", "interruption_notices"):
        where = next((i for i, c in enumerate(mro) if name in vars(c)), None)
        if where is None or where > owner or isinstance(vars(mro[where])[name], Legacy):
            continue
        value = vars(mro[where])[name]
        if name == "unsupported":
            features = features.replace(drop={Feature(k): str(r) for k, r in dict(value).items()})
        elif name == "interruption_notices":
            features = features.replace(notices=str(value or ""))
        else:
            feature, negated = _FLAGS[name]
            on = bool(value) != negated
            features = features.replace(offer=[feature]) if on else features.replace(drop={feature: None})
    return features
