"""The error-budget section, as HTML and as text."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from inferwatch.pack import fmt
from inferwatch.report.budget import TITLES as SLO_TITLES
from inferwatch.report.budget import BudgetFigures
from inferwatch.report.render.common import text_table
from inferwatch.report.render.htmlkit import BAD, GOOD, LINE, h2, html_table, para, td
from inferwatch.report.summary import Report


def _objective_text(b: BudgetFigures) -> str:
    good = f"within {fmt.seconds(b.le)}" if b.le is not None else "without error or rejection"
    return f"{fmt.pct(b.objective)} {good}"


def budget_cells(b: BudgetFigures) -> list[str]:
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


def budget_section(report: Report, budgets: Sequence[BudgetFigures]) -> str:
    if not budgets:
        return ""
    window = budgets[0].share_of_window
    sub = (
        f"share of each SLO's error budget this {report.period.days}-day period spent "
        f"({fmt.percent(window, 1)} of the SLO window)"
    )
    rows = []
    for b in budgets:
        cells = budget_cells(b)
        color = BAD if b.budget_used >= window else GOOD
        rows.append(
            "<tr>"
            + td(cells[0], align="left", bold=True)
            + "".join(td(c, align="left" if i < 2 else "right") for i, c in enumerate(cells[1:-1]))
            + f'<td style="padding:6px 8px;border-bottom:1px solid {LINE};text-align:right;'
            f'vertical-align:top;color:{color};font-weight:600">{escape(cells[-1])}</td>' + "</tr>"
        )
    return (
        h2("Error budgets", sub)
        + html_table(BUDGET_HEAD, rows)
        + para(
            "Burn rate 1 spends a budget in exactly its window; the budget used is the burn "
            "rate times this period's share of the window (green below that share, red at "
            "or above it).",
            muted=True,
        )
    )


def budget_lines(budgets: Sequence[BudgetFigures]) -> list[str]:
    if not budgets:
        return []
    table = text_table([h.lower() for h in BUDGET_HEAD], [budget_cells(b) for b in budgets])
    return ["ERROR BUDGETS", "", table, ""]
