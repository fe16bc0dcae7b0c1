#!/usr/bin/env python3
"""The two commands of the README, with nothing but Python 3.11 installed:

    python3 dev.py demo    # set up .venv and run a real 2-node job on this machine
    python3 dev.py test    # set up .venv with the test extras and run the whole test suite

Extra arguments after `test` go to pytest (`python3 dev.py test -k ssh -x`). Setup is skipped when
pyproject.toml and the lock have not changed since the last install (a stamp in .venv).

What the set-up installs is locked: requirements/test.lock pins every package (pip itself, the build
backend, the test extras and everything they pull in), made by uv from pyproject.toml and
requirements/tools.in, so a fresh machine gets what the last green run had. Library users keep
pyproject's ranges; the lock is the project's own set-up. Two more commands move it, on purpose:

    python3 dev.py test --latest [pytest args]
        # the suite against the newest versions the registry serves, in .venv-latest: prints what
        # drifted from the lock, and when the suite passes writes the new lock (review and commit it)
    python3 dev.py lock    # make the lock again from pyproject.toml, keeping every pin it can
                           # (after a dependency was added or a range changed)
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
EXTRAS = {"demo": "[timeline]", "test": "[dev,torch,jax,keras,huggingface,kubernetes]"}

#: Printed after the demo: how to reach the CLI and the examples' extras.
NEXT = f"""
The skyhive command is {VENV / "bin" / "skyhive"}: `source .venv/bin/activate` puts `skyhive` on PATH
(or run `.venv/bin/skyhive --help`). Examples that need a framework say the one command that adds it,
e.g. `.venv/bin/python -m pip install -e '.[torch]'` for examples/torch_ddp.py and examples/tasks/."""


LOCK = ROOT / "requirements" / "test.lock"
#: uv's options for the lock: the project's machines (CPython 3.11 on x86_64 Linux) and every extra the two
#: commands install, with requirements/tools.in (pip, the build backend, uv).
LOCK_INPUTS = ["pyproject.toml", "requirements/tools.in",
               *(f"--extra={e}" for e in sorted({e for x in EXTRAS.values() for e in x.strip("[]").split(",")}))]
LOCK_TARGET = ["--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28"]


def run(*cmd: str | os.PathLike[str], quiet: bool = False, **kw) -> None:
    """Run `cmd` in the checkout, showing it; with `quiet`, its output only when it fails (setuptools'
    9-line "Editable installation ... same name as your package" banner came before the demo's output
    on every first run)."""
    print("+", " ".join(str(c) for c in cmd), flush=True)
    if not quiet:
        subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)
        return
    done = subprocess.run([str(c) for c in cmd], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", **kw)
    if done.returncode != 0:
        sys.stderr.write(done.stdout)
        raise subprocess.CalledProcessError(done.returncode, done.args, output=done.stdout)


def setup(kind: str, venv: Path = VENV, lock: Path = LOCK, force: bool = False) -> None:
    """Make `venv` and install into it what `kind` needs, at the versions of `lock`: the test set-up is
    the whole lock (`-r`), the demo's its extras constrained by it (`-c`). skyhive itself goes in last,
    editable, with no dependencies of its own and no build isolation (its build backend is the lock's)."""
    if sys.version_info[:2] < (3, 11):
        sys.exit(f"skyhive needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    py = venv / "bin" / "python"
    if not py.exists():
        run(sys.executable, "-m", "venv", venv)
    extras = EXTRAS[kind]
    stamp = venv / f".skyhive-{kind}.stamp"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + lock.read_bytes() + extras.encode()).hexdigest()
    if force or not (stamp.exists() and stamp.read_text() == digest):
        pip = (py, "-m", "pip", "install", "--quiet")
        run(*pip, "--upgrade", "-c", lock, "pip")  # the lock's pip, before it installs anything else
        if kind == "test":
            run(*pip, "-r", lock)
            run(*pip, "--no-deps", "--no-build-isolation", "-e", ".", quiet=True)
            run(py, "-m", "pip", "check")  # the lock satisfies every requirement of what it installed
        else:
            run(*pip, "-c", lock, "setuptools", "wheel")
            run(*pip, "-c", lock, "--no-build-isolation", "-e", f".{extras}", quiet=True)
        stamp.write_text(digest)
    type_checker_view(venv)


def find_links() -> list[str]:
    """The pip configuration's find-links (PIP_FIND_LINKS, pip.conf), for uv, which reads neither: on this
    project's machines that is where the pinned CPU build of torch lies."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            links += value.strip("'\"").split()
    return [f"--find-links={link}" for link in dict.fromkeys(links)]


def compile_lock(uv: Path, out: Path, upgrade: bool) -> None:
    """uv makes the lock from pyproject.toml and requirements/tools.in; without `upgrade` it keeps every pin
    of an existing `out` that still fits."""
    run(uv, "pip", "compile", "--quiet", *LOCK_INPUTS, *LOCK_TARGET, *find_links(),
        "--custom-compile-command", "python3 dev.py lock", *(["--upgrade"] if upgrade else []),
        "-o", os.path.relpath(out, ROOT))


def pins(lock: Path) -> dict[str, str]:
    """name → version of each `name==version` line of a lock."""
    found = {}
    for line in lock.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith((" ", "#")):
            found[name.strip().lower()] = version.split(";")[0].strip()
    return found


def drift(old: Path, new: Path) -> list[str]:
    """What moved between two locks, a line each."""
    a, b = pins(old), pins(new)
    return [f"  {name}: {a.get(name, '-')} -> {b.get(name, '-')}"
            for name in sorted(a.keys() | b.keys()) if a.get(name) != b.get(name)]


def lock_again() -> int:
    setup("test")
    compile_lock(VENV / "bin" / "uv", LOCK, upgrade=False)
    print(f"{os.path.relpath(LOCK, ROOT)} made again; `git diff` it and commit", flush=True)
    return 0


def test_latest(rest: list[str]) -> int:
    """The suite against the newest versions: a lock made with --upgrade in .venv-latest, installed there,
    the suite run with it; what moved is printed, and a green run's lock replaces requirements/test.lock."""
    venv = ROOT / ".venv-latest"
    if not (venv / "bin" / "python").exists():
        run(sys.executable, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip", "uv")
    candidate = venv / "test.lock"
    candidate.unlink(missing_ok=True)
    compile_lock(venv / "bin" / "uv", candidate, upgrade=True)
    moved = drift(LOCK, candidate)
    print("newest versions against the lock:", *(moved or ["  nothing moved"]), sep="\n", flush=True)
    setup("test", venv=venv, lock=candidate, force=True)
    system_deps()
    code = pytest(venv, rest)
    if code == 0 and any(not a.startswith("-") or a.startswith("-k") for a in rest):
        print("the chosen tests passed with the newest versions; the lock is written only when the whole suite "
              f"passes (the newest versions are pinned in {os.path.relpath(candidate, ROOT)})", flush=True)
    elif code == 0:
        shutil.copyfile(candidate, LOCK)
        print(f"the suite passed with the newest versions: {os.path.relpath(LOCK, ROOT)} now pins them "
              "(review `git diff requirements/test.lock` and commit it)", flush=True)
    else:
        print(f"the suite failed with the newest versions (exit {code}): the lock is unchanged; the newest "
              f"versions are pinned in {os.path.relpath(candidate, ROOT)}", flush=True)
    print("moved:", *(moved or ["  nothing"]), sep="\n", flush=True)
    return code


def type_checker_view(venv: Path = VENV) -> None:
    """The editable install maps `skyhive.runtime` to `runtime/` (and so on) through an import hook that
    mypy and pyright do not run, so they would not find `skyhive` at all. They do read a PEP 561 stub
    package: `skyhive-stubs/` in the venv's site-packages, made of links to the source (a name with a
    '-' is never imported at run time). Made again on every run: cheap, and new files are seen."""
    for site in (venv / "lib").glob("python3*/site-packages"):
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
    """sshd, ip, Slurm, rclone and chromium for the real-host tests (root only; they skip elsewhere). Under CI
    (CI=true) a package that could not be installed ends the run: a run that skips whole areas is not green."""
    script = ROOT / ".ci" / "system-deps.sh"
    if os.geteuid() == 0 and shutil.which("bash"):
        done = subprocess.run(["bash", str(script)], cwd=ROOT, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0 and os.environ.get("CI") == "true":
            sys.exit(f"system-deps: {script} failed (exit {done.returncode}) under CI: the tests that need "
                     "those packages would skip, so the run stops here")


def pytest(venv: Path, args: list[str]) -> int:
    py = venv / "bin" / "python"
    return subprocess.run([str(py), "-m", "pytest", "-p", "no:cacheprovider", *parallel(args), *args],
                          cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    if argv[:1] == ["lock"]:
        return lock_again()
    if argv[:2] == ["test", "--latest"]:
        return test_latest(argv[2:])
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
    return pytest(VENV, rest)


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
