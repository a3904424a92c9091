"""The four dashboards' panels and queries, built with grafanalib.

Imported only when dashboards are generated (grafanalib is slow to import);
everything else goes through :mod:`inferwatch.pack.dashboards`.

Thresholds drawn on panels (utilization bands, VRAM lines, latency SLOs, the
error-ratio line) and recording-rule names all come from ``Thresholds``.
Every query filters on the dashboard variables: ``job`` and ``instance`` on
every selector, ``gpu`` on GPU series, ``model`` and ``worker`` on engine series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grafanalib import core as g

from inferwatch.pack import panels as p
from inferwatch.pack import slo_dashboard
from inferwatch.pack.cost_panels import cost_section
from inferwatch.pack.names import RECORDED_HISTOGRAMS, WORKER, WORKER_KEY, names
from inferwatch.pack.panels import Cell, Query, Section, Step, gpu_sel, host_sel, steps, worker_sel
from inferwatch.pack.thresholds import Thresholds

#: Tag shared by the four dashboards; the dashboard links list every dashboard with it.
TAG = "inferwatch"


def _worker_only(extra: str = "") -> str:
    """Selector for series of a worker that carry no ``model`` label (scrape health,
    process metrics, capacity), or carry it only when the engine told it."""
    return host_sel('worker=~"$worker"' + (", " + extra if extra else ""))


def _gpu_label(legend: str = "") -> str:
    return "{{instance}} GPU {{gpu}}" + (f" {legend}" if legend else "")


def _pct(value: float) -> str:
    return f"{value * 100:g}%"


def _secs(value: float) -> str:
    return f"{value:g} s"


# --- threshold steps from Thresholds -------------------------------------------


def utilization_steps(t: Thresholds) -> list[Step]:
    """Waste (blue), below the healthy band (yellow), healthy (green), scale review (red)."""
    gu = t.gpu_utilization
    low, high = gu.healthy_band
    return steps(
        "blue",
        (gu.waste_below, "yellow"),
        (low, "green"),
        (high, "orange"),
        (gu.scale_review_above, "red"),
    )


def vram_steps(t: Thresholds) -> list[Step]:
    """Below the squeeze line (green), healthy squeeze (yellow), scale-out line (red)."""
    return steps("green", (t.vram.squeeze_above, "yellow"), (t.vram.scale_above, "red"))


def slo_steps(slo_seconds: float) -> list[Step]:
    return steps("green", (slo_seconds, "red"))


def _util_text(t: Thresholds) -> str:
    gu = t.gpu_utilization
    low, high = gu.healthy_band
    return (
        f"Bands: below {_pct(gu.waste_below)} is waste, {_pct(low)}-{_pct(high)} is the "
        f"healthy band, above {_pct(gu.scale_review_above)} calls for a scale-out review "
        "(field guide 6.1)."
    )


def _vram_text(t: Thresholds) -> str:
    return (
        f"Lines: above {_pct(t.vram.squeeze_above)} with a P99 under "
        f"{_secs(t.vram.squeeze_p99_ok_seconds)} is a healthy squeeze; above "
        f"{_pct(t.vram.scale_above)} with a rising queue, scale out or rate-limit "
        "(field guide 4.2)."
    )


# --- reusable panels -------------------------------------------------------------


def worker_buckets(t: Thresholds, metric: str, by: str = "") -> str:
    """Per-second bucket rates of the histogram ``metric`` by ``by`` and ``le``, from the
    agent's buckets; a worker without them (the engine's own histograms stored instead,
    ``export_histograms: false``) counts through the recorded per-worker bucket rate,
    which reads the engine's series."""
    by_le = f"{by}, le" if by else "le"
    agent = f"rate({metric}_bucket{worker_sel()}[$__rate_interval])"
    if metric not in RECORDED_HISTOGRAMS:
        return f"sum by ({by_le}) ({agent})"
    per_worker = f"{WORKER}, le"
    return (
        f"sum by ({by_le}) (\n"
        f"    sum by ({per_worker}) ({agent})\n"
        f"  or on ({WORKER_KEY})\n"
        f"    sum by ({per_worker}) ({names(t).histogram_rate(metric)}{worker_sel()})\n"
        f")"
    )


def _quantile_queries(t: Thresholds, metric: str, by: str, legend: str) -> list[Query]:
    """P50/P95/P99 per ``by`` (:func:`worker_buckets`)."""
    buckets = worker_buckets(t, metric, by)
    return [
        Query(f"histogram_quantile({q}, {buckets})", f"{legend} P{round(q * 100)}")
        for q in (0.5, 0.95, 0.99)
    ]


def gpu_utilization_panel(t: Thresholds) -> Any:
    return p.timeseries(
        "GPU utilization",
        "Share of time a kernel ran on each GPU (NVML utilization). " + _util_text(t),
        [Query(f"inferwatch_gpu_utilization_ratio{gpu_sel()}", _gpu_label())],
        unit="percentunit",
        min_value=0,
        max_value=1,
        thresholds=utilization_steps(t),
        threshold_style="line+area",
        fill=0,
    )


_PRESSURE_TEXT = (
    "Memory pressure per GPU: the KV-cache usage of the workers on it where their engine "
    "exports one, else NVML's used memory. Engines that pre-allocate (vLLM reserves "
    "--gpu-memory-utilization of the card at start) keep NVML's level flat whatever the "
    "load, so the KV cache is the level that moves. "
)


def memory_pressure_panel(t: Thresholds) -> Any:
    return p.timeseries(
        "Memory pressure",
        _PRESSURE_TEXT + _vram_text(t),
        [Query(f"{names(t).gpu_pressure}{gpu_sel()}", _gpu_label())],
        unit="percentunit",
        min_value=0,
        max_value=1,
        thresholds=vram_steps(t),
        threshold_style="dashed",
    )


def vram_panel(t: Thresholds) -> Any:
    return p.timeseries(
        "VRAM level",
        "(used + reserved) / total memory of each GPU (NVML). For an engine that "
        "pre-allocates its share of the card this stays flat: the Memory pressure panel "
        "shows its KV cache. " + _vram_text(t),
        [Query(f"inferwatch_gpu_memory_used_ratio{gpu_sel()}", _gpu_label())],
        unit="percentunit",
        min_value=0,
        max_value=1,
        thresholds=vram_steps(t),
        threshold_style="dashed",
    )


def _worker_link(t: Thresholds) -> dict[str, Any]:
    return p.data_link(
        "Open worker ${__field.labels.worker}",
        f"/d/{t.pack.dashboard_uids.worker}?${{__url_time_range}}&${{datasource:queryparam}}"
        "&var-worker=${__field.labels.worker}",
    )


def _gpu_link(t: Thresholds) -> dict[str, Any]:
    return p.data_link(
        "Open GPU ${__field.labels.gpu} of ${__field.labels.instance}",
        f"/d/{t.pack.dashboard_uids.gpu}?${{__url_time_range}}&${{datasource:queryparam}}"
        "&var-instance=${__field.labels.instance}&var-gpu=${__field.labels.gpu}",
    )


