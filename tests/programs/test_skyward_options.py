"""Issue 40: Skyward's `sky.Options` (`guides/20_fractional_gpus.py`: `options=sky.Options(provision_timeout=600)`):
each field becomes the Pool keyword / `Settings` field that means the same (runtime/options.py), a field skyhive
has no setting for is refused naming it, and one setting given twice (in the options and as its keyword) is
refused naming both."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

import skyhive as sky
from skyhive.errors import ProvisionError


@sky.function
def classify(texts: list[str]) -> dict:
    info = sky.instance_info()
    return {"n": len(texts), "node": info.node}


def _children(thread: str) -> list[str]:
    try:  # (a thread may end between the listing and the read)
        with open(f"/proc/self/task/{thread}/children") as fh:
            return fh.read().split()
    except FileNotFoundError:
        return []


def _kids() -> set[str]:
    return {k for t in os.listdir("/proc/self/task") for k in _children(t)}


def no_child_left(before: set[str]) -> None:
    """Wait (generous deadline) until this process has no child process but those it had `before` the pool
    (a test worker may hold other fixtures' processes): the pool's workers are gone, reaped."""
    deadline = time.monotonic() + 60
    while True:
        kids = _kids() - before
        if not kids:
            return
        assert time.monotonic() < deadline, f"processes left behind: {sorted(kids)}"
        time.sleep(0.1)


TEXTS = ["Fractional GPUs are a great way to save money on inference workloads."]


def test_the_guides_options_line_on_local():
    # guides/20_fractional_gpus.py as written but for the provider (the rest of it needs a GPU and torch)
    compute = sky.Compute(
        provider=sky.Local(),
        accelerator=sky.accelerators.L4(count=0.5),
        image=sky.Image(pip=["torch", "transformers"]),
        options=sky.Options(provision_timeout=600),
    )
    assert compute.settings.start_timeout == 600 and str(compute.accelerator) == "L4:0.5"
    from skyhive.api import Options

    assert Options is sky.Options
    before = _kids()
    with sky.Compute(provider=sky.Local(), options=sky.Options(provision_timeout=600), output=None) as compute:
        result = classify(TEXTS) >> compute
    assert result == {"n": 1, "node": 0}
    no_child_left(before)


def test_provision_timeout_bounds_the_start():
    # the field is the pool's start bound: far too short a bound fails the start, naming it
    before = _kids()
    with pytest.raises(ProvisionError, match="start_timeout"):
        with sky.Pool(provider=sky.Local(), options=sky.Options(provision_timeout=0.001), output=None):
            pass
    no_child_left(before)


def test_each_mapped_field_reaches_its_setting():
    worker = sky.Worker(concurrency=3)
    pool = sky.ComputePool(provider=sky.Local(), nodes=(1, 3), options=sky.Options(
        worker=worker, provision_timeout=600, bootstrap_timeout=900, shutdown_timeout=7,
        autoscale_cooldown=5, autoscale_idle_timeout=11, console=False))
    assert pool.worker is worker
    assert (pool.settings.start_timeout, pool.settings.build_timeout, pool.settings.stop_timeout) == (600, 900, 7)
    assert pool.elastic == (1, 3, 11.0, 5.0) and pool.progress is False
    assert sky.Pool(options=sky.Options(console="silent")).progress is False
    assert sky.Pool(options=sky.Options(console=True)).progress is True
    first = sky.Pool(provider=[sky.Local(), sky.Simulated()], options=sky.Options(selection="price"))
    assert first.provider.order == sky.Pool(provider=[sky.Local(), sky.Simulated()], selection="price").provider.order
    assert first.provider.order != sky.Pool(provider=[sky.Local(), sky.Simulated()]).provider.order
    with pytest.raises(ValueError, match=r"ComputePool\(selection='fastest'\)"):  # Specs get it too
        sky.ComputePool(sky.Spec(provider=sky.Local()), sky.Spec(provider=sky.Simulated()),
                        options=sky.Options(selection="fastest"))


def test_what_changes_nothing_here_is_accepted_and_changes_nothing():
    plain = sky.Pool()
    for options in (sky.Options(), sky.Options(cluster=False), sky.Options(cluster=True), sky.Options(logging=False)):
        pool = sky.Pool(options=options)
        assert (pool.settings, pool.progress, pool.worker, pool.elastic) == (
            plain.settings, plain.progress, plain.worker, plain.elastic)


@pytest.mark.parametrize("field, value", [
    ("ssh_timeout", 30), ("provision_retry_delay", 5.0), ("max_provision_attempts", 3), ("ssh_retry_interval", 2),
    ("default_compute_timeout", 300.0), ("reconcile_tick_interval", 15.0), ("retry_on_interruption", 3),
    ("health_checker", object()),
])
def test_a_field_without_a_skyhive_setting_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"sky\.Options\({field}=.*no such setting"):
        sky.Options(**{field: value})


def test_bad_values_are_named():
    with pytest.raises(TypeError, match=r"sky\.Options\(logging="):
        sky.Options(logging="debug")
    with pytest.raises(TypeError, match=r"sky\.Options\(cluster=1\)"):
        sky.Options(cluster=1)
    with pytest.raises(ValueError, match=r"sky\.Options\(console='loud'\)"):
        sky.Options(console="loud")
    with pytest.raises(TypeError, match=r"Pool\(options=.*need a sky\.Options \(an instance"):
        sky.Pool(options=sky.Options)
    with pytest.raises(TypeError, match=r"Pool\(options=\{.*need a sky\.Options"):
        sky.Pool(options={"provision_timeout": 600})
    with pytest.raises(ValueError, match=r"Pool\(autoscale_idle_timeout=-1"):  # the keyword's own check
        sky.Pool(nodes=(1, 2), options=sky.Options(autoscale_idle_timeout=-1))
    with pytest.raises(ValueError, match=r"Pool\(start_timeout=-5"):
        sky.Pool(options=sky.Options(provision_timeout=-5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sky.Options().provision_timeout = 1  # type: ignore[misc]


@pytest.mark.parametrize("field, value, keyword, direct", [
    ("provision_timeout", 600, "start_timeout", 60),
    ("shutdown_timeout", 5, "stop_timeout", 5),
    ("bootstrap_timeout", 10, "build_timeout", 20),
    ("worker", sky.Worker(concurrency=2), "worker", sky.Worker()),
    ("selection", "first", "selection", "cheapest"),
    ("console", False, "progress", True),
    ("autoscale_idle_timeout", 3, "autoscale_idle_timeout", 4),
    ("autoscale_cooldown", 1, "autoscale_cooldown", 2),
])
def test_one_setting_given_twice_is_refused_naming_both(field, value, keyword, direct):
    with pytest.raises(ValueError, match=rf"sky\.Options\({field}=.*\), {keyword}=.*the same setting twice"):
        sky.Pool(nodes=(1, 2), options=sky.Options(**{field: value}), **{keyword: direct})
