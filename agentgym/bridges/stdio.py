"""The process's stdin and stdout as MCP's line streams, read and written on the event loop.

The mcp SDK's own stdio transport wraps them with ``anyio.wrap_file``: every line read, written and
flushed is a hop to a worker thread, three per call, several milliseconds on a busy machine
against a tool step of a tenth of one. Here stdin is an asyncio pipe and a line is written with
one ``os.write``. As the SDK does, fd 0 reads the null device and fd 1 writes to stderr while the
streams are open, so environment code can neither read the protocol nor print into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator

__all__ = ["LineReader", "LineWriter", "pipe_stdio"]

_MAX_LINE = 64 << 20  # one JSON-RPC message; tool results are capped far below


class LineReader:
    """Lines of text from an asyncio stream, as ``async for`` yields them."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class LineWriter:
    """Text written whole to a file descriptor (a protocol line is small; the pipe takes it at once or soon)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data) :]

    async def flush(self) -> None:
        """Nothing is buffered."""


def stdin_is_pipe() -> bool:
    """Whether fd 0 is a pipe or socket (what an MCP client gives a server it launched)."""
    mode = os.fstat(0).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


@contextlib.asynccontextmanager
async def pipe_stdio() -> AsyncIterator[tuple[LineReader, LineWriter]]:
    """Claim stdin and stdout (pipes) for the protocol until the block exits; both are restored after."""
    saved_in, saved_out = os.dup(0), os.dup(1)
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=_MAX_LINE)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0))
    try:
        yield LineReader(reader), LineWriter(wire_out)
    finally:
        transport.close()
        os.close(wire_out)
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
