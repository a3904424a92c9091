"""The load generator's scenarios against live simulated workers (short runs, fast time scale).

Workers run as real ``inferwatch simulate`` processes, so the generator and the
worker do not share an event loop. Assertions are on the shape of the load
(counts, ratios between quantiles, what the worker reports), never on how fast
the machine is.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.errors import ConfigError
from inferwatch.sim import gpustate
from inferwatch.sim.loadgen import LoadResult, quantile, run_load
from inferwatch.sim.scenarios import SCENARIOS, LengthDist, customize, parse_length

SCALE = 0.1


def start_sim(log_dir: Path, *args: str) -> tuple[str, Process]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = Process(
        inferwatch_cmd("simulate", "--port", str(port), *args), log_dir / f"sim-{port}.log"
    )

    def up() -> bool:
        if not proc.alive():
            raise AssertionError(f"simulator exited:\n{proc.log()[-2000:]}")
        return http_get(f"{url}/health", timeout=2)[0] == 200

    wait_until(up, timeout=30, message=f"simulator on :{port}")
    return url, proc


@pytest.fixture(scope="module")
def warm_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two warm workers (no cold start) for the scenarios that do not need a fresh one."""
    log_dir = tmp_path_factory.mktemp("sims")
    a, pa = start_sim(log_dir, "--time-scale", str(SCALE), "--cold-start-requests", "0")
    b, pb = start_sim(log_dir, "--time-scale", str(SCALE), "--cold-start-requests", "0")
    try:
        yield a, b
    finally:
        pa.stop()
        pb.stop()


async def scrape(url: str) -> dict[str, float]:
    """Sum of each vllm: sample over its labels (one engine here)."""
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def assert_quantiles_ordered(result: LoadResult) -> None:
    s = result.summary()
    for name in ("ttft", "tpot", "e2e"):
        q = s[name]
        assert q["count"] > 0 and q["p50"] <= q["p95"] <= q["p99"], (name, q)


async def test_steady_serves_everything_and_measures_the_client_side(
    warm_pair: tuple[str, str],
) -> None:
    url = warm_pair[0]
    before = await scrape(url)
    result = await run_load([url], "steady", 4, time_scale=SCALE, seed=1, drain=20)
    after = await scrape(url)
    n = len(result.records)
    assert 40 <= n <= 140  # 2 req/s x 4 s, ten times faster
    assert result.statuses() == {"ok": n} and result.skipped == 0
    assert_quantiles_ordered(result)
    for r in result.records:
        assert r.output_tokens == r.planned_output_tokens and r.finish_reason == "length"
        # the chat template adds a few tokens around the messages
        assert r.prompt_tokens is not None
        assert r.planned_prompt_tokens < r.prompt_tokens <= r.planned_prompt_tokens + 12
        assert r.tpot is not None and r.ttft is not None and r.e2e is not None
        assert r.ttft <= r.e2e
    # the worker saw the same requests, and most hit the shared system prompt
    done = after["vllm:e2e_request_latency_seconds_count"] - before.get(
        "vllm:e2e_request_latency_seconds_count", 0
    )
    assert done == n
    hits = after["vllm:prefix_cache_hits_total"] - before.get("vllm:prefix_cache_hits_total", 0)
    assert hits >= 0.5 * n * SCENARIOS["steady"].system_prompt_tokens
    assert after["vllm:num_requests_waiting"] == 0


async def test_overload_queue_climbs_with_vram_above_92_percent(tmp_path: Path) -> None:
    state_dir = tmp_path / "gpus"
    url, proc = start_sim(tmp_path, "--time-scale", str(SCALE), "--gpu-state-dir", str(state_dir))
    samples: list[tuple[float, float, float]] = []  # (waiting, running, VRAM ratio)

    async def watch(stop: asyncio.Event) -> None:
        while not stop.is_set():
            m = await scrape(url)
            st = gpustate.read_state(state_dir, 0)
            assert st is not None
            ratio = (st.memory_used_bytes + st.memory_reserved_bytes) / st.memory_total_bytes
            samples.append((m["vllm:num_requests_waiting"], m["vllm:num_requests_running"], ratio))
            await asyncio.sleep(0.2)

    try:
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(watch(stop))
        result = await run_load([url], "overload", 5, time_scale=SCALE, seed=2, drain=0)
        stop.set()
        await watcher
    finally:
        proc.stop()
    max_num_seqs = 20  # the simulator's default
    assert max(r for _, r, _ in samples) <= max_num_seqs
    together = [s for s in samples if s[0] > max_num_seqs and s[2] > 0.92]
    assert together, f"never queue > {max_num_seqs} with VRAM > 92 %: {samples}"
    # the queue keeps climbing past the first crossing (the last samples may come after
    # the load generator cancelled its requests, when the queue has drained)
    assert max(s[0] for s in samples) > together[0][0]
    # open loop: arrivals kept coming while the worker fell behind; the rest were cancelled
    assert result.statuses().get("cancelled", 0) > result.statuses().get("ok", 0)


