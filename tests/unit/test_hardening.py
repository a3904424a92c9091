"""Hardening of the engine source, the mapping and the log, in process (issue 22).

The attacks that need a whole agent are in test_attacks.py; these are the ones
a local stub worker and the pure functions show exactly: bad values kept out of
contract series, the series cap, a hanging worker, a port that changes engine,
a backward step of the wall clock, SIGHUP's reconfiguration, log throttling.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from aiohttp import web
from tests.support.aioapp import serve_app
from tests.support.engine_text import sglang_text
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import EngineValues, render

from inferwatch.agent.collectors.engine import EngineSource
from inferwatch.agent.config import ScrapeConfig, load_config
from inferwatch.agent.exporter import accepts_gzip
from inferwatch.agent.logthrottle import Throttle
from inferwatch.agent.wiring import Agent
from inferwatch.engines.mapping import (
    ParseError,
    cap_series,
    map_exposition,
    prefilter_limited,
)
from inferwatch.engines.vllm import VLLM
from inferwatch.sim.fakegpu import FakeNvml


def vllm(lines: str) -> str:
    """A minimal vLLM exposition: the engine's running gauge plus ``lines``."""
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n' + lines
    )


@pytest.mark.parametrize(
    ("lines", "target"),
    [
        ('# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} +Inf\n',
         "inferwatch_queue_depth"),
        ('# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} -3\n',
         "inferwatch_queue_depth"),
        ('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} 4200\n',
         "inferwatch_kv_cache_usage_ratio"),
        ('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} +Inf\n',
         "inferwatch_kv_cache_usage_ratio"),
        ('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} -0.5\n',
         "inferwatch_kv_cache_usage_ratio"),
        ("# TYPE vllm:time_to_first_token_seconds histogram\n"
         'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 9\n'
         'vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 2\n'
         'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 9\n'
         'vllm:time_to_first_token_seconds_count{model_name="m"} 9\n'
         'vllm:time_to_first_token_seconds_sum{model_name="m"} 1\n',
         "inferwatch_ttft_seconds"),
    ],
)  # fmt: skip
def test_bad_values_never_reach_contract_series(lines: str, target: str) -> None:
    mapped = map_exposition(vllm(lines), VLLM)
    assert mapped.has_data  # the good series stay
    table = {**mapped.gauges, **mapped.histograms}
    assert target not in table, table.get(target)


def test_good_edge_values_pass() -> None:
    mapped = map_exposition(
        vllm('# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} 1\n'),
        VLLM,
    )
    assert mapped.gauges["inferwatch_kv_cache_usage_ratio"] == {(("model", "m"),): 1.0}


def test_a_typed_family_given_twice_is_a_parse_error() -> None:
    again = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 9\n'
    other = '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 1\n'
    for text in (vllm(again), vllm(other + again)):  # adjacent or apart
        with pytest.raises(ParseError, match="appears twice"):
            prefilter_limited(text, VLLM.source_families(), None)
        with pytest.raises(ParseError, match="appears twice"):
            map_exposition(text, VLLM)


def test_prefilter_cuts_the_family_over_the_budget_whole() -> None:
    flood = "".join(f'vllm:num_requests_waiting{{model_name="x{i}"}} 1\n' for i in range(500))
    text = (
        vllm("# TYPE vllm:num_requests_waiting gauge\n" + flood)
        + '# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{model_name="m"} 4\n'
    )
    kept, cut = prefilter_limited(text, VLLM.source_families(), 100)
    assert cut == 500
    assert "num_requests_waiting{" not in kept
    assert "vllm:num_requests_running{" in kept and "vllm:num_preemptions_total{" in kept
    mapped = map_exposition(kept, VLLM)
    assert "inferwatch_queue_depth" not in mapped.gauges
    assert mapped.counters["inferwatch_preemptions"] == {(("model", "m"),): 4.0}


