"""The recording rules of ``inferwatch.rules``, one function per family, each rule after
the rules it reads (one group evaluates them in order); and ``record_names``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.fmt import num
from inferwatch.pack.names import (
    CLUSTER,
    GPU,
    HISTOGRAMS,
    MODEL,
    QUANTILES,
    RECORDED_HISTOGRAMS,
    WORKER,
    WORKER_GPU,
    WORKER_KEY,
    names,
)
from inferwatch.pack.rules import autoscale, cost, own_histograms, slo
from inferwatch.pack.rules.common import record, rising
from inferwatch.pack.thresholds import Thresholds


def record_names(t: Thresholds) -> dict[str, str]:
    """Documented name (written with the default ``5m``) -> the name generated for ``t``."""
    documented = replace(
        t, pack=replace(t.pack, rate_window=300.0), queue=replace(t.queue, rising_window=600.0)
    )
    return {
        doc["record"]: rule["record"]
        for doc, rule in zip(_all_records(documented), _all_records(t), strict=True)
    }


def _all_records(t: Thresholds) -> list[dict[str, Any]]:
    return (
        recording_rules(t)
        + cost.recording_rules(t)
        + slo.recording_rules(t)
        + autoscale.recording_rules(t)
    )


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    """All recording rules, each after the rules it reads (one group evaluates them in order)."""
    return [
        *_latency_records(t),
        *_traffic_records(t),
        *_worker_models_records(t),
        *_queue_records(t),
        *_gpu_utilization_records(t),
        *_attribution_records(t),
        *_gpu_state_records(t),
    ]


def _latency_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    rules: list[dict[str, Any]] = []
    # Latency quantiles from the engines' histograms: aggregatable across ranks and workers.
    # Each reads one per-worker bucket rate: the agent's copy, else the engine's own
    # series that Prometheus scrapes directly (export_histograms: false; pack.rules.own_histograms).
    # The recorded rate holds only the workers without the agent's copy: recording the
    # copy too would store every bucket of every worker twice.
    for metric in RECORDED_HISTOGRAMS:
        rules.append(record(n.histogram_rate(metric), own_histograms.engine_only_rate(t, metric)))

    def per_worker(short: str) -> str:
        metric = f"inferwatch_{short}_seconds"
        return own_histograms.agent_or_recorded(t, metric, n.bucket_rate(short))

    for short in HISTOGRAMS:
        for q, label in QUANTILES:
            rules.append(
                record(n.quantile("worker", short, label), S.quantile(q, per_worker(short)))
            )
    for level, by in (("model", f"le, {MODEL}"), ("cluster", f"le, {CLUSTER}")):
        for short in HISTOGRAMS:
            rules.append(
                record(
                    n.quantile(level, short, "p99"),
                    S.quantile(0.99, f"sum by ({by}) {per_worker(short)}"),
                )
            )
    return rules


def _traffic_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    s = t.pack.selector
    w = t.pack.window
    rules: list[dict[str, Any]] = []
    # Throughput and errors.
    for name, signal in (
        ("requests_finished", S.REQUEST_RATE),
        ("requests_rejected", S.REJECT_RATE),
        ("prompt_tokens", S.PROMPT_TOKEN_RATE),
        ("generation_tokens", S.GENERATION_TOKEN_RATE),
        ("preemptions", S.PREEMPTION_RATE),
    ):
        rules.append(record(n.rate(name), signal.render(selector=s(), window=w, by=WORKER)))
    finished = n.rate("requests_finished")
    rejected = n.rate("requests_rejected")
    errors = S.ERROR_RATE.render(selector=s(), window=w, by=WORKER)
    # A worker that reports finished requests but no "error" reason (or no rejection
    # counter) has zero of them; a worker that reports neither gets no ratio at all.
    rules.append(
        record(
            n.error_ratio,
            "(\n"
            f"    (\n"
            f"      {errors}\n"
            f"      or 0 * {finished}\n"
            f"      or 0 * {rejected}\n"
            f"    )\n"
            f"  + ({rejected} or 0 * {finished})\n"
            ")\n"
            "/\n"
            "(\n"
            f"    ({finished} or 0 * {rejected})\n"
            f"  + ({rejected} or 0 * {finished})\n"
            ")",
        )
    )
    return rules


def _worker_models_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    s = t.pack.selector
    return [
        # The (worker, model, engine) combinations the engines report: the "many" side that
        # gives a per-worker value (labels job, instance, worker) its model and engine. A
        # worker that serves two models gets the value under both; no join here can become
        # many-to-many (an evaluation error). Engine series exist while the worker is up.
        record(
            n.worker_labels,
            f"group by ({WORKER}) (\n"
            f"  {contract.QUEUE_DEPTH}{s()} or {contract.REQUESTS_RUNNING}{s()}\n"
            f")",
        ),
    ]


def _queue_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    s = t.pack.selector
    w = t.pack.window
    return [
        # Queue: what the worker can batch now, over capacity, smoothed depth and load, slope.
        # Capacity is max_num_seqs, or the running batch once the KV cache is full: an engine
        # whose cache holds fewer sequences than max_num_seqs cannot batch more (a KV-limited
        # overload), and an engine whose max_num_seqs is unknown still has this bound.
        record(
            n.batch_capacity,
            S.BATCH_CAPACITY.render(
                selector=s(), by=WORKER, key=WORKER_KEY, full_at=num(t.vram.scale_above)
            ),
        ),
        record(
            n.queue_over_capacity,
            f"{S.QUEUE.render(selector=s(), by=WORKER)}\n> bool\n{n.batch_capacity}",
        ),
        record(n.queue_avg, S.QUEUE_MEAN.render(selector=s(), window=w, by=WORKER)),
        record(n.running_avg, S.RUNNING_MEAN.render(selector=s(), window=w, by=WORKER)),
        record(n.open_avg, f"{n.queue_avg} + {n.running_avg}"),
        record(
            n.queue_deriv,
            S.QUEUE_SLOPE.render(selector=s(), window=n.rising_window, by=WORKER),
        ),
    ]


def _gpu_utilization_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    s = t.pack.selector
    w = t.pack.window
    return [
        # GPU utilization, smoothed per GPU. A MIG device has no NVML utilization: its GPM
        # SM activity (Hopper and newer) stands in for it.
        record(n.gpu_util, S.gpu_utilization(selector=s(), window=w, by=GPU)),
        record(n.gpu_vram, S.GPU_MEMORY.render(selector=s(), by=GPU)),
    ]


def _attribution_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    s = t.pack.selector
    w = t.pack.window
    return [
        # Which worker runs on which GPU (the agent's attribution, MIG labels dropped), and
        # everything joined through it: the per-worker view of its own GPUs, the per-model
        # view of the model's own GPUs, memory pressure per GPU and worker. Memory pressure
        # is averaged over the window: a KV-limited engine's usage swings between 85 and
        # 99 % as it preempts and refills, and the page must not flap with it.
        record(n.worker_gpu, f"max by ({WORKER_GPU}) ({contract.WORKER_GPU_INFO}{s()})"),
        record(
            n.worker_gpus,
            f"{n.worker_labels}\n"
            f"* on ({WORKER_KEY}) group_left ()\n"
            f"count by ({WORKER_KEY}) ({n.worker_gpu})",
        ),
        record(
            n.worker_util_sum,
            f"{n.worker_labels}\n"
            f"* on ({WORKER_KEY}) group_left ()\n"
            f"sum by ({WORKER_KEY}) (\n"
            f"    {n.gpu_util}\n"
            f"  * on ({GPU}) group_right ()\n"
            f"    {n.worker_gpu}\n"
            f")",
        ),
        record(n.worker_util, f"{n.worker_util_sum} / {n.worker_gpus}"),
        # Per model: every GPU of the model's workers counts once per worker (a tensor-
        # parallel worker's GPUs each count; a GPU shared by two models counts for both).
        record(
            n.model_util,
            f"sum by ({MODEL}) ({n.worker_util_sum})\n/\nsum by ({MODEL}) ({n.worker_gpus})",
        ),
        record(
            n.worker_gpu_pressure,
            f"label_replace(\n"
            f"    {S.KV_USAGE_MEAN.render(selector=s(), window=w, by=WORKER_KEY)}\n"
            f"  * on ({WORKER_KEY}) group_right ()\n"
            f"    {n.worker_gpu},\n"
            f'  "pressure_from", "kv_cache", "", ""\n'
            f")\n"
            f"or on ({WORKER_GPU})\n"
            f"label_replace(\n"
            f"    {S.GPU_MEMORY_MEAN.render(selector=s(), window=w, by=GPU)}\n"
            f"  * on ({GPU}) group_right ()\n"
            f"    {n.worker_gpu},\n"
            f'  "pressure_from", "gpu_memory", "", ""\n'
            f")",
        ),
        record(
            n.gpu_pressure,
            f"max by ({GPU}) ({n.worker_gpu_pressure})\nor\n{n.gpu_vram}",
        ),
        record(n.cluster_util, S.GPU_UTILIZATION.render(selector=s(), by=CLUSTER, agg="avg")),
        record(n.cluster_vram, S.GPU_MEMORY.render(selector=s(), by=CLUSTER)),
    ]


def _gpu_state_records(t: Thresholds) -> list[dict[str, Any]]:
    n = names(t)
    v = t.vram
    pressure = n.gpu_pressure
    # GPU state, first match wins: 3 pressure, 0 idle, 2 squeeze, 1 healthy. Pressure
    # pairs a GPU with a worker on it: that worker's queue rising while the pressure is
    # above scale_above, or its TTFT P99 at or above the squeeze's latency bound while
    # the pressure is above squeeze_above [4.2].
    return [
        record(
            n.gpu_state,
            f"(\n"
            f"    3 + 0 * {pressure}\n"
            f"  and on ({GPU})\n"
            f"    (\n"
            f"        {n.worker_gpu_pressure} > {num(v.scale_above)}\n"
            f"      and on ({WORKER_KEY}) {rising(t)}\n"
            f"    or\n"
            f"        {n.worker_gpu_pressure} > {num(v.squeeze_above)}\n"
            f"      and on ({WORKER_KEY})\n"
            f"        {n.quantile('worker', 'ttft', 'p99')} >= {num(v.squeeze_p99_ok_seconds)}\n"
            f"    )\n"
            f")\n"
            f"or\n"
            f"(0 * {pressure} and on ({GPU}) {n.gpu_util} < {num(t.gpu_utilization.idle_below)})\n"
            f"or\n"
            f"(2 + 0 * {pressure} and {pressure} > {num(v.squeeze_above)})\n"
            f"or\n"
            f"(1 + 0 * {pressure})",
        ),
    ]
