"""Engines' streamed completions: the ``data:`` payloads of an OpenAI-style event stream.

An OpenAI-compatible server answers ``"stream": true`` with server-sent events
(text/event-stream, one ``data: <JSON chunk>`` line per event, a blank line between
events) and ends the stream with ``data: [DONE]`` (OpenAI API reference, chat
completions, ``stream``). Read by the agent's warm-up gate and by the simulator's load
generator; each decides what a chunk means.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

DONE = b"[DONE]"


async def data_payloads(lines: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The payload of each ``data:`` line, stripped, until ``[DONE]`` (or the stream's end).

    Other lines (``event:``, ``id:``, comments, the blank separators) are passed over.
    """
    async for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == DONE:
            return
        yield data
