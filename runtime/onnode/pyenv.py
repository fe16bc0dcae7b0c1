"""A Local pool's own Python environment: where a task's `setup` installs, so that a task file cannot
change the user's environment (standard library only: it runs in the workers).

SkyPilot's habit is `setup: pip install tqdm`. On a cloud machine that is the machine's Python; on Local
the machine is the user's, and the worker's Python is the user's (often an activated venv): a plain
`pip install` there changed it. So the scripts of a Local pool's tasks (`nodecmd.run_script` with
`own_home`) run with this environment first on `PATH` and as `VIRTUAL_ENV`:

- a venv of the pool's own (`python -m venv`'s builder, no pip copied in: made in a few tens of
  milliseconds), under the pool's working directory, made once and shared by the pool's nodes (a lock);
- the user's packages visible read-only: a `.pth` adds the worker's own site-packages (with the `.pth`
  files in them: editable installs), after the venv's own, so `import torch` finds the user's torch
  without copying it and what setup installs comes first;
- `pip` is the user's pip run by the venv's Python (`python -m pip`): it installs into the venv, says
  "already satisfied" for what the user has, and never uninstalls outside the venv (pip's own rule
  for a virtual environment); where the user has no pip, `ensurepip` puts one in the venv (offline).

A task opts into the user's own environment with `SKYHIVE_SETUP_ENV=user` in its `envs` (or `--env`):
then `python` and `pip` are the worker's, as before (docs/cli.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

__all__ = ["OPT_OUT_ENV", "pool_env", "uses_pool_env"]

#: The variable (in the task's envs) that runs setup and run in the user's own environment instead.
OPT_OUT_ENV = "SKYHIVE_SETUP_ENV"
_READY = ".skyhive-ready"


def uses_pool_env(env: dict[str, str]) -> bool:
    """False when the task asked for the user's own environment (`SKYHIVE_SETUP_ENV=user`)."""
    return env.get(OPT_OUT_ENV, "").strip().lower() != "user"


def pool_env(path: Path) -> Path:
    """The environment at `path`, made on first use (by one node; the others wait on its lock)."""
    if (path / _READY).exists():
        return path
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.parent / f".{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if (path / _READY).exists():
            return path
        shutil.rmtree(path, ignore_errors=True)
        _make(path)
        _private(path)  # (under the state directory everything is the user's alone, whatever the umask)
        (path / _READY).touch(mode=0o600)
    finally:
        os.close(fd)
    return path


def _private(root: Path) -> None:
    for where, dirs, files in os.walk(root):
        os.chmod(where, 0o700)
        for name in files:
            full = os.path.join(where, name)
            if not os.path.islink(full):
                os.chmod(full, os.stat(full).st_mode & 0o700)


def _make(path: Path) -> None:
    shared = [p for p in site.getsitepackages() if os.path.isdir(p)]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        shared.append(site.getusersitepackages())
    venv.EnvBuilder(system_site_packages=True, symlinks=True, with_pip=False).create(str(path))
    python = path / "bin" / "python"
    found = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True, timeout=60)
    own = Path(found.stdout.strip())
    own.mkdir(parents=True, exist_ok=True)
    # (a .pth line that starts with `import` is run: addsitedir also reads the .pth files there)
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in shared)
    (own / "_skyhive_user_packages.pth").write_text(lines)
    has_pip = subprocess.run([str(python), "-c", "import pip"], capture_output=True, timeout=60).returncode == 0
    if not has_pip:
        subprocess.run([str(python), "-m", "ensurepip", "--default-pip"], capture_output=True, check=True,
                       timeout=300)
        return
    for name in ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}"):
        shim = path / "bin" / name
        with contextlib.suppress(FileNotFoundError):
            shim.unlink()
        shim.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
        shim.chmod(0o755)
