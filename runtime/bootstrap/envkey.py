"""What names a built environment: `env_key`, the hash of the Image, the Python and the includes' content
(the same on every kind of node: a warm node skips the build), and `SCRIPT`, the node-side script's text."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...plugins.image import Image

from ...errors import BootstrapError

__all__ = ["env_key", "SCRIPT"]

#: The node-side bootstrap script (`script.py`, standard library only), sent as `python -c` text.
SCRIPT = (Path(__file__).parent / "script.py").read_text()


def _includes_digest(paths: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for raw in paths:
        root = Path(raw).expanduser()
        if not root.exists():
            raise BootstrapError(f"Image.includes entry {raw!r} does not exist on this machine")
        entries = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in entries:
            digest.update(str(p.relative_to(root.parent)).encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return digest.hexdigest()


def _per_pool_env() -> frozenset[str]:
    """Variables skyhive itself puts in a pool's Image with a value of that pool's own (not a build
    input): the jax plugin's coordinator port on Local."""
    from ...plugins.jax import PORT_ENV

    return frozenset({PORT_ENV})


def env_key(image: Image | None, python_mm: str, python_hint: str | None) -> str:
    """The environment directory's name: a hash of the image, the Python version and the includes.

    The variables skyhive itself gives each pool a value of its own (the coordinator port the jax plugin
    picks for each Local pool) are left out: no build step reads them, and with them every pool would
    build its environment anew instead of reusing the last one."""
    own = _per_pool_env()
    if image is not None and own & set(image.env):
        image = image.replace(env={k: v for k, v in image.env.items() if k not in own})
    parts = {
        "image": image.content_hash() if image is not None else "",
        "python": python_mm,
        "interpreter": python_hint or "",
        "includes": _includes_digest(tuple(image.includes)) if image is not None and image.includes else "",
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]
