"""Issue 40, point 1 (its `skyhive.api` half): `from skyward.api import Worker` has a counterpart,
`from skyhive.api import Worker` — the same objects as `skyhive.NAME`."""

from __future__ import annotations

import pytest

import skyhive as sky


def double(x):
    return 2 * x


def test_skywards_api_module_names_are_skyhives():
    from skyhive.api import Image, Plugin, Pool, Spec, Worker, instance_info

    assert (Worker, Spec, Image, Pool, instance_info) == (sky.Worker, sky.Spec, sky.Image, sky.Pool, sky.instance_info)
    from skyhive.plugins.api import Plugin as plugin_base

    assert Plugin is plugin_base
    with sky.ComputePool(provider=sky.Local(), nodes=1, worker=Worker(concurrency=2), output=None) as pool:
        assert pool.map(double, [1, 2, 3]) == [2, 4, 6]


def test_a_name_skyhive_api_lacks_is_named():
    import skyhive.api

    with pytest.raises(AttributeError, match=r"module 'skyhive.api' has no attribute 'Session'"):
        skyhive.api.Session  # noqa: B018
