"""A big pool's timeline is drawn in groups of nodes: a bounded number of lanes that still show the
most common state, the stragglers' counts, merged task activity and every failure mark."""

from __future__ import annotations

from skyhive.runtime.events.timeline import build, layout
from skyhive.runtime.events.timeline_groups import MAX_MARKS, MAX_NODE_LANES, group
from skyhive.runtime.events.types import (
    NodeDropped,
    NodeStateChanged,
    PoolStarted,
    PoolStopped,
    TaskFinished,
    TaskSubmitted,
)


def _pool(nodes: int) -> list:
    seq = iter(range(10**9))
    ev = [PoolStarted(pool_id="p", seq=next(seq), ts=0.0, provider="simulated", nodes=nodes, processes_per_node=1,
                      pid=1, host="h")]
    for n in range(nodes):
        ev.append(NodeStateChanged(pool_id="p", seq=next(seq), ts=0.0, node=n, state="requested"))
        late = 5.0 if n == 3 else 1.0  # node 3 is a straggler
        ev.append(NodeStateChanged(pool_id="p", seq=next(seq), ts=late, node=n, state="ready"))
    ev.append(NodeStateChanged(pool_id="p", seq=next(seq), ts=2.0, node=7, state="failed", detail="boom"))
    ev.append(NodeDropped(pool_id="p", seq=next(seq), ts=2.0, node=7, reason="boom", min_nodes=1))
    for n in range(nodes):
        ev.append(TaskSubmitted(pool_id="p", seq=next(seq), ts=6.0 + (n % 2), task=n, node=n, local_rank=0, fn="f()"))
        outcome = "error" if n == 11 else "ok"
        ev.append(TaskFinished(pool_id="p", seq=next(seq), ts=6.5 + (n % 2), task=n, node=n, local_rank=0,
                               outcome=outcome))
    ev.append(PoolStopped(pool_id="p", seq=next(seq), ts=10.0))
    return ev


def test_a_small_pool_keeps_a_lane_per_node():
    tl = build(_pool(10))
    assert group(tl) is tl


def test_a_thousand_nodes_fold_into_groups_that_keep_the_majority_stragglers_and_failures():
    tl = group(build(_pool(1000)))
    states = [lane for lane in tl.lanes if not lane.tasks]
    assert len(states) <= MAX_NODE_LANES and tl.nodes == 1000 and tl.group_size == 16
    first = states[0]
    assert first.title == "nodes 0-15"
    # most of nodes 0-15 are ready from t=1 on, although node 3 is still requested until t=5
    assert [(s.start, s.kind) for s in first.spans] == [(0.0, "requested"), (1.0, "ready")]
    assert "requested 1" in first.spans[1].label and "failed" not in first.spans[1].label  # at t=1 node 7 is ready
    assert any("node 7: left out at start" in what for _, what in first.marks)
    tasks = [lane for lane in tl.lanes if lane.tasks]
    # tasks at 6-6.5 and 7-7.5 merge into two intervals per group; node 11's error colours the second
    assert [(s.start, s.end, s.kind, s.label) for s in tasks[0].spans] == [
        (6.0, 6.5, "ok", "8 tasks"), (7.0, 7.5, "error", "8 tasks")]
    lay = layout(tl)
    assert "1000 nodes (lanes of 16 nodes" in lay.subtitle and lay.height < 6000


def test_marks_past_the_limit_are_counted_in_one():
    ev = _pool(200)
    extra = [NodeDropped(pool_id="p", seq=10**6 + n, ts=3.0, node=n, reason="x", min_nodes=1) for n in range(30, 60)]
    tl = group(build(ev[:-1] + extra + ev[-1:]), max_nodes=2)  # 100 nodes per group: 31 marks in the first
    marks = tl.lanes[0].marks
    assert len(marks) == MAX_MARKS + 1 and marks[-1][1] == f"and {31 - MAX_MARKS} more (skyhive events)"
