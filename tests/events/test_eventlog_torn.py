"""A pool's event log stays readable after its client was killed in the middle of appending a line,
also when the cut falls inside a multi-byte character — through the library API, not only the CLI."""

from __future__ import annotations

import pytest

from skyhive.runtime.events.log import EventLog, read_log
from skyhive.runtime.events.types import NodeStateChanged, OutputChunk, PoolStarted


def write_log(path, text="héllo wörld ✓ — ünïcode\n"):
    log = EventLog("pool-torn", path=path)
    log.emit(PoolStarted, provider="local", nodes=1, processes_per_node=1, pid=1, host="here")
    log.emit(NodeStateChanged, node=0, state="provisioning")
    log.emit(OutputChunk, task=1, node=0, local_rank=0, stream="stdout", text=text)
    log.close()
    return path.read_bytes()


def test_a_last_line_cut_inside_a_multibyte_character_is_skipped(tmp_path):
    path = tmp_path / "pool.jsonl"
    whole = write_log(path)
    lines = whole.splitlines(keepends=True)
    last = lines[-1]
    cut = last.index("✓".encode()) + 1  # one byte into a three-byte character
    path.write_bytes(b"".join(lines[:-1]) + last[:cut])
    events = list(read_log(path))
    assert [type(e) for e in events] == [PoolStarted, NodeStateChanged]
    state = EventLog.replay(path)
    assert state.status == "running" and [n.state for n in state.nodes] == ["provisioning"]


def test_every_cut_of_the_last_line_leaves_the_log_readable(tmp_path):
    path = tmp_path / "pool.jsonl"
    whole = write_log(path)
    start = whole.rstrip(b"\n").rfind(b"\n") + 1
    for end in range(start, len(whole)):  # every byte of the last line, the newline excluded
        path.write_bytes(whole[:end])
        assert len(list(read_log(path))) == 2, end
        EventLog.replay(path)
    path.write_bytes(whole)
    assert [e.text for e in read_log(path) if isinstance(e, OutputChunk)] == ["héllo wörld ✓ — ünïcode\n"]


def test_a_broken_line_in_the_middle_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "pool.jsonl"
    lines = write_log(path).splitlines(keepends=True)
    path.write_bytes(lines[0] + b"\xff\xfe not json\n" + b"".join(lines[1:]))
    with pytest.raises(ValueError, match=r"pool\.jsonl:2: not an event \(UnicodeDecodeError"):
        list(read_log(path))
