"""On Local, a task's `setup:` installs into an environment of the pool's own, never into the user's
(issue 39, point 5). SkyPilot's `examples/managed_job.yaml` (verbatim in skypilot_yamls/, from
skypilot-org/skypilot at 1df670a2) runs `pip install tqdm` in setup: it put tqdm into the user's active
venv. Now the run still imports tqdm (from the pool's environment), and the user's venv is as it was;
`SKYHIVE_SETUP_ENV=user` opts into the user's own (docs/cli.md).

The user's environment here is a venv of the test's own: the test's packages (skyhive and its
dependencies) through links, tqdm left out, and a pip of its own. pip installs offline, from the wheel
directory this machine has (PIP_NO_INDEX)."""

from __future__ import annotations

import glob
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from skyhive.runtime.clusters import jobs as jobq
from tests.clusters.test_clusters import clean, wait_for  # noqa: F401

YAML = Path(__file__).parent / "skypilot_yamls" / "managed_job.yaml"
WHEELS = ("/opt/wheels", "/opt/pypi/files")


def _wheel_dir() -> str:
    for folder in WHEELS:
        if glob.glob(os.path.join(folder, "tqdm-*.whl")):
            return folder
    pytest.fail(f"no tqdm wheel in {', '.join(WHEELS)}: this test installs it offline")


def _user_env(tmp_path: Path) -> tuple[Path, Path]:
    """A venv standing for the user's: (its root, its site-packages)."""
    root = tmp_path / "user-venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(str(root))
    purelib = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    shared = tmp_path / "user-packages"
    shared.mkdir()
    for folder in site.getsitepackages():
        for entry in sorted(os.listdir(folder)):
            if not entry.lower().startswith("tqdm") and not (shared / entry).exists():
                (shared / entry).symlink_to(os.path.join(folder, entry))
    (purelib / "_test_packages.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")
    pip = root / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{root}/bin/python" -m pip "$@"\n')
    pip.chmod(0o755)
    return root, purelib


def _tqdm_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.lower().startswith("tqdm"))


def test_setup_installs_into_the_pools_environment_not_the_users(tmp_path, clean):
    home = Path(clean)
    user, purelib = _user_env(tmp_path)
    env = {**os.environ, "VIRTUAL_ENV": str(user), "PATH": f"{user / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": _wheel_dir()}
    python = str(user / "bin" / "python")
    assert _tqdm_in(purelib) == []
    assert subprocess.run([python, "-c", "import tqdm"], env=env, capture_output=True).returncode != 0

    done = subprocess.run([python, "-m", "skyhive", "launch", "-y", "-d", "-c", "setupenv", str(YAML)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    log = jobq.log_path("setupenv", 1)
    wait_for(lambda: log.exists() and "progress: 1\n" in log.read_text(), timeout=240,
             what="the run to import tqdm and count")
    text = log.read_text()
    assert "running setup" in text and "start counting" in text and "ModuleNotFoundError" not in text
    assert _tqdm_in(purelib) == []  # the user's environment is as it was
    pool_env = home / "work" / "setupenv" / "python-env"
    assert glob.glob(str(pool_env / "lib" / "python*" / "site-packages" / "tqdm")), "tqdm is in the pool's env"

    cancel = subprocess.run([python, "-m", "skyhive", "cancel", "setupenv", "1"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert cancel.returncode == 0, cancel.stderr
    # the documented way into the user's own environment
    own = tmp_path / "own.yaml"
    own.write_text("run: |\n  pip install tqdm\n  python -c 'import tqdm; print(\"from\", tqdm.__file__)'\n")
    mine = subprocess.run([python, "-m", "skyhive", "exec", "setupenv", "--env", "SKYHIVE_SETUP_ENV=user", str(own)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert mine.returncode == 0, mine.stderr
    assert f"from {purelib}" in mine.stdout and _tqdm_in(purelib)
