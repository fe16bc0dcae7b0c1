"""tests.procs.Lines, which the tests use to read a child's output: a substring, a pattern or a predicate finds
its line past other lines; a deadline or the stream's end fails with what the stream said, never blocks."""

import re, subprocess, sys, time
import pytest
from tests.procs import Lines

def child(code):
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)

def test_substring_pattern_predicate_and_noise():
    p = child("import sys,time; print('warning: noise'); print('hello 12 world', flush=True); time.sleep(30)")
    out = Lines(p.stdout)
    assert out.wait_for("12 world", 30, "x") == "hello 12 world\n"
    p.kill(); p.wait()
    p = child("print('a'); print('b 7')")
    out = Lines(p.stdout)
    assert out.wait_for(re.compile(r"\d$"), 30, "y").strip() == "b 7"
    p.wait()

def test_deadline_and_end():
    p = child("import time; print('only', flush=True); time.sleep(30)")
    out = Lines(p.stdout)
    t = time.monotonic()
    with pytest.raises(AssertionError, match="no such line within 1 s; so far:\nonly"):
        out.wait_for("never", 1, "z")
    assert time.monotonic() - t < 10
    p.kill(); p.wait()
    p = child("print('x')")
    out = Lines(p.stdout)
    with pytest.raises(AssertionError, match="the stream ended first"):
        out.wait_for("never", 30, "w")
