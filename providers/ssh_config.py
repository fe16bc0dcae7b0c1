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

__all__ = ["HostConfig", "lookup", "parse_host", "resolve_host", "DEFAULT_CONFIG"]

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
