"""A pool's timeline: a Gantt chart of each node's lifecycle states and the tasks it ran.

Drawn from the event log alone: `build(events)` turns `NodeStateChanged`, `TaskSubmitted`/`TaskStarted`/
`TaskFinished` and `WorkerStateChanged` events into lanes of spans; `layout` places them once; then
`render_png` (Pillow, imported lazily) or `render_html` (inline SVG, no dependency) draws the same layout.

Per node: one lane of lifecycle states, then one lane of tasks per worker process. Lost workers are
marked with a red tick. The time axis starts when the pool started.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .lifecycle import NodeState
from .types import (
    Event,
    NodeDropped,
    NodeReplaced,
    NodeScaled,
    NodeStateChanged,
    PoolStarted,
    PoolStopped,
    TaskFinished,
    TaskStarted,
    TaskSubmitted,
)
from .types import WorkerStateChanged

__all__ = ["Span", "Lane", "Timeline", "Layout", "build", "layout", "render_png", "render_html", "write",
           "STATE_COLORS", "TASK_COLORS"]

STATE_COLORS: dict[str, str] = {
    NodeState.REQUESTED.value: "#c7c7c7",
    NodeState.PROVISIONING.value: "#9ecae1",
    NodeState.RUNNING.value: "#6baed6",
    NodeState.CONNECTING.value: "#17a2a2",
    NodeState.BOOTSTRAPPING.value: "#fd8d3c",
    NodeState.READY.value: "#41ab5d",
    NodeState.DRAINING.value: "#f2c80f",
    NodeState.TERMINATING.value: "#e6550d",
    NodeState.TERMINATED.value: "#636363",
    NodeState.FAILED.value: "#d62728",
}
TASK_COLORS: dict[str, str] = {
    "ok": "#3f6fb5", "error": "#d62728", "cancelled": "#a0a0a0", "lost": "#8e44ad", "unfinished": "#9cc3ea",
}

# layout, in pixels
WIDTH = 1200
LEFT = 150
RIGHT = 30
TOP = 64
STATE_H = 24
TASK_H = 16
LANE_GAP = 4
NODE_GAP = 14
AXIS_H = 36
LEGEND_ROW = 22
LEGEND_COLS = 8


@dataclass(frozen=True, slots=True)
class Span:
    start: float  # seconds since the pool started
    end: float
    kind: str  # a lifecycle state, or a task outcome
    label: str


@dataclass(frozen=True, slots=True)
class Lane:
    node: int
    title: str
    tasks: bool  # a lane of tasks (thin) rather than of states
    spans: tuple[Span, ...]
    marks: tuple[tuple[float, str], ...] = ()  # (time, what): worker losses


@dataclass(frozen=True, slots=True)
class Timeline:
    pool_id: str
    provider: str
    started: float  # wall clock of the pool's start
    duration: float
    stopped: bool
    error: str
    lanes: tuple[Lane, ...]
    group_size: int = 1  # nodes per lane (> 1: a big pool's lanes are groups, see timeline_groups.py)
    nodes: int = 0  # the pool's nodes (0: count the lanes' nodes)


def build(events: Iterable[Event]) -> Timeline:
    """The timeline of a pool from its events (in log order)."""
    events = list(events)
    pool_id = events[0].pool_id if events else ""
    start_ev = next((e for e in events if isinstance(e, PoolStarted)), None)
    t0 = start_ev.ts if start_ev is not None else (events[0].ts if events else 0.0)
    # the pool's last stop, unless it started again after it (a named pool's `stop` then `start`: up)
    last_start = max((i for i, e in enumerate(events) if isinstance(e, PoolStarted)), default=-1)
    stop_ev = next((e for e in reversed(events[last_start + 1:]) if isinstance(e, PoolStopped)), None)
    t_end = stop_ev.ts if stop_ev is not None else (events[-1].ts if events else t0)
    nodes = start_ev.nodes if start_ev is not None else 0
    states: dict[int, list[tuple[float, str, str]]] = {}
    names: dict[int, str] = {}
    began: dict[int, float] = {}
    tasks: dict[tuple[int, int], list[Span]] = {}
    open_tasks: dict[int, tuple[int, int, float]] = {}
    marks: dict[int, list[tuple[float, str]]] = {}
    for ev in events:
        t = ev.ts - t0
        if isinstance(ev, NodeStateChanged):
            states.setdefault(ev.node, []).append((t, ev.state, ev.detail))
            nodes = max(nodes, ev.node + 1)
        elif isinstance(ev, TaskSubmitted):
            names[ev.task] = ev.fn
            began[ev.task] = t
            open_tasks[ev.task] = (ev.node, ev.local_rank, t)
        elif isinstance(ev, TaskStarted):
            began[ev.task] = t
            open_tasks[ev.task] = (ev.node, ev.local_rank, t)
        elif isinstance(ev, TaskFinished):
            where = open_tasks.pop(ev.task, None)
            start = began.pop(ev.task, t)
            node, rank = (where[0], where[1]) if where else (ev.node, ev.local_rank)
            label = names.pop(ev.task, f"task {ev.task}")
            tasks.setdefault((node, rank), []).append(Span(start, t, ev.outcome, label))
        elif isinstance(ev, WorkerStateChanged) and ev.state == "lost":
            marks.setdefault(ev.node, []).append((t, f"worker {ev.local_rank} lost: {ev.detail}"))
        elif isinstance(ev, NodeDropped):
            marks.setdefault(ev.node, []).append((t, f"left out at start (min_nodes={ev.min_nodes}): {ev.reason}"))
        elif isinstance(ev, NodeReplaced):
            marks.setdefault(ev.node, []).append(
                (t, f"replaced ({ev.old_provider_id}" + (f": {ev.reason}" if ev.reason else "") + ")"))
        elif isinstance(ev, NodeScaled):
            marks.setdefault(ev.node, []).append((t, ev.reason or ev.change))
    end = max(t_end - t0, 0.0)
    for task, (node, rank, start) in open_tasks.items():
        tasks.setdefault((node, rank), []).append(Span(start, end, "unfinished", names.get(task, f"task {task}")))
    lanes: list[Lane] = []
    ranks: dict[int, list[int]] = {}  # each node's workers that ran tasks (a scan of every key per node
    for n, rank in tasks:              # was quadratic: 12 s of a 10,000-node pool's 15 s timeline)
        ranks.setdefault(n, []).append(rank)
    for node in range(nodes):
        changes = states.get(node, [])
        spans = tuple(
            Span(t, changes[i + 1][0] if i + 1 < len(changes) else max(end, t), state, detail)
            for i, (t, state, detail) in enumerate(changes)
        )
        lanes.append(Lane(node, f"node {node}", False, spans, tuple(marks.get(node, ()))))
        for rank in sorted(ranks.get(node, ())):
            spans = tuple(sorted(tasks[(node, rank)], key=lambda s: s.start))
            lanes.append(Lane(node, f"worker {rank} tasks", True, spans))
    return Timeline(pool_id=pool_id, provider=start_ev.provider if start_ev else "", started=t0, duration=end,
                    stopped=stop_ev is not None, error=stop_ev.error if stop_ev else "", lanes=tuple(lanes))


# ---- layout --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Box:
    x: float
    y: float
    w: float
    h: float
    color: str
    text: str  # drawn inside when it fits
    tip: str  # the SVG tooltip


@dataclass(frozen=True, slots=True)
class Layout:
    width: int
    height: int
    title: str
    subtitle: str
    labels: tuple[tuple[float, str, bool], ...]  # (y centre, text, is a node title)
    boxes: tuple[Box, ...]
    marks: tuple[tuple[float, float, float, str], ...]  # x, y, height, tip
    ticks: tuple[tuple[float, str], ...]  # x, label
    axis_y: float
    plot: tuple[float, float, float, float]  # x0, y0, x1, y1
    legend: tuple[tuple[float, float, str, str], ...]  # x, y, color, label


def size(tl: Timeline) -> tuple[int, int]:
    """The picture's width and height for `tl` (a function of its lanes only)."""
    nodes = len({lane.node for lane in tl.lanes})
    lanes_h = sum(TASK_H if lane.tasks else STATE_H for lane in tl.lanes) + LANE_GAP * max(0, len(tl.lanes) - nodes)
    legend_rows = math.ceil((len(STATE_COLORS) + len(TASK_COLORS)) / LEGEND_COLS)
    height = TOP + lanes_h + NODE_GAP * max(0, nodes - 1) + AXIS_H + legend_rows * LEGEND_ROW + 12
    return WIDTH, height


