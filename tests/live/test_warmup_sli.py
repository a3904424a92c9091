"""The warm-up gate's own requests, exported so the TTFT SLO can leave them out.

The gate's requests land in the engine's TTFT histogram; the agent exports each one's
time to first token in ``inferwatch_warmup_requests_ttft_seconds`` (from zero, before
the first warm-up), and the SLO rules subtract it per worker and bucket (the promtool
cases in alerts/tests/warmup-slo.yaml). Live: the real agent and the simulated vLLM with
its cold start, as in tests/live/test_warmup.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.agent.collectors.warmup import WARMUP_REQUESTS_TTFT, WARMUP_TTFT_BOUNDS
from inferwatch.pack import names, slo_spec

TIME_SCALE = 0.1
COLD_SECONDS = 15.0  # x 0.1: the first request waits 1.5 s, the second 0.75 s
COLD_DELAY = COLD_SECONDS * TIME_SCALE
MODEL = "sim-warm"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def test_one_name_and_a_bucket_at_every_threshold_an_slo_can_use() -> None:
    assert WARMUP_REQUESTS_TTFT == names.WARMUP_REQUESTS_TTFT
    for engine, kinds in slo_spec.ENGINE_BUCKETS.items():
        missing = [b for b in kinds["ttft"] if b not in WARMUP_TTFT_BOUNDS]
        assert not missing, f"{engine}: no warm-up bucket at {missing}"


def scrape(url: str) -> Samples:
    status, body, _ = http_get(f"{url}/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    return sum(found) if found else None


@pytest.fixture
def procs() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for p in reversed(started):
        p.stop()


def test_the_gate_exports_its_requests_as_the_engine_counts_them(
    tmp_path: Path, procs: list[Process]
) -> None:
    sim_port, agent_port = free_port(), free_port()
    sim_url, agent = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{agent_port}"
    config = {
        "listen": f"127.0.0.1:{agent_port}",
        "collect_interval": "500ms",
        "gpu": {"backend": "none"},
        "workers": [{"name": "w0", "url": sim_url}],
        "warmup": {"interval": "200ms"},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    procs.append(Process(inferwatch_cmd("run", "--config", str(path)), tmp_path / "agent.log"))
    bucket = f"{WARMUP_REQUESTS_TTFT}_bucket"

    # 1. Before any warm-up the histogram is there, at zero, so that rate() counts the
    #    first warm-up requests (a counter's first sample is not an increase).
    def zeros() -> bool:
        if http_get(f"{agent}/healthz", timeout=2)[0] != 200:
            return False
        got = scrape(agent)
        return value(got, f"{WARMUP_REQUESTS_TTFT}_count", worker="w0") == 0

    wait_until(zeros, timeout=30, message="the warm-up histogram at zero")
    got = scrape(agent)
    les = {dict(ls)["le"] for (n, ls) in got if n == bucket}
    assert les == {*(floatToGoString(b) for b in WARMUP_TTFT_BOUNDS), "+Inf"}

    # 2. The worker starts cold; the gate sends its completions and chat pings, then the
    #    warm probe: 3 requests, the first one slower than the cold delay.
    sim = Process(
        inferwatch_cmd(
            "simulate", "--port", str(sim_port), "--model", MODEL,
            "--time-scale", str(TIME_SCALE),
            "--cold-start-requests", "1", "--cold-start-seconds", str(COLD_SECONDS),
        ),
        tmp_path / "sim.log",
    )  # fmt: skip
    procs.append(sim)
    wait_until(
        lambda: (
            http_get(f"{agent}/readyz", timeout=2)[0] == 200
            and value(scrape(agent), "inferwatch_worker_ready", worker="w0") == 1
        ),
        timeout=60,
        message="the gate open after warm-up",
    )
    got = scrape(agent)
    assert value(got, f"{WARMUP_REQUESTS_TTFT}_count", worker="w0") == 3
    # the engine counted the same three requests in its own TTFT histogram
    engine = scrape(sim_url)
    assert value(engine, "vllm:time_to_first_token_seconds_count") == 3
    # the cold one is above the cold delay in both: the buckets agree on it
    below = max(b for b in WARMUP_TTFT_BOUNDS if b < COLD_DELAY)
    le = floatToGoString(below)
    assert value(got, bucket, worker="w0", le=le) == 2
    assert value(engine, "vllm:time_to_first_token_seconds_bucket", le=le) == 2
    assert value(got, bucket, worker="w0", le="+Inf") == 3
