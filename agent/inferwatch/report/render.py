"""The report as HTML (mail and file), plain text and CSV.

The HTML carries its styles inline (mail clients drop ``<style>`` blocks and
external CSS) and refers to each chart through ``image_src(chart)``: a
``cid:`` URL in the mail, a file name next to the HTML on disk. Every label
that comes from Prometheus is escaped.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from html import escape

from inferwatch.report import fmt
from inferwatch.report.budget import TITLES as SLO_TITLES
from inferwatch.report.budget import BudgetFigures
from inferwatch.report.charts import Chart
from inferwatch.report.cost import CostSection, ModelCost
from inferwatch.report.model import LATENCY_NAMES, SLO_TARGET, Change, Daily
from inferwatch.report.summary import (
    BAND_NAMES,
    BANDS,
    GpuFigures,
    ModelFigures,
    Report,
    ScopeFigures,
)
from inferwatch.report.whatif import FIGURE_NAMES, WhatIfSection

FONT = (
    "-apple-system,BlinkMacSystemFont,'Segoe UI',Roboto,'Helvetica Neue',Arial,"
    "'Noto Sans',sans-serif"
)
INK = "#1f2933"
MUTED = "#616e7c"
LINE = "#e4e7eb"
SOFT = "#f5f7fa"
GOOD = "#199473"
BAD = "#cf1124"
NEUTRAL = "#52606d"
LEVELS = {
    "act": ("ACT", "#cf1124", "#ffe3e3"),
    "watch": ("WATCH", "#b44d12", "#fff3c4"),
    "ok": ("OK", "#0c6b58", "#c6f7e2"),
}

ImageSrc = Callable[[Chart], str]


def title(report: Report) -> str:
    # "weekly report" is the product's name (mail filters match it), whatever --days is
    return f"inferwatch weekly report: {period_text(report)}"


def period_text(report: Report) -> str:
    p = report.period
    if not p.aligned:
        # 24-hour days up to a time (--end now): the ends say which hours these are.
        return f"{fmt.timestamp(p.start)} – {fmt.timestamp(p.end)}"
    last_day = p.end - 1
    year = fmt.date(last_day)[:4]
    if p.days == 1:
        return f"{fmt.day(last_day)} {year}"
    return f"{fmt.day(p.start)} – {fmt.day(last_day)} {year}"


def period_sentence(report: Report) -> str:
    """``7 days to 2026-11-23 00:00 UTC, compared with the 7 days before. Days are UTC.``"""
    p = report.period
    days = "24-hour windows ending at that time" if not p.aligned else "UTC days"
    before = "the day before" if p.days == 1 else f"the {fmt.span(p.days)} before"
    return f"{fmt.span(p.days)} to {fmt.timestamp(p.end)}, compared with {before}. Days are {days}."


def current_and_previous(report: Report) -> tuple[str, str]:
    """Row labels of the period and the one before: ``This week``/``Last week``."""
    noun = fmt.period_noun(report.period.days)
    return (f"This {noun}", "Last week" if noun == "week" else "Previous period")


# ------------------------------------------------------------------------ HTML


def _delta(change: Change | None, kind: str, better: str | None) -> str:
    text = fmt.delta(change, kind)
    if not text:
        return ""
    color = NEUTRAL
    direction = change.direction(0.005 if kind == "pts" else 0.02) if change else ""
    if better and direction in ("up", "down"):
        good = (direction == "up") == (better == "higher")
        color = GOOD if good else BAD
    return f'<div style="font-size:11px;color:{color};white-space:nowrap">{escape(text)}</div>'


def _cell(
    value: str,
    change: Change | None = None,
    kind: str = "rel",
    better: str | None = None,
    *,
    bold: bool = False,
    align: str = "right",
) -> str:
    weight = "600" if bold else "400"
    return (
        f'<td style="padding:6px 8px;border-bottom:1px solid {LINE};text-align:{align};'
        f'vertical-align:top;font-weight:{weight}">{escape(value)}'
        f"{_delta(change, kind, better)}</td>"
    )


def _th(text: str, align: str = "right") -> str:
    return (
        f'<th style="padding:6px 8px;border-bottom:2px solid {LINE};text-align:{align};'
        f"font-size:11px;font-weight:600;color:{MUTED};text-transform:uppercase;"
        f'letter-spacing:.03em;vertical-align:bottom">{escape(text)}</th>'
    )


def _table(head: Sequence[str], rows: Sequence[str], first_left: bool = True) -> str:
    ths = "".join(_th(h, "left" if i == 0 and first_left else "right") for i, h in enumerate(head))
    return (
        f'<table role="presentation" cellspacing="0" cellpadding="0" style="width:100%;'
        f'border-collapse:collapse;font-size:13px;color:{INK};margin:8px 0 4px">'
        f"<thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _h2(text: str, sub: str = "") -> str:
    extra = (
        (
            f'<div style="font-size:12px;color:{MUTED};font-weight:400;margin-top:2px">'
            f"{escape(sub)}</div>"
        )
        if sub
        else ""
    )
    return (
        f'<h2 style="font-size:18px;margin:34px 0 6px;color:{INK};padding-bottom:6px;'
        f'border-bottom:1px solid {LINE}">{escape(text)}{extra}</h2>'
    )


def _h3(text: str) -> str:
    return f'<h3 style="font-size:14px;margin:18px 0 4px;color:{INK}">{escape(text)}</h3>'


def _p(text: str, muted: bool = False) -> str:
    color = MUTED if muted else INK
    return (
        f'<p style="margin:6px 0;font-size:13px;line-height:1.5;color:{color}">{escape(text)}</p>'
    )


def _img(chart: Chart, src: ImageSrc) -> str:
    return (
        f'<img src="{escape(src(chart))}" alt="{escape(chart.alt)}" width="760" '
        f'style="display:block;width:100%;max-width:760px;height:auto;margin:8px 0;'
        f'border:0">'
    )


def _kpi(label: str, value: str, change: Change | None, kind: str, better: str | None) -> str:
    return (
        f'<td style="padding:10px 12px;background:{SOFT};border:4px solid #fff;'
        f'vertical-align:top;width:14%">'
        f'<div style="font-size:11px;color:{MUTED};text-transform:uppercase;'
        f'letter-spacing:.03em">{escape(label)}</div>'
        f'<div style="font-size:18px;font-weight:600;color:{INK};margin:2px 0">'
        f"{escape(value)}</div>{_delta(change, kind, better)}</td>"
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
    name = s.worker or "all workers"
    cells = [
        _cell(name, bold=bold, align="left"),
        _cell(fmt.count(s.requests.current), s.requests, "rel", None, bold=bold),
        _cell(fmt.count(s.prompt.current), s.prompt, "rel", None, bold=bold),
        _cell(fmt.count(s.generation.current), s.generation, "rel", None, bold=bold),
    ]
    for name_ in ("ttft", "tpot", "e2e"):
        lat = s.latency.get(name_)
        if lat is None:
            cells.append(_cell(fmt.DASH, bold=bold))
        else:
            cells.append(
                _cell(
                    fmt.seconds(lat.week[0.99].current), lat.week[0.99], "rel", "lower", bold=bold
                )
            )
    for name_ in ("ttft", "tpot"):
        lat = s.latency.get(name_)
        if lat is None or lat.attainment is None:
            cells.append(_cell(fmt.DASH, bold=bold))
        else:
            cells.append(
                _cell(
                    fmt.percent(lat.attainment.current, 1),
                    lat.attainment,
                    "pts",
                    "higher",
                    bold=bold,
                )
            )
    cells.append(
        _cell(
            fmt.count(s.queue_peak.current) if s.queue_peak else fmt.DASH,
            s.queue_peak,
            "abs_count",
            "lower",
            bold=bold,
        )
    )
    cells.append(
        _cell(
            fmt.duration(s.over_capacity.current) if s.over_capacity else fmt.DASH,
            s.over_capacity,
            "abs_seconds",
            "lower",
            bold=bold,
        )
    )
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
            _cell(fmt.day_label(p, i), align="left"),
            _cell(fmt.count(m.total.requests_daily[i])),
        ]
        for n in names:
            lat = m.total.latency[n]
            for q in (0.5, 0.95, 0.99):
                v = lat.daily[q][i]
                over = lat.slo is not None and q == 0.99 and v is not None and v > lat.slo
                cell = _cell(fmt.seconds(v))
                if over:
                    cell = cell.replace(f"color:{INK}", "").replace(
                        "font-weight:400", f"font-weight:600;color:{BAD}"
                    )
                cells.append(cell)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    this, last = current_and_previous(report)
    for label, pick in ((this, "current"), (last, "previous")):
        cells = [
            _cell(label, bold=True, align="left"),
            _cell(fmt.count(getattr(m.total.requests, pick)), bold=True),
        ]
        for n in names:
            for q in (0.5, 0.95, 0.99):
                cells.append(
                    _cell(fmt.seconds(getattr(m.total.latency[n].week[q], pick)), bold=True)
                )
        rows.append(f'<tr style="background:{SOFT}">' + "".join(cells) + "</tr>")
    return _table(head, rows)


def _model_section(report: Report, m: ModelFigures, charts: dict[str, Chart], src: ImageSrc) -> str:
    from inferwatch.report.charts import _slug

    t = m.total
    gpus = [g.label for g in report.gpus if g.uuid in m.gpus]
    sub = (
        f"engine {t.engine or 'unknown'} · {len(m.workers)} worker"
        f"{'s' if len(m.workers) != 1 else ''}" + (f" · GPUs: {', '.join(gpus)}" if gpus else "")
    )
    parts = [_h2(f"Model {t.model}", sub)]
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
    parts.append(_table(head, rows))
    slos = [
        f"{LATENCY_NAMES[n]} {fmt.seconds(report.bands.slo(n))}"
        for n in ("ttft", "tpot")
        if report.bands.slo(n) is not None
    ]
    parts.append(
        _p(
            f"SLO met: share of requests (TTFT) and of output tokens (TPOT) within the P99 SLO "
            f"({', '.join(slos)}); the SLO holds at {fmt.percent(SLO_TARGET)}. Deltas compare with "
            f"the {fmt.span(report.period.days)} before.",
            muted=True,
        )
    )
    chart = charts.get(f"latency-{_slug(t.model)}")
    if chart:
        parts.append(_img(chart, src))
    if t.latency:
        parts.append(_h3("Latency per day"))
        parts.append(_daily_latency(report, m))
    return "".join(parts)


def _band_cell(g: GpuFigures, band: str) -> str:
    c = g.bands.get(band)
    better = {"waste": "lower", "low": "lower", "healthy": "higher", "scale_review": "lower"}.get(
        band
    )
    return _cell(fmt.percent(c.current) if c else fmt.DASH, c, "pts", better)


def _gpu_section(report: Report, charts: dict[str, Chart], src: ImageSrc) -> str:
    if not report.gpus:
        return ""
    b = report.bands
    parts = [
        _h2(
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
        f"Waste <{b.waste_below * 100:.0f}%",
        f"Low {b.waste_below * 100:.0f}-{b.healthy_low * 100:.0f}%",
        f"Healthy {b.healthy_low * 100:.0f}-{b.healthy_high * 100:.0f}%",
        f"Scale review >{b.scale_review_above * 100:.0f}%",
        "Memory peak",
        "Peak change",
    ]
    rows = []
    for g in report.gpus:
        u = g.util
        mean = u.get("mean")
        cells = [
            _cell(g.label + (f" ({g.name})" if g.name else ""), align="left"),
            _cell(", ".join(g.workers) or fmt.DASH, align="left"),
            _cell(fmt.percent(mean.current) if mean else fmt.DASH, mean, "pts", None),
        ]
        for stat in ("p50", "p90", "p99"):
            c = u.get(stat)
            cells.append(_cell(fmt.percent(c.current) if c else fmt.DASH))
        cells.append(
            _cell(
                fmt.percent(g.sm_active.current) if g.sm_active else "n/a", g.sm_active, "pts", None
            )
        )
        for band in BANDS:
            cells.append(_band_cell(g, band))
        cells.append(
            _cell(
                f"{fmt.percent(g.pressure_peak.current)} {g.memory_source}",
                g.pressure_peak,
                "pts",
                "lower",
            )
        )
        trend = "" if g.pressure_trend is None else f"{g.pressure_trend * 100:+.0f} pts"
        cells.append(_cell(trend or fmt.DASH))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    p = report.period
    parts.append(_table(head, rows))
    parts.append(
        _p(
            f"Busy: GPU utilization, percentiles over the {fmt.period_noun(p.days)}'s samples. "
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
            parts.append(_h3(charts[name].title))
            parts.append(_img(charts[name], src))
    head = ["Memory peak", *[fmt.day_label(p, i) for i in range(p.days, 2 * p.days)]]
    rows = []
    for g in report.gpus:
        cells = [_cell(f"{g.label} ({g.memory_source})", align="left")]
        for i in range(p.days, 2 * p.days):
            v = g.memory_daily[i]
            cell = _cell(fmt.percent(v))
            if v is not None and v >= b.vram_scale_above:
                cell = cell.replace("font-weight:400", f"font-weight:600;color:{BAD}")
            cells.append(cell)
        rows.append("<tr>" + "".join(cells) + "</tr>")
    parts.append(_table(head, rows))
    return "".join(parts)


def _alerts_section(report: Report) -> str:
    parts = [_h2("Alerts", 'from ALERTS{alertstate="firing"}')]
    if not report.alerts:
        parts.append(
            _p(
                f"No alert fired in either {fmt.period_noun(report.period.days)}. "
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
                    _cell(a.alertname, align="left", bold=True),
                    _cell(a.severity or fmt.DASH, align="left"),
                    _cell(f"{a.firings.current or 0:.0f}", a.firings, "abs_count", "lower"),
                    _cell(fmt.duration(a.seconds.current), a.seconds, "abs_seconds", "lower"),
                    _cell(fmt.duration(a.longest)),
                    _cell(", ".join(a.subjects) or fmt.DASH, align="left"),
                ]
            )
            + "</tr>"
        )
    parts.append(_table(head, rows))
    return "".join(parts)


def _objective_text(b: BudgetFigures) -> str:
    good = f"within {fmt.seconds(b.le)}" if b.le is not None else "without error or rejection"
    return f"{b.objective * 100:g}% {good}"


def _budget_cells(b: BudgetFigures) -> list[str]:
    return [
        b.model,
        SLO_TITLES[b.kind],
        _objective_text(b),
        fmt.count(b.requests),
        fmt.percent(b.sli, 3),
        f"{b.burn_rate:.2f}x",
        fmt.percent(b.budget_used, 1),
    ]


BUDGET_HEAD = ["Model", "SLO", "Objective", "Requests", "SLI", "Burn rate", "Budget used"]


def _budget_section(report: Report, budgets: Sequence[BudgetFigures]) -> str:
    if not budgets:
        return ""
    window = budgets[0].share_of_window
    sub = (
        f"share of each SLO's error budget this {report.period.days}-day period spent "
        f"({window:.1%} of the SLO window)"
    )
    rows = []
    for b in budgets:
        cells = _budget_cells(b)
        color = BAD if b.budget_used >= window else GOOD
        rows.append(
            "<tr>"
            + _cell(cells[0], align="left", bold=True)
            + "".join(
                _cell(c, align="left" if i < 2 else "right") for i, c in enumerate(cells[1:-1])
            )
            + f'<td style="padding:6px 8px;border-bottom:1px solid {LINE};text-align:right;'
            f'vertical-align:top;color:{color};font-weight:600">{escape(cells[-1])}</td>' + "</tr>"
        )
    return (
        _h2("Error budgets", sub)
        + _table(BUDGET_HEAD, rows)
        + _p(
            "Burn rate 1 spends a budget in exactly its window; the budget used is the burn "
            "rate times this period's share of the window (green below that share, red at "
            "or above it).",
            muted=True,
        )
    )


WHATIF_HEAD = ["Seen", "Worker", "Change", "Figure", "Predicted", "Measured", "Error"]


def _whatif_value(figure: str, v: float | None) -> str:
    if v is None:
        return fmt.DASH
    if figure.startswith("ttft"):
        return fmt.seconds(v)
    return f"{v:.1f}" if abs(v) < 1000 else fmt.count(v)


def _whatif_rows(w: WhatIfSection) -> list[list[str]]:
    """One row per change and figure; the change's cells on its first row only."""
    rows = []
    for c in w.changes:
        change = f"{c.flag} {c.old} -> {c.new}" if c.old else f"{c.flag} -> {c.new}"
        head = [fmt.timestamp(c.at), c.worker, change]
        if not c.figures:
            rows.append([*head, fmt.DASH, fmt.DASH, fmt.DASH, fmt.DASH])
        for i, f in enumerate(c.figures):
            rows.append(
                [
                    *(head if i == 0 else ["", "", ""]),
                    FIGURE_NAMES[f.figure],
                    _whatif_value(f.figure, f.predicted),
                    _whatif_value(f.figure, f.measured),
                    f"{f.error:+.0%}" if f.error is not None else fmt.DASH,
                ]
            )
    return rows


