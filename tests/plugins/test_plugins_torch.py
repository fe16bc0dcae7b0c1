"""The torch plugin: what it installs (pure), how it sets up a worker, and real DDP on Local pools.

The pool tests run real `torch.distributed` with gloo between worker processes. Only CUDA is faked
(there is no GPU here): the backend choice is checked by calling the hook in this process with
`torch.cuda.is_available` patched and `init_process_group` recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from pathlib import Path

import cloudpickle
import pytest

import skyhive as sky
from skyhive.plugins.image import Image
from skyhive.plugins.torch import (
    RESTART_ENV,
    TorchPlugin,
    WorkerRestarted,
    distributed_env,
    is_cuda,
    rendezvous_listener,
    requirement,
    threads_per_process,
    wheel_index,
)
from skyhive.runtime.events.log import read_log

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import torch_ddp  # noqa: E402  (examples/torch_ddp.py: the seeds' DDP example on sky.Local())

# The observer plugin below is pickled to the workers at pool start: by value, like the test functions.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

CPU = "https://download.pytorch.org/whl/cpu"
VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")


def info(node=0, nodes=2, local_rank=0, ppn=1, port=29555):
    return sky.InstanceInfo(node=node, total_nodes=nodes, head_addr="10.0.0.1", head_port=port,
                            pool_id="p", local_rank=local_rank, processes_per_node=ppn)


# -- what the plugin installs: pure functions -------------------------------------------------


@pytest.mark.parametrize("version, expected", [
    ("latest", "torch"), ("2.3.0", "torch==2.3.0"), (" 2.13.0 ", "torch==2.13.0"), ("2.3.0+cpu", "torch==2.3.0+cpu"),
    ("2.*", "torch==2.*"), (">=2.3", "torch>=2.3"), ("~=2.3", "torch~=2.3"), ("==2.3.0", "torch==2.3.0"),
    (">=2.3,<3", "torch>=2.3,<3"), ("!=2.1.0", "torch!=2.1.0"), ("<3", "torch<3"), (None, None),
])
def test_version_semantics(version, expected):
    assert requirement("torch", version) == expected


@pytest.mark.parametrize("bad", ["", "  ", "newest", "v2.3", "2.3 0", "=2.3"])
def test_a_bad_version_is_refused_naming_the_parameter(bad):
    with pytest.raises(ValueError, match=r"torch\(vision=\.\.\.\)"):
        sky.plugins.torch(vision=bad)


def test_factory_builds_the_package_list_and_refuses_bad_arguments():
    assert TorchPlugin().requirements == ("torch",)
    p = sky.plugins.torch(version="2.3.0", vision="0.18.0", audio=">=2.3")
    assert p.requirements == ("torch==2.3.0", "torchvision==0.18.0", "torchaudio>=2.3")
    for kwargs in ({"backend": "nccl2"}, {"cuda": "12.8"}, {"timeout": 0}):
        with pytest.raises(ValueError):
            sky.plugins.torch(**kwargs)


@pytest.mark.parametrize("accelerator, cuda", [
    (None, False), ("A100", True), ("H100-80GB", True), ("T4", True), ("L4", True), ("L40S", True),
    ("V100", True), ("A10G", True), ("RTX4090", True), ("nvidia-b200", True), ("GH200", True),
    ("TPU-v4", False), ("v5e", False), ("MI300X", False), ("trn1", False), ("inf2", False), ("", False),
    (type("Acc", (), {"cuda": True})(), True), (type("Acc", (), {"cuda": False, "name": "A100"})(), False),
    (type("Acc", (), {"manufacturer": "NVIDIA"})(), True), (type("Acc", (), {"manufacturer": "AMD"})(), False),
])
def test_cuda_detection(accelerator, cuda):
    assert is_cuda(accelerator) is cuda
    assert wheel_index("cu124", accelerator) == ("https://download.pytorch.org/whl/cu124" if cuda else CPU)


def test_transform_adds_packages_and_the_index_for_the_pool_without_clobbering():
    gpu_pool = sky.plugins.PoolView(provider="aws", same_machine=False, accelerator="A100")
    no_accelerator = sky.plugins.PoolView(provider="aws", same_machine=False)

    base = Image(pip=["numpy"], pip_indexes=["file:///opt/pypi/simple"], env={"A": "1"})
    plugin = sky.plugins.torch(vision="latest", cuda="cu124")
    gpu = plugin.transform(base, gpu_pool)
    assert gpu.pip == ("numpy", "torch", "torchvision")
    assert gpu.pip_indexes == ("file:///opt/pypi/simple", "https://download.pytorch.org/whl/cu124")
    assert dict(gpu.env) == {"A": "1"}
    # a pool has no accelerator yet: CPU wheels; applying twice adds nothing twice
    cpu = plugin.transform(plugin.transform(base, no_accelerator), None)
    assert cpu.pip_indexes == ("file:///opt/pypi/simple", CPU) and cpu.pip.count("torch") == 1


def test_distributed_env_follows_instance_info():
    assert distributed_env(info(node=1, nodes=2, local_rank=1, ppn=2)) == {
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29555", "WORLD_SIZE": "4", "RANK": "3",
        "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "1",
    }


def test_threads_divide_the_cores_among_the_processes_sharing_a_host():
    peers = lambda *addrs: tuple(sky.Peer(node=i, addr=a) for i, a in enumerate(addrs))  # noqa: E731
    local = sky.InstanceInfo(node=1, total_nodes=2, head_addr="127.0.0.1", head_port=1, pool_id="p",
                             peers=peers("127.0.0.1", "127.0.0.1"))
    assert threads_per_process(local, cpus=2) == 1 and threads_per_process(local, cpus=16) == 8
    hosts = sky.InstanceInfo(node=1, total_nodes=2, head_addr="10.0.0.1", head_port=1, pool_id="p",
                             peers=peers("10.0.0.1", "10.0.0.2"), processes_per_node=2)
    assert threads_per_process(hosts, cpus=16) == 8 and threads_per_process(hosts, cpus=1) == 1


# -- the worker hook, in this process ----------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    """The variables the hook sets are unset, and restored after the test whatever the hook did."""
    for name in (*VARS, RESTART_ENV):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("cuda_available, backend, expected", [
    (False, None, "gloo"), (True, None, "nccl"), (True, "gloo", "gloo"),
])
def test_backend_choice(clean_env, cuda_available, backend, expected):
    """CUDA is faked here (no GPU): the hook's choice and its init_process_group call are recorded."""
    import torch.distributed as dist

    calls = []
    clean_env.setenv("OMP_NUM_THREADS", str(torch.get_num_threads()))  # leave this process's threads be
    clean_env.setattr(torch.cuda, "is_available", lambda: cuda_available)
    clean_env.setattr(torch.cuda, "device_count", lambda: 2)
    clean_env.setattr(torch.cuda, "set_device", lambda i: calls.append(("set_device", i)))
    clean_env.setattr(dist, "is_initialized", lambda: any(c[0] == "init" for c in calls))
    clean_env.setattr(dist, "init_process_group", lambda **kw: calls.append(("init", kw)))
    clean_env.setattr(dist, "destroy_process_group", lambda: calls.append(("destroy",)))
    # (rank 3 is a store client: recorded, never connected — 10.0.0.1 is no host of this test)
    clean_env.setattr(dist, "TCPStore", lambda *a, **kw: calls.append(("store", a, kw)) or "store")
    with TorchPlugin(backend=backend).around_app(info(node=1, local_rank=1, ppn=2)):
        assert [os.environ[v] for v in VARS] == ["10.0.0.1", "29555", "4", "3", "1", "2", "1"]
    store = [c for c in calls if c[0] == "store"]
    assert [c[1] for c in store] == [("10.0.0.1", 29555, 4)] and store[0][2]["is_master"] is False
    init = {"backend": expected, "store": "store", "rank": 3, "world_size": 4}
    assert calls[-2:] == [("init", init), ("destroy",)]
    assert (("set_device", 1) in calls) is (expected == "nccl")


