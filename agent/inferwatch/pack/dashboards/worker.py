"""The worker dashboard (``inference-worker``): one worker or model in detail, one
function per row."""

from __future__ import annotations

from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.dashboards import common as c
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.common import Dashboard
from inferwatch.pack.dashboards.panels import Query, Section, worker_sel
from inferwatch.pack.dashboards.warmup_row import warmup_section
from inferwatch.pack.names import E2E, TPOT, TTFT, names
from inferwatch.pack.thresholds import Thresholds

#: the worker dashboard's panel of the measuring proxy's TTFT next to the rules' one
PROXY_GAP_TITLE = "TTFT P99: engine and clients"


def proxy_gap_panel(t: Thresholds) -> Any:
    """The TTFT P99 the rules read (the engine's histogram, else the measuring proxy's)
    and the one the proxy's clients got: the gap is queueing and network in front of the
    engine (docs/proxy.md)."""
    proxied = c.worker_buckets(t, contract.PROXY_TTFT_SECONDS.name, "worker")
    return p.timeseries(
        PROXY_GAP_TITLE,
        "TTFT P99 per worker as the rules read it (the engine's histogram; the measuring "
        "proxy's for an engine without one) and as the clients of the agent's measuring "
        "proxy got it (workers[].proxy, docs/proxy.md). The gap is the time in front of "
        "the engine: its HTTP queue, the network, a load balancer. Empty for workers "
        f"without the proxy. The dashed line is the P99 SLO, {c.secs(t.ttft.p99_slo_seconds)}.",
        [
            Query(
                f"max by (worker) ({names(t).quantile('worker', 'ttft', 'p99')}{worker_sel()})",
                "{{worker}} rules",
            ),
            Query(f"histogram_quantile(0.99, {proxied})", "{{worker}} clients (proxy)"),
        ],
        unit="s",
        min_value=0,
        thresholds=c.slo_steps(t.ttft.p99_slo_seconds),
        threshold_style="dashed",
        fill=0,
    )


def bucket_heatmap(t: Thresholds, title: str, metric: str, description: str, unit: str) -> Any:
    """A heatmap of a histogram's buckets: requests per second in each (vLLM's own
    dashboard has the token-length ones), the agent's or the engine's own buckets."""
    return p.heatmap(
        title,
        description,
        [Query(c.worker_buckets(t, metric), "{{le}}", fmt="heatmap")],
        unit=unit,
    )


#: (legend word, histogram) of the per-request phases, in the order a request goes through
PHASES = (
    ("prefill", contract.PREFILL_TIME_SECONDS.name),
    ("decode", contract.DECODE_TIME_SECONDS.name),
    ("queue", contract.QUEUE_TIME_SECONDS.name),
)


def phase_time_panel(t: Thresholds) -> Any:
    return p.timeseries(
        "Prefill, decode and queue time P50 / P95",
        "Where a request's time goes, per worker: waiting in the queue, prefill (prompt "
        "processing up to the first token) and decode (first to last token), P50 and P95 "
        "from the engine's per-request histograms. Prefill growing with decode flat points "
        "at long prompts; decode growing at long generations or a full batch.",
        [
            Query(
                f"histogram_quantile({q}, {c.worker_buckets(t, metric, 'worker')})",
                f"{{{{worker}}}} {word} P{round(q * 100)}",
            )
            for word, metric in PHASES
            for q in (0.5, 0.95)
        ],
        unit="s",
        min_value=0,
        fill=0,
    )


def lora_panel() -> Any:
    return p.table(
        "LoRA adapters",
        "LoRA adapters with requests running or waiting now, per worker, and how many "
        "adapters the worker holds at once (--max-loras). An adapter that stays waiting "
        "while the worker is at its limit waits for a slot.",
        [
            Query(
                f"max by (worker, adapter, state) ({contract.LORA_ADAPTER_ACTIVE}{worker_sel()})",
                "",
                instant=True,
                fmt="table",
            ),
            Query(
                f"max by (worker) ({contract.LORA_MAX_ADAPTERS}{worker_sel()})",
                "",
                instant=True,
                fmt="table",
            ),
        ],
        unit="none",
        exclude=("Value #A",),
        order=("worker", "adapter", "state", "Value #B"),
        rename={"Value #B": "max adapters"},
    )