def test_series_cap_keeps_whole_models_in_name_order() -> None:
    engines = [EngineValues(running=1, waiting=2, ttft=[0.1])]
    # three models of one worker, merged as one scrape would map them
    mapped_full = {m: map_exposition(render("v1", engines, model=m), VLLM) for m in "abc"}
    per_model = sum(
        (len(v.bounds) + 2) if hasattr(v, "bounds") else 1
        for table in (mapped_full["a"].gauges, mapped_full["a"].counters,
                      mapped_full["a"].histograms)
        for series in table.values() for v in series.values()
    )  # fmt: skip
    merged = mapped_full["a"]
    for m in "bc":
        other = mapped_full[m]
        merged = replace(
            merged,
            gauges={k: {**merged.gauges.get(k, {}), **v} for k, v in other.gauges.items()},
            counters={k: {**merged.counters.get(k, {}), **v} for k, v in other.counters.items()},
            histograms={
                k: {**merged.histograms.get(k, {}), **v} for k, v in other.histograms.items()
            },
        )
    capped, dropped = cap_series(merged, per_model * 2 + 1)
    assert capped.models() == {"a", "b"}
    assert dropped == per_model
    again, _ = cap_series(merged, per_model * 2 + 1)
    assert again == capped  # the same kept set every scrape
    whole, none = cap_series(merged, per_model * 3)
    assert whole is merged and none == 0


def test_accept_encoding_negotiation() -> None:
    assert accepts_gzip("gzip")
    assert accepts_gzip("deflate, gzip;q=0.5")
    assert not accepts_gzip("gzip;q=0")
    assert not accepts_gzip("gzip; q=0.000")
    assert accepts_gzip("*")
    assert not accepts_gzip("gzip;q=0, *;q=1")
    assert not accepts_gzip("")
    assert not accepts_gzip("notgzip, identity")


def test_throttle_writes_one_line_per_kind_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("inferwatch.test.throttle")
    throttle = Throttle(interval=3600)
    logger.addFilter(throttle)
    try:
        caplog.set_level(logging.ERROR, logger=logger.name)
        for i in range(1000):
            try:
                raise ValueError(f"bad request {i}")
            except ValueError:
                logger.exception("Error handling request")
        logger.error("another kind")
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 2, lines
        assert "ValueError: bad request 0" in lines[0]
        assert all(r.exc_info is None for r in caplog.records)  # no tracebacks
        throttle.interval = 0
        logger.exception("Error handling request")
        assert "(999 more like it not logged)" in caplog.records[-1].getMessage()
    finally:
        logger.removeFilter(throttle)


# ------------------------------------------------------------------ engine source


@dataclass
class Port:
    """A worker port whose behaviour each test sets: text, or a hang on some paths."""

    text: str = ""
    hang_paths: tuple[str, ...] = ()
    url: str = ""
    paths: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        if request.path in self.hang_paths:
            await asyncio.sleep(30)
        if request.path != "/metrics" or not self.text:
            return web.Response(status=404)
        return web.Response(text=self.text, content_type="text/plain")


async def serve_port(port: Port) -> web.AppRunner:
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", port.handle)
    runner, port.url = await serve_app(app)
    return runner


@pytest.fixture
async def ports() -> AsyncIterator[list[Port]]:
    made = [Port(), Port()]
    runners = [await serve_port(p) for p in made]
    yield made
    for r in runners:
        await r.cleanup()


def source(*workers: str, timeout: float = 1.0) -> EngineSource:
    config = load_config(
        env={}, flags={"workers": list(workers), "collect_interval": "1s", "stats_window": "60s"}
    )
    return EngineSource(replace(config, scrape=ScrapeConfig(timeout, 1 << 20)))


async def test_a_hanging_worker_never_holds_back_another(ports: list[Port]) -> None:
    healthy, hostile = ports
    healthy.text = render("v1", [EngineValues(running=1)])
    # engine auto: /metrics answers 404 at once, then every other location hangs
    hostile.hang_paths = ("/v1/metrics", "/prometheus/metrics", "/metrics/")
    src = source(f"good={healthy.url}", f"bad={hostile.url}")
    try:
        for _ in range(3):
            await src.refresh()
        # one scrape per pass: the hang did not stall the passes
        assert healthy.paths.count("/metrics") == 3
        assert src.workers["good"].up
        task = src._inflight["bad"]
        assert not task.done()  # still trying its locations, in the background
        # each of its scrapes takes two hangs (2 s): not started again while it runs
        assert hostile.paths.count("/metrics") < 3
    finally:
        await src.stop()


