"""The weekly trends dashboard (``inference-weekly-trends``): field guide 6.2's
weekly review as seven days of P99 latency, GPU utilization and memory peak."""

from __future__ import annotations

from inferwatch.pack import loops as L
from inferwatch.pack import signals as S
from inferwatch.pack.dashboards import common as c
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.common import Dashboard
from inferwatch.pack.dashboards.panels import Query, Section, gpu_sel, steps, worker_sel
from inferwatch.pack.fmt import pct, quantile, spaced_secs
from inferwatch.pack.names import E2E, TPOT, TTFT, names
from inferwatch.pack.thresholds import Thresholds

#: The GPU utilization series every weekly panel reads, and its mean per interval.
_UTIL = S.GPU_UTILIZATION.render(selector=gpu_sel())
_UTIL_MEAN = S.GPU_UTILIZATION_MEAN.render(selector=gpu_sel(), window="$__interval")


def _band(lo: float | None, hi: float | None) -> str:
    """The share of GPU time with utilization in [lo, hi) over the dashboard's range."""
    parts = []
    if lo is not None:
        parts.append(f"({_UTIL} >= bool {lo:g})")
    if hi is not None:
        parts.append(f"({_UTIL} < bool {hi:g})")
    return f"avg(avg_over_time(({' * '.join(parts)})[$__range:1m]))"


def three_section(t: Thresholds) -> Section:
    ttft_slo = t.ttft.p99_slo_seconds
    ttft_p99 = names(t).quantile("worker", "ttft", "p99")
    return Section(
        "The week on one panel",
        p.line(
            p.timeseries(
                "P99 latency, GPU utilization and memory peak",
                "The weekly review of field guide 6.2, three curves on one scale: the worst "
                f"worker's TTFT P99 as a share of its SLO ({spaced_secs(ttft_slo)}; above 100% "
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
                    Query(f"avg({_UTIL_MEAN})", "GPU utilization (mean)"),
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
            h=10,
        ),
    )


def alone_section(t: Thresholds) -> Section:
    ttft_slo = t.ttft.p99_slo_seconds
    return Section(
        "Each curve alone",
        p.line(
            *(
                p.timeseries(
                    f"{name} P99 by model",
                    f"The worst worker's {name if name.isupper() else name.lower()} P99 per model over the week (recording rule "
                    f"over {t.pack.window}, peak per interval)."
                    + (f" Dashed: the SLO, {spaced_secs(slo)}." if slo is not None else ""),
                    [
                        Query(
                            f"max by (model) (max_over_time("
                            f"{names(t).quantile('worker', metric.removeprefix('inferwatch_').removesuffix('_seconds'), 'p99')}{worker_sel()}[$__interval]))",
                            "{{model}}",
                        )
                    ],
                    unit="s",
                    min_value=0,
                    thresholds=c.slo_steps(slo) if slo is not None else (),
                    threshold_style="dashed" if slo is not None else "off",
                    fill=0,
                )
                for name, metric, slo in (
                    ("TTFT", TTFT, ttft_slo),
                    ("TPOT", TPOT, t.tpot.p99_slo_seconds),
                    ("End-to-end latency", E2E, None),
                )
            ),
            h=8,
        ),
        p.line(
            c.utilization_chart(
                t,
                "GPU utilization distribution",
                "Spread of the GPUs' utilization over the week: 10th, 50th and 90th "
                "percentile and the maximum across GPUs of each interval's mean. " + c.util_text(t),
                [
                    *[
                        Query(
                            f"quantile({q:g}, {_UTIL_MEAN})",
                            quantile(q),
                        )
                        for q in (0.1, 0.5, 0.9)
                    ],
                    Query(f"max({_UTIL_MEAN})", "max"),
                ],
            ),
            p.stat(
                "Time in each utilization band",
                "Share of GPU time over the dashboard's range spent in each band of the "
                "thresholds (sampled every minute). " + c.util_text(t),
                _band_queries(t),
                unit="percentunit",
                graph=False,
                calc="lastNotNull",
                text_mode="value_and_name",
            ),
            h=8,
        ),
        p.line(
            c.memory_chart(
                t,
                "Memory peak per GPU",
                "Highest memory pressure of each GPU per interval over the week, named by "
                "its source: KV cache (the usage of the workers on it, where their engine "
                "exports one) or VRAM (NVML's level, else). " + c.PRESSURE_TEXT + c.vram_text(t),
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
                        c.gpu_label("{{pressure_from}}"),
                    )
                ],
                fill=0,
            ),
            h=8,
        ),
    )


def _band_queries(t: Thresholds) -> list[Query]:
    waste, low, high, review = L.utilization_lines(t)
    out = [
        Query(_band(None, waste), f"waste (below {pct(waste)})"),
        Query(_band(waste, low), f"below healthy ({pct(waste)}-{pct(low)})"),
        Query(_band(low, high), f"healthy ({pct(low)}-{pct(high)})"),
    ]
    if high < review:
        out.append(Query(_band(high, review), f"above healthy ({pct(high)}-{pct(review)})"))
    out.append(Query(_band(review, None), f"scale review ({pct(review)} and above)"))
    return out


DASHBOARD = Dashboard(
    key="trends",
    title="Inference weekly trends",
    description="Seven days of P99 latency, GPU utilization distribution and memory peak: the "
    "weekly review table of field guide 6.2 as dashboards, the three curves together and "
    "each alone.",
    rows=(three_section, alone_section),
    time_from="now-7d",
    refresh="",
)
