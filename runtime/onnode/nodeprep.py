"""The node side of a task's preparation, before `setup`: which machine this is, whether it has what the
task's resources ask, and the task's `file_mounts` put in place (standard library only).

Nodes that share a machine (Local nodes; SSH nodes naming the same host and user) share its files and its
Python environment, so `skyhive launch` copies the file mounts and runs `setup` once per machine:
`machine_key` is what tells the machines apart.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
from typing import Any

from .instance import instance_info

__all__ = ["machine_key", "unmet", "require", "install_mounts", "target_path", "extract"]


def extract(tar: tarfile.TarFile, path: str) -> None:
    """Unpack `tar` into `path` safely: with the "data" filter where this Python has it (3.11.4+, 3.12),
    else refusing what that filter refuses (absolute names, "..", links, devices). Nodes may run an
    older Python than the client."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(path, filter="data")
        return
    for member in tar.getmembers():
        name = os.path.normpath(member.name)
        if os.path.isabs(name) or name.startswith(".."):
            raise OSError(f"refusing to unpack {member.name!r}: outside the target directory")
        if not (member.isfile() or member.isdir()):
            raise OSError(f"refusing to unpack {member.name!r}: not a plain file or directory")
    tar.extractall(path)  # noqa: S202 - every member was checked above


def machine_key() -> str:
    """The same string on every node that shares this machine's files and Python environment."""
    return f"{os.uname().nodename}|{os.getuid()}|{sys.prefix}"


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)  # kB -> GiB
    except OSError:
        pass
    return None


def unmet(requirements: dict[str, Any]) -> str:
    """"" when this node has what `requirements` ask ({"accelerator": "L4", "accelerators": 2, "cpus": 8,
    "memory_gb": 32}), else what it lacks, naming the field. On a machine that exists already, an exact
    count ("cpus: 8") and an at-least count ("8+") both mean "at least"."""
    from ...providers.accelerators import local_devices

    node = f"node {instance_info().node} ({os.uname().nodename})"
    problems = []
    if requirements.get("accelerator"):
        name, count = requirements["accelerator"], int(requirements.get("accelerators", 1))
        devices = local_devices()
        matching = [d for d in devices if name.replace("_", " ").upper() in d.upper().replace("-", " ")]
        if len(matching) < count:
            have = ", ".join(devices) or "no GPU (nvidia-smi finds none)"
            problems.append(f"resources.accelerators {name}:{count}: {node} has {have} "
                            f"(pass --gpus none to run without)")
    cpus = requirements.get("cpus")
    if cpus is not None and (os.cpu_count() or 1) < cpus:
        problems.append(f"resources.cpus {cpus:g}: {node} has {os.cpu_count()} CPUs")
    memory = requirements.get("memory_gb")
    have_memory = _memory_gb()
    if memory is not None and have_memory is not None and have_memory < memory:
        problems.append(f"resources.memory {memory:g} GB: {node} has {have_memory:.1f} GB")
    return "; ".join(problems)


def node_capacity() -> tuple[int, int, float | None]:
    """This node's GPUs (`nvidia-smi -L`), CPUs and memory in GB: what a named pool's job queue shares
    among the jobs it runs side by side."""
    from ...providers.accelerators import local_devices

    return len(local_devices()), os.cpu_count() or 1, _memory_gb()


def require(requirements: dict[str, Any]) -> None:
    """Raise `RuntimeError` saying what this node lacks of `requirements` (see `unmet`)."""
    problem = unmet(requirements)
    if problem:
        raise RuntimeError(problem)


def target_path(target: str, home: str | None = None) -> str:
    """A mount's destination on this node: `~` expanded, relative paths under the home directory
    (`home`, a node's own home, in place of this user's when given)."""
    if home is not None and (target == "~" or target.startswith("~/")):
        target = target[2:]
    path = os.path.expanduser(target)
    return path if os.path.isabs(path) else os.path.join(home or os.path.expanduser("~"), path)


def install_mounts(mounts: list[tuple[str, str, bytes, bool]], homes: list[str] | None = None) -> list[str]:
    """Put each mount (target, source path on the client, tar.gz of the source, source is a directory) in
    place: a directory's contents into the target directory, a file at the target path. A target that is
    the source itself (a Local node, or a filesystem shared with the client) is left as it is. Returns the
    targets written; raises `OSError` naming the target that could not be written. `homes`: the own
    homes of the nodes on this machine (Local): a `~/...` or relative target goes into each of them, an
    absolute one once."""
    written = []
    places = [(t, s, a, d, target_path(t, home)) for t, s, a, d in mounts
              for home in ([None] if homes is None or os.path.isabs(t) else homes)]
    for target, source, archive, is_dir, path in places:
        if os.path.exists(path) and os.path.exists(source) and os.path.samefile(path, source):
            continue
        try:
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                if is_dir:
                    os.makedirs(path, exist_ok=True)
                    extract(tar, path)
                else:
                    member = tar.getmembers()[0]
                    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                    data = tar.extractfile(member)
                    assert data is not None
                    tmp = f"{path}.skyhive-part"
                    with open(tmp, "wb") as out:
                        shutil.copyfileobj(data, out)
                    os.chmod(tmp, member.mode & 0o777)
                    os.replace(tmp, path)
        except OSError as exc:
            raise OSError(exc.errno, f"file_mounts.{target}: cannot write {path} on node "
                          f"{instance_info().node}: {exc.strerror or exc}") from None
        written.append(path)
    return written
