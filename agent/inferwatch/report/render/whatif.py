"""The "What-if advice, checked" section, as HTML and as text."""

from __future__ import annotations

from inferwatch.pack import fmt
from inferwatch.report import words
from inferwatch.report.render.common import text_table
from inferwatch.report.render.htmlkit import h2, html_table, para, td
from inferwatch.report.summary import Report
from inferwatch.report.whatif import FIGURE_NAMES, WhatIfSection

WHATIF_HEAD = ["Seen", "Worker", "Change", "Figure", "Predicted", "Measured", "Error"]


def _whatif_value(figure: str, v: float | None) -> str:
    if v is None:
        return fmt.DASH
    if figure.startswith("ttft"):
        return fmt.seconds(v)
    return f"{v:.1f}" if abs(v) < 1000 else fmt.count(v)


def whatif_rows(w: WhatIfSection) -> list[list[str]]:
    """One row per change and figure; the change's cells on its first row only."""
    rows = []
    for c in w.changes:
        change = f"{c.flag} {c.old} -> {c.new}" if c.old else f"{c.flag} -> {c.new}"
        head = [words.timestamp(c.at), c.worker, change]
        if not c.figures:
            rows.append([*head, fmt.DASH, fmt.DASH, fmt.DASH, fmt.DASH])
        for i, f in enumerate(c.figures):
            rows.append(
                [
                    *(head if i == 0 else ["", "", ""]),
                    FIGURE_NAMES[f.figure],
                    _whatif_value(f.figure, f.predicted),
                    _whatif_value(f.figure, f.measured),
                    fmt.percent(f.error, sign=True),
                ]
            )
    return rows


def whatif_summary(w: WhatIfSection) -> str:
    n = len(w.changes)
    changes = f"{n} flag change{'s' if n != 1 else ''}"
    if not w.median_abs_error:
        return f"{changes} this period; no figure had both a prediction and an outcome."
    parts = ", ".join(
        f"{FIGURE_NAMES[f]} {fmt.percent(err)} ({k})" for f, (err, k) in w.median_abs_error.items()
    )
    return f"Median absolute error over {changes}: {parts}."


def whatif_section(report: Report, w: WhatIfSection | None) -> str:
    if w is None:
        return ""
    rows = [
        "<tr>"
        + "".join(td(c, align="left" if i < 4 else "right") for i, c in enumerate(cells))
        + "</tr>"
        for cells in whatif_rows(w)
    ]
    return (
        h2(
            "What-if advice, checked",
            "advise --shadow: the prediction made before each launch-flag change this "
            f"{words.period_noun(report.period.days)} against what followed",
        )
        + para(whatif_summary(w))
        + html_table(WHATIF_HEAD, rows)
        + para(
            "Error = (predicted - measured) / measured. The prediction comes from the fit "
            "kept before the change, replaying the load seen after it.",
            muted=True,
        )
    )


def whatif_lines(w: WhatIfSection | None) -> list[str]:
    if w is None:
        return []
    table = text_table([h.lower() for h in WHATIF_HEAD], whatif_rows(w))
    return ["WHAT-IF ADVICE, CHECKED", "", "  " + whatif_summary(w), "", table, ""]
