"""Timelines of big pools: past `MAX_NODE_LANES` nodes, lanes are drawn per *group* of nodes.

A picture shows a few dozen lanes; a 10,000-node pool drawn lane by lane was 580,000 pixels tall
(and 21 MB of HTML). `group(timeline)` folds the per-node lanes into at most `MAX_NODE_LANES` groups
of consecutive nodes ("nodes 0-156"), each with:

- a state lane whose spans are the intervals where the group's *most common* lifecycle state stays the
  same; each span's label counts the states within it ("ready 150, failed 7") at its start, and its
  tooltip keeps that count, so a straggler or a failure still shows in numbers;
- one task lane: the intervals in which any of the group's workers ran a task (overlapping tasks are
  merged), coloured by the worst outcome inside (error, lost, cancelled, unfinished, ok) and labelled
  with how many tasks ran in it;
- the marks of every node in it (worker losses, replacements, nodes left out), up to `MAX_MARKS`, then
  one mark saying how many more there were.

Linear in the number of spans; nothing here reads the log again.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from .timeline import Lane, Span, Timeline

__all__ = ["group", "MAX_NODE_LANES", "MAX_MARKS"]

#: Node lanes drawn one per node up to this many nodes; beyond, one per group of nodes.
MAX_NODE_LANES = 64
#: Marks kept per group (the rest are counted in one last mark).
MAX_MARKS = 20
#: Task outcomes, worst first: a merged interval takes the worst outcome inside it.
_WORST = ("error", "lost", "cancelled", "unfinished", "ok")


def group(tl: Timeline, max_nodes: int = MAX_NODE_LANES) -> Timeline:
    """`tl` with its node lanes folded into at most `max_nodes` groups (as it is when it has no more)."""
    nodes = sorted({lane.node for lane in tl.lanes})
    if len(nodes) <= max_nodes:
        return tl
    size = math.ceil(len(nodes) / max_nodes)
    states: dict[int, Lane] = {}
    tasks: dict[int, list[Span]] = {}
    for lane in tl.lanes:
        if lane.tasks:
            tasks.setdefault(lane.node, []).extend(lane.spans)
        else:
            states[lane.node] = lane
    lanes: list[Lane] = []
    for g in range(0, len(nodes), size):
        members = nodes[g:g + size]
        title = f"nodes {members[0]}-{members[-1]}"
        member_lanes = [states[n] for n in members if n in states]
        lanes.append(Lane(members[0], title, False, _majority(member_lanes, tl.duration), _marks(member_lanes)))
        spans = [s for n in members for s in tasks.get(n, ())]
        if spans:
            lanes.append(Lane(members[0], f"tasks of {len(members)} nodes", True, _busy(spans)))
    return replace(tl, lanes=tuple(lanes), group_size=size, nodes=len(nodes))


def _majority(lanes: list[Lane], end: float) -> tuple[Span, ...]:
    """Spans of the most common state among `lanes` (a sweep over every state change)."""
    changes: list[tuple[float, int, str]] = []  # (time, lane, new state)
    for i, lane in enumerate(lanes):
        for s in lane.spans:
            changes.append((s.start, i, s.kind))
    changes.sort(key=lambda c: c[0])
    current: dict[int, str] = {}
    counts: Counter[str] = Counter()
    out: list[Span] = []
    start, kind, label = 0.0, "", ""
    k = 0
    while k < len(changes):
        t = changes[k][0]
        while k < len(changes) and changes[k][0] == t:  # every change at this instant
            _, i, state = changes[k]
            old = current.get(i)
            if old is not None:
                counts[old] -= 1
            counts[state] += 1
            current[i] = state
            k += 1
        top = max(counts.items(), key=lambda kv: kv[1])[0]
        if top != kind:
            if kind:
                out.append(Span(start, t, kind, label))
            start, kind = t, top
            label = ", ".join(f"{state} {n}" for state, n in counts.most_common() if n)
    if kind:
        out.append(Span(start, max(end, start), kind, label))
    return tuple(out)


def _busy(spans: list[Span]) -> tuple[Span, ...]:
    """The union of task spans, each merged interval with its worst outcome and its task count."""
    spans = sorted(spans, key=lambda s: s.start)
    out: list[Span] = []
    start, stop, worst, count = spans[0].start, spans[0].end, spans[0].kind, 1
    for s in spans[1:]:
        if s.start <= stop:
            stop = max(stop, s.end)
            worst = min(worst, s.kind, key=_rank)
            count += 1
            continue
        out.append(Span(start, stop, worst, f"{count} tasks"))
        start, stop, worst, count = s.start, s.end, s.kind, 1
    out.append(Span(start, stop, worst, f"{count} tasks"))
    return tuple(out)


def _rank(kind: str) -> int:
    return _WORST.index(kind) if kind in _WORST else len(_WORST)


def _marks(lanes: list[Lane]) -> tuple[tuple[float, str], ...]:
    marks = sorted(((t, f"node {lane.node}: {what}") for lane in lanes for t, what in lane.marks),
                   key=lambda m: m[0])
    if len(marks) > MAX_MARKS:
        rest = len(marks) - MAX_MARKS
        marks = marks[:MAX_MARKS] + [(marks[MAX_MARKS][0], f"and {rest} more (skyhive events)")]
    return tuple(marks)
