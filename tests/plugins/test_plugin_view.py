"""What a plugin's `transform` sees of the pool: a typed `PoolView` (provider name, whether the nodes are this
machine, accelerator, nodes, processes per node), the same for a kept pool as for a plain one — never the
`Pool` itself (issue 23: plugins compared `provider.name == "local"` on an untyped pool)."""

from __future__ import annotations

import pytest

import skyhive as sky
from skyhive.plugins import PoolView


class Seen(Exception):
    """Raised by the recording plugin: the pool stops before any node starts."""


class Record:
    def __init__(self) -> None:
        self.views: list[object] = []

    def transform(self, image, pool):
        self.views.append(pool)
        raise Seen


def test_transform_sees_a_typed_view_of_the_pool_kept_or_not():
    record = Record()
    with pytest.raises(Seen):
        with sky.Pool(provider=sky.Local(), nodes=2, processes_per_node=3, plugins=[record]):
            pass
    with pytest.raises(Seen):  # a kept pool's provider is wrapped (clusters/kept.py): the same facts
        with sky.Pool(provider=sky.Local(), nodes=1, name="viewed", keep=True, plugins=[record]):
            pass
    with pytest.raises(Seen):
        with sky.Pool(provider=sky.SSH(hosts=["10.0.0.2", "10.0.0.3"]), nodes=2, plugins=[record]):
            pass
    assert record.views == [
        PoolView(provider="local", same_machine=True, accelerator=None, nodes=2, processes_per_node=3),
        PoolView(provider="local", same_machine=True, accelerator=None, nodes=1, processes_per_node=1),
        PoolView(provider="ssh", same_machine=False, accelerator=None, nodes=2, processes_per_node=1),
    ]
    from skyhive.runtime.clusters import record as records

    assert records.names() == []  # the kept pool that never started is forgotten
