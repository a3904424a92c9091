"""Building blocks for the generated Grafana dashboards: selectors, threshold steps,
grafanalib panels of each kind, rows laid out on the grid, and the variables.

grafanalib's raw JSON is older than the Grafana schema we target; the builders
here put the modern fields grafanalib does not know into ``extraJson`` so that
:mod:`inferwatch.pack.dashboards.plain` only has to remove and convert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import attr
from grafanalib import core as g

from inferwatch.engines import contract

#: Every panel, target and query variable points at the ``datasource`` variable.
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}

#: The value a multi-value variable takes for "All": a regex that needs the label.
ALL_VALUE = ".+"

#: The "All" of a variable over a label that a deployment may not have (``cluster``: an
#: external label of multi-cluster setups; ``node``, ``namespace``, ``pod``: Kubernetes):
#: it also matches series without the label.
OPTIONAL_ALL_VALUE = ".*"

# Selectors shared by every query. GPU series carry ``gpu``; worker series carry
# ``worker`` and ``model``; both carry the ``job`` and ``instance`` Prometheus adds,
# and, where deployed so, ``cluster`` (external label) and ``node`` (the PodMonitor).
_BASE = 'cluster=~"$cluster", job=~"$job", node=~"$node", instance=~"$instance"'


def gpu_sel(extra: str = "") -> str:
    """Label selector for a GPU series, filtered by the dashboard's variables."""
    return "{" + _BASE + ', gpu=~"$gpu"' + (", " + extra if extra else "") + "}"


def worker_sel(extra: str = "") -> str:
    """Label selector for a worker series, filtered by the dashboard's variables."""
    return (
        "{"
        + _BASE
        + ', namespace=~"$namespace", pod=~"$pod", model=~"$model", worker=~"$worker"'
        + (", " + extra if extra else "")
        + "}"
    )


def host_sel(extra: str = "") -> str:
    """Label selector for a series that only carries ``job`` and ``instance``."""
    return "{" + _BASE + (", " + extra if extra else "") + "}"


# --- thresholds ---------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One threshold step: ``color`` from ``value`` upwards (None = the base)."""

    color: str
    value: float | None = None


def steps(base: str, *rest: tuple[float, str]) -> list[Step]:
    """Threshold steps from a base colour and (value, colour) pairs, sorted by value."""
    out = [Step(base)]
    for value, color in sorted(rest, key=lambda vc: vc[0]):
        if out[-1].value == value:
            out[-1] = Step(color, value)
        else:
            out.append(Step(color, float(value)))
    return out


def _grafanalib_thresholds(items: Sequence[Step]) -> list[g.Threshold]:
    return [
        g.Threshold(s.color, i, 0.0 if s.value is None else float(s.value))
        for i, s in enumerate(items)
    ]


# --- targets ------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A PromQL query of a panel, before it gets its refId."""

    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str = "time_series"


def _targets(queries: Sequence[Query]) -> list[g.Target]:
    if not queries:
        raise ValueError("a panel needs at least one query")
    return [
        g.Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=chr(ord("A") + i),
            instant=q.instant,
            format=q.fmt,
            datasource=DATASOURCE,
        )
        for i, q in enumerate(queries)
    ]


# --- links --------------------------------------------------------------------


def data_link(title: str, url: str, *, new_tab: bool = False) -> dict[str, Any]:
    """A field data link, in the shape the dashboard schema's link definition demands."""
    return {
        "asDropdown": False,
        "icon": "external link",
        "includeVars": False,
        "keepTime": False,
        "tags": [],
        "targetBlank": new_tab,
        "title": title,
        "tooltip": "",
        "type": "link",
        "url": url,
    }


def value_mappings(texts: Mapping[int, tuple[str, str]]) -> list[dict[str, Any]]:
    """Value -> (text, colour) mappings for state panels."""
    options = {
        str(value): {"color": color, "index": i, "text": text}
        for i, (value, (text, color)) in enumerate(sorted(texts.items()))
    }
    return [{"options": options, "type": "value"}]


# --- panels -------------------------------------------------------------------