def _fmt_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    m, s = divmod(seconds, 60)
    if m < 60:
        return f"{int(m)} min {s:.0f} s"
    h, m = divmod(m, 60)
    return f"{int(h)} h {int(m)} min"


def _tick_step(duration: float) -> float:
    for step in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600,
                 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400):
        if duration / step <= 10:
            return step
    return 86400 * math.ceil(duration / 86400 / 10)


def _tick_label(t: float, step: float) -> str:
    if step < 1:
        return f"{t:.{max(0, -math.floor(math.log10(step)))}f}s"
    if step < 60:
        return f"{t:.0f}s"
    if step < 3600:
        return f"{int(t // 60)}m" + (f"{int(t % 60):02d}s" if t % 60 else "")
    return f"{int(t // 3600)}h" + (f"{int(t % 3600 // 60):02d}m" if t % 3600 else "")


def layout(tl: Timeline) -> Layout:
    width, height = size(tl)
    x0, x1 = LEFT, width - RIGHT
    span = tl.duration if tl.duration > 0 else 1.0
    scale = (x1 - x0) / span

    def x(t: float) -> float:
        return x0 + max(0.0, min(t, span)) * scale

    labels: list[tuple[float, str, bool]] = []
    boxes: list[Box] = []
    marks: list[tuple[float, float, float, str]] = []
    y = float(TOP)
    prev_node: int | None = None
    for lane in tl.lanes:
        if prev_node is not None:
            y += NODE_GAP if lane.node != prev_node else LANE_GAP
        prev_node = lane.node
        h = TASK_H if lane.tasks else STATE_H
        labels.append((y + h / 2, lane.title, not lane.tasks))
        for s in lane.spans:
            left = x(s.start)
            w = max(x(s.end) - left, 1.5)  # an instant still shows
            color = (TASK_COLORS if lane.tasks else STATE_COLORS).get(s.kind, "#bbbbbb")
            what = f"{s.label} ({s.kind})" if lane.tasks else s.kind + (f": {s.label}" if s.label else "")
            tip = f"{lane.title}: {what}, {s.start:.3f}s to {s.end:.3f}s ({_fmt_duration(s.end - s.start)})"
            text = s.label if lane.tasks else s.kind
            boxes.append(Box(left, y, w, h, color, text, tip))
        for t, what in lane.marks:
            marks.append((x(t), y - 2, h + 4, f"{lane.title}: {what} at {t:.3f}s"))
        y += h
    axis_y = y + 8
    step = _tick_step(span)
    ticks = tuple((x(i * step), _tick_label(i * step, step)) for i in range(int(span / step + 1e-9) + 1))
    legend = []
    items = [(c, s) for s, c in STATE_COLORS.items()] + [(c, f"task {o}") for o, c in TASK_COLORS.items()]
    col_w = (width - 2 * 20) / LEGEND_COLS
    ly = axis_y + AXIS_H - 6
    for i, (color, label) in enumerate(items):
        legend.append((20 + (i % LEGEND_COLS) * col_w, ly + (i // LEGEND_COLS) * LEGEND_ROW, color, label))
    status = "stopped" if tl.stopped else "still running at the last event"
    if tl.error:
        status += f" ({tl.error})"
    nodes = tl.nodes or len({ln.node for ln in tl.lanes})
    grouped = f" (lanes of {tl.group_size} nodes: the most common state, tasks merged)" if tl.group_size > 1 else ""
    subtitle = f"{tl.provider} provider, {nodes} nodes{grouped}, {_fmt_duration(tl.duration)}, {status}"
    return Layout(width=width, height=height, title=f"skyhive pool {tl.pool_id}", subtitle=subtitle,
                  labels=tuple(labels), boxes=tuple(boxes), marks=tuple(marks), ticks=ticks, axis_y=axis_y,
                  plot=(x0, TOP - 6, x1, y), legend=tuple(legend))


# ---- drawing -------------------------------------------------------------------------------------------


def _text_color(fill: str) -> str:
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def render_png(lay: Layout, path: str | Path) -> None:
    """Write the layout as a PNG (needs Pillow: `pip install pillow`)."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        raise RuntimeError("a PNG timeline needs Pillow: pip install pillow (or write .html)") from None

    def font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
        try:
            return ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1, or built without FreeType
            return ImageFont.load_default()

    small, normal, big = font(11), font(13), font(17)
    img = Image.new("RGB", (lay.width, lay.height), "#ffffff")
    draw = ImageDraw.Draw(img)
    draw.text((20, 12), lay.title, fill="#111111", font=big)
    draw.text((20, 36), lay.subtitle, fill="#555555", font=normal)
    px0, py0, px1, py1 = lay.plot
    for tx, label in lay.ticks:
        draw.line([(tx, py0), (tx, lay.axis_y)], fill="#e6e6e6")
        draw.text((tx, lay.axis_y + 4), label, fill="#333333", font=small, anchor="ma")
    draw.line([(px0, lay.axis_y), (px1, lay.axis_y)], fill="#888888")
    for cy, text, is_node in lay.labels:
        draw.text((LEFT - 10, cy), text, fill="#111111" if is_node else "#666666",
                  font=normal if is_node else small, anchor="rm")
    for b in lay.boxes:
        draw.rectangle([b.x, b.y, b.x + b.w, b.y + b.h], fill=b.color, outline=None)
        f = small if b.h < STATE_H else normal
        if b.text and draw.textlength(b.text, font=f) + 8 < b.w:
            draw.text((b.x + b.w / 2, b.y + b.h / 2), b.text, fill=_text_color(b.color), font=f, anchor="mm")
    for mx, my, mh, _ in lay.marks:
        draw.line([(mx, my), (mx, my + mh)], fill="#d62728", width=3)
    for lx, ly, color, label in lay.legend:
        draw.rectangle([lx, ly, lx + 14, ly + 14], fill=color)
        draw.text((lx + 20, ly + 7), label, fill="#333333", font=small, anchor="lm")
    img.save(path, format="PNG")


def render_html(lay: Layout, path: str | Path) -> None:
    """Write the layout as an HTML page holding one inline SVG (hover a bar for its times)."""
    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width}" height="{lay.height}" '
             f'viewBox="0 0 {lay.width} {lay.height}" font-family="sans-serif">',
             f'<rect width="{lay.width}" height="{lay.height}" fill="#ffffff"/>',
             f'<text x="20" y="28" font-size="17" fill="#111">{e(lay.title)}</text>',
             f'<text x="20" y="50" font-size="13" fill="#555">{e(lay.subtitle)}</text>']
    px0, py0, px1, _ = lay.plot
    for tx, label in lay.ticks:
        parts.append(f'<line x1="{tx:.1f}" y1="{py0}" x2="{tx:.1f}" y2="{lay.axis_y}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{tx:.1f}" y="{lay.axis_y + 16}" font-size="11" text-anchor="middle" '
                     f'fill="#333">{e(label)}</text>')
    parts.append(f'<line x1="{px0}" y1="{lay.axis_y}" x2="{px1}" y2="{lay.axis_y}" stroke="#888"/>')
    for cy, text, is_node in lay.labels:
        parts.append(f'<text x="{LEFT - 10}" y="{cy:.1f}" dominant-baseline="middle" text-anchor="end" '
                     f'font-size="{13 if is_node else 11}" fill="{"#111" if is_node else "#666"}">{e(text)}</text>')
    for b in lay.boxes:
        parts.append(f'<rect x="{b.x:.2f}" y="{b.y:.1f}" width="{b.w:.2f}" height="{b.h}" fill="{b.color}">'
                     f'<title>{e(b.tip)}</title></rect>')
        size_ = 11 if b.h < STATE_H else 12
        if b.text and len(b.text) * size_ * 0.6 + 8 < b.w:
            parts.append(f'<text x="{b.x + b.w / 2:.1f}" y="{b.y + b.h / 2:.1f}" font-size="{size_}" '
                         f'text-anchor="middle" dominant-baseline="middle" fill="{_text_color(b.color)}" '
                         f'pointer-events="none">{e(b.text)}</text>')
    for mx, my, mh, tip in lay.marks:
        parts.append(f'<line x1="{mx:.1f}" y1="{my}" x2="{mx:.1f}" y2="{my + mh}" stroke="#d62728" '
                     f'stroke-width="3"><title>{e(tip)}</title></line>')
    for lx, ly, color, label in lay.legend:
        parts.append(f'<rect x="{lx:.1f}" y="{ly}" width="14" height="14" fill="{color}"/>')
        parts.append(f'<text x="{lx + 20:.1f}" y="{ly + 7}" font-size="11" dominant-baseline="middle" '
                     f'fill="#333">{e(label)}</text>')
    parts.append("</svg>")
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{e(lay.title)}</title></head>\n"
            f"<body style=\"margin:16px;background:#fafafa\">\n" + "\n".join(parts) + "\n</body></html>\n")
    Path(path).write_text(page, encoding="utf-8")


def write(events: Iterable[Event], path: str | Path,
          arrange: Callable[[Timeline], Timeline] = lambda tl: tl) -> Layout:
    """Draw the timeline of `events` into `path`: .png (Pillow) or .html/.svg-in-html. `arrange`
    reshapes it first (`timeline_groups.group`: a big pool's nodes as groups of lanes)."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise ValueError(f"timeline output {path}: use a .png or .html file name")
    lay = layout(arrange(build(events)))
    (render_png if suffix == ".png" else render_html)(lay, path)
    return lay
