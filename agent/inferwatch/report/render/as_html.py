"""The report as one HTML page (mail and file).

The page refers to each chart through ``image_src(chart)``: a ``cid:`` URL in
the mail, a file name next to the HTML on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from html import escape

from inferwatch.pack import fmt
from inferwatch.report import words
from inferwatch.report.budget import BudgetFigures
from inferwatch.report.charts import Chart
from inferwatch.report.cost import CostSection
from inferwatch.report.model import LATENCY_NAMES, SLO_TARGET, Change, p99_slo
from inferwatch.report.render.budgets import budget_section
from inferwatch.report.render.common import (
    LEVELS,
    current_and_previous,
    period_sentence,
    period_text,
    title,
)
from inferwatch.report.render.cost import cost_html
from inferwatch.report.render.htmlkit import (
    BAD,
    FONT,
    INK,
    LINE,
    MUTED,
    SOFT,
    ImageSrc,
    delta_html,
    h2,
    h3,
    html_table,
    img,
    para,
    td,
)
from inferwatch.report.render.whatif import whatif_section
from inferwatch.report.summary import (
    BAND_NAMES,
    BANDS,
    GpuFigures,
    ModelFigures,
    Report,
    ScopeFigures,
    band_ranges,
)
from inferwatch.report.whatif import WhatIfSection


def _kpi(label: str, value: str, change: Change | None, kind: str, better: str | None) -> str:
    return (
        f'<td style="padding:10px 12px;background:{SOFT};border:4px solid #fff;'
        f'vertical-align:top;width:14%">'
        f'<div style="font-size:11px;color:{MUTED};text-transform:uppercase;'
        f'letter-spacing:.03em">{escape(label)}</div>'
        f'<div style="font-size:18px;font-weight:600;color:{INK};margin:2px 0">'
        f"{escape(value)}</div>{delta_html(change, kind, better)}</td>"
    )


def _fleet_kpis(report: Report) -> str:
    cells = []
    f = report.fleet
    if f is not None:
        cells.append(_kpi("Requests", fmt.count(f.requests.current), f.requests, "rel", None))
        cells.append(_kpi("Tokens in", fmt.count(f.prompt.current), f.prompt, "rel", None))
        cells.append(_kpi("Tokens out", fmt.count(f.generation.current), f.generation, "rel", None))
        for name in ("ttft", "e2e"):
            if name in f.latency:
                p99 = f.latency[name].week[0.99]
                cells.append(
                    _kpi(
                        f"{LATENCY_NAMES[name]} P99", fmt.seconds(p99.current), p99, "rel", "lower"
                    )
                )
                break
    utils = [g.util["mean"] for g in report.gpus if "mean" in g.util]
    if utils:
        cur = [c.current for c in utils if c.current is not None]
        prev = [c.previous for c in utils if c.previous is not None]
        avg = Change(sum(cur) / len(cur) if cur else None, sum(prev) / len(prev) if prev else None)
        cells.append(_kpi("GPU busy", fmt.percent(avg.current), avg, "pts", None))
    # the memory peak: KV cache where the engine exports it (NVML sits at a pre-allocating
    # engine's reservation), NVML's VRAM level else
    peaks = [g.pressure_peak for g in report.gpus]
    if peaks:
        cur = [c.current for c in peaks if c.current is not None]
        prev = [c.previous for c in peaks if c.previous is not None]
        top = Change(max(cur) if cur else None, max(prev) if prev else None)
        cells.append(_kpi("Memory peak", fmt.percent(top.current), top, "pts", "lower"))
    firings = Change(
        sum(a.firings.current or 0 for a in report.alerts),
        sum(a.firings.previous or 0 for a in report.alerts),
    )
    cells.append(_kpi("Alerts fired", f"{firings.current:.0f}", firings, "abs_count", "lower"))
    return (
        f'<table role="presentation" cellspacing="0" cellpadding="0" style="width:100%;'
        f'border-collapse:collapse;margin:14px 0 6px"><tr>{"".join(cells)}</tr></table>'
    )


def _findings(report: Report) -> str:
    items = []
    for f in report.findings:
        label, color, bg = LEVELS.get(f.level, LEVELS["watch"])
        items.append(
            f'<tr><td style="padding:10px 10px 10px 0;vertical-align:top;width:64px">'
            f'<span style="display:inline-block;padding:2px 7px;border-radius:10px;'
            f"background:{bg};color:{color};font-size:10px;font-weight:700;"
            f'letter-spacing:.05em">{label}</span></td>'
            f'<td style="padding:10px 0;border-bottom:1px solid {LINE};vertical-align:top">'
            f'<div style="font-size:14px;font-weight:600;color:{INK}">{escape(f.title)}'
            f' <span style="font-weight:400;font-size:11px;color:{MUTED}">· {escape(f.loop)}'
            f"</span></div>"
            f'<div style="font-size:13px;color:{INK};margin:3px 0;line-height:1.45">'
            f"{escape(f.evidence)}</div>"
            f'<div style="font-size:12px;color:{MUTED};line-height:1.45">→ {escape(f.action)}'
            f"</div></td></tr>"
        )
    return (
        f'<table role="presentation" cellspacing="0" cellpadding="0" '
        f'style="width:100%;border-collapse:collapse">{"".join(items)}</table>'
    )


def _scope_row(s: ScopeFigures, bold: bool) -> str:
    def cell(
        show: Callable[[float | None], str], change: Change | None, kind: str, better: str | None
    ) -> str:
        """A figure and its change against the week before; a dash where the scope has none."""
        if change is None:
            return td(fmt.DASH, bold=bold)
        return td(show(change.current), change, kind, better, bold=bold)

    lat = {name: s.latency.get(name) for name in ("ttft", "tpot", "e2e")}
    cells = [
        td(s.worker or "all workers", bold=bold, align="left"),
        cell(fmt.count, s.requests, "rel", None),
        cell(fmt.count, s.prompt, "rel", None),
        cell(fmt.count, s.generation, "rel", None),
        *(
            cell(fmt.seconds, None if x is None else x.week[0.99], "rel", "lower")
            for x in lat.values()
        ),
        *(
            cell(
                partial(fmt.percent, digits=1), None if x is None else x.attainment, "pts", "higher"
            )
            for x in (lat["ttft"], lat["tpot"])
        ),
        cell(fmt.count, s.queue_peak, "abs_count", "lower"),
        cell(fmt.duration, s.over_capacity, "abs_seconds", "lower"),
    ]
    return "<tr>" + "".join(cells) + "</tr>"


def _daily_latency(report: Report, m: ModelFigures) -> str:
    p = report.period
    names = [n for n in ("ttft", "tpot", "e2e") if n in m.total.latency]
    head = ["Day", "Requests"]
    for n in names:
        head += [f"{LATENCY_NAMES[n]} P50", "P95", "P99"]
    rows = []
    for i in range(p.days, 2 * p.days):
        cells = [
            td(words.day_label(p, i), align="left"),
            td(fmt.count(m.total.requests_daily[i])),
        ]
        for n in names:
            lat = m.total.latency[n]
            for q in (0.5, 0.95, 0.99):
                v = lat.daily[q][i]
                over = lat.slo is not None and q == 0.99 and v is not None and v > lat.slo
                cell = td(fmt.seconds(v))
                if over:
                    cell = cell.replace(f"color:{INK}", "").replace(
                        "font-weight:400", f"font-weight:600;color:{BAD}"
                    )
                cells.append(cell)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    this, last = current_and_previous(report)
    for label, pick in ((this, "current"), (last, "previous")):
        cells = [
            td(label, bold=True, align="left"),
            td(fmt.count(getattr(m.total.requests, pick)), bold=True),
        ]
        for n in names:
            for q in (0.5, 0.95, 0.99):
                cells.append(td(fmt.seconds(getattr(m.total.latency[n].week[q], pick)), bold=True))
        rows.append(f'<tr style="background:{SOFT}">' + "".join(cells) + "</tr>")
    return html_table(head, rows)


def _model_section(report: Report, m: ModelFigures, charts: dict[str, Chart], src: ImageSrc) -> str:
    from inferwatch.report.charts import _slug

    t = m.total
    gpus = [g.label for g in report.gpus if g.uuid in m.gpus]
    sub = (
        f"engine {t.engine or 'unknown'} · {len(m.workers)} worker"
        f"{'s' if len(m.workers) != 1 else ''}" + (f" · GPUs: {', '.join(gpus)}" if gpus else "")
    )
    parts = [h2(f"Model {t.model}", sub)]
    head = [
        "Worker",
        "Requests",
        "Tokens in",
        "Tokens out",
        "TTFT P99",
        "TPOT P99",
        "E2E P99",
        "TTFT SLO met",
        "TPOT SLO met",
        "Queue peak",
        "Over capacity",
    ]
    rows = [_scope_row(w, bold=False) for w in m.workers]
    if len(m.workers) > 1:
        rows.append(_scope_row(t, bold=True))
    parts.append(html_table(head, rows))
    slos = [
        f"{LATENCY_NAMES[n]} {fmt.seconds(p99_slo(report.thresholds, n))}"
        for n in ("ttft", "tpot")
        if p99_slo(report.thresholds, n) is not None
    ]
    parts.append(
        para(
            f"SLO met: share of requests (TTFT) and of output tokens (TPOT) within the P99 SLO "
            f"({', '.join(slos)}); the SLO holds at {fmt.percent(SLO_TARGET)}. Deltas compare with "
            f"the {words.span(report.period.days)} before.",
            muted=True,
        )
    )
    chart = charts.get(f"latency-{_slug(t.model)}")
    if chart:
        parts.append(img(chart, src))
    if t.latency:
        parts.append(h3("Latency per day"))
        parts.append(_daily_latency(report, m))
    return "".join(parts)


def _band_cell(g: GpuFigures, band: str) -> str:
    c = g.bands.get(band)
    better = {"waste": "lower", "low": "lower", "healthy": "higher", "scale_review": "lower"}.get(
        band
    )
    return td(fmt.percent(c.current) if c else fmt.DASH, c, "pts", better)


def _gpu_section(report: Report, charts: dict[str, Chart], src: ImageSrc) -> str:
    if not report.gpus:
        return ""
    ranges = band_ranges(report.thresholds, gap="")
    parts = [
        h2(
            "GPUs",
            "utilization distribution, time in the bands of thresholds.yaml, memory peaks "
            "(KV cache where the engine exports it)",
        )
    ]
    head = [
        "GPU",
        "Serves",
        "Busy avg",
        "P50",
        "P90",
        "P99",
        "SM active",
        *[f"{BAND_NAMES[b].capitalize()} {ranges[b]}" for b in BANDS],
        "Memory peak",
        "Peak change",
    ]
    rows = []
    for g in report.gpus:
        u = g.util
        mean = u.get("mean")
        cells = [
            td(g.label + (f" ({g.name})" if g.name else ""), align="left"),
            td(", ".join(g.workers) or fmt.DASH, align="left"),
            td(fmt.percent(mean.current) if mean else fmt.DASH, mean, "pts", None),
        ]
        for stat in ("p50", "p90", "p99"):
            c = u.get(stat)
            cells.append(td(fmt.percent(c.current) if c else fmt.DASH))
        cells.append(
            td(fmt.percent(g.sm_active.current) if g.sm_active else "n/a", g.sm_active, "pts", None)
        )
        for band in BANDS:
            cells.append(_band_cell(g, band))
        cells.append(
            td(
                f"{fmt.percent(g.pressure_peak.current)} {g.memory_source}",
                g.pressure_peak,
                "pts",
                "lower",
            )
        )
        trend = "" if g.pressure_trend is None else fmt.points(g.pressure_trend, sign=True)
        cells.append(td(trend or fmt.DASH))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    p = report.period
    parts.append(html_table(head, rows))
    parts.append(
        para(
            f"Busy: GPU utilization, percentiles over the {words.period_noun(p.days)}'s samples. "
            "Low: between the waste band and the healthy band. Memory peak: the KV-cache "
            "usage of the workers on the GPU where their engine exports one (an engine that "
            "pre-allocates, such as vLLM, holds NVML's VRAM level flat at its reservation), "
            "else NVML's VRAM level. Peak change: last day's memory peak minus the first "
            "day's. n/a: no GPM on that GPU.",
            muted=True,
        )
    )
    for name in ("gpu-bands", "vram-peaks"):
        if name in charts:
            parts.append(h3(charts[name].title))
            parts.append(img(charts[name], src))
    parts.append(_memory_days(report))
    return "".join(parts)


def _memory_days(report: Report) -> str:
    """Each GPU's memory peak per day, red from the VRAM scale line up."""
    p = report.period
    head = ["Memory peak", *[words.day_label(p, i) for i in range(p.days, 2 * p.days)]]
    rows = []
    for g in report.gpus:
        cells = [td(f"{g.label} ({g.memory_source})", align="left")]
        for i in range(p.days, 2 * p.days):
            v = g.memory_daily[i]
            cell = td(fmt.percent(v))
            if v is not None and v >= report.thresholds.vram.scale_above:
                cell = cell.replace("font-weight:400", f"font-weight:600;color:{BAD}")
            cells.append(cell)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return html_table(head, rows)


