"""The ``data:`` payloads of an OpenAI-style event stream (inferwatch.engines.stream)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from inferwatch.engines.stream import data_payloads


async def _lines(*lines: bytes) -> AsyncIterator[bytes]:
    for line in lines:
        yield line


async def _payloads(*lines: bytes) -> list[bytes]:
    return [data async for data in data_payloads(_lines(*lines))]


async def test_payloads_until_done_other_fields_passed_over() -> None:
    got = await _payloads(
        b": keep-alive comment\n",
        b"event: message\r\n",
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n',
        b"\n",
        b"id: 7\n",
        b'data:{"choices":[]}\n',
        b"data: [DONE]\n",
        b'data: {"after":"done"}\n',
    )
    assert got == [b'{"choices":[{"delta":{"content":"a"}}]}', b'{"choices":[]}']


async def test_a_stream_without_done_ends_with_its_lines() -> None:
    assert await _payloads(b"data: 1", b"data: 2") == [b"1", b"2"]
    assert await _payloads() == []