def test_a_single_process_pool_gets_the_variables_but_no_process_group(clean_env):
    import torch.distributed as dist

    clean_env.setattr(dist, "init_process_group", lambda **kw: pytest.fail("no group for one process"))
    with TorchPlugin().around_app(info(nodes=1)):
        assert os.environ["WORLD_SIZE"] == "1" and os.environ["RANK"] == "0"


def test_a_restarted_worker_refuses_to_rejoin_with_a_clear_error(clean_env):
    clean_env.setenv(RESTART_ENV, "1")
    with pytest.raises(WorkerRestarted, match=r"rank 1 \(node 1, local rank 0\).*cannot re-join.*new one"):
        with TorchPlugin().around_app(info(node=1)):
            pass


# -- real pools ----------------------------------------------------------------------------------


def listeners_on_master_port():
    """(address, port) of every listening TCP socket on MASTER_PORT, from /proc/net/tcp{,6}."""
    port = int(os.environ["MASTER_PORT"])
    found = []
    for name in ("tcp", "tcp6"):
        with open(f"/proc/net/{name}") as fh:
            next(fh)
            for line in fh:
                local, _, st = line.split()[1:4]
                addr, hexport = local.split(":")
                if st == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                    raw = bytes.fromhex(addr)
                    if name == "tcp":
                        found.append(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                    else:  # four little-endian 32-bit words
                        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                        found.append(socket.inet_ntop(socket.AF_INET6, words))
    return sky.instance_info().rank, os.environ["MASTER_ADDR"], port, found


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_rendezvous_store_listens_on_the_pools_address_only():
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.torch()]) as pool:
        seen = await pool.broadcast(listeners_on_master_port)
    rank0 = seen[0]
    assert rank0[0] == 0 and rank0[1] == "127.0.0.1"
    assert rank0[3] == ["127.0.0.1"], f"port {rank0[2]} listens on {rank0[3]}: not only on the pool's address"


