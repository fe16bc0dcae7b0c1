"""The slurmd probe of `providers/slurm_health.py` on loopback sockets: a refused connect, twice in a
row, names the node as lost; a slurmd that accepts, or a refusal not repeated, does not; SlurmdPort is
read from `scontrol show config` once (Slurm's 6818 when it names none). The whole path on a real
cluster is tests/kinds/slurm/test_slurm_node_loss.py."""

from __future__ import annotations

import socket
from collections.abc import Sequence

import pytest

from skyhive.providers.slurm_cmd import Completed, CommandRunner
from skyhive.providers.slurm_health import REFUSALS, NodeHealth, slurmd_port

pytestmark = pytest.mark.anyio


class FakeConfigRunner(CommandRunner):
    """A fake controller that answers only `scontrol show config` (SlurmdPort=`port`), counting the
    asks; `sinfo` lists no node (the controller knows nothing yet)."""

    where = "fake controller"

    def __init__(self, port: int) -> None:
        self.port = port
        self.asked: list[tuple[str, ...]] = []

    async def run(self, argv: Sequence[str], *, timeout: float) -> Completed:
        self.asked.append(tuple(argv))
        if tuple(argv[:3]) == ("scontrol", "show", "config"):
            config = f"SlurmctldPort           = 6817\nSlurmdPort              = {self.port}\n"
            return Completed(tuple(argv), 0, config, "")
        return Completed(tuple(argv), 0, "", "")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once closed: a connect is refused


def test_slurmd_port_is_read_from_the_config_or_slurms_default() -> None:
    assert slurmd_port("SlurmctldPort = 6817\nSlurmdPort = 7000\n") == 7000
    assert slurmd_port("SlurmctldPort = 6817\n") == 6818


async def test_a_refusing_slurmd_names_the_node_lost_after_refusals_in_a_row() -> None:
    port = closed_port()
    runner = FakeConfigRunner(port)
    health = NodeHealth(runner, timeout=5, probe=True, probe_interval=0)
    answers = [await health.problem("n7", "127.0.0.1") for _ in range(REFUSALS)]
    assert answers[:-1] == [None] * (REFUSALS - 1)
    assert answers[-1] == (f"Slurm node n7: its slurmd does not accept connections (refused at 127.0.0.1:{port}); "
                           "the node is lost")
    assert health.lost == {"n7"}
    assert sum(a[:3] == ("scontrol", "show", "config") for a in runner.asked) == 1


async def test_a_slurmd_that_accepts_resets_the_count_and_no_probe_without_probe() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        health = NodeHealth(FakeConfigRunner(port), timeout=5, probe=True, probe_interval=0)
        for _ in range(REFUSALS + 1):
            assert await health.problem("n1", "127.0.0.1") is None
        listener.close()  # now refused: one refusal is not enough
        assert await health.problem("n1", "127.0.0.1") is None
    # Mode 2 (probe=False): a refusing address is never tried
    health = NodeHealth(FakeConfigRunner(closed_port()), timeout=5, probe=False)
    for _ in range(REFUSALS + 1):
        assert await health.problem("n1", "127.0.0.1") is None
    assert health.lost == set()


async def test_a_slurmd_that_accepts_is_probed_once_per_interval_and_a_refusal_is_followed_at_once() -> None:
    """Each accepted probe costs slurmd's log two error lines ("Zero Bytes were transmitted or
    received", seen on the test cluster): while slurmd accepts, one probe per `probe_interval`; once it
    refuses, the next poll probes again, so a dead slurmd is named as soon as without the interval."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        health = NodeHealth(FakeConfigRunner(port), timeout=5, probe=True, probe_interval=3600)
        for _ in range(5):
            assert await health.problem("n1", "127.0.0.1") is None
        accepted = 0
        while True:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                break
            conn.close()
            accepted += 1
        assert accepted == 1
    health = NodeHealth(FakeConfigRunner(closed_port()), timeout=5, probe=True, probe_interval=3600)
    answers = [await health.problem("n2", "127.0.0.1") for _ in range(REFUSALS)]
    assert answers[-1] is not None and "refused" in answers[-1] and health.lost == {"n2"}
