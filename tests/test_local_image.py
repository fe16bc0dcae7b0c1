"""The Local provider honours the Image: it runs only when this Python satisfies every package and
pin (the fast path), and otherwise refuses naming each package and the version found here — never
runs with other versions than asked."""

from __future__ import annotations

from importlib import metadata

import pytest

import skyhive as sky
from skyhive.runtime.bootstrap.local import check_local_image

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


def test_a_pool_with_a_pin_it_cannot_honour_starts_nothing():
    with pytest.raises(sky.ProvisionError, match=r"pytest==1\.0\.0"):
        with sky.Pool(provider=sky.Local(), image=sky.Image(pip=["pytest==1.0.0"])):
            pass  # pragma: no cover - never reached


def six_here():
    import sys

    import six

    return sys.executable, six.__version__


@pytest.mark.slow
def test_build_env_builds_the_image_once_and_runs_the_workers_in_it(skyhive_home):
    here = metadata.version("six")
    pin = "six==1.16.0" if here != "1.16.0" else "six==1.15.0"
    image = sky.Image(pip=[pin])
    with sky.Pool(provider=sky.Local(build_env=True), nodes=2, image=image) as pool:
        first = pool.broadcast(six_here)
        details = {n.detail for n in pool.state.nodes}
    with sky.Pool(provider=sky.Local(build_env=True), nodes=1, image=image) as pool:
        again = pool.broadcast(six_here)
        cached = {n.detail for n in pool.state.nodes}
    version = pin.split("==")[1]
    assert {v for _, v in first + again} == {version}  # not this Python's six
    assert all(exe.startswith(skyhive_home) for exe, _ in first + again)
    assert any("built" in d or "cached" in d for d in details)  # two nodes, one build (the other waits)
    assert all("cached" in d for d in cached)


def test_build_env_uses_this_python_when_it_already_satisfies_the_image():
    import sys

    with sky.Pool(provider=sky.Local(build_env=True), image=sky.Image(pip=[f"pytest=={PYTEST}"])) as pool:
        assert pool.run(lambda: sys.executable) == sys.executable


@pytest.mark.slow
def test_a_failed_build_names_the_package_and_leaves_no_env(skyhive_home):
    import os

    with pytest.raises(sky.ProvisionError, match="no-such-package-xyz"):
        with sky.Pool(provider=sky.Local(build_env=True), image=sky.Image(pip=["no-such-package-xyz==1.0"])):
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
def test_build_env_runs_setup_and_ships_includes(tmp_path, skyhive_home):
    import pathlib

    (tmp_path / "included_helper.py").write_text("GREETING = 'hi from includes'\n")
    image = sky.Image(setup=["echo built > marker.txt"], includes=[str(tmp_path / "included_helper.py")])
    with sky.Pool(provider=sky.Local(build_env=True), image=image) as pool:
        assert pool.run(import_included) == "hi from includes"
        assert "local env" in pool.state.nodes[0].detail
    markers = list(pathlib.Path(skyhive_home, "local-envs", "envs").glob("*/files/marker.txt"))
    assert [m.read_text() for m in markers] == ["built\n"]  # the setup command ran, once
