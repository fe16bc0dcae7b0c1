"""Live output: streamed while tasks run, filtered on the worker and on the client, complete and in
order, with backpressure instead of loss; `capture=True`; the terminal printer; the worker streams."""

from __future__ import annotations

import gc
import io
import os
import subprocess
import sys
import threading
import time

import anyio
import pytest

import skyhive as sky
from skyhive.protocol.info import InstanceInfo
from skyhive.runtime.events.log import EventLog, read_log
from skyhive.runtime.events.types import OutputChunk
from skyhive.runtime.output.router import OutputRouter, OutputStalled
from skyhive.runtime.output.printer import PARTIAL_DELAY, PROGRESS_EVERY, TerminalPrinter
from skyhive.runtime.common.selection import selector
from skyhive.runtime.worker.capture import MAX_PIECE, FdPump, TaskStream

pytestmark = pytest.mark.anyio

# Each `await` below that could hang on a bug is bounded; the bounds are generous (a loaded
# 2-core machine) and say nothing about speed, which lives in bench/.
LIMIT = 120


# ---- functions the nodes run ---------------------------------------------------------------------


def tick_lines(n, period):
    for i in range(n):
        print(f"line {i} written={time.time():.6f}")
        time.sleep(period)
    return sky.instance_info().node


def spew(n, stream="stdout"):
    out = getattr(sys, stream)
    node = sky.instance_info().node
    for i in range(n):
        print(f"{node}:{i}", file=out)
    return n


def say():
    node = sky.instance_info().node
    print(f"out {node}")
    print(f"err {node}", file=sys.stderr)
    os.write(1, f"fd-out {node}\n".encode())
    os.write(2, f"fd-err {node}\n".encode())
    return node


@sky.stdout(only="head")
def head_chatter(n):
    node = sky.instance_info().node
    for i in range(n):
        print(f"node {node} line {i} " + "x" * 80)
    return node


@sky.stdout(only=2)
def say_only_2():
    return say()


@sky.stdout(only=(1, 3))
def say_only_1_3():
    return say()


@sky.stdout(only=lambda info: info.node % 2 == 0)
def say_even():
    return say()


@sky.stdout(only="head")
def say_head():
    return say()


@sky.stdout(only=None)
def say_nobody():
    return say()


@sky.stdout(only="all")
def say_all():
    return say()


@sky.stderr(only=3)
def say_err_only_3():
    return say()


@sky.silent
def say_silent():
    return say()


def native_output():
    print("python before", flush=True)
    subprocess.run(["echo", "from echo"], check=True)
    subprocess.run(["sh", "-c", "echo from sh to stderr >&2"], check=True)
    os.write(1, b"raw fd 1\n")
    os.write(2, b"raw fd 2\n")
    print("python after")
    return 7


def partial_then_wait(flag):
    print("working...", end="")  # no newline, no flush: the flusher sends it after a short delay
    deadline = time.time() + 60
    while not os.path.exists(flag) and time.time() < deadline:
        time.sleep(0.01)
    print(" done")
    return os.path.exists(flag)


def progress_bar(n):
    for i in range(n + 1):  # a hand-made bar: rewrites, no flush
        print(f"\rcopy: {100 * i // n:3d}% {i}/{n}", end="", file=sys.stderr)
    print(file=sys.stderr)
    return n


def tqdm_bar(n):
    from tqdm import tqdm  # flushes after every update: each one travels, the printer collapses them

    for _ in tqdm(range(n), file=sys.stderr, mininterval=0, miniters=1, ascii=True, desc="work"):
        pass
    return n


def whoami_capture(tag):
    info = sky.instance_info()
    print(f"hello from {info.node}.{info.local_rank} {tag}")
    print(f"warn {info.node}", file=sys.stderr)
    return (info.node, info.local_rank)


# ---- helpers -------------------------------------------------------------------------------------


