"""Runbook pages of the memory alerts: VRAM pressure with a rising queue and KV-cache
preemptions, with the KV-cache remedies they share."""

from __future__ import annotations

from collections.abc import Callable

from inferwatch.pack import loops as L
from inferwatch.pack import names as an
from inferwatch.pack.rules.common import dur, num, pct, secs
from inferwatch.pack.runbooks.common import (
    FLAGS_WHERE,
    MAX_NUM_SEQS_ESTIMATE,
    Ctx,
    Page,
    cite,
    md,
    promql,
)

_FP8_ALREADY = ", ".join(f"`{d}`" for d in L.FP8_DTYPES)


#: the worker_info matcher of an FP8 KV cache (``L.is_fp8``: the dtype starts with fp8)
_FP8_MATCHER = 'kv_cache_dtype=~"fp8.*"'


def _kv_remedies(c: Ctx, *, pool_first: bool) -> str:
    """The KV-cache remedies of loop 3, facts from pack.loops.

    ``pool_first``: preemptions (a bigger KV pool first); else memory pressure with a
    rising queue (fewer sequences first, the guide's order [5.1]).
    """
    t = c.t
    worker = c.only("instance", "worker")
    oom = (
        "- **Out-of-memory risk first.** Before you touch the flag, read the card's used "
        "ratio and the worker's restarts:"
        + promql(
            "inferwatch_gpu_memory_used_ratio" + c.only("instance"),
            f"changes(inferwatch_worker_start_time_seconds{worker}[1h])",
            indent=2,
        )
        + f"  The card at or above {L.OOM_RISK_USED_RATIO:.0%} used with prefix caching "
        "on (the **Launch flags** table), or a restart whose reason says out of memory "
        "(`kubectl describe pod` shows `OOMKilled`, the log `CUDA out of memory`), is the "
        f"guide's OOM case. {cite(md(L.oom_headroom()), '2.3', '6.2')}\n"
    )
    pool = (
        f"- {cite(md(L.raise_kv_pool()), '4.2', '6.2')} `--gpu-memory-utilization` is the share of the card vLLM "
        "reserves at start, and the KV cache gets what is left after the weights, so a lower "
        "value means a smaller KV cache and more preemptions. `nvidia-smi` shows the room "
        "left on the card; lower the flag (to "
        f"{L.GPU_MEMORY_UTILIZATION_HEADROOM:g} [2.3, 6.2]) only when the process itself dies "
        "of out-of-memory (InferenceWorkerDown) or the card is at the OOM risk above."
    )
    seqs = (
        f"- {cite(md(L.fewer_seqs()), '5.1')} Compare the running batch with the limit first:"
        + promql(
            f"inferwatch_requests_running{worker}",
            f"inferwatch_max_num_seqs{worker}",
            indent=2,
        )
        + f"  With VRAM above {pct(t.vram.scale_above)} and the batch at the limit, lower "
        "`--max-num-seqs` before you consider turning prefix caching off [5.1]. "
        + MAX_NUM_SEQS_ESTIMATE
    )
    rest = (
        f"- Turn on `--enable-prefix-caching`. {cite(md(L.PREFIX_CACHING), '6.2')}\n"
        f"- {cite(md(L.FP8_KV), '6.2')} Skip this where the worker's KV cache is FP8 already: its "
        f"`kv_cache_dtype` (the **Launch flags** table) is one of {_FP8_ALREADY}. This query "
        "returns the worker only when it is:"
        + promql(
            "inferwatch_worker_info" + c.only("instance", "worker", extra=(_FP8_MATCHER,)),
            indent=2,
        )
        + "- Bound the longest request: set `--max-model-len` to what the product needs and "
        "reject over-long inputs at the gateway; one unexpected 10K-token prompt can take the "
        "KV cache a whole batch needed [4 FAQ]."
    )
    first, second = (pool, seqs) if pool_first else (seqs, pool)
    return f"{oom}{first}\n{second}\n{rest}"


