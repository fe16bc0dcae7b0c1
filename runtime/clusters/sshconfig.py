"""The user's `~/.ssh/config` and skyhive's named-pool entries: the one `Include` line (added with the
user's consent, once; removed on request), and what in the user's file would take an alias of ours or
override an entry of ours.

OpenSSH takes, for each option, the first value it reads for a host; so skyhive's `Include` goes at the
very top of the file (before any `Host` or `Match` block: an `Include` inside a block applies only to
that block's hosts). What the user's file sets for a pool's alias anyway — a `Host` block of the same
name, or a `Host *` before our line, or options ours leave open (`ProxyCommand`, `ProxyJump`) — is
found by asking OpenSSH itself (`ssh -G`, the configuration it would use) and explained with the line
that does it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...paths import private_dir, state_dir
from .sshfiles import node_addresses
from .record import ClusterRecord

__all__ = ["include_line", "user_config", "installed", "install", "uninstall", "consent", "set_consent",
           "problems", "HostBlock", "host_blocks"]

MARK = "# skyhive: named pools' SSH entries (`skyhive ssh-config --remove` takes this out)"


def include_line() -> str:
    """The line that makes OpenSSH read every named pool's generated config."""
    directory = str(state_dir() / "ssh")
    if any(c.isspace() for c in directory):
        directory = f'"{directory}'
        return f"Include {directory}/*.config\""
    return f"Include {directory}/*.config"


def user_config() -> Path:
    """The user's OpenSSH configuration, `~/.ssh/config` (`$HOME` honoured)."""
    return Path.home() / ".ssh" / "config"


