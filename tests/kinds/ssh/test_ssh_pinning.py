"""Host keys pinned on first contact (no `known_hosts`), and per-node bootstrap progress, against real
OpenSSH (tests/infra).

Pinning (runtime/kinds/ssh/transport.py `SSHTransport._known_hosts`/`_open`, ssh_link.py): without
`known_hosts=` the key a host shows on first contact is pinned for the pool's lifetime. A reconnect
that meets another key raises `HostKeyChanged` inside the transport; the worker link's opener turns
it into `WorkerGone` (retrying cannot help), so the link gives up at once and its reason — the
`HostKeyChanged` message, naming the host — becomes the in-flight call's `WorkerLost` and the
worker's `lost` event. Restarts meet the same refusal and the node ends `failed`.

Progress (runtime/bootstrap/remote.py): each step is a `skyhive.bootstrap` log record
`node N (user@host:port): STEP`, always; on a terminal (`sys.stderr.isatty()`) a rich `Progress`
shows a line per node. The event log only carries the node states (connecting, bootstrapping, ready
with the outcome as detail), not the steps.
"""

from __future__ import annotations

import io
import logging
import re
import secrets
import sys
import time

import anyio
import pytest

import skyhive as sky
from skyhive.providers.ssh import HostKeyChanged
from skyhive.errors import WorkerLost
from skyhive.runtime.events.types import NodeStateChanged, TaskStarted, WorkerStateChanged
from tests.infra.sshd import make_home, process_alive

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def quick(x: int) -> int:
    return x + 1


def sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "woke up"


def unpinned(*servers, **kw) -> sky.SSH:
    """A provider for `servers` with no known_hosts: host keys are pinned on first contact."""
    return sky.SSH(hosts=[f"{s.user}@{s.host}:{s.port}" for s in servers], key=str(servers[0].client_key),
                   connect_timeout=kw.pop("connect_timeout", 10), **kw)


def where(server) -> str:
    return f"{server.user}@{server.host}:{server.port}"


def events(pool, kind):
    return [e for e in pool._runtime.log.recent if isinstance(e, kind)]


# ---- pinning -----------------------------------------------------------------------------------------


async def test_key_rotated_mid_pool_is_refused_and_the_call_fails_naming_the_host(make_sshd):
    server = make_sshd()
    first_key = server.host_public_key
    provider = unpinned(server, reconnect_timeout=30, idle_timeout=15)
    async with sky.Pool(provider=provider, nodes=1, output=None, max_restarts=1, restart_backoff=0.1,
                        wait_for_worker=5) as pool:
        rt = pool._runtime
        transport = rt.nodes[0].transport
        assert await pool.run(quick, 1) == 2
        # pinned on first contact: the key the server really has
        assert transport._pinned is not None
        assert transport._pinned.export_public_key().decode().split()[1] == first_key.split()[1]
        assert transport.connects == 1
        worker_pid = rt.nodes[0].channels[0].pid

        outcome: dict[str, BaseException | object] = {}

        async def in_flight() -> None:
            try:
                outcome["value"] = await pool.run(sleepy, 60)
            except BaseException as exc:  # noqa: BLE001 - recorded and checked below
                outcome["error"] = exc

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(in_flight)
                while not events(pool, TaskStarted):
                    await anyio.sleep(0.05)  # the sleepy task runs on the worker
                new_key = await anyio.to_thread.run_sync(server.rotate_host_key)
                assert new_key.split()[1] != first_key.split()[1]

        assert "value" not in outcome, "the call went on as if the new host key were fine"
        err = outcome["error"]
        assert isinstance(err, WorkerLost), repr(err)
        text = str(err)
        assert where(server) in text, text
        assert "does not match the key it showed on first contact in this pool" in text, text
        assert "refusing to connect" in text, text
        assert err.node == 0

        # never accepted the new key: no connection after the first, the pinned key unchanged
        assert transport.connects == 1
        assert transport._pinned.export_public_key().decode().split()[1] == first_key.split()[1]

        # the worker's lost event carries the host-key reason
        lost = [e for e in events(pool, WorkerStateChanged) if e.state == "lost"]
        assert lost and where(server) in lost[0].detail and "host key does not match" in lost[0].detail, lost
        # restarts meet the same refusal: the node ends failed, and calls say so (no hang)
        with anyio.fail_after(60):
            while rt.nodes[0].state.value != "failed":
                await anyio.sleep(0.1)
        with pytest.raises(WorkerLost):
            with anyio.fail_after(30):
                await pool.run(quick, 1)
    # the orphaned worker (its host now refused) exits by itself once idle
    with anyio.fail_after(40):
        while process_alive(worker_pid):
            await anyio.sleep(0.2)