class Collector:
    """Takes every record of a `pool.output()` stream in a task; `text(node)` reassembles them."""

    def __init__(self, stream, *, delay=0.0):
        self.stream = stream
        self.records = []
        self.delay = delay
        self.error = None

    async def run(self):
        try:
            async for rec in self.stream:
                self.records.append(rec)
                if self.delay:
                    await anyio.sleep(self.delay)
        except Exception as exc:  # noqa: BLE001 - kept for the test to look at
            self.error = exc

    async def settle(self):
        """Wait until the stream holds nothing the task has not taken yet."""
        with anyio.fail_after(LIMIT):
            while self.stream.pending:
                await anyio.sleep(0.01)
        await anyio.sleep(0)

    def text(self, node, stream="stdout"):
        return "".join(r.text for r in self.records if r.node == node and r.stream == stream)


def channels(pool):
    return [c for n in pool._runtime.nodes for c in n.channels]


def printed_nodes(text):
    return {int(line.split("]")[0].split()[1]) for line in text.splitlines() if line.startswith("[node ")}


# ---- 1. streaming while the task runs --------------------------------------------------------------


async def test_each_nodes_first_line_arrives_long_before_the_call_returns():
    async with sky.Pool(nodes=2, output=None) as pool:
        collector = Collector(pool.output())
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run)
            with anyio.fail_after(LIMIT):
                assert await pool.broadcast(tick_lines, 3, 1.0) == [0, 1]
            returned = time.time()
            await collector.settle()
            tg.cancel_scope.cancel()
    for node in (0, 1):
        arrivals = {}  # line number -> when the record holding it reached the caller
        written = {}  # line number -> when the node wrote it
        for rec in collector.records:
            if rec.node != node:
                continue
            for line in rec.text.splitlines():
                i, stamp = line.removeprefix("line ").split(" written=")
                arrivals.setdefault(int(i), rec.ts)
                written[int(i)] = float(stamp)
        assert sorted(arrivals) == [0, 1, 2]
        # the caller had line 0 before the node even wrote line 2 (and so before the call returned)
        assert arrivals[0] < written[2] < returned
        assert arrivals[0] < arrivals[1] < arrivals[2]


async def test_a_partial_line_is_sent_while_the_task_waits(tmp_path):
    flag = str(tmp_path / "seen")
    async with sky.Pool(nodes=1, output=None) as pool:
        out = pool.output()
        result = []

        async def call():
            result.append(await pool.run(partial_then_wait, flag))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                async for rec in out:
                    if "working..." in rec.text:
                        assert "\n" not in rec.text  # sent without its newline
                        break
                open(flag, "w").close()  # the task waits for this: it only ends if we saw the line
    assert result == [True]


# ---- 2. a worker-side filter keeps other nodes' text off the wire ----------------------------------


async def test_stdout_only_head_never_sends_other_nodes_lines(capsys):
    async with sky.Pool(nodes=4) as pool:
        chans = channels(pool)
        bytes_before = [c.conn.bytes_received for c in chans]
        frames_before = [c.conn.frames_received for c in chans]
        with anyio.fail_after(LIMIT):
            assert await pool.broadcast(head_chatter, 2000) == [0, 1, 2, 3]
        received = [c.conn.bytes_received - b for c, b in zip(chans, bytes_before)]
        frames = [c.conn.frames_received - f for c, f in zip(chans, frames_before)]
        log_path = pool.log_path
    assert received[0] > 2000 * 80  # node 0's lines came
    for node in (1, 2, 3):  # the others sent their Started and Result frames (and maybe a Pong), no text
        assert received[node] < 1000, received
        assert frames[node] < 10, frames
    chunks = [e for e in read_log(log_path) if isinstance(e, OutputChunk)]
    assert chunks and {e.node for e in chunks} == {0}
    printed = capsys.readouterr().out
    assert printed_nodes(printed) == {0}
    assert printed.count("[node 0] node 0 line ") == 2000


# ---- 3. selections on both sides -----------------------------------------------------------------