def test_the_rendezvous_listener_falls_back_only_for_a_foreign_address():
    sock = rendezvous_listener("127.0.0.1", 0)
    try:
        assert sock is not None and sock.getsockname()[0] == "127.0.0.1"
        sock.listen()
        with pytest.raises(OSError):  # the port is taken: torch would fail the same way
            rendezvous_listener("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()
    assert rendezvous_listener("192.0.2.1", 0) is None  # TEST-NET-1: never an address of this host


class GroupObserver:
    """Listed before the torch plugin, its `around_app` encloses torch's: it counts the calls of
    `init_process_group`/`destroy_process_group` and, after torch's teardown, writes what it saw."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @contextlib.contextmanager
    def around_app(self, info):
        import torch.distributed as dist

        counts = {"init": 0, "destroy": 0}
        real_init, real_destroy = dist.init_process_group, dist.destroy_process_group

        def init(*args, **kwargs):
            counts["init"] += 1
            return real_init(*args, **kwargs)

        def destroy(*args, **kwargs):
            counts["destroy"] += 1
            return real_destroy(*args, **kwargs)

        dist.init_process_group, dist.destroy_process_group = init, destroy
        dist.skyhive_test_counts = counts
        try:
            yield
        finally:
            dist.init_process_group, dist.destroy_process_group = real_init, real_destroy
            seen = {**counts, "initialized_after_teardown": dist.is_initialized(), "pid": os.getpid()}
            Path(self.directory, f"rank{info.rank}.json").write_text(json.dumps(seen))


def group_state():
    import torch
    import torch.distributed as dist

    return {"init": dist.skyhive_test_counts["init"], "initialized": dist.is_initialized(),
            "rank": dist.get_rank(), "world": dist.get_world_size(), "pid": os.getpid(),
            "env": {v: os.environ[v] for v in VARS}, "head_port": sky.instance_info().head_port,
            "threads": (os.environ["OMP_NUM_THREADS"], torch.get_num_threads())}


@pytest.mark.slow
@pytest.mark.anyio
async def test_seed_ddp_example_group_once_per_process_and_destroyed_at_exit(tmp_path):
    plugins = [GroupObserver(str(tmp_path)), sky.plugins.torch()]
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=plugins) as pool:
        # 1. the seeds' DDP example: different data per rank, identical parameters, head-only output
        results = await pool.broadcast(torch_ddp.train, 3, 64, 0.2, capture=True)
        first, second = (r.value for r in results)
        assert [first["rank"], second["rank"]] == [0, 1] and first["world_size"] == 2
        assert first["params"] == second["params"]
        assert not set(first["samples"]) & set(second["samples"])
        assert sorted(first["samples"] + second["samples"]) == list(range(2048))
        assert first["loss"] == second["loss"]  # all_reduce'd metrics agree
        assert [line.split(":")[0] for line in results[0].stdout.splitlines()] == ["Epoch 0", "Epoch 1", "Epoch 2"]
        assert results[1].stdout == ""
        # 3. later calls find the group the first one used, initialized once per process
        states = [await pool.broadcast(group_state) for _ in range(2)]
        for state in states:
            assert [s["init"] for s in state] == [1, 1] and all(s["initialized"] for s in state)
            assert [(s["rank"], s["world"]) for s in state] == [(0, 2), (1, 2)]
        assert [s["pid"] for s in states[0]] == [s["pid"] for s in states[1]]
        # both Local nodes share this machine: its cores are divided between them (unless set)
        threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, len(os.sched_getaffinity(0)) // 2))
        assert [s["threads"] for s in states[0]] == [(threads, int(threads))] * 2
        env = states[0][1]["env"]
        assert env == {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(states[0][1]["head_port"]),
                       "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "1"}
    # ... and destroyed when the pool exits (the observer wrote this after torch's teardown)
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(s["init"], s["destroy"], s["initialized_after_teardown"]) for s in seen] == [(1, 1, False)] * 2
    assert [s["pid"] for s in seen] == [s["pid"] for s in states[0]]


def single_process_view():
    import torch.distributed as dist

    return dist.is_initialized(), os.environ["WORLD_SIZE"], os.environ["RANK"]


@pytest.mark.anyio
async def test_a_one_process_pool_starts_locally_with_the_index_and_skips_the_group():
    # the plugin added the (unreachable here) PyTorch CPU index to the image: Local does not mind
    async with sky.Pool(provider=sky.Local(), nodes=1, plugins=[sky.plugins.torch()]) as pool:
        assert await pool.run(single_process_view) == (False, "1", "0")


def crash_on_rank_1():
    if sky.instance_info().rank == 1:
        os._exit(3)
    return "ok"


def ranks():
    import torch.distributed as dist

    return dist.get_rank()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_worker_restarted_after_a_crash_fails_clearly_instead_of_hanging(skyhive_home):
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.torch()],
                        max_restarts=1, restart_backoff=0.05) as pool:
        assert await pool.broadcast(ranks) == [0, 1]
        with pytest.raises(sky.WorkerLost):
            await pool.broadcast(crash_on_rank_1)
        # the supervisor restarts rank 1; its setup refuses to re-join, and the node is given up
        with pytest.raises(sky.WorkerLost, match="node 1"):
            await pool.broadcast(ranks)
        path = pool.log_path
    lost = [e.detail for e in read_log(path)
            if type(e).__name__ == "WorkerStateChanged" and e.state == "lost" and e.node == 1]
    assert any("WorkerRestarted" in d and "cannot re-join the torch process group" in d for d in lost), lost


@pytest.mark.slow
@pytest.mark.anyio
async def test_after_a_rank_is_lost_the_next_call_carries_the_real_cause():
    # default restart policy: the restarted rank's refusal is final, so it is not retried until
    # the restart budget runs out, and the error says why the node failed
    async with sky.Pool(provider=sky.Local(), nodes=2, plugins=[sky.plugins.torch()], restart_backoff=0.05) as pool:
        assert await pool.broadcast(ranks) == [0, 1]
        with pytest.raises(sky.WorkerLost):
            await pool.broadcast(crash_on_rank_1)
        with pytest.raises(sky.WorkerLost) as lost:
            await pool.broadcast(ranks)
        starts = pool._runtime.nodes[1].starts[0]
    message = str(lost.value)
    assert "node 1" in message and "WorkerRestarted" in message, message
    assert "cannot re-join the torch process group" in message, message
    assert "worker losses within" not in message, message
    assert isinstance(lost.value.__cause__, WorkerRestarted), repr(lost.value.__cause__)
    assert starts == 2  # started once, restarted once: the refusal was not retried


def test_on_local_the_wheel_index_follows_this_machine_not_the_accelerator_asked(monkeypatch):
    # seed 003's `accelerator="A100"` on Local: no A100 here (Local warns), so a build must not fetch
    # CUDA wheels for a CPU machine; a machine whose nvidia-smi lists a GPU gets them even unasked
    import skyhive.providers.accelerators as accelerators
    from skyhive.plugins import PoolView

    plugin = sky.plugins.torch(cuda="cu124")
    asked_a100 = PoolView(provider="local", same_machine=True, accelerator="A100")
    monkeypatch.setattr(accelerators, "local_devices", lambda: ())
    assert plugin.transform(Image(), asked_a100).pip_indexes == (CPU,)
    monkeypatch.setattr(accelerators, "local_devices", lambda: ("NVIDIA L4",))
    unasked = PoolView(provider="local", same_machine=True, accelerator=None)
    assert plugin.transform(Image(), unasked).pip_indexes == ("https://download.pytorch.org/whl/cu124",)
    # elsewhere the accelerator asked for decides, as before
    ssh_a100 = PoolView(provider="ssh", same_machine=False, accelerator="A100")
    assert plugin.transform(Image(), ssh_a100).pip_indexes == ("https://download.pytorch.org/whl/cu124",)
