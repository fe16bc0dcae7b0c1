"""The simulated worker's edges: output per node through the thread's shared streams, plugins' exit
stack made on use, and none of a worker process's parts built per node."""

from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path

import anyio

import skyhive as sky
from skyhive.runtime.worker.capture import FLUSH_SIZE, TaskStream

_BIG = FLUSH_SIZE + 5000  # one print larger than the buffer: sent while the task still runs


def _talk() -> int:
    node = sky.instance_info().node
    print(f"node {node} says hello")
    sys.stderr.write(f"node {node} warns\n")
    if node % 50 == 7:
        print("x" * _BIG)  # flushed mid-task, then more text after it
        print(f"node {node} after the big one")
    return node


def _expected_stdout(node: int) -> str:
    text = f"node {node} says hello\n"
    if node % 50 == 7:
        text += "x" * _BIG + "\n" + f"node {node} after the big one\n"
    return text


def test_every_nodes_output_arrives_as_its_own() -> None:
    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(), nodes=200) as pool:
            for _ in range(2):  # a second round: nothing of the first is left in the shared streams
                captured = await pool.broadcast(_talk, capture=True)
                assert [c.value for c in captured] == list(range(200))
                assert [c.node for c in captured] == list(range(200))
                for c in captured:
                    assert c.stdout == _expected_stdout(c.node)
                    assert c.stderr == f"node {c.node} warns\n"
            one = await pool.run(_talk, capture=True)
            assert one.stdout == _expected_stdout(one.node)
            assert one.stderr == f"node {one.node} warns\n"

    anyio.run(main)


class _Recorder:
    """A plugin with `around_app`: writes one line per worker when it is set up and torn down."""

    def __init__(self, path: str) -> None:
        self.path = path

    @contextlib.contextmanager
    def around_app(self, info):
        with open(self.path, "a") as fh:
            fh.write(f"up {info.node}\n")
        try:
            yield
        finally:
            with open(self.path, "a") as fh:
                fh.write(f"down {info.node}\n")


def test_plugin_teardown_runs_on_every_simulated_node_at_close(tmp_path: Path) -> None:
    record = tmp_path / "record.txt"

    async def main() -> None:
        async with sky.Pool(provider=sky.Simulated(), nodes=30, plugins=[_Recorder(str(record))]) as pool:
            assert await pool.broadcast(_one) == [1] * 30
            assert sorted(record.read_text().split("\n")[:-1]) == sorted(f"up {i}" for i in range(30))
        lines = record.read_text().split("\n")[:-1]
        assert sorted(line for line in lines if line.startswith("down")) == sorted(f"down {i}" for i in range(30))

    anyio.run(main)


def _one() -> int:
    return 1


def test_simulated_nodes_build_no_output_streams_of_their_own() -> None:
    """A simulated node's worker shares its thread's stdout/stderr pair: the capture streams (each a
    queue, a lock and a decoder) do not grow with the nodes."""

    async def streams_with(nodes: int) -> int:
        async with sky.Pool(provider=sky.Simulated(), nodes=nodes) as pool:
            assert await pool.broadcast(_one) == [1] * nodes
            gc.collect()
            # (by exact type: isinstance on an ABC touches every object's __class__, and a deprecated
            # torch object warns when touched)
            return sum(type(o) is TaskStream for o in gc.get_objects())

    async def main() -> None:
        assert await streams_with(300) == await streams_with(3)

    anyio.run(main)