async def test_worker_side_filters_select_exactly_the_right_nodes():
    cases = [
        (say_only_2, {2}, {0, 1, 2, 3}),
        (say_only_1_3, {1, 3}, {0, 1, 2, 3}),
        (say_even, {0, 2}, {0, 1, 2, 3}),
        (say_head, {0}, {0, 1, 2, 3}),
        (say_nobody, set(), {0, 1, 2, 3}),
        (say_all, {0, 1, 2, 3}, {0, 1, 2, 3}),
        (say_err_only_3, {0, 1, 2, 3}, {3}),
        (say_silent, set(), set()),
    ]
    async with sky.Pool(nodes=4, output=None) as pool:
        for fn, out_nodes, err_nodes in cases:
            with anyio.fail_after(LIMIT):
                results = await pool.broadcast(fn, capture=True)
            assert [r.value for r in results] == [0, 1, 2, 3]
            for r in results:
                n = r.node
                # Python-level and fd-level writes obey the same filter
                want_out = f"out {n}\nfd-out {n}\n" if n in out_nodes else ""
                want_err = f"err {n}\nfd-err {n}\n" if n in err_nodes else ""
                assert sorted(r.stdout.splitlines()) == sorted(want_out.splitlines()), (fn.__name__, n)
                assert sorted(r.stderr.splitlines()) == sorted(want_err.splitlines()), (fn.__name__, n)


async def test_client_side_output_selects_what_is_printed_pool_wide_and_per_call(capsys):
    async with sky.Pool(nodes=4, output=(1, 2)) as pool:
        collector = Collector(pool.output())
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run)

            async def printed_by(**kw):
                capsys.readouterr()
                with anyio.fail_after(LIMIT):
                    await pool.broadcast(say, **kw)
                cap = capsys.readouterr()
                return printed_nodes(cap.out), printed_nodes(cap.err)

            assert await printed_by() == ({1, 2}, {1, 2})  # the pool's selection
            assert await printed_by(output="head") == ({0}, {0})
            assert await printed_by(output=3) == ({3}, {3})
            assert await printed_by(output=(0, 3)) == ({0, 3}, {0, 3})
            assert await printed_by(output=lambda info: info.node >= 2) == ({2, 3}, {2, 3})
            assert await printed_by(output="all") == ({0, 1, 2, 3}, {0, 1, 2, 3})
            assert await printed_by(output=None) == (set(), set())
            # run and map take it too
            capsys.readouterr()
            await pool.run(say, output=None)
            assert printed_nodes(capsys.readouterr().out) == set()
            node = await pool.run(say, output="all")
            assert printed_nodes(capsys.readouterr().out) == {node}
            await pool.map(spew, [1, 1, 1, 1], output=None)
            assert printed_nodes(capsys.readouterr().out) == set()
            # pool.output() gets everything, whatever is printed
            await collector.settle()
            tg.cancel_scope.cancel()
    assert {r.node for r in collector.records} == {0, 1, 2, 3}
    for node in range(4):  # seven broadcasts, and the two runs somewhere
        assert collector.text(node).splitlines().count(f"out {node}") >= 7


async def test_a_client_predicate_that_raises_prints_and_breaks_nothing(capsys, caplog):
    async with sky.Pool(nodes=1) as pool:
        with anyio.fail_after(LIMIT):
            assert await pool.run(say, output=lambda info: 1 / 0) == 0
            assert await pool.run(say) == 0  # the connection is fine
    assert capsys.readouterr().out.count("[node 0] out 0\n") == 2
    assert "output= predicate" in caplog.text and "ZeroDivisionError" in caplog.text


def test_selector_forms():
    infos = [InstanceInfo(node=i, total_nodes=4, head_addr="h", head_port=1, pool_id="p") for i in range(4)]

    def chosen(spec):
        pick = selector(spec)
        return {i.node for i in infos if pick(i)}

    assert chosen("all") == {0, 1, 2, 3}
    assert chosen(None) == set()
    assert chosen("head") == {0}
    assert chosen(2) == {2}
    assert chosen((1, 3)) == {1, 3}
    assert chosen(()) == set()
    assert chosen(lambda info: info.node % 2 == 1) == {1, 3}
    np = pytest.importorskip("numpy")
    assert chosen(np.int64(3)) == {3}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("some", r"'some' is not an output selection: use 'all', 'head', None"),
        ("", "is not an output selection"),
        (True, "not a bool"),
        ([0, 1], r"as a tuple, e\.g\."),
        ({0}, "as a tuple"),
        (-1, "count from 0, got -1"),
        ((0, -2), "count from 0, got -2"),
        ((0, "a"), "is not an output selection"),
        ((False,), "not bools"),
        (1.5, "is not an output selection"),
    ],
)
async def test_bad_selections_are_a_clear_value_error(spec, message):
    with pytest.raises(ValueError, match=message):
        selector(spec)
    with pytest.raises(ValueError, match=rf"^Pool\(output\)="):
        sky.Pool(output=spec)
    with pytest.raises(ValueError, match=r"^stdout\(only\)="):
        sky.stdout(only=spec)
    with pytest.raises(ValueError, match=r"^stderr\(only\)="):
        sky.stderr(only=spec)


