"""The jax plugin: the `JAX_*` variables, and a real two-process JAX runtime on a Local pool."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

import skyhive as sky
from skyhive.plugins.jax import PORT_ENV, check_port_free, coordinator_port, jax_env
from skyhive.plugins.torch import RESTART_ENV, WorkerRestarted

pytest.importorskip("jax")


def info(node=0, nodes=2, local_rank=0, ppn=1, accelerators=0):
    return sky.InstanceInfo(node=node, total_nodes=nodes, head_addr="10.0.0.1", head_port=29555, pool_id="p",
                            local_rank=local_rank, processes_per_node=ppn, accelerators=accelerators)


def test_jax_env_follows_instance_info():
    assert jax_env(info(node=1, local_rank=1, ppn=2), 29556) == {
        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:29556",
        "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3", "JAX_LOCAL_DEVICE_COUNT": "1",
    }
    assert jax_env(info(accelerators=8, ppn=2), 1)["JAX_LOCAL_DEVICE_COUNT"] == "4"
    # head_port is torch's: the coordinator takes head_port + 1 unless the image says otherwise
    assert coordinator_port(info(), {}) == 29556 and coordinator_port(info(), {PORT_ENV: "4000"}) == 4000


def test_transform_adds_jax_and_on_local_pools_a_free_coordinator_port():
    image = sky.plugins.jax().transform(sky.Image(pip=["numpy"]), None)
    assert image.pip == ("numpy", "jax") and PORT_ENV not in image.env  # not Local: head_port + 1
    assert sky.plugins.jax(package="jax[cuda12]").transform(sky.Image(), None).pip == ("jax[cuda12]",)
    local = sky.plugins.PoolView(provider="local", same_machine=True, nodes=2)
    port = int(sky.plugins.jax().transform(sky.Image(), local).env[PORT_ENV])
    check_port_free(port)
    given = sky.Image(env={PORT_ENV: "4321"})
    assert sky.plugins.jax().transform(given, local).env[PORT_ENV] == "4321"
    for kwargs in ({"package": ""}, {"timeout": 0}):
        with pytest.raises(ValueError):
            sky.plugins.jax(**kwargs)


def test_a_restarted_worker_refuses_to_rejoin(monkeypatch):
    monkeypatch.setenv(RESTART_ENV, "2")
    monkeypatch.delenv(PORT_ENV, raising=False)
    for name in jax_env(info(), 1):
        monkeypatch.setenv(name, "")  # recorded, so the hook's values are undone after the test
    with pytest.raises(WorkerRestarted, match=r"2 restart\(s\).*cannot re-join the jax process group"):
        with sky.plugins.jax().around_app(info(node=1)):
            pass


def gather_from_every_process(tag):
    import jax
    from jax.experimental import multihost_utils

    mine = np.array([jax.process_index() * 100 + tag, os.getpid()], dtype=np.int64)
    return {
        "count": jax.process_count(),
        "index": jax.process_index(),
        "devices": len(jax.devices()),
        "gathered": multihost_utils.process_allgather(mine).tolist(),
        "env": {k: os.environ[k] for k in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS")},
        "head_port": sky.instance_info().head_port,
        "pid": os.getpid(),
    }


@pytest.mark.slow
@pytest.mark.anyio
async def test_two_nodes_form_one_jax_runtime_with_working_collectives():
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.jax()]) as pool:
        first = await pool.broadcast(gather_from_every_process, 1)
        second = await pool.broadcast(gather_from_every_process, 2)  # initialized once, still working
    pids = [r["pid"] for r in first]
    assert [r["pid"] for r in second] == pids and len(set(pids)) == 2
    for results, tag in ((first, 1), (second, 2)):
        assert [(r["count"], r["index"], r["devices"]) for r in results] == [(2, 0, 2), (2, 1, 2)]
        for r in results:  # every process holds both processes' data
            assert r["gathered"] == [[tag, pids[0]], [100 + tag, pids[1]]]
    address = {r["env"]["JAX_COORDINATOR_ADDRESS"] for r in first}
    assert len(address) == 1 and address != {f"127.0.0.1:{first[0]['head_port']}"}  # not torch's port
    assert [(r["env"]["JAX_NUM_PROCESSES"], r["env"]["JAX_PROCESS_ID"]) for r in first] == [("2", "0"), ("2", "1")]


@pytest.mark.anyio
async def test_a_taken_coordinator_port_fails_the_start_at_once_instead_of_hanging():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        image = sky.Image(env={PORT_ENV: str(port)})
        with pytest.raises(sky.ProvisionError, match=f"port {port} on the head node is in use"):
            async with sky.Pool(provider=sky.Local(), nodes=2, image=image, plugins=[sky.plugins.jax()]):
                pass
