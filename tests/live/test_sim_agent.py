"""The agent watching a live simulated worker under load agrees with the load generator.

Three real processes: ``inferwatch simulate`` (with a fake GPU state file),
``inferwatch run`` (engine scrape every 0.5 s, fake NVML backend on that file)
and the load generator in this test. What the agent exports is compared with
what the client measured itself.

Tolerances, and why:

- Gauges (queue depth, running, KV usage) are sampled by the agent at its own
  moments: a value read from the agent at time t was true at some moment of
  [t - STALE, t], STALE = 3 collect intervals + 1 s (the engine scrape interval,
  the scrape itself, and a busy 2-core host). The agent's value must lie in the
  range the client's own accounting took over that window, widened by a small
  count (requests on the wire between client and worker, blocks rounded per
  request). A host that stalls a process for longer than STALE can push a few
  samples out, so 80 % of the samples must agree, not all.
- Window quantiles are interpolated inside histogram buckets (PromQL
  ``histogram_quantile``), so the agent knows a quantile only to its bucket; the
  client measures exact values plus a little HTTP overhead. The agent's quantile
  and the client's must fall in the same or an adjacent bucket.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.sim.expo.vllm import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from inferwatch.sim.loadgen import LoadResult, run_load
from inferwatch.sim.scenarios import SCENARIOS

COLLECT = 0.5
STALE = 3 * COLLECT + 1.0
BLOCK = 16

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclasses.dataclass
class Stack:
    sim_url: str
    agent_url: str
    processes: list[Process]


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    sim_args: list[str] = request.param
    try:
        import inferwatch.agent.wiring  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the agent ships with the package
        pytest.skip(f"the agent is not importable: {exc}")
    state = tmp_path / "gpus"
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    sim = Process(
        inferwatch_cmd(
            "simulate", "--port", str(sim_port), "--gpu-state-dir", str(state), *sim_args
        ),
        tmp_path / "sim.log",
    )
    agent = AgentRun(
        tmp_path,
        *("--gpu-backend", "fake", "--fake-gpus", "1", "--fake-gpu-state", str(state)),
        *("--collect-interval", f"{int(COLLECT * 1000)}ms", "--stats-window", "120s"),
        *("--worker", f"w0={sim_url}"),
        ready=None,
    )
    agent_url = agent.url
    procs = [sim, agent.process]

    def target_up() -> bool:
        for p in procs:
            if not p.alive():
                raise AssertionError(f"{p.args[3]} exited:\n{p.log()[-3000:]}")
        status, body, _ = http_get(f"{agent_url}/metrics", timeout=2)
        return status == 200 and 'inferwatch_target_up{worker="w0"} 1.0' in body.decode()

    try:
        wait_until(target_up, timeout=60, message="agent scraping the simulator")
        yield Stack(sim_url, agent_url, procs)
    finally:
        for p in procs:
            p.stop()


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        text = await resp.text()
    return {
        (x.name, frozenset(x.labels.items())): x.value
        for fam in text_string_to_metric_families(text)
        for x in fam.samples
    }


def get(samples: Samples, name: str, **labels: str) -> float | None:
    for (n, ls), v in samples.items():
        if n == name and set(labels.items()) <= ls:
            return v
    return None


class Watcher:
    """Polls the agent during the load; each sample is stamped with the unix time it was read."""

    def __init__(self, agent_url: str) -> None:
        self.agent_url = agent_url
        self.samples: list[tuple[float, Samples]] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            got = await scrape(self.agent_url)
            self.samples.append((time.time(), got))
            await asyncio.sleep(0.25)

    def __enter__(self) -> Watcher:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def client_range(
    result: LoadResult, at_unix: float, value_at: Callable[[float], float]
) -> tuple[float, float]:
    """Min and max of a client-side quantity over the agent's staleness window before ``at``."""
    end = at_unix - result.started_at
    points = [end - STALE + i * STALE / 20 for i in range(21)]
    values = [value_at(p) for p in points if p >= 0] or [value_at(0.0)]
    return min(values), max(values)


def agreement(checks: Sequence[bool]) -> float:
    assert checks, "no samples to compare"
    return sum(checks) / len(checks)


def bucket_index(bounds: Sequence[float], value: float) -> int:
    """The bucket a value falls in (0 for the first bound, len(bounds) for +Inf)."""
    return bisect.bisect_left(list(bounds), value)


def kv_estimate(result: LoadResult, at: float, num_blocks: int) -> float:
    """KV usage from the client's own accounting: blocks of every request in flight at ``at``.

    A request holds ceil((prompt + generated) / 16) blocks while it runs; tokens
    arrive evenly between its first and last token (the client saw both).
    """
    blocks = 0
    for r in result.records:
        if r.sent_at > at or (r.ended_at is not None and at >= r.ended_at):
            continue
        if r.prompt_tokens is None or r.ttft is None:
            continue
        first = r.sent_at + r.ttft
        if at < first:
            generated = 0
        elif r.tpot is None:
            generated = 1
        else:
            generated = min(r.output_tokens, 1 + int((at - first) / r.tpot))
        blocks += math.ceil((r.prompt_tokens + generated) / BLOCK)
    return blocks / num_blocks


