"""Where a task's `resources` go: chosen by the provider, checked on each node, or refused by name.

Each field of `Resources` ends in exactly one of three places, decided by what the provider declares
(`Provider.chooses`, `Provider.features`, `Provider.resource_options`):

- **chosen**: accelerators / cpus / memory / use_spot go into the pool's `ClusterSpec` for a provider
  that picks machines by them (AWS picks the cheapest instance type that has them). When the provider
  can take a fixed instance type, the type it plans is pinned, so what `--dryrun` and the confirmation
  show is what gets created (and `cpus: 8` — exactly 8 — is honoured as SkyPilot means it);
- **checked**: on machines that exist already (Local, SSH, Slurm), accelerators / cpus / memory are
  requirements each node must meet before setup runs (`onnode.nodeprep.unmet`); the machine is what it
  is, so "exactly 8" and "8+" both mean "at least 8" there;
- **advice**: what the provider takes as advice (`Provider.advisory`; Local's accelerators) goes into
  the `ClusterSpec` too: a machine without it warns, the request is recorded, the task runs — as
  `Pool(accelerator=...)` does from Python;
- **options**: region / zone / instance_type / image_id / disk_size become the provider's constructor
  arguments where it has them.

Anything else is a `TaskFileError` that names the field, the option that sets it, and the provider —
never a silent ignore.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...providers.base import ClusterSpec, Provider
from ...providers.fallback import Fallback
from ...providers.features import Feature
from ...providers.registry import from_cli, provider_class
from .taskfile import Task, TaskFileError

__all__ = ["provider_for", "cheapest_across_clouds", "offers_search", "cluster_spec", "node_requirements", "refused",
           "pin_machine"]

# the ClusterSpec requirement -> (the task file field, the command-line option)
_CHOSEN = {"accelerator": ("resources.accelerators", "--gpus"), "cpus": ("resources.cpus", "--cpus"),
           "memory_gb": ("resources.memory", "--memory"), "spot": ("resources.use_spot", "--use-spot")}
_OPTIONS = {"region": "--region", "zone": "--zone", "instance_type": "--instance-type", "image_id": "--image-id",
            "disk_size": "--disk-size"}


def _wanted(task: Task) -> dict[str, Any]:
    """The ClusterSpec requirements the task asks for (only those it sets)."""
    res = task.resources
    out: dict[str, Any] = {}
    accelerators = {(a.accelerator, a.accelerator_count) for a in res.alternatives}
    if res.alternatives and len(accelerators) > 1:
        pass  # offers of different accelerators: each offer's machine is fixed (`offers_search`), not the pool's
    elif res.alternatives and accelerators != {(None, 0)}:
        (acc, count), = accelerators
        out["accelerator"] = f"{acc}:{count}"
    elif res.accelerator and not res.alternatives:
        out["accelerator"] = f"{res.accelerator}:{res.accelerator_count}"
    if res.cpus is not None:
        out["cpus"] = res.cpus
    if res.memory is not None:
        out["memory_gb"] = res.memory
    if res.use_spot:
        out["spot"] = True
    return out


def refused(task: Task, cls: type[Provider]) -> list[str]:
    """What of the task's resources the provider class `cls` can neither choose, check nor take (one
    message each, naming the field, its option and the provider)."""
    problems = []
    existing = Feature.CREATES_MACHINES not in cls.features  # machines that exist already: checked on each node
    for key, value in _wanted(task).items():
        if key in cls.chooses or (existing and key != "spot"):
            continue
        field, flag = _CHOSEN[key]
        flag = flag if key == "spot" else f"{flag} {value}"
        if key == "spot":
            why = "it runs on machines that exist already, none of them spot" if existing else "it has no spot instances"
        else:
            why = f"it does not choose machines by {field.rpartition('.')[2]} yet"
        problems.append(f"{field} ({flag}): the {cls.name} provider cannot honour it: {why}")
    if task.resources.volumes and Feature.VOLUMES not in cls.features:  # (what it declares: providers/features.py)
        names = ", ".join(f"{v.target}: {v.name}" for v in task.resources.volumes)
        problems.append(f"volumes ({names}): the {cls.name} provider keeps no volumes (AWS, GCP, Azure, "
                        f"DigitalOcean, SSH and Local do: docs/volumes.md); for data on {cls.name} use file_mounts "
                        f"or a bucket")
    for field, flag in _OPTIONS.items():
        value = getattr(task.resources, field)
        if value is not None and field not in cls.resource_options:
            takes = ", ".join(f"resources.{f}" for f in cls.resource_options if f != "volumes") or "none of these"
            problems.append(f"resources.{field} ({flag} {value}): the {cls.name} provider has no such option "
                            f"(it takes {takes})")
    return problems


def provider_for(task: Task) -> Provider:
    """The task's provider built with its resource options; raises `TaskFileError` listing every field the
    provider cannot honour. A task that names no provider but asks for an accelerator, when credentials
    of some cloud are found, gets the cheapest offers of those clouds (`cheapest_across_clouds`); one with
    `any_of` / `ordered` (or several accelerators), the search over their offers (`offers_search`)."""
    if task.resources.alternatives:
        return offers_search(task)
    if task.resources.provider is None and task.resources.accelerator:
        across = cheapest_across_clouds(task)
        if across is not None:
            return across
    name = task.resources.provider or "local"
    cls = provider_class(name)
    problems = refused(task, cls)
    if problems:
        raise TaskFileError("; ".join(problems))
    options: dict[str, Any] = dict(task.resources.provider_options)  # from an infra spelling (commands/infra.py)
    for field, keyword in cls.resource_options.items():
        value = getattr(task.resources, field)
        if value is not None:
            options[keyword] = [value] if keyword == "zones" else value  # a zone: the one zone to try
    return from_cli(name, hosts=task.resources.hosts, options=options)


def cheapest_across_clouds(task: Task) -> Provider | None:
    """A `Fallback` over every (cloud, region) offer for the task's accelerator, cheapest first, among the
    clouds whose credentials are found (`providers.cloud.offers`); None when no cloud has credentials or
    the task fixes a region, zone, machine or image (those belong to one cloud: name it with --provider)."""
    res = task.resources
    if any(getattr(res, f) is not None for f in ("region", "zone", "instance_type", "image_id")):
        return None
    from ...providers.cloud import offers
    from ...providers.fallback import Fallback

    clouds = [c for c, where in offers.credentials().items() if where]
    if not clouds:
        return None
    ranked = offers.rank(f"{res.accelerator}:{res.accelerator_count}", clouds, spot=bool(res.use_spot),
                         cpus=res.cpus, memory_gb=res.memory)
    if not ranked:
        raise TaskFileError(f"resources.accelerators {res.accelerator}:{res.accelerator_count}: no region of "
                            f"{', '.join(clouds)} (the clouds with credentials) offers it; see `skyhive show-gpus`")
    return Fallback(offers.candidates(ranked), order="price")


def offers_search(task: Task) -> Provider:
    """`resources.any_of` (cheapest first) and `resources.ordered` (in the given order) as the offer search
    `--gpus` does across clouds: every entry becomes its offers — one per region of its cloud that has its
    accelerator, the machine fixed (`providers.cloud.offers`), or its provider as it is — and a `Fallback`
    tries them, moving on at an offer that cannot be bought. Offers that name no cloud (`accelerators:
    [A100, H100]`) when no cloud has credentials: the first, on Local, as one accelerator would be. Raises
    `TaskFileError` naming the entry an offer cannot be made of."""
    res = task.resources
    key = "resources.any_of" if res.order == "price" else "resources.ordered"
    if all(a.provider is None for a in res.alternatives):
        from ...providers.cloud import offers

        if not any(offers.credentials().values()):  # no cloud: as one accelerator without credentials, Local
            return provider_for(replace(task, resources=replace(res.alternatives[0], alternatives=())))
    providers: list[Provider] = []
    for i, alt in enumerate(res.alternatives):
        where = f"{task.line_of(key)}: {key}[{i}]"
        try:
            providers += _offers_of(replace(task, resources=alt))
        except TaskFileError as exc:
            raise TaskFileError(f"{where}: {exc}") from None
    return Fallback(providers, order=res.order)


def _offers_of(task: Task) -> list[Provider]:
    """The offers of one `any_of` / `ordered` entry (`task` with the entry as its resources)."""
    from ...providers.cloud import offers

    res = task.resources
    if res.provider is None and res.accelerator:  # any cloud with credentials
        across = cheapest_across_clouds(task)
        if across is None:
            raise TaskFileError(f"names no cloud and no cloud has credentials (`skyhive check`): name one with "
                                f"infra: (e.g. infra: aws)")
        return list(across.providers)
    if res.provider in offers.CLOUDS and res.accelerator and res.instance_type is None:
        ranked = [o for o in offers.rank(f"{res.accelerator}:{res.accelerator_count}", [res.provider],
                                         spot=bool(res.use_spot), cpus=res.cpus, memory_gb=res.memory)
                  if res.region in (None, o.region)]
        if not ranked:
            where_ = f"{res.provider}/{res.region}" if res.region else res.provider
            raise TaskFileError(f"{res.accelerator}:{res.accelerator_count}: {where_} does not offer it "
                                f"(see `skyhive show-gpus {res.accelerator}`)")
        return [provider_for(replace(task, resources=replace(res, region=o.region, instance_type=o.instance_type)))
                for o in ranked]
    return [provider_for(task)]


def cluster_spec(task: Task, provider: Provider, pool_id: str = "plan") -> ClusterSpec:
    """What a pool for `task` asks `provider` for: only the requirements the provider chooses by."""
    wanted = {k: v for k, v in _wanted(task).items() if k in provider.chooses or k in provider.advisory}
    if task.resources.use_spot is False and "spot" in provider.chooses:
        wanted["spot"] = False
    res = task.resources
    return ClusterSpec(pool_id=pool_id, nodes=task.num_nodes, **wanted,
                       cpus_exact="cpus" in wanted and not res.cpus_or_more,
                       memory_exact="memory_gb" in wanted and not res.memory_or_more)


def pin_machine(task: Task, provider: Provider) -> tuple[Task, dict[str, Any]]:
    """The provider's plan for `task` (`Provider.plan`, no API call), and the task with the planned
    instance type pinned when the provider takes one — so that the pool gets exactly what was shown."""
    plan = dict(provider.plan(cluster_spec(task, provider)))
    planned = plan.get("instance_type")
    if planned and task.resources.instance_type is None and "instance_type" in provider.resource_options:
        task = replace(task, resources=replace(task.resources, instance_type=str(planned)))
    return task, plan


def node_requirements(task: Task, provider: Provider) -> dict[str, Any]:
    """What each node must have, checked on the node before setup (providers of fixed machines only)."""
    if Feature.CREATES_MACHINES in provider.features:
        return {}
    res = task.resources
    out: dict[str, Any] = {}
    if res.accelerator and "accelerator" not in provider.chooses and "accelerator" not in provider.advisory:
        out["accelerator"], out["accelerators"] = res.accelerator, res.accelerator_count
    if res.cpus is not None:
        out["cpus"] = res.cpus
    if res.memory is not None:
        out["memory_gb"] = res.memory
    return out