def now_section(t: Thresholds) -> Section:
    return Section(
        "Worker now",
        p.line(
            p.flag_stat(
                "Engine reachable",
                "1 when the agent's last scrape of the worker's /metrics succeeded and "
                "carried engine data (the lowest of the selected workers).",
                [Query(f"min({contract.TARGET_UP}{c.worker_only()})")],
                off=("down", "red"),
                on=("up", "green"),
            ),
            c.total_stat(
                "Requests running",
                "Requests in the running batch now.",
                "sum",
                contract.REQUESTS_RUNNING,
                worker_sel(),
                "short",
            ),
            c.total_stat(
                "Requests waiting",
                "Requests queued for a batch slot now.",
                "sum",
                contract.QUEUE_DEPTH,
                worker_sel(),
                "short",
            ),
            c.total_stat(
                "Fullest KV cache",
                "Share of the KV-cache blocks in use (the fullest selected worker).",
                "max",
                contract.KV_CACHE_USAGE_RATIO,
                worker_sel(),
                "percentunit",
            ),
            p.stat(
                "TTFT P99",
                f"Worst worker's TTFT P99 over {t.pack.window} (recording rule); red above "
                f"the SLO of {c.secs(t.ttft.p99_slo_seconds)}.",
                [Query(f"max({names(t).quantile('worker', 'ttft', 'p99')}{worker_sel()})")],
                unit="s",
                thresholds=c.slo_steps(t.ttft.p99_slo_seconds),
            ),
            p.stat(
                "Uptime",
                "Time since the worker process started (the youngest selected worker). "
                "A drop is a restart.",
                [Query(f"min(time() - {contract.WORKER_START_TIME_SECONDS}{c.worker_only()})")],
                unit="s",
                graph=False,
            ),
            h=4,
        ),
    )


def latency_section(t: Thresholds) -> Section:
    return Section(
        "Latency",
        c.slo_latency_line(t, "worker"),
        p.line(
            c.latency_panel(t, "End-to-end latency", E2E, None, "worker"),
            c.latency_panel(t, "Queue time", contract.QUEUE_TIME_SECONDS.name, None, "worker"),
            h=8,
        ),
        p.line(proxy_gap_panel(t), h=8),
        p.line(
            *(
                bucket_heatmap(
                    t,
                    f"{name} distribution",
                    metric,
                    "Requests per second in each "
                    f"{name if name.isupper() else name.lower()} bucket: a second "
                    "band of slow requests shows a long tail the quantiles average away.",
                    "s",
                )
                for name, metric in (("TTFT", TTFT), ("TPOT", TPOT), ("End-to-end latency", E2E))
            ),
            h=8,
        ),
    )


def batch_section(t: Thresholds) -> Section:
    return Section(
        "Batch, queue and KV cache",
        p.line(
            p.timeseries(
                "Queue vs running vs capacity",
                "Requests waiting, requests in the running batch, and the batch capacity "
                "(--max-num-seqs). Running pinned at capacity with a queue means the "
                "batch is full.",
                [
                    Query(
                        f"sum by (worker) ({contract.QUEUE_DEPTH}{worker_sel()})",
                        "{{worker}} waiting",
                    ),
                    Query(
                        f"sum by (worker) ({contract.REQUESTS_RUNNING}{worker_sel()})",
                        "{{worker}} running",
                    ),
                    Query(
                        f"max by (worker) ({contract.MAX_NUM_SEQS}{c.worker_only()})",
                        "{{worker}} max_num_seqs",
                    ),
                ],
                unit="short",
                min_value=0,
            ),
            p.timeseries(
                "Queue trend",
                "Least-squares slope of the queue depth over the agent's stats window, in "
                "requests per second: above zero the queue is growing.",
                [Query(f"{contract.QUEUE_DEPTH_SLOPE}{worker_sel()}", "{{worker}}")],
                unit="short",
                axis_label="requests/s",
            ),
            p.state_timeline(
                "Queue over capacity",
                "Recording rule worker:inferwatch_queue_over_capacity:bool: waiting requests "
                f"above max_num_seqs. {t.queue.over_capacity_samples} samples in a row fire "
                "InferenceQueueOverCapacity.",
                [
                    Query(
                        f"worker:inferwatch_queue_over_capacity:bool{worker_sel()}",
                        "{{worker}}",
                    )
                ],
                mappings=p.value_mappings(
                    {0: ("within capacity", "green"), 1: ("over capacity", "red")}
                ),
            ),
            h=8,
        ),
        p.line(
            c.ratio_chart(
                "KV-cache usage",
                "Share of the KV-cache blocks in use. Near 100% the engine preempts "
                "requests; see the preemptions panel.",
                [Query(f"{contract.KV_CACHE_USAGE_RATIO}{worker_sel()}", "{{worker}}")],
            ),
            c.ratio_chart(
                "Prefix-cache hit ratio",
                "Share of prompt tokens served from the prefix cache over the stats window. "
                "Long shared system prompts should hit often (field guide 6.2: 30-60% lower "
                "TTFT).",
                [Query(f"{contract.PREFIX_CACHE_HIT_RATIO}{worker_sel()}", "{{worker}}")],
            ),
            p.timeseries(
                "Preemptions",
                "Requests preempted per second to free KV-cache space. Sustained preemption "
                "means the KV cache is too small for the batch.",
                [c.rate_query(S.PREEMPTION_RATE, "worker")],
                unit="short",
                axis_label="preemptions/s",
                min_value=0,
            ),
            h=8,
        ),
    )