NUM_BLOCKS = 500


@pytest.mark.parametrize(
    "stack",
    [["--time-scale", "0.5", "--cold-start-requests", "0", "--num-gpu-blocks", str(NUM_BLOCKS)]],
    indirect=True,
)
async def test_agent_agrees_with_the_client_under_steady_load(stack: Stack) -> None:
    # no shared system prompt: every request's KV is its own, so the client can count it
    scenario = dataclasses.replace(SCENARIOS["steady"], system_prompt_share=0.0)
    with Watcher(stack.agent_url) as watcher:
        result = await run_load([stack.sim_url], scenario, 8, time_scale=0.5, seed=11, drain=60)
        await watcher.stop()
    ok = result.ok()
    assert len(ok) == len(result.records) >= 15

    # gauges: running + waiting and KV usage, against the client's in-flight accounting
    flight_checks, kv_checks = [], []
    for t, s in watcher.samples:
        running = get(s, "inferwatch_requests_running", worker="w0")
        waiting = get(s, "inferwatch_queue_depth", worker="w0")
        kv = get(s, "inferwatch_kv_cache_usage_ratio", worker="w0")
        if running is None or waiting is None or kv is None:
            continue
        lo, hi = client_range(result, t, result.in_flight)
        flight_checks.append(lo - 2 <= running + waiting <= hi + 2)
        klo, khi = client_range(result, t, lambda at: kv_estimate(result, at, NUM_BLOCKS))
        # one block per request in flight of rounding, plus requests still on the wire
        slack = 3 * (hi + 2) / NUM_BLOCKS
        kv_checks.append(klo - slack <= kv <= khi + slack)
    assert agreement(flight_checks) >= 0.8, flight_checks
    assert agreement(kv_checks) >= 0.8, kv_checks
    assert (
        max(get(s, "inferwatch_kv_cache_usage_ratio", worker="w0") or 0 for _, s in watcher.samples)
        > 0.1
    )  # the load did reach the cache

    # window quantiles, once the agent has seen every request finish
    async def settled() -> Samples:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            s = await scrape(stack.agent_url)
            if get(s, "inferwatch_ttft_seconds_count", worker="w0") == len(ok):
                return s
            if loop.time() > deadline:
                raise AssertionError("the agent never counted every request")
            await asyncio.sleep(0.25)

    final = await settled()
    summary = result.summary()
    for name, metric, bounds, quantiles in (
        ("ttft", "inferwatch_ttft_quantile_seconds", TTFT_BUCKETS, ("0.5", "0.95")),
        ("tpot", "inferwatch_tpot_quantile_seconds", ITL_BUCKETS, ("0.5", "0.95")),
        ("e2e", "inferwatch_e2e_latency_quantile_seconds", REQUEST_LATENCY_BUCKETS,
         ("0.5", "0.95", "0.99")),
    ):  # fmt: skip
        for q in quantiles:
            agent_value = get(final, metric, worker="w0", quantile=q)
            client_value = summary[name][f"p{round(float(q) * 100)}"]
            assert agent_value is not None and client_value is not None, (name, q)
            distance = abs(bucket_index(bounds, agent_value) - bucket_index(bounds, client_value))
            assert distance <= 1, f"{name} p{q}: agent {agent_value:.4f}, client {client_value:.4f}"


@pytest.mark.parametrize("stack", [["--time-scale", "0.2"]], indirect=True)
async def test_agent_sees_overload_queue_and_vram_pressure_together(stack: Stack) -> None:
    max_num_seqs = 20  # the simulator's default
    with Watcher(stack.agent_url) as watcher:
        result = await run_load([stack.sim_url], "overload", 6, time_scale=0.2, seed=12, drain=0)
        await watcher.stop()

    queue_checks = []
    pressure = []
    for t, s in watcher.samples:
        waiting = get(s, "inferwatch_queue_depth", worker="w0")
        running = get(s, "inferwatch_requests_running", worker="w0")
        vram = get(s, "inferwatch_gpu_memory_used_ratio", gpu="0")
        slope = get(s, "inferwatch_queue_depth_slope", worker="w0")
        if waiting is None or running is None:
            continue
        assert running <= max_num_seqs
        lo, hi = client_range(result, t, result.in_flight)
        # the client's in-flight requests are the worker's running ones plus its queue
        queue_checks.append(lo - 2 <= waiting + running <= hi + 2)
        if vram is not None and slope is not None:
            pressure.append((waiting, vram, slope))
    assert agreement(queue_checks) >= 0.8, queue_checks
    # the alert's condition, through the agent: VRAM above 92 % while the queue rises
    assert any(w > max_num_seqs and v > 0.92 and sl > 0 for w, v, sl in pressure), pressure
