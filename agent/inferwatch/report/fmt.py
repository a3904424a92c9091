"""Formatting of numbers for people: latencies, shares, counts, durations, days, deltas."""

from __future__ import annotations

import datetime as dt

from inferwatch.report.model import Change, Over, Period

DASH = "–"
ARROWS = {"up": "▲", "down": "▼", "flat": "▶", "": ""}


def seconds(value: float | None) -> str:
    """A latency: ``850 ms``, ``1.75 s``, ``12 s``; ``over 60.0 s`` for a quantile past the
    histogram's largest finite bucket (``model.Over``)."""
    if value is None:
        return DASH
    if isinstance(value, Over):
        return f"over {seconds(float(value))}"
    if value < 0.001:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        ms = value * 1000
        return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"
    if value < 10:
        return f"{value:.2f} s"
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def percent(value: float | None, digits: int = 0) -> str:
    if value is None:
        return DASH
    return f"{value * 100:.{digits}f}%"


def count(value: float | None) -> str:
    """``950``, ``12.3 k``, ``4.56 M``, ``1.2 G``."""
    if value is None:
        return DASH
    v = abs(value)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            x = value / div
            return f"{x:.3g} {unit}" if abs(x) < 100 else f"{x:.0f} {unit}"
    return f"{value:.0f}"


def duration(value: float | None) -> str:
    """``45s``, ``12m``, ``2h 05m``, ``3d 4h``."""
    if value is None:
        return DASH
    s = round(value)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def gib(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value / 1024**3:.1f} GiB"


def day(t: float) -> str:
    """``Fri 20 Nov`` (UTC)."""
    d = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return f"{d:%a} {d.day} {d:%b}"


def day_label(period: Period, i: int) -> str:
    """What day ``i`` of ``period`` is called in tables and charts: ``Mon 30 Nov`` for a
    calendar day.

    Days that do not start at midnight (``--end now``) are the 24 hours up to a
    time, so they are named by their end, ``to Tue 1 Dec 10:00``: named by their
    start, Tuesday morning's traffic would read as Monday's.
    """
    if period.aligned:
        return day_name(period, i)
    return f"to {day_name(period, i)} {end_time(period)}"


def day_name(period: Period, i: int) -> str:
    """The day that day ``i`` of ``period`` is named by, ``Sun 6 Dec``: a calendar day's
    own, else the day its 24 hours end on (:func:`day_label`)."""
    return day(period.day_ends()[i] - 1)


def end_time(period: Period) -> str:
    """``18:00``: the time of day (UTC) at which each of the period's days ends."""
    return f"{dt.datetime.fromtimestamp(period.end, dt.timezone.utc):%H:%M}"


def day_date(period: Period, i: int) -> str:
    """The ISO date of :func:`day_name`, ``2026-12-06``: the CSV's ``date`` and the
    attachment's name, so every format names a day alike."""
    return date(period.day_ends()[i] - 1)


def span(days: int) -> str:
    """``7 days``, ``1 day``."""
    return f"{days} day" if days == 1 else f"{days} days"


def period_noun(days: int) -> str:
    """What the period is called in sentences: ``week`` for 7 days, else ``period``."""
    return "week" if days == 7 else "period"


def date(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d")


def timestamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def delta(change: Change | None, kind: str) -> str:
    """The change against the previous period as text: ``▲ 12 %``, ``▼ 3 pts``, ``new``.

    ``kind`` is how the figure is compared: ``rel`` (relative, counts and
    latencies), ``pts`` (percentage points, shares), ``abs_seconds`` (durations).
    """
    if change is None or change.current is None:
        return ""
    if change.previous is None:
        return "new"
    direction = change.direction(flat=0.005 if kind == "pts" else 0.02)
    arrow = ARROWS[direction]
    d = change.delta or 0.0
    if kind == "pts":
        if abs(d) < 0.005:
            return f"{ARROWS['flat']} 0 pts"
        points = round(abs(d) * 100)
        return f"{arrow} {points} pt{'s' if points != 1 else ''}"
    if kind == "abs_seconds":
        if d == 0:
            return f"{ARROWS['flat']} 0"
        return f"{arrow} {duration(abs(d))}"
    if kind == "abs_count":
        if d == 0:
            return f"{ARROWS['flat']} 0"
        return f"{arrow} {abs(d):.0f}"
    ratio = change.ratio
    if ratio is None:
        return f"{arrow} from 0" if d else f"{ARROWS['flat']} 0%"
    if abs(ratio) < 0.005:
        return f"{ARROWS['flat']} 0%"
    return f"{arrow} {abs(ratio) * 100:.0f}%"
