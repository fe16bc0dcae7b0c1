"""The Local provider honours the Image: this Python when it satisfies every package and pin (the fast
path); otherwise the Image's environment is built once and shared (the default), or, with
`Local(build_env=False)`, the pool is refused naming each package and the version found here — never
run with other versions than asked."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

import skyhive as sky
from skyhive.runtime.bootstrap.here import check_local_image

PYTEST = metadata.version("pytest")


def test_satisfied_pins_and_constraints_pass():
    check_local_image(sky.Image(pip=[f"pytest=={PYTEST}", "pytest>=1", "anyio", 'nothing-here; python_version < "3"']),
                      node=0)


@pytest.mark.parametrize("req, words", [
    ("pytest==1.0.0", f"pytest==1.0.0 (this Python has pytest {PYTEST})"),
    ("pytest<2", f"this Python has pytest {PYTEST}"),
    ("no-such-package-xyz", "no-such-package-xyz (not installed)"),
])
def test_unsatisfied_packages_are_refused_naming_them(req, words):
    with pytest.raises(sky.ProvisionError, match="node 3") as err:
        check_local_image(sky.Image(pip=[req]), node=3)
    assert words in str(err.value)


def test_a_pool_with_a_pin_it_cannot_honour_starts_nothing_when_building_is_off():
    with pytest.raises(sky.ProvisionError, match=r"pytest==1\.0\.0 \(this Python has pytest .*build_env=False"):
        with sky.Pool(provider=sky.Local(build_env=False), image=sky.Image(pip=["pytest==1.0.0"])):
            pass  # pragma: no cover - never reached


def six_here():
    import sys

    import six

    return sys.executable, six.__version__


@pytest.mark.slow
def test_local_builds_the_image_once_and_runs_the_workers_in_it(skyhive_home):
    here = metadata.version("six")
    pin = "six==1.16.0" if here != "1.16.0" else "six==1.15.0"
    image = sky.Image(pip=[pin])
    with sky.Pool(provider=sky.Local(), nodes=2, image=image) as pool:
        first = pool.broadcast(six_here)
        details = {n.detail for n in pool.state.nodes}
    with sky.Pool(provider=sky.Local(), nodes=1, image=image) as pool:
        again = pool.broadcast(six_here)
        cached = {n.detail for n in pool.state.nodes}
    version = pin.split("==")[1]
    assert {v for _, v in first + again} == {version}  # not this Python's six
    assert all(exe.startswith(skyhive_home) for exe, _ in first + again)
    assert any("built" in d or "cached" in d for d in details)  # two nodes, one build (the other waits)
    assert all("cached" in d for d in cached)


def test_local_uses_this_python_when_it_already_satisfies_the_image():
    import sys

    with sky.Pool(provider=sky.Local(), image=sky.Image(pip=[f"pytest=={PYTEST}"])) as pool:
        assert pool.run(lambda: sys.executable) == sys.executable


@pytest.mark.slow
def test_a_failed_build_names_the_package_and_leaves_no_env(skyhive_home):
    import os

    with pytest.raises(sky.ProvisionError, match="no-such-package-xyz"):
        with sky.Pool(provider=sky.Local(), image=sky.Image(pip=["no-such-package-xyz==1.0"])):
            pass  # pragma: no cover - never reached
    envs = os.path.join(skyhive_home, "local-envs", "envs")
    assert [n for n in os.listdir(envs) if not n.endswith(".lock")] == []


@pytest.mark.parametrize("field, words", [
    (dict(apt=["git"]), "Image.apt git (not installed by Local)"),
    (dict(setup=["echo hi"]), "Image.setup (1 command(s), not run by Local)"),
    (dict(python="3.9"), "Image(python='3.9') differs from this Python"),
])
def test_what_only_a_built_environment_does_is_refused_on_the_fast_path(field, words):
    with pytest.raises(sky.ProvisionError) as err:
        check_local_image(sky.Image(**field), node=0)
    assert words in str(err.value)


def import_included():
    import included_helper  # shipped by Image.includes, importable on the worker

    return included_helper.GREETING


@pytest.mark.slow
def test_local_build_runs_setup_and_ships_includes(tmp_path, skyhive_home):
    import pathlib

    (tmp_path / "included_helper.py").write_text("GREETING = 'hi from includes'\n")
    image = sky.Image(setup=["echo built > marker.txt"], includes=[str(tmp_path / "included_helper.py")])
    with sky.Pool(provider=sky.Local(), image=image) as pool:
        assert pool.run(import_included) == "hi from includes"
        assert "local env" in pool.state.nodes[0].detail
    markers = list(pathlib.Path(skyhive_home, "local-envs", "envs").glob("*/files/marker.txt"))
    assert [m.read_text() for m in markers] == ["built\n"]  # the setup command ran, once


# ---- building offline: a wheel made here, an index with nothing in it ------------------------------


def _wheel(where, name: str, version: str) -> None:
    """Write a minimal pure-Python wheel of `name` `version` (a module saying its version) into `where`."""
    import base64
    import hashlib
    import zipfile

    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: skyhive-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def record(path: str, text: str) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        return f"{path},sha256={digest},{len(text.encode())}"

    files[f"{dist}/RECORD"] = "\n".join([*(record(p, t) for p, t in files.items()), f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(where / f"{module}-{version}-py3-none-any.whl", "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)


@pytest.fixture
def offline_index(tmp_path):
    """(find_links dir holding skyhive-probe-pkg 1.2.3 and 2.0.0, an empty simple index URL): pip needs
    no network to build an Image from them."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.2.3", "2.0.0"):
        _wheel(wheels, "skyhive-probe-pkg", version)
    empty = tmp_path / "empty-index"
    empty.mkdir()
    return str(wheels), empty.as_uri()


