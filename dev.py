#!/usr/bin/env python3
"""The two commands of the README, with nothing but Python 3.11 installed:

    python3 dev.py demo    # set up .venv and run a real 2-node job on this machine
    python3 dev.py test    # set up .venv with the test extras and run the whole test suite

Extra arguments after `test` go to pytest (`python3 dev.py test -k ssh -x`). Setup is skipped when
pyproject.toml has not changed since the last install (a stamp in .venv).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
# What each command installs. torch is pinned: this exact CPU build is what the tests are run against.
# The demo's set-up also makes `skyhive timeline POOL -o pool.png` work (Pillow, small); the examples
# that need a framework say the one command that installs it (their first lines).
EXTRAS = {"demo": "[timeline]", "test": "[dev,torch,jax,keras,huggingface]"}

#: Printed after the demo: how to reach the CLI and the examples' extras.
NEXT = f"""
The skyhive command is {VENV / "bin" / "skyhive"}: `source .venv/bin/activate` puts `skyhive` on PATH
(or run `.venv/bin/skyhive --help`). Examples that need a framework say the one command that adds it,
e.g. `.venv/bin/python -m pip install -e '.[torch]'` for examples/torch_ddp.py and examples/tasks/."""


def run(*cmd: str | os.PathLike[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def setup(kind: str) -> None:
    if sys.version_info[:2] < (3, 11):
        sys.exit(f"skyhive needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PY.exists():
        run(sys.executable, "-m", "venv", VENV)
    extras = EXTRAS[kind]
    stamp = VENV / f".skyhive-{kind}.stamp"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == digest):
        run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        run(PY, "-m", "pip", "install", "--quiet", "-e", f".{extras}")
        stamp.write_text(digest)
    type_checker_view()


def type_checker_view() -> None:
    """The editable install maps `skyhive.runtime` to `runtime/` (and so on) through an import hook that
    mypy and pyright do not run, so they would not find `skyhive` at all. They do read a PEP 561 stub
    package: `skyhive-stubs/` in the venv's site-packages, made of links to the source (a name with a
    '-' is never imported at run time). Made again on every run: cheap, and new files are seen."""
    for site in (VENV / "lib").glob("python3*/site-packages"):
        view = site / "skyhive-stubs"
        if view.is_symlink() or view.is_file():
            view.unlink()
        elif view.exists():
            shutil.rmtree(view)
        view.mkdir()
        for path in sorted((ROOT / "skyhive").glob("*.py")):
            (view / path.name).symlink_to(path)
        (view / "__init__.pyi").symlink_to(ROOT / "skyhive" / "__init__.py")  # a stub package's top must be .pyi
        for folder in ("runtime", "protocol", "providers", "plugins"):  # pyproject's package-dir
            (view / folder).symlink_to(ROOT / folder, target_is_directory=True)


def system_deps() -> None:
    """sshd and ip for the SSH and network-namespace tests (root only; they skip elsewhere)."""
    script = ROOT / ".ci" / "system-deps.sh"
    if os.geteuid() == 0 and shutil.which("bash"):
        subprocess.run(["bash", str(script)], cwd=ROOT, stdin=subprocess.DEVNULL, check=False)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    kind, rest = argv[0], argv[1:]
    setup(kind)
    if kind == "demo":
        code = subprocess.run([str(PY), "examples/demo.py", *rest], cwd=ROOT).returncode
        print(NEXT, flush=True)
        return code
    system_deps()
    return subprocess.run([str(PY), "-m", "pytest", "-p", "no:cacheprovider", *parallel(rest), *rest],
                          cwd=ROOT).returncode


def parallel(args: list[str]) -> list[str]:
    """pytest-xdist options for the whole suite: most tests wait on real processes (sshd, Slurm,
    workers), so the run uses well under its cores: 3 test processes (`SKYHIVE_TEST_PROCS`) each take whole
    files, and one takes every Slurm test (`--dist loadgroup`, the groups set in tests/conftest.py).
    Nothing is added when the arguments choose themselves (`-n`, `-p no:xdist`) or name tests (`-k`, a
    path)."""
    chosen = any(a.startswith(("-n", "--numprocesses", "--dist", "-k")) or a == "no:xdist" or not a.startswith("-")
                 for a in args)
    if chosen:
        return []
    return ["-n", os.environ.get("SKYHIVE_TEST_PROCS", "3"), "--dist", "loadgroup"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
