"""The Local transport's pipe link (`_PipeLink`): frames reach the worker's pipe whole and in order,
whether the pipe takes a frame at once, takes part of it, or none; a write to a pipe whose reader is
gone raises nothing and closes the link. Real pipes (os.pipe), shrunk so that they fill."""

from __future__ import annotations

import asyncio
import fcntl
import os

import pytest

from skyhive.runtime.kinds.local.transport import _F_SETPIPE_SZ, _PipeLink, _Writer

PAGE = os.sysconf("SC_PAGE_SIZE")


async def _link_on_a_small_pipe() -> tuple[_PipeLink, asyncio.WriteTransport, int]:
    r, w = os.pipe2(os.O_CLOEXEC)
    fcntl.fcntl(w, _F_SETPIPE_SZ, 4 * PAGE)  # a small pipe: four pages
    loop = asyncio.get_running_loop()
    wproto = _Writer()
    writer, _ = await loop.connect_write_pipe(lambda: wproto, os.fdopen(w, "wb", buffering=0))
    return _PipeLink(writer, wproto, None), writer, r  # type: ignore[arg-type]


async def _read_all(r: int, n: int) -> bytes:
    os.set_blocking(r, False)
    got = bytearray()
    while len(got) < n:
        try:
            chunk = os.read(r, 1 << 16)
        except BlockingIOError:
            await asyncio.sleep(0.001)  # let the loop write what waits in asyncio's buffer
            continue
        assert chunk, "the pipe closed before every byte came"
        got += chunk
    return bytes(got)


@pytest.mark.anyio
async def test_frames_arrive_whole_and_in_order_through_a_pipe_that_fills():
    link, writer, r = await _link_on_a_small_pipe()
    try:
        frames = [
            b"a" * 100,            # the pipe takes it at once
            b"b" * (8 * PAGE),     # larger than the room left: the pipe takes a part, asyncio the rest
            b"c" * 10,             # asyncio's buffer is not empty: queued behind b
            memoryview(b"d" * 50),
        ]
        for frame in frames:
            link.write(frame)
        assert 0 < writer.get_write_buffer_size() < 8 * PAGE  # the pipe took a part of b: the rest waits
        want = b"".join(bytes(f) for f in frames)
        assert await asyncio.wait_for(_read_all(r, len(want)), 10) == want
        link.write(b"e" * 7)  # buffer drained: straight to the pipe again
        assert writer.get_write_buffer_size() == 0
        assert os.read(r, 100) == b"e" * 7
    finally:
        writer.close()
        os.close(r)


@pytest.mark.anyio
async def test_a_write_to_a_pipe_whose_reader_is_gone_closes_the_link_without_raising():
    link, writer, r = await _link_on_a_small_pipe()
    os.close(r)
    errors: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
    try:
        link.write(b"x" * 10)  # EPIPE: handed to asyncio's write, which closes the transport
        assert writer.is_closing()
        link.write(b"y" * 10)  # and a closing link takes no more
    finally:
        asyncio.get_running_loop().set_exception_handler(None)
        writer.close()
    assert all(isinstance(ctx.get("exception"), BrokenPipeError) for ctx in errors)
