"""The simulated engine's batching behaviour, driven in virtual time (exact, no sleeps)."""

from __future__ import annotations

import dataclasses

import pytest

from inferwatch.sim.config import SimConfig
from inferwatch.sim.engine import (
    EngineCore,
    SimRequest,
    TokenOutput,
    cold_start_extra,
    step_seconds,
)
from inferwatch.sim.kvcache import BlockPool, block_hashes
from inferwatch.sim.stats import EngineSnapshot, FinishedRequest, StepStats

WARM = SimConfig(cold_start_requests=0)


def make_request(
    rid: str, prompt: list[int], out: int, arrival: float = 0.0, *, reason: str = "length"
) -> SimRequest:
    return SimRequest(
        request_id=rid,
        prompt_ids=prompt,
        max_tokens=out,
        target_tokens=out,
        final_reason=reason,
        arrival=arrival,
        max_tokens_param=out,
    )


def unique_prompt(n: int, salt: int) -> list[int]:
    return [salt * 1_000_003 + i for i in range(n)]


class Recorder:
    """Collects what the engine reports, as a writer would."""

    def __init__(self) -> None:
        self.steps: list[StepStats] = []

    def __call__(self, engine: int, stats: StepStats) -> None:
        self.steps.append(stats)

    @property
    def finished(self) -> list[FinishedRequest]:
        return [f for s in self.steps for f in s.finished]

    def total(self, name: str) -> int:
        return sum(getattr(s, name) for s in self.steps)


def drive(
    core: EngineCore, arrivals: list[SimRequest], *, max_steps: int = 200_000
) -> list[tuple[float, EngineSnapshot]]:
    """Run the core in virtual time until every arrival has finished; snapshot after each step."""
    pending = sorted(arrivals, key=lambda r: r.arrival)
    now = 0.0
    snaps: list[tuple[float, EngineSnapshot]] = []
    for _ in range(max_steps):
        while pending and pending[0].arrival <= now:
            core.add_request(pending.pop(0))
        plan = core.schedule(now)
        if plan is None:
            if not pending:
                return snaps
            now = pending[0].arrival
            continue
        now += plan.seconds
        core.complete(plan, now)
        snaps.append((now, core.snapshot()))
    raise AssertionError("the engine did not drain")


def test_step_cost_grows_with_batch_and_prefill() -> None:
    base = step_seconds(WARM, 0, 1, 100)
    assert step_seconds(WARM, 0, 20, 2000) > step_seconds(WARM, 0, 10, 1000) > base
    assert step_seconds(WARM, 2048, 0, 2048) > step_seconds(WARM, 512, 0, 512) > base
    # a single 500-token prompt on the defaults: about 0.1 s, the guide's 80-150 ms on an A10
    assert 0.08 < step_seconds(WARM, 500, 0, 500) < 0.15


def test_queue_rises_past_max_num_seqs_under_overload() -> None:
    cfg = WARM
    rec = Recorder()
    core = EngineCore(cfg, 0, rec)
    arrivals = [
        make_request(f"r{i}", unique_prompt(800, i), 200, arrival=i * 0.1) for i in range(80)
    ]
    snaps = drive(core, arrivals)
    assert max(s.waiting for _, s in snaps) > cfg.max_num_seqs
    assert max(s.running for _, s in snaps) == cfg.max_num_seqs
    assert all(s.running <= cfg.max_num_seqs for _, s in snaps)
    finished = rec.finished
    assert len(finished) == 80
    assert all(f.finish_reason == "length" and f.generation_tokens == 200 for f in finished)
    # the first request did not wait; later ones waited for many of its lifetimes
    assert finished[0].queue_time < 0.5
    assert max(f.queue_time for f in finished) > finished[0].e2e


def test_preempts_newest_when_kv_cache_is_full_and_recomputes() -> None:
    cfg = dataclasses.replace(WARM, num_gpu_blocks=64, max_model_len=1024)
    rec = Recorder()
    core = EngineCore(cfg, 0, rec)
    # 8 requests of 200 + 300 tokens need 250 blocks together; the cache has 64.
    snaps = drive(core, [make_request(f"r{i}", unique_prompt(200, i), 300) for i in range(8)])
    assert core.preemptions_total > 0
    assert rec.total("preemptions") == core.preemptions_total
    finished = rec.finished
    assert sum(f.preemptions for f in finished) == core.preemptions_total
    # every request still generated all its tokens (recompute, not loss)
    assert sorted(f.generation_tokens for f in finished) == [300] * 8
    assert max(s.kv_usage for _, s in snaps) == 1.0
    assert all(0.0 <= s.kv_usage <= 1.0 for _, s in snaps)
    assert core.pool.in_use == 0  # every block came back


