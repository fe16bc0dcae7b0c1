"""skyhive's state directory is private: created 0700, with every directory under it 0700 and every
file 0600, whatever the umask."""

from __future__ import annotations

import os
import stat

import pytest

import skyhive as sky
from skyhive.paths import private_dir, state_dir
from skyhive.runtime.onnode import nodecmd

pytestmark = pytest.mark.anyio


def task():
    return 42


def modes(root):
    found = {}
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(where, name)
            found[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


@pytest.fixture
def fresh_home(tmp_path, monkeypatch):
    """A SKYHIVE_HOME that does not exist yet (nor its parent), under the loosest umask."""
    home = tmp_path / "not-yet" / "skyhive-home"
    monkeypatch.setenv("SKYHIVE_HOME", str(home))
    old = os.umask(0)
    try:
        yield home
    finally:
        os.umask(old)


async def test_a_pool_creates_the_state_directory_private(fresh_home):
    async with sky.Pool(nodes=1, output=None) as pool:
        assert await pool.run(task) == 42
    assert stat.S_IMODE(fresh_home.stat().st_mode) == 0o700
    found = modes(fresh_home)
    assert found, "the pool wrote nothing under SKYHIVE_HOME"
    loose = {path: oct(mode) for path, mode in found.items()
             if mode & 0o077 or (mode != 0o700 and (fresh_home / path).is_dir())}
    assert not loose, loose
    assert stat.S_IMODE((fresh_home / "pools").stat().st_mode) == 0o700


def test_every_directory_skyhive_makes_under_it_is_0700(fresh_home, monkeypatch):
    assert state_dir() == fresh_home and not fresh_home.exists()
    keys = private_dir("cloud", "pool-1")
    monkeypatch.setattr(nodecmd, "instance_info", lambda: type("Info", (), {"node": 0})())
    work = nodecmd.prepare("pool-1", None)
    assert keys == fresh_home / "cloud" / "pool-1"
    dirs = [fresh_home, fresh_home / "cloud", keys, fresh_home / "work", fresh_home / "work" / "pool-1", work]
    assert {str(d): oct(stat.S_IMODE(os.stat(d).st_mode)) for d in dirs} == {str(d): "0o700" for d in dirs}


def test_private_dir_refuses_a_path_instead_of_a_name(fresh_home):
    for bad in ("a/b", "..", ""):
        with pytest.raises(ValueError, match="not a single directory name"):
            private_dir("cloud", bad)
    assert not (fresh_home / "a").exists()
