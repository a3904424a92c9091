"""The report as plain text (the mail's text part and ``--format text``)."""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.pack import fmt
from inferwatch.report import words
from inferwatch.report.budget import BudgetFigures
from inferwatch.report.cost import CostSection
from inferwatch.report.model import LATENCY_NAMES
from inferwatch.report.render.budgets import budget_lines
from inferwatch.report.render.common import LEVELS, period_sentence, text_table, title, with_delta
from inferwatch.report.render.cost import cost_text
from inferwatch.report.render.whatif import whatif_lines
from inferwatch.report.summary import BAND_NAMES, BANDS, ModelFigures, Report
from inferwatch.report.whatif import WhatIfSection

MODEL_HEAD = [
    "worker",
    "requests",
    "tokens in",
    "tokens out",
    "TTFT P99",
    "TPOT P99",
    "E2E P99",
    "queue peak",
    "over capacity",
]


def text(
    report: Report,
    cost: CostSection | None = None,
    budgets: Sequence[BudgetFigures] = (),
    whatif: WhatIfSection | None = None,
) -> str:
    out = [title(report), "=" * len(title(report)), ""]
    out.append(period_sentence(report))
    out.append("The HTML version of this mail has the charts; the daily figures are in the CSV.")
    if cost is not None:
        out += ["", *cost_text(cost)]
    out += ["", "WHAT TO LOOK AT", ""]
    for f in report.findings:
        out.append(f"[{LEVELS.get(f.level, LEVELS['watch'])[0]}] {f.title} ({f.loop})")
        out.append(f"    {f.evidence}")
        out.append(f"    -> {f.action}")
        out.append("")
    for m in report.models:
        out += _model_lines(report, m)
    out += _gpu_lines(report)
    out += budget_lines(budgets)
    out += whatif_lines(whatif)
    out += _alert_lines(report)
    if report.notes:
        out += ["LEFT OUT", ""]
        out += [f"  - {n}" for n in report.notes]
        out.append("")
    return "\n".join(out)


def _model_lines(report: Report, m: ModelFigures) -> list[str]:
    """A model's table (its workers, their total) and its latency per day."""
    out = [f"MODEL {m.total.model}", ""]
    rows = []
    scopes = list(m.workers) + ([m.total] if len(m.workers) > 1 else [])
    for s in scopes:
        row = [
            s.worker or "all workers",
            with_delta(fmt.count(s.requests.current), s.requests, "rel"),
            with_delta(fmt.count(s.prompt.current), s.prompt, "rel"),
            with_delta(fmt.count(s.generation.current), s.generation, "rel"),
        ]
        for n in ("ttft", "tpot", "e2e"):
            lat = s.latency.get(n)
            row.append(
                with_delta(fmt.seconds(lat.week[0.99].current), lat.week[0.99], "rel")
                if lat
                else fmt.DASH
            )
        row.append(fmt.count(s.queue_peak.current) if s.queue_peak else fmt.DASH)
        row.append(fmt.duration(s.over_capacity.current) if s.over_capacity else fmt.DASH)
        rows.append(row)
    out.append(text_table(MODEL_HEAD, rows))
    out.append("")
    names = [n for n in ("ttft", "tpot", "e2e") if n in m.total.latency]
    if names:
        p = report.period
        rows = []
        for i in range(p.days, 2 * p.days):
            row = [words.day_label(p, i)]
            for n in names:
                row += [fmt.seconds(m.total.latency[n].daily[q][i]) for q in (0.5, 0.95, 0.99)]
            rows.append(row)
        head = ["day"]
        for n in names:
            head += [f"{LATENCY_NAMES[n]} P50", "P95", "P99"]
        out.append(text_table(head, rows))
        out.append("")
    return out


def _gpu_lines(report: Report) -> list[str]:
    if not report.gpus:
        return []
    rows = []
    for g in report.gpus:
        mean = g.util.get("mean")
        rows.append(
            [
                g.label,
                ", ".join(g.workers) or fmt.DASH,
                with_delta(fmt.percent(mean.current) if mean else fmt.DASH, mean, "pts"),
                fmt.percent(g.util["p90"].current) if "p90" in g.util else fmt.DASH,
                *[fmt.percent(g.bands[b].current) if b in g.bands else fmt.DASH for b in BANDS],
                with_delta(
                    f"{fmt.percent(g.pressure_peak.current)} {g.memory_source}",
                    g.pressure_peak,
                    "pts",
                ),
            ]
        )
    head = ["gpu", "serves", "busy avg", "P90", *[BAND_NAMES[b] for b in BANDS], "memory peak"]
    return ["GPUS", "", text_table(head, rows), ""]


def _alert_lines(report: Report) -> list[str]:
    out = ["ALERTS", ""]
    if report.alerts:
        out.append(
            text_table(
                ["alert", "severity", "fired", "time firing", "on"],
                [
                    [
                        a.alertname,
                        a.severity,
                        with_delta(f"{a.firings.current or 0:.0f}", a.firings, "abs_count"),
                        with_delta(fmt.duration(a.seconds.current), a.seconds, "abs_seconds"),
                        ", ".join(a.subjects),
                    ]
                    for a in report.alerts
                ],
            )
        )
    else:
        out.append(f"  No alert fired in either {words.period_noun(report.period.days)}.")
    out.append("")
    return out
