"""The simulated worker over HTTP: OpenAI API (SSE and not), errors, /metrics, CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.aioapp import until as _until
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.sim.config import SimConfig
from inferwatch.sim.tokenizer import chat_prompt, count_tokens
from inferwatch.sim.worker import SimWorker

FAST = SimConfig(port=0, model="sim-test", time_scale=0.01, cold_start_requests=0)


@pytest.fixture
async def worker() -> AsyncIterator[SimWorker]:
    async with SimWorker(FAST) as w:
        yield w


async def post(url: str, body: Any) -> tuple[int, bytes, dict[str, str]]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def get(url: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    """GET without transparent decompression, to see what the server sent."""
    async with aiohttp.ClientSession(auto_decompress=False) as s, s.get(url, headers=headers) as r:
        return r.status, await r.read(), dict(r.headers)


def sse_events(body: bytes) -> list[str]:
    """The data fields of an event stream; every event must be one `data: ...` line + blank."""
    text = body.decode()
    assert text.endswith("\n\n")
    events = text[:-2].split("\n\n")
    out = []
    for ev in events:
        assert ev.startswith("data: ") and "\n" not in ev, ev
        out.append(ev[len("data: ") :])
    return out


async def metric_values(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        body = await resp.read()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


async def test_chat_streaming_is_server_sent_events(worker: SimWorker) -> None:
    messages = [{"role": "user", "content": "tell me a story"}]
    body = {
        "model": "sim-test",
        "messages": messages,
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, raw, headers = await post(f"{worker.url}/v1/chat/completions", body)
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = [c for c in chunks[1:] if c["choices"]]
    assert len(tokens) == 5 and all(c["choices"][0]["delta"]["content"] for c in tokens)
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 4 + ["length"]
    usage = chunks[-1]
    assert usage["choices"] == []
    prompt_tokens = count_tokens(chat_prompt(messages))
    assert usage["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 5,
        "total_tokens": prompt_tokens + 5,
    }


async def test_completions_streaming_and_not(worker: SimWorker) -> None:
    body = {"prompt": "once upon a time there was", "max_tokens": 3, "stream": True}
    status, raw, _ = await post(f"{worker.url}/v1/completions", body)
    events = sse_events(raw)
    chunks = [json.loads(e) for e in events[:-1]]
    assert status == 200 and events[-1] == "[DONE]" and len(chunks) == 3
    assert all(c["object"] == "text_completion" and "usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"

    status, raw, _ = await post(f"{worker.url}/v1/completions", {"prompt": "abcdefgh ij"})
    doc = json.loads(raw)
    assert status == 200 and doc["object"] == "text_completion"
    # 16 tokens by default; "abcdefgh ij" is three 4-character tokens
    assert doc["usage"] == {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}
    assert doc["choices"][0]["finish_reason"] == "length" and doc["choices"][0]["text"]


async def test_output_length_rules(worker: SimWorker) -> None:
    url = f"{worker.url}/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    _, raw, _ = await post(url, {"messages": msgs, "max_tokens": 50, "sim_output_tokens": 7})
    doc = json.loads(raw)
    assert doc["usage"]["completion_tokens"] == 7
    assert doc["choices"][0]["finish_reason"] == "stop"
    assert doc["choices"][0]["message"]["role"] == "assistant"
    _, raw, _ = await post(url, {"messages": msgs, "max_tokens": 5, "sim_output_tokens": 7})
    assert json.loads(raw)["choices"][0]["finish_reason"] == "length"
    # no max_tokens: a natural (seeded) length, the same for the same arrival order and seed
    _, raw, _ = await post(url, {"messages": msgs})
    natural = json.loads(raw)
    assert natural["choices"][0]["finish_reason"] == "stop"
    assert 1 <= natural["usage"]["completion_tokens"] < FAST.max_model_len


async def test_bad_requests_get_vllm_like_errors(worker: SimWorker) -> None:
    url = worker.url
    cases = [
        ({"prompt": "x", "model": "other"}, 404, "NotFoundError"),
        ({"prompt": "x", "max_tokens": FAST.max_model_len}, 400, "BadRequestError"),
        ({"prompt": "x", "n": 2}, 400, "BadRequestError"),
        ({"prompt": ""}, 400, "BadRequestError"),
        ({"prompt": 5}, 400, "BadRequestError"),
        ({"prompt": "x", "max_tokens": -1}, 400, "BadRequestError"),
    ]
    for body, status, kind in cases:
        got, raw, _ = await post(f"{url}/v1/completions", body)
        assert got == status, body
        assert json.loads(raw)["error"]["type"] == kind
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v1/completions", data=b"{") as r:
        assert r.status == 400
    got, raw, _ = await post(f"{url}/v1/chat/completions", {"messages": "hi"})
    assert got == 400


async def test_plain_routes(worker: SimWorker) -> None:
    status, _, _ = await get(f"{worker.url}/health")
    assert status == 200
    _, raw, _ = await get(f"{worker.url}/v1/models")
    model = json.loads(raw)["data"][0]
    assert model["id"] == "sim-test" and model["max_model_len"] == FAST.max_model_len
    _, raw, _ = await get(f"{worker.url}/version")
    assert json.loads(raw) == {"version": "0.33.0"}
    status, raw, headers = await get(f"{worker.url}/metrics", **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    names = {f.name for f in text_string_to_metric_families(gzip.decompress(raw).decode())}
    assert "vllm:num_requests_running" in names


async def test_queue_limit_rejects_with_503_and_counts_it() -> None:
    cfg = dataclasses.replace(FAST, max_num_seqs=1, max_queued_requests=1)
    async with SimWorker(cfg) as w:
        body = {"prompt": "x", "max_tokens": 4000}
        first = asyncio.ensure_future(post(f"{w.url}/v1/completions", body))
        await _until(lambda: len(w.cores[0].running) == 1)
        second = asyncio.ensure_future(post(f"{w.url}/v1/completions", body))
        await _until(lambda: len(w.cores[0].waiting) == 1)
        status, raw, _ = await post(f"{w.url}/v1/completions", body)
        assert status == 503 and json.loads(raw)["error"]["code"] == 503
        samples = await metric_values(w.url)
        assert value(samples, "vllm:admission_rejections_total", reason="max_num_queued_reqs") == 1
        assert value(samples, "http_requests_total", status="5xx") == 1
        for pending in (first, second):  # hang up: the worker aborts both
            pending.cancel()
        await _until(lambda: w.cores[0].idle)
        samples = await metric_values(w.url)
        assert value(samples, "vllm:request_success_total", finished_reason="abort") == 2


async def test_client_disconnect_aborts_the_request(worker: SimWorker) -> None:
    body = {"prompt": "x", "max_tokens": 2000, "stream": True}
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{worker.url}/v1/completions", json=body) as resp,
    ):
        await resp.content.readline()  # the first token arrived
    # leaving the block closes the connection mid-stream
    await _until(lambda: worker.cores[0].idle)
    samples = await metric_values(worker.url)
    assert value(samples, "vllm:request_success_total", finished_reason="abort") == 1
    assert value(samples, "vllm:request_success_total", finished_reason="length") == 0
    assert worker.cores[0].pool.in_use == 0


async def test_stopping_worker_ends_open_streams() -> None:
    w = SimWorker(FAST)
    await w.start()
    body = {"prompt": "x", "max_tokens": 3000, "stream": True}
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{w.url}/v1/completions", json=body) as resp,
    ):
        first = await resp.content.readline()
        stopping = asyncio.ensure_future(w.stop())
        rest = await resp.read()
        await stopping
    events = sse_events(first + rest)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "abort"
    assert w.cores[0].idle and w.cores[0].pool.in_use == 0


async def test_data_parallel_spreads_requests_over_engines() -> None:
    cfg = dataclasses.replace(FAST, data_parallel=2, time_scale=0.05)
    async with SimWorker(cfg) as w:
        body = {"prompt": "x y z", "max_tokens": 20}
        results = await asyncio.gather(*(post(f"{w.url}/v1/completions", body) for _ in range(6)))
        assert all(r[0] == 200 for r in results)
        samples = await metric_values(w.url)
        per_engine = [
            value(samples, "vllm:e2e_request_latency_seconds_count", engine=e) for e in ("0", "1")
        ]
        assert sum(per_engine) == 6 and min(per_engine) >= 2


async def test_metrics_follow_requests(worker: SimWorker) -> None:
    body = {"messages": [{"role": "user", "content": "a b c d"}], "max_tokens": 4}
    for _ in range(3):
        status, _, _ = await post(f"{worker.url}/v1/chat/completions", body)
        assert status == 200
    samples = await metric_values(worker.url)
    assert value(samples, "vllm:request_success_total", finished_reason="length") == 3
    assert value(samples, "vllm:generation_tokens_total") == 12
    assert value(samples, "vllm:time_to_first_token_seconds_count") == 3
    assert value(samples, "vllm:inter_token_latency_seconds_count") == 9
    assert value(samples, "http_requests_total", handler="/v1/chat/completions") == 3
    assert value(samples, "http_requests_total", handler="/metrics") == 0  # excluded, like vLLM


# --- the command line -------------------------------------------------------------------------
def test_cli_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    proc = Process(
        inferwatch_cmd(
            "simulate",
            "--port",
            str(port),
            "--format",
            "multiprocess",
            "--data-parallel",
            "2",
            "--time-scale",
            "0.05",
        ),
        tmp_path / "sim.log",
    )
    try:
        wait_until(
            lambda: proc.alive() and http_get(f"http://127.0.0.1:{port}/health")[0] == 200,
            timeout=30,
            message="simulator up",
        )
        status, body, headers = http_get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
        kv = fams["vllm:kv_cache_usage_perc"].samples
        assert len(kv) == 6  # 2 engines x 3 processes
        proc.signal(signal.SIGTERM)
        assert proc.popen.wait(15) == 0
        assert "serving sim-llama-2-7b-int8" in proc.log()
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--format", "v9"], "--format"),
        (["--engine", "nosuch"], "--engine"),
        (["--num-gpu-blocks", "10"], "--max-model-len"),
        (["--gpu-memory-utilization", "0.2"], "--gpu-memory-utilization"),
        (["--format", "v0", "--data-parallel", "2"], "--data-parallel"),
    ],
)
def test_cli_bad_flags_fail_with_one_line(args: list[str], flag: str) -> None:
    proc = subprocess.run(
        inferwatch_cmd("simulate", "--port", str(free_port()), *args),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and lines[0].startswith("inferwatch simulate:")
