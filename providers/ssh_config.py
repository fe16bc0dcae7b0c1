"""Host entries for `sky.SSH(hosts=[...])`: `user@host:port` parsed (`parse_host`), and looked up in the user's
OpenSSH client configuration (`~/.ssh/config`: `lookup`, `resolve_host`) for `sky.SSH(hosts=["myalias"])`: what every
SSH tool reads for a host name — `HostName`, `User`, `Port`, `IdentityFile`, `ProxyJump` — and nothing
else of it (no `ProxyCommand`; `Match` blocks are skipped; no option that changes how host keys are checked).

As `ssh_config(5)` says: the file is read top to bottom, a `Host` line's patterns (`*`, `?`, `!negated`)
select the blocks that apply to the name given, and for each keyword the first value found wins;
`Include` pulls other files in at that point (relative to `~/.ssh`). `%h` (the host name given),
`%u`-free `%%`, and `~` are expanded. A file that does not exist is no configuration at all.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
from dataclasses import dataclass

import yaml

__all__ = ["HostConfig", "lookup", "parse_host", "resolve_host", "DEFAULT_CONFIG", "ssh_node_pool", "SSH_NODE_POOLS"]

#: SkyPilot's file of SSH Node Pools (read where `--infra ssh/POOL` names one).
SSH_NODE_POOLS = "~/.sky/ssh_node_pools.yaml"

DEFAULT_CONFIG = "~/.ssh/config"
_KEYS = {"hostname": "hostname", "user": "user", "port": "port", "identityfile": "identity_file",
         "proxyjump": "proxy_jump"}


@dataclass(frozen=True, slots=True)
class HostConfig:
    """What the configuration says about one host name (None: it says nothing)."""

    hostname: str | None = None
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None


def _lines(path: str, depth: int = 0) -> list[tuple[str, str, str]]:
    """(keyword lower-case, value, where) of `path` with its `Include`s in place."""
    if depth > 8:
        raise ValueError(f"{path}: Include nested more than 8 deep")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return []
    out: list[tuple[str, str, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.replace("=", " ", 1).partition(" ") if "=" in line.split(None, 1)[0] else \
            line.partition(" ")
        key, value = key.strip().lower(), value.strip()
        if not value:
            raise ValueError(f"{path}:{number}: {key} has no value")
        if key == "include":
            for pattern in shlex.split(value):
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.expanduser("~/.ssh"), pattern)
                for included in sorted(glob.glob(pattern)):
                    out += _lines(included, depth + 1)
            continue
        out.append((key, value, f"{path}:{number}"))
    return out


def _matches(patterns: str, name: str) -> bool:
    hit = False
    for pattern in patterns.split():
        negated = pattern.startswith("!")
        if fnmatch.fnmatchcase(name, pattern[1:] if negated else pattern):
            if negated:
                return False
            hit = True
    return hit


def lookup(name: str, path: str | None = DEFAULT_CONFIG) -> HostConfig:
    """What the configuration file `path` says about host `name` (empty for `path=None` or no file).
    `Match` blocks are skipped (their conditions are not evaluated here). Raises `ValueError` naming the
    file of a value that cannot be used (a port that is not a number)."""
    if path is None:
        return HostConfig()
    found: dict[str, str] = {}
    applies = True  # lines before the first Host apply to every host
    for key, value, where in _lines(os.path.expanduser(path)):
        if key == "host":
            applies = _matches(value, name)
            continue
        if key == "match":  # conditions skyhive does not evaluate (exec, canonical, ...): the block is skipped
            applies = False
            continue
        field = _KEYS.get(key)
        if applies and field is not None and field not in found:
            found[field] = value
    port = found.get("port")
    if port is not None and not port.isdigit():
        raise ValueError(f"{path}: Port {port!r} for host {name!r} is not a number")
    hostname = found.get("hostname")
    identity = found.get("identity_file")
    jump = found.get("proxy_jump")
    return HostConfig(
        hostname=hostname.replace("%h", name).replace("%%", "%") if hostname else None,
        user=found.get("user"),
        port=int(port) if port is not None else None,
        identity_file=os.path.expanduser(identity.replace("%h", name).replace("%%", "%")) if identity else None,
        proxy_jump=None if jump is None or jump.lower() == "none" else jump,
    )


_HOST = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s]+)(?::(?P<port>\d+))?$")


def parse_host(spec: str, *, user: str | None = None, port: int = 22) -> tuple[str | None, str, int]:
    """`host`, `user@host`, `user@host:port`, `[v6addr]:port` -> (user, host, port).

    Raises `ValueError` naming the entry when it is not one of those forms.
    """
    m = _HOST.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"SSH host {spec!r} is not 'host', 'user@host' or 'user@host:port'")
    host = m["host"].strip("[]")
    p = int(m["port"]) if m["port"] else port
    if not 0 < p < 65536:
        raise ValueError(f"SSH host {spec!r}: port {p} is out of range")
    return m["user"] or user, host, p


def resolve_host(spec: str, *, user: str | None = None, port: int = 22, ssh_config: str | None = DEFAULT_CONFIG,
                 ) -> tuple[tuple[str | None, str, int], tuple[str | None, str | None]]:
    """A host entry (`alias`, `user@host:port`) with what `ssh_config` says of its name: ((user, address,
    port), (its IdentityFile or None, its ProxyJump as `user@address:port` or None)). The entry's own
    user and port win, then `user=` and a `port=` other than 22, then the file. Raises `ValueError`
    naming the entry (a malformed one, or more than one jump host)."""
    given_user, name, given_port = parse_host(spec)
    m = _HOST.match(spec.strip())
    explicit_port = m is not None and m["port"] is not None
    cfg = lookup(name, ssh_config)
    host_user = given_user or user or cfg.user
    host_port = given_port if explicit_port else (port if port != 22 else (cfg.port or 22))
    jump = None
    if cfg.proxy_jump:
        hops = [h.strip() for h in cfg.proxy_jump.split(",") if h.strip()]
        if len(hops) != 1:
            raise ValueError(f"SSH host {spec!r}: ProxyJump {cfg.proxy_jump!r} in {ssh_config}: one jump host is "
                             "supported")
        (j_user, j_addr, j_port), _ = resolve_host(hops[0].removeprefix("ssh://"), ssh_config=ssh_config)
        jump = f"{j_user + '@' if j_user else ''}[{j_addr}]:{j_port}" if ":" in j_addr else \
            f"{j_user + '@' if j_user else ''}{j_addr}:{j_port}"
    return (host_user, cfg.hostname or name, host_port), (cfg.identity_file, jump)


def ssh_node_pool(name: str, *, pools_file: str | None = None) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """SSH Node Pool `name` from SkyPilot's `~/.sky/ssh_node_pools.yaml`: its hosts (head first, as
    `USER@HOST`) and the pool's options (its key). A missing file or pool, a password, or hosts with different keys is a
    `ValueError` naming the file and the pool."""
    path = os.path.expanduser(pools_file or SSH_NODE_POOLS)
    try:
        with open(path, encoding="utf-8") as fh:
            pools = yaml.safe_load(fh) or {}
    except FileNotFoundError:
        raise ValueError(f"ssh/{name}: no SSH Node Pools file {path} (SkyPilot's format: `{name}: {{hosts: "
                         f"[HOST, ...]}}`), or pass the hosts with --hosts") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"ssh/{name}: cannot read {path}: {exc}") from None
    if not isinstance(pools, dict) or name not in pools:
        known = ", ".join(sorted(map(str, pools))) if isinstance(pools, dict) and pools else "none"
        raise ValueError(f"ssh/{name}: {path} has no pool {name!r} (it has: {known})")
    pool = pools[name]
    if not isinstance(pool, dict) or not isinstance(pool.get("hosts"), list) or not pool["hosts"]:
        raise ValueError(f"ssh/{name}: {path}: pool {name!r} needs a non-empty `hosts` list")
    user, key = pool.get("user"), pool.get("identity_file")
    hosts: list[str] = []
    for entry in pool["hosts"]:
        if isinstance(entry, dict):
            if "password" in entry or "password" in pool:
                raise ValueError(f"ssh/{name}: {path}: passwords are not supported; skyhive logs in with keys")
            host = entry.get("ip")
            if not isinstance(host, str) or not host:
                raise ValueError(f"ssh/{name}: {path}: a host entry needs `ip`, got {entry!r}")
            if entry.get("identity_file") not in (None, key):
                if key is not None or len(pool["hosts"]) > 1:
                    raise ValueError(f"ssh/{name}: {path}: hosts with different identity files are not "
                                     f"supported (one key per pool)")
                key = entry["identity_file"]
            host_user = entry.get("user") or user
            hosts.append(f"{host_user}@{host}" if host_user else host)
        elif isinstance(entry, str) and entry:
            hosts.append(f"{user}@{entry}" if user and "@" not in entry else entry)
        else:
            raise ValueError(f"ssh/{name}: {path}: expected a host name or a mapping, got {entry!r}")
    options = (("key", os.path.expanduser(str(key))),) if key else ()
    return tuple(hosts), options
