"""Everything skyhive writes is private: directories 0700, files 0600 (0700 when executable), whatever
the umask — the client's state directory (pool logs, named pools, their job logs, the wheels it ships,
Local image environments) and `~/.skyhive` on SSH hosts (runtime, environments, sockets, watchdogs).

Local runs under the loosest umask (0), so nothing can pass by the umask's grace; the SSH host is a
real OpenSSH sshd whose sessions get its own default umask.
"""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

import skyhive as sky
from tests.clusters.test_clusters import skyhive, write
from tests.kinds.ssh.test_ssh_pool import ssh_for

pytestmark = pytest.mark.anyio


def loose(root: Path) -> dict[str, str]:
    """Every path under `root` (and `root`) that others could read: a directory not 0700, a file
    with group or other bits."""
    found = {}
    for where, dirs, files in os.walk(root):
        for path in [where] if where == str(root) else []:
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode != 0o700:
                found["."] = oct(mode)
        for name in dirs + files:
            path = os.path.join(where, name)
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                continue  # a symlink's own mode means nothing (a venv's bin/python)
            if (stat.S_ISDIR(st.st_mode) and mode != 0o700) or mode & 0o077:
                found[os.path.relpath(path, root)] = oct(mode)
    return found


@pytest.fixture
def open_umask():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def answer():
    return 42


TASK = """\
    name: modes
    num_nodes: 2
    resources:
      cloud: local
    setup: |
      echo "setup on node $SKYPILOT_NODE_RANK"
    run: |
      echo "run on node $SKYPILOT_NODE_RANK"
    """


async def test_everything_under_the_state_directory_is_private_under_an_open_umask(tmp_path, skyhive_home,
                                                                                    open_umask):
    home = Path(skyhive_home)
    task = write(tmp_path / "t.yaml", TASK)
    try:
        launched = skyhive("launch", "-y", "-c", "modes", str(task), cwd=tmp_path, timeout=300)
        assert launched.returncode == 0, launched.stderr
        again = skyhive("exec", "modes", str(task), cwd=tmp_path, timeout=300)  # job 2, run by the agent
        assert again.returncode == 0, again.stderr
        assert "run on node 1" in skyhive("logs", "modes", "2", cwd=tmp_path).stdout
        logs = sorted(p.name for p in (home / "clusters" / "modes" / "jobs").glob("*.log"))
        assert logs == ["1.log", "2.log"]
        # a Local pool whose Image needs an environment built here (the runtime wheels and the
        # node-side bootstrap script, as on SSH hosts)
        include = tmp_path / "data.txt"
        include.write_text("shared\n")
        include.chmod(0o644)
        image = sky.Image(setup=["true"], includes=[str(include)])
        async with sky.Pool(provider=sky.Local(), nodes=1, image=image, output=None) as pool:
            assert await pool.run(answer) == 42
        assert list((home / "local-envs" / "envs").glob("*/files/data.txt"))
        assert loose(home) == {}
    finally:
        skyhive("down", "modes", cwd=tmp_path)
    assert loose(home) == {}


def test_a_managed_jobs_files_are_private_under_an_open_umask(tmp_path, skyhive_home, open_umask):
    """`managed/<ID>/`: the events, the task, the controller's lock and log, and the job's log (which was
    created 0644: issue 36, point 12)."""
    import json
    import time

    from skyhive.runtime.control.managed.controller import controller_pid

    task = write(tmp_path / "t.yaml", "resources:\n  cloud: local\nrun: echo managed hello\n")
    launched = skyhive("jobs", "launch", "-y", str(task), cwd=tmp_path, timeout=120)
    assert launched.returncode == 0, launched.stderr
    deadline = time.monotonic() + 120
    while True:
        queue = skyhive("jobs", "queue", "--json", cwd=tmp_path)
        (job,) = map(json.loads, queue.stdout.splitlines())
        if job["state"] == "SUCCEEDED" and controller_pid(1) is None:  # its controller has left
            break
        assert job["state"] not in ("FAILED", "CANCELLED") and time.monotonic() < deadline, job
        time.sleep(0.2)
    folder = Path(skyhive_home) / "managed" / "1"
    assert "managed hello" in (folder / "job.log").read_text()
    assert oct(os.stat(folder / "job.log").st_mode & 0o777) == "0o600"
    assert loose(Path(skyhive_home)) == {}