async def test_long_tail_puts_p99_far_above_p50(warm_pair: tuple[str, str]) -> None:
    result = await run_load([warm_pair[0]], "long-tail", 5, time_scale=SCALE, seed=3, drain=30)
    assert set(result.statuses()) == {"ok"}
    longs = [r for r in result.records if r.long]
    assert 0 < len(longs) < 0.2 * len(result.records)
    s = result.summary()["e2e"]
    assert s["p99"] > 5 * s["p50"]  # the guide's long-tail ratio (ALERTS.md latency.tail_ratio)
    assert min(r.e2e or 0 for r in longs) > s["p50"]


async def test_imbalance_sends_most_traffic_to_the_first_worker(
    warm_pair: tuple[str, str],
) -> None:
    a, b = warm_pair
    before_a, before_b = await scrape(a), await scrape(b)
    result = await run_load([a, b], "imbalance", 4, time_scale=SCALE, seed=4, drain=20)
    counts = result.per_target()
    assert counts[a] >= 0.8 * len(result.records) and counts[b] > 0
    after_a, after_b = await scrape(a), await scrape(b)
    key = "vllm:generation_tokens_total"
    assert after_a[key] - before_a[key] > 4 * (after_b[key] - before_b[key])
    assert result.summary(a)["ok"] == counts[a]
    with pytest.raises(ConfigError, match="2 targets"):
        await run_load([a], "imbalance", 1)


async def test_idle_is_a_trickle(warm_pair: tuple[str, str]) -> None:
    result = await run_load([warm_pair[1]], "idle", 3, time_scale=SCALE, seed=5, drain=10)
    assert 1 <= len(result.records) <= 15  # 0.2 req/s x 3 s, ten times faster
    assert set(result.statuses()) == {"ok"}


async def test_cold_start_first_requests_are_slow(tmp_path: Path) -> None:
    url, proc = start_sim(tmp_path, "--time-scale", str(SCALE))  # default: 3 cold requests
    try:
        result = await run_load([url], "cold-start", 3, time_scale=SCALE, seed=6, drain=20)
    finally:
        proc.stop()
    ttfts = [r.ttft for r in result.records if r.ttft is not None]
    assert len(ttfts) == len(result.records) >= 6
    # the first request waits for the whole warm-up (4.6 s, scaled): a lower bound
    assert ttfts[0] >= 4.6 * SCALE
    late = ttfts[len(ttfts) // 2 :]
    assert quantile(late, 0.5) is not None and quantile(late, 0.5) < ttfts[0] / 3  # type: ignore[operator]


def test_cli_writes_json_and_refuses_remote_targets(
    warm_pair: tuple[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "load.json"
    proc = subprocess.run(
        inferwatch_cmd(
            "loadgen",
            "--target",
            warm_pair[1],
            "--scenario",
            "steady",
            "--duration",
            "1",
            "--time-scale",
            str(SCALE),
            "--json",
            str(out),
            "--prompt-tokens",
            "50",
            "--output-tokens",
            "8",
            "--system-prompt-share",
            "0",
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "scenario steady" in proc.stdout and "TTFT p50" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["scenario"] == "steady" and doc["records"]
    assert doc["summary"]["ok"] == len(doc["records"]) == doc["per_target"][warm_pair[1]]
    assert {(r["planned_prompt_tokens"], r["output_tokens"]) for r in doc["records"]} == {(50, 8)}

    for args, flag in (
        (["--target", "http://10.1.2.3:8000", "--scenario", "idle"], "loopback"),
        (["--target", warm_pair[1], "--scenario", "idle", "--prompt-tokens", "x"], "--prompt"),
        (["--target", warm_pair[1], "--scenario", "idle", "--duration", "0"], "--duration"),
    ):
        bad = subprocess.run(
            inferwatch_cmd("loadgen", *args), capture_output=True, text=True, timeout=60
        )
        assert bad.returncode == 2
        assert bad.stderr.strip().count("\n") == 0 and flag in bad.stderr


def test_quantile_and_length_distributions() -> None:
    import random

    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.99) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    rng = random.Random(0)
    d = LengthDist(100, 0.5, 10, 300)
    values = [d.sample(rng) for _ in range(2000)]
    assert min(values) >= 10 and max(values) <= 300
    assert 85 <= sorted(values)[1000] <= 115  # the median
    assert LengthDist(7).sample(rng) == 7
    assert parse_length("300:0.5", "--prompt-tokens") == LengthDist(300, 0.5)
    with pytest.raises(ConfigError, match="--output-tokens"):
        parse_length("0", "--output-tokens")
    custom = customize(SCENARIOS["steady"], system_prompt_share=0.0, output=LengthDist(9))
    assert custom.system_prompt_share == 0.0 and custom.output == LengthDist(9)
    assert custom.rate == SCENARIOS["steady"].rate
    with pytest.raises(ConfigError, match="--system-prompt-share"):
        customize(SCENARIOS["steady"], system_prompt_share=2.0)
