"""The overview dashboard's cost row: GPU-hours by state, money, cost and energy per token.

Reads the cost group's recording rules (``pack.rules.cost``). Without prices the
money panels show GPU-hours instead. Hours over the dashboard's time range are
``sum_over_time`` of the 0/1 state series times the rule interval
(``pack.scrape_interval``): one evaluation stands for one interval of a GPU.
"""

from __future__ import annotations

from inferwatch.pack import loops as L
from inferwatch.pack.dashboards import panels as p
from inferwatch.pack.dashboards.panels import Query, Section, gpu_sel, steps
from inferwatch.pack.fmt import pct
from inferwatch.pack.names import cost_names, names
from inferwatch.pack.rules import cost
from inferwatch.pack.thresholds import Thresholds

#: ISO codes Grafana has a unit for (packages/grafana-data/src/valueFormats/categories.ts,
#: the "Currency" category); any other currency is shown as a plain number with its code
GRAFANA_CURRENCIES = frozenset(
    [
        "USD",
        "GBP",
        "EUR",
        "JPY",
        "RUB",
        "UAH",
        "BRL",
        "DKK",
        "ISK",
        "NOK",
        "SEK",
        "CZK",
        "CHF",
        "PLN",
        "ZAR",
        "INR",
        "KRW",
        "IDR",
        "PHP",
        "VND",
    ]
)

#: model-level series carry no instance label: ``$instance|`` lets them through
_MODEL_SEL = '{job=~"$job", instance=~"$instance|", model=~"$model"}'


def money_unit(currency: str | None) -> str:
    return f"currency{currency}" if currency in GRAFANA_CURRENCIES else "short"


def _hours(t: Thresholds, expr: str, range_: str = "$__range", offset: str = "") -> str:
    return cost.hours(expr, range_, t.pack.scrape_interval, offset)


