"""Fuzz the protocol: random and mutated frames fed to the decoder and the message layer.

    python -m bench.fuzz_protocol --count 1000000 [--seed N] [--trace-every 1000]

Every input goes to four targets: `decode_body` (the frame decoder), a client and a worker
`Connection` after their handshake (the message layer: state table, buffer announcements, chunks;
fed in random pieces, then end of stream), a fresh worker `Connection` before its handshake, and the
resumable link's `Inbox`. The one exception allowed to escape is `ProtocolError`; anything else is a
failure, printed with the input (hex) that caused it.

Inputs: valid frames of every message type with random field values (the seeds), those mutated (bit
flips, byte changes, insertions, deletions, truncations, spliced seeds, a rewritten length prefix or
msgpack header), msgpack of random structures framed as messages, raw random bytes, and now and then
a large hostile frame (a huge array or buffer announcement under the frame limit).

Reported: inputs run, failures, the slowest input (its CPU time, kind, size and a digest; and the
longest wall time, which on a shared machine includes time other processes took), the peak
resident memory of the process and, for every `--trace-every`-th input and every hostile one, the
peak memory tracemalloc saw while it was handled (inputs are fed as memoryview slices, so that is the protocol's own cost,
not the harness's copies). Exit status 1 when anything other than `ProtocolError` escaped, when an
input took over `--max-seconds` (1 s) of CPU, or when peak memory passed `--max-rss-mb`.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import resource
import struct
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from skyhive.protocol import (
    PROTOCOL_VERSION,
    Ack,
    Cancel,
    Connection,
    Goodbye,
    Hello,
    Output,
    Ping,
    Pong,
    ProtocolError,
    Result,
    Resume,
    Role,
    Shutdown,
    Started,
    Submit,
    Welcome,
)
from skyhive.protocol.codec import HEADER, MAX_BUFFERS, MAX_MESSAGE, decode_body, encode, encode_chunk_header
from skyhive.protocol.resume import Inbox, encode_control

__all__ = ["feed_all", "Generator", "main"]

_HELLO = Hello(protocol_version=PROTOCOL_VERSION, python_version="3.11.7", skyhive_version="0.1.0",
               max_frame=1 << 26)
_WELCOME = Welcome(protocol_version=PROTOCOL_VERSION, python_version="3.11.7", skyhive_version="0.1.0",
                   max_frame=1 << 26, pid=1)


def _ready(role: Role) -> Connection:
    """A connection of `role` just past its handshake."""
    conn = Connection(role)
    if role is Role.CLIENT:
        conn.hello("0.1.0", "3.11.7")
        conn.receive_data(encode(_WELCOME))
    else:
        conn.receive_data(encode(_HELLO))
        conn.send(_WELCOME)
    return conn


def _feed(conn: Connection, data: memoryview, cuts: list[int]) -> None:
    try:
        pos = 0
        for cut in cuts:
            conn.receive_data(data[pos:cut])
            pos = cut
        conn.receive_data(data[pos:])
        target = conn.receive_target()
        if target is not None:  # a chunk in progress: the reading-into path, then end of stream
            n = min(len(target), 3)
            target[:n] = b"\0" * n
            conn.received_into(n)
        conn.receive_data(b"")
    except ProtocolError:
        pass


def feed_all(data: bytes, rng: random.Random | None = None) -> None:
    """Give `data` to every target; raises whatever escapes that is not a `ProtocolError`."""
    rng = rng or random.Random(len(data))
    cuts = sorted(rng.sample(range(1, len(data)), min(3, len(data) - 1))) if len(data) > 1 else []
    view = memoryview(data)  # slices of it copy nothing: what is measured is the protocol's own cost
    try:
        decode_body(view[HEADER.size:])
    except ProtocolError:
        pass
    try:
        decode_body(view)
    except ProtocolError:
        pass
    _feed(_ready(Role.CLIENT), view, cuts)
    _feed(_ready(Role.WORKER), view, cuts)
    _feed(Connection(Role.WORKER), view, cuts)
    inbox = Inbox()
    try:
        for piece in (view[: cuts[0]], view[cuts[0]:]) if cuts else (view,):
            inbox.feed(piece)
    except ProtocolError:
        pass


# ---- inputs ------------------------------------------------------------------------------------

def _text(rng: random.Random) -> str:
    return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600\0\n") for _ in range(rng.randrange(12)))


def _int(rng: random.Random) -> int:
    return rng.choice([0, 1, -1, 2**31, 2**63 - 1, -(2**63), rng.randrange(1 << 16), rng.randrange(1 << 64)])


def _any(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return _int(rng)
    if kind == 3:
        return rng.random() * 1e6
    if kind == 4:
        return _text(rng)
    if kind == 5:
        return rng.randbytes(rng.randrange(16))
    if kind == 6:
        return [_any(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind == 7:
        return {_text(rng): _any(rng, depth + 1) for _ in range(rng.randrange(4))}
    return msgpack.ExtType(rng.randrange(128), rng.randbytes(rng.randrange(8)))


def _message(rng: random.Random) -> bytes:
    """One valid frame (or a chunk) with random field values."""
    task = rng.randrange(1, 6)
    sizes = tuple(rng.randrange(0, 9) for _ in range(rng.randrange(3)))
    options = {"kind": "call"} if rng.random() < 0.5 else {}
    msgs = [
        Submit(task_id=task, fn_id=rng.randbytes(16), fn=rng.randbytes(rng.randrange(20)), args=b"a",
               buffer_sizes=sizes, batch=rng.random() < 0.5, options=options),
        Result(task_id=task, ok=rng.random() < 0.5, value=rng.randbytes(rng.randrange(20)), buffer_sizes=sizes,
               error_type=_text(rng), traceback=_text(rng)),
        Started(task_id=task), Output(task_id=task, stream=rng.choice([1, 2]), data=_text(rng)),
        Cancel(task_id=task), Ping(nonce=_int(rng) & 0xFFFF), Pong(nonce=rng.randrange(99)),
        Shutdown(reason=_text(rng)), _HELLO, _WELCOME, Resume(from_seq=rng.randrange(9)), Ack(seq=3),
        Goodbye(exit_status=rng.randrange(-9, 3)),
    ]
    if rng.random() < 0.25:
        data = rng.randbytes(rng.randrange(12))
        head = encode_chunk_header(task, rng.randrange(3), rng.randrange(9), len(data))
        return head + data
    frame = encode(rng.choice(msgs))
    if rng.random() < 0.1:
        frame = encode_control(Ack(seq=rng.randrange(9))) + frame
    return frame


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(8)
        if not b:
            b += rng.randbytes(4)
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0xC0, 0xC1, 0xDC, 0xDD, 0xDE, 0xDF, 0xC4, 0xD9, rng.randrange(256)])
        elif op == 2:
            b[i:i] = rng.randbytes(rng.randrange(1, 9))
        elif op == 3:
            del b[i:i + rng.randrange(1, 9)]
        elif op == 4:
            del b[i:]
        elif op == 5:
            b[:4] = struct.pack(">I", rng.choice([0, 1, len(b), len(b) + 1, MAX_MESSAGE + 1, 1 << 31, rng.randrange(1 << 32)]))
        elif op == 6:  # rewrite an array/map header with a large count
            b[i:i + 1] = rng.choice([b"\xdc\xff\xff", b"\xdd\x00\x10\x00\x00", b"\xdf\x7f\xff\xff\xff", b"\x9f"])
        else:
            b[i:i] = b[rng.randrange(len(b)):][: rng.randrange(1, 64)]
    return bytes(b)


def _hostile(rng: random.Random) -> bytes:
    """A large frame under the frame limit built to cost time or memory."""
    n = rng.choice([MAX_BUFFERS + 1, 1 << 16, 1 << 20, 1 << 24])
    kind = rng.randrange(4)
    if kind == 0:  # a Result announcing n empty buffers
        head = b"\x99" + b"".join(msgpack.packb(v) for v in (Result.tag, 1, True, b"v"))
        body = head + b"\xdd" + struct.pack(">I", n) + b"\x00" * n + b"".join(msgpack.packb(v) for v in ("", "", "", False))
    elif kind == 1:  # an array of n nils
        body = b"\xdd" + struct.pack(">I", n) + b"\xc0" * n
    elif kind == 2:  # nested one-element arrays, as dense as msgpack allows
        body = b"\x91" * min(n, 5000) + b"\xc0"
    else:  # a map of n entries
        body = b"\xdf" + struct.pack(">I", n) + b"\xc0\xc0" * n
    return HEADER.pack(len(body)) + body


@dataclass
class Generator:
    """Produces (kind, bytes) inputs from one seeded random source."""

    seed: int = 0
    rng: random.Random = field(init=False)
    corpus: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.corpus = [_message(self.rng) for _ in range(256)]

    def __call__(self) -> tuple[str, bytes]:
        rng = self.rng
        r = rng.random()
        if r < 0.0005:
            return "hostile", _hostile(rng)
        if r < 0.15:
            return "valid", b"".join(_message(rng) for _ in range(rng.randrange(1, 4)))
        if r < 0.65:
            return "mutated", _mutate(rng, b"".join(rng.choice(self.corpus) for _ in range(rng.randrange(1, 3))))
        if r < 0.85:
            body = msgpack.packb([rng.randrange(16), *(_any(rng) for _ in range(rng.randrange(8)))])
            return "msgpack", HEADER.pack(len(body)) + body
        return "random", rng.randbytes(rng.randrange(64))


# ---- the run -------------------------------------------------------------------------------------

def _rss_mb() -> float:
    """Peak resident memory of this process so far, in MB: VmHWM on Linux (getrusage's maxrss would
    carry over the peak of the process that started us, across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(count: int, seed: int, trace_every: int, report: Callable[[str], None] = print,
        progress_every: int = 100_000) -> dict[str, Any]:
    gen = Generator(seed)
    feed_rng = random.Random(seed + 1)
    slowest = (0.0, "", b"")  # by CPU time: on a shared machine wall time also counts other processes
    slowest_wall = 0.0
    failures: list[tuple[str, bytes, str]] = []
    traced_peak, traced = 0, 0
    kinds: dict[str, int] = {}
    start_rss = _rss_mb()
    began = time.perf_counter()
    for i in range(count):
        kind, data = gen()
        kinds[kind] = kinds.get(kind, 0) + 1
        trace = trace_every > 0 and (i % trace_every == 0 or kind == "hostile")
        if trace:
            tracemalloc.start()
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            feed_all(data, feed_rng)
        except Exception as exc:  # noqa: BLE001 - the point: anything but ProtocolError is a finding
            failures.append((kind, data, f"{type(exc).__name__}: {exc}"))
        dt = time.thread_time() - c0
        slowest_wall = max(slowest_wall, time.perf_counter() - t0)
        if trace:
            traced_peak = max(traced_peak, tracemalloc.get_traced_memory()[1])
            traced += 1
            tracemalloc.stop()
        if dt > slowest[0]:
            slowest = (dt, kind, data)
        if progress_every and (i + 1) % progress_every == 0:
            report(f"  {i + 1} inputs, {len(failures)} failures, {time.perf_counter() - began:.0f} s")
    dt, kind, data = slowest
    return {
        "count": count, "seed": seed, "failures": failures, "kinds": kinds,
        "seconds": time.perf_counter() - began,
        "slowest_seconds": dt, "slowest_wall_seconds": slowest_wall, "slowest_kind": kind, "slowest_size": len(data),
        "slowest_digest": hashlib.sha256(data).hexdigest()[:16], "slowest_head": data[:24].hex(),
        "peak_rss_mb": _rss_mb(), "start_rss_mb": start_rss,
        "traced_inputs": traced, "traced_peak_mb": traced_peak / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz_protocol", description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=100_000, help="inputs to run (default 100000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace-every", type=int, default=1000,
                   help="measure every N-th input's peak memory with tracemalloc (0: never)")
    p.add_argument("--max-seconds", type=float, default=1.0, help="fail if one input takes longer")
    p.add_argument("--max-rss-mb", type=float, default=1024.0, help="fail if the process grows past this")
    args = p.parse_args(argv)
    r = run(args.count, args.seed, args.trace_every, report=lambda line: print(line, flush=True))
    print(f"inputs: {r['count']} (seed {r['seed']}) in {r['seconds']:.1f} s; by kind: {r['kinds']}")
    print(f"escaped (not ProtocolError): {len(r['failures'])}")
    for kind, data, err in r["failures"][:20]:
        print(f"  {kind} {len(data)} bytes {data[:64].hex()}: {err}")
    print(f"slowest input: {r['slowest_seconds'] * 1000:.1f} ms CPU ({r['slowest_kind']}, {r['slowest_size']} bytes, "
          f"sha256 {r['slowest_digest']}, starts {r['slowest_head']}); longest wall time of any input "
          f"{r['slowest_wall_seconds'] * 1000:.1f} ms")
    print(f"peak RSS: {r['peak_rss_mb']:.0f} MB (at start {r['start_rss_mb']:.0f} MB); "
          f"peak traced per input: {r['traced_peak_mb'] * 1024:.0f} KiB over {r['traced_inputs']} sampled inputs "
          "(every hostile one among them)")
    bad = bool(r["failures"]) or r["slowest_seconds"] > args.max_seconds or r["peak_rss_mb"] > args.max_rss_mb
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
