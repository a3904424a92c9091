"""Runbook pages of the queue and latency alerts: a queue over capacity, TTFT high
on an idle GPU, the P99 TTFT/TPOT thresholds, a long tail, load imbalance."""

from __future__ import annotations

from collections.abc import Callable

from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack.rules.common import dur, num, pct, secs
from inferwatch.pack.runbooks.common import (
    BALANCING,
    FLAGS_WHERE,
    MAX_NUM_SEQS_ESTIMATE,
    Ctx,
    Page,
    cite,
    md,
    promql,
)


def _range(pair: tuple[float, float]) -> str:
    return f"{pair[0]:g}-{pair[1]:g}"


def _pct_range(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.0%}-{pair[1]:.0%}"


def _queue_over_capacity(c: Ctx) -> Page:
    q = c.t.queue.over_capacity_samples
    return Page(
        condition=(
            f"a worker's queue depth is above its `max_num_seqs` for {q} consecutive samples "
            f"({c.t.pack.interval} apart, `pack.scrape_interval`)"
        ),
        meaning=(
            "More requests are waiting than the worker can put in one batch "
            "(`--max-num-seqs`, the most sequences vLLM runs at once). The guide calls the "
            "queue the leading indicator, and GPU utilization the lagging one: when the queue "
            f"stays above the batch capacity for {q} consecutive samples, scale out or "
            "rate-limit then, instead of waiting for the latency alerts [6.1, 6 FAQ]. The "
            "alert needs the agent to know `max_num_seqs` (from the command line, the engine "
            "or the agent's `workers[].max_num_seqs`); without it, it stays silent."
        ),
        impact=(
            "Requests spend time waiting before they start; TTFT rises first. If the "
            "overload lasts, the latency SLO alerts follow."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'Queue vs running vs capacity', 'Queue over capacity')}"
            f"; for the fleet, {c.panel('overview', 'Queue depth vs max_num_seqs')}.\n"
            "2. Paste:"
            + promql(
                f"inferwatch_queue_depth{c.sel}",
                c.r(c.n.batch_capacity),
                f"inferwatch_max_num_seqs{c.sel}",
                f"inferwatch_requests_running{c.sel}",
                f"inferwatch_kv_cache_usage_ratio{c.sel}",
            )
            + "3. Are all workers of the model over capacity (real overload) or only this one "
            "(an imbalance: see InferenceLoadImbalance)?\n"
            f"4. {c.panel('overview', 'Compute-bound or memory-bound')}: a busy GPU wants more "
            "GPUs; a memory-bound one wants KV-cache work [6.1]."
        ),
        mitigation=(
            f"- {cite(md(L.SCALE_OUT), '6 FAQ')} {md(L.RATE_LIMIT)}\n"
            "- If the GPU is not busy (utilization under "
            f"{pct(c.t.gpu_utilization.idle_below)}), the batch is too small for it: raise "
            "`--max-num-seqs` within the memory budget. " + MAX_NUM_SEQS_ESTIMATE + "\n"
            "- Tune how much each step batches: `--max-num-batched-tokens` "
            f"{_range(L.BATCHED_TOKENS_RANGE)} is usual "
            "for a 7B model on an A10 (30-50 ms per step). Too small and continuous batching "
            "has nothing to batch; too large and every step gets slow. If prompt throughput "
            "drops as batches grow, it is past the point of diminishing returns [2.3].\n"
            + BALANCING
            + "\n\n"
            + FLAGS_WHERE
        ),
    )