def queue_panel(t: Thresholds, by: str = "instance, worker") -> Any:
    samples = t.queue.over_capacity_samples
    return p.timeseries(
        "Queue depth vs max_num_seqs",
        "Requests waiting for a batch slot against the worker's batch capacity, "
        f"--max-num-seqs. Waiting above capacity for {samples} samples in a row "
        "is the leading overload signal: scale out or rate-limit before latency alerts "
        "fire (field guide 6, FAQ).",
        [
            Query(f"sum by ({by}) (inferwatch_queue_depth{worker_sel()})", "{{worker}} waiting"),
            Query(
                f"max by ({by}) (inferwatch_max_num_seqs{_worker_only()})",
                "{{worker}} max_num_seqs",
            ),
        ],
        unit="short",
        min_value=0,
        links=[_worker_link(t)],
    )


def latency_panel(t: Thresholds, name: str, metric: str, slo: float | None, by: str) -> Any:
    what = {
        "TTFT": "Time to first token",
        "TPOT": "Time per output token",
        "End-to-end latency": "Request latency from arrival to last token",
        "Queue time": "Time a request waited before it was scheduled",
    }[name]
    slo_text = f" The dashed line is the P99 SLO, {_secs(slo)}." if slo is not None else ""
    return p.timeseries(
        f"{name} P50 / P95 / P99",
        f"{what}: P50, P95 and P99 per {by}, from the histogram buckets (the agent's, or "
        f"the engine's own where the agent does not re-export them).{slo_text}",
        _quantile_queries(t, metric, by, "{{" + by.split(",")[0] + "}}"),
        unit="s",
        min_value=0,
        thresholds=slo_steps(slo) if slo is not None else (),
        threshold_style="dashed" if slo is not None else "off",
        fill=0,
    )


#: the worker dashboard's panel of the measuring proxy's TTFT next to the rules' one
PROXY_GAP_TITLE = "TTFT P99: engine and clients"


def proxy_gap_panel(t: Thresholds) -> Any:
    """The TTFT P99 the rules read (the engine's histogram, else the measuring proxy's)
    and the one the proxy's clients got: the gap is queueing and network in front of the
    engine (docs/proxy.md)."""
    proxied = worker_buckets(t, "inferwatch_proxy_ttft_seconds", "worker")
    return p.timeseries(
        PROXY_GAP_TITLE,
        "TTFT P99 per worker as the rules read it (the engine's histogram; the measuring "
        "proxy's for an engine without one) and as the clients of the agent's measuring "
        "proxy got it (workers[].proxy, docs/proxy.md). The gap is the time in front of "
        "the engine: its HTTP queue, the network, a load balancer. Empty for workers "
        f"without the proxy. The dashed line is the P99 SLO, {_secs(t.ttft.p99_slo_seconds)}.",
        [
            Query(
                f"max by (worker) ({names(t).quantile('worker', 'ttft', 'p99')}{worker_sel()})",
                "{{worker}} rules",
            ),
            Query(f"histogram_quantile(0.99, {proxied})", "{{worker}} clients (proxy)"),
        ],
        unit="s",
        min_value=0,
        thresholds=slo_steps(t.ttft.p99_slo_seconds),
        threshold_style="dashed",
        fill=0,
    )


def gpu_state_panel(t: Thresholds) -> Any:
    return p.state_timeline(
        "GPU state",
        f"The recording rule {names(t).gpu_state} per GPU: idle (utilization "
        f"below {_pct(t.gpu_utilization.idle_below)}), healthy, squeeze (memory pressure above "
        f"{_pct(t.vram.squeeze_above)} with P99 under {_secs(t.vram.squeeze_p99_ok_seconds)}: "
        f"no action) or pressure (above {_pct(t.vram.scale_above)} with the queue of a worker "
        f"on that GPU rising, or above {_pct(t.vram.squeeze_above)} with its P99 at or above "
        f"{_secs(t.vram.squeeze_p99_ok_seconds)}). Memory pressure is the KV-cache usage of "
        "the GPU's workers, else NVML's used memory.",
        [Query(f"{names(t).gpu_state}{gpu_sel()}", _gpu_label())],
        mappings=p.value_mappings(
            {
                0: ("idle", "blue"),
                1: ("healthy", "green"),
                2: ("squeeze", "yellow"),
                3: ("pressure", "red"),
            }
        ),
        links=[_gpu_link(t)],
    )


def bottleneck_expr(t: Thresholds) -> str:
    """1 compute-bound, 2 memory-bound, 0 neither, per GPU (field guide 6.1).

    Compute-bound: utilization at or above the scale-review line while requests
    wait on a worker of that GPU (through ``inferwatch_worker_gpu_info``).
    Memory-bound: memory pressure (the workers' KV cache, else NVML) at or above
    the squeeze line with utilization below the healthy band.
    """
    n = names(t)
    util = f"inferwatch_gpu_utilization_ratio{gpu_sel()}"
    vram = f"{n.gpu_pressure}{gpu_sel()}"
    queue = (
        "max by (job, instance, gpu, uuid) ("
        f"max by (job, instance, worker) (inferwatch_queue_depth{host_sel()}) "
        f"* on (job, instance, worker) group_right () {n.worker_gpu}{host_sel()})"
    )
    busy = t.gpu_utilization.scale_review_above
    modest = t.gpu_utilization.healthy_band[0]
    return (
        f"(0 * ({util} >= {busy:g} and on (job, instance, gpu, uuid) ({queue} > 0)) + 1)"
        f" or (0 * ({util} < {modest:g} and {vram} >= {t.vram.squeeze_above:g}) + 2)"
        f" or (0 * {util})"
    )


def bottleneck_panel(t: Thresholds) -> Any:
    busy = t.gpu_utilization.scale_review_above
    modest = t.gpu_utilization.healthy_band[0]
    return p.state_timeline(
        "Compute-bound or memory-bound",
        f"Compute-bound: utilization at or above {_pct(busy)} while requests wait on a "
        f"worker of that GPU; memory-bound: memory pressure (KV cache, else VRAM) at or "
        f"above {_pct(t.vram.squeeze_above)} while utilization "
        f"is below {_pct(modest)} (field guide 6.1). Compute-bound asks for scale-out or "
        "rate limiting; memory-bound asks for prefix caching, an FP8 KV cache or a lower "
        "--max-num-seqs, not for more GPUs.",
        [Query(bottleneck_expr(t), _gpu_label())],
        mappings=p.value_mappings(
            {
                0: ("balanced", "green"),
                1: ("compute-bound", "orange"),
                2: ("memory-bound", "purple"),
            }
        ),
        links=[_gpu_link(t)],
    )


