"""A secret of the pool's image is redacted from task output even when the task writes it in pieces:
a partial write and a flush, one character per write, or a write crossing the 1 MiB piece boundary
of the `Output` frames. Checked in every place output goes: the terminal, `pool.output()` records
(joined), `capture=True`, the event log file and `skyhive logs`."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest

import skyhive as sky
from skyhive.runtime.events.log import read_log
from skyhive.runtime.events.types import OutputChunk
from skyhive.runtime.output.redact import StreamRedactor
from skyhive.runtime.worker.capture import MAX_PIECE

pytestmark = pytest.mark.anyio
LIMIT = 120
SECRET = "tok-3fa9c2e1-SECRET-77"
BIG = MAX_PIECE - 5  # a write of BIG + len(SECRET) characters is cut into two pieces inside SECRET


def leak_in_pieces(stream_name):
    """Write the secret (from the node's environment) three ways; return what was meant to appear."""
    import time

    out = getattr(sys, stream_name)
    token = os.environ["TOKEN"]
    out.write("partial: " + token[:9])
    out.flush()  # one frame ends inside the secret
    time.sleep(0.1)
    out.write(token[9:] + " end\n")
    out.write("one by one: ")
    for ch in token:
        out.write(ch)
        out.flush()
    out.write("\n")
    out.write("x" * BIG + token + " tail\n")  # cut at MAX_PIECE, 5 characters into the secret
    out.flush()
    return f"partial: {token} end\none by one: {token}\n" + "x" * BIG + f"{token} tail\n"


def expected(stream_name):
    return f"partial: *** end\none by one: ***\n{'x' * BIG}*** tail\n"


async def test_a_secret_written_in_pieces_is_redacted_everywhere(capsys, skyhive_home):
    image = sky.Image(secrets={"TOKEN": SECRET})
    async with sky.Pool(nodes=1, image=image, output="all") as pool:
        stream = pool.output(max_buffer=64 * 1024 * 1024)
        with anyio.fail_after(LIMIT):
            written = await pool.run(leak_in_pieces, "stdout")
            captured = await pool.run(leak_in_pieces, "stderr", capture=True)
        assert SECRET in written  # the node really wrote it
        path = pool.log_path
        pool_id = pool.id
    records = [r async for r in stream]
    assert "".join(r.text for r in records if r.stream == "stdout") == expected("stdout")
    assert "".join(r.text for r in records if r.stream == "stderr") == expected("stderr")
    assert captured.stderr == expected("stderr") and captured.value == written

    printed = capsys.readouterr()
    for text in (printed.out, printed.err):
        assert SECRET not in text
        assert text.count("***") == 3, text[-2000:]
    assert "[node 0] one by one: ***" in printed.out and "[node 0] partial: *** end" in printed.err

    raw = open(path).read()
    assert SECRET not in raw and SECRET[:9] in expected("stdout").replace("***", SECRET)
    chunks = [e.text for e in read_log(path) if isinstance(e, OutputChunk)]
    assert "".join(chunks) == expected("stdout") + expected("stderr")

    logs = subprocess.run([sys.executable, "-m", "skyhive", "logs", pool_id], capture_output=True, text=True,
                          timeout=LIMIT, env={**os.environ, "SKYHIVE_HOME": skyhive_home})
    assert logs.returncode == 0, logs.stderr
    for text in (logs.stdout, logs.stderr):
        assert SECRET not in text and text.count("***") == 3, text[-2000:]


def test_only_a_possible_beginning_of_a_secret_is_held_back():
    r = StreamRedactor(["abcab", "zz"])
    assert r.feed("k", "t1", "hello ab") == "hello "  # "ab" may begin "abcab"
    assert r.feed("k", "t1", "c") == ""  # "abc": still possible
    assert r.feed("k", "t1", "abX and a") == "***X and "  # the secret closed; "a" may begin another
    assert r.release("k") == ("t1", "a")
    assert r.feed("k", "t2", "plain text, nothing held") == "plain text, nothing held"
    assert r.feed("k", "t2", "ends in z") == "ends in "  # "z" may begin "zz"
    assert r.feed("other", "t3", "zz") == "***"  # streams are apart
    assert r.feed("k", "t2", "q") == "zq"
    assert r.feed("k", "t2", "abcaabcab!") == "abca***!"  # an overlapping false start
    with pytest.raises(ValueError, match="at least one non-empty secret"):
        StreamRedactor([""])