def _ttft_high_gpu_idle(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"a worker's TTFT P95 over {t.pack.window} is above "
            f"{secs(t.ttft.warmup_p95_seconds)} while its own GPUs (those the agent "
            f"attributes to it) average below {pct(t.gpu_utilization.idle_below)} "
            f"utilization over {t.pack.window}, for {c.hold} (not within "
            f"{dur(t.cold_start.within)} of a start: that is InferenceWorkerColdStart)"
        ),
        meaning=(
            "TTFT (time to first token) is how long a user waits before the answer starts. "
            "Slow first tokens on a GPU that is not busy point at setup work, not load: the "
            f"guide's loop {L.BY_ID['warmup'].loop} [6.2] reads it as a missing warm-up, meaning "
            "CUDA kernels, the "
            "KV cache and shared prompt prefixes are prepared on real users' requests instead "
            "of beforehand."
        ),
        impact=(
            "Users wait seconds for the answer to start; past 2 s a conversation feels broken "
            "[1.2]. Throughput is not the problem, so adding GPUs will not help."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'TTFT P50 / P95 / P99', 'TTFT distribution')}: are a few requests very slow (warm-up, long prompts) or "
            "all of them?\n"
            f"2. {c.panel('worker', 'Prefix-cache hit ratio')}: near zero with a shared "
            "system prompt means prefix caching is off or not hitting.\n"
            f"3. {c.panel('worker', 'Restarts')}: frequent restarts or scale-ups keep the "
            "fleet cold.\n"
            "4. Paste:"
            + promql(
                c.r(c.n.quantile("worker", "ttft", "p95")),
                c.r(c.n.worker_util),
                f"inferwatch_prefix_cache_hit_ratio{c.sel}",
                f"inferwatch_worker_info{c.sel}",
            )
        ),
        mitigation=(
            "- Warm up before taking traffic: after the server answers `/health`, send one "
            "or two small completion requests (`max_tokens: 1`) and only then add the worker "
            "to the load balancer (a readiness probe that runs the warm-up does both). The "
            f"guide measured {L.COLD_FIRST_CALL_SECONDS:g} s for the first unwarmed call, 2.3 s "
            f"of it CUDA compilation, against about {L.WARM_CALL_SECONDS * 1000:.0f} ms once "
            "warm [5.2].\n"
            "- Turn on `--enable-prefix-caching` for services with a long fixed system "
            "prompt: the prefix is computed once and later requests skip it; first tokens come "
            f"{_pct_range(L.PREFIX_CACHE_TTFT_GAIN)} sooner [6.2, 2.3].\n"
            "- Keep models resident: avoid scaling to zero or recycling workers that serve "
            "interactive traffic.\n\n" + FLAGS_WHERE
        ),
    )


def _ttft_slo(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"a worker's TTFT P99 over {t.pack.window} is above "
            f"{secs(t.ttft.p99_slo_seconds)} for {c.hold}"
        ),
        meaning=(
            "TTFT (time to first token) is how long a user waits before the answer starts "
            "streaming. One request in a hundred now waits more than "
            f"{secs(t.ttft.p99_slo_seconds)}. The guide puts the limit for a conversation at "
            "2 s [1.2]; interactive services such as code completion aim much lower (P99 under "
            "200 ms [2.1]). `ttft.p99_slo_seconds` in the thresholds holds your SLO."
        ),
        impact=(
            "Users see a stalled chat. Clients time out and retry, adding load: the guide "
            "warns this snowballs into an outage [1.2]."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'TTFT P50 / P95 / P99', 'Queue time P50 / P95 / P99')}"
            ": if queue time makes up most of TTFT, the worker is overloaded; if not, "
            "prompt processing (prefill) itself is slow.\n"
            f"2. {c.panel('worker', 'Queue vs running vs capacity')} and "
            f"{c.panel('gpu', 'GPU state')}: pressure or a deep queue means capacity; an idle "
            "GPU means warm-up (see InferenceTTFTHighGPUIdle).\n"
            "3. Paste:"
            + promql(
                c.r(c.n.quantile("worker", "ttft", "p99")),
                "histogram_quantile(0.99, sum by (le, worker) "
                f"(rate(inferwatch_queue_time_seconds_bucket{c.sel}[{t.pack.window}])))",
                f"inferwatch_queue_depth{c.sel}",
                c.of_worker(c.n.gpu_state + c.only("instance")),
            )
        ),
        mitigation=(
            "- Overloaded (deep queue, busy GPU): add replicas or rate-limit now; see "
            "InferenceQueueOverCapacity.\n"
            "- Long shared prompts: `--enable-prefix-caching`. With an 800-token system "
            "prompt the guide saw prefill go from 1.2 s to under 0.3 s [5.1].\n"
            "- Batching too aggressive: a very large `--max-num-batched-tokens` makes each "
            f"step long, and new requests wait for it; {_range(L.BATCHED_TOKENS_RANGE)} keeps a "
            "7B model on an A10 at "
            "30-50 ms per step [2.3].\n"
            "- Mixed traffic: give interactive requests a higher vLLM `priority` than batch "
            "jobs [4 FAQ], or move long-context requests to their own pool [5.3].\n"
            "- Model too slow for the card: INT4 quantization (AWQ/GPTQ) cut TTFT from 2.3 s "
            "to 0.9 s for a 7B model on an A10 [3.1]; tensor parallelism "
            "(`--tensor-parallel-size`) shortens prefill for large models [6 FAQ].\n\n"
            + FLAGS_WHERE
        ),
    )