def alerts_panel(t: Thresholds) -> Any:
    # ALERTS carries the alert's labels, not its annotations: the runbook link is
    # rebuilt from the alert name. Alerts aggregated above one host lose `job` or
    # `instance`, so an empty value matches too ("$job|").
    expr = (
        'ALERTS{alertstate="firing", alertname=~"Inference.*", '
        'job=~"$job|", instance=~"$instance|"}'
    )
    return p.table(
        "Firing alerts",
        "Inference alerts firing now, from Prometheus's ALERTS series. Click a row to open "
        "the alert's runbook.",
        [Query(expr, "", instant=True, fmt="table")],
        unit="none",
        exclude=("Value", "alertstate", "job"),
        order=("alertname", "severity", "instance", "worker", "model", "gpu"),
        links=[
            p.data_link(
                "Runbook for ${__data.fields.alertname}",
                t.pack.runbook_url("${__data.fields.alertname}"),
                new_tab=True,
            )
        ],
        sort_by="severity",
    )


def error_ratio_panel(t: Thresholds) -> Any:
    return p.timeseries(
        "Error ratio",
        "Share of requests that ended in an error or were rejected, per worker (recording "
        f"rule over {t.pack.window}). The dashed line is the alert threshold, "
        f"{_pct(t.errors.ratio_above)}.",
        [
            Query(
                f"{names(t).error_ratio}{worker_sel()}",
                "{{worker}}",
            )
        ],
        unit="percentunit",
        min_value=0,
        thresholds=steps("green", (t.errors.ratio_above, "red")),
        threshold_style="dashed",
        fill=0,
    )


def rejected_panel(by: str) -> Any:
    return p.timeseries(
        "Rejected requests",
        "Requests refused at admission (HTTP 503 from queue limits), per second.",
        [
            Query(
                f"sum by ({by}) (rate(inferwatch_requests_rejected_total{worker_sel()}"
                "[$__rate_interval]))",
                "{{" + by + "}}",
            )
        ],
        unit="reqps",
        min_value=0,
    )


def requests_panel(by: str) -> Any:
    return p.timeseries(
        "Requests per second",
        "Finished requests per second (every finish reason).",
        [
            Query(
                f"sum by ({by}) (rate(inferwatch_requests_finished_total{worker_sel()}"
                "[$__rate_interval]))",
                "{{" + by + "}}",
            )
        ],
        unit="reqps",
        min_value=0,
    )


def tokens_panel(by: str) -> Any:
    return p.timeseries(
        "Tokens per second",
        "Prompt tokens processed (prefill) and tokens generated (decode) per second.",
        [
            Query(
                f"sum by ({by}) (rate(inferwatch_prompt_tokens_total{worker_sel()}"
                "[$__rate_interval]))",
                "{{" + by + "}} prompt",
            ),
            Query(
                f"sum by ({by}) (rate(inferwatch_generation_tokens_total{worker_sel()}"
                "[$__rate_interval]))",
                "{{" + by + "}} generated",
            ),
        ],
        unit="short",
        axis_label="tokens/s",
        min_value=0,
    )


# --- the dashboards -------------------------------------------------------------------


def bucket_heatmap(t: Thresholds, title: str, metric: str, description: str, unit: str) -> Any:
    """A heatmap of a histogram's buckets: requests per second in each (vLLM's own
    dashboard has the token-length ones), the agent's or the engine's own buckets."""
    return p.heatmap(
        title,
        description,
        [Query(worker_buckets(t, metric), "{{le}}", fmt="heatmap")],
        unit=unit,
    )