async def test_the_skyhive_directory_on_an_ssh_host_is_private(sshd_host, tmp_path):
    state = sshd_host.home / ".skyhive"
    for old in (state, state / "rt", state / "envs", state / "run"):  # left open by an older bootstrap
        if old.is_dir():
            old.chmod(0o755)
    include = tmp_path / "data.txt"
    include.write_text("shared\n")
    include.chmod(0o644)
    image = sky.Image(env={"SKYHIVE_TEST_MODES": "1"}, setup=["true"], includes=[str(include)])
    async with sky.Pool(provider=ssh_for(sshd_host), nodes=1, image=image, output=None) as pool:
        assert await pool.run(answer) == 42
        running = loose(state)  # the worker's socket and its directory, while it runs
    assert {name for name in ("rt", "envs", "run") if (state / name).is_dir()} == {"rt", "envs", "run"}
    ours = {p.parent.parent.name for p in state.glob("envs/*/files/data.txt")}
    assert ours
    # the host is shared with the session's other tests: another Image's environment may hold what its
    # user's setup commands made under the login's own umask (docs: they are the user's commands, e.g.
    # tests/kinds/ssh/test_ssh_pool.py's `echo built > marker`) — skyhive's own files are checked there
    # as here, and this Image's environment whole

    def ours_only(found: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in found.items()
                if not (k.startswith("envs/") and k.count("/") >= 2 and k.split("/")[1] not in ours)}

    assert ours_only(running) == {}
    assert ours_only(loose(state)) == {}


def test_a_cloud_pools_key_pair_is_private_under_an_open_umask(skyhive_home, open_umask):
    from skyhive.providers.cloud.keys import pool_key

    private, public = pool_key("pool-modes", create=True)
    assert public.startswith("ssh-ed25519 ")
    assert loose(Path(skyhive_home)) == {}
    assert sorted(p.name for p in private.parent.iterdir()) == ["id_ed25519", "id_ed25519.pub"]


def _tiny_wheel(folder: Path) -> Path:
    """A wheel made here (no index needed) holding an executable file: pip gives such a file
    0o777 & ~umask | 0o111 — 0o711 under the bootstrap's umask 077 — whatever the umask says."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "skytiny-0.1-py3-none-any.whl"
    files = {"skytiny/__init__.py": b"X = 1\n", "skytiny/tool.sh": b"#!/bin/sh\necho hi\n",
             "skytiny-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: skytiny\nVersion: 0.1\n",
             "skytiny-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + "skytiny-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in {**files, "skytiny-0.1.dist-info/RECORD": record.encode()}.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100755 if name.endswith(".sh") else 0o100644) << 16
            zf.writestr(info, data)
    return path


def test_an_environment_the_bootstrap_builds_with_pip_is_private(tmp_path):
    """The node-side bootstrap script (what an SSH or cloud node runs) builds an Image's venv with pip;
    venv and pip set modes of their own (activate scripts 0644, console scripts 0755, a wheel's
    executables 0711), so the script makes the environment private after pip."""
    import importlib.util
    import sys

    from skyhive.runtime.bootstrap import script as script_module

    spec = importlib.util.spec_from_file_location("bootstrap_script_copy", script_module.__file__)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    wheel = _tiny_wheel(tmp_path / "wheels")
    final = tmp_path / "env"
    old = os.umask(0o077)
    script.LOGIN_UMASK = old
    try:
        final.mkdir()  # as the script's `env` makes it, under its umask
        script.build({"pip": ["skytiny"], "python": sys.executable, "pip_indexes": [], "find_links": [str(wheel.parent)],
                      "apt": [], "setup": [], "env": {}}, str(final), None)
    finally:
        os.umask(old)
    installed = list(final.glob("venv/lib/python*/site-packages/skytiny/tool.sh"))
    assert installed and os.stat(installed[0]).st_mode & 0o100  # still executable by its owner
    assert loose(final) == {}