def _tpot_slo(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"a worker's TPOT P99 over {t.pack.window} is above "
            f"{secs(t.tpot.p99_slo_seconds)} for {c.hold}"
        ),
        meaning=(
            "TPOT (time per output token) is the gap between streamed tokens once the answer "
            "has started. High TPOT means the decode steps are slow: the GPU is saturated, "
            "the batch is too big for it, or memory bandwidth is the limit [6.1]. The "
            f"{secs(t.tpot.p99_slo_seconds)} default is vLLM's upstream dashboard SLO, not a "
            "number from the guide."
        ),
        impact=(
            "Answers stream slowly (10 tokens a second is slower than people read). Long "
            "answers take much longer to finish, which keeps more requests in the batch and "
            "feeds the queue."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'TPOT P50 / P95 / P99')} and "
            f"{c.panel('worker', 'Queue vs running vs capacity')}: TPOT rising with the "
            "number of running requests means the batch is too large for the GPU.\n"
            f"2. {c.panel('gpu', 'Utilization vs SM, tensor and DRAM activity')}: DRAM "
            "activity near its limit means memory-bandwidth bound.\n"
            f"3. {c.panel('gpu', 'Clock-event reasons')}: a throttled GPU is slow for "
            "everyone (see InferenceGPUThermalThrottling).\n"
            "4. Paste:"
            + promql(
                c.r(c.n.quantile("worker", "tpot", "p99")),
                f"inferwatch_requests_running{c.sel}",
                c.of_worker(f"inferwatch_gpu_dram_active_ratio{c.only('instance')}"),
            )
        ),
        mitigation=(
            "- Lower `--max-num-seqs` or `--max-num-batched-tokens` so each step has less to "
            "do; this trades some throughput for faster streams [2.3, 4.1].\n"
            "- Add replicas if the whole model is busy.\n"
            "- Quantize the weights (AWQ/GPTQ INT4): less memory traffic per token; the guide "
            "saw decode throughput rise from 23 to 62 tokens/s on an A10 [3.1].\n"
            "- Large models: tensor parallelism over NVLink splits the per-token work "
            "[2.1, 6 FAQ].\n\n" + FLAGS_WHERE
        ),
    )


