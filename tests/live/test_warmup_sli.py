"""The warm-up gate's own requests, exported so the TTFT SLO can leave them out.

The gate's requests land in the engine's TTFT histogram; the agent exports each one's
time to first token in ``inferwatch_warmup_requests_ttft_seconds`` (from zero, before
the first warm-up), and the SLO rules subtract it per worker and bucket (the promtool
cases in alerts/tests/warmup-slo.yaml). Live: the real agent and the simulated vLLM with
its cold start, as in tests/live/test_warmup.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client.utils import floatToGoString
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, wait_until
from tests.support.warmgate import COLD_DELAY, gate_open, gated_worker, metrics, sample, simulator

from inferwatch.agent.collectors.warmup import WARMUP_REQUESTS_TTFT, WARMUP_TTFT_BOUNDS
from inferwatch.pack import names, slo_spec


def test_one_name_and_a_bucket_at_every_threshold_an_slo_can_use() -> None:
    assert WARMUP_REQUESTS_TTFT == names.WARMUP_REQUESTS_TTFT
    for engine, kinds in slo_spec.ENGINE_BUCKETS.items():
        missing = [b for b in kinds["ttft"] if b not in WARMUP_TTFT_BOUNDS]
        assert not missing, f"{engine}: no warm-up bucket at {missing}"


def test_the_gate_exports_its_requests_as_the_engine_counts_them(
    tmp_path: Path, procs: list[Process], make_agent: Callable[..., AgentRun]
) -> None:
    sim_port, sim_url, agent = gated_worker(make_agent, interval="200ms")
    bucket = f"{WARMUP_REQUESTS_TTFT}_bucket"

    # 1. Before any warm-up the histogram is there, at zero, so that rate() counts the
    #    first warm-up requests (a counter's first sample is not an increase).
    def zeros() -> bool:
        return sample(metrics(agent), f"{WARMUP_REQUESTS_TTFT}_count", worker="w0") == 0

    wait_until(zeros, timeout=30, message="the warm-up histogram at zero")
    got = metrics(agent)
    les = {dict(ls)["le"] for (n, ls) in got if n == bucket}
    assert les == {*(floatToGoString(b) for b in WARMUP_TTFT_BOUNDS), "+Inf"}

    # 2. The worker starts cold; the gate sends its completions and chat pings, then the
    #    warm probe: 3 requests, the first one slower than the cold delay.
    procs.append(simulator(tmp_path, sim_port, "cold", cold_requests=1))
    wait_until(
        lambda: gate_open(agent, "w0"),
        timeout=60,
        message="the gate open after warm-up",
    )
    got = metrics(agent)
    assert sample(got, f"{WARMUP_REQUESTS_TTFT}_count", worker="w0") == 3
    # the engine counted the same three requests in its own TTFT histogram
    engine = metrics(sim_url)
    assert sample(engine, "vllm:time_to_first_token_seconds_count") == 3
    # the cold one is above the cold delay in both: the buckets agree on it
    below = max(b for b in WARMUP_TTFT_BOUNDS if b < COLD_DELAY)
    le = floatToGoString(below)
    assert sample(got, bucket, worker="w0", le=le) == 2
    assert sample(engine, "vllm:time_to_first_token_seconds_bucket", le=le) == 2
    assert sample(got, bucket, worker="w0", le="+Inf") == 3
