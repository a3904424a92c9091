"""The report's daily figures as CSV: one row per (day, subject, metric)."""

from __future__ import annotations

import csv
import io

from inferwatch.pack import fmt
from inferwatch.report import words
from inferwatch.report.cost import CostSection
from inferwatch.report.model import Daily
from inferwatch.report.summary import Report, ScopeFigures

CSV_COLUMNS = ("date", "period", "scope", "model", "worker", "gpu", "uuid", "metric", "value")


def rows_for(
    report: Report,
    scope: str,
    model: str,
    worker: str,
    gpu: str,
    uuid: str,
    metric: str,
    daily: Daily | None,
) -> list[list[str]]:
    if daily is None:
        return []
    p = report.period
    out = []
    for i, v in enumerate(daily):
        if v is None:
            continue  # no data is a missing row, never a zero
        out.append(
            [
                words.day_date(p, i),
                "current" if i >= p.days else "previous",
                scope,
                model,
                worker,
                gpu,
                uuid,
                metric,
                repr(float(v)),
            ]
        )
    return out


def csv_name(report: Report) -> str:
    """The mailed CSV's file name, after the period's last day as the CSV dates it."""
    p = report.period
    return f"inferwatch-daily-{words.day_date(p, 2 * p.days - 1)}.csv"


def _scope_rows(report: Report, s: ScopeFigures) -> list[list[str]]:
    rows = []
    args = (report, s.kind, s.model, s.worker, "", "")
    rows += rows_for(*args, "requests", s.requests_daily)
    rows += rows_for(*args, "prompt_tokens", s.prompt_daily)
    rows += rows_for(*args, "generation_tokens", s.generation_daily)
    for name, lat in s.latency.items():
        for q in (0.5, 0.95, 0.99):
            rows += rows_for(*args, f"{name}_{fmt.quantile(q).lower()}_seconds", lat.daily[q])
        if lat.attainment_daily is not None:
            rows += rows_for(*args, f"{name}_slo_attainment_ratio", lat.attainment_daily)
    rows += rows_for(*args, "queue_depth_peak", s.queue_peak_daily)
    rows += rows_for(*args, "queue_over_capacity_seconds", s.over_capacity_daily)
    return rows


def csv_text(report: Report, cost: CostSection | None = None) -> str:
    """Daily figures, one row per (day, subject, metric); see docs/report.md for the metrics."""
    rows: list[list[str]] = cost_csv_rows(report, cost) if cost is not None else []
    for m in report.models:
        rows += _scope_rows(report, m.total)
        for w in m.workers:
            rows += _scope_rows(report, w)
    for g in report.gpus:
        args = (report, "gpu", ",".join(g.models), ",".join(g.workers), g.label, g.uuid)
        for stat, daily in g.util_daily.items():
            rows += rows_for(*args, f"gpu_utilization_{stat}_ratio", daily)
        for band in ("waste", "low", "healthy", "scale_review"):
            rows += rows_for(*args, f"gpu_time_{band}_ratio", g.band_daily.get(band))
        rows += rows_for(*args, "vram_peak_ratio", g.vram_peak_daily)
        if g.pressure_from == "kv_cache":
            rows += rows_for(*args, "kv_cache_usage_peak_ratio", g.pressure_daily)
        rows += rows_for(*args, "vram_peak_bytes", g.vram_bytes_daily)
    rows.sort(key=lambda r: (r[0], r[2], r[3], r[4], r[5], r[7]))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(rows)
    return buf.getvalue()


def cost_csv_rows(report: Report, c: CostSection) -> list[list[str]]:
    """Daily rows of the cost section (metrics gpu_hours_<state>, cost_<state>_<currency>,
    energy_kwh); scope ``model``, ``cluster`` for unallocated GPUs and all GPUs' energy, or
    ``gpu`` (its uuid) for one GPU's energy."""
    rows: list[list[str]] = []
    for (model, state), daily in sorted(c.daily_hours.items()):
        scope = "model" if model else "cluster"
        rows += rows_for(report, scope, model, "", "", "", f"gpu_hours_{state}", daily)
    for (model, state), daily in sorted(c.daily_money.items()):
        scope = "model" if model else "cluster"
        metric = f"cost_{state}_{(c.currency or '').lower()}"
        rows += rows_for(report, scope, model, "", "", "", metric, daily)
    for model, daily in sorted(c.daily_kwh.items()):
        rows += rows_for(
            report, "model" if model else "cluster", model, "", "", "", "energy_kwh", daily
        )
    for uuid, daily in sorted(c.daily_gpu_kwh.items()):
        rows += rows_for(report, "gpu", "", "", "", uuid, "energy_kwh", daily)
    return rows
