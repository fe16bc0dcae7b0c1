"""What the opt-in real-cloud smoke tests (test_cloud_real_aws.py, test_cloud_real_others.py) do with a provider:
one pool of one node booted to `ready` (created, connected, bootstrapped: uv's Python, the client's runtime),
one function call run on it, then the pool left and torn down, and nothing of it listed by its tag after.

Each runs only when ``SKYHIVE_REAL_CLOUDS`` names its cloud (e.g. ``SKYHIVE_REAL_CLOUDS=aws,gcp``) AND that
cloud's credentials are found: credentials alone never spend money. ``SKYHIVE_REAL_GPU`` (e.g. ``T4:1``) asks
for that accelerator instead of the default small machine, and the node must then answer ``nvidia-smi -L``.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import anyio
import pytest

import skyhive as sky
from skyhive.providers.base import Provider
from skyhive.providers.cloud.offers import credentials
from skyhive.runtime.events.log import read_log

__all__ = ["ASKED", "GPU", "opt_in", "smoke_pool"]

ASKED = {c.strip() for c in os.environ.get("SKYHIVE_REAL_CLOUDS", "").split(",") if c.strip()}
GPU = os.environ.get("SKYHIVE_REAL_GPU") or None

#: the phases a node of the pool must have gone through, in this order (`runtime/events/lifecycle.py`)
PHASES = ["requested", "provisioning", "running", "connecting", "bootstrapping", "ready", "draining", "terminating",
          "terminated"]


def opt_in(cloud: str, what: str) -> pytest.MarkDecorator:
    """Skip unless ``SKYHIVE_REAL_CLOUDS`` names `cloud` and its credentials are found; the reason names the
    variable to set and `what` credentials it needs."""
    found = credentials().get(cloud)
    why = (f"real {cloud} smoke test: set SKYHIVE_REAL_CLOUDS={cloud} and {what} (it boots one small node to "
           f"ready, runs one call on it and destroys it; SKYHIVE_REAL_GPU=T4:1 asks for a GPU node)"
           + ("" if found else f"; no {cloud} credentials found"))
    return pytest.mark.skipif(cloud not in ASKED or not found, reason=why)


def _gpus() -> str:
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=120, check=True).stdout


def _states(name: str) -> list[str]:
    log = Path(os.environ["SKYHIVE_HOME"]) / "pools" / f"{name}.jsonl"
    return [e.state for e in read_log(log) if e.kind == "node_state" and e.node == 0]


async def smoke_pool(provider: Provider, *, gpu: str | None = GPU, start_timeout: float = 1800) -> None:
    """Boot one node of `provider` to `ready`, run one call (and ``nvidia-smi -L`` when `gpu`), leave; then the
    node went through every phase and nothing of the pool is listed by its tag."""
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    try:
        async with sky.Pool(provider=provider, nodes=1, name=name, accelerator=gpu,
                            start_timeout=start_timeout) as pool:
            assert "ready" in _states(name)  # connected and bootstrapped before any call
            assert await pool.run(lambda: 1) == 1
            if gpu:
                assert "GPU 0:" in await pool.run(_gpus, timeout=300)
    finally:
        with anyio.CancelScope(shield=True):
            left = await provider.list_owned(name)
            if left:  # the pool's teardown failed: finish it, then fail the test below
                await provider.down(name)
    assert left == [], f"the pool's teardown left {left}"
    assert _states(name) == PHASES
    assert await provider.list_owned(name) == []
