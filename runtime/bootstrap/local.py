"""The Local provider's "bootstrap": workers use this interpreter, so check the image can run here:
every package installed, at a version the image allows (a pin is honoured or refused, never ignored)."""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement

from ...providers.base import ProvisionError

if TYPE_CHECKING:
    from ..actors.context import NodeContext
    from ..transport.base import Transport

__all__ = ["bootstrap_local", "check_local_image", "import_name"]

# distributions whose import name differs from the project name
_IMPORT_NAMES = {
    "scikit-learn": "sklearn", "pillow": "PIL", "pyyaml": "yaml", "opencv-python": "cv2",
    "beautifulsoup4": "bs4", "protobuf": "google.protobuf", "jax[cpu]": "jax", "dask[distributed]": "distributed",
}


def import_name(requirement: str) -> str:
    """The module a pip requirement provides, by convention (`torch==2.3` -> `torch`)."""
    name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0].lower()
    return _IMPORT_NAMES.get(name, name.replace("-", "_"))


def check_local_image(image: Any, *, node: int) -> None:
    """Local workers run this Python: every pip package of the image must be installed here, at a
    version the image allows (`torch==2.3.0` with torch 2.13 installed is refused, never run).

    Raises `ProvisionError` naming each package that is missing or at another version, with the
    version found here.
    """
    if image is None:
        return
    problems = [p for p in (_problem(req) for req in image.pip) if p is not None]
    if problems:
        raise ProvisionError(
            f"node {node}: the Local provider runs workers with this machine's Python ({sys.executable}), "
            f"which does not satisfy the pool's Image/plugins: {'; '.join(problems)}. Install them here "
            f"(pip install {' '.join(repr(p.split(' ')[0]) for p in problems)}), drop the pins, or use a "
            "provider that bootstraps nodes (SSH, a cloud).",
            node=node,
        )


def _problem(req: str) -> str | None:
    """Why `req` is not satisfied by this Python, or None when it is."""
    try:
        parsed = Requirement(req)
    except InvalidRequirement:
        parsed = None
    if parsed is not None and parsed.marker is not None and not parsed.marker.evaluate():
        return None  # not meant for this platform
    if parsed is None or parsed.url:
        found = importlib.util.find_spec(import_name(req).split(".")[0]) is not None
        return None if found else f"{req} (not installed)"
    try:
        have = metadata.version(parsed.name)
    except metadata.PackageNotFoundError:
        if importlib.util.find_spec(import_name(req).split(".")[0]) is not None and not parsed.specifier:
            return None  # importable though not installed as a distribution (e.g. on sys.path)
        return f"{req} (not installed)"
    if parsed.specifier and not parsed.specifier.contains(have, prereleases=True):
        return f"{req} (this Python has {parsed.name} {have})"
    return None


async def bootstrap_local(ctx: NodeContext, node: int, transport: Transport) -> str:
    """The bootstrap registered for reach kind "local": check the image can run here; no detail."""
    check_local_image(ctx.image, node=node)
    return ""