def _long_tail(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"a worker's TTFT P99 or its TPOT P99 over {t.pack.window} is at least "
            f"{num(t.latency.tail_ratio)} times its P50, for {c.hold} (end-to-end "
            "latency is not judged: it grows with the answer's length)"
        ),
        meaning=(
            "The slowest requests take many times longer than the typical one. The guide "
            f"singles out a P99 {num(t.latency.tail_ratio)} times the P50 or more as the long "
            "tail that averages hide [6.1]. The usual cause is a mix of short and very long "
            "requests on the same workers: round-robin balancing gives every worker a few "
            "long requests, and they slow down the short ones batched with them [5.3]."
        ),
        impact=(
            "Most users are fine, but a steady share waits far longer than the rest, often "
            "long enough for client timeouts and retries [1.2]."
        ),
        diagnosis=(
            "1. Open "
            + c.panel(
                "worker", "End-to-end latency P50 / P95 / P99", "End-to-end latency distribution"
            )
            + ": two humps mean two kinds of traffic.\n"
            f"2. {c.panel('overview', 'Queue depth vs max_num_seqs')}: is the tail on some "
            "workers only?\n"
            "3. Paste:"
            + promql(
                f"{c.r(c.n.quantile('worker', 'ttft', 'p99'))} "
                f"/ {c.r(c.n.quantile('worker', 'ttft', 'p50'))}",
                f"{c.r(c.n.quantile('worker', 'tpot', 'p99'))} "
                f"/ {c.r(c.n.quantile('worker', 'tpot', 'p50'))}",
                c.r(c.n.quantile("worker", "e2e_latency", "p99")),
            )
            + "   The TTFT and TPOT P99 tell whether the tail is waiting (TTFT) or generating "
            "(TPOT)."
        ),
        mitigation=(
            BALANCING + "\n- Give interactive requests a higher vLLM `priority` than batch "
            "work so the scheduler serves them first [4 FAQ].\n"
            "- Cap what one request can cost: `--max-model-len`, a `max_tokens` limit at the "
            "gateway, and a maximum input length check [4 FAQ].\n"
            "- Several smaller worker processes per GPU (2-3, each on its own port) instead "
            "of one large one also limit how many requests one long request can delay "
            "[5.3].\n\n" + FLAGS_WHERE
        ),
    )


def _load_imbalance(c: Ctx) -> Page:
    t = c.t
    lb = t.load_imbalance
    return Page(
        condition=(
            "a worker's utilization of its own GPUs (above "
            f"{pct(t.gpu_utilization.idle_below)}), or its "
            f"open requests (waiting plus running, at least {num(lb.min_open_requests)}), "
            f"averaged over {t.pack.window}, are more than {num(lb.load_ratio)} times the "
            "average of the other workers of the same model, while that model's own GPUs "
            f"average below {pct(t.gpu_utilization.idle_below)} over the last "
            f"{dur(lb.idle_window)} and its TTFT P99 is within "
            f"{secs(t.ttft.p99_slo_seconds)}, for {c.hold}"
        ),
        meaning=(
            "Requests are not spread across the workers of one model: one builds a queue "
            "while its peers and their GPUs sit mostly idle. This is the guide's loop "
            f"{L.BY_ID['imbalance'].loop} [6.2]: low utilization with normal latency usually means uneven routing (a random "
            "or round-robin balancer, sticky sessions), not too many GPUs."
        ),
        impact=(
            "Users routed to the busy worker wait; the fleet has the capacity but does not "
            "use it. Scaling in now would make it worse."
        ),
        diagnosis=(
            f"1. Open {c.panel('overview', 'Queue depth vs max_num_seqs', 'Requests per second')}"
            ": compare the workers of the model.\n"
            "2. Paste:"
            + promql(
                c.n.worker_util + c.only("model"),
                c.n.open_avg + c.only("model"),
                c.n.model_util + c.only("model"),
            )
            + "3. Check the balancer's configuration: algorithm, session affinity, weights, "
            "and whether all workers are in its pool."
        ),
        mitigation=(
            f"{cite(md(L.NO_SCALE_IN), L.guide('imbalance'))}\n\n"
            + BALANCING
            + "\n- Check that every worker passed its health check and is in "
            "the pool; a worker left out after a restart leaves its peers to carry its share.\n"
            f"- {cite(md(L.DATA_PARALLEL), '6.2')}\n"
            "- This is an inferwatch default, not a guide number: tune "
            "`load_imbalance.load_ratio` and `load_imbalance.min_open_requests` if it is noisy."
        ),
    )


PAGES: dict[str, Callable[[Ctx], Page]] = {
    an.QUEUE_OVER_CAPACITY: _queue_over_capacity,
    an.TTFT_HIGH_GPU_IDLE: _ttft_high_gpu_idle,
    an.TTFT_SLO_BREACH: _ttft_slo,
    an.TPOT_SLO_BREACH: _tpot_slo,
    an.LATENCY_LONG_TAIL: _long_tail,
    an.LOAD_IMBALANCE: _load_imbalance,
}