async def test_pinning_lasts_one_pool_and_known_hosts_with_the_old_key_is_refused(make_sshd):
    server = make_sshd()
    old_known = server.dir / "old_known_hosts"
    old_known.write_text(server.known_hosts_line + "\n")

    async with sky.Pool(provider=unpinned(server), nodes=1, output=None) as pool:
        assert await pool.run(quick, 1) == 2
    new_key = server.rotate_host_key()

    # a new pool pins afresh: the new key is taken on first contact
    async with sky.Pool(provider=unpinned(server), nodes=1, output=None) as pool:
        assert await pool.run(quick, 2) == 3
        pinned = pool._runtime.nodes[0].transport._pinned
        assert pinned.export_public_key().decode().split()[1] == new_key.split()[1]

    # known_hosts holding the old key: refused, naming the host
    provider = unpinned(server, known_hosts=str(old_known))
    with pytest.raises(HostKeyChanged) as err:
        with anyio.fail_after(30):
            async with sky.Pool(provider=provider, nodes=1, output=None):
                pass
    assert isinstance(err.value, sky.ProvisionError)
    assert err.value.host == server.host
    text = str(err.value)
    assert where(server) in text and f"does not match known_hosts {old_known}" in text, text


# ---- progress ----------------------------------------------------------------------------------------


_LINE = re.compile(r"^node (\d+) \((\S+)\): (.*)$")


def steps_by_node(records) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for r in records:
        if r.name != "skyhive.bootstrap":
            continue
        m = _LINE.match(r.getMessage())
        if m:
            out.setdefault(int(m[1]), []).append((m[2], m[3]))
    return out


def in_order(steps: list[str], expected: list[str]) -> bool:
    """`expected` is a subsequence of `steps`."""
    it = iter(steps)
    return all(any(s == want for s in it) for want in expected)


async def test_cold_bootstrap_logs_each_nodes_steps_in_order(make_sshd, ssh_test_env, caplog):
    token = secrets.token_hex(4)
    servers = [make_sshd(home=make_home(ssh_test_env.dir / f"home-{token}-{i}", ssh_test_env.user))
               for i in range(2)]
    for s in servers:
        assert not (s.home / ".skyhive").exists()
    image = sky.Image(env={"PROGRESS_TOKEN": token}, setup=["echo building"])
    caplog.set_level(logging.INFO, logger="skyhive.bootstrap")

    async with sky.Pool(provider=unpinned(*servers), nodes=2, image=image, output=None) as pool:
        assert await pool.broadcast(quick, 1) == [2, 2]
        states = {n: [e.state for e in events(pool, NodeStateChanged) if e.node == n] for n in (0, 1)}
        ready = {e.node: e.detail for e in events(pool, NodeStateChanged) if e.state == "ready"}
    cold = steps_by_node(caplog.records)
    assert sorted(cold) == [0, 1], cold
    for n, server in enumerate(servers):
        assert {w for w, _ in cold[n]} == {where(server)}  # every line names the node's host
        steps = [s for _, s in cold[n]]
        assert in_order(steps, ["connecting", "probing", "uploading skyhive runtime", "runtime: unpack",
                                "building environment", "environment: lock", "environment: setup 1/1"]), steps
        assert re.fullmatch(r"env [0-9a-f]{20} built in \d+\.\d s \(runtime shipped\) \(\d+\.\d\d s\)",
                            steps[-1]), steps
        assert "cached" not in " ".join(steps[:-1]), steps
        assert in_order(states[n], ["connecting", "bootstrapping", "ready"]), states
        assert re.fullmatch(r"env [0-9a-f]{20} built in \d+\.\d s \(runtime shipped\)", ready[n]), ready

    caplog.clear()
    async with sky.Pool(provider=unpinned(*servers), nodes=2, image=image, output=None) as pool:
        ready = {e.node: e.detail for e in events(pool, NodeStateChanged) if e.state == "ready"}
    warm = steps_by_node(caplog.records)
    for n in (0, 1):
        steps = [s for _, s in warm[n]]
        assert steps[:2] == ["connecting", "probing"], steps
        assert "building environment" not in steps and "uploading skyhive runtime" not in steps, steps
        assert re.fullmatch(r"env [0-9a-f]{20} cached \(runtime cached\) \(\d+\.\d\d s\)", steps[-1]), steps
        assert " cached " in ready[n], ready


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_terminal_progress_shows_a_line_per_node(make_sshd, monkeypatch):
    # the pool's provisioning display draws on stderr only when it is a terminal: make it claim to be one
    screen = _Tty()
    monkeypatch.setattr(sys, "stderr", screen)
    servers = [make_sshd(), make_sshd()]
    async with sky.Pool(provider=unpinned(*servers), nodes=2, output=None) as pool:
        assert await pool.broadcast(quick, 1) == [2, 2]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert re.search(r"node \d  bootstrapping: probing", text), text  # an SSH step, drawn as it happened
    for n in range(len(servers)):
        assert re.search(rf"node {n}  ready \(env [0-9a-f]{{20}} (built in|cached)", text), text
    assert f"skyhive: pool {pool.id}: 2 ready (" in text
