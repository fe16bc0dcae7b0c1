"""The wheels a node needs to run skyhive's worker: skyhive itself, msgpack and cloudpickle.

Shipped from the client in the exact installed versions, so the worker never differs from the client
and the node needs no package index for them:

- skyhive: built from the source tree when running from one (an editable install), else repacked
  from the installed files; named by a hash of its content, so a changed source tree ships anew;
- msgpack, cloudpickle: repacked from the installed distributions (their files as installed,
  compiled extensions included, with their own `.dist-info`).

Wheels are cached under the client's skyhive state directory (`wheels/`).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import os
import threading
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ...paths import private_dir

__all__ = ["RuntimeWheels", "runtime_wheels", "RUNTIME_DISTS"]

RUNTIME_DISTS = ("msgpack", "cloudpickle")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # same bytes for the same content: stable hashes


@dataclass(frozen=True, slots=True)
class RuntimeWheels:
    """The wheel files, and a hash naming their combined content (the node's runtime directory)."""

    paths: tuple[Path, ...]
    digest: str


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_wheel(target: Path, files: list[tuple[str, bytes]], dist_info: str) -> None:
    tmp = target.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files]
    record.append(f"{dist_info}/RECORD,,")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # private, like the rest of the state
    with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [*files, (f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode())]:
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    os.replace(tmp, target)


def _source_root() -> Path | None:
    from ... import paths  # skyhive/paths.py: a floor module beside the face package, in skyhive/

    root = Path(paths.__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return None
        if data.get("project", {}).get("name") == "skyhive":
            return root
    return None


def _source_files(root: Path) -> list[tuple[str, bytes]]:
    data = tomllib.loads((root / "pyproject.toml").read_text())
    tool = data.get("tool", {}).get("setuptools", {})
    packages: list[str] = tool.get("packages", ["skyhive"])
    mapping: dict[str, str] = tool.get("package-dir", {})
    extra = tool.get("package-data", {})
    files: list[tuple[str, bytes]] = []
    for pkg in packages:
        base = max((k for k in mapping if pkg == k or pkg.startswith(k + ".")), key=len, default=None)
        rel = mapping[base] + pkg[len(base):].replace(".", "/") if base else pkg.replace(".", "/")
        directory = root / rel
        patterns = ["*.py", *extra.get(pkg, [])]
        seen = set()
        for pattern in patterns:
            for path in sorted(directory.glob(pattern)):
                if path.is_file() and path.name not in seen:
                    seen.add(path.name)
                    files.append((f"{pkg.replace('.', '/')}/{path.name}", path.read_bytes()))
    return files


def _skyhive_wheel(cache: Path) -> Path:
    version = md.version("skyhive")
    root = _source_root()
    if root is not None:
        files = _source_files(root)
    else:
        files = _installed_files("skyhive", with_dist_info=False)
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    tag = digest.hexdigest()[:16]
    target = cache / f"skyhive-{tag}" / f"skyhive-{version}-py3-none-any.whl"
    if not target.exists():
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # in the 0700 `private_dir("wheels")`
        dist_info = f"skyhive-{version}.dist-info"
        meta = f"Metadata-Version: 2.1\nName: skyhive\nVersion: {version}\n".encode()
        wheel = b"Wheel-Version: 1.0\nGenerator: skyhive\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        _write_wheel(target, [*files, (f"{dist_info}/METADATA", meta), (f"{dist_info}/WHEEL", wheel)], dist_info)
    return target


def _installed_files(name: str, *, with_dist_info: bool = True) -> list[tuple[str, bytes]]:
    dist = md.distribution(name)
    out = []
    for f in dist.files or ():
        parts = Path(str(f)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or str(f).endswith(".pyc"):
            continue
        if parts[0].endswith(".dist-info") and (not with_dist_info or parts[-1] in ("RECORD", "INSTALLER", "direct_url.json", "REQUESTED")):
            continue
        path = Path(dist.locate_file(f))
        if path.is_file():
            out.append((Path(*parts).as_posix(), path.read_bytes()))
    return sorted(out)


def _dist_wheel(name: str, cache: Path) -> Path:
    dist = md.distribution(name)
    version = dist.version
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    tag = tags[0] if tags else "py3-none-any"
    target = cache / f"{dist.metadata['Name'].replace('-', '_')}-{version}-{tag}.whl"
    if not target.exists():
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        dist_info = next((Path(str(f)).parts[0] for f in dist.files or () if Path(str(f)).parts[0].endswith(".dist-info")),
                         f"{name}-{version}.dist-info")
        _write_wheel(target, _installed_files(name), dist_info)
    return target


def runtime_wheels(cache: Path | None = None) -> RuntimeWheels:
    """The wheels to ship (built or repacked on first use, then cached). Blocking: call in a thread."""
    cache = cache or private_dir("wheels")
    with _lock:  # the nodes of a pool ask at once: build once
        return _runtime_wheels(cache)


_lock = threading.Lock()


def _runtime_wheels(cache: Path) -> RuntimeWheels:
    paths = [_skyhive_wheel(cache), *(_dist_wheel(n, cache) for n in RUNTIME_DISTS)]
    digest = hashlib.sha256()
    for p in paths:
        digest.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return RuntimeWheels(tuple(paths), digest.hexdigest())
