"""The "SLOs and error budgets" row of the Inference overview dashboard (pack.rules.slo's series).

Kept apart from :mod:`inferwatch.pack.rules.slo`: the rules do not import the dashboards'
panel model. ``section(t)`` is None when ``slos.enabled`` is off.
SLO series are per model (labels ``job, model, slo``): they have no ``instance``, so
the instance matcher also accepts an empty value, as the alert panels' do.
"""

from __future__ import annotations

from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.panels import Query, Section, steps
from inferwatch.pack.names import SLO_BUDGET_REMAINING, slo_burn_rate, slo_errors
from inferwatch.pack.rules import slo
from inferwatch.pack.thresholds import Thresholds

TITLE = "SLOs and error budgets"
SLO_SEL = '{job=~"$job", instance=~"$instance|", model=~"$model"}'


def section(t: Thresholds) -> Section | None:
    if not slo.kinds(t.slos):
        return None
    budget = slo.window_name(t.slos.window)
    fast = slo.BURNS[0]
    sli = p.timeseries(
        "SLI per model",
        "Share of each model's requests that met its objective over the last "
        f"{fast.long} (latency at or under the threshold, or finished without an error "
        "or rejection): one line per model and objective (slos: in the thresholds).",
        [Query(f"1 - {slo_errors(fast.long)}{SLO_SEL}", "{{model}} {{slo}}")],
        unit="percentunit",
        max_value=1,
        fill=0,
    )
    left = p.stat(
        "Error budget left",
        f"Share of the {budget} error budget still unspent, per model and objective: 100% "
        "untouched, 0 spent, negative overspent.",
        [Query(f"{SLO_BUDGET_REMAINING}{SLO_SEL}", "{{model}} {{slo}}")],
        unit="percentunit",
        thresholds=steps("red", (0, "orange"), (0.25, "green")),
    )
    burn = p.timeseries(
        "Burn rates",
        "How many times faster than the objective allows each budget is being spent, "
        "over the alerts' long windows (1 = exactly on budget). The dashed lines are "
        "the factors that page ("
        + ", ".join(f"{slo.num_text(b.factor)}x over {b.long}" for b in slo.BURNS)
        + "; the short window must agree).",
        [
            Query(f"{slo_burn_rate(b.long)}{SLO_SEL}", "{{model}} {{slo}} " + b.long)
            for b in slo.BURNS
        ],
        unit="none",
        min_value=0,
        thresholds=steps("green", (1, "yellow"), (6, "orange"), (14.4, "red")),
        threshold_style="dashed",
        fill=0,
    )
    return Section(TITLE, p.line(sli, left, burn, h=8, widths=(10, 4, 10)))
