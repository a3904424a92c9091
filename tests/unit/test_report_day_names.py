"""Issue 39 item 4: a report day is named by the day its data covers, everywhere.

A week of 24-hour windows up to Sunday 6 December 2026, 18:00 UTC (``--end now`` on a
Sunday evening): the last window is the data of Sunday 6 December (Saturday 18:00 to
Sunday 18:00, named by its end like the tables). Its findings, its CSV rows and the
mailed attachment name must all say Sunday 6 December, and calendar days (``--end
today``) keep naming each day by its own date.
"""

from __future__ import annotations

import calendar
import csv
import io
import math
import re

from tests.support.report_raw import steady_gpu, steady_worker

from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report import render
from inferwatch.report.build import build_report
from inferwatch.report.model import (
    Buckets,
    Hourly,
    Period,
    RawData,
)
from inferwatch.report.summary import Report

SUNDAY_18 = calendar.timegm((2026, 12, 6, 18, 0, 0))
MONDAY_MIDNIGHT = calendar.timegm((2026, 12, 7, 0, 0, 0))  # --end today on Monday 7 Dec

FAST: Buckets = ((0.1, 50.0), (0.25, 99.5), (2.5, 100.0), (math.inf, 100.0))
# every first token of the last day over the 2.5 s SLO
SLOW: Buckets = ((0.1, 0.0), (0.25, 0.0), (2.5, 0.0), (10.0, 100.0), (math.inf, 100.0))


def _report(period: Period) -> Report:
    n = 2 * period.days
    worker = steady_worker("w0", n, {"ttft": (FAST,) * (n - 1) + (SLOW,)})
    gpu = steady_gpu(n)
    raw = RawData(period, (worker,), (gpu,), (), Hourly((), (), "", (), ()), ())
    return build_report(raw, load_thresholds())


def _csv_dates(report: Report, metric: str) -> list[str]:
    rows = csv.DictReader(io.StringIO(render.csv_text(report)))
    return [
        r["date"]
        for r in rows
        if r["metric"] == metric and r["scope"] == "worker" and r["period"] == "current"
    ]


def _first_went_up(report: Report) -> str:
    evidence = " ".join(f.evidence for f in report.findings)
    found = re.search(r"first went up on ([^.]+)\.", evidence)
    assert found, evidence
    return found.group(1)


def test_windows_up_to_sunday_evening_are_sunday_everywhere() -> None:
    report = _report(Period(SUNDAY_18, 7))
    text = render.text(report)
    # the table, as before: the last row is the window that ends on Sunday
    assert "to Sun 6 Dec 18:00" in text
    # the finding names that day as the table does, never "Sat 5 Dec"
    assert _first_went_up(report) == "Sun 6 Dec (the 24 hours to 18:00)"
    # the CSV: 30 Nov .. 6 Dec, the last day Sunday's, as the attachment says
    dates = _csv_dates(report, "requests")
    assert dates == [f"2026-{d}" for d in ("11-30", *(f"12-0{i}" for i in range(1, 7)))]
    assert render.csv_name(report) == "inferwatch-daily-2026-12-06.csv"
    assert render.csv_name(report) == f"inferwatch-daily-{dates[-1]}.csv"


def test_calendar_days_are_named_by_their_own_date() -> None:
    report = _report(Period(MONDAY_MIDNIGHT, 7))
    assert _first_went_up(report) == "Sun 6 Dec"
    assert "Sun 6 Dec" in render.text(report)
    dates = _csv_dates(report, "requests")
    assert dates[0] == "2026-11-30" and dates[-1] == "2026-12-06"
    assert render.csv_name(report) == "inferwatch-daily-2026-12-06.csv"
    assert render.title(report) == "inferwatch weekly report: Mon 30 Nov – Sun 6 Dec 2026"


def test_one_window_reads_as_the_day_it_ends() -> None:
    report = _report(Period(SUNDAY_18, 1))
    assert _csv_dates(report, "requests") == ["2026-12-06"]
    assert _first_went_up(report) == "Sun 6 Dec (the 24 hours to 18:00)"