#: (legend word, histogram) of the per-request phases, in the order a request goes through
PHASES = (
    ("prefill", "inferwatch_prefill_time_seconds"),
    ("decode", "inferwatch_decode_time_seconds"),
    ("queue", "inferwatch_queue_time_seconds"),
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
                f"histogram_quantile({q}, {worker_buckets(t, metric, 'worker')})",
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
                f"max by (worker, adapter, state) (inferwatch_lora_adapter_active{worker_sel()})",
                "",
                instant=True,
                fmt="table",
            ),
            Query(
                f"max by (worker) (inferwatch_lora_max_adapters{worker_sel()})",
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


def _links() -> list[g.DashboardLink]:
    return [
        g.DashboardLink(
            title="Inference dashboards",
            type="dashboards",
            tags=[TAG],
            asDropdown=False,
            includeVars=True,
            keepTime=True,
            tooltip="The other inferwatch dashboards, same time range and variables",
        )
    ]


def _dashboard(
    t: Thresholds,
    key: str,
    title: str,
    description: str,
    sections: Sequence[Section],
    *,
    time_from: str = "now-1h",
    refresh: str = "30s",
    tags: Sequence[str] = (),
) -> dict[str, Any]:
    dashboard = g.Dashboard(
        title=title,
        uid=getattr(t.pack.dashboard_uids, key),
        description=description,
        tags=[TAG, *tags],
        editable=False,
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        time=g.Time(time_from, "now"),
        timezone="browser",
        refresh=refresh,
        templating=g.Templating(p.standard_variables()),
        links=_links(),
        panels=p.layout(sections),
    ).auto_panel_ids()
    return p.normalise_dashboard(p.to_plain(dashboard))


def overview(t: Thresholds) -> dict[str, Any]:
    gu = t.gpu_utilization
    now = Section(
        "Fleet now",
        [
            Cell(
                p.stat(
                    "Mean GPU utilization",
                    "Mean utilization of the selected GPUs. " + _util_text(t),
                    [Query(f"avg(inferwatch_gpu_utilization_ratio{gpu_sel()})")],
                    unit="percentunit",
                    thresholds=utilization_steps(t),
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Highest memory pressure",
                    "Memory pressure of the fullest selected GPU: the KV cache of its workers, "
                    "else NVML's used memory. " + _vram_text(t),
                    [Query(f"max({names(t).gpu_pressure}{gpu_sel()})")],
                    unit="percentunit",
                    thresholds=vram_steps(t),
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Fleet requests per second",
                    "Finished requests per second across the selected workers.",
                    [
                        Query(
                            f"sum(rate(inferwatch_requests_finished_total{worker_sel()}"
                            "[$__rate_interval]))"
                        )
                    ],
                    unit="reqps",
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Workers up",
                    "Workers whose last engine scrape succeeded, out of those selected.",
                    [Query(f"sum(inferwatch_target_up{_worker_only()})")],
                    unit="none",
                    graph=False,
                    decimals=0,
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "GPUs up",
                    "GPUs that answer NVML, out of those selected.",
                    [Query(f"sum(inferwatch_gpu_up{gpu_sel()})")],
                    unit="none",
                    graph=False,
                    decimals=0,
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Alerts firing",
                    "Inference alerts firing now (details in the table below).",
                    [
                        Query(
                            'count(ALERTS{alertstate="firing", alertname=~"Inference.*", '
                            'job=~"$job|", instance=~"$instance|"}) or vector(0)'
                        )
                    ],
                    unit="none",
                    graph=False,
                    decimals=0,
                    thresholds=steps("green", (1, "red")),
                ),
                4,
                4,
            ),
        ],
    )
    lifelines = Section(
        "The four lifelines: GPU utilization, VRAM level, queue depth, latency",
        [
            Cell(gpu_utilization_panel(t), 8, 8),
            Cell(memory_pressure_panel(t), 8, 8),
            Cell(queue_panel(t), 8, 8),
            Cell(
                latency_panel(
                    t, "TTFT", "inferwatch_ttft_seconds", t.ttft.p99_slo_seconds, "model"
                ),
                12,
                8,
            ),
            Cell(
                latency_panel(
                    t, "TPOT", "inferwatch_tpot_seconds", t.tpot.p99_slo_seconds, "model"
                ),
                12,
                8,
            ),
        ],
    )
    bottleneck = Section(
        "Where the bottleneck is",
        [Cell(gpu_state_panel(t), 12, 8), Cell(bottleneck_panel(t), 12, 8)],
    )
    alerts = Section("Alerts", [Cell(alerts_panel(t), 24, 8)])
    traffic = Section(
        "Traffic and errors",
        [
            Cell(requests_panel("model"), 6, 8),
            Cell(tokens_panel("model"), 6, 8),
            Cell(error_ratio_panel(t), 6, 8),
            Cell(rejected_panel("model"), 6, 8),
        ],
    )
    return _dashboard(
        t,
        "overview",
        "Inference overview",
        "Fleet view of LLM inference: the four lifelines (GPU utilization "
        f"{_pct(gu.healthy_band[0])}-{_pct(gu.healthy_band[1])} healthy, VRAM level, queue "
        "depth, TTFT/TPOT), where the bottleneck is, firing alerts, throughput and errors.",
        [now, cost_section(t), lifelines, *slo_dashboard.sections(t), bottleneck, alerts, traffic],
        tags=["overview"],
    )


def worker(t: Thresholds) -> dict[str, Any]:
    now = Section(
        "Worker now",
        [
            Cell(
                p.stat(
                    "Engine reachable",
                    "1 when the agent's last scrape of the worker's /metrics succeeded and "
                    "carried engine data (the lowest of the selected workers).",
                    [Query(f"min(inferwatch_target_up{_worker_only()})")],
                    unit="none",
                    graph=False,
                    mappings=p.value_mappings({0: ("down", "red"), 1: ("up", "green")}),
                    thresholds=steps("red", (1, "green")),
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Requests running",
                    "Requests in the running batch now.",
                    [Query(f"sum(inferwatch_requests_running{worker_sel()})")],
                    unit="short",
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Requests waiting",
                    "Requests queued for a batch slot now.",
                    [Query(f"sum(inferwatch_queue_depth{worker_sel()})")],
                    unit="short",
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Fullest KV cache",
                    "Share of the KV-cache blocks in use (the fullest selected worker).",
                    [Query(f"max(inferwatch_kv_cache_usage_ratio{worker_sel()})")],
                    unit="percentunit",
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "TTFT P99",
                    f"Worst worker's TTFT P99 over {t.pack.window} (recording rule); red above "
                    f"the SLO of {_secs(t.ttft.p99_slo_seconds)}.",
                    [Query(f"max({names(t).quantile('worker', 'ttft', 'p99')}{worker_sel()})")],
                    unit="s",
                    thresholds=slo_steps(t.ttft.p99_slo_seconds),
                ),
                4,
                4,
            ),
            Cell(
                p.stat(
                    "Uptime",
                    "Time since the worker process started (the youngest selected worker). "
                    "A drop is a restart.",
                    [Query(f"min(time() - inferwatch_worker_start_time_seconds{_worker_only()})")],
                    unit="s",
                    graph=False,
                ),
                4,
                4,
            ),
        ],
    )
    latency = Section(
        "Latency",
        [
            Cell(
                latency_panel(
                    t, "TTFT", "inferwatch_ttft_seconds", t.ttft.p99_slo_seconds, "worker"
                ),
                12,
                8,
            ),
            Cell(
                latency_panel(
                    t, "TPOT", "inferwatch_tpot_seconds", t.tpot.p99_slo_seconds, "worker"
                ),
                12,
                8,
            ),
            Cell(
                latency_panel(
                    t, "End-to-end latency", "inferwatch_e2e_latency_seconds", None, "worker"
                ),
                12,
                8,
            ),
            Cell(
                latency_panel(t, "Queue time", "inferwatch_queue_time_seconds", None, "worker"),
                12,
                8,
            ),
            Cell(proxy_gap_panel(t), 24, 8),
            *[
                Cell(
                    bucket_heatmap(
                        t,
                        f"{name} distribution",
                        metric,
                        "Requests per second in each "
                        f"{name if name.isupper() else name.lower()} bucket: a second "
                        "band of slow requests shows a long tail the quantiles average away.",
                        "s",
                    ),
                    8,
                    8,
                )
                for name, metric in (
                    ("TTFT", "inferwatch_ttft_seconds"),
                    ("TPOT", "inferwatch_tpot_seconds"),
                    ("End-to-end latency", "inferwatch_e2e_latency_seconds"),
                )
            ],
        ],
    )
    batch = Section(
        "Batch, queue and KV cache",
        [
            Cell(
                p.timeseries(
                    "Queue vs running vs capacity",
                    "Requests waiting, requests in the running batch, and the batch capacity "
                    "(--max-num-seqs). Running pinned at capacity with a queue means the "
                    "batch is full.",
                    [
                        Query(
                            f"sum by (worker) (inferwatch_queue_depth{worker_sel()})",
                            "{{worker}} waiting",
                        ),
                        Query(
                            f"sum by (worker) (inferwatch_requests_running{worker_sel()})",
                            "{{worker}} running",
                        ),
                        Query(
                            f"max by (worker) (inferwatch_max_num_seqs{_worker_only()})",
                            "{{worker}} max_num_seqs",
                        ),
                    ],
                    unit="short",
                    min_value=0,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Queue trend",
                    "Least-squares slope of the queue depth over the agent's stats window, in "
                    "requests per second: above zero the queue is growing.",
                    [Query(f"inferwatch_queue_depth_slope{worker_sel()}", "{{worker}}")],
                    unit="short",
                    axis_label="requests/s",
                ),
                8,
                8,
            ),
            Cell(
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
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "KV-cache usage",
                    "Share of the KV-cache blocks in use. Near 100% the engine preempts "
                    "requests; see the preemptions panel.",
                    [Query(f"inferwatch_kv_cache_usage_ratio{worker_sel()}", "{{worker}}")],
                    unit="percentunit",
                    min_value=0,
                    max_value=1,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Prefix-cache hit ratio",
                    "Share of prompt tokens served from the prefix cache over the stats window. "
                    "Long shared system prompts should hit often (field guide 6.2: 30-60% lower "
                    "TTFT).",
                    [Query(f"inferwatch_prefix_cache_hit_ratio{worker_sel()}", "{{worker}}")],
                    unit="percentunit",
                    min_value=0,
                    max_value=1,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Preemptions",
                    "Requests preempted per second to free KV-cache space. Sustained preemption "
                    "means the KV cache is too small for the batch.",
                    [
                        Query(
                            f"sum by (worker) (rate(inferwatch_preemptions_total{worker_sel()}"
                            "[$__rate_interval]))",
                            "{{worker}}",
                        )
                    ],
                    unit="short",
                    axis_label="preemptions/s",
                    min_value=0,
                ),
                8,
                8,
            ),
        ],
    )
    shapes = Section(
        "Request shapes and phases",
        [
            *[
                Cell(bucket_heatmap(t, name, metric, text, "short"), 8, 8)
                for name, metric, text in (
                    (
                        "Prompt length distribution",
                        "inferwatch_prompt_length_tokens",
                        "Prompt tokens of each request: requests per second in each bucket. A "
                        "band of long prompts is the traffic a separate long-context pool "
                        "serves (field guide 5.3; `inferwatch advise` prints its share).",
                    ),
                    (
                        "Generation length distribution",
                        "inferwatch_generation_length_tokens",
                        "Tokens generated per finished request: requests per second in each "
                        "bucket. Long generations hold batch slots and KV cache for longer.",
                    ),
                )
            ],
            Cell(phase_time_panel(t), 8, 8),
            Cell(lora_panel(), 24, 6),
        ],
    )
    requests = Section(
        "Requests",
        [
            Cell(
                p.timeseries(
                    "Finished requests by reason",
                    "Requests finished per second by reason: stop (end of sequence), length "
                    "(token limit), abort (client went away), error.",
                    [
                        Query(
                            f"sum by (reason) (rate(inferwatch_requests_finished_total{worker_sel()}"
                            "[$__rate_interval]))",
                            "{{reason}}",
                        )
                    ],
                    unit="reqps",
                    min_value=0,
                    stack=True,
                    fill=30,
                ),
                6,
                8,
            ),
            Cell(tokens_panel("worker"), 6, 8),
            Cell(error_ratio_panel(t), 6, 8),
            Cell(rejected_panel("worker"), 6, 8),
        ],
    )
    process = Section(
        "Process",
        [
            Cell(
                p.table(
                    "Launch flags",
                    "The worker's engine, model, version and the launch flags that matter, read "
                    "from its command line (inferwatch_worker_info).",
                    [
                        Query(
                            f"inferwatch_worker_info{_worker_only()}", "", instant=True, fmt="table"
                        )
                    ],
                    unit="none",
                    exclude=("Value", "job"),
                    order=(
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
                24,
                6,
            ),
            Cell(
                p.timeseries(
                    "Process CPU",
                    "CPU time of the worker's process tree per second (100% = one core).",
                    [
                        Query(
                            f"sum by (worker) (rate(inferwatch_worker_cpu_seconds_total{_worker_only()}"
                            "[$__rate_interval]))",
                            "{{worker}}",
                        )
                    ],
                    unit="percentunit",
                    min_value=0,
                ),
                6,
                8,
            ),
            Cell(
                p.timeseries(
                    "Process memory",
                    "Resident memory (RSS) of the worker's process tree.",
                    [
                        Query(
                            f"inferwatch_worker_resident_memory_bytes{_worker_only()}", "{{worker}}"
                        )
                    ],
                    unit="bytes",
                    min_value=0,
                ),
                6,
                8,
            ),
            Cell(
                p.timeseries(
                    "Restarts",
                    "Worker process restarts: changes of its start time per interval.",
                    [
                        Query(
                            f"sum by (worker) (changes(inferwatch_worker_start_time_seconds"
                            f"{_worker_only()}[$__interval]))",
                            "{{worker}}",
                        )
                    ],
                    unit="short",
                    min_value=0,
                    bars=True,
                    fill=80,
                ),
                6,
                8,
            ),
            Cell(
                p.timeseries(
                    "Engine scrape errors",
                    "Failed scrapes of the worker's /metrics per second, by reason (connect, "
                    "timeout, http_status, too_large, parse, no_engine_metrics).",
                    [
                        Query(
                            f"sum by (worker, reason) (rate(inferwatch_target_scrape_errors_total"
                            f"{_worker_only()}[$__rate_interval]))",
                            "{{worker}} {{reason}}",
                        )
                    ],
                    unit="short",
                    axis_label="errors/s",
                    min_value=0,
                ),
                6,
                8,
            ),
        ],
    )
    return _dashboard(
        t,
        "worker",
        "Inference worker",
        "One inference worker or model in detail: latency quantiles and distributions, "
        "batch and queue, KV cache, prompt and generation lengths, prefill and decode time, "
        "LoRA adapters, finish reasons, launch flags, the worker process and the agent's "
        "warm-up gate.",
        [now, latency, batch, shapes, requests, process, warmup_section(t)],
        tags=["worker"],
    )


def warmup_section(t: Thresholds) -> Section:
    """The agent's warm-up gate (docs/warmup.md). Its series carry only ``worker`` (plus
    Prometheus's ``job`` and ``instance``), so every query uses the worker-only selector;
    with the gate off they are absent and the panels stay empty rather than show zeros."""
    gate_off = " Empty when the agent's warm-up gate (warmup: in its configuration) is off."
    return Section(
        "Warm-up",
        [
            Cell(
                p.stat(
                    "Warm",
                    "Whether the agent's warm-up gate has warmed each worker "
                    "(inferwatch_worker_ready): cold while it waits for /health, warms the "
                    "worker up, or after a restart; the agent's /readyz answers 200 only once "
                    "every gated worker is warm or its deadline has passed." + gate_off,
                    [
                        Query(
                            f"min by (worker) (inferwatch_worker_ready{_worker_only()})",
                            "{{worker}}",
                        )
                    ],
                    unit="none",
                    graph=False,
                    mappings=p.value_mappings({0: ("cold", "red"), 1: ("warm", "green")}),
                    thresholds=steps("red", (1, "green")),
                ),
                4,
                8,
            ),
            Cell(
                p.stat(
                    "Gate opened on deadline",
                    "1 when the gate let a worker into service only because warmup.deadline "
                    "passed before a warm-up succeeded (inferwatch_warmup_deadline_exceeded): "
                    "the worker serves cold and InferenceWarmupDeadlineExceeded fires. It "
                    "returns to 0 when a background warm-up succeeds." + gate_off,
                    [
                        Query(
                            "max by (worker) "
                            f"(inferwatch_warmup_deadline_exceeded{_worker_only()})",
                            "{{worker}}",
                        )
                    ],
                    unit="none",
                    graph=False,
                    mappings=p.value_mappings({0: ("no", "green"), 1: ("serving cold", "orange")}),
                    thresholds=steps("green", (1, "orange")),
                ),
                4,
                8,
            ),
            Cell(
                p.timeseries(
                    "Warm-up TTFT",
                    "Time to first token of the last warm-up: cold is its first request, "
                    "warm the same request sent again at its end. A wide gap is what the "
                    "warm-up saved the first users (field guide 5.2: 4.8 s unwarmed against "
                    "180 ms warm). The dashed line is ttft.warmup_p95_seconds, "
                    f"{_secs(t.ttft.warmup_p95_seconds)}: a warm TTFT above it means the "
                    "warm-up did not help." + gate_off,
                    [
                        Query(
                            "max by (worker, phase) "
                            f"(inferwatch_warmup_ttft_seconds{_worker_only()})",
                            "{{worker}} {{phase}}",
                        )
                    ],
                    unit="s",
                    min_value=0,
                    thresholds=slo_steps(t.ttft.warmup_p95_seconds),
                    threshold_style="dashed",
                    fill=0,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Warm-up duration",
                    "How long the last completed warm-up took, from its first warm-up request "
                    "to ready (loading the model before /health answers is not counted)."
                    + gate_off,
                    [
                        Query(
                            f"max by (worker) (inferwatch_warmup_duration_seconds{_worker_only()})",
                            "{{worker}}",
                        )
                    ],
                    unit="s",
                    min_value=0,
                    fill=0,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Warm-ups and failures",
                    "Completed warm-ups (one at start and one after each restart the gate "
                    "noticed) and failed warm-up requests by reason (connect, timeout, "
                    "http_status, bad_response, no_model), counted per interval. Failures "
                    "that keep coming while the worker stays cold end in the deadline." + gate_off,
                    [
                        Query(
                            "sum by (worker) (increase(inferwatch_warmups_total"
                            f"{_worker_only()}[$__rate_interval]))",
                            "{{worker}} warm-ups",
                        ),
                        Query(
                            "sum by (worker, reason) (increase(inferwatch_warmup_failures_total"
                            f"{_worker_only()}[$__rate_interval]))",
                            "{{worker}} failed: {{reason}}",
                        ),
                    ],
                    unit="short",
                    min_value=0,
                    bars=True,
                    fill=80,
                ),
                24,
                8,
            ),
        ],
    )


def gpu(t: Thresholds) -> dict[str, Any]:
    now = Section(
        "GPUs now",
        [
            Cell(
                p.stat(
                    "GPUs up",
                    "GPUs that answer NVML, out of those selected.",
                    [Query(f"sum(inferwatch_gpu_up{gpu_sel()})")],
                    unit="none",
                    graph=False,
                    decimals=0,
                ),
                5,
                4,
            ),
            Cell(
                p.stat(
                    "Mean utilization",
                    "Mean utilization of the selected GPUs. " + _util_text(t),
                    [Query(f"avg(inferwatch_gpu_utilization_ratio{gpu_sel()})")],
                    unit="percentunit",
                    thresholds=utilization_steps(t),
                ),
                5,
                4,
            ),
            Cell(
                p.stat(
                    "Highest VRAM level",
                    "The fullest selected GPU. " + _vram_text(t),
                    [Query(f"max(inferwatch_gpu_memory_used_ratio{gpu_sel()})")],
                    unit="percentunit",
                    thresholds=vram_steps(t),
                ),
                5,
                4,
            ),
            Cell(
                p.stat(
                    "Power draw",
                    "Total power drawn by the selected GPUs.",
                    [Query(f"sum(inferwatch_gpu_power_watts{gpu_sel()})")],
                    unit="watt",
                ),
                5,
                4,
            ),
            Cell(
                p.stat(
                    "Hottest GPU",
                    "Core temperature of the hottest selected GPU.",
                    [Query(f"max(inferwatch_gpu_temperature_celsius{gpu_sel()})")],
                    unit="celsius",
                    thresholds=steps("green", (80, "yellow"), (87, "red")),
                ),
                4,
                4,
            ),
        ],
    )
    compute = Section(
        "Compute",
        [
            Cell(
                p.timeseries(
                    "Utilization vs SM, tensor and DRAM activity",
                    "NVML utilization only says a kernel was running; SM active, tensor active "
                    "and DRAM active (GPM, Hopper and newer) say how much of the chip worked. "
                    "High utilization with low SM activity is a GPU waiting on small kernels; "
                    "high DRAM activity with low tensor activity is a memory-bound decode.",
                    [
                        Query(
                            f"inferwatch_gpu_utilization_ratio{gpu_sel()}",
                            _gpu_label("utilization"),
                        ),
                        Query(
                            f"inferwatch_gpu_memory_busy_ratio{gpu_sel()}",
                            _gpu_label("memory busy"),
                        ),
                        Query(
                            f"inferwatch_gpu_sm_active_ratio{gpu_sel()}", _gpu_label("SM active")
                        ),
                        Query(
                            f"inferwatch_gpu_sm_occupancy_ratio{gpu_sel()}",
                            _gpu_label("SM occupancy"),
                        ),
                        Query(
                            f"inferwatch_gpu_tensor_active_ratio{gpu_sel()}",
                            _gpu_label("tensor active"),
                        ),
                        Query(
                            f"inferwatch_gpu_dram_active_ratio{gpu_sel()}",
                            _gpu_label("DRAM active"),
                        ),
                    ],
                    unit="percentunit",
                    min_value=0,
                    max_value=1,
                    fill=0,
                ),
                12,
                9,
            ),
            Cell(gpu_utilization_panel(t), 12, 9),
            Cell(gpu_state_panel(t), 24, 6),
        ],
    )
    memory = Section(
        "Memory",
        [
            Cell(
                p.timeseries(
                    "Memory used, reserved and total",
                    "Device memory used by allocations, reserved by the driver, and the total.",
                    [
                        Query(f"inferwatch_gpu_memory_used_bytes{gpu_sel()}", _gpu_label("used")),
                        Query(
                            f"inferwatch_gpu_memory_reserved_bytes{gpu_sel()}",
                            _gpu_label("reserved"),
                        ),
                        Query(f"inferwatch_gpu_memory_total_bytes{gpu_sel()}", _gpu_label("total")),
                    ],
                    unit="bytes",
                    min_value=0,
                ),
                8,
                8,
            ),
            Cell(vram_panel(t), 8, 8),
            Cell(
                p.timeseries(
                    "Memory per process",
                    "Device memory of each process on the GPU; processes of watched workers "
                    "carry the worker's name.",
                    [
                        Query(
                            f"inferwatch_gpu_process_memory_used_bytes{gpu_sel()}",
                            _gpu_label("{{process}} pid {{pid}} {{worker}}"),
                        )
                    ],
                    unit="bytes",
                    min_value=0,
                    stack=True,
                    fill=30,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "SM share per process",
                    "Each process's share of SM time over the last sample period.",
                    [
                        Query(
                            f"inferwatch_gpu_process_sm_utilization_ratio{gpu_sel()}",
                            _gpu_label("{{process}} pid {{pid}} {{worker}}"),
                        )
                    ],
                    unit="percentunit",
                    min_value=0,
                    max_value=1,
                ),
                24,
                7,
            ),
        ],
    )
    power = Section(
        "Power, temperature and clocks",
        [
            Cell(
                p.timeseries(
                    "Power vs limit",
                    "Power drawn by each GPU against its enforced power limit. Draw "
                    "pinned at the limit with sw_power_cap events means the clocks are capped.",
                    [
                        Query(f"inferwatch_gpu_power_watts{gpu_sel()}", _gpu_label("draw")),
                        Query(f"inferwatch_gpu_power_limit_watts{gpu_sel()}", _gpu_label("limit")),
                    ],
                    unit="watt",
                    min_value=0,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Energy rate",
                    "Average power from NVML's energy counter (read on the slow interval): "
                    "smoother than the power gauge, and what the power bill sees.",
                    [
                        Query(
                            f"rate(inferwatch_gpu_energy_joules_total{gpu_sel()}[$__rate_interval])",
                            _gpu_label(),
                        )
                    ],
                    unit="watt",
                    min_value=0,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Temperature",
                    "GPU core temperature.",
                    [Query(f"inferwatch_gpu_temperature_celsius{gpu_sel()}", _gpu_label())],
                    unit="celsius",
                    thresholds=steps("green", (80, "yellow"), (87, "red")),
                    threshold_style="dashed",
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Clocks",
                    "Current SM and memory clocks. SM clocks dropping under load go with the "
                    "clock-event reasons next to this panel.",
                    [
                        Query(f"inferwatch_gpu_sm_clock_hertz{gpu_sel()}", _gpu_label("SM")),
                        Query(
                            f"inferwatch_gpu_memory_clock_hertz{gpu_sel()}", _gpu_label("memory")
                        ),
                    ],
                    unit="hertz",
                    min_value=0,
                ),
                12,
                8,
            ),
            Cell(
                p.state_timeline(
                    "Clock-event reasons",
                    "Why the clocks are below maximum, per reason: idle is normal; sw_power_cap, "
                    "hw_slowdown, sw_thermal, hw_thermal and power_brake throttle the GPU "
                    "(InferenceGPUThermalThrottling).",
                    [
                        Query(
                            f"inferwatch_gpu_clock_event_active{gpu_sel()}",
                            _gpu_label("{{reason}}"),
                        )
                    ],
                    mappings=p.value_mappings(
                        {0: ("inactive", "transparent"), 1: ("active", "orange")}
                    ),
                ),
                12,
                8,
            ),
        ],
    )
    transfers = Section(
        "Interconnect, P-state and fan",
        [
            Cell(
                p.timeseries(
                    "PCIe throughput",
                    "PCIe traffic of each GPU by direction (tx: out of the GPU, rx: into it), "
                    "headers included. Sustained high rx on an inference GPU is weights or KV "
                    "cache moving over the bus (offload, swapping, model load).",
                    [
                        Query(
                            "inferwatch_gpu_pcie_throughput_bytes_per_second" + gpu_sel(),
                            _gpu_label("{{direction}}"),
                        )
                    ],
                    unit="Bps",
                    min_value=0,
                ),
                12,
                8,
            ),
            Cell(
                p.timeseries(
                    "NVLink throughput",
                    "NVLink traffic over all links of each GPU: tensor-parallel all-reduce "
                    "traffic. From the dcgm-exporter backend only; absent on boards without "
                    "NVLink.",
                    [
                        Query(
                            "inferwatch_gpu_nvlink_throughput_bytes_per_second" + gpu_sel(),
                            _gpu_label(),
                        )
                    ],
                    unit="Bps",
                    min_value=0,
                ),
                12,
                8,
            ),
            Cell(
                p.timeseries(
                    "Performance state",
                    "P-state of each GPU, 0 the fastest. A GPU under load that leaves P0 "
                    "is being held back (power, thermal or an application-clock setting); "
                    "idle GPUs drop to P8 and lower.",
                    [Query(f"inferwatch_gpu_performance_state{gpu_sel()}", _gpu_label())],
                    unit="none",
                    min_value=0,
                    max_value=15,
                    fill=0,
                ),
                12,
                8,
            ),
            Cell(
                p.timeseries(
                    "Fan speed",
                    "Intended fan speed as a share of its maximum (can exceed 100%). Absent "
                    "on passively cooled boards, where the chassis moves the air.",
                    [Query(f"inferwatch_gpu_fan_speed_ratio{gpu_sel()}", _gpu_label())],
                    unit="percentunit",
                    min_value=0,
                    fill=0,
                ),
                12,
                8,
            ),
        ],
    )
    errors = Section(
        "Errors and partitions",
        [
            Cell(
                p.timeseries(
                    "XID errors",
                    "New XID errors reported by the driver, per GPU and XID code. Critical XIDs "
                    f"({', '.join(str(x) for x in t.gpu_health.xid_critical)}) page.",
                    [
                        Query(
                            f"sum by (instance, gpu, xid) (increase(inferwatch_gpu_xid_errors_total"
                            f"{gpu_sel()}[$__rate_interval]))",
                            _gpu_label("XID {{xid}}"),
                        )
                    ],
                    unit="short",
                    min_value=0,
                    bars=True,
                    fill=80,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "ECC errors",
                    "New volatile ECC errors per GPU: corrected ones are a warning sign, "
                    "uncorrected ones corrupt results.",
                    [
                        Query(
                            f"sum by (instance, gpu, type) (increase(inferwatch_gpu_ecc_errors_total"
                            f"{gpu_sel()}[$__rate_interval]))",
                            _gpu_label("{{type}}"),
                        )
                    ],
                    unit="short",
                    min_value=0,
                    bars=True,
                    fill=80,
                ),
                8,
                8,
            ),
            Cell(
                p.timeseries(
                    "Agent collection errors",
                    "Errors of the agent's own collectors per second, by collector and reason. "
                    "A collector that has counted no error since the agent started shows as a "
                    "flat zero (the agent creates an error series at the first error).",
                    [
                        Query(
                            "sum by (instance, collector, reason) (rate("
                            f"inferwatch_collect_errors_total{host_sel()}[$__rate_interval]))"
                            " or sum by (instance, collector) "
                            f"(0 * inferwatch_collect_duration_seconds{host_sel()})",
                            "{{instance}} {{collector}} {{reason}}",
                        )
                    ],
                    unit="short",
                    axis_label="errors/s",
                    min_value=0,
                ),
                8,
                8,
            ),
            Cell(
                p.table(
                    "MIG instances",
                    "MIG instances of the selected GPUs with their profile and VRAM level.",
                    [
                        Query(
                            "inferwatch_gpu_memory_used_ratio" + gpu_sel('gpu_instance!=""'),
                            "",
                            instant=True,
                            fmt="table",
                        )
                    ],
                    unit="percentunit",
                    exclude=("job",),
                    order=("instance", "gpu", "gpu_instance", "mig_profile", "uuid", "Value"),
                    rename={"Value": "VRAM level"},
                ),
                12,
                7,
            ),
            Cell(
                p.table(
                    "GPU inventory",
                    "Model, UUID, PCI bus, driver and MIG mode of each selected GPU.",
                    [Query(f"inferwatch_gpu_info{gpu_sel()}", "", instant=True, fmt="table")],
                    unit="none",
                    exclude=("Value", "job"),
                    order=(
                        "instance",
                        "gpu",
                        "name",
                        "uuid",
                        "pci_bus_id",
                        "driver_version",
                        "mig_mode",
                    ),
                ),
                12,
                7,
            ),
        ],
    )
    return _dashboard(
        t,
        "gpu",
        "Inference GPU",
        "GPUs in detail: utilization against SM/tensor/DRAM activity, memory down to the "
        "process, power, temperature, clocks and why they drop, PCIe and NVLink traffic, "
        "P-state and fan, XID and ECC errors, MIG.",
        [now, compute, memory, power, transfers, errors],
        tags=["gpu"],
    )


def weekly(t: Thresholds) -> dict[str, Any]:
    ttft_slo = t.ttft.p99_slo_seconds
    ttft_p99 = names(t).quantile("worker", "ttft", "p99")
    util = f"inferwatch_gpu_utilization_ratio{gpu_sel()}"

    def band(lo: float | None, hi: float | None) -> str:
        parts = []
        if lo is not None:
            parts.append(f"({util} >= bool {lo:g})")
        if hi is not None:
            parts.append(f"({util} < bool {hi:g})")
        return f"avg(avg_over_time(({' * '.join(parts)})[$__range:1m]))"

    three = Section(
        "The week on one panel",
        [
            Cell(
                p.timeseries(
                    "P99 latency, GPU utilization and memory peak",
                    "The weekly review of field guide 6.2, three curves on one scale: the worst "
                    f"worker's TTFT P99 as a share of its SLO ({_secs(ttft_slo)}; above 100% "
                    "breaks the SLO), the mean GPU utilization, and the peak memory pressure: "
                    "the KV-cache usage where the engine exports it (an engine that "
                    "pre-allocates, such as vLLM or SGLang, holds NVML's VRAM flat at its "
                    "reservation), else NVML's VRAM level. Latency rising while utilization "
                    "stays flat and memory climbs points at the KV cache; latency rising with "
                    "utilization points at compute.",
                    [
                        Query(
                            f"max(max_over_time({ttft_p99}{worker_sel()}[$__interval])) / {ttft_slo:g}",
                            "TTFT P99 / SLO",
                        ),
                        Query(f"avg(avg_over_time({util}[$__interval]))", "GPU utilization (mean)"),
                        Query(
                            f"max(max_over_time({names(t).gpu_pressure}{gpu_sel()}[$__interval]))",
                            "memory peak (KV cache where exported, else VRAM)",
                        ),
                    ],
                    unit="percentunit",
                    min_value=0,
                    soft_max=1,
                    thresholds=steps("green", (1, "red")),
                    threshold_style="dashed",
                    fill=0,
                ),
                24,
                10,
            ),
        ],
    )
    alone = Section(
        "Each curve alone",
        [
            *[
                Cell(
                    p.timeseries(
                        f"{name} P99 by model",
                        f"The worst worker's {name if name.isupper() else name.lower()} P99 per model over the week (recording rule "
                        f"over {t.pack.window}, peak per interval)."
                        + (f" Dashed: the SLO, {_secs(slo)}." if slo is not None else ""),
                        [
                            Query(
                                f"max by (model) (max_over_time("
                                f"{names(t).quantile('worker', metric.removeprefix('inferwatch_').removesuffix('_seconds'), 'p99')}{worker_sel()}[$__interval]))",
                                "{{model}}",
                            )
                        ],
                        unit="s",
                        min_value=0,
                        thresholds=slo_steps(slo) if slo is not None else (),
                        threshold_style="dashed" if slo is not None else "off",
                        fill=0,
                    ),
                    8,
                    8,
                )
                for name, metric, slo in (
                    ("TTFT", "inferwatch_ttft_seconds", ttft_slo),
                    ("TPOT", "inferwatch_tpot_seconds", t.tpot.p99_slo_seconds),
                    ("End-to-end latency", "inferwatch_e2e_latency_seconds", None),
                )
            ],
            Cell(
                p.timeseries(
                    "GPU utilization distribution",
                    "Spread of the GPUs' utilization over the week: 10th, 50th and 90th "
                    "percentile and the maximum across GPUs of each interval's mean. "
                    + _util_text(t),
                    [
                        *[
                            Query(
                                f"quantile({q:g}, avg_over_time({util}[$__interval]))",
                                f"P{round(q * 100)}",
                            )
                            for q in (0.1, 0.5, 0.9)
                        ],
                        Query(f"max(avg_over_time({util}[$__interval]))", "max"),
                    ],
                    unit="percentunit",
                    min_value=0,
                    max_value=1,
                    thresholds=utilization_steps(t),
                    threshold_style="line+area",
                    fill=0,
                ),
                12,
                8,
            ),
            Cell(
                p.stat(
                    "Time in each utilization band",
                    "Share of GPU time over the dashboard's range spent in each band of the "
                    "thresholds (sampled every minute). " + _util_text(t),
                    _band_queries(t, band),
                    unit="percentunit",
                    graph=False,
                    calc="lastNotNull",
                    text_mode="value_and_name",
                ),
                12,
                8,
            ),
            Cell(
                p.timeseries(
                    "Memory peak per GPU",
                    "Highest memory pressure of each GPU per interval over the week, named by "
                    "its source: KV cache (the usage of the workers on it, where their engine "
                    "exports one) or VRAM (NVML's level, else). " + _PRESSURE_TEXT + _vram_text(t),
                    [
                        Query(
                            f"max by (instance, gpu, pressure_from) (max_over_time("
                            f"{names(t).worker_gpu_pressure}{gpu_sel()}[$__interval]))\n"
                            "or on (instance, gpu)\n"
                            "label_replace(\n"
                            f"  max by (instance, gpu) (max_over_time({names(t).gpu_vram}"
                            f"{gpu_sel()}[$__interval])),\n"
                            '  "pressure_from", "gpu_memory", "", ""\n'
                            ")",
                            _gpu_label("{{pressure_from}}"),
                        )
                    ],
                    unit="percentunit",
                    min_value=0,
                    max_value=1,
                    thresholds=vram_steps(t),
                    threshold_style="dashed",
                    fill=0,
                ),
                24,
                8,
            ),
        ],
    )
    return _dashboard(
        t,
        "trends",
        "Inference weekly trends",
        "Seven days of P99 latency, GPU utilization distribution and memory peak: the weekly "
        "review table of field guide 6.2 as dashboards, the three curves together and "
        "each alone.",
        [three, alone],
        time_from="now-7d",
        refresh="",
        tags=["trends"],
    )


def _band_queries(t: Thresholds, band: Any) -> list[Query]:
    gu = t.gpu_utilization
    low, high = gu.healthy_band
    out = [
        Query(band(None, gu.waste_below), f"waste (below {_pct(gu.waste_below)})"),
        Query(band(gu.waste_below, low), f"below healthy ({_pct(gu.waste_below)}-{_pct(low)})"),
        Query(band(low, high), f"healthy ({_pct(low)}-{_pct(high)})"),
    ]
    if high < gu.scale_review_above:
        out.append(
            Query(
                band(high, gu.scale_review_above),
                f"above healthy ({_pct(high)}-{_pct(gu.scale_review_above)})",
            )
        )
    out.append(
        Query(
            band(gu.scale_review_above, None),
            f"scale review ({_pct(gu.scale_review_above)} and above)",
        )
    )
    return out


BUILDERS = {
    "inference-overview": overview,
    "inference-worker": worker,
    "inference-gpu": gpu,
    "inference-weekly-trends": weekly,
}


def build_all(t: Thresholds) -> dict[str, dict[str, Any]]:
    """Name (file stem) -> dashboard JSON (as Python values)."""
    return {name: build(t) for name, build in BUILDERS.items()}