def _whatif_summary(w: WhatIfSection) -> str:
    n = len(w.changes)
    changes = f"{n} flag change{'s' if n != 1 else ''}"
    if not w.median_abs_error:
        return f"{changes} this period; no figure had both a prediction and an outcome."
    parts = ", ".join(
        f"{FIGURE_NAMES[f]} {err:.0%} ({k})" for f, (err, k) in w.median_abs_error.items()
    )
    return f"Median absolute error over {changes}: {parts}."


def _whatif_section(report: Report, w: WhatIfSection | None) -> str:
    if w is None:
        return ""
    rows = [
        "<tr>"
        + "".join(_cell(c, align="left" if i < 4 else "right") for i, c in enumerate(cells))
        + "</tr>"
        for cells in _whatif_rows(w)
    ]
    return (
        _h2(
            "What-if advice, checked",
            "advise --shadow: the prediction made before each launch-flag change this "
            f"{fmt.period_noun(report.period.days)} against what followed",
        )
        + _p(_whatif_summary(w))
        + _table(WHATIF_HEAD, rows)
        + _p(
            "Error = (predicted - measured) / measured. The prediction comes from the fit "
            "kept before the change, replaying the load seen after it.",
            muted=True,
        )
    )


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
        _p(period_sentence(report), muted=True),
        _fleet_kpis(report),
    ]
    if cost is not None:
        body.append(_cost_html(cost))
    hero = by_name.get("three-curves")
    if hero:
        body.append(_h3("P99 latency, GPU utilization and memory peak, hour by hour"))
        body.append(_img(hero, image_src))
    body.append(
        _h2(
            "What to look at",
            f"the guide's closed loops applied to this {fmt.period_noun(report.period.days)}",
        )
    )
    body.append(_findings(report))
    for m in report.models:
        body.append(_model_section(report, m, by_name, image_src))
    body.append(_gpu_section(report, by_name, image_src))
    body.append(_budget_section(report, budgets))
    body.append(_whatif_section(report, whatif))
    body.append(_alerts_section(report))
    if report.notes:
        body.append(_h2("Left out"))
        body.append(
            '<ul style="margin:6px 0;padding-left:18px">'
            + "".join(
                f'<li style="font-size:13px;color:{MUTED};margin:3px 0">{escape(n)}</li>'
                for n in report.notes
            )
            + "</ul>"
        )
    footer = f"Generated {fmt.timestamp(report.generated_at)} by inferwatch report"
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


