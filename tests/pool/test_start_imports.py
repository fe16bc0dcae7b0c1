"""A short script pays for what it uses (issue 41): what a plain Local pool and its workers never need
is never imported. Each check runs in a fresh interpreter, so nothing another test imported counts.

How long the start takes is measured in bench/ (`bench/script_life.py`, the `cold` row), not here: this
holds the structural part of that figure, which a timing cannot (a module that creeps back into the
worker's start costs a millisecond or two a worker, far below what a loaded machine's noise shows).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: never imported by a worker's start: loaded on first use by what needs them
WORKER_NEVER = ("ctypes", "concurrent.futures", "json", "socketserver", "tempfile", "skyhive.plugins",
                "importlib.metadata", "socket")  # (socket: the shared-memory inbox makes its socket on first use)
#: never imported by a client that opens and closes a plain Local pool (no Image, no mounts, no plugins)
CLIENT_NEVER = ("socketserver", "tempfile", "shutil", "skyhive.runtime.storage", "skyhive.runtime.bootstrap.here",
                "skyhive.runtime.bootstrap.envkey", "importlib.metadata", "packaging", "tomllib", "skyhive.providers.volumes",
                "skyhive.plugins")


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (listed without importing anything)."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('@@' + ' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.rsplit("@@", 1)[1].split())


def test_a_worker_starts_without_what_only_some_tasks_need() -> None:
    loaded = _modules_after("import skyhive.runtime.worker.serve")
    assert "skyhive.protocol.codec" in loaded  # (the check itself imported the worker)
    assert not [name for name in WORKER_NEVER if name in loaded]


def test_a_plain_local_pool_imports_only_what_it_uses() -> None:
    loaded = _modules_after(
        "import skyhive as sky\n"
        "def nop(): return 1\n"
        "with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:\n"
        "    assert pool.run(nop) == 1\n"
    )
    assert "skyhive.runtime.actors.pool_actor" in loaded
    assert not [name for name in CLIENT_NEVER if name in loaded]


@pytest.mark.parametrize("name", ["torch", "jax", "keras", "huggingface", "joblib", "sklearn"])
def test_the_plugins_still_come_as_factories(name: str) -> None:
    import skyhive as sky

    assert callable(getattr(sky.plugins, name))


def test_a_worker_reads_its_instance_info_when_a_task_asks() -> None:
    """`COMPUTE_POOL` is parsed on first use (not at the worker's start), and a task's answer is the
    pool's: node index and node count as the client set them."""
    import skyhive as sky

    def where() -> tuple[int, int]:
        info = sky.instance_info()
        return info.node, info.total_nodes

    with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:
        assert sorted(pool.broadcast(where)) == [(0, 2), (1, 2)]


def test_preload_imports_everything_a_plain_pool_start_and_close_import() -> None:
    """`sky.preload()` (runtime/preload.py) is what a service calls at its start so its first pool's start
    does not pay the runtime's import: after it, opening, using and closing a plain Local pool — blocking or
    under `asyncio.run` — imports no further skyhive module."""
    out = subprocess.run([sys.executable, "-c", (
        "import asyncio, sys, skyhive as sky\n"
        "sky.preload()\n"
        "before = {m for m in sys.modules if m.startswith('skyhive')}\n"
        "def nop(): return 1\n"
        "with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:\n"
        "    assert pool.run(nop) == 1\n"
        "async def main():\n"
        "    async with sky.Pool(provider=sky.Local(), nodes=2, output=None) as pool:\n"
        "        assert await pool.run(nop) == 1\n"
        "asyncio.run(main())\n"
        "print('@@' + ' '.join(sorted({m for m in sys.modules if m.startswith('skyhive')} - before)))\n")],
        capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.rsplit("@@", 1)[1].split() == []


def test_preload_starts_nothing_and_can_be_called_again() -> None:
    out = subprocess.run([sys.executable, "-c", (
        "import os, skyhive as sky\n"
        "sky.preload(); sky.preload()\n"
        "kids = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1] == str(os.getpid())]\n"
        "print('@@', len(os.listdir(f'/proc/{os.getpid()}/task')), kids)\n")],
        capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.rsplit("@@", 1)[1].split() == ["1", "[]"]  # one thread, no child process