def _read(path: Path) -> bytes:
    """The bytes of the user's config (through a symlink), b"" when there is none; `OSError` naming it."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read your SSH config {path}: {exc.strerror}") from None


def _lines(path: Path) -> list[str]:
    """The config's lines, for reading only: bytes that are not UTF-8 (a Latin-1 comment) are kept as they
    are (`surrogateescape`), never an error; CRLF ends a line as LF does."""
    return _read(path).decode("utf-8", errors="surrogateescape").splitlines()


def installed(path: Path | None = None) -> int:
    """The 1-based line of skyhive's `Include` in the user's config, 0 when it is not there."""
    want = include_line()
    for number, line in enumerate(_lines(path or user_config()), 1):
        if line.strip() == want:
            return number
    return 0


def _write(path: Path, data: bytes) -> None:
    """Replace the user's config with `data` atomically (a temporary file beside it, renamed over it), its
    mode kept (0600 for a new one). A symlink (a dotfile manager's) is kept: the file it points to is the
    one replaced. `OSError` naming the file when it cannot be written."""
    target = Path(os.path.realpath(path))  # the file at the end of a chain of symlinks (itself if none)
    tmp = target.with_name(f".{target.name}.skyhive.{os.getpid()}")
    try:
        mode = target.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        through = f" (the file its symlink points to, {target})" if target != path else ""
        raise OSError(exc.errno, f"cannot write your SSH config {path}{through}: {exc.strerror}") from None


def _newline(data: bytes) -> bytes:
    """The line ending the file uses (CRLF when its first line ends so; LF otherwise)."""
    first = data.find(b"\n")
    return b"\r\n" if first > 0 and data[first - 1:first] == b"\r" else b"\n"


def install(path: Path | None = None) -> bool:
    """Add skyhive's `Include` at the top of the user's config (creating `~/.ssh` 0700 and the file
    0600 when missing), in the file's own line ending; every byte of the user's kept as it was, after
    ours. False when it was there already (nothing written)."""
    path = path or user_config()
    if installed(path):
        return False
    if not os.path.lexists(path):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    old = _read(path)
    nl = _newline(old)
    ours = MARK.encode() + nl + os.fsencode(include_line()) + nl + nl
    _write(path, ours + old)
    return True


def uninstall(path: Path | None = None) -> bool:
    """Take skyhive's `Include` (and its comment just above, and one blank line just after) out of the user's
    config; every other byte kept as it was. False when it was not there."""
    path = path or user_config()
    old = _read(path)
    lines = old.splitlines(keepends=True)
    want = os.fsencode(include_line())
    at = next((i for i, line in enumerate(lines) if line.strip() == want), None)
    if at is None:
        return False
    start, end = at, at + 1
    if start > 0 and lines[start - 1].rstrip(b"\r\n") == MARK.encode():
        start -= 1
    if end < len(lines) and not lines[end].strip():
        end += 1
    _write(path, b"".join(lines[:start] + lines[end:]))
    return True


def _consent_path() -> Path:
    return state_dir() / "ssh" / "consent"


def consent() -> str:
    """What the user answered when asked to add the `Include` line: "yes", "no", or "" (never asked)."""
    try:
        return _consent_path().read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""


def set_consent(answer: str) -> None:
    private_dir("ssh")
    _consent_path().write_text(answer + "\n", encoding="utf-8")


@dataclass(frozen=True, slots=True)
class HostBlock:
    """A `Host` block of an OpenSSH config: its line, its patterns, the options it sets (lower-case names)."""

    line: int
    patterns: tuple[str, ...]
    options: dict[str, str]

    def matches(self, host: str) -> bool:
        """OpenSSH's rule: some pattern matches and no negated one does."""
        hit = False
        for pattern in self.patterns:
            negated = pattern.startswith("!")
            if fnmatch.fnmatchcase(host, pattern.lstrip("!")):
                if negated:
                    return False
                hit = True
        return hit


_OPTION = re.compile(r"\s*(\S+?)(?:\s*=\s*|\s+)(.*?)\s*\Z")


def host_blocks(path: Path) -> list[HostBlock]:
    """The `Host` blocks of the config file `path` (what comes before the first block is a block for
    every host, `*`, at line 0; `Match` blocks are kept as a block matching every host)."""
    blocks = [HostBlock(0, ("*",), {})]
    for number, line in enumerate(_lines(path), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _OPTION.match(line)
        if m is None:
            continue
        key, value = m[1].lower(), m[2]
        if key == "host":
            blocks.append(HostBlock(number, tuple(value.replace('"', "").split()), {}))
        elif key == "match":
            blocks.append(HostBlock(number, ("*",), {"match": value}))
        else:
            blocks[-1].options.setdefault(key, value)
    return blocks


#: What our entries set and `ssh -G` shows, and options that route a connection elsewhere when set.
_OURS = ("hostname", "port", "user", "identityfile", "userknownhostsfile", "stricthostkeychecking", "hostkeyalias")
_ROUTES = ("proxycommand", "proxyjump", "remotecommand")


def _effective(path: Path, host: str) -> dict[str, str]:
    ssh = shutil.which("ssh")
    if ssh is None:
        return {}
    done = subprocess.run([ssh, "-G", "-F", str(path), host], capture_output=True, text=True, timeout=30)
    values: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key, value)
    return values


def problems(rec: ClusterRecord, path: Path | None = None) -> list[str]:
    """What in the user's config keeps `ssh ALIAS` from reaching a node of `rec` as skyhive's entry says:
    skyhive's `Include` missing, an alias of ours defined there too, options set for our hosts before
    our entries or that route the connection elsewhere. Each names the line and what to do."""
    path = path or user_config()
    addresses = node_addresses(rec)
    if not addresses:
        return []
    at = installed(path)
    where = f"{path}"
    if not at:
        return [f"{where} does not include skyhive's SSH entries, so `ssh {rec.name}` does not know the pool: "
                "`skyhive ssh-config --install` adds one Include line at its top"]
    out: list[str] = []
    blocks = host_blocks(path)
    ours = _ours(rec)
    for a in addresses:
        for block in blocks:
            if block.line and a.alias in block.patterns:
                first = "before" if block.line < at else "after"
                out.append(f"{where}:{block.line}: `Host {' '.join(block.patterns)}` also names {a.alias!r} ({first} "
                           f"skyhive's Include at line {at}): OpenSSH takes each option from the first of them "
                           f"that sets it; rename or remove that entry (or the pool)")
        seen = _effective(path, a.alias)
        if not seen:
            continue
        for key in _OURS:
            want = ours[a.alias].get(key)
            if want is not None and seen.get(key) != want:
                culprit = _who_sets(blocks, a.alias, key, before=at)
                out.append(f"{where}{culprit}: sets {key} for {a.alias!r} to {seen.get(key)!r} before skyhive's "
                           f"entry (which says {want!r}; skyhive's Include is at line {at}): move skyhive's "
                           "Include line above it")
        for key in _ROUTES:
            value = seen.get(key, "none")
            if value and value.lower() != "none":
                culprit = _who_sets(blocks, a.alias, key, before=None)
                out.append(f"{where}{culprit}: sets {key} {value!r} for every host it matches, {a.alias!r} "
                           f"included: the connection to the pool's node would go through it; add "
                           f"`Host !{rec.name}* ...` to that block's patterns, or `{key} none` to a `Host "
                           f"{rec.name}*` block above it")
    return out


def _who_sets(blocks: list[HostBlock], host: str, key: str, *, before: int | None) -> str:
    for block in blocks:
        if before is not None and block.line >= before:
            break
        if key in block.options and block.matches(host):
            return f":{block.line} (`Host {' '.join(block.patterns)}`)" if block.line else ":(top of file)"
    return ""


def _ours(rec: ClusterRecord) -> dict[str, dict[str, str]]:
    """What `ssh -G` should show for each of our aliases (as it prints the values)."""
    known = str(state_dir() / "ssh" / f"{rec.name}.known_hosts")
    key = rec.provider_info.get("key")
    out = {}
    for a in node_addresses(rec):
        values = {"hostname": a.host, "port": str(a.port), "user": a.user, "hostkeyalias": a.alias,
                  "userknownhostsfile": known, "stricthostkeychecking": "true"}
        if key or a.identity_file:
            values["identityfile"] = os.path.abspath(os.path.expanduser(str(key or a.identity_file)))
        out[a.alias] = values
    return out
