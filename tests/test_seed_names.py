"""The seeds' spellings: `ComputePool`/`Compute`, `@sky.function`, accelerators and machine sizes flowing
into the provider's `ClusterSpec`, the Local warning for a missing accelerator, `PipIndex`, the
InstanceInfo names, and the call sugar that never takes the user's own arguments."""

from __future__ import annotations

import time
import warnings

import anyio
import pytest

import skyhive as sky
from skyhive.providers.accelerators import Accelerator, devices_from_smi, mismatch, parse
from skyhive.providers.base import ClusterSpec
from skyhive.providers.local import Local

LIMIT = 120


class RecordingLocal(Local):
    """The Local provider, keeping the `ClusterSpec` it was asked for (a test double over the real one)."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: list[ClusterSpec] = []

    async def launch(self, spec, nodes):
        self.specs.append(spec)
        return await super().launch(spec, nodes)


@sky.compute
def fetch(url, timeout=10, output="default", capture=False):
    return (url, timeout, output, capture)


@sky.function
def where():
    info = sky.instance_info()
    return {
        "node": info.node, "worker": info.worker, "workers_per_node": info.workers_per_node,
        "global_worker_index": info.global_worker_index, "total_workers": info.total_workers,
        "job_id": info.job_id, "pool_id": info.pool_id, "hostname": info.hostname,
        "accelerators": info.accelerators, "accelerator": info.accelerator,
        "total_accelerators": info.total_accelerators, "network": info.network,
        "peers": [(p["node"], p["private_ip"], p.get("public_ip")) for p in info.peers],
    }


def slow(x, seconds):
    import time

    time.sleep(seconds)
    return x


def test_seed_pool_names_are_the_pool():
    assert sky.ComputePool is sky.Pool and sky.Compute is sky.Pool
    assert sky.function is sky.compute


@pytest.mark.parametrize("given, name, count", [
    ("A100", "A100", 1), ("A100:8", "A100", 8), ("h100 : 2", "H100", 2), ("MyChip", "MyChip", 1),
    (sky.accelerators.T4(), "T4", 1), (sky.accelerators.H100(count=4), "H100", 4),
    (sky.accelerators.L4(), "L4", 1), (sky.accelerators.A100(memory="40GB"), "A100", 1),
])
def test_accelerator_spellings(given, name, count):
    acc = parse(given)
    assert (acc.name, acc.count) == (name, count)
    assert str(acc) == (name if count == 1 else f"{name}:{count}")


def test_accelerator_objects_carry_what_plugins_read():
    assert sky.accelerators.A100(memory="40GB").memory_gb == 40
    assert sky.accelerators.T4().cuda and not sky.accelerators.MI300X().cuda
    from skyhive.plugins.torch import wheel_index

    assert wheel_index("cu128", sky.accelerators.T4()).endswith("/cu128")
    assert wheel_index("cu128", sky.accelerators.MI300X()).endswith("/cpu")


@pytest.mark.parametrize("bad, error, words", [
    ("A100:x", ValueError, "A100:x"), ("", ValueError, "model name"), (8, TypeError, "int"),
    (sky.accelerators.Custom("X", count=1), None, None),
])
def test_bad_accelerators_are_refused_naming_them(bad, error, words):
    if error is None:
        assert parse(bad).name == "X"
        return
    with pytest.raises(error, match=words):
        sky.Pool(accelerator=bad)


def test_bad_machine_sizes_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="vcpus"):
        sky.Pool(vcpus=0)
    with pytest.raises(ValueError, match="memory_gb"):
        sky.Pool(memory_gb=-1)
    with pytest.raises(ValueError, match="allocation='sometimes'"):
        sky.Pool(allocation="sometimes")
    with pytest.raises(ValueError, match="count"):
        sky.accelerators.A100(count=0)


def test_missing_accelerator_message_names_request_and_devices():
    devices = devices_from_smi(["GPU 0: Tesla T4 (UUID: GPU-1234)", "junk"])
    assert devices == ("Tesla T4",)
    assert mismatch(parse("T4"), devices, where="n") is None
    text = mismatch(parse("A100:2"), devices, where="SSH host h1")
    assert "SSH host h1" in text and "'A100:2'" in text and "Tesla T4" in text
    assert mismatch(parse("T4:2"), devices, where="n") is not None  # one T4 is not two
    assert "no GPU" in mismatch(Accelerator(name="H100"), (), where="n")


@pytest.mark.anyio
async def test_machine_choice_reaches_the_provider_and_local_warns_naming_devices():
    provider = RecordingLocal()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # (cpus and memory this machine has: Local refuses what it lacks, tests/kinds/local/test_local_requirements.py)
        async with sky.ComputePool(provider=provider, nodes=2, accelerator="A100:8", vcpus=1, memory_gb=0.5,
                                   allocation="spot-if-available") as pool:
            with anyio.fail_after(LIMIT):
                infos = await (where() @ pool)
    spec = provider.specs[0]
    assert (spec.accelerator, spec.cpus, spec.memory_gb, spec.allocation, spec.spot) == (
        "A100:8", 1.0, 0.5, "spot-if-available", None)
    messages = [str(w.message) for w in caught if issubclass(w.category, sky.AcceleratorWarning)]
    assert len(messages) == 1 and "'A100:8'" in messages[0] and "Local" in messages[0]
    assert [i["node"] for i in infos] == [0, 1]  # it ran anyway, on what this machine has


@pytest.mark.anyio
@pytest.mark.parametrize("allocation, spot", [("spot", True), ("on-demand", False), ("cheapest", None)])
async def test_allocation_maps_to_spot(allocation, spot):
    provider = RecordingLocal()
    async with sky.Compute(provider=provider, allocation=allocation):
        pass
    assert (provider.specs[0].allocation, provider.specs[0].spot) == (allocation, spot)


def test_pip_index_is_an_image_index():
    image = sky.Image(pip_indexes=[sky.PipIndex(url="https://download.pytorch.org/whl/cpu", packages=["torch"]),
                                   "https://pypi.org/simple"])
    assert image.pip_indexes == ("https://download.pytorch.org/whl/cpu", "https://pypi.org/simple")
    with pytest.raises(ValueError, match="not a URL"):
        sky.PipIndex(url="pytorch")


def test_instance_info_names_on_the_nodes():
    with sky.ComputePool(provider=sky.Local(), nodes=2, processes_per_node=2) as pool:
        infos = where() @ pool
    assert [i["global_worker_index"] for i in infos] == [0, 1, 2, 3]
    assert [(i["node"], i["worker"]) for i in infos] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for i in infos:
        assert i["workers_per_node"] == 2 and i["total_workers"] == 4
        assert i["job_id"] == i["pool_id"] and i["hostname"]
        assert (i["accelerators"], i["accelerator"], i["total_accelerators"]) == (0, None, 0)
        assert i["network"] == {"private_ip": "127.0.0.1"}
        assert i["peers"] == [(0, "127.0.0.1", None), (1, "127.0.0.1", None)]


def test_peer_mapping_refuses_unknown_keys():
    peer = sky.Peer(node=1, addr="10.0.0.2")
    assert peer["node"] == 1 and peer["private_ip"] == "10.0.0.2" and peer.get("nope", 5) == 5
    with pytest.raises(KeyError, match="private_ip"):
        peer["ip"]


def test_user_arguments_named_like_options_reach_the_function():
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        assert fetch("u", timeout=30) >> compute == ("u", 30, "default", False)
        assert fetch("u", output="out.txt") >> compute == ("u", 10, "out.txt", False)
        assert fetch("u", capture=True) >> compute == ("u", 10, "default", True)
        assert fetch("u", timeout=1, output="o", capture=True) @ compute == [("u", 1, "o", True)]
        assert sky.gather(fetch("a", timeout=2)) >> compute == (("a", 2, "default", False),)


def test_call_options_have_their_own_spelling():
    quick = sky.compute(timeout=0.5)(slow)
    with sky.Compute(provider=sky.Local(), nodes=1) as compute:
        with pytest.raises(sky.TaskTimeout):
            quick(1, 30) >> compute
        assert quick(2, 0).with_timeout(60) >> compute == 2  # per call, overriding the default
        with pytest.raises(sky.TaskTimeout):
            sky.compute(slow)(3, 30).with_timeout(0.5) >> compute
    with pytest.raises(ValueError, match="timeout"):
        sky.compute(timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        fetch(1).with_timeout(0)


def test_gather_gives_a_tuple_and_and_builds_one():
    f = sky.compute(slow)
    with sky.Compute(provider=sky.Local(), nodes=2) as compute:
        assert sky.gather(f(1, 0), f(2, 0)) >> compute == (1, 2)
        assert (f(1, 0) & f(2, 0) & f(3, 0)) >> compute == (1, 2, 3)
        assert (sky.gather(f(1, 0)) & sky.gather(f(2, 0), f(3, 0))) >> compute == (1, 2, 3)
        assert sky.gather() >> compute == ()


def test_streamed_gather_yields_in_order_or_as_completed():
    f = sky.compute(slow)
    with sky.Compute(provider=sky.Local(), nodes=2) as compute:
        ordered = list(sky.gather(f("slow", 3), f("fast", 0), stream=True) >> compute)
        assert ordered == ["slow", "fast"]
        done = list(sky.gather(f("slow", 3), f("fast", 0), stream=True, ordered=False) >> compute)
        assert done == ["fast", "slow"]


def boom(x):
    if x == 1:
        raise KeyError("item one")
    import time

    time.sleep(30 if x == 2 else 0)
    return x


def test_a_streamed_gather_raises_the_first_error_at_its_turn_and_cancels_the_rest():
    f = sky.compute(boom)
    with sky.Compute(provider=sky.Local(), nodes=2) as compute:
        stream = sky.gather(f(0), f(1), f(2), stream=True) >> compute
        assert next(stream) == 0
        with pytest.raises(KeyError, match="item one"):
            next(stream)
        deadline = time.monotonic() + LIMIT
        while compute.statistics()["tasks_cancelled"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert compute.statistics()["tasks_cancelled"] == 1  # the 30 s call did not run on


@pytest.mark.anyio
async def test_async_streamed_gather_is_an_async_iterator():
    f = sky.compute(slow)
    async with sky.Pool(nodes=2) as pool:
        with anyio.fail_after(LIMIT):
            got = [x async for x in (sky.gather(f(1, 1), f(2, 0), stream=True, ordered=False) >> pool)]
    assert sorted(got) == [1, 2] and got[0] == 2


def test_greater_than_starts_a_call_and_gives_a_future():
    f = sky.compute(slow)
    with sky.Compute(provider=sky.Local(), nodes=2) as compute:
        futures = [f(i, 0) > compute for i in range(4)]
        assert [fut.result(timeout=LIMIT) for fut in futures] == [0, 1, 2, 3]
        assert (fetch("u", timeout=3) > compute).result(timeout=LIMIT) == ("u", 3, "default", False)
        late = f(9, 30).with_timeout(0.5) > compute
        with pytest.raises(sky.TaskTimeout):
            late.result(timeout=LIMIT)


def test_leaving_a_streamed_gather_early_cancels_what_still_runs():
    f = sky.compute(slow)
    with sky.Compute(provider=sky.Local(), nodes=2) as compute:
        for first in sky.gather(f("quick", 0), f("long", 30), stream=True, ordered=False) >> compute:
            break
        assert first == "quick"
        deadline = time.monotonic() + LIMIT
        while compute.statistics()["tasks_cancelled"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert compute.statistics()["tasks_cancelled"] == 1


def test_integration_decorators_off_a_node_just_run_the_function(monkeypatch):
    monkeypatch.delenv("COMPUTE_POOL", raising=False)

    @sky.compute
    @sky.integrations.torch
    def plain(x):
        return x + 1

    @sky.integrations.torch(backend="gloo")
    def with_options(x):
        return x * 2

    assert plain.local(1) == 2 and plain(2).local() == 3
    assert with_options(4) == 8 and with_options.__name__ == "with_options"
    with pytest.raises(ValueError, match="backend"):
        sky.integrations.torch(backend="carrier-pigeon")
    with pytest.raises(TypeError, match="decorates a function"):
        sky.integrations.jax(42)


@pytest.mark.parametrize("above, words", [
    (sky.integrations.torch, "@sky.integrations.torch goes below @sky.compute"),
    (sky.integrations.torch(backend="gloo"), "@sky.integrations.torch goes below @sky.compute"),
    (sky.stdout(only="head"), r"@sky.stdout\(...\) goes below @sky.compute"),
    (sky.silent, "@sky.silent goes below @sky.compute"),
])
def test_a_node_side_decorator_above_compute_is_refused_naming_the_order(above, words):
    # the seeds: "@sky.compute must be outermost"; above it, the decorator would wrap the call made here
    # and do nothing on the node (no process group, every node printing) — refused when decorating
    def train():
        return 1

    with pytest.raises(TypeError, match=rf"(?s){words}.*wraps the @sky.compute of 'train'.*@sky.compute\n"):
        above(sky.compute(train))
    assert above(train)() == 1  # below @sky.compute (on the plain function) it is accepted
