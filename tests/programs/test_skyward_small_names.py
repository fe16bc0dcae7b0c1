"""Issue 40, point 6: Skyward's small names. The distributed barrier's `reset()` (Skyward's program from
its docs, with a `reset()` between epochs), and the HuggingFace plugin's Skyward attributes beyond
Skyward's own unit tests (tests/programs/test_skyward_huggingface.py): `models=`, the token readable as
`Image.env["HF_TOKEN"]` yet never listed, shown or hashed."""

from __future__ import annotations

import pickle
import threading

import pytest

import skyhive as sky

NODES = 2


@sky.function
def synchronized_epoch(epoch: int) -> dict:
    info = sky.instance_info()
    sync = sky.barrier("epoch_sync", n=info.total_nodes, timeout=120)
    sync.wait()  # blocks until all n workers arrive
    sync.reset()  # Skyward's barrier has reset(); it leaves the barrier ready for the next round
    return {"node": info.node, "epoch": epoch}


def test_a_barrier_reset_between_rounds():
    with sky.ComputePool(provider=sky.Local(), nodes=NODES, output=None) as pool:
        for epoch in range(2):
            results = synchronized_epoch(epoch) @ pool
            assert sorted(r["node"] for r in results) == [0, 1] and {r["epoch"] for r in results} == {epoch}


def lonely_wait_then_reset():
    barrier = sky.barrier("lonely", 2, timeout=120)
    broken = []

    def wait():
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            broken.append(True)

    waiter = threading.Thread(target=wait)
    waiter.start()
    import time

    deadline = time.monotonic() + 60
    while not broken and time.monotonic() < deadline:  # (reset until the waiter is in: then it breaks)
        barrier.reset()
        waiter.join(0.05)
    waiter.join(60)
    return bool(broken)


def test_a_reset_breaks_a_round_in_progress():
    with sky.Pool(provider=sky.Local(), nodes=1, output=None) as pool:
        assert pool.run(lonely_wait_then_reset) is True


def test_the_token_reads_through_env_but_stays_a_secret():
    plugin = sky.plugins.huggingface(token="hf_secret_value", models=["org/a", "org/b"])
    image = plugin.transform(sky.Image(env={"A": "1"}), None)
    assert image.env["HF_TOKEN"] == "hf_secret_value" and "HF_TOKEN" in image.env
    assert image.env.get("HF_TOKEN") == "hf_secret_value" and image.env["A"] == "1"
    assert "HF_TOKEN" not in dict(image.env) and "HF_TOKEN" in image.secrets  # listed only as a secret
    assert "hf_secret_value" not in repr(image) and "hf_secret_value" not in repr(image.env)
    assert image.content_hash() != sky.Image(env={"A": "1", "HF_TOKEN": "x"}).content_hash()
    assert pickle.loads(pickle.dumps(image)).env["HF_TOKEN"] == "hf_secret_value"
    assert image.env["HF_XET_HIGH_PERFORMANCE"] == "1"
    assert any('"org/a", "org/b"' in c and "snapshot_download" in c for c in image.setup)
    assert plugin.bootstrap(None) == tuple(image.setup)
    assert plugin.decorate is None and plugin.around_client is None
    with pytest.raises(KeyError):
        image.env["NOT_THERE"]


def test_a_malformed_model_id_is_refused():
    with pytest.raises(ValueError, match=r"huggingface\(models='org/a'\): give a list of Hub repo ids"):
        sky.plugins.huggingface(token="t", models="org/a")
    with pytest.raises(ValueError, match="give a list of Hub repo ids"):
        sky.plugins.huggingface(token="t", models=["org/a'; rm -rf /"])