async def test_bad_per_call_selection_fails_before_anything_is_sent():
    async with sky.Pool(nodes=1) as pool:
        with pytest.raises(ValueError, match=r"^output=\[0\]: pass the node indexes as a tuple"):
            await pool.broadcast(say, output=[0])
        with pytest.raises(ValueError, match="is not an output selection"):
            await pool.run(say, output="every")
        assert pool.state.tasks_submitted == 0


def test_decorated_functions_print_normally_off_a_node(capsys):
    assert say_silent.__name__ == "say_silent"

    @sky.stdout(only=3)
    def local():
        print("printed here")
        return 1

    assert local() == 1
    assert capsys.readouterr().out == "printed here\n"


# ---- 4. complete and in order; backpressure ------------------------------------------------------


async def test_200k_lines_from_each_of_4_nodes_arrive_complete_and_in_order():
    n = 200_000
    async with sky.Pool(nodes=4, output=None) as pool:
        collector = Collector(pool.output())
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run)
            with anyio.fail_after(LIMIT):
                assert await pool.broadcast(spew, n) == [n] * 4
            await collector.settle()
            tg.cancel_scope.cancel()
    for node in range(4):
        lines = collector.text(node).split("\n")
        assert lines[-1] == ""
        assert lines[:-1] == [f"{node}:{i}" for i in range(n)], f"node {node}"
    assert collector.error is None


async def test_stdout_and_stderr_each_keep_their_order():
    async with sky.Pool(nodes=2, output=None) as pool:
        collector = Collector(pool.output())
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run)
            with anyio.fail_after(LIMIT):
                await pool.broadcast(spew, 20_000, "stderr")
                await pool.broadcast(spew, 20_000, "stdout")
            await collector.settle()
            tg.cancel_scope.cancel()
    for node in (0, 1):
        for stream in ("stdout", "stderr"):
            assert collector.text(node, stream).splitlines() == [f"{node}:{i}" for i in range(20_000)]


async def test_a_slow_consumer_slows_the_workers_and_loses_nothing():
    n = 150_000  # ~1 MB of text per node, twenty times the subscriber's buffer
    limit = 50_000
    # short heartbeats: the workers stay paused far longer than heartbeat_timeout, and must survive
    async with sky.Pool(nodes=2, output=None, heartbeat_interval=0.2, heartbeat_timeout=1.0) as pool:
        router = pool._runtime.router
        stream = router.subscribe(max_buffer=limit)
        results = []

        async def call():
            results.append(await pool.broadcast(spew, n))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(LIMIT):
                while router.statistics()["paused_links"] < 2:
                    await anyio.sleep(0.01)
            held = stream.queued
            await anyio.sleep(2.0)  # paused: nothing more arrives, the workers wait on their pipes
            assert not results
            assert stream.queued == held
            # bounded: the mark plus what was already read from each pipe when it paused
            assert stream.max_queued < limit + 2 * 2 * 256 * 1024
            collector = Collector(stream, delay=0.001)
            tg.start_soon(collector.run)
            with anyio.fail_after(LIMIT):
                while not results:
                    await anyio.sleep(0.01)
            await collector.settle()
            tg.cancel_scope.cancel()
        assert results == [[n, n]]
        assert router.pauses >= 1
        assert not [e for e in pool._runtime.log.recent if getattr(e, "outcome", "") == "lost"]
    for node in (0, 1):
        assert collector.text(node).splitlines() == [f"{node}:{i}" for i in range(n)]


