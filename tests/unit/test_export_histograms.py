"""Issue 23 item 2: ``workers[].export_histograms: false`` stores the engine's buckets once.

When Prometheus scrapes vLLM itself (its own dashboard needs the raw series),
the agent leaves its copy of the histograms out and keeps everything else,
including the window quantiles it computes from the same buckets.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import EngineValues, render

from inferwatch.agent.collectors.engine import EngineSource
from inferwatch.agent.config import AgentConfig, WorkerSpec, load_config
from inferwatch.errors import ConfigError


def _families(export: bool) -> dict[str, int]:
    values = EngineValues(waiting=2, running=3, ttft=[0.1], itl=[0.02], e2e=[1.0])

    def text() -> str:
        values.ttft += [0.2, 0.4]
        values.itl += [0.03]
        values.e2e += [1.5]
        return render("v1", [values])

    stub = StubWorker(text)
    worker = WorkerSpec(name="w", url=stub.url, engine="vllm", export_histograms=export)
    source = EngineSource(AgentConfig(workers=(worker,)))

    async def run() -> dict[str, int]:
        try:
            for _ in range(3):  # the window needs an increase between two scrapes
                await source.refresh()
            return {f.name: len(f.samples) for f in source.families()}
        finally:
            await source.stop()
            stub.stop()

    return asyncio.run(run())


def test_histograms_are_left_out_and_the_quantiles_stay() -> None:
    on, off = _families(True), _families(False)
    histograms = {
        "inferwatch_ttft_seconds",
        "inferwatch_tpot_seconds",
        "inferwatch_e2e_latency_seconds",
        "inferwatch_queue_time_seconds",
    }
    assert histograms & set(on) and not histograms & set(off)
    for quantiles in (
        "inferwatch_ttft_quantile_seconds",
        "inferwatch_e2e_latency_quantile_seconds",
    ):
        assert on[quantiles] == off[quantiles] == 3
    assert set(on) - set(off) == histograms & set(on)


def test_the_key_is_a_boolean(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workers:\n  - url: http://127.0.0.1:8000\n    export_histograms: false\n")
    assert load_config(str(cfg), env={}).workers[0].export_histograms is False
    cfg.write_text("workers:\n  - url: http://127.0.0.1:8000\n    export_histograms: 'no'\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg), env={})
    assert "workers[0].export_histograms: expected true or false" in str(err.value)


def _endpoint_info(workers: list[WorkerSpec]) -> dict[str, str]:
    source = EngineSource(AgentConfig(workers=tuple(workers)))

    async def run() -> dict[str, str]:
        try:
            await source.refresh()
            (family,) = [
                f for f in source.families() if f.name == "inferwatch_worker_endpoint_info"
            ]
            return {s.labels["worker"]: s.labels["endpoint"] for s in family.samples}
        finally:
            await source.stop()

    return asyncio.run(run())


def test_each_worker_states_the_endpoint_prometheus_scrapes() -> None:
    """The join key of the engine's own series: the scraped host:port unless configured,
    for workers that answer and for workers that do not (the series is configuration)."""
    stub = StubWorker(lambda: render("v1", [EngineValues(waiting=1, running=1)]))
    try:
        got = _endpoint_info(
            [
                WorkerSpec(name="up", url=stub.url, engine="vllm", export_histograms=False),
                WorkerSpec(name="pod", url=stub.url, endpoint="vllm-0.vllm.ns.svc:8000"),
                WorkerSpec(name="down", url="http://[::1]:9"),
                WorkerSpec(name="tls", url="https://localhost"),
            ]
        )
    finally:
        stub.stop()
    assert got == {
        "up": f"127.0.0.1:{stub.port}",
        "pod": "vllm-0.vllm.ns.svc:8000",
        "down": "[::1]:9",
        "tls": "localhost:443",
    }


@pytest.mark.parametrize(
    ("value", "ok"),
    [("'10.0.0.5:8000'", True), ("''", False), ("'a b:80'", False), ("[1]", False)],
)
def test_the_endpoint_key(tmp_path: Path, value: str, ok: bool) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workers:\n  - url: http://127.0.0.1:8000\n    endpoint: {value}\n")
    if ok:
        assert load_config(str(cfg), env={}).workers[0].endpoint == "10.0.0.5:8000"
        return
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg), env={})
    assert str(err.value).startswith(f"{cfg}: workers[0].endpoint: expected the instance label")
