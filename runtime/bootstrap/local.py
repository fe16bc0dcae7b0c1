"""The Local provider's "bootstrap": workers use this interpreter, so check the image can run here."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from ...providers.base import ProvisionError

__all__ = ["check_local_image", "import_name"]

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
    """Local workers run this Python: every pip package of the image must already be importable."""
    if image is None:
        return
    missing = [req for req in image.pip if importlib.util.find_spec(import_name(req).split(".")[0]) is None]
    if missing:
        raise ProvisionError(
            f"node {node}: the Local provider runs workers with this machine's Python, which lacks "
            f"{', '.join(missing)} (from the pool's Image/plugins). Install them here "
            f"(pip install {' '.join(missing)}) or use a provider that bootstraps nodes (SSH, a cloud).",
            node=node,
        )
