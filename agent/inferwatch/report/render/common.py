"""What every format of the report shares: its title, its period in words, text tables."""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.report import words
from inferwatch.report.model import Change
from inferwatch.report.summary import Report

LEVELS = {
    "act": ("ACT", "#cf1124", "#ffe3e3"),
    "watch": ("WATCH", "#b44d12", "#fff3c4"),
    "ok": ("OK", "#0c6b58", "#c6f7e2"),
}


def title(report: Report) -> str:
    # "weekly report" is the product's name (mail filters match it), whatever --days is
    return f"inferwatch weekly report: {period_text(report)}"


def period_text(report: Report) -> str:
    p = report.period
    if not p.aligned:
        # 24-hour days up to a time (--end now): the ends say which hours these are.
        return f"{words.timestamp(p.start)} – {words.timestamp(p.end)}"
    last_day = p.end - 1
    year = words.date(last_day)[:4]
    if p.days == 1:
        return f"{words.day(last_day)} {year}"
    return f"{words.day(p.start)} – {words.day(last_day)} {year}"


def period_sentence(report: Report) -> str:
    """``7 days to 2026-11-23 00:00 UTC, compared with the 7 days before. Days are UTC.``"""
    p = report.period
    days = "24-hour windows ending at that time" if not p.aligned else "UTC days"
    before = "the day before" if p.days == 1 else f"the {words.span(p.days)} before"
    return f"{words.span(p.days)} to {words.timestamp(p.end)}, compared with {before}. Days are {days}."


def current_and_previous(report: Report) -> tuple[str, str]:
    """Row labels of the period and the one before: ``This week``/``Last week``."""
    noun = words.period_noun(report.period.days)
    return (f"This {noun}", "Last week" if noun == "week" else "Previous period")


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
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


def with_delta(value: str, change: Change | None, kind: str) -> str:
    d = words.delta(change, kind)
    return f"{value} ({d})" if d else value