def shapes_section(t: Thresholds) -> Section:
    return Section(
        "Request shapes and phases",
        p.line(
            bucket_heatmap(
                t,
                "Prompt length distribution",
                contract.PROMPT_LENGTH_TOKENS.name,
                "Prompt tokens of each request: requests per second in each bucket. A "
                "band of long prompts is the traffic a separate long-context pool "
                "serves (field guide 5.3; `inferwatch advise` prints its share).",
                "short",
            ),
            bucket_heatmap(
                t,
                "Generation length distribution",
                contract.GENERATION_LENGTH_TOKENS.name,
                "Tokens generated per finished request: requests per second in each "
                "bucket. Long generations hold batch slots and KV cache for longer.",
                "short",
            ),
            phase_time_panel(t),
            h=8,
        ),
        p.line(lora_panel(), h=6),
    )


def requests_section(t: Thresholds) -> Section:
    by_reason = p.timeseries(
        "Finished requests by reason",
        "Requests finished per second by reason: stop (end of sequence), length "
        "(token limit), abort (client went away), error.",
        [c.rate_query(S.REQUEST_RATE, "reason")],
        unit="reqps",
        min_value=0,
        stack=True,
        fill=30,
    )
    return Section("Requests", c.traffic_line(t, "worker", by_reason))


def process_section(t: Thresholds) -> Section:
    return Section(
        "Process",
        p.line(
            c.info_table(
                "Launch flags",
                "The worker's engine, model, version and the launch flags that matter, read "
                f"from its command line ({contract.WORKER_INFO}).",
                contract.WORKER_INFO,
                c.worker_only(),
                (
                    "worker",
                    "instance",
                    "engine",
                    "model",
                    "version",
                    "pid",
                    "max_num_seqs",
                    "max_model_len",
                    "max_num_batched_tokens",
                    "gpu_memory_utilization",
                    "prefix_caching",
                ),
            ),
            h=6,
        ),
        p.line(
            p.timeseries(
                "Process CPU",
                "CPU time of the worker's process tree per second (100% = one core).",
                [c.rate_query(S.WORKER_CPU, "worker", selector=c.worker_only())],
                unit="percentunit",
                min_value=0,
            ),
            p.timeseries(
                "Process memory",
                "Resident memory (RSS) of the worker's process tree.",
                [Query(f"{contract.WORKER_RESIDENT_MEMORY_BYTES}{c.worker_only()}", "{{worker}}")],
                unit="bytes",
                min_value=0,
            ),
            p.event_bars(
                "Restarts",
                "Worker process restarts: changes of its start time per interval.",
                [
                    Query(
                        S.RESTARTS.render(
                            selector=c.worker_only(), window="$__interval", by="worker", agg="sum"
                        ),
                        "{{worker}}",
                    )
                ],
            ),
            p.timeseries(
                "Engine scrape errors",
                "Failed scrapes of the worker's /metrics per second, by reason (connect, "
                "timeout, http_status, too_large, parse, no_engine_metrics).",
                [c.rate_query(S.SCRAPE_ERROR_RATE, "worker, reason", selector=c.worker_only())],
                unit="short",
                axis_label="errors/s",
                min_value=0,
            ),
            h=8,
        ),
    )


DASHBOARD = Dashboard(
    key="worker",
    title="Inference worker",
    description="One inference worker or model in detail: latency quantiles and distributions, "
    "batch and queue, KV cache, prompt and generation lengths, prefill and decode time, "
    "LoRA adapters, finish reasons, launch flags, the worker process and the agent's "
    "warm-up gate.",
    rows=(
        now_section,
        latency_section,
        batch_section,
        shapes_section,
        requests_section,
        process_section,
        warmup_section,
    ),
)
