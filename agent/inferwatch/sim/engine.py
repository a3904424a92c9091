"""Continuous batching, simulated: a scheduler, a paged KV cache and a step-cost model.

:class:`EngineCore` is synchronous and clock-free: ``schedule(now)`` plans one
engine step, ``complete(plan, now)`` applies it. :class:`EngineLoop` drives a
core in real time (sleeping for each step's cost); tests drive a core in
virtual time, which makes the batching behaviour exact and fast to check.

The scheduler follows vLLM V1: running requests first (one decode token each,
or the next chunk of a prompt), then waiting requests in arrival order while
the batch has room (``max_num_seqs``), the step has token budget
(``max_num_batched_tokens``, chunked prefill) and the KV cache has blocks.
A new request first looks its prompt up in the prefix cache and skips the
prefill of the blocks it finds. When a running request needs a block and none
is free, the newest running request is preempted: its blocks are freed and it
goes back to the head of the queue, to be recomputed later.

A step costs (see :func:`step_seconds`) the time to stream the weights and the
KV it reads from memory plus the matmul time of the tokens it computes, plus a
fixed overhead: decode steps grow with the batch and its context, prefill
steps with the prompt tokens. The first ``cold_start_requests`` requests pay
a warm-up delay on top (kernel compilation, guide 5.2), decreasing linearly.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from inferwatch.sim.config import SimConfig
from inferwatch.sim.kvcache import BlockPool, block_hashes
from inferwatch.sim.stats import (
    EngineSnapshot,
    FinishedRequest,
    RequestStarted,
    StepStats,
)
from inferwatch.sim.tokenizer import output_words


@dataclass(frozen=True)
class TokenOutput:
    """One generated token as the API layer sees it."""

    index: int
    text: str
    #: "stop"/"length" on the last token, "abort" (no text) when aborted, else None
    finish_reason: str | None = None


TokenSink = Callable[[TokenOutput], None]


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine. ``target_tokens`` is how many it will generate."""

    request_id: str
    prompt_ids: list[int]
    #: the effective output limit (the request's max_tokens, else what max_model_len leaves)
    max_tokens: int
    target_tokens: int
    #: finish reason once target_tokens are out: "length" (hit max_tokens) or "stop" (EOS)
    final_reason: str
    arrival: float
    max_tokens_param: int | None = None
    sink: TokenSink | None = None
    seed: int = 0

    generated: int = 0
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0
    admitted: bool = False
    cold_extra: float = 0.0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    preemptions: int = 0
    finished: str | None = None
    _hashes: list[int] | None = None
    _registered: int = 0
    _rng: random.Random | None = None

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.generated

    def prompt_block_hashes(self, block_size: int) -> list[int]:
        if self._hashes is None:
            self._hashes = block_hashes(self.prompt_ids, block_size)
        return self._hashes

    def next_text(self) -> str:
        if self._rng is None:
            self._rng = random.Random(self.seed)
        return output_words(self._rng)


@dataclass
class StepPlan:
    """One planned engine step: who computes how many tokens, and what it costs."""

    items: list[tuple[SimRequest, int]]
    prefill_tokens: int
    decode_tokens: int
    context_tokens: int
    preemptions: int
    prefix_queries: int
    prefix_hits: int
    #: compute time (scaled); what the GPU is busy for
    busy_seconds: float
    #: compute time plus warm-up delay (scaled); how long the step takes
    seconds: float


def step_seconds(
    cfg: SimConfig, prefill_tokens: int, decode_tokens: int, context_tokens: int
) -> float:
    """Unscaled cost of one engine step.

    Memory time: the weights once, plus the KV of every token attended to.
    Compute time: 2 x params FLOPs per token computed (prefill or decode).
    Both spread over the engine's tensor-parallel GPUs, or shrink to its MIG
    slice's share of the card (``cfg.compute_share``).
    """
    mem_bytes = cfg.profile.weights_bytes + context_tokens * cfg.profile.kv_bytes_per_token
    memory = mem_bytes / (cfg.gpu.hbm_bytes_per_s * cfg.compute_share)
    flops = cfg.gpu.effective_flops * cfg.compute_share
    compute = (prefill_tokens + decode_tokens) * 2 * cfg.profile.params / flops
    return cfg.step_overhead_seconds + memory + compute


def cold_start_extra(cfg: SimConfig, k: int) -> float:
    """Unscaled warm-up delay of the k-th request admitted since start (0-based)."""
    n = cfg.cold_start_requests
    if k >= n:
        return 0.0
    return cfg.cold_start_seconds * (n - k) / n