def probe_version():
    import sys

    import skyhive_probe_pkg

    return sys.executable, skyhive_probe_pkg.VERSION


def progress_of(pool_id: str) -> list[str]:
    from skyhive.runtime.events.log import pool_log_path, read_log
    from skyhive.runtime.events.types import NodeProgress

    return [e.detail for e in read_log(pool_log_path(pool_id)) if isinstance(e, NodeProgress)]


def test_local_builds_a_pinned_package_offline_by_default_and_reuses_it(offline_index, skyhive_home):
    import os

    wheels, index = offline_index
    image = sky.Image(pip=["skyhive-probe-pkg==1.2.3"], find_links=[wheels], pip_indexes=[index])
    with sky.Pool(provider=sky.Local(), nodes=2, image=image) as pool:
        first = pool.broadcast(probe_version)
        details = [n.detail for n in pool.state.nodes]
    steps = progress_of(pool.id)
    assert {v for _, v in first} == {"1.2.3"}  # the pin, not the newer 2.0.0 beside it
    assert all(exe.startswith(skyhive_home) for exe, _ in first)  # the built venv, not this Python
    # one build for both nodes: one "built", the other waited on the lock and found it "cached"
    assert sorted(d.rsplit(" ", 1)[-1] for d in details) == ["built", "cached"], details
    assert "building environment: pip" in steps and "building environment: venv" in steps, steps
    # pip's own progress, per package, as sub-steps of "pip"
    assert any(s.startswith("building environment: pip: ") and "skyhive_probe_pkg-1.2.3" in s for s in steps), steps
    for part in ("local-envs", "local-envs/rt", "local-envs/envs"):  # private, like the whole state dir
        assert oct(os.stat(os.path.join(skyhive_home, part)).st_mode & 0o777) == "0o700", part
    with sky.Pool(provider=sky.Local(), nodes=1, image=image) as pool:
        again = pool.broadcast(probe_version)
        assert pool.state.nodes[0].detail.endswith("cached")
    steps = progress_of(pool.id)
    assert again == [first[0]]  # the same environment, reused
    assert "building environment: pip" not in steps  # nothing rebuilt


def test_a_pin_nothing_offers_fails_naming_the_package_and_leaves_no_env(offline_index, skyhive_home):
    import os

    wheels, index = offline_index
    image = sky.Image(pip=["skyhive-probe-pkg==9.9.9"], find_links=[wheels], pip_indexes=[index])
    with pytest.raises(sky.SetupFailed, match=r"(?s)node 0: building the Image's environment here failed: pip.*"
                                              r"skyhive-probe-pkg==9\.9\.9"):
        with sky.Pool(provider=sky.Local(), image=image):
            pass  # pragma: no cover - never reached
    envs = os.path.join(skyhive_home, "local-envs", "envs")
    assert [n for n in os.listdir(envs) if not n.endswith(".lock")] == []


def test_a_build_past_build_timeout_is_stopped_naming_the_step_and_kept_nowhere(skyhive_home, tmp_path):
    import os

    marker = tmp_path / "still-running"
    image = sky.Image(setup=[f"sleep 30 && touch {marker}"])
    # (the step named is the one running at 2 s: the setup command here, an earlier step — the environment's
    # creation — on a machine loaded enough to take 2 s for it; either way a step is named)
    with pytest.raises(sky.SetupFailed, match=r"longer than 2 s \(Settings.build_timeout\).*step '[^']+'"):
        with sky.Pool(provider=sky.Local(), image=image, build_timeout=2):
            pass  # pragma: no cover - never reached
    envs = os.path.join(skyhive_home, "local-envs", "envs")
    assert [n for n in os.listdir(envs) if not n.endswith(".lock")] == []
    assert not [p for p in _processes() if f"touch {marker}" in p]  # the setup command was killed too


