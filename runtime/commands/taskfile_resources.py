"""The `resources` of a task file: what each node needs, where it may run, and how long a named pool stays.

    resources:
      infra: aws/us-east-1            # or cloud:, provider: (SkyPilot's older spellings)
      accelerators: H100:8            # [A100, H100] tries in this order; {A100: 1, H100: 1} the cheapest
      cpus: 8+
      memory: 32+
      any_of:                         # offers to search, cheapest first (the search `--gpus` does)
        - {infra: aws, accelerators: H100}
        - {infra: gcp/us-central1, accelerators: H100}
      ordered:                        # offers tried in the order given
        - {infra: aws/us-east-1}
        - {infra: aws/us-west-2}
      autostop: 10m                   # or true (5 min), 30, 1h, false, or the mapping below
      autostop: {idle_minutes: 10, down: false, hook: "python save.py", hook_timeout: 300}

Every key either changes what the pool gets, or is refused naming the key and what to do (a
`TaskFileError`, exit 2): a key that changes where or how long a task runs is never warned about and
then ignored (`REFUSED`). Keys that change neither (labels, a disk tier) are warnings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from yaml.nodes import MappingNode, Node, SequenceNode

from ...providers.base import ProvisionError
from ...providers.registry import canonical
from ...providers.volumes import DEFAULT_SIZE_GB, VolumeMount
from .values import accelerator_share, parse_accelerators, parse_amount

__all__ = ["Resources", "Autostop", "ResourcesParser", "RES_KEYS", "RES_SKYPILOT", "REFUSED", "DEFAULT_IDLE_MINUTES",
           "WAIT_FOR"]

#: the keys of `resources` skyhive honours
RES_KEYS = ("cloud", "provider", "infra", "accelerators", "cpus", "memory", "use_spot", "disk_size", "region", "zone",
            "instance_type", "image_id", "hosts", "ports", "any_of", "ordered", "autostop")
#: SkyPilot's keys that change neither where nor how long a task runs: read past with a warning
RES_SKYPILOT = ("disk_tier", "spot_recovery", "job_recovery", "labels", "priority")
#: SkyPilot's keys that would change where or how long a task runs, and skyhive cannot honour: refused
REFUSED = {
    "accelerator_args": "skyhive has no TPU VMs; ask for the accelerator by name in resources.accelerators",
    "network_tier": "skyhive does not choose machines by network tier; name the machine with resources.instance_type",
    "max_hourly_cost": "skyhive does not filter offers by price; `skyhive launch --dryrun` shows each offer's price",
    "volumes": "volumes are a top-level key in skyhive (`volumes: {/mnt/data: NAME}`, docs/volumes.md)",
}
#: SkyPilot's `autostop: true`
DEFAULT_IDLE_MINUTES = 5.0
_ENTRY_KEYS = tuple(k for k in RES_KEYS if k not in ("any_of", "ordered", "autostop"))
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)\Z", re.IGNORECASE)
_UNIT = {"": 1.0, "m": 1.0, "s": 1 / 60, "h": 60.0, "d": 1440.0}


#: `resources.autostop.wait_for`'s values, SkyPilot's: what resets the idle time (`Autostop.wait_for`)
WAIT_FOR = ("jobs_and_ssh", "jobs", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class Autostop:
    """`resources.autostop`: stop (or, `down`, take down) a named pool after `idle_minutes` with no job and
    no client; `hook` (a shell script) runs on the head node first, for at most `hook_timeout` seconds."""

    idle_minutes: float = DEFAULT_IDLE_MINUTES
    down: bool = False
    hook: str | None = None
    hook_timeout: float = 3600.0
    #: what keeps the pool from being idle (SkyPilot's `wait_for`): "jobs_and_ssh" a job queued or running
    #: or a client attached; "jobs" a job only; "none" nothing (a hard limit: stopped after `idle_minutes`)
    wait_for: str = "jobs_and_ssh"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """What each node needs, in SkyPilot's terms. `provider` None means Local.

    `cpus`/`memory` (GB) are exact unless `cpus_or_more`/`memory_or_more` (the `+` of `8+`), as in
    SkyPilot; `use_spot` None means the provider's default. Where each field is honoured (or refused)
    is `runtime.commands.resources`. `alternatives` are the offers of `any_of` / `ordered` (each the
    whole resources with the entry's keys over the others), searched cheapest first (`order` "price")
    or as given ("given").
    """

    provider: str | None = None
    accelerator: str | None = None
    accelerator_count: int = 0
    accelerator_share: float = 0.0  # the count as written when it is a share of one GPU (`L4:0.5`): 0.5
    cpus: float | None = None
    cpus_or_more: bool = False
    memory: float | None = None
    memory_or_more: bool = False
    use_spot: bool | None = None
    disk_size: int | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    image_id: str | None = None
    hosts: tuple[str, ...] = ()
    #: the provider's own options an `infra` spelling gives (`slurm/LOGIN/PARTITION`, `ssh/POOL`'s key)
    provider_options: tuple[tuple[str, Any], ...] = ()
    ports: tuple[tuple[int, int], ...] = ()  # (first, last) of each `ports` entry: 8888 is (8888, 8888)
    alternatives: tuple[Resources, ...] = ()
    order: str = "price"
    autostop: Autostop | None = None
    #: the task's top-level `volumes` (persistent volumes, `providers/volumes.py`), given to the provider
    volumes: tuple[VolumeMount, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.accelerator:
            parts.append(f"{self.accelerator}:{self.accelerator_count}")
        if self.cpus is not None:
            parts.append(f"cpus {self.cpus:g}{'+' if self.cpus_or_more else ''}")
        if self.memory is not None:
            parts.append(f"memory {self.memory:g}{'+' if self.memory_or_more else ''} GB")
        if self.use_spot:
            parts.append("spot")
        for name in ("instance_type", "region", "zone", "disk_size", "image_id"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name} {value}")
        if self.alternatives:
            how = "cheapest first" if self.order == "price" else "in this order"
            parts.append(f"one of {len(self.alternatives)} offers ({how})")
        return ", ".join(parts) or "any"


def _where_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Resources) if f.name not in ("alternatives", "order", "autostop", "volumes"))


class ResourcesParser:
    """The `resources` half of the task file parser (`taskfile._Parser` mixes it in: `value`, `error`,
    `warn`, `_mapping`, `_int` and `source` are the parser's)."""

    source: str

    def value(self, node: Node) -> Any: ...  # (the parser's)

    def error(self, node: Node | None, path: str, problem: str) -> Exception: ...  # (the parser's)

    def warn(self, node: Node, text: str) -> None: ...  # (the parser's)

    def _mapping(self, node: Node, path: str, known: tuple[str, ...], skypilot: tuple[str, ...],
                 refused: Mapping[str, str] | None = None) -> dict[str, Node]: ...

    def _int(self, node: Node | None, path: str, *, default: int) -> int: ...

    def _resources(self, node: Node | None) -> Resources:
        if node is None or self.value(node) is None:
            return Resources()
        res = self._mapping(node, "resources", RES_KEYS, RES_SKYPILOT, REFUSED)
        out = self._fields(res, "resources")
        base = Resources(**out)
        if "autostop" in res:
            base = replace(base, autostop=self._autostop(res["autostop"]))
        given = [k for k in ("any_of", "ordered") if k in res and self.value(res[k]) is not None]
        if len(given) == 2:
            raise self.error(res["ordered"], "resources.ordered", "give any_of or ordered, not both")
        if given:
            key = given[0]
            entries = self._alternatives(res[key], f"resources.{key}", base, out)
            base = replace(base, alternatives=entries, order="price" if key == "any_of" else "given")
        elif "accelerators" in res and isinstance(self.value(res["accelerators"]), (list, dict, set)):
            base = self._accelerator_choices(res["accelerators"], base)
        return base

    def _volumes(self, node: Node | None, res: Resources) -> Resources:
        """The top-level `volumes` (`/mnt/data: NAME`, or `{name: NAME, size: GB}`) on `res` and its offers."""
        if node is None or self.value(node) is None:
            return res
        entries = self._mapping(node, "volumes", _AnyKey(), ())
        out = []
        for target, vnode in entries.items():
            raw = self.value(vnode)
            path = f"volumes.{target}"
            size = DEFAULT_SIZE_GB
            if isinstance(raw, dict):
                unknown = sorted(set(raw) - {"name", "size"})
                if unknown:
                    raise self.error(vnode, path, f"unknown key {unknown[0]!r} (a volume takes name and size)")
                size_raw = raw.get("size", DEFAULT_SIZE_GB)
                match = re.fullmatch(r"(\d+)\s*(Gi|GB|G)?", str(size_raw).strip())
                if not match or int(match.group(1)) < 1:
                    raise self.error(vnode, f"{path}.size", f"expected a size in GB (e.g. 50), got {size_raw!r}")
                size, raw = int(match.group(1)), raw.get("name")
            if not isinstance(raw, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", raw):
                raise self.error(vnode, path, f"expected a volume name (letters, digits, '.', '_', '-'), got {raw!r}")
            if not str(target).startswith("/"):
                raise self.error(vnode, path, "the mount point must be an absolute path (e.g. /mnt/data)")
            out.append(VolumeMount(str(target), raw, size))
        mounts = tuple(out)
        return replace(res, volumes=mounts, alternatives=tuple(replace(a, volumes=mounts) for a in res.alternatives))

    def _alternatives(self, node: Node, path: str, base: Resources, given: dict[str, Any]) -> tuple[Resources, ...]:
        """Each entry of `any_of`/`ordered`: the task's resources with the entry's keys over them (a cloud
        named by the entry replaces the task's region and zone, as SkyPilot merges them)."""
        if not isinstance(node, SequenceNode) or not node.value:
            raise self.error(node, path, "expected a list of resources (e.g. `- infra: aws` entries)")
        out = []
        for i, entry in enumerate(node.value):
            where = f"{path}[{i}]"
            if not isinstance(entry, MappingNode):
                raise self.error(entry, where, "expected a mapping of resources (infra, accelerators, ...)")
            keys = self._mapping(entry, where, _ENTRY_KEYS, (), REFUSED)
            mine = self._fields(keys, where)
            merged = {k: v for k, v in given.items() if k in _where_fields()}
            if "provider" in mine:  # another cloud: the task's place does not carry over
                for k in ("region", "zone", "provider_options", "hosts"):
                    merged.pop(k, None)
            merged.update(mine)
            out.append(Resources(**merged))
        return tuple(out)

    def _accelerator_choices(self, node: Node, base: Resources) -> Resources:
        """SkyPilot's `accelerators: [A100, H100]` (tried in this order) and `{A100: 1, H100: 1}` (any of them,
        cheapest first): one offer per accelerator."""
        raw = self.value(node)
        items = list(raw.items()) if isinstance(raw, dict) else [(a, None) for a in raw]
        if not items:
            raise self.error(node, "resources.accelerators", "expected at least one accelerator")
        offers = []
        for name, count in items:
            spelled = f"{name}:{count}" if count is not None else name
            try:
                acc, n = parse_accelerators(spelled)
            except ValueError as exc:
                raise self.error(node, "resources.accelerators", str(exc)) from None
            offers.append(replace(base, accelerator=acc, accelerator_count=n))
        if len(offers) == 1:
            return offers[0]
        first = offers[0]
        return replace(first, alternatives=tuple(offers), order="given" if isinstance(raw, list) else "price")

    def _autostop(self, node: Node) -> Autostop | None:
        raw = self.value(node)
        path = "resources.autostop"
        if raw is None or raw is False:
            return None
        if raw is True:
            return Autostop()
        if isinstance(raw, (int, float, str)) and not isinstance(raw, bool):
            return Autostop(idle_minutes=self._minutes(node, raw, path))
        if not isinstance(raw, dict):
            raise self.error(node, path, f"expected true, false, minutes (10, 10m, 1h) or a mapping, got {raw!r}")
        keys = self._mapping(node, path, ("idle_minutes", "down", "hook", "hook_timeout", "wait_for"), ())
        out: dict[str, Any] = {}
        if "idle_minutes" in keys and self.value(keys["idle_minutes"]) is not None:
            out["idle_minutes"] = self._minutes(keys["idle_minutes"], self.value(keys["idle_minutes"]),
                                                f"{path}.idle_minutes")
        if "down" in keys and self.value(keys["down"]) is not None:
            down = self.value(keys["down"])
            if not isinstance(down, bool):
                raise self.error(keys["down"], f"{path}.down", f"expected true or false, got {down!r}")
            out["down"] = down
        if "hook" in keys and self.value(keys["hook"]) is not None:
            hook = self.value(keys["hook"])
            if not isinstance(hook, str) or not hook.strip():
                raise self.error(keys["hook"], f"{path}.hook", "expected a shell script (a string)")
            out["hook"] = hook
        if "hook_timeout" in keys and self.value(keys["hook_timeout"]) is not None:
            out["hook_timeout"] = float(self._int(keys["hook_timeout"], f"{path}.hook_timeout", default=3600))
        if "wait_for" in keys and self.value(keys["wait_for"]) is not None:
            wait_for = self.value(keys["wait_for"])
            if wait_for not in WAIT_FOR:
                raise self.error(keys["wait_for"], f"{path}.wait_for", f"expected one of {', '.join(WAIT_FOR)} "
                                 f"(SkyPilot's), got {wait_for!r}")
            out["wait_for"] = wait_for
        return Autostop(**out)

    def _minutes(self, node: Node, raw: Any, path: str) -> float:
        match = _DURATION.match(str(raw).strip())
        minutes = float(match.group(1)) * _UNIT[match.group(2).lower()] if match else -1.0
        if not minutes > 0:
            raise self.error(node, path, f"expected a positive number of minutes (10, 10m, 1h), got {raw!r}")
        return minutes

    def _fields(self, res: dict[str, Node], path: str) -> dict[str, Any]:
        """The `Resources` fields a mapping of resources keys gives (`path` names it in errors)."""
        out: dict[str, Any] = {}
        for key in ("cloud", "provider", "infra"):
            if key in res:
                raw = self.value(res[key])
                if raw is None:
                    continue
                if not isinstance(raw, str):
                    raise self.error(res[key], f"{path}.{key}", f"expected a provider name, got {raw!r}")
                if key == "infra":  # SkyPilot's local, aws/us-east-1, ssh/POOL, slurm/LOGIN/PARTITION
                    from .infra import parse_infra

                    try:
                        infra = parse_infra(raw)
                    except ValueError as exc:
                        raise self.error(res[key], f"{path}.infra", str(exc)) from None
                    out.update(provider=infra.provider, provider_options=infra.options)
                    out.update({k: v for k, v in (("region", infra.region), ("zone", infra.zone),
                                                  ("hosts", infra.hosts)) if v})
                    continue
                cloud, _, rest = raw.partition("/")  # SkyPilot's infra: aws/us-east-1/us-east-1a
                try:
                    out["provider"] = canonical(cloud)
                except ProvisionError as exc:
                    raise self.error(res[key], f"{path}.{key}", str(exc)) from None
                region, _, zone = rest.partition("/")
                if region and region != "*":
                    out["region"] = region
                if zone:
                    out["zone"] = zone
        if "accelerators" in res:
            out["accelerator"], out["accelerator_count"] = self._accelerators(res["accelerators"], path)
            out["accelerator_share"] = accelerator_share(self.value(res["accelerators"]))
        for key in ("cpus", "memory"):
            raw = self.value(res[key]) if key in res else None
            if raw is not None:
                try:
                    out[key], out[f"{key}_or_more"] = parse_amount(raw, memory=key == "memory")
                except ValueError as exc:
                    raise self.error(res[key], f"{path}.{key}", str(exc)) from None
        if "use_spot" in res and self.value(res["use_spot"]) is not None:
            raw = self.value(res["use_spot"])
            if not isinstance(raw, bool):
                raise self.error(res["use_spot"], f"{path}.use_spot", f"expected true or false, got {raw!r}")
            out["use_spot"] = raw
        if "disk_size" in res and self.value(res["disk_size"]) is not None:
            out["disk_size"] = self._int(res["disk_size"], f"{path}.disk_size", default=0)
        for key in ("region", "zone", "instance_type", "image_id"):
            raw = self.value(res[key]) if key in res else None
            if raw is not None:
                if not isinstance(raw, str) or not raw.strip():
                    raise self.error(res[key], f"{path}.{key}", f"expected a name, got {raw!r}")
                out[key] = raw.strip()
        if "hosts" in res:
            hnode = res["hosts"]
            raw = self.value(hnode)
            if isinstance(raw, str):
                raw = raw.split()
            if raw is not None and (not isinstance(raw, list) or not all(isinstance(h, str) and h for h in raw)):
                raise self.error(hnode, f"{path}.hosts", f"expected a list of host names, got {raw!r}")
            out["hosts"] = tuple(raw or ())
        if "ports" in res and self.value(res["ports"]) is not None:
            from ..clusters.ports import parse_ports

            try:
                out["ports"] = parse_ports(self.value(res["ports"]))
            except ValueError as exc:
                raise self.error(res["ports"], f"{path}.ports", str(exc)) from None
        return out

    def _accelerators(self, node: Node, path: str) -> tuple[str | None, int]:
        raw = self.value(node)
        path = f"{path}.accelerators"
        if raw is None:
            return None, 0
        if isinstance(raw, dict) and raw:  # {A100: 1, H100: 1}: the first here; each is an offer (see above)
            name, count = next(iter(raw.items()))
            raw = f"{name}:{count}" if count is not None else str(name)
        elif isinstance(raw, (list, set)) and raw:
            raw = sorted(map(str, raw))[0] if isinstance(raw, set) else raw[0]
        try:
            return parse_accelerators(raw)
        except ValueError as exc:
            raise self.error(node, path, str(exc)) from None


class _AnyKey(tuple):  # type: ignore[type-arg]
    """`known` for a mapping whose keys are free (mount points): everything is known."""

    def __contains__(self, item: object) -> bool:
        return True
