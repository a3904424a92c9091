"""The engine source against local stub servers: values, windows, and every worker fault.

Each fault case checks the four promises: the source keeps producing families,
the fault shows in ``inferwatch_target_up`` / ``..._scrape_errors_total{reason}``,
it is logged once (not once per pass), and the source recovers by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.aioapp import serve_app
from tests.support.proc import free_port
from tests.support.vllm_text import EngineValues, render

from inferwatch.agent.collectors.engine import EngineSource
from inferwatch.agent.config import ScrapeConfig, load_config


@dataclass
class Stub:
    """A worker whose /metrics behaviour the test changes between passes."""

    text: str = ""
    mode: str = "ok"
    hits: int = 0
    url: str = ""
    extra: dict[str, Callable[[web.Request], web.StreamResponse]] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        mode = self.mode
        if mode == "ok":
            return web.Response(text=self.text, content_type="text/plain")
        if mode == "500":
            return web.Response(status=500, text="internal error")
        if mode == "html":
            return web.Response(text="<html><body>Login</body></html>", content_type="text/html")
        if mode == "garbage":
            return web.Response(body=b"\x00\xff{{{ not metrics\n", content_type="text/plain")
        if mode == "truncated":
            cut = self.text[: len(self.text) // 2]
            cut = cut[: cut.rfind("{") + 5]  # stop inside a label set
            return web.Response(text=cut, content_type="text/plain")
        if mode == "hang":
            await asyncio.sleep(30)
        if mode == "slow":
            await asyncio.sleep(1.5)
            return web.Response(text=self.text, content_type="text/plain")
        if mode == "huge":
            resp = web.StreamResponse()
            await resp.prepare(request)
            chunk = b"# " + b"x" * (1 << 20) + b"\n"
            for _ in range(50):  # 50 MB if nobody stops reading
                await resp.write(chunk)
            return resp
        if mode == "drop":
            resp = web.StreamResponse(headers={"Content-Length": str(len(self.text) * 2)})
            await resp.prepare(request)
            await resp.write(self.text[:200].encode())
            assert request.transport is not None
            request.transport.close()
            return resp
        if mode == "redirect":
            raise web.HTTPFound("http://127.0.0.1:1/metrics")
        raise AssertionError(mode)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": "0.33.0"})


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    s = Stub()
    app = web.Application()
    app.router.add_get("/metrics", s.handle)
    app.router.add_get("/version", version)
    runner, s.url = await serve_app(app)
    yield s
    await runner.cleanup()


def source_for(url: str, timeout: float = 1.0, max_body: int = 1 << 20) -> EngineSource:
    config = load_config(
        env={}, flags={"workers": [f"w={url}"], "collect_interval": "1s", "stats_window": "60s"}
    )
    return EngineSource(replace(config, scrape=ScrapeConfig(timeout, max_body)))


def exposition(source: EngineSource) -> dict[str, list]:
    registry = CollectorRegistry()

    class Bridge:
        def collect(self):  # type: ignore[no-untyped-def]
            return source.families()

    registry.register(Bridge())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(expo: dict[str, list], name: str, **labels: str) -> float:
    matches = [
        v for lab, v in expo.get(name, []) if all(lab.get(k) == x for k, x in labels.items())
    ]
    assert len(matches) == 1, (name, labels, expo.get(name))
    return float(matches[0])


async def test_values_quantiles_ratio_and_slope(stub: Stub) -> None:
    e = EngineValues(
        running=3,
        waiting=2,
        kv=0.4,
        prefix_queries=100,
        prefix_hits=10,
        prompt_tokens=100,
        generation_tokens=10,
    )
    stub.text = render("v1", [e])
    src = source_for(stub.url)
    try:
        await src.refresh()
        expo = exposition(src)
        assert value(expo, "inferwatch_target_up", worker="w") == 1.0
        assert value(expo, "inferwatch_queue_depth", worker="w", engine="vllm", model="m") == 2
        assert value(expo, "inferwatch_requests_running", worker="w") == 3
        assert value(expo, "inferwatch_kv_cache_usage_ratio", worker="w") == 0.4
        # one sample: no window yet, so no quantiles, ratio or slope
        assert "inferwatch_ttft_quantile_seconds" not in expo
        assert "inferwatch_prefix_cache_hit_ratio" not in expo
        assert "inferwatch_queue_depth_slope" not in expo

        e.waiting, e.prefix_queries, e.prefix_hits = 6, 300, 160
        e.ttft += [0.3] * 99 + [3.0]
        stub.text = render("v1", [e])
        await asyncio.sleep(0.01)
        await src.refresh()
        expo = exposition(src)
        assert value(expo, "inferwatch_prefix_cache_hit_ratio", worker="w") == pytest.approx(0.75)
        assert value(expo, "inferwatch_queue_depth_slope", worker="w") > 0
        p50 = value(expo, "inferwatch_ttft_quantile_seconds", worker="w", quantile="0.5")
        p99 = value(expo, "inferwatch_ttft_quantile_seconds", worker="w", quantile="0.99")
        # 99 of 100 new observations at 0.3 s: the (0.25, 0.5] bucket
        assert 0.25 < p50 <= 0.5
        assert 0.25 < p99 <= 0.5
        assert value(expo, "inferwatch_prompt_tokens_total", worker="w") == 100
        assert (
            value(expo, "inferwatch_target_scrape_errors_total", worker="w", reason="connect") == 0
        )
    finally:
        await src.stop()


async def test_restart_gives_no_negative_rates_or_absurd_quantiles(stub: Stub) -> None:
    e = EngineValues(ttft=[0.2] * 1000, generation_tokens=10_000)
    stub.text = render("v1", [e])
    src = source_for(stub.url)
    try:
        await src.refresh()
        await asyncio.sleep(0.01)
        restarted = EngineValues(ttft=[4.0] * 3, generation_tokens=50)
        stub.text = render("v1", [restarted])
        await src.refresh()
        expo = exposition(src)
        # only the post-restart observations count: all in (2.5, 5]
        for q in ("0.5", "0.95", "0.99"):
            got = value(expo, "inferwatch_ttft_quantile_seconds", worker="w", quantile=q)
            assert 2.5 < got <= 5.0
        # the raw counter passes through; Prometheus' rate() sees an ordinary reset
        assert value(expo, "inferwatch_generation_tokens_total", worker="w") == 50
    finally:
        await src.stop()


FAULTS = [
    ("refused", "connect"),
    ("hang", "timeout"),
    ("slow", "timeout"),
    ("500", "http_status"),
    ("html", "no_engine_metrics"),
    ("garbage", "no_engine_metrics"),
    ("huge", "too_large"),
    ("truncated", "parse"),
    ("drop", "connect"),
    ("redirect", "http_status"),
]


@pytest.mark.parametrize(("mode", "reason"), FAULTS)
async def test_worker_faults_are_reported_logged_once_and_recovered(
    stub: Stub, mode: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    stub.text = render("v1", [EngineValues(running=1, waiting=1)])
    url = stub.url
    if mode == "refused":
        url = f"http://127.0.0.1:{free_port()}"
    src = source_for(url)
    try:
        await src.refresh()  # healthy first, so the fault must drop existing series
        before = src.workers["w"].errors[reason]
        stub.mode = mode
        caplog.clear()
        caplog.set_level(logging.INFO, logger="inferwatch")
        for _ in range(3):
            await src.refresh()
        expo = exposition(src)
        assert value(expo, "inferwatch_target_up", worker="w") == 0.0
        assert (
            value(expo, "inferwatch_target_scrape_errors_total", worker="w", reason=reason)
            == before + 3
        ), expo["inferwatch_target_scrape_errors_total"]
        assert "inferwatch_queue_depth" not in expo  # nothing stale survives
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == (0 if before else 1), [r.getMessage() for r in warnings]
        assert all("engine w:" in r.getMessage() for r in warnings)

        if mode == "refused":
            return
        stub.mode = "ok"
        await src.refresh()
        expo = exposition(src)
        assert value(expo, "inferwatch_target_up", worker="w") == 1.0
        assert value(expo, "inferwatch_queue_depth", worker="w") == 1.0
        assert any("recovered" in r.getMessage() for r in caplog.records)
    finally:
        await src.stop()


async def test_huge_body_is_cut_at_the_cap(stub: Stub) -> None:
    stub.mode = "huge"
    src = source_for(stub.url)
    try:
        await src.refresh()
        state = src.workers["w"]
        assert state.errors["too_large"] == 1
        assert state.mapped is None
    finally:
        await src.stop()


async def test_disabled_log_stats_is_up_http_but_no_engine_data(stub: Stub) -> None:
    stub.text = render("disabled", [])
    src = source_for(stub.url)
    try:
        await src.refresh()
        expo = exposition(src)
        assert value(expo, "inferwatch_target_up", worker="w") == 0
        assert (
            value(
                expo,
                "inferwatch_target_scrape_errors_total",
                worker="w",
                reason="no_engine_metrics",
            )
            == 1
        )
    finally:
        await src.stop()


async def test_multiprocess_and_data_parallel_live(stub: Stub) -> None:
    a, b = EngineValues(waiting=2, kv=0.2), EngineValues(waiting=3, kv=0.6)
    stub.text = render("dp", [a, b])
    src = source_for(stub.url)
    try:
        await src.refresh()
        expo = exposition(src)
        assert value(expo, "inferwatch_queue_depth", worker="w") == 5
        assert value(expo, "inferwatch_kv_cache_usage_ratio", worker="w") == pytest.approx(0.4)
    finally:
        await src.stop()


async def test_max_num_seqs_from_config_else_command_line(stub: Stub) -> None:
    stub.text = render("v1", [EngineValues()])
    config = load_config(env={}, flags={"workers": [f"w={stub.url}"]})
    src = EngineSource(config, launch_max_num_seqs=lambda w: 48)
    try:
        await src.refresh()
        assert value(exposition(src), "inferwatch_max_num_seqs", worker="w", model="m") == 48
    finally:
        await src.stop()
    src = EngineSource(config)
    try:
        await src.refresh()
        assert "inferwatch_max_num_seqs" not in exposition(src)  # unknown: absent, not 0
    finally:
        await src.stop()


async def test_version_is_read_once_and_reported_to_process_info(stub: Stub) -> None:
    stub.text = render("v1", [EngineValues()])
    src = source_for(stub.url)
    try:
        await src.refresh()
        assert src.engine_facts("w") == {
            "engine": "vllm",
            "model": "m",
            "version": "0.33.0",
            # from vllm:cache_config_info, for worker_info where the command line is silent
            "prefix_caching": "true",
            "gpu_memory_utilization": "0.9",
            "kv_cache_dtype": "auto",
        }
        stub.mode = "500"
        await src.refresh()
        assert src.engine_facts("w") == {}  # down: nothing stale
        stub.mode = "ok"
        await src.refresh()
        assert src.engine_facts("w")["version"] == "0.33.0"  # read again after coming back
    finally:
        await src.stop()
