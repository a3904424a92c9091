"""What the four dashboards share: selectors, threshold steps and texts from the
thresholds, the panels two dashboards show, and the dashboard itself: declared as data
(:class:`Dashboard`) and built in its frame (links, variables) by :func:`build`.

Imported only when dashboards are generated; everything else goes through
:mod:`inferwatch.pack.dashboards`.

Thresholds drawn on panels (utilization bands, VRAM lines, latency SLOs, the
error-ratio line) and recording-rule names all come from ``Thresholds``.
Every query filters on the dashboard variables: ``job`` and ``instance`` on
every selector, ``gpu`` on GPU series, ``model`` and ``worker`` on engine series.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from inferwatch.engines import contract
from inferwatch.pack import loops as L
from inferwatch.pack import signals as S
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.panels import (
    Line,
    Query,
    Section,
    Step,
    gpu_sel,
    host_sel,
    steps,
    worker_sel,
)
from inferwatch.pack.fmt import pct, quantile
from inferwatch.pack.fmt import spaced_secs as secs
from inferwatch.pack.names import RECORDED_HISTOGRAMS, TPOT, TTFT, WORKER, WORKER_KEY, names
from inferwatch.pack.thresholds import Thresholds

#: Tag shared by the four dashboards; the dashboard links list every dashboard with it.
TAG = "inferwatch"
#: the window of a rate on a panel: Grafana's, at least four scrape intervals
RATE_WINDOW = "$__rate_interval"


def worker_only(extra: str = "") -> str:
    """Selector for series of a worker that carry no ``model`` label (scrape health,
    process metrics, capacity), or carry it only when the engine told it."""
    return host_sel('worker=~"$worker"' + (", " + extra if extra else ""))


def gpu_label(legend: str = "") -> str:
    return "{{instance}} GPU {{gpu}}" + (f" {legend}" if legend else "")


def gpu_series(metric: str, legend: str = "") -> Query:
    """A GPU metric as it is, one line per selected GPU named by host and index."""
    return Query(f"{metric}{gpu_sel()}", gpu_label(legend))


#: a family drawn per GPU, with the word its lines carry in the legend ("" for none)
GpuLine = tuple[contract.Family, str]


def gpu_chart(title: str, description: str, unit: str, *lines: GpuLine, **options: Any) -> Any:
    """A time series of GPU families as they are, one line per selected GPU and family,
    from zero unless ``options`` say otherwise (they are :func:`panels.timeseries`')."""
    options.setdefault("min_value", 0)
    queries = [gpu_series(family.name, legend) for family, legend in lines]
    return p.timeseries(title, description, queries, unit=unit, **options)


def total_stat(
    title: str,
    description: str,
    total: str,
    family: contract.Family,
    selector: str,
    unit: str,
    **options: Any,
) -> Any:
    """A stat of one family's ``total`` (sum, max, min) over the selected series."""
    return p.stat(title, description, [Query(f"{total}({family}{selector})")], unit=unit, **options)


def info_table(
    title: str, description: str, family: contract.Family, selector: str, order: Sequence[str]
) -> Any:
    """An info family's series now as a table: one row per series, its labels as columns
    in ``order`` (the constant value and the job hidden)."""
    return p.table(
        title,
        description,
        [Query(f"{family}{selector}", "", instant=True, fmt="table")],
        unit="none",
        exclude=("Value", "job"),
        order=order,
    )


def utilization_steps(t: Thresholds) -> list[Step]:
    """Waste (blue), below the healthy band (yellow), healthy (green), scale review (red)."""
    u = L.utilization_lines(t)
    return steps(
        "blue",
        (u.waste, "yellow"),
        (u.healthy_low, "green"),
        (u.healthy_high, "orange"),
        (u.scale_review, "red"),
    )


def vram_steps(t: Thresholds) -> list[Step]:
    """Below the squeeze line (green), healthy squeeze (yellow), scale-out line (red)."""
    return steps("green", (t.vram.squeeze_above, "yellow"), (t.vram.scale_above, "red"))


def slo_steps(slo_seconds: float) -> list[Step]:
    return steps("green", (slo_seconds, "red"))


def util_text(t: Thresholds) -> str:
    u = L.utilization_lines(t)
    return (
        f"Bands: below {pct(u.waste)} is waste, {pct(u.healthy_low)}-{pct(u.healthy_high)} is "
        f"the healthy band, above {pct(u.scale_review)} calls for a scale-out review "
        "(field guide 6.1)."
    )


def vram_text(t: Thresholds) -> str:
    return (
        f"Lines: above {pct(t.vram.squeeze_above)} with a P99 under "
        f"{secs(t.vram.squeeze_p99_ok_seconds)} is a healthy squeeze; above "
        f"{pct(t.vram.scale_above)} with a rising queue, scale out or rate-limit "
        "(field guide 4.2)."
    )


def worker_buckets(t: Thresholds, metric: str, by: str = "") -> str:
    """Per-second bucket rates of the histogram ``metric`` by ``by`` and ``le``, from the
    agent's buckets; a worker without them (the engine's own histograms stored instead,
    ``export_histograms: false``) counts through the recorded per-worker bucket rate,
    which reads the engine's series."""
    buckets = S.bucket_rate(contract.BY_NAME[metric])
    if metric not in RECORDED_HISTOGRAMS:
        return buckets.render(selector=worker_sel(), window=RATE_WINDOW, by=by)
    per_worker = ", ".join(buckets.group(WORKER))
    return (
        f"sum by ({', '.join(buckets.group(by))}) (\n"
        f"    {buckets.render(selector=worker_sel(), window=RATE_WINDOW, by=WORKER)}\n"
        f"  or on ({WORKER_KEY})\n"
        f"    sum by ({per_worker}) ({names(t).histogram_rate(metric)}{worker_sel()})\n"
        f")"
    )


def quantile_queries(t: Thresholds, metric: str, by: str, legend: str) -> list[Query]:
    """P50/P95/P99 per ``by`` (:func:`worker_buckets`)."""
    buckets = worker_buckets(t, metric, by)
    return [
        Query(f"histogram_quantile({q}, {buckets})", f"{legend} {quantile(q)}")
        for q in (0.5, 0.95, 0.99)
    ]


def rate_query(signal: S.Signal, by: str, suffix: str = "", selector: str | None = None) -> Query:
    """A counter's ``signal`` (a rate or an increase) per :data:`RATE_WINDOW`, summed by
    the labels ``by``; the legend names them (then ``suffix``). ``selector`` defaults to
    the worker selector."""
    sel = worker_sel() if selector is None else selector
    legend = " ".join("{{" + label + "}}" for label in by.split(", "))
    return Query(signal.render(selector=sel, window=RATE_WINDOW, by=by, agg="sum"), legend + suffix)


def mean_utilization_stat(t: Thresholds, title: str) -> Any:
    """The selected GPUs' mean utilization (the overview and the GPU dashboard)."""
    return p.stat(
        title,
        "Mean utilization of the selected GPUs. " + util_text(t),
        [Query(f"avg({contract.GPU_UTILIZATION_RATIO}{gpu_sel()})")],
        unit="percentunit",
        thresholds=utilization_steps(t),
    )


def memory_stat(t: Thresholds, title: str, description: str, expr: str) -> Any:
    """A memory level coloured by the squeeze and scale lines (:func:`vram_steps`)."""
    return p.stat(title, description, [Query(expr)], unit="percentunit", thresholds=vram_steps(t))


def gpus_up_stat() -> Any:
    """How many of the selected GPUs answer NVML (the overview and the GPU dashboard)."""
    return p.count_stat(
        "GPUs up",
        "GPUs that answer NVML, out of those selected.",
        f"sum({contract.GPU_UP}{gpu_sel()})",
    )


def ratio_chart(
    title: str,
    description: str,
    queries: Sequence[Query],
    thresholds: Sequence[Step] = (),
    threshold_style: str = "off",
    fill: int = 10,
) -> Any:
    """A share from 0 to 100%, over threshold steps where given."""
    return p.timeseries(
        title,
        description,
        queries,
        unit="percentunit",
        min_value=0,
        max_value=1,
        thresholds=thresholds,
        threshold_style=threshold_style,
        fill=fill,
    )


def utilization_chart(t: Thresholds, title: str, description: str, queries: Sequence[Query]) -> Any:
    """GPU utilization over the shaded threshold bands (:func:`utilization_steps`)."""
    return ratio_chart(title, description, queries, utilization_steps(t), "line+area", 0)


def memory_chart(
    t: Thresholds, title: str, description: str, queries: Sequence[Query], *, fill: int = 10
) -> Any:
    """A memory level with the squeeze and scale lines dashed (:func:`vram_steps`)."""
    return ratio_chart(title, description, queries, vram_steps(t), "dashed", fill)


def gpu_utilization_panel(t: Thresholds) -> Any:
    return utilization_chart(
        t,
        "GPU utilization",
        "Share of time a kernel ran on each GPU (NVML utilization). " + util_text(t),
        [gpu_series(contract.GPU_UTILIZATION_RATIO.name)],
    )


PRESSURE_TEXT = (
    "Memory pressure per GPU: the KV-cache usage of the workers on it where their engine "
    "exports one, else NVML's used memory. Engines that pre-allocate (vLLM reserves "
    "--gpu-memory-utilization of the card at start) keep NVML's level flat whatever the "
    "load, so the KV cache is the level that moves. "
)


def gpu_link(t: Thresholds) -> dict[str, Any]:
    return p.data_link(
        "Open GPU ${__field.labels.gpu} of ${__field.labels.instance}",
        f"/d/{t.pack.dashboard_uids.gpu}?${{__url_time_range}}&${{datasource:queryparam}}"
        "&var-instance=${__field.labels.instance}&var-gpu=${__field.labels.gpu}",
    )


def latency_panel(t: Thresholds, name: str, metric: str, slo: float | None, by: str) -> Any:
    what = {
        "TTFT": "Time to first token",
        "TPOT": "Time per output token",
        "End-to-end latency": "Request latency from arrival to last token",
        "Queue time": "Time a request waited before it was scheduled",
    }[name]
    slo_text = f" The dashed line is the P99 SLO, {secs(slo)}." if slo is not None else ""
    return p.timeseries(
        f"{name} P50 / P95 / P99",
        f"{what}: P50, P95 and P99 per {by}, from the histogram buckets (the agent's, or "
        f"the engine's own where the agent does not re-export them).{slo_text}",
        quantile_queries(t, metric, by, "{{" + by.split(",")[0] + "}}"),
        unit="s",
        min_value=0,
        thresholds=slo_steps(slo) if slo is not None else (),
        threshold_style="dashed" if slo is not None else "off",
        fill=0,
    )


def slo_latency_line(t: Thresholds, by: str) -> Line:
    """TTFT and TPOT quantiles per ``by``, each with its P99 SLO line, side by side."""
    return p.line(
        latency_panel(t, "TTFT", TTFT, t.ttft.p99_slo_seconds, by),
        latency_panel(t, "TPOT", TPOT, t.tpot.p99_slo_seconds, by),
        h=8,
    )


def gpu_state_panel(t: Thresholds) -> Any:
    return p.state_timeline(
        "GPU state",
        f"The recording rule {names(t).gpu_state} per GPU: idle (utilization "
        f"below {pct(t.gpu_utilization.idle_below)}), healthy, squeeze (memory pressure above "
        f"{pct(t.vram.squeeze_above)} with P99 under {secs(t.vram.squeeze_p99_ok_seconds)}: "
        f"no action) or pressure (above {pct(t.vram.scale_above)} with the queue of a worker "
        f"on that GPU rising, or above {pct(t.vram.squeeze_above)} with its P99 at or above "
        f"{secs(t.vram.squeeze_p99_ok_seconds)}). Memory pressure is the KV-cache usage of "
        "the GPU's workers, else NVML's used memory.",
        [gpu_series(names(t).gpu_state)],
        mappings=p.value_mappings(
            {
                0: ("idle", "blue"),
                1: ("healthy", "green"),
                2: ("squeeze", "yellow"),
                3: ("pressure", "red"),
            }
        ),
        links=[gpu_link(t)],
    )


def error_ratio_panel(t: Thresholds) -> Any:
    return p.timeseries(
        "Error ratio",
        "Share of requests that ended in an error or were rejected, per worker (recording "
        f"rule over {t.pack.window}). The dashed line is the alert threshold, "
        f"{pct(t.errors.ratio_above)}.",
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


def rates_panel(
    title: str,
    description: str,
    by: str,
    counters: Sequence[tuple[S.Signal, str]],
    *,
    unit: str,
    axis_label: str = "",
) -> Any:
    """Per-second rates of worker counters summed by ``by``: a (rate signal, legend
    suffix) pair for each line."""
    return p.timeseries(
        title,
        description,
        [rate_query(counter, by, suffix) for counter, suffix in counters],
        unit=unit,
        axis_label=axis_label,
        min_value=0,
    )


def traffic_line(t: Thresholds, by: str, requests: Any) -> Line:
    """The traffic row of the overview (``by`` model) and of the worker dashboard (``by``
    worker): ``requests``, then tokens, errors and rejections, a quarter of the width each."""
    tokens = rates_panel(
        "Tokens per second",
        "Prompt tokens processed (prefill) and tokens generated (decode) per second.",
        by,
        [
            (S.PROMPT_TOKEN_RATE, " prompt"),
            (S.GENERATION_TOKEN_RATE, " generated"),
        ],
        unit="short",
        axis_label="tokens/s",
    )
    rejected = rates_panel(
        "Rejected requests",
        "Requests refused at admission (HTTP 503 from queue limits), per second.",
        by,
        [(S.REJECT_RATE, "")],
        unit="reqps",
    )
    return p.line(requests, tokens, error_ratio_panel(t), rejected, h=8)


@dataclass(frozen=True)
class Dashboard:
    """A generated dashboard as data: ``key`` names its UID in ``pack.dashboard_uids``
    and is its tag beside the pack's own; ``description`` is a text or is written from
    the thresholds; each of ``rows`` builds a section from the thresholds, top to bottom
    (one that returns None is left out)."""

    key: str
    title: str
    description: str | Callable[[Thresholds], str]
    rows: Sequence[Callable[[Thresholds], Section | None]]
    time_from: str = "now-1h"
    refresh: str = "30s"


def build(spec: Dashboard, t: Thresholds) -> dict[str, Any]:
    """The dashboard's JSON, as Python values."""
    description = spec.description if isinstance(spec.description, str) else spec.description(t)
    sections = [section for row in spec.rows if (section := row(t)) is not None]
    return p.dashboard_json(
        title=spec.title,
        uid=getattr(t.pack.dashboard_uids, spec.key),
        description=description,
        tags=[TAG, spec.key],
        time_from=spec.time_from,
        refresh=spec.refresh,
        links=[
            p.dashboards_link(
                TAG,
                "Inference dashboards",
                "The other inferwatch dashboards, same time range and variables",
            )
        ],
        variables=p.standard_variables(),
        panels=p.layout(sections),
    )