async def test_each_worker_on_its_own_clock_beside_a_hanging_one(tmp_path: Path) -> None:
    """Issue 32: a worker that never answers (time-out 3 s) next to a healthy one and a
    GPU, in the whole agent: the healthy worker and the GPU are still collected at
    their 0.5 s interval, and the hanging one gets its time-out as its scrape error."""
    release = threading.Event()
    healthy = StubWorker(lambda: render("v1", [EngineValues(running=1)]))

    def never() -> str:
        release.wait(30)
        return ""

    hanging = StubWorker(never)
    config_file = tmp_path / "agent.yaml"
    config_file.write_text(
        "collect_interval: 0.5s\nprocess_interval: 5s\nstats_window: 10s\n"
        "gpu: {interval: 0.5s, slow_interval: 5s, activity_interval: 5s}\n"
        "workers:\n"
        f"  - {{name: good, url: '{healthy.url}', engine: vllm}}\n"
        f"  - {{name: bad, url: '{hanging.url}', engine: vllm, timeout: 3s}}\n"
    )
    config = load_config(str(config_file), env={})
    agent = Agent(config, gpu_backend=FakeNvml(count=1), environ={})
    window = 6.0
    try:
        await agent.start()
        nvml = next(s for s in agent.sources if s.name == "nvml")
        start_hits = healthy.hits
        gpu_passes: set[float | None] = set()
        end = time.monotonic() + window
        while time.monotonic() < end:
            gpu_passes.add(nvml.health.last_success)
            await asyncio.sleep(0.05)
        scrapes = healthy.hits - start_hits
        expected = window / 0.5  # 12; before issue 32: about 2 (one per 3.25 s pass)
        assert scrapes >= expected * 0.6, (scrapes, expected)
        assert len(gpu_passes) >= expected * 0.6, (len(gpu_passes), expected)
        engine = agent.engine
        assert engine is not None
        assert engine.workers["good"].up
        bad = engine.workers["bad"]
        assert not bad.up and bad.errors["timeout"] >= 1  # its own error, after its time-out
        body = agent.output.body.decode()
        assert 'inferwatch_target_up{worker="good"} 1.0' in body
        assert 'inferwatch_target_up{worker="bad"} 0.0' in body
        assert 'inferwatch_target_scrape_errors_total{reason="timeout",worker="bad"}' in body
    finally:
        release.set()
        await agent.stop()
        healthy.stop()
        hanging.stop()


async def test_a_port_that_changes_engine_is_detected_again(ports: list[Port]) -> None:
    port = ports[0]
    port.text = render("v1", [EngineValues(running=1, waiting=2)])
    src = source(f"w={port.url}")
    try:
        await src.refresh()
        assert src.workers["w"].mapped is not None
        assert src.workers["w"].mapped.engine == "vllm"
        port.text = sglang_text()
        await src.refresh()  # the vLLM table finds nothing: detect again next pass
        await src.refresh()
        state = src.workers["w"]
        assert state.up and state.mapped is not None and state.mapped.engine == "sglang"
    finally:
        await src.stop()


async def test_a_backward_wall_clock_step_does_not_freeze_the_windows(
    ports: list[Port], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = ports[0]
    observations: list[float] = []
    port.text = render("v1", [EngineValues(running=1, ttft=observations)])
    src = source(f"w={port.url}")
    try:
        await src.refresh()
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() - 3600)  # NTP steps back an hour
        for value in (0.05, 0.05, 3.0, 3.0):
            observations += [value] * 50
            port.text = render("v1", [EngineValues(running=1, ttft=list(observations))])
            await src.refresh()
        state = src.workers["w"]
        p99 = [qs[0.99] for (target, _), qs in state.quantiles.items()
               if target == "inferwatch_ttft_seconds"]  # fmt: skip
        assert p99 and p99[0] > 1.0  # the slow observations after the step are counted
        assert not math.isnan(p99[0])
    finally:
        await src.stop()


async def test_reconfigure_keeps_unchanged_workers_state(ports: list[Port]) -> None:
    a, b = ports
    a.text = render("v1", [EngineValues(running=1, ttft=[0.1])])
    b.text = render("v1", [EngineValues(running=2, ttft=[0.2])], model="mb")
    src = source(f"a={a.url}")
    try:
        await src.refresh()
        await src.refresh()
        kept = src.workers["a"]
        new = load_config(env={}, flags={"workers": [f"a={a.url}", f"b={b.url}"]})
        src.reconfigure(new)
        assert src.workers["a"] is kept and kept.mapped is not None
        await src.refresh()
        assert src.workers["b"].up and src.workers["a"] is kept
        src.reconfigure(load_config(env={}, flags={"workers": [f"b={b.url}"]}))
        assert set(src.workers) == {"b"}
    finally:
        await src.stop()
