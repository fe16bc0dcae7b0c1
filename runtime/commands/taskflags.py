"""The task options of `skyhive launch` (and of any command that runs a task file), as SkyPilot spells them.

    --num-nodes N  --gpus L4:2  --cpus 8+  --memory 32+  --use-spot  --instance-type T  --region R
    --zone Z  --disk-size GB  --image-id ID  --env K=V  --env-file FILE  --secret K  --workdir DIR
    -y/--yes  --dryrun

`add_task_flags(parser)` declares them on an argparse parser; `task_from_args(args)` loads the task file
and applies them (the command line wins over `--env-file`, which wins over the file). SkyPilot's
meanings: `--cpus 8` is exactly 8 vCPUs, `8+` at least 8 (the same for `--memory`, in GB); `--gpus`
overrides `resources.accelerators`; "none" resets a resource the file sets. `--secret K` takes K's value
from this environment (or `--secret K=V`): the value is a secret — redacted in the pool's events, log
and output, and never shown in a message or a repr.

A bad value is a `TaskFileError` naming the option and the value (exit code 2, nothing started).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
from dataclasses import replace
from collections.abc import Mapping
from typing import Any

from .taskfile import Task, TaskFileError, load
from .values import ENV_NAME, accelerator_share, check_task_name, parse_accelerators, parse_amount, parse_env_overrides

__all__ = ["add_task_flags", "task_from_args", "narrow_offers", "task_before_hosts", "read_env_file",
           "resource_overrides", "idle_minutes"]

log = logging.getLogger("skyhive.commands.taskflags")

_NONE = "none"  # SkyPilot: "Passing "none" resets the config"


def add_task_flags(parser: argparse.ArgumentParser, *, launch: bool = True) -> None:
    """Declare the task options on `parser` (with `launch`, also -y/--yes and --dryrun)."""
    # (`--hosts H1 H2 task.yaml` would hand the task to --hosts: `task_before_hosts` moves it first)
    parser.add_argument("task", metavar="TASK.yaml|COMMAND", nargs="+",
                        help="a task file, or a command to run on every node (SkyPilot's ENTRYPOINT)")
    parser.add_argument("-n", "--name", dest="task_name", metavar="NAME", help="the task's name (overrides name)")
    parser.add_argument("--nodes", "--num-nodes", type=int, help="number of nodes (overrides num_nodes)")
    parser.add_argument("--provider", "--cloud", help="local, ssh, aws, ... (overrides resources.cloud)")
    parser.add_argument("--infra", metavar="INFRA", help="SkyPilot's spelling: local, aws/us-east-1[/ZONE], "
                        "ssh/POOL (~/.sky/ssh_node_pools.yaml), slurm[/LOGIN[/PARTITION]]")
    parser.add_argument("--hosts", nargs="+", metavar="HOST", help="hosts for --provider ssh, head first")
    res = parser.add_argument_group("resources (per node; they override the task file's `resources`)")
    res.add_argument("--gpus", metavar="NAME[:COUNT]", help='accelerators per node, e.g. L4:2 ("none" resets)')
    res.add_argument("--cpus", metavar="N[+]", help="vCPUs per node: 8 = exactly 8, 8+ = at least 8")
    res.add_argument("--memory", metavar="GB[+]", help="memory per node in GB: 32 = exactly, 32+ = at least")
    res.add_argument("--use-spot", dest="use_spot", action="store_true", default=None, help="spot instances")
    res.add_argument("--no-use-spot", dest="use_spot", action="store_false", help="on-demand instances")
    res.add_argument("--instance-type", "-t", metavar="TYPE", help="a fixed instance type")
    res.add_argument("--region", help="the cloud region")
    parser.add_argument("--profile", help="the AWS profile of ~/.aws/config or ~/.aws/credentials (sets AWS_PROFILE "
                                          "for this command; `skyhive down` finds it in the pool's log)")
    res.add_argument("--zone", help="the cloud zone")
    res.add_argument("--disk-size", metavar="GB", help="the boot disk size in GB")
    res.add_argument("--image-id", metavar="ID", help="the machine image")
    env = parser.add_argument_group("environment")
    env.add_argument("--env", action="append", metavar="K[=V]",
                     help="set an environment variable; a bare K takes K from here (repeatable)")
    env.add_argument("--env-file", metavar="FILE", help="a dotenv file of variables (--env wins over it)")
    env.add_argument("--secret", action="append", metavar="K[=V]",
                     help="a secret variable, redacted in logs, events and output; a bare K takes K from here")
    parser.add_argument("--workdir", help="directory to ship to every node (overrides workdir)")
    if launch:
        parser.add_argument("-y", "--yes", action="store_true", help="do not ask before creating the pool")
        parser.add_argument("--dryrun", action="store_true",
                            help="print what would be created and its hourly cost; create nothing")


def task_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Task:
    """The task file named by `args.task` with the options of `add_task_flags` applied."""
    environ = os.environ if environ is None else environ
    if getattr(args, "profile", None):  # the AWS credential chain reads it (providers.cloud.aws_credentials)
        os.environ["AWS_PROFILE"] = args.profile
    task = load_entrypoint(args.task)
    hosts = tuple(h for item in args.hosts or () for h in item.split(",") if h)
    env: dict[str, str] = {}
    if args.env_file:
        env.update(read_env_file(args.env_file))
    env.update(parse_env_overrides(args.env or [], environ))
    secrets = parse_env_overrides(args.secret or [], environ, flag="--secret")
    resources = resource_overrides(args)
    provider = args.provider
    if getattr(args, "infra", None) is not None:
        if provider is not None:
            raise TaskFileError(f"--infra {args.infra} and --provider {provider}: give one of them")
        from .infra import parse_infra

        try:
            infra = parse_infra(args.infra)
        except ValueError as exc:
            raise TaskFileError(f"--infra {args.infra}: {exc}") from None
        provider = infra.provider
        # the infra's region and zone (or none: `--infra aws` resets the file's), its options and hosts
        resources = {"region": infra.region, "zone": infra.zone, "provider_options": infra.options, **resources}
        hosts = hosts or infra.hosts
    task = task.with_overrides(nodes=args.nodes, provider=provider, hosts=hosts, env=env, secrets=secrets,
                               workdir=args.workdir, resources=resources)
    if provider is not None and task.resources.alternatives:
        flag = f"--infra {args.infra}" if getattr(args, "infra", None) is not None else f"--provider {provider}"
        place = {k: v for k, v in resources.items() if k in ("region", "zone", "provider_options")}
        task = narrow_offers(task, flag, place)
    if getattr(args, "task_name", None) is not None:  # SkyPilot's -n/--name (an empty one is refused too)
        task = replace(task, name=check_task_name(args.task_name, "-n/--name"))
    return task


def narrow_offers(task: Task, flag: str, place: Mapping[str, Any]) -> Task:
    """The offers of `resources.any_of` / `ordered` (or of several accelerators) with the command line's
    provider applied to every one, as SkyPilot applies `--infra` / `--cloud` to every candidate: an entry
    on another provider is dropped, the others take the provider and `place` (the infra's region, zone
    and options; `--infra aws` resets an entry's region). One offer left is the task's resources; offers
    that differ only in an accelerator the provider takes as advice (Local's) are the first of them, as
    one accelerator would be (a machine without it warns, the task runs). None left is a `TaskFileError`
    naming `flag` and every entry."""
    from ...providers.registry import provider_class

    res = task.resources
    key = "resources.any_of" if "resources.any_of" in dict(task.lines) else \
        "resources.ordered" if "resources.ordered" in dict(task.lines) else "resources.accelerators"
    kept = [replace(a, provider=res.provider, hosts=a.hosts or res.hosts, **place)
            for a in res.alternatives if a.provider in (None, res.provider)]
    if not kept:
        entries = ", ".join(f"[{i}] {a.provider}" + (f"/{a.region}" if a.region else "")
                            for i, a in enumerate(res.alternatives))
        raise TaskFileError(f"{flag}: {task.line_of(key)}: none of the offers of {key} is on {res.provider} "
                            f"({entries}): give an entry with infra: {res.provider}, or leave out {flag} to "
                            f"search them all")
    if len(kept) < len(res.alternatives):
        log.info("%s: %d of %d offers of %s are on another provider than %s: dropped", flag,
                 len(res.alternatives) - len(kept), len(res.alternatives), key, res.provider)
    unplaced = [replace(a, accelerator=None, accelerator_count=0, accelerator_share=0.0) for a in kept]
    advice = "accelerator" in provider_class(res.provider or "local").advisory
    if len(kept) == 1 or (advice and all(u == unplaced[0] for u in unplaced)):
        one = replace(kept[0], alternatives=(), order=res.order, autostop=res.autostop, volumes=res.volumes)
        return replace(task, resources=one)
    return replace(task, resources=replace(res, alternatives=tuple(kept)))


def task_before_hosts(argv: list[str]) -> list[str]:
    """`argv` with a task file written after `--hosts H1 H2` moved before it: argparse gives `--hosts` every
    word up to the next option, the task file too, and then says the task is missing. The task is the
    words from the first that is a task file (a name ending in .yaml/.yml, or a file holding a YAML
    mapping) to the next option. A command after the hosts cannot be told from a host: end the hosts
    with `--` (`--hosts H1 H2 -- COMMAND`) or write the task first."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == "--":
            break
        if word != "--hosts":
            continue
        end = i + 1
        while end < len(out) and not out[end].startswith("-"):
            end += 1
        run = out[i + 1:end]
        at = next((k for k, w in enumerate(run) if k > 0 and (w.endswith((".yaml", ".yml"))
                                                              or (os.path.isfile(w) and _is_yaml_mapping(w)))), None)
        if at is not None:
            return [*out[:i], *run[at:], "--hosts", *run[:at], *out[end:]]
        break
    return out


def load_entrypoint(entry: str | list[str]) -> Task:
    """SkyPilot's ENTRYPOINT: a task file (a name ending in .yaml/.yml, or a file holding a YAML
    mapping), else a command run as the task's `run` on every node (`skyhive exec NAME 'nvidia-smi'`,
    `skyhive launch echo hi`: the words joined by spaces)."""
    text = entry if isinstance(entry, str) else " ".join(entry)
    if isinstance(entry, list) and len(entry) == 1:
        text = entry[0]
    if text.endswith((".yaml", ".yml")) or (os.path.isfile(text) and _is_yaml_mapping(text)):
        return load(text)
    if not text.strip():
        raise TaskFileError("the entrypoint is empty: give a task file or a command")
    return Task(run=text)


def _is_yaml_mapping(path: str) -> bool:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            return isinstance(yaml.safe_load(fh), dict)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False


def resource_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `Resources` fields the resource options set ("none" resets one to its default)."""
    out: dict[str, Any] = {}
    if args.gpus is not None:
        if args.gpus.strip().lower() == _NONE:
            out.update(accelerator=None, accelerator_count=0, accelerator_share=0.0)
        else:
            try:
                out["accelerator"], out["accelerator_count"] = parse_accelerators(args.gpus)
                out["accelerator_share"] = accelerator_share(args.gpus)
            except ValueError as exc:
                raise TaskFileError(f"--gpus {args.gpus}: {exc}") from None
    for name in ("cpus", "memory"):
        raw = getattr(args, name)
        if raw is None:
            continue
        if raw.strip().lower() == _NONE:
            out.update({name: None, f"{name}_or_more": False})
            continue
        try:
            out[name], out[f"{name}_or_more"] = parse_amount(raw, memory=name == "memory")
        except ValueError as exc:
            raise TaskFileError(f"--{name} {raw}: {exc}") from None
    if args.use_spot is not None:
        out["use_spot"] = args.use_spot
    if args.disk_size is not None:
        if not args.disk_size.isdigit() or int(args.disk_size) < 1:
            raise TaskFileError(f"--disk-size {args.disk_size}: expected a whole number of GB, like 256")
        out["disk_size"] = int(args.disk_size)
    for name in ("instance_type", "region", "zone", "image_id"):
        raw = getattr(args, name)
        if raw is None:
            continue
        if not raw.strip():
            raise TaskFileError(f"--{name.replace('_', '-')}: the value is empty")
        out[name] = None if raw.strip().lower() == _NONE else raw.strip()
    return out


def read_env_file(path: str) -> dict[str, str]:
    """A dotenv file: `KEY=VALUE` lines (an optional `export `, quotes, `#` comments). A malformed line
    is a `TaskFileError` naming the file and line (never the value: the file may hold secrets)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise TaskFileError(f"--env-file {path}: cannot read it: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("export "):
            text = text[len("export "):].lstrip()
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not ENV_NAME.match(key):
            raise TaskFileError(f"--env-file {path}:{number}: expected KEY=VALUE with a valid variable name")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[key] = value
    return out


def idle_minutes(text: str) -> float:
    """The value of `-i MINUTES` (argparse `type=`): a positive, finite number of minutes; anything else
    (0, negative, nan, inf, not a number) is an `argparse.ArgumentTypeError` saying so."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of minutes") from None
    if not 0 < value < math.inf:  # (nan is neither)
        raise argparse.ArgumentTypeError(f"{text}: autostop needs a positive, finite number of minutes")
    return value