class EngineCore:
    """One engine (one data-parallel rank): scheduler, KV cache, request state."""

    def __init__(
        self,
        cfg: SimConfig,
        index: int = 0,
        on_stats: Callable[[int, StepStats], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.pool = BlockPool(cfg.blocks)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.on_stats = on_stats
        self.admitted_total = 0
        self.preemptions_total = 0
        self.busy_seconds = 0.0
        self.prefill_tokens_total = 0
        self.decode_tokens_total = 0
        self._by_id: dict[str, SimRequest] = {}

    # -- requests in and out ------------------------------------------------
    def add_request(self, req: SimRequest) -> None:
        if req.prompt_len == 0:
            raise ValueError("empty prompt")
        self.waiting.append(req)
        self._by_id[req.request_id] = req

    def abort(self, request_id: str, now: float) -> bool:
        """Finish a request with reason "abort" (the client went away)."""
        req = self._by_id.get(request_id)
        if req is None or req.finished is not None:
            return False
        if req in self.running:
            self.running.remove(req)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        record = self._finish(req, "abort", now)
        if req.sink is not None:
            # Whoever still waits for tokens (a worker shutting down) learns it is over;
            # a handler whose client went away is gone already and reads nothing.
            req.sink(TokenOutput(req.generated, "", "abort"))
        if self.on_stats:
            self.on_stats(self.index, StepStats(engine=self.index, finished=(record,), step=False))
        return True

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def load_score(self) -> int:
        """vLLM's data-parallel balancing score: queued requests weigh four times running ones."""
        return 4 * len(self.waiting) + len(self.running)

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(
            engine=self.index,
            running=len(self.running),
            waiting=len(self.waiting),
            # Every simulated wait is for room in the batch or the KV cache; the
            # simulator has no KV transfers or scheduling policies that defer.
            waiting_by_reason={"capacity": len(self.waiting), "deferred": 0},
            kv_usage=self.pool.usage,
            blocks_in_use=self.pool.in_use,
            num_gpu_blocks=self.pool.num_blocks,
            max_num_seqs=self.cfg.max_num_seqs,
        )

    # -- one step -----------------------------------------------------------
    def schedule(self, now: float) -> StepPlan | None:
        """Plan the next step, or None when there is nothing to run."""
        cfg = self.cfg
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        items: list[tuple[SimRequest, int]] = []
        preempted = 0

        # 1. running requests, oldest first
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = min(req.num_tokens - req.num_computed, budget)
            need = _blocks_for(req.num_computed + num_new, bs) - len(req.blocks)
            lost = False
            while need > self.pool.num_free:
                # The newest request gives its blocks back; never one already planned
                # in this step, since those are older than req.
                victim = self.running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    lost = True
                    break
            if lost:
                break
            if need > 0:
                req.blocks.extend(self.pool.allocate(need))
            items.append((req, num_new))
            budget -= num_new
            i += 1

        # 2. waiting requests, in order, unless this step had to preempt (vLLM does the same)
        cold_extra = 0.0
        queries = hits = 0
        if not preempted:
            while self.waiting and len(self.running) < cfg.max_num_seqs and budget > 0:
                req = self.waiting[0]
                hit_blocks: list[int] = []
                if cfg.enable_prefix_caching:
                    hashes = req.prompt_block_hashes(bs)
                    # Always compute at least the last prompt token (it yields the logits).
                    max_hit = (req.prompt_len - 1) // bs
                    hit_blocks = self.pool.lookup(hashes[:max_hit])
                computed = len(hit_blocks) * bs
                num_new = min(req.num_tokens - computed, budget)
                need = _blocks_for(computed + num_new, bs) - len(hit_blocks)
                if need + self.pool.cost_of_touch(hit_blocks) > self.pool.num_free:
                    break
                self.waiting.popleft()
                self.pool.touch(hit_blocks)
                req.blocks = hit_blocks + self.pool.allocate(need)
                req.num_computed = computed
                req._registered = len(hit_blocks)
                if cfg.enable_prefix_caching:
                    queries += req.num_tokens
                    hits += computed
                if not req.admitted:
                    req.admitted = True
                    req.num_cached_tokens = computed
                    req.scheduled_at = now
                    req.cold_extra = cold_start_extra(cfg, self.admitted_total)
                    cold_extra = max(cold_extra, req.cold_extra)
                    self.admitted_total += 1
                self.running.append(req)
                items.append((req, num_new))
                budget -= num_new

        if not items and not preempted:
            return None
        prefill = decode = context = 0
        for req, n in items:
            if req.generated > 0 and n == 1 and req.num_computed == req.num_tokens - 1:
                decode += 1
            else:
                prefill += n
            context += req.num_computed + n
        cost = step_seconds(cfg, prefill, decode, context) * cfg.time_scale
        return StepPlan(
            items=items,
            prefill_tokens=prefill,
            decode_tokens=decode,
            context_tokens=context,
            preemptions=preempted,
            prefix_queries=queries,
            prefix_hits=hits,
            busy_seconds=cost,
            seconds=cost + cold_extra * cfg.time_scale,
        )

    def complete(self, plan: StepPlan, now: float) -> StepStats:
        """Apply a planned step at time ``now``: advance tokens, emit them, finish requests."""
        bs = self.cfg.block_size
        prompt_tokens = cached = generation = 0
        ttfts: list[float] = []
        itls: list[float] = []
        started: list[RequestStarted] = []
        finished: list[FinishedRequest] = []
        for req, n in plan.items:
            if req.finished is not None:
                continue  # aborted while the step ran
            req.num_computed += n
            self._register_full_blocks(req, bs)
            if req.num_computed < req.num_tokens:
                continue  # a chunk of a long prompt: no token yet
            req.generated += 1
            generation += 1
            if req.first_token_at is None:
                req.first_token_at = now
                ttfts.append(now - req.arrival)
                prompt_tokens += req.prompt_len
                cached += req.num_cached_tokens
                started.append(RequestStarted(max_tokens=req.max_tokens))
            else:
                assert req.last_token_at is not None
                itls.append(now - req.last_token_at)
            req.last_token_at = now
            done = req.generated >= req.target_tokens
            reason = req.final_reason if done else None
            if req.sink is not None:
                req.sink(TokenOutput(req.generated - 1, req.next_text(), reason))
            if done:
                self.running.remove(req)
                finished.append(self._finish(req, req.final_reason, now))
        self.busy_seconds += plan.busy_seconds
        self.prefill_tokens_total += plan.prefill_tokens
        self.decode_tokens_total += plan.decode_tokens
        self.preemptions_total += plan.preemptions
        stats = StepStats(
            engine=self.index,
            prompt_tokens=prompt_tokens,
            cached_prompt_tokens=cached,
            generation_tokens=generation,
            preemptions=plan.preemptions,
            prefix_queries=plan.prefix_queries,
            prefix_hits=plan.prefix_hits,
            ttfts=tuple(ttfts),
            itls=tuple(itls),
            started=tuple(started),
            finished=tuple(finished),
        )
        if self.on_stats:
            self.on_stats(self.index, stats)
        return stats

    # -- internals -----------------------------------------------------------
    def _register_full_blocks(self, req: SimRequest, bs: int) -> None:
        """Give newly completed prompt blocks their prefix hash, so later requests can hit."""
        if not self.cfg.enable_prefix_caching:
            return
        hashes = req.prompt_block_hashes(bs)
        full = min(len(hashes), req.num_computed // bs, len(req.blocks))
        for j in range(req._registered, full):
            self.pool.register(req.blocks[j], hashes[j])
        req._registered = max(req._registered, full)

    def _preempt(self, req: SimRequest) -> None:
        self.pool.free(req.blocks)
        req.blocks = []
        req.num_computed = 0
        req._registered = 0
        req.preemptions += 1
        self.waiting.appendleft(req)

    def _finish(self, req: SimRequest, reason: str, now: float) -> FinishedRequest:
        if req.blocks:
            self.pool.free(req.blocks)
            req.blocks = []
        req.finished = reason
        self._by_id.pop(req.request_id, None)
        scheduled = req.scheduled_at if req.scheduled_at is not None else now
        first = req.first_token_at if req.first_token_at is not None else now
        last = req.last_token_at if req.last_token_at is not None else now
        decode = max(0.0, last - first)
        return FinishedRequest(
            finish_reason=reason,
            prompt_tokens=req.prompt_len,
            generation_tokens=req.generated,
            cached_tokens=req.num_cached_tokens,
            max_tokens_param=req.max_tokens_param,
            e2e=now - req.arrival,
            queue_time=scheduled - req.arrival,
            prefill_time=max(0.0, first - scheduled) if req.first_token_at is not None else 0.0,
            decode_time=decode,
            inference_time=max(0.0, last - scheduled) if req.scheduled_at is not None else 0.0,
            mean_tpot=decode / (req.generated - 1) if req.generated > 1 else 0.0,
            preemptions=req.preemptions,
        )


def _blocks_for(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size)


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task (None: there is none) and wait until it has stopped."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class EngineLoop:
    """Runs an :class:`EngineCore` in real time on the running asyncio loop."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        #: wall-clock seconds spent in steps, warm-up delays excluded: the GPU's busy time.
        #: Differs from core.busy_seconds (the planned cost) when the host is slower than
        #: a small --time-scale asks for.
        self.busy_seconds = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"sim-engine-{self.core.index}"
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def submit(self, req: SimRequest) -> None:
        self.core.add_request(req)
        self._wake.set()

    def abort(self, request_id: str) -> None:
        self.core.abort(request_id, asyncio.get_running_loop().time())

    def abort_all(self) -> None:
        now = asyncio.get_running_loop().time()
        for req in [*self.core.running, *self.core.waiting]:
            self.core.abort(req.request_id, now)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            plan = self.core.schedule(began)
            if plan is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            # Sleep to the step's end measured from its start, so the time spent
            # scheduling counts as part of the step rather than adding to it.
            await asyncio.sleep(max(0.0, began + plan.seconds - loop.time()))
            ended = loop.time()
            self.core.complete(plan, ended)
            self.busy_seconds += max(0.0, ended - began - (plan.seconds - plan.busy_seconds))
