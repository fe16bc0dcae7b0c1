"""`ResumableLink` flow control across a reconnect, driven without SSH.

`StubChannel` is a stand-in for asyncssh's channel (it records writes and answers the link's `Hello`
with a `Resume`): what is under test is the link's own bookkeeping, which the real-sshd tests in
tests/common/test_content_cache.py and tests/test_ssh_resume*.py exercise only when a cut lands at the right moment.
"""

from __future__ import annotations

import asyncio

import pytest

from skyhive.protocol.messages import Resume
from skyhive.protocol.resume import encode_control
from skyhive.runtime.nodes.resumable import ResumableLink


class StubChannel:
    """A stand-in for an asyncssh channel: keeps what is written; answers the handshake."""

    def __init__(self, link: ResumableLink, session) -> None:
        self.link, self.session, self.written, self.closed = link, session, [], False

    def write(self, data) -> None:
        if not self.written:  # the Hello: the worker resumes where the link asked
            asked = self.link.inbox.received
            asyncio.get_running_loop().call_soon(
                self.session.data_received, encode_control(Resume(from_seq=asked, received=0)), None)
        self.written.append(bytes(data))

    def write_eof(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Receiver:
    lost_reason = None

    def data_received(self, data) -> None:
        pass

    def eof_received(self) -> None:
        pass


@pytest.mark.anyio
async def test_a_drop_while_the_channel_was_full_does_not_stop_writing_after_the_reconnect():
    channels: list[StubChannel] = []
    link: ResumableLink

    async def opener(factory):
        session = factory()
        chan = StubChannel(link, session)
        channels.append(chan)
        return chan, session

    link = ResumableLink(Receiver(), opener, label="node 0 worker 0", reconnect_timeout=5)
    await link.connect()
    first = channels[0]
    first.session.pause_writing()  # the channel's send buffer is full ...
    assert not link._writable.is_set()
    first.session.connection_lost(ConnectionResetError("reset by peer"))  # ... when the stream drops
    await asyncio.wait_for(link._task, 5)  # the link reconnects to a fresh channel
    assert len(channels) == 2 and link.reconnects == 1
    await asyncio.wait_for(link.drain(), 5)  # writable again: the new channel's buffer is empty
    link.write(b"after")
    assert channels[1].written[-1] == b"after"
    link.close()
    assert link.finished.is_set()