async def test_printing_only_pools_never_pause(capsys):
    async with sky.Pool(nodes=2) as pool:
        with anyio.fail_after(LIMIT):
            await pool.broadcast(spew, 50_000)
        assert pool._runtime.router.pauses == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 100_000


async def test_a_consumer_that_breaks_out_does_not_stall_the_pool():
    async with sky.Pool(nodes=2, output=None) as pool:
        router = pool._runtime.router
        got = []

        async def take_one(stream):  # the only reference to the stream is this frame's
            async for rec in stream:
                got.append(rec)
                break

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(take_one, router.subscribe(max_buffer=10_000))
                await pool.broadcast(say)
            assert len(got) == 1
            assert router.statistics()["subscribers"] == 0
            assert await pool.broadcast(spew, 100_000) == [100_000] * 2
        assert router.pauses == 0
        # a stream that is closed explicitly, mid-way, too
        async with router.subscribe(max_buffer=10_000) as stream:
            with anyio.fail_after(LIMIT):
                await pool.broadcast(spew, 10)
                await stream.__anext__()
        assert router.statistics()["subscribers"] == 0
        with anyio.fail_after(LIMIT):
            assert await pool.broadcast(spew, 100_000) == [100_000] * 2


async def test_a_forgotten_iterator_is_detached_with_an_error_not_silently():
    async with sky.Pool(nodes=2, output=None) as pool:
        router = pool._runtime.router
        forgotten = router.subscribe(max_buffer=10_000, stall_timeout=1.0)
        with anyio.fail_after(LIMIT):
            assert await pool.broadcast(spew, 100_000) == [100_000] * 2  # finishes once detached
        assert router.detached == 1 and router.pauses >= 1
        got = []
        with pytest.raises(OutputStalled, match=r"took no record for .* \(stall_timeout=1 s\)"):
            async for rec in forgotten:
                got.append(rec)
        assert got  # what it held before it was detached is still delivered, then the error


# ---- 5. native and subprocess output ---------------------------------------------------------------


async def test_subprocess_and_fd_output_reach_the_caller_in_order():
    async with sky.Pool(nodes=1, output=None) as pool:
        collector = Collector(pool.output())
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run)
            with anyio.fail_after(LIMIT):
                result = await pool.run(native_output, capture=True)
            await collector.settle()
            tg.cancel_scope.cancel()
    assert result.value == 7
    # all of it arrived before the Result (it is in the call's capture), in write order
    assert result.stdout == "python before\nfrom echo\nraw fd 1\npython after\n"
    assert result.stderr == "from sh to stderr\nraw fd 2\n"
    assert collector.text(0) == result.stdout
    assert collector.text(0, "stderr") == result.stderr


# ---- capture=True, progress bars -----------------------------------------------------------------


