"""Files a cached mount could not upload when its pool ended, kept where the pool's end does not delete
them (the node's home goes with `skyhive down`): `<state dir>/storage/unsent/<when>-<n>/`, the files under
their paths in the mount, with `UNSENT.txt` naming the mount's folder, its bucket and the files.

Standard library only: `skyhive down` reads them back (`kept_since`) to say where they are.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from ...paths import private_dir

__all__ = ["keep", "kept_since", "MANIFEST", "mount_owners", "shown"]

MANIFEST = "UNSENT.txt"


def shown(path: str) -> str:
    """A path as text that any log, terminal or manifest takes (a name's undecodable bytes as \\xNN)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def keep(root: str, rels: list[str], uri: str) -> str:
    """Copy `rels` (paths under the mount's folder `root`) into a new folder of their own; its path."""
    base = private_dir("storage", "unsent")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        dest = base / f"{stamp}-{os.getpid()}-{n}"
        try:
            dest.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    copied = []
    for rel in rels:
        src = os.path.join(root, rel)
        to = dest / rel
        try:
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to)
            copied.append(rel)
        except OSError:
            continue  # gone meanwhile
    lines = [f"folder: {shown(root)}", f"bucket: {uri}", *(shown(rel) for rel in copied)]
    (dest / MANIFEST).write_text("\n".join(lines) + "\n")
    return str(dest)


def kept_since(when: float) -> list[tuple[str, str, int]]:
    """The folders `keep` made at or after `when` (a `time.time()`), as (path, bucket URI, file count)."""
    from ...paths import state_dir

    base = Path(state_dir()) / "storage" / "unsent"
    out = []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.stat().st_mtime + 1 < when:
                continue
            lines = (entry / MANIFEST).read_text().splitlines()
        except OSError:
            continue
        uri = lines[1].removeprefix("bucket: ") if len(lines) > 1 else "?"
        out.append((str(entry), uri, max(0, len(lines) - 2)))
    return out


def mount_owners() -> set[int]:
    """The processes on this machine that ran a cached mount's background upload (node.py writes each
    one's pid to `<state dir>/storage/*.owner`): a worker among them uploads what is left before it exits,
    and is given the time for it (`clusters/stop.py`)."""
    from ...paths import state_dir

    out = set()
    for path in (Path(state_dir()) / "storage").glob("*.owner"):
        try:
            out.add(int(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return out