def _alerts_section(report: Report) -> str:
    parts = [h2("Alerts", 'from ALERTS{alertstate="firing"}')]
    if not report.alerts:
        parts.append(
            para(
                f"No alert fired in either {words.period_noun(report.period.days)}. "
                "(If no alerting rules are loaded in "
                "this Prometheus, nothing can show here.)",
                muted=True,
            )
        )
        return "".join(parts)
    head = ["Alert", "Severity", "Fired", "Time firing", "Longest", "On"]
    rows = []
    for a in report.alerts:
        rows.append(
            "<tr>"
            + "".join(
                [
                    td(a.alertname, align="left", bold=True),
                    td(a.severity or fmt.DASH, align="left"),
                    td(f"{a.firings.current or 0:.0f}", a.firings, "abs_count", "lower"),
                    td(fmt.duration(a.seconds.current), a.seconds, "abs_seconds", "lower"),
                    td(fmt.duration(a.longest)),
                    td(", ".join(a.subjects) or fmt.DASH, align="left"),
                ]
            )
            + "</tr>"
        )
    parts.append(html_table(head, rows))
    return "".join(parts)


def html(
    report: Report,
    charts: Sequence[Chart],
    image_src: ImageSrc,
    source: str = "",
    cost: CostSection | None = None,
    budgets: Sequence[BudgetFigures] = (),
    whatif: WhatIfSection | None = None,
) -> str:
    by_name = {c.name: c for c in charts}
    body = [
        f'<div style="font-size:12px;color:{MUTED};text-transform:uppercase;'
        f'letter-spacing:.06em">inferwatch · weekly report</div>',
        f'<h1 style="font-size:24px;margin:4px 0 2px;color:{INK}">{escape(period_text(report))}'
        "</h1>",
        para(period_sentence(report), muted=True),
        _fleet_kpis(report),
    ]
    if cost is not None:
        body.append(cost_html(cost))
    hero = by_name.get("three-curves")
    if hero:
        body.append(h3("P99 latency, GPU utilization and memory peak, hour by hour"))
        body.append(img(hero, image_src))
    body.append(
        h2(
            "What to look at",
            f"the guide's closed loops applied to this {words.period_noun(report.period.days)}",
        )
    )
    body.append(_findings(report))
    for m in report.models:
        body.append(_model_section(report, m, by_name, image_src))
    body.append(_gpu_section(report, by_name, image_src))
    body.append(budget_section(report, budgets))
    body.append(whatif_section(report, whatif))
    body.append(_alerts_section(report))
    if report.notes:
        body.append(h2("Left out"))
        body.append(
            '<ul style="margin:6px 0;padding-left:18px">'
            + "".join(
                f'<li style="font-size:13px;color:{MUTED};margin:3px 0">{escape(n)}</li>'
                for n in report.notes
            )
            + "</ul>"
        )
    footer = f"Generated {words.timestamp(report.generated_at)} by inferwatch report"
    if source:
        footer += f" from {source}"
    footer += ". The daily figures are in the attached CSV."
    body.append(f'<p style="margin:30px 0 0;font-size:11px;color:{MUTED}">{escape(footer)}</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title(report))}</title></head>"
        f'<body style="margin:0;padding:0;background:#eef1f4">'
        f'<div style="max-width:820px;margin:0 auto;padding:24px 30px;background:#ffffff;'
        f'font-family:{FONT};color:{INK}">' + "".join(body) + "</div></body></html>\n"
    )