async def test_capture_returns_value_and_output_per_worker():
    async with sky.Pool(nodes=2, processes_per_node=2, output=None) as pool:
        with anyio.fail_after(LIMIT):
            results = await pool.broadcast(whoami_capture, "b", capture=True)
            one = await pool.run(whoami_capture, "r", capture=True)
            plain = await pool.run(whoami_capture, "p")
    assert [type(r) for r in results] == [sky.Captured] * 4
    assert [(r.node, r.local_rank) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in results:
        assert r.value == (r.node, r.local_rank)
        assert r.stdout == f"hello from {r.node}.{r.local_rank} b\n"
        assert r.stderr == f"warn {r.node}\n"
    assert isinstance(one, sky.Captured) and one.value == (one.node, one.local_rank)
    assert one.stdout.endswith(" r\n")
    assert isinstance(plain, tuple)


async def test_progress_bars_travel_batched_and_print_once(capsys):
    updates = 20_000
    async with sky.Pool(nodes=1) as pool:
        collector = Collector(pool.output())
        async with anyio.create_task_group() as tg:
            tg.start_soon(collector.run)
            with anyio.fail_after(LIMIT):
                await pool.run(progress_bar, updates)
                bar = capsys.readouterr().err.splitlines()
                await pool.run(tqdm_bar, 2000)
                tq = capsys.readouterr().err.splitlines()
            await collector.settle()
            tg.cancel_scope.cancel()
    stderr = [r for r in collector.records if r.stream == "stderr"]
    raw = "".join(r.text for r in stderr)
    assert raw.count("\r") > updates + 2000  # every rewrite reached pool.output()
    bar_records = [r for r in stderr if "copy:" in r.text]
    assert len(bar_records) < updates / 100  # rewrites written without a flush travel batched
    # printed as the final state; at most an intermediate state shown if a bar took a while
    for lines, final in ((bar, f"[node 0] copy: 100% {updates}/{updates}"), (tq, "[node 0] work: 100%")):
        assert 1 <= len(lines) <= 3, lines
        assert lines[-1].startswith(final)
        assert "\r" not in "".join(lines)


# ---- the terminal printer ------------------------------------------------------------------------


class Term(io.StringIO):
    def __init__(self, tty=False):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def printer(tty=False, multi=False):
    out, err = Term(tty), Term(tty)
    return TerminalPrinter(multi_process=multi, stdout=out, stderr=err), out, err


def test_printer_prefixes_lines_and_joins_split_lines():
    p, out, err = printer()
    p.feed(0, 0, 1, "hel", 0.0)
    p.feed(1, 0, 1, "a\nb\n", 0.0)
    p.feed(0, 0, 1, "lo\nwor", 0.0)
    p.feed(0, 0, 2, "oops\n", 0.0)
    p.feed(0, 0, 1, "ld\n", 0.0)
    assert out.getvalue() == "[node 1] a\n[node 1] b\n[node 0] hello\n[node 0] world\n"
    assert err.getvalue() == "[node 0] oops\n"
    assert not p.pending


def test_printer_labels_worker_processes_and_colors_a_terminal():
    p, out, _ = printer(multi=True)
    p.feed(1, 1, 1, "x\n", 0.0)
    assert out.getvalue() == "[node 1.1] x\n"
    p, out, _ = printer(tty=True)
    p.feed(2, 0, 1, "x\n", 0.0)
    assert out.getvalue() == "\x1b[35m[node 2]\x1b[0m x\n"


def test_printer_collapses_carriage_return_rewrites():
    p, out, _ = printer()
    p.feed(0, 0, 1, "\r 10%\r 20%\r 30%\n", 0.0)
    p.feed(0, 0, 1, "dos line\r\nnext\r\n", 0.0)
    p.feed(0, 0, 1, "\r 1%", 0.0)
    p.feed(0, 0, 1, "\r 2%\r 3", 0.01)
    p.feed(0, 0, 1, "%\r 100%\n", 0.02)
    assert out.getvalue() == "[node 0]  30%\n[node 0] dos line\n[node 0] next\n[node 0]  100%\n"


def test_printer_shows_a_partial_line_after_a_delay_off_a_terminal():
    p, out, _ = printer()
    p.feed(0, 0, 1, "loading...", 0.0)
    p.tick(PARTIAL_DELAY / 2)
    assert out.getvalue() == ""
    p.tick(PARTIAL_DELAY * 1.5)
    assert out.getvalue() == "[node 0] loading...\n"
    p.feed(0, 0, 1, " done\n", 1.0)
    p.feed(0, 0, 1, "tail", 1.0)
    p.end(0, 0)
    assert out.getvalue() == "[node 0] loading...\n[node 0]  done\n[node 0] tail\n"
    assert not p.pending


def test_printer_rate_limits_a_progress_bar_off_a_terminal():
    p, out, _ = printer()
    t = 0.0
    for i in range(200):  # 10 s of a bar rewriting itself every 50 ms
        p.feed(0, 0, 1, f"\r{i}%", t)
        t += 0.05
        p.tick(t)
    p.feed(0, 0, 1, "\rdone\n", t)
    lines = out.getvalue().splitlines()
    assert len(lines) <= 2 + 10 / PROGRESS_EVERY
    assert lines[-1] == "[node 0] done"


def test_printer_redraws_a_partial_line_in_place_on_a_terminal():
    p, out, _ = printer(tty=True)
    pre = "\x1b[36m[node 0]\x1b[0m "
    p.feed(0, 0, 1, "\r1%", 0.0)
    p.tick(1.0)
    assert out.getvalue() == pre + "1%"
    p.feed(0, 0, 1, "\r2%", 1.1)
    p.tick(2.0)
    assert out.getvalue() == pre + "1%" + "\r\x1b[K" + pre + "2%"
    p.feed(0, 0, 1, "\r100%\n", 2.1)
    assert out.getvalue().endswith("\r\x1b[K" + pre + "100%\n")
    # another node's line ends the one on screen first
    p.feed(0, 0, 1, "half", 3.0)
    p.tick(4.0)
    p.feed(1, 0, 1, "other\n", 4.1)
    assert out.getvalue().endswith(pre + "half\n\x1b[33m[node 1]\x1b[0m other\n")


def test_printer_holds_at_most_a_bounded_partial_line():
    p, out, _ = printer()
    p.feed(0, 0, 1, "x" * 70_000, 0.0)
    assert out.getvalue() == "[node 0] " + "x" * 70_000 + "\n"
    assert not p.pending


# ---- the router, driven by hand ------------------------------------------------------------------


class FakeLink:
    def __init__(self):
        self.paused = False

    def pause_reading(self):
        self.paused = True

    def resume_reading(self):
        self.paused = False


class FakeChannel:
    def __init__(self, node):
        self.node = node
        self.local_rank = 0
        self.link = FakeLink()
        self.last_seen = 0.0
        self.shutting_down = False


def make_router():
    infos = {(i, 0): InstanceInfo(node=i, total_nodes=2, head_addr="h", head_port=1, pool_id="p")
             for i in range(2)}
    log = EventLog("p", path=None)
    quiet = TerminalPrinter(multi_process=False, stdout=Term(), stderr=Term())
    return OutputRouter(log, None, infos, multi_process=False, printer=quiet), log


async def test_router_pauses_every_delivering_link_over_high_water_and_resumes_when_drained():
    router, log = make_router()
    a, b = FakeChannel(0), FakeChannel(1)
    stream = router.subscribe(max_buffer=100)
    router.deliver(a, None, 1, "x" * 60)
    assert not a.link.paused
    router.deliver(a, None, 1, "x" * 60)  # 120 > 100
    assert a.link.paused
    router.deliver(b, None, 2, "y" * 10)  # delivered while paused: paused too
    assert b.link.paused
    assert log.state.output_chunks == 3  # the log has everything
    await stream.__anext__()
    assert a.link.paused  # 70 > low water (25)
    await stream.__anext__()
    assert not a.link.paused and not b.link.paused
    assert a.last_seen > 0 and b.last_seen > 0  # the silence was ours, not the workers'
    rec = await stream.__anext__()
    assert (rec.node, rec.stream, rec.text) == (1, "stderr", "y" * 10)
    assert router.pauses == 1


async def test_router_keeps_paused_workers_heartbeats_fresh_and_detaches_a_stalled_subscriber():
    router, _ = make_router()
    a = FakeChannel(0)
    stream = router.subscribe(max_buffer=10, stall_timeout=30)
    router.deliver(a, None, 1, "x" * 20)
    assert a.link.paused
    router._tick()
    assert a.last_seen > 0 and a.link.paused  # still within stall_timeout
    stream._q.last_take -= 31
    router._tick()
    assert not a.link.paused and router.detached == 1
    assert (await stream.__anext__()).text == "x" * 20
    with pytest.raises(OutputStalled):
        await stream.__anext__()


async def test_router_stops_holding_workers_back_once_the_pool_closes():
    router, _ = make_router()
    a = FakeChannel(0)
    stream = router.subscribe(max_buffer=10)
    router.deliver(a, None, 1, "x" * 20)
    assert a.link.paused
    a.shutting_down = True  # the pool sent Shutdown: the tasks must be able to finish
    router._tick()
    assert not a.link.paused
    router.deliver(a, None, 1, "y" * 20)
    assert not a.link.paused and stream.queued == 40  # nothing lost, nothing held back


async def test_router_forgets_a_dropped_stream_and_ends_streams_at_close():
    router, _ = make_router()
    a = FakeChannel(0)
    stream = router.subscribe(max_buffer=10)
    router.deliver(a, None, 1, "x" * 20)
    assert a.link.paused
    del stream
    gc.collect()
    assert not a.link.paused and router.statistics()["subscribers"] == 0
    kept = router.subscribe()
    router.deliver(a, None, 1, "last\n")
    router.close()
    assert [r.text async for r in kept] == ["last\n"]  # what it held, then the end
    assert [r async for r in router.subscribe()] == []


# ---- the worker's streams ------------------------------------------------------------------------


def test_task_stream_loses_nothing_from_concurrent_writers():
    got = []
    stream = TaskStream(1, lambda s, text: got.append(text), "<test>")

    def writer(k):
        for i in range(20_000):
            stream.write(f"{k}:{i}\n")

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    flusher_stop = threading.Event()

    def flusher():
        while not flusher_stop.is_set():
            stream.flush()

    f = threading.Thread(target=flusher)
    f.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flusher_stop.set()
    f.join()
    stream.flush()
    lines = "".join(got).splitlines()
    for k in range(4):
        assert [line for line in lines if line.startswith(f"{k}:")] == [f"{k}:{i}" for i in range(20_000)]


def test_task_stream_splits_huge_writes_and_drops_when_disabled():
    got = []
    stream = TaskStream(1, lambda s, text: got.append(text), "<test>")
    big = "ab" * (MAX_PIECE + 7)
    stream.write(big)
    stream.flush()
    assert "".join(got) == big and max(map(len, got)) <= MAX_PIECE and len(got) == 3
    got.clear()
    stream.enabled = False
    stream.write("hidden\n")
    stream.flush()
    assert got == []
    with pytest.raises(TypeError, match="must be str, not bytes"):
        stream.write(b"x")


def test_task_stream_replaces_what_cannot_travel_and_has_a_binary_view():
    got = []

    def strict(stream, text):
        text.encode("utf-8")  # what msgpack does: lone surrogates raise
        got.append(text)

    stream = TaskStream(1, strict, "<test>")
    stream.write("bad \udcff byte\n")
    stream.buffer.write("é\n".encode()[:1])
    stream.buffer.write("é\n".encode()[1:])
    stream.flush()
    assert "".join(got) == "bad ? byte\né\n"


def test_fd_output_is_forwarded_in_order_and_drained_by_flush():
    got = []
    stream = TaskStream(1, lambda s, text: got.append(text), "<test>")
    r, w = os.pipe()
    try:
        FdPump(r, 1, stream)  # not started: only flush() reads the pipe
        stream.write("python first\n")
        os.write(w, b"fd second\n")
        stream.flush()  # the end of a task: what the pipe holds goes out before the Result
        assert "".join(got) == "python first\nfd second\n"
        e_acute = "é".encode()
        os.write(w, b"fd third " + e_acute[:1])  # a character split between two writes
        # into an empty buffer: the waiting fd text goes first — its whole lines; the unfinished one
        # waits for the rest of its line, so the print does not land in the middle of it
        stream.write("python fourth\n")
        os.write(w, e_acute[1:] + b"\n")
        stream.flush()
        assert "".join(got) == "python first\nfd second\npython fourth\nfd third é\n"
        os.write(w, b"fd unfinished")
        stream.write("python fifth\n")
        stream.flush()  # a flush sends everything, an unfinished fd line too
        assert "".join(got).endswith("python fourth\nfd third é\npython fifth\nfd unfinished")
    finally:
        os.close(w)
        os.close(r)


def test_fd_pump_forwards_without_any_python_write():
    got = []
    stream = TaskStream(2, lambda s, text: got.append((s, text)), "<test>")
    r, w = os.pipe()
    pump = FdPump(r, 2, stream)
    pump.start()
    os.write(w, b"native\n")
    deadline = time.monotonic() + LIMIT
    while not got and time.monotonic() < deadline:
        time.sleep(0.005)
    assert got == [(2, "native\n")]
    os.close(w)  # EOF ends the pump
    pump.join(LIMIT)
    assert not pump.is_alive()
    os.close(r)
