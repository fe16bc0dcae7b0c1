"""What `skyhive launch` will create, known before anything is: the provider, the machines and their hourly
cost, what is shipped to the nodes. `--dryrun` prints it and stops; without `-y`, an interactive launch
shows it and asks before creating anything.

Nothing here calls a cloud API (`Provider.plan` reads the shipped machine table) or starts a process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...errors import TaskFileError
from ...providers.base import Provider
from ...providers.features import Feature
from ...providers.limits import check_node_count
from .resources import node_requirements, pin_machine, provider_for
from .taskfile import Task

__all__ = ["LaunchPlan", "plan_launch"]


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """The task as it will run (its machine pinned), its provider, the provider's plan (instance type,
    prices; empty for providers that create nothing), and the lines that describe it to a person."""

    task: Task
    provider: Provider
    plan: dict[str, Any]
    lines: tuple[str, ...]

    @property
    def cost_per_hour(self) -> float | None:
        """The pool's estimated cost per hour (USD; a spot pool's at spot prices where known), when the provider
        knows it."""
        cost = self.plan.get("cost_per_hour")
        return float(cost) if isinstance(cost, (int, float)) else None


def plan_launch(task: Task) -> LaunchPlan:
    """The plan for `task`: raises `TaskFileError` for resources its provider cannot honour and
    `ProvisionError` when no machine satisfies them — before anything is created."""
    provider = provider_for(task)
    try:  # an impossible size is refused before a machine is looked for, let alone made
        check_node_count(provider, task.num_nodes, f"{task.line_of('num_nodes')}: num_nodes")
    except ValueError as exc:
        raise TaskFileError(str(exc)) from None
    pinned, plan = pin_machine(task, provider)
    if pinned is not task:
        provider = provider_for(pinned)
    lines = _describe(pinned, provider, plan)
    for value in sorted((v for _, v in pinned.secrets if v), key=len, reverse=True):  # a value pasted in a script
        lines = [line.replace(value, "***") for line in lines]
    return LaunchPlan(task=pinned, provider=provider, plan=plan, lines=tuple(lines))


def _ranking(candidates: list[dict[str, Any]], *, spot: bool) -> list[str]:
    """The offers, cheapest first, as a table (tried in this order; capacity or quota moves down)."""
    rows = [("#", "CLOUD", "REGION", "MACHINE", "$/h ON-DEMAND", "$/h SPOT")]
    for i, c in enumerate(candidates, 1):
        price, spot_price = c.get("price_per_hour"), c.get("spot_price_per_hour")
        rows.append((str(i), str(c.get("cloud", "?")), str(c.get("region", "?")),
                     str(c.get("instance_type") or c.get("error", "?"))[:60],
                     f"${price:.4g}" if isinstance(price, (int, float)) else "-",
                     f"${spot_price:.4g}" if isinstance(spot_price, (int, float)) else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    head = f"  offers across clouds, cheapest {'spot ' if spot else ''}first (tried in this order):"
    return [head] + ["    " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]


def _describe(task: Task, provider: Provider, plan: dict[str, Any]) -> list[str]:
    nodes = task.num_nodes
    lines = [f"task: {task.name or os.path.basename(task.source)} on {nodes} node{'s' if nodes != 1 else ''} "
             f"of provider {provider.name}"]
    if plan.get("summary"):
        lines.append(f"  machines: {nodes} x {plan['summary']}")
    elif Feature.CREATES_MACHINES not in provider.features:
        where = ("this machine" if Feature.SAME_MACHINE in provider.features
                 else ", ".join(task.resources.hosts) if Feature.HOSTS in provider.features and task.resources.hosts
                 else "existing machines")
        lines.append(f"  machines: {where} (nothing is created; no cloud cost)")
    if plan.get("order") == "price" and plan.get("candidates"):
        lines += _ranking(plan["candidates"], spot=bool(plan.get("spot")))
    if plan.get("warning"):  # asked of a machine that lacks it (Local's GPUs): it runs without
        lines.append(f"  warning: {plan['warning']}")
    cost = plan.get("cost_per_hour")
    if isinstance(cost, (int, float)):
        if plan.get("spot") and isinstance(plan.get("spot_price_per_hour"), (int, float)):
            prices = "spot prices"  # (what the machine line said: the spot price, not on-demand)
        else:
            prices = "on-demand prices, spot is less" if plan.get("spot") else "on-demand prices"
        lines.append(f"  hourly cost: ${cost:.4g}/h for the pool ({prices})")
    if plan.get("boot_limit"):  # a cloud's boot-time limit (`boot_limit=`): what ends nodes a killed client left
        lines.append(f"  boot-time limit: {plan['boot_limit']}")
    if plan.get("idle_watchdog"):  # a cloud that says what ends an idle node (Azure: its identity's role)
        lines.append(f"  idle watchdog: {plan['idle_watchdog']}")
    res = task.resources
    chosen = [f"{name} {getattr(res, name)}" for name in ("region", "zone", "instance_type", "disk_size", "image_id")
              if getattr(res, name) is not None]
    if chosen:
        lines.append(f"  {provider.name} options: {', '.join(chosen)}")
    needs = node_requirements(task, provider)
    if needs:
        shown = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in needs.items())
        lines.append(f"  each node must have: {shown} (checked on the node before setup)")
    if task.workdir:
        lines.append(f"  workdir: {task.workdir} -> each node's working directory")
    for mount in task.file_mounts:
        kind = "directory" if os.path.isdir(mount.source) else "file"
        lines.append(f"  file_mounts: {mount.source} ({kind}) -> {mount.target} on every node")
    env_names = [k for k, _ in task.envs]
    secret_names = [k for k, _ in task.secrets]
    if env_names or secret_names:
        lines.append(f"  environment: {', '.join(env_names) or '-'}; "
                     f"secrets (redacted): {', '.join(secret_names) or '-'}")
    for phase in ("setup", "run"):
        script = getattr(task, phase)
        if script:
            first = script.strip().splitlines()[0]
            more = " ..." if len(script.strip().splitlines()) > 1 else ""
            lines.append(f"  {phase}: {first}{more}")
    return lines
