"""`NodeTable`, the state's node records: reads as the tuple it stands for, and a change shares
every chunk it did not touch (so the reducer stays pure without copying every record per event)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhive.runtime.events.nodes import CHUNK, NodeTable
from skyhive.runtime.events.state import NodeRecord


def _records(n: int, state: str = "requested") -> list[NodeRecord]:
    return [NodeRecord(node=i, state=state) for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 3 * CHUNK + 5),
       edits=st.lists(st.tuples(st.integers(0, 4 * CHUNK), st.sampled_from(["ready", "failed", "append"])), max_size=30))
def test_a_table_built_by_edits_is_the_tuple_built_by_the_same_edits(size, edits):
    model = _records(size)
    base = NodeTable(model)
    before = tuple(base)
    builder = base.builder()
    for index, what in edits:
        if what == "append":
            record = NodeRecord(node=len(model))
            model.append(record)
            builder.append(record)
        elif index < len(model):
            model[index] = NodeRecord(node=index, state=what)
            builder[index] = model[index]
            assert builder[index] == model[index]
        else:
            with pytest.raises(IndexError, match=f"node {index} is outside"):
                builder[index] = NodeRecord(node=index)
        assert len(builder) == len(model)
    table = builder.finish()
    assert tuple(base) == before  # the base is left as it was
    expected = tuple(model)
    assert table == expected and list(table) == model and len(table) == len(model)
    assert table == NodeTable(model) and hash(table) == hash(expected)
    for i in range(len(model)):
        assert table[i] is model[i] and table[i - len(model)] is model[i]
    assert table[1:5] == expected[1:5]
    assert pickle.loads(pickle.dumps(table)) == table


def test_a_change_shares_the_chunks_it_did_not_touch():
    base = NodeTable(_records(10 * CHUNK))
    builder = base.builder()
    builder[3 * CHUNK + 1] = NodeRecord(node=3 * CHUNK + 1, state="ready")
    table = builder.finish()
    shared = [a is b for a, b in zip(base._chunks, table._chunks)]
    assert shared.count(False) == 1 and not shared[3]
    assert base[3 * CHUNK + 1].state == "requested" and table[3 * CHUNK + 1].state == "ready"


def test_indexing_outside_names_the_node():
    table = NodeTable(_records(3))
    with pytest.raises(IndexError, match="node 3 is outside 0..2"):
        table[3]
    with pytest.raises(IndexError):
        table[-4]
    assert table != NodeTable(_records(4)) and table != _records(3)  # a list is not the tuple