def test_prefix_cache_hits_skip_prefill_and_shorten_ttft() -> None:
    system = unique_prompt(1024, 99)
    first = make_request("a", system + unique_prompt(40, 1), 4)
    second = make_request("b", system + unique_prompt(40, 2), 4, arrival=10.0)

    rec = Recorder()
    core = EngineCore(WARM, 0, rec)
    drive(core, [first, second])
    ttft_a, ttft_b = rec.steps[0].ttfts[0], [t for s in rec.steps for t in s.ttfts][1]
    assert ttft_b < ttft_a * 0.5
    assert rec.total("prefix_hits") == 1024  # the 64 shared blocks of 16 tokens
    assert rec.total("prefix_queries") == 2 * (1024 + 40)
    assert [f.cached_tokens for f in rec.finished] == [0, 1024]

    # Without prefix caching the second request pays the full prefill again.
    rec2 = Recorder()
    core2 = EngineCore(dataclasses.replace(WARM, enable_prefix_caching=False), 0, rec2)
    first2 = make_request("a", system + unique_prompt(40, 1), 4)
    second2 = make_request("b", system + unique_prompt(40, 2), 4, arrival=10.0)
    drive(core2, [first2, second2])
    ttfts = [t for s in rec2.steps for t in s.ttfts]
    assert ttfts[1] == pytest.approx(ttfts[0])
    assert rec2.total("prefix_hits") == 0


def test_evicted_prefix_no_longer_hits() -> None:
    cfg = dataclasses.replace(WARM, num_gpu_blocks=40, max_model_len=640)
    rec = Recorder()
    core = EngineCore(cfg, 0, rec)
    shared = unique_prompt(320, 7)  # 20 blocks, kept as cached-free blocks after the request
    reqs = [
        make_request("a", [*shared, 1], 1, arrival=0.0),
        make_request("filler", unique_prompt(632, 8), 8, arrival=1.0),  # takes all 40 blocks
        make_request("b", [*shared, 2], 1, arrival=2.0),
    ]
    drive(core, reqs)
    cached = {f.prompt_tokens: f.cached_tokens for f in rec.finished}
    assert cached[632] == 0
    assert [f.cached_tokens for f in rec.finished if f.prompt_tokens == 321] == [0, 0]


def test_cold_start_first_requests_slow_then_warm() -> None:
    cfg = SimConfig(cold_start_requests=3, cold_start_seconds=4.6)
    rec = Recorder()
    core = EngineCore(cfg, 0, rec)
    # one request at a time, each long after the previous one finished
    drive(
        core, [make_request(f"r{i}", unique_prompt(64, i), 1, arrival=i * 10.0) for i in range(6)]
    )
    ttfts = [t for s in rec.steps for t in s.ttfts]
    warm = ttfts[3:]
    assert ttfts[0] > ttfts[1] > ttfts[2] > max(warm)
    assert ttfts[0] == pytest.approx(4.6 + warm[0], rel=1e-6)  # guide 5.2: ~4.8 s vs warm
    assert warm[0] < 0.2
    assert [cold_start_extra(cfg, k) for k in range(4)] == pytest.approx(
        [4.6, 4.6 * 2 / 3, 4.6 / 3, 0]
    )
    # the warm-up is not GPU work: busy time holds only the steps' compute
    assert core.busy_seconds < sum(ttfts) - 4.6


def test_time_scale_scales_every_duration() -> None:
    def ttfts(cfg: SimConfig) -> list[float]:
        rec = Recorder()
        drive(EngineCore(cfg, 0, rec), [make_request("r", unique_prompt(300, 1), 5)])
        return [t for s in rec.steps for t in s.ttfts] + [x for s in rec.steps for x in s.itls]

    normal = ttfts(SimConfig())
    fast = ttfts(SimConfig(time_scale=0.1))
    assert fast == pytest.approx([0.1 * x for x in normal])


def test_chunked_prefill_respects_token_budget() -> None:
    cfg = dataclasses.replace(WARM, max_num_batched_tokens=512)
    core = EngineCore(cfg, 0)
    out: list[TokenOutput] = []
    req = make_request("long", unique_prompt(1300, 3), 2)
    req.sink = out.append
    core.add_request(req)
    now = 0.0
    chunks = []
    while (plan := core.schedule(now)) is not None:
        chunks.append(plan.prefill_tokens + plan.decode_tokens)
        now += plan.seconds
        core.complete(plan, now)
    assert chunks == [512, 512, 276, 1]
    assert [o.index for o in out] == [0, 1]
    assert out[-1].finish_reason == "length" and out[0].finish_reason is None


def test_abort_frees_blocks_and_reports_abort() -> None:
    rec = Recorder()
    core = EngineCore(WARM, 0, rec)
    core.add_request(make_request("a", unique_prompt(100, 1), 50))
    core.add_request(make_request("b", unique_prompt(100, 2), 50))
    plan = core.schedule(0.0)
    assert plan is not None
    assert core.abort("a", 0.001)  # aborted while its step runs
    core.complete(plan, plan.seconds)
    assert core.abort("b", 1.0)
    assert not core.abort("b", 1.0)
    assert [f.finish_reason for f in rec.finished] == ["abort", "abort"]
    assert core.pool.in_use == 0 and core.idle


def test_block_pool_reference_counts_and_lru() -> None:
    pool = BlockPool(4)
    a = pool.allocate(2)
    hashes = block_hashes(list(range(32)), 16)
    pool.register(a[0], hashes[0])
    pool.register(a[1], hashes[1])
    assert pool.lookup(hashes) == a
    pool.touch(a)  # a second request shares them
    pool.free(a)
    assert pool.in_use == 2
    pool.free(a)
    assert pool.in_use == 0 and pool.lookup(hashes) == a  # still cached while free
    pool.allocate(3)  # takes the never-used block and then evicts the oldest cached ones
    assert len(pool.lookup(hashes)) < 2
    with pytest.raises(RuntimeError):
        pool.allocate(2)
