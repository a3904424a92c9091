"""The overview dashboard (``inference-overview``): the fleet now, cost, the four
lifelines, SLOs, where the bottleneck is, firing alerts, traffic and errors."""

from __future__ import annotations

from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import signals as S
from inferwatch.pack.dashboards import common as c
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards import slo_row
from inferwatch.pack.dashboards.common import Dashboard
from inferwatch.pack.dashboards.cost_row import cost_section
from inferwatch.pack.dashboards.panels import Query, Section, gpu_sel, host_sel, steps, worker_sel
from inferwatch.pack.names import names
from inferwatch.pack.rules.alert import PAGE_LABELS
from inferwatch.pack.thresholds import Thresholds


def memory_pressure_panel(t: Thresholds) -> Any:
    return c.memory_chart(
        t,
        "Memory pressure",
        c.PRESSURE_TEXT + c.vram_text(t),
        [c.gpu_series(names(t).gpu_pressure)],
    )


def _worker_link(t: Thresholds) -> dict[str, Any]:
    return p.data_link(
        "Open worker ${__field.labels.worker}",
        f"/d/{t.pack.dashboard_uids.worker}?${{__url_time_range}}&${{datasource:queryparam}}"
        "&var-worker=${__field.labels.worker}",
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
            Query(f"sum by ({by}) ({contract.QUEUE_DEPTH}{worker_sel()})", "{{worker}} waiting"),
            Query(
                f"max by ({by}) ({contract.MAX_NUM_SEQS}{c.worker_only()})",
                "{{worker}} max_num_seqs",
            ),
        ],
        unit="short",
        min_value=0,
        links=[_worker_link(t)],
    )


def bottleneck_expr(t: Thresholds) -> str:
    """1 compute-bound, 2 memory-bound, 0 neither, per GPU (field guide 6.1).

    Compute-bound: utilization at or above the scale-review line while requests
    wait on a worker of that GPU (through ``inferwatch_worker_gpu_info``).
    Memory-bound: memory pressure (the workers' KV cache, else NVML) at or above
    the squeeze line with utilization below the healthy band.
    """
    n = names(t)
    util = f"{contract.GPU_UTILIZATION_RATIO}{gpu_sel()}"
    vram = f"{n.gpu_pressure}{gpu_sel()}"
    queue = (
        "max by (job, instance, gpu, uuid) ("
        f"max by (job, instance, worker) ({contract.QUEUE_DEPTH}{host_sel()}) "
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
        f"Compute-bound: utilization at or above {c.pct(busy)} while requests wait on a "
        f"worker of that GPU; memory-bound: memory pressure (KV cache, else VRAM) at or "
        f"above {c.pct(t.vram.squeeze_above)} while utilization "
        f"is below {c.pct(modest)} (field guide 6.1). Compute-bound asks for scale-out or "
        "rate limiting; memory-bound asks for prefix caching, an FP8 KV cache or a lower "
        "--max-num-seqs, not for more GPUs.",
        [Query(bottleneck_expr(t), c.gpu_label())],
        mappings=p.value_mappings(
            {
                0: ("balanced", "green"),
                1: ("compute-bound", "orange"),
                2: ("memory-bound", "purple"),
            }
        ),
        links=[c.gpu_link(t)],
    )


def alerts_panel(t: Thresholds) -> Any:
    # ALERTS carries the alert's labels, not its annotations: the runbook link is
    # rebuilt from the alert name, and opens the page on the row's labels (Grafana
    # percent-encodes a data link's variables). Alerts aggregated above one host lose `job` or
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
                t.pack.runbook_page("${__data.fields.alertname}")
                + "?"
                + "&".join(f"{k}=${{__data.fields.{k}}}" for k in PAGE_LABELS),
                new_tab=True,
            )
        ],
        sort_by="severity",
    )


def now_section(t: Thresholds) -> Section:
    return Section(
        "Fleet now",
        p.line(
            c.mean_utilization_stat(t, "Mean GPU utilization"),
            c.memory_stat(
                t,
                "Highest memory pressure",
                "Memory pressure of the fullest selected GPU: the KV cache of its workers, "
                "else NVML's used memory. " + c.vram_text(t),
                f"max({names(t).gpu_pressure}{gpu_sel()})",
            ),
            p.stat(
                "Fleet requests per second",
                "Finished requests per second across the selected workers.",
                [
                    Query(
                        f"sum({S.REQUEST_RATE.render(selector=worker_sel(), window=c.RATE_WINDOW)})"
                    )
                ],
                unit="reqps",
            ),
            p.count_stat(
                "Workers up",
                "Workers whose last engine scrape succeeded, out of those selected.",
                f"sum({contract.TARGET_UP}{c.worker_only()})",
            ),
            c.gpus_up_stat(),
            p.count_stat(
                "Alerts firing",
                "Inference alerts firing now (details in the table below).",
                'count(ALERTS{alertstate="firing", alertname=~"Inference.*", '
                'job=~"$job|", instance=~"$instance|"}) or vector(0)',
                thresholds=steps("green", (1, "red")),
            ),
            h=4,
        ),
    )


def lifelines_section(t: Thresholds) -> Section:
    return Section(
        "The four lifelines: GPU utilization, VRAM level, queue depth, latency",
        p.line(c.gpu_utilization_panel(t), memory_pressure_panel(t), queue_panel(t), h=8),
        c.slo_latency_line(t, "model"),
    )


def bottleneck_section(t: Thresholds) -> Section:
    return Section(
        "Where the bottleneck is",
        p.line(c.gpu_state_panel(t), bottleneck_panel(t), h=8),
    )


def alerts_section(t: Thresholds) -> Section:
    return Section("Alerts", p.line(alerts_panel(t), h=8))


def traffic_section(t: Thresholds) -> Section:
    requests = c.rates_panel(
        "Requests per second",
        "Finished requests per second (every finish reason).",
        "model",
        [(S.REQUEST_RATE, "")],
        unit="reqps",
    )
    return Section("Traffic and errors", c.traffic_line(t, "model", requests))


def description(t: Thresholds) -> str:
    low, high = t.gpu_utilization.healthy_band
    return (
        "Fleet view of LLM inference: the four lifelines (GPU utilization "
        f"{c.pct(low)}-{c.pct(high)} healthy, VRAM level, queue "
        "depth, TTFT/TPOT), where the bottleneck is, firing alerts, throughput and errors."
    )


DASHBOARD = Dashboard(
    key="overview",
    title="Inference overview",
    description=description,
    rows=(
        now_section,
        cost_section,
        lifelines_section,
        slo_row.section,
        bottleneck_section,
        alerts_section,
        traffic_section,
    ),
)