# ------------------------------------------------------------------------ text


def _text_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = []
    for j, row in enumerate([head, *rows]):
        cells = [
            str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
            for i, c in enumerate(row)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
        if j == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _with_delta(value: str, change: Change | None, kind: str) -> str:
    d = fmt.delta(change, kind)
    return f"{value} ({d})" if d else value


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
        out += ["", *_cost_text(cost)]
    out += ["", "WHAT TO LOOK AT", ""]
    for f in report.findings:
        out.append(f"[{LEVELS.get(f.level, LEVELS['watch'])[0]}] {f.title} ({f.loop})")
        out.append(f"    {f.evidence}")
        out.append(f"    -> {f.action}")
        out.append("")
    for m in report.models:
        out += [f"MODEL {m.total.model}", ""]
        rows = []
        scopes = list(m.workers) + ([m.total] if len(m.workers) > 1 else [])
        for s in scopes:
            row = [
                s.worker or "all workers",
                _with_delta(fmt.count(s.requests.current), s.requests, "rel"),
                _with_delta(fmt.count(s.prompt.current), s.prompt, "rel"),
                _with_delta(fmt.count(s.generation.current), s.generation, "rel"),
            ]
            for n in ("ttft", "tpot", "e2e"):
                lat = s.latency.get(n)
                row.append(
                    _with_delta(fmt.seconds(lat.week[0.99].current), lat.week[0.99], "rel")
                    if lat
                    else fmt.DASH
                )
            row.append(fmt.count(s.queue_peak.current) if s.queue_peak else fmt.DASH)
            row.append(fmt.duration(s.over_capacity.current) if s.over_capacity else fmt.DASH)
            rows.append(row)
        out.append(
            _text_table(
                [
                    "worker",
                    "requests",
                    "tokens in",
                    "tokens out",
                    "TTFT P99",
                    "TPOT P99",
                    "E2E P99",
                    "queue peak",
                    "over capacity",
                ],
                rows,
            )
        )
        out.append("")
        names = [n for n in ("ttft", "tpot", "e2e") if n in m.total.latency]
        if names:
            p = report.period
            rows = []
            for i in range(p.days, 2 * p.days):
                row = [fmt.day_label(p, i)]
                for n in names:
                    row += [fmt.seconds(m.total.latency[n].daily[q][i]) for q in (0.5, 0.95, 0.99)]
                rows.append(row)
            head = ["day"]
            for n in names:
                head += [f"{LATENCY_NAMES[n]} P50", "P95", "P99"]
            out.append(_text_table(head, rows))
            out.append("")
    if report.gpus:
        out += ["GPUS", ""]
        rows = []
        for g in report.gpus:
            mean = g.util.get("mean")
            rows.append(
                [
                    g.label,
                    ", ".join(g.workers) or fmt.DASH,
                    _with_delta(fmt.percent(mean.current) if mean else fmt.DASH, mean, "pts"),
                    fmt.percent(g.util["p90"].current) if "p90" in g.util else fmt.DASH,
                    *[fmt.percent(g.bands[b].current) if b in g.bands else fmt.DASH for b in BANDS],
                    _with_delta(
                        f"{fmt.percent(g.pressure_peak.current)} {g.memory_source}",
                        g.pressure_peak,
                        "pts",
                    ),
                ]
            )
        out.append(
            _text_table(
                [
                    "gpu",
                    "serves",
                    "busy avg",
                    "P90",
                    *[BAND_NAMES[b] for b in BANDS],
                    "memory peak",
                ],
                rows,
            )
        )
        out.append("")
    if budgets:
        out += ["ERROR BUDGETS", ""]
        out.append(
            _text_table([h.lower() for h in BUDGET_HEAD], [_budget_cells(b) for b in budgets])
        )
        out.append("")
    if whatif is not None:
        out += ["WHAT-IF ADVICE, CHECKED", "", "  " + _whatif_summary(whatif), ""]
        out.append(_text_table([h.lower() for h in WHATIF_HEAD], _whatif_rows(whatif)))
        out.append("")
    out += ["ALERTS", ""]
    if report.alerts:
        out.append(
            _text_table(
                ["alert", "severity", "fired", "time firing", "on"],
                [
                    [
                        a.alertname,
                        a.severity,
                        _with_delta(f"{a.firings.current or 0:.0f}", a.firings, "abs_count"),
                        _with_delta(fmt.duration(a.seconds.current), a.seconds, "abs_seconds"),
                        ", ".join(a.subjects),
                    ]
                    for a in report.alerts
                ],
            )
        )
    else:
        out.append(f"  No alert fired in either {fmt.period_noun(report.period.days)}.")
    out.append("")
    if report.notes:
        out += ["LEFT OUT", ""]
        out += [f"  - {n}" for n in report.notes]
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------- CSV

CSV_COLUMNS = ("date", "period", "scope", "model", "worker", "gpu", "uuid", "metric", "value")


def _rows_for(
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
    starts = p.day_starts()
    out = []
    for i, v in enumerate(daily):
        if v is None:
            continue  # no data is a missing row, never a zero
        out.append(
            [
                fmt.date(starts[i]),
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


def _scope_rows(report: Report, s: ScopeFigures) -> list[list[str]]:
    rows = []
    args = (report, s.kind, s.model, s.worker, "", "")
    rows += _rows_for(*args, "requests", s.requests_daily)
    rows += _rows_for(*args, "prompt_tokens", s.prompt_daily)
    rows += _rows_for(*args, "generation_tokens", s.generation_daily)
    for name, lat in s.latency.items():
        for q in (0.5, 0.95, 0.99):
            rows += _rows_for(*args, f"{name}_p{q * 100:g}_seconds", lat.daily[q])
        if lat.attainment_daily is not None:
            rows += _rows_for(*args, f"{name}_slo_attainment_ratio", lat.attainment_daily)
    rows += _rows_for(*args, "queue_depth_peak", s.queue_peak_daily)
    rows += _rows_for(*args, "queue_over_capacity_seconds", s.over_capacity_daily)
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
            rows += _rows_for(*args, f"gpu_utilization_{stat}_ratio", daily)
        for band in ("waste", "low", "healthy", "scale_review"):
            rows += _rows_for(*args, f"gpu_time_{band}_ratio", g.band_daily.get(band))
        rows += _rows_for(*args, "vram_peak_ratio", g.vram_peak_daily)
        if g.pressure_from == "kv_cache":
            rows += _rows_for(*args, "kv_cache_usage_peak_ratio", g.pressure_daily)
        rows += _rows_for(*args, "vram_peak_bytes", g.vram_bytes_daily)
    rows.sort(key=lambda r: (r[0], r[2], r[3], r[4], r[5], r[7]))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(rows)
    return buf.getvalue()


__all__ = ["BAND_NAMES", "csv_text", "html", "text", "title"]


# ------------------------------------------------------------------------ cost


def _money(value: float | None, currency: str | None) -> str:
    if value is None:
        return fmt.DASH
    return f"{value:,.2f} {currency}" if currency else f"{value:,.1f}"


def _gpu_hours(value: float | None) -> str:
    return fmt.DASH if value is None else f"{value:,.1f}"


def _model_label(model: str) -> str:
    return model or "no worker (unallocated)"


def _cost_cells(c: CostSection, r: ModelCost, state: str) -> tuple[str, Change | None]:
    h = r.hours.get(state)
    if h is None:
        return fmt.DASH, None
    if c.priced:
        mo = r.money.get(state)
        text = f"{_gpu_hours(h.current)} h"
        if mo is not None:
            text += f" · {_money(mo.current, c.currency)}"
        return text, mo
    return f"{_gpu_hours(h.current)} h", h


def _lines_cell(lines: Sequence[str], change: Change | None, better: str, bold: bool) -> str:
    """A right-aligned cell with one line per value (GPU-hours, then money) and the change."""
    weight = "600" if bold else "400"
    body = "<br>".join(escape(line) for line in lines)
    return (
        f'<td style="padding:6px 8px;border-bottom:1px solid {LINE};text-align:right;'
        f'vertical-align:top;white-space:nowrap;font-weight:{weight}">{body}'
        f"{_delta(change, 'rel', better)}</td>"
    )


def _cost_html(c: CostSection) -> str:
    unit = f"GPU-hours and {c.currency}" if c.priced else "GPU-hours (set pricing: to see money)"
    parts = [_h2("What the GPUs cost", f"{unit}, this week against the week before")]
    head = ["model", "serving", "held idle", "unallocated", "per million tokens", "J per token"]
    rows = []
    for r in (*c.models, c.total):
        bold = r is c.total
        cells = [
            _cell(
                _model_label(r.model) if r is not c.total else "all GPUs", bold=bold, align="left"
            )
        ]
        for state in ("serving", "held_idle", "unallocated"):
            text, change = _cost_cells(c, r, state)
            cells.append(
                _lines_cell(
                    text.split(" · "), change, "higher" if state == "serving" else "lower", bold
                )
            )
        per = r.per_million_tokens
        per_text = (
            (_money(per.current, c.currency) if c.priced else f"{_gpu_hours(per.current)} GPU-h")
            if per.current is not None
            else fmt.DASH
        )
        cells.append(_cell(per_text, per, "rel", "lower", bold=bold))
        j = r.joules_per_token
        cells.append(
            _cell(
                f"{j.current:.3g}" if j.current is not None else fmt.DASH,
                j,
                "rel",
                "lower",
                bold=bold,
            )
        )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    parts.append(_table(head, rows))
    if c.note:
        parts.append(_p(c.note, muted=True))
    if c.wasters:
        parts.append(_h3("The biggest wasters and the loop that fixes each"))
        items = []
        for w in c.wasters:
            amount = (
                f"{_money(w.idle_money, c.currency)} ({_gpu_hours(w.idle_hours)} GPU-hours)"
                if c.priced
                else f"{_gpu_hours(w.idle_hours)} GPU-hours"
            )
            items.append(
                f'<li style="font-size:13px;margin:4px 0"><b>{escape(w.model)}</b>: '
                f"{escape(amount)} held idle; {escape(w.reason)}. "
                f"{escape(w.loop_text[:1].upper() + w.loop_text[1:])}: {escape(w.action)}.</li>"
            )
        parts.append('<ol style="margin:6px 0;padding-left:20px">' + "".join(items) + "</ol>")
    return '<div id="cost">' + "".join(parts) + "</div>"


def _cost_text(c: CostSection) -> list[str]:
    unit = f"GPU-hours and {c.currency}" if c.priced else "GPU-hours"
    out = [f"WHAT THE GPUS COST ({unit}, this week against the week before)", ""]
    rows = []
    for r in (*c.models, c.total):
        row = [_model_label(r.model) if r is not c.total else "all GPUs"]
        for state in ("serving", "held_idle", "unallocated"):
            text, change = _cost_cells(c, r, state)
            row.append(_with_delta(text, change, "rel") if change else text)
        per = r.per_million_tokens
        row.append(
            (_money(per.current, c.currency) if c.priced else f"{_gpu_hours(per.current)} GPU-h")
            if per.current is not None
            else fmt.DASH
        )
        j = r.joules_per_token
        row.append(f"{j.current:.3g} J" if j.current is not None else fmt.DASH)
        rows.append(row)
    out.append(
        _text_table(
            ["model", "serving", "held idle", "unallocated", "per M tokens", "per token"], rows
        )
    )
    out.append("")
    if c.note:
        out += [f"  {c.note}", ""]
    for i, w in enumerate(c.wasters, 1):
        amount = (
            f"{_money(w.idle_money, c.currency)} ({_gpu_hours(w.idle_hours)} GPU-hours)"
            if c.priced
            else f"{_gpu_hours(w.idle_hours)} GPU-hours"
        )
        out.append(f"  {i}. {w.model}: {amount} held idle; {w.reason}.")
        out.append(f"     -> {w.loop_text}: {w.action}")
    if c.wasters:
        out.append("")
    return out


def cost_csv_rows(report: Report, c: CostSection) -> list[list[str]]:
    """Daily rows of the cost section (metrics gpu_hours_<state>, cost_<state>_<currency>,
    energy_kwh); scope ``model``, ``cluster`` for unallocated GPUs and all GPUs' energy, or
    ``gpu`` (its uuid) for one GPU's energy."""
    rows: list[list[str]] = []
    for (model, state), daily in sorted(c.daily_hours.items()):
        scope = "model" if model else "cluster"
        rows += _rows_for(report, scope, model, "", "", "", f"gpu_hours_{state}", daily)
    for (model, state), daily in sorted(c.daily_money.items()):
        scope = "model" if model else "cluster"
        metric = f"cost_{state}_{(c.currency or '').lower()}"
        rows += _rows_for(report, scope, model, "", "", "", metric, daily)
    for model, daily in sorted(c.daily_kwh.items()):
        rows += _rows_for(
            report, "model" if model else "cluster", model, "", "", "", "energy_kwh", daily
        )
    for uuid, daily in sorted(c.daily_gpu_kwh.items()):
        rows += _rows_for(report, "gpu", "", "", "", uuid, "energy_kwh", daily)
    return rows