def _processes() -> list[str]:
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                found.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return found


@pytest.mark.anyio
async def test_a_cancelled_build_leaves_no_env_and_no_process(skyhive_home, tmp_path):
    import os

    import anyio

    marker = tmp_path / "cancelled-build"
    image = sky.Image(setup=[f"sleep 30 && touch {marker}"])
    with anyio.move_on_after(3) as scope:
        async with sky.Pool(provider=sky.Local(), image=image):
            pass  # pragma: no cover - never reached
    assert scope.cancelled_caught
    envs = os.path.join(skyhive_home, "local-envs", "envs")
    assert [n for n in os.listdir(envs) if not n.endswith(".lock")] == []
    assert not [p for p in _processes() if f"touch {marker}" in p]


@pytest.fixture
def stalling_index(tmp_path):
    """A simple index on 127.0.0.1 (made here, nothing else is contacted) offering skyhive-probe-pkg
    1.2.3, whose wheel download sends its headers and then stalls until the test ends: a download
    that never finishes, as a multi-gigabyte wheel on a slow link looks."""
    import hashlib
    import http.server
    import threading

    _wheel(tmp_path, "skyhive-probe-pkg", "1.2.3")
    wheel = tmp_path / "skyhive_probe_pkg-1.2.3-py3-none-any.whl"
    body, digest = wheel.read_bytes(), hashlib.sha256(wheel.read_bytes()).hexdigest()
    release = threading.Event()
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            if self.path.rstrip("/") == "/simple/skyhive-probe-pkg":
                page = f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>'.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
            elif self.path.startswith("/files/"):
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:10])
                self.wfile.flush()
                release.wait(120)  # the rest never comes while the test runs
            else:
                self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", asked
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.slow
def test_a_build_stuck_downloading_a_package_is_stopped_naming_that_package(stalling_index, skyhive_home):
    import os

    index, asked = stalling_index
    image = sky.Image(pip=["skyhive-probe-pkg==1.2.3"], pip_indexes=[index])
    # long enough for the venv step under load; the download itself never ends
    with pytest.raises(sky.SetupFailed, match=r"longer than 60 s \(Settings.build_timeout\) and was stopped at "
                                              r"step 'pip' \((collecting|downloading) [^)]*skyhive.probe.pkg"):
        with sky.Pool(provider=sky.Local(), image=image, build_timeout=60):
            pass  # pragma: no cover - never reached
    assert any(path.startswith("/files/skyhive_probe_pkg-1.2.3") for path in asked), asked  # it was downloading
    envs = os.path.join(skyhive_home, "local-envs", "envs")
    assert [n for n in os.listdir(envs) if not n.endswith(".lock")] == []  # nothing half-built kept
    assert not [p for p in _processes() if "pip" in p and index in p]  # and pip is not still running


def test_the_environment_key_ignores_skyhives_per_pool_variables():
    # the jax plugin gives each Local pool a coordinator port of its own (SKYHIVE_JAX_PORT in the
    # Image's env): that must not make each pool build its environment again
    from skyhive.runtime.bootstrap.envkey import env_key

    pool = sky.plugins.PoolView(provider="local", same_machine=True)  # what a Local pool's plugins see
    image = sky.Image(pip=["skyhive-probe-pkg==1.2.3"])
    first, second = (sky.plugins.jax().transform(image, pool) for _ in range(2))
    assert first.env["SKYHIVE_JAX_PORT"] != second.env["SKYHIVE_JAX_PORT"]  # two pools, two ports
    assert env_key(first, "3.11", "python3") == env_key(second, "3.11", "python3")  # one environment
    # the user's own variables still make an environment of their own (setup commands and pip read them)
    for own in ({"PIP_NO_BINARY": ":all:"}, {"SKYHIVE_TEST_FLAVOUR": "warm"}):
        assert env_key(image.with_env(**own), "3.11", "python3") != env_key(image, "3.11", "python3"), own


