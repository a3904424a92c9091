"""The HTML building blocks: colours, cells, tables, headings, images (styles inline).

Mail clients drop ``<style>`` blocks and external CSS, so every element carries
its style; every label that comes from Prometheus is escaped here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from inferwatch.report import words
from inferwatch.report.charts import Chart
from inferwatch.report.model import Change

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

ImageSrc = Callable[[Chart], str]


def delta_html(change: Change | None, kind: str, better: str | None) -> str:
    text = words.delta(change, kind)
    if not text:
        return ""
    color = NEUTRAL
    direction = change.direction(0.005 if kind == "pts" else 0.02) if change else ""
    if better and direction in ("up", "down"):
        good = (direction == "up") == (better == "higher")
        color = GOOD if good else BAD
    return f'<div style="font-size:11px;color:{color};white-space:nowrap">{escape(text)}</div>'


def td(
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
        f"{delta_html(change, kind, better)}</td>"
    )


def th(text: str, align: str = "right") -> str:
    return (
        f'<th style="padding:6px 8px;border-bottom:2px solid {LINE};text-align:{align};'
        f"font-size:11px;font-weight:600;color:{MUTED};text-transform:uppercase;"
        f'letter-spacing:.03em;vertical-align:bottom">{escape(text)}</th>'
    )


def html_table(head: Sequence[str], rows: Sequence[str], first_left: bool = True) -> str:
    ths = "".join(th(h, "left" if i == 0 and first_left else "right") for i, h in enumerate(head))
    return (
        f'<table role="presentation" cellspacing="0" cellpadding="0" style="width:100%;'
        f'border-collapse:collapse;font-size:13px;color:{INK};margin:8px 0 4px">'
        f"<thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def h2(text: str, sub: str = "") -> str:
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


def h3(text: str) -> str:
    return f'<h3 style="font-size:14px;margin:18px 0 4px;color:{INK}">{escape(text)}</h3>'


def para(text: str, muted: bool = False) -> str:
    color = MUTED if muted else INK
    return (
        f'<p style="margin:6px 0;font-size:13px;line-height:1.5;color:{color}">{escape(text)}</p>'
    )


def img(chart: Chart, src: ImageSrc) -> str:
    return (
        f'<img src="{escape(src(chart))}" alt="{escape(chart.alt)}" width="760" '
        f'style="display:block;width:100%;max-width:760px;height:auto;margin:8px 0;'
        f'border:0">'
    )