def _vram_pressure(c: Ctx) -> Page:
    v = c.t.vram
    return Page(
        condition=(
            f"a worker's memory pressure on one of its own GPUs (its KV-cache usage where "
            "the engine exports it, else the GPU's memory used ratio, averaged over "
            f"{c.t.pack.window}) is above {pct(v.scale_above)} while that worker's queue "
            f"rises by more than {num(c.t.queue.rising_min_per_minute)} request a minute "
            f"(its slope over {dur(c.t.queue.rising_window)}), for {c.hold}"
        ),
        meaning=(
            f"The worker's KV cache is above {pct(v.scale_above)} full (for an engine that "
            "does not export its KV-cache usage: the memory of its GPU) and its requests "
            "keep piling up. The label `pressure_from` says which was read. vLLM "
            "keeps each running request's attention state (the KV cache) in GPU memory; when "
            "it runs out, new requests wait and running ones get preempted. The guide's rule "
            f"[4.2]: memory above {pct(v.scale_above)} with a rising queue means scale out or "
            f"rate-limit. Memory above {pct(v.squeeze_above)} on its own is normal for vLLM, "
            "which reserves memory up front: with a TTFT P99 under "
            f"{secs(v.squeeze_p99_ok_seconds)} it is a healthy squeeze that needs nothing, "
            "and the dashboards show it as the **squeeze** state, not an alert."
        ),
        impact=(
            "Latency is about to climb for every user of this worker, and the worker is close "
            "to out-of-memory restarts. This pages because it comes before the latency SLO "
            "breach."
        ),
        diagnosis=(
            f"1. Open {c.panel('gpu', 'VRAM level', 'GPU state')}: a "
            "GPU in state **pressure** (3) is what fired.\n"
            f"2. Open {c.panel('worker', 'Queue trend', 'KV-cache usage', 'Preemptions')} "
            "for the workers on that host.\n"
            "3. Paste:"
            + promql(
                c.r(c.n.worker_gpu_pressure),
                c.n.queue_deriv + c.only("instance", "worker") + " * 60",
                c.n.rate("preemptions") + c.only("instance", "worker"),
                c.r(c.n.gpu_vram).replace(c.sel, c.only("instance", "gpu")),
            )
            + "4. Look for unusually long prompts (a 10K-token input can take what a batch "
            "needed) in the gateway logs [4 FAQ]."
        ),
        mitigation=(
            "Right now:\n\n"
            f"- {md(L.SCALE_OUT)} {cite(md(L.RATE_LIMIT), '4.2')}\n\n"
            "Then, per worker:\n\n" + _kv_remedies(c, pool_first=False) + "\n\n" + FLAGS_WHERE
        ),
    )


def _kv_preemptions(c: Ctx) -> Page:
    t = c.t
    return Page(
        condition=(
            f"a worker preempts requests (rate over {t.pack.window} above "
            f"{num(t.kv_cache.preemption_rate_above)} per second) for {c.hold}"
        ),
        meaning=(
            "vLLM ran out of KV cache (the GPU memory that holds each running request's "
            "attention state) and evicted running requests to make room; they are recomputed "
            "later. An occasional preemption is harmless; sustained ones mean the worker "
            "admits more or longer sequences than its memory holds. The KV cache, not the "
            "weights, is what runs out in LLM serving [4.2]."
        ),
        impact=(
            "Preempted requests redo their work: GPU time is wasted, TPOT and end-to-end "
            "latency rise, and throughput falls while the GPU looks busy."
        ),
        diagnosis=(
            f"1. Open {c.panel('worker', 'Preemptions', 'KV-cache usage')}: usage near "
            "100% when preemptions happen confirms it.\n"
            f"2. {c.panel('worker', 'Launch flags')}: `max_num_seqs`, `max_model_len`, "
            "`gpu_memory_utilization`, `prefix_caching`.\n"
            "3. Paste:"
            + promql(
                c.r(c.n.rate("preemptions")),
                f"inferwatch_kv_cache_usage_ratio{c.sel}",
                f"inferwatch_requests_running{c.sel}",
            )
        ),
        mitigation=(
            _kv_remedies(c, pool_first=True)
            + "\n- Or give the model more memory: a larger GPU, or tensor parallelism across "
            "two [2.1].\n\n" + FLAGS_WHERE
        ),
    )


PAGES: dict[str, Callable[[Ctx], Page]] = {
    an.VRAM_PRESSURE_QUEUE_RISING: _vram_pressure,
    an.KV_CACHE_PREEMPTIONS: _kv_preemptions,
}