_TWO_POOLS_CLIENT = """
import sys
import skyhive as sky

def probe():
    import skyhive_probe_pkg
    return skyhive_probe_pkg.VERSION

wheels, index, counter = sys.argv[1:4]
image = sky.Image(pip=["skyhive-probe-pkg==1.2.3"], find_links=[wheels], pip_indexes=[index],
                  setup=[f"echo build >> {counter}"])
if __name__ == "__main__":
    with sky.Pool(provider=sky.Local(), nodes=1, image=image) as pool:
        print("RESULT", pool.run(probe), pool.state.nodes[0].detail.rsplit(" ", 1)[-1])
"""


@pytest.mark.slow
def test_two_pools_building_the_same_environment_at_once_build_it_once(offline_index, skyhive_home, tmp_path):
    import os
    import subprocess
    import sys

    wheels, index = offline_index
    client, counter = tmp_path / "client.py", tmp_path / "builds"
    client.write_text(_TWO_POOLS_CLIENT)
    procs = [subprocess.Popen([sys.executable, str(client), wheels, index, str(counter)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "SKYHIVE_HOME": skyhive_home})
             for _ in range(2)]  # two programs, started together
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    results = sorted(next(ln for ln in out.splitlines() if ln.startswith("RESULT ")) for out, _ in outs)
    assert results == ["RESULT 1.2.3 built", "RESULT 1.2.3 cached"], outs  # one built, the other waited
    assert counter.read_text() == "build\n"  # the setup step ran once: no second build beside the first


@pytest.mark.slow
def test_a_build_longer_than_start_timeout_is_bounded_by_build_timeout_only(skyhive_home, tmp_path):
    # start_timeout (launch, connect, start workers) is far too short for a real build: a build lifts
    # the pool's start deadline, and what follows it gets start_timeout again
    marker = tmp_path / "built"
    image = sky.Image(setup=[f"sleep 14 && touch {marker}"])
    with sky.Pool(provider=sky.Local(), image=image, start_timeout=8, build_timeout=120) as pool:
        assert pool.run(abs, -3) == 3
    assert marker.exists()  # the build ran to its end, past start_timeout


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_build_cancelled_mid_download_leaves_no_env_and_no_pip(stalling_index, skyhive_home):
    import os

    import anyio

    index, asked = stalling_index
    image = sky.Image(pip=["skyhive-probe-pkg==1.2.3"], pip_indexes=[index])

    async def open_pool() -> None:
        async with sky.Pool(provider=sky.Local(), image=image):
            pass  # pragma: no cover - never reached: the download never ends

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_pool)
        with anyio.fail_after(120):  # until pip is inside the wheel's download
            while not any(path.startswith("/files/") for path in asked):
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()
    envs = os.path.join(skyhive_home, "local-envs", "envs")
    assert [n for n in os.listdir(envs) if not n.endswith(".lock")] == []  # the half-built venv is gone
    assert not [p for p in _processes() if "pip" in p and index in p]  # and pip with it


_BUILD_CLIENT = """
import skyhive as sky

if __name__ == "__main__":
    image = sky.Image(setup=["echo one > first.txt", "echo two > second.txt"])
    with sky.Pool(provider=sky.Local(), nodes=1, image=image, output=None) as pool:
        print("RESULT", pool.run(abs, -5), pool.state.nodes[0].detail)
"""


def test_a_local_build_says_each_step_as_a_line_when_stderr_is_no_terminal(skyhive_home, tmp_path):
    # a script whose output goes to a log (a pipe here): no display is drawn, so each step of the
    # build is a line of its own on stderr instead of minutes of silence
    import os
    import subprocess
    import sys

    client = tmp_path / "client.py"
    client.write_text(_BUILD_CLIENT)
    done = subprocess.run([sys.executable, str(client)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "SKYHIVE_HOME": skyhive_home})
    assert done.returncode == 0, done.stderr
    assert "RESULT 5 local env" in done.stdout and done.stdout.rstrip().endswith("built"), done.stdout
    steps = [ln for ln in done.stderr.splitlines() if "building the Image's environment: " in ln]
    assert steps and all(re.fullmatch(r"skyhive: pool \S+ node 0: building the Image's environment: .+", ln)
                         for ln in steps), done.stderr
    said = [ln.split("environment: ", 1)[1] for ln in steps]
    assert "setup 1/2" in said and "setup 2/2" in said, said
    assert said.index("setup 1/2") < said.index("setup 2/2")
    assert "\r" not in done.stderr and "\x1b[" not in done.stderr  # lines, not a spinner
    # built once: a second run uses the cached environment and has no step to say
    again = subprocess.run([sys.executable, str(client)], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path, env={**os.environ, "SKYHIVE_HOME": skyhive_home})
    assert again.returncode == 0 and again.stdout.rstrip().endswith("cached"), (again.stdout, again.stderr)
    assert "setup 1/2" not in again.stderr