def _common(title: str, description: str, queries: Sequence[Query]) -> dict[str, Any]:
    if not title or not description:
        raise ValueError("every panel needs a title and a description")
    return {
        "title": title,
        "description": description,
        "dataSource": DATASOURCE,
        "targets": _targets(queries),
    }


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: Sequence[Step] = (),
    threshold_style: str = "off",
    min_value: int | None = None,
    max_value: int | None = None,
    soft_max: int | None = None,
    stack: bool = False,
    bars: bool = False,
    fill: int = 10,
    links: Sequence[dict[str, Any]] = (),
    axis_label: str = "",
    calcs: Sequence[str] = ("mean", "max", "lastNotNull"),
) -> g.TimeSeries:
    """A time series panel; ``thresholds`` are drawn as lines or bands."""
    extra: dict[str, Any] = {"fieldConfig": {"defaults": {"links": list(links)}}}
    return g.TimeSeries(
        **_common(title, description, queries),
        unit=unit,
        thresholds=_grafanalib_thresholds(thresholds or steps("green")),
        thresholdsStyleMode=threshold_style,
        colorMode="palette-classic",
        valueMin=min_value,
        valueMax=max_value,
        axisSoftMax=soft_max,
        axisLabel=axis_label,
        stacking={"group": "A", "mode": "normal"} if stack else {"mode": "none"},
        drawStyle="bars" if bars else "line",
        fillOpacity=fill,
        lineWidth=1,
        showPoints="never",
        spanNulls=False,
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=list(calcs),
        tooltipMode="multi",
        tooltipSort="desc",
        extraJson=extra,
    )


def event_bars(title: str, description: str, queries: Sequence[Query]) -> g.TimeSeries:
    """Events counted per interval (XID errors, restarts, warm-ups) as solid bars."""
    return timeseries(title, description, queries, unit="short", min_value=0, bars=True, fill=80)


def stat(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    thresholds: Sequence[Step] = (),
    mappings: Sequence[dict[str, Any]] = (),
    calc: str = "lastNotNull",
    graph: bool = True,
    decimals: int | None = None,
    text_mode: str = "auto",
) -> g.Stat:
    """A single-value panel."""
    return g.Stat(
        **_common(title, description, queries),
        format=unit,
        thresholds=_grafanalib_thresholds(thresholds or steps("green")),
        mappings=list(mappings),
        reduceCalc=calc,
        graphMode="area" if graph else "none",
        colorMode="value",
        textMode=text_mode,
        decimals=decimals,
        color={"mode": "thresholds"},
        extraJson={
            "options": {
                "percentChangeColorMode": "standard",
                "showPercentChange": False,
                "wideLayout": True,
            }
        },
    )


def count_stat(
    title: str, description: str, expr: str, *, thresholds: Sequence[Step] = ()
) -> g.Stat:
    """A whole number of things now (GPUs up, alerts firing), without a graph."""
    return stat(
        title,
        description,
        [Query(expr)],
        unit="none",
        graph=False,
        decimals=0,
        thresholds=thresholds,
    )


def flag_stat(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    off: tuple[str, str],
    on: tuple[str, str],
) -> g.Stat:
    """A 0/1 gauge as a word and its colour: ``off`` and ``on`` are (text, colour)."""
    return stat(
        title,
        description,
        queries,
        unit="none",
        graph=False,
        mappings=value_mappings({0: off, 1: on}),
        thresholds=steps(off[1], (1, on[1])),
    )


def state_timeline(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    mappings: Sequence[dict[str, Any]],
    thresholds: Sequence[Step] = (),
    links: Sequence[dict[str, Any]] = (),
) -> g.StateTimeline:
    """Discrete states over time, one row per series."""
    return g.StateTimeline(
        **_common(title, description, queries),
        mappings=list(mappings),
        thresholds=_grafanalib_thresholds(thresholds or steps("green")),
        colorMode="thresholds",
        extraJson={
            "fieldConfig": {"defaults": {"links": list(links), "unit": "none"}},
            "options": {
                "legend": {"calcs": [], "showLegend": True},
                "tooltip": {"sort": "none"},
            },
        },
    )


def table(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str,
    exclude: Iterable[str] = (),
    rename: Mapping[str, str] | None = None,
    order: Sequence[str] = (),
    links: Sequence[dict[str, Any]] = (),
    sort_by: str | None = None,
) -> g.Table:
    """A table of instant results; label columns listed in ``exclude`` are hidden."""
    hidden = {"Time": True, "__name__": True, **{name: True for name in exclude}}
    index = {name: i for i, name in enumerate(order)}
    transformations = [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": hidden,
                "indexByName": index,
                "renameByName": dict(rename or {}),
            },
        },
    ]
    return g.Table(
        **_common(title, description, queries),
        unit=unit,
        displayMode="auto",
        filterable=True,
        transformations=transformations,
        sortBy=[g.TableSortByField(displayName=sort_by)] if sort_by else [],
        extraJson={"fieldConfig": {"defaults": {"links": list(links)}}},
    )


