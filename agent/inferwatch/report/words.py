"""The report's own words: its days by name, the period, changes against the previous
period. Numbers themselves are written by :mod:`inferwatch.pack.fmt`."""

from __future__ import annotations

import datetime as dt

from inferwatch.pack.fmt import duration, percent
from inferwatch.report.model import Change, Period

ARROWS = {"up": "▲", "down": "▼", "flat": "▶", "": ""}


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
    return f"{arrow} {percent(abs(ratio))}"
