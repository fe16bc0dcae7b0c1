"""Every folder of the source is a package the wheel ships (pyproject's explicit `packages` list): a
folder missing there works from this checkout (the editable install maps whole folders) and is missing
from the runtime wheel that nodes install — found for `runtime/collections` and `runtime/control/managed`."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_source_folder_with_modules_is_a_listed_package():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = set()
    for name, folder in setup["package-dir"].items():
        for root, dirs, files in os.walk(ROOT / folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            if any(f.endswith(".py") for f in files):
                rel = os.path.relpath(root, ROOT / folder)
                found.add(name if rel == "." else f"{name}.{rel.replace(os.sep, '.')}")
    assert sorted(found - listed) == [], "folders with modules that pyproject.toml's `packages` does not list"


def test_the_version_the_workers_report_is_pyprojects():
    """`skyhive_version()` (sent in every handshake) is the package's own `__version__`, read without
    the distribution's metadata: it must be the version pyproject installs."""
    from skyhive.runtime.onnode.setup import skyhive_version

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert skyhive_version() == project["version"]
