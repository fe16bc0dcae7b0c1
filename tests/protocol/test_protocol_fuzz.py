"""Quick fuzzing of the decoder and the message layer: only `ProtocolError` may escape.

The long run (1,000,000 inputs, with the slowest input and peak memory reported) is
`python -m bench.fuzz_protocol --count 1000000`; here hypothesis drives the same targets briefly.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz_protocol import Generator, _message, _mutate, feed_all

ROOT = Path(__file__).resolve().parents[2]
_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.binary(max_size=256))
def test_random_bytes_raise_only_protocol_errors(data):
    feed_all(data)


@_SETTINGS
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=1, max_value=4))
def test_mutated_valid_frames_raise_only_protocol_errors(seed, frames):
    rng = random.Random(seed)
    stream = b"".join(_message(rng) for _ in range(frames))
    feed_all(stream, rng)
    feed_all(_mutate(rng, stream), rng)


@_SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=255), max_size=64), st.integers(min_value=0, max_value=2**16))
def test_valid_frames_with_bytes_overwritten_raise_only_protocol_errors(patch, seed):
    rng = random.Random(seed)
    frame = bytearray(_message(rng))
    for i, value in enumerate(patch):
        frame[(i * 7 + seed) % len(frame)] = value
    feed_all(bytes(frame), rng)


def test_the_generator_covers_every_kind_of_input():
    gen = Generator(seed=1)
    kinds = {gen()[0] for _ in range(20_000)}
    assert kinds == {"valid", "mutated", "msgpack", "random", "hostile"}


def test_the_fuzz_harness_runs_and_reports(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.fuzz_protocol", "--count", "3000", "--seed", "7"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "escaped (not ProtocolError): 0" in proc.stdout
    assert "slowest input:" in proc.stdout and "peak RSS:" in proc.stdout


def test_the_harness_reports_an_escape_as_a_failure(monkeypatch):
    # a harness that cannot fail proves nothing: a decoder that raises something else is caught
    import bench.fuzz_protocol as fuzz

    def broken(body):
        raise KeyError("not a ProtocolError")

    monkeypatch.setattr(fuzz, "decode_body", broken)
    result = fuzz.run(50, seed=0, trace_every=0, report=lambda line: None)
    assert len(result["failures"]) == 50 and "KeyError" in result["failures"][0][2]