def cost_section(t: Thresholds) -> Section:
    c = cost_names(t)
    priced = t.pricing.enabled
    currency = t.pricing.currency or ""
    wasted = 'state!="serving"'
    if priced:
        waste_title = f"Money on idle GPUs ({currency}, time range)"
        waste_query = f"sum({_hours(t, c.gpu_cost + gpu_sel(wasted))})"
        waste_unit = money_unit(currency)
        per_mtok_title = f"Cost per million generated tokens ({currency})"
        per_mtok = Query(f"{c.model_cost_per_mtok}{_MODEL_SEL}", "{{model}}")
        per_mtok_unit = money_unit(currency)
        per_mtok_text = (
            f"GPU cost per hour of the model's GPUs (serving and held idle) over its generated "
            f"tokens per hour, times a million ({c.model_cost_per_mtok})."
        )
    else:
        waste_title = "GPU-hours held idle or unallocated (time range)"
        waste_query = f"sum({_hours(t, c.gpu_states + gpu_sel(wasted))})"
        waste_unit = "short"
        per_mtok_title = "GPU-hours per million generated tokens"
        per_mtok = Query(f"{c.model_gpu_hours_per_mtok}{_MODEL_SEL}", "{{model}}")
        per_mtok_unit = "short"
        per_mtok_text = (
            "GPUs the model holds (serving and held idle) over its generated tokens per hour, "
            f"times a million ({c.model_gpu_hours_per_mtok}). Set pricing: in the thresholds "
            "file to see money."
        )
    states_text = (
        "Serving: a worker on the GPU and utilization at or above "
        f"{pct(L.WASTE.of(t))} ({L.WASTE.key}); held idle: a "
        "worker on it, utilization below; unallocated: no worker. A GPU shared by several "
        "workers counts once."
    )
    return Section(
        "What the GPUs cost: GPU-hours, money and energy",
        p.line(
            p.stat(
                "GPU-hours by state (time range)",
                "GPU-hours over the dashboard's time range. " + states_text,
                [
                    Query(
                        f"sum by (state) ({_hours(t, c.gpu_states + gpu_sel())})",
                        "{{state}}",
                        instant=True,
                    )
                ],
                unit="short",
                graph=False,
                decimals=1,
                text_mode="value_and_name",
            ),
            p.stat(
                waste_title,
                "Held idle plus unallocated, over the dashboard's time range. " + states_text,
                [Query(waste_query, instant=True)],
                unit=waste_unit,
                graph=False,
                decimals=1,
                thresholds=steps("green", (0.000001, "orange")),
            ),
            p.timeseries(
                "Wasted GPU-hours per day, against the week before",
                "GPU-hours held idle or unallocated in the 24 hours to each point, and the same "
                "a week earlier. " + states_text,
                [
                    Query(f"sum({_hours(t, c.gpu_states + gpu_sel(wasted), '1d')})", "this week"),
                    Query(
                        f"sum({_hours(t, c.gpu_states + gpu_sel(wasted), '1d', '1w')})",
                        "the week before",
                    ),
                ],
                unit="short",
                axis_label="GPU-hours per day",
                min_value=0,
            ),
            h=6,
            widths=(8, 4, 12),
        ),
        p.line(per_model_table(t), h=7),
        p.line(
            p.timeseries(
                "GPUs by state",
                "How many of the selected GPUs serve, are held idle or have no worker now. "
                + states_text,
                [Query(f"sum by (state) ({c.gpu_states}{gpu_sel()})", "{{state}}")],
                unit="short",
                axis_label="GPUs",
                min_value=0,
                stack=True,
                fill=40,
            ),
            p.timeseries(
                "Model GPU utilization against the waste threshold",
                "Average utilization of each model's own GPUs; below the line "
                f"({pct(L.WASTE.of(t))}, {L.WASTE.key}) its GPUs "
                "count as held idle.",
                [Query(f"{names(t).model_util}{_MODEL_SEL}", "{{model}}")],
                unit="percentunit",
                thresholds=steps("red", (L.WASTE.of(t), "green")),
                threshold_style="line",
                min_value=0,
                max_value=1,
            ),
            p.timeseries(
                per_mtok_title,
                per_mtok_text,
                [per_mtok],
                unit=per_mtok_unit,
                min_value=0,
            ),
            h=8,
        ),
        p.line(
            p.timeseries(
                "Energy per generated token",
                "Power of the model's GPUs (NVML's energy counter, split like the GPUs) over "
                f"its generated tokens per second ({c.model_energy_per_token}).",
                [Query(f"{c.model_energy_per_token}{_MODEL_SEL}", "{{model}}")],
                unit="joule",
                min_value=0,
            ),
            p.timeseries(
                "Energy per model (time range)",
                "Energy of each model's GPUs over the dashboard's time range, from NVML's energy "
                f"counter ({c.model_power}).",
                [
                    Query(
                        f"sum by (model) (sum_over_time({c.model_power}{_MODEL_SEL}[$__range])) * "
                        f"{cost.lit(t.pack.scrape_interval / 3600 / 1000)}",
                        "{{model}}",
                    )
                ],
                unit="kwatth",
                min_value=0,
                bars=True,
            ),
            h=8,
        ),
    )


def per_model_table(t: Thresholds) -> object:
    """One row per model: GPU-hours (and money) serving and held idle over the time range."""
    c = cost_names(t)
    columns: list[tuple[str, str]] = [
        (f"{c.model_states}", "GPU-hours"),
    ]
    if t.pricing.enabled:
        columns.append((f"{c.model_cost}", t.pricing.currency or ""))
    queries: list[Query] = []
    rename: dict[str, str] = {}
    refs = "ABCDEFGH"
    for series, unit in columns:
        for state in ("serving", "held_idle"):
            sel = _MODEL_SEL[:-1] + f', state="{state}"}}'
            queries.append(
                Query(
                    f"sum by (model) ({_hours(t, series + sel)})",
                    instant=True,
                    fmt="table",
                )
            )
            rename[f"Value #{refs[len(queries) - 1]}"] = f"{state.replace('_', ' ')}, {unit}"
    return p.table(
        "Per model over the time range",
        "GPU-hours each model's workers held over the dashboard's time range, serving and "
        "held idle"
        + (f", and what they cost in {t.pricing.currency}" if t.pricing.enabled else "")
        + ". A GPU shared by several workers is split between them; GPUs with no worker "
        "(unallocated) belong to no model and are counted in the GPU-hours by state.",
        queries,
        unit="short",
        exclude=("Time",),
        rename=rename,
        order=("model", *rename.values()),
        sort_by=list(rename.values())[-1],
    )