def heatmap(title: str, description: str, queries: Sequence[Query], *, unit: str) -> g.Heatmap:
    """A heatmap of histogram buckets (``format: heatmap`` queries), ``unit`` on the y axis."""
    panel = g.Heatmap(**_common(title, description, queries), dataFormat="tsbuckets")
    # grafanalib only knows the pre-v8 heatmap; the normaliser rebuilds its options
    # and reads the y-axis unit from here.
    return attr.evolve(panel, extraJson={"options": {"yAxis": {"unit": unit}}})


def row(title: str) -> g.RowPanel:
    return g.RowPanel(title=title)


# --- layout -------------------------------------------------------------------

#: Columns of Grafana's grid.
GRID_WIDTH = 24


@dataclass(frozen=True)
class Line:
    """Panels side by side on the grid, all ``h`` high, ``widths[i]`` columns each."""

    panels: tuple[Any, ...]
    widths: tuple[int, ...]
    h: int


def line(*panels: Any, h: int, widths: Sequence[int] = ()) -> Line:
    """Panels side by side, ``h`` high. Without ``widths`` they share the grid's width
    evenly, the first ones a column wider where it does not divide."""
    if not widths:
        w, wider = divmod(GRID_WIDTH, len(panels))
        widths = [w + 1 if i < wider else w for i in range(len(panels))]
    if len(widths) != len(panels) or sum(widths) > GRID_WIDTH:
        raise ValueError(f"{len(panels)} panels do not fit the widths {list(widths)}")
    return Line(tuple(panels), tuple(widths), h)


class Section:
    """A titled row of the dashboard: its lines of panels, top to bottom."""

    def __init__(self, title: str, *lines: Line) -> None:
        self.title = title
        self.lines = lines


def layout(sections: Sequence[Section]) -> list[Any]:
    """Panels with grid positions: a row panel per section, then its lines."""
    panels: list[Any] = []
    y = 0
    for section in sections:
        panels.append(
            attr.evolve(row(section.title), gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=y))
        )
        y += 1
        for panel_line in section.lines:
            x = 0
            for panel, w in zip(panel_line.panels, panel_line.widths, strict=True):
                panels.append(attr.evolve(panel, gridPos=g.GridPos(h=panel_line.h, w=w, x=x, y=y)))
                x += w
            y += panel_line.h
    return panels


# --- variables ----------------------------------------------------------------


def datasource_variable() -> g.Template:
    return g.Template(
        name="datasource",
        label="Data source",
        query="prometheus",
        type="datasource",
        refresh=1,
    )


def query_variable(
    name: str, metric: str, selector: str = "", *, all_value: str = ALL_VALUE
) -> g.Template:
    """A multi-value query variable over the values of ``name`` on ``metric``."""
    definition = f"label_values({metric}{selector}, {name})"
    return g.Template(
        name=name,
        label=name,
        query=definition,
        dataSource=DATASOURCE,
        type="query",
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        includeAll=True,
        multi=True,
        allValue=all_value,
        default="$__all",
        sort=g.SORT_ALPHA_IGNORE_CASE_ASC,
    )


def standard_variables() -> list[g.Template]:
    """datasource, cluster, job, node, instance, namespace, pod, model, worker, gpu: the
    same on every dashboard. cluster, node, namespace and pod match series without their
    label when All (a single cluster, no Kubernetes)."""
    optional = OPTIONAL_ALL_VALUE
    return [
        datasource_variable(),
        query_variable("cluster", contract.AGENT_INFO.name, all_value=optional),
        query_variable("job", contract.AGENT_INFO.name, '{cluster=~"$cluster"}'),
        query_variable(
            "node",
            contract.AGENT_INFO.name,
            '{cluster=~"$cluster", job=~"$job"}',
            all_value=optional,
        ),
        query_variable(
            "instance",
            contract.AGENT_INFO.name,
            '{cluster=~"$cluster", job=~"$job", node=~"$node"}',
        ),
        query_variable("namespace", contract.TARGET_UP.name, host_sel(), all_value=optional),
        query_variable(
            "pod", contract.TARGET_UP.name, host_sel('namespace=~"$namespace"'), all_value=optional
        ),
        query_variable("model", contract.REQUESTS_RUNNING.name, host_sel()),
        query_variable(
            "worker", contract.TARGET_UP.name, host_sel('namespace=~"$namespace", pod=~"$pod"')
        ),
        query_variable("gpu", contract.GPU_INFO.name, host_sel()),
    ]
