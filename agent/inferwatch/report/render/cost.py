"""The cost section ("What the GPUs cost"), as HTML and as text."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from inferwatch.pack import fmt
from inferwatch.report.cost import CostSection, ModelCost
from inferwatch.report.model import Change
from inferwatch.report.render.common import text_table, with_delta
from inferwatch.report.render.htmlkit import LINE, delta_html, h2, h3, html_table, para, td


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
            text += f" · {fmt.money(mo.current, c.currency)}"
        return text, mo
    return f"{_gpu_hours(h.current)} h", h


def _lines_cell(lines: Sequence[str], change: Change | None, better: str, bold: bool) -> str:
    """A right-aligned cell with one line per value (GPU-hours, then money) and the change."""
    weight = "600" if bold else "400"
    body = "<br>".join(escape(line) for line in lines)
    return (
        f'<td style="padding:6px 8px;border-bottom:1px solid {LINE};text-align:right;'
        f'vertical-align:top;white-space:nowrap;font-weight:{weight}">{body}'
        f"{delta_html(change, 'rel', better)}</td>"
    )


def cost_html(c: CostSection) -> str:
    unit = f"GPU-hours and {c.currency}" if c.priced else "GPU-hours (set pricing: to see money)"
    parts = [h2("What the GPUs cost", f"{unit}, this week against the week before")]
    head = ["model", "serving", "held idle", "unallocated", "per million tokens", "J per token"]
    rows = []
    for r in (*c.models, c.total):
        bold = r is c.total
        cells = [
            td(_model_label(r.model) if r is not c.total else "all GPUs", bold=bold, align="left")
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
            (fmt.money(per.current, c.currency) if c.priced else f"{_gpu_hours(per.current)} GPU-h")
            if per.current is not None
            else fmt.DASH
        )
        cells.append(td(per_text, per, "rel", "lower", bold=bold))
        j = r.joules_per_token
        cells.append(
            td(
                f"{j.current:.3g}" if j.current is not None else fmt.DASH,
                j,
                "rel",
                "lower",
                bold=bold,
            )
        )
        rows.append("<tr>" + "".join(cells) + "</tr>")
    parts.append(html_table(head, rows))
    if c.note:
        parts.append(para(c.note, muted=True))
    if c.wasters:
        parts.append(h3("The biggest wasters and the loop that fixes each"))
        items = []
        for w in c.wasters:
            amount = (
                f"{fmt.money(w.idle_money, c.currency)} ({_gpu_hours(w.idle_hours)} GPU-hours)"
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


def cost_text(c: CostSection) -> list[str]:
    unit = f"GPU-hours and {c.currency}" if c.priced else "GPU-hours"
    out = [f"WHAT THE GPUS COST ({unit}, this week against the week before)", ""]
    rows = []
    for r in (*c.models, c.total):
        row = [_model_label(r.model) if r is not c.total else "all GPUs"]
        for state in ("serving", "held_idle", "unallocated"):
            text, change = _cost_cells(c, r, state)
            row.append(with_delta(text, change, "rel") if change else text)
        per = r.per_million_tokens
        row.append(
            (fmt.money(per.current, c.currency) if c.priced else f"{_gpu_hours(per.current)} GPU-h")
            if per.current is not None
            else fmt.DASH
        )
        j = r.joules_per_token
        row.append(f"{j.current:.3g} J" if j.current is not None else fmt.DASH)
        rows.append(row)
    out.append(
        text_table(
            ["model", "serving", "held idle", "unallocated", "per M tokens", "per token"], rows
        )
    )
    out.append("")
    if c.note:
        out += [f"  {c.note}", ""]
    for i, w in enumerate(c.wasters, 1):
        amount = (
            f"{fmt.money(w.idle_money, c.currency)} ({_gpu_hours(w.idle_hours)} GPU-hours)"
            if c.priced
            else f"{_gpu_hours(w.idle_hours)} GPU-hours"
        )
        out.append(f"  {i}. {w.model}: {amount} held idle; {w.reason}.")
        out.append(f"     -> {w.loop_text}: {w.action}")
    if c.wasters:
        out.append("")
    return out
