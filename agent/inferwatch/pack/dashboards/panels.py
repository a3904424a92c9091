"""Building blocks of the generated Grafana dashboards, written directly in Grafana's
current dashboard schema: selectors, threshold steps, a small panel model
(:class:`Panel`, :class:`Row`), a builder per panel kind, rows laid out on the grid,
the variables and the dashboard's frame (:func:`dashboard_json`).

Each builder fills in the fields Grafana 11 and 12 write themselves for that panel kind
(schemaVersion :data:`SCHEMA_VERSION`), so the JSON validates against Grafana's dashboard
and panel schemas as built; docs/dashboards.md says why this is not grafanalib.

Two quirks of the schema shape what panels may use: a field override's value and its
matcher's options are typed as objects (so no ``byName``/``byRegexp`` overrides and no
scalar override values: series are told apart by legend), and a table's ``cellOptions``
with only a ``type`` matches several of its ``oneOf`` shapes (so tables keep Grafana's
default cell and write no ``cellOptions``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferwatch.engines import contract

#: Grafana v11 writes schemaVersion 39 to 41; 41 is the newest of that line and loads
#: unchanged in Grafana 11.3+ and 12 (older ones migrate nothing they lack).
SCHEMA_VERSION = 41

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


def _thresholds(items: Sequence[Step]) -> dict[str, Any]:
    """Absolute threshold steps; the first is the base (value null), green without any."""
    items = items or steps("green")
    return {
        "mode": "absolute",
        "steps": [
            {"color": s.color, "value": None if i == 0 or s.value is None else float(s.value)}
            for i, s in enumerate(items)
        ],
    }


# --- targets ------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A PromQL query of a panel, before it gets its refId."""

    expr: str
    legend: str = ""
    instant: bool = False
    fmt: str = "time_series"

    def to_json(self, index: int) -> dict[str, Any]:
        """The Prometheus target, ``index`` giving its refId (A, B, ...)."""
        return {
            "datasource": dict(DATASOURCE),
            "editorMode": "code",
            "expr": self.expr,
            "format": self.fmt,
            "instant": self.instant,
            "legendFormat": self.legend or "__auto",
            "range": not self.instant,
            "refId": chr(ord("A") + index),
        }


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


# --- the panel model ----------------------------------------------------------


@dataclass(frozen=True)
class GridPos:
    """Where a panel sits on Grafana's 24-column grid."""

    x: int
    y: int
    w: int
    h: int

    def to_json(self) -> dict[str, int]:
        return {"h": self.h, "w": self.w, "x": self.x, "y": self.y}


@dataclass(frozen=True)
class Panel:
    """A panel of one of Grafana's kinds (``timeseries``, ``stat``, ``table``,
    ``state-timeline``, ``heatmap``): its queries, and its field defaults and options as
    Grafana's schema for that kind spells them (the builders below fill them in)."""

    kind: str
    title: str
    description: str
    targets: tuple[Query, ...]
    defaults: Mapping[str, Any]
    options: Mapping[str, Any]
    transformations: tuple[Mapping[str, Any], ...] = ()
    grid: GridPos | None = None

    def __post_init__(self) -> None:
        if not self.title or not self.description:
            raise ValueError("every panel needs a title and a description")
        if not self.targets:
            raise ValueError(f"panel {self.title!r} needs at least one query")

    def to_json(self, panel_id: int) -> dict[str, Any]:
        if self.grid is None:
            raise ValueError(f"panel {self.title!r} has no place on the grid")
        out: dict[str, Any] = {
            "datasource": dict(DATASOURCE),
            "description": self.description,
            "fieldConfig": {"defaults": copy.deepcopy(dict(self.defaults)), "overrides": []},
            "gridPos": self.grid.to_json(),
            "id": panel_id,
            "options": copy.deepcopy(dict(self.options)),
            "targets": [q.to_json(i) for i, q in enumerate(self.targets)],
            "title": self.title,
            "type": self.kind,
        }
        if self.transformations:
            out["transformations"] = copy.deepcopy(list(self.transformations))
        return out


@dataclass(frozen=True)
class Row:
    """A row panel: the title above a section's panels (never collapsed)."""

    title: str
    grid: GridPos | None = None

    def to_json(self, panel_id: int) -> dict[str, Any]:
        if self.grid is None:
            raise ValueError(f"row {self.title!r} has no place on the grid")
        return {
            "collapsed": False,
            "gridPos": self.grid.to_json(),
            "id": panel_id,
            "panels": [],
            "title": self.title,
            "type": "row",
        }


#: Series shown in the legend, the tooltip and the plot (the schema's ``hideFrom``).
_SHOWN = {"legend": False, "tooltip": False, "viz": False}


def _field(
    unit: str,
    thresholds: Sequence[Step],
    *,
    color: str,
    custom: Mapping[str, Any],
    mappings: Sequence[dict[str, Any]] | None = None,
    links: Sequence[dict[str, Any]] = (),
    **limits: float | None,
) -> dict[str, Any]:
    """A panel's field defaults: the keys Grafana leaves out when unset stay out
    (``mappings`` None, no ``links``, a limit of None)."""
    out: dict[str, Any] = {
        "color": {"mode": color},
        "custom": dict(custom),
        "thresholds": _thresholds(thresholds),
        "unit": unit,
    }
    if mappings is not None:
        out["mappings"] = list(mappings)
    if links:
        out["links"] = list(links)
    out.update({key: value for key, value in limits.items() if value is not None})
    return out


# --- panels -------------------------------------------------------------------


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
) -> Panel:
    """A time series panel; ``thresholds`` are drawn as lines or bands."""
    custom: dict[str, Any] = {
        "axisPlacement": "auto",
        "barAlignment": 0,
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": fill,
        "gradientMode": "none",
        "hideFrom": dict(_SHOWN),
        "lineInterpolation": "linear",
        "lineWidth": 1,
        "pointSize": 5,
        "scaleDistribution": {"type": "linear"},
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal"} if stack else {"mode": "none"},
        "thresholdsStyle": {"mode": threshold_style},
    }
    if axis_label:
        custom["axisLabel"] = axis_label
    if soft_max is not None:
        custom["axisSoftMax"] = soft_max
    defaults = _field(
        unit,
        thresholds,
        color="palette-classic",
        custom=custom,
        mappings=[],
        links=links,
        min=min_value,
        max=max_value,
    )
    options = {
        "legend": {
            "calcs": list(calcs),
            "displayMode": "table",
            "placement": "bottom",
            "showLegend": True,
        },
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return Panel("timeseries", title, description, tuple(queries), defaults, options)


def event_bars(title: str, description: str, queries: Sequence[Query]) -> Panel:
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
) -> Panel:
    """A single-value panel."""
    defaults = _field(
        unit, thresholds, color="thresholds", custom={}, mappings=mappings, decimals=decimals
    )
    return Panel(
        "stat",
        title,
        description,
        tuple(queries),
        defaults,
        {
            "colorMode": "value",
            "graphMode": "area" if graph else "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "percentChangeColorMode": "standard",
            "reduceOptions": {"calcs": [calc], "fields": "", "values": False},
            "showPercentChange": False,
            "textMode": text_mode,
            "wideLayout": True,
        },
    )


def count_stat(
    title: str, description: str, expr: str, *, thresholds: Sequence[Step] = ()
) -> Panel:
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
) -> Panel:
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
) -> Panel:
    """Discrete states over time, one row per series."""
    return Panel(
        "state-timeline",
        title,
        description,
        tuple(queries),
        _field(
            "none",
            thresholds,
            color="thresholds",
            custom={"fillOpacity": 70, "hideFrom": dict(_SHOWN), "lineWidth": 0},
            mappings=mappings,
            links=links,
        ),
        {
            "alignValue": "left",
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
            },
            "mergeValues": True,
            "rowHeight": 0.9,
            "showValue": "auto",
            "tooltip": {"mode": "single", "sort": "none"},
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
) -> Panel:
    """A table of instant results; label columns listed in ``exclude`` are hidden."""
    hidden = {"Time": True, "__name__": True, **{name: True for name in exclude}}
    index = {name: i for i, name in enumerate(order)}
    transformations = (
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": hidden,
                "indexByName": index,
                "renameByName": dict(rename or {}),
            },
        },
    )
    return Panel(
        "table",
        title,
        description,
        tuple(queries),
        _field(
            unit,
            (),
            color="thresholds",
            custom={"align": "auto", "filterable": True, "inspect": False},
            links=links,
        ),
        {
            "cellHeight": "sm",
            "footer": {"countRows": False, "reducer": ["sum"], "show": False},
            "frameIndex": 0,
            "showHeader": True,
            "sortBy": [{"desc": False, "displayName": sort_by}] if sort_by else [],
        },
        transformations,
    )


def heatmap(title: str, description: str, queries: Sequence[Query], *, unit: str) -> Panel:
    """A heatmap of histogram buckets (``format: heatmap`` queries, counted by Prometheus,
    so ``calculate`` is off), ``unit`` on the y axis. Its field defaults carry no unit:
    the y axis has it."""
    defaults = {
        "custom": {"hideFrom": dict(_SHOWN), "scaleDistribution": {"type": "linear"}},
        "thresholds": _thresholds(()),
    }
    return Panel(
        "heatmap",
        title,
        description,
        tuple(queries),
        defaults,
        {
            "calculate": False,
            "cellGap": 1,
            "cellValues": {"unit": "short"},
            "color": {
                "exponent": 0.5,
                "fill": "dark-orange",
                "mode": "scheme",
                "reverse": False,
                "scale": "exponential",
                "scheme": "Oranges",
                "steps": 64,
            },
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-09},
            "legend": {"show": True},
            "rowsFrame": {"layout": "le"},
            "selectionMode": "x",
            "showValue": "never",
            "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
        },
    )


def row(title: str) -> Row:
    return Row(title)


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


def layout(sections: Sequence[Section]) -> list[Panel | Row]:
    """Panels with grid positions: a row panel per section, then its lines."""
    placed: list[Panel | Row] = []
    y = 0
    for section in sections:
        placed.append(Row(section.title, GridPos(x=0, y=y, w=GRID_WIDTH, h=1)))
        y += 1
        for panel_line in section.lines:
            x = 0
            for panel, w in zip(panel_line.panels, panel_line.widths, strict=True):
                grid = GridPos(x=x, y=y, w=w, h=panel_line.h)
                placed.append(dataclasses.replace(panel, grid=grid))
                x += w
            y += panel_line.h
    return placed


# --- variables ----------------------------------------------------------------

#: ``sort`` of a query variable: alphabetical, case-insensitive, ascending.
_SORT_ALPHA_IGNORE_CASE_ASC = 5
#: ``refresh`` of a query variable: on every time-range change (dashboard-linter's rule).
_REFRESH_ON_TIME_RANGE_CHANGE = 2


def datasource_variable() -> dict[str, Any]:
    """The ``datasource`` variable: any Prometheus, the default one first."""
    return {
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "sort": 1,
        "type": "datasource",
    }


def query_variable(
    name: str, metric: str, selector: str = "", *, all_value: str = ALL_VALUE
) -> dict[str, Any]:
    """A multi-value query variable over the values of ``name`` on ``metric``, on All
    when the dashboard opens (as Grafana writes a saved All); its options are read at
    load time."""
    definition = f"label_values({metric}{selector}, {name})"
    return {
        "allValue": all_value,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": dict(DATASOURCE),
        "definition": definition,
        "hide": 0,
        "includeAll": True,
        "label": name,
        "multi": True,
        "name": name,
        "query": definition,
        "refresh": _REFRESH_ON_TIME_RANGE_CHANGE,
        "regex": "",
        "sort": _SORT_ALPHA_IGNORE_CASE_ASC,
        "type": "query",
    }


def standard_variables() -> list[dict[str, Any]]:
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


# --- the dashboard ------------------------------------------------------------

#: The refresh intervals offered in the time picker (Grafana's own list).
REFRESH_INTERVALS = ("5s", "10s", "30s", "1m", "5m", "15m", "30m", "1h", "2h", "1d")


def dashboards_link(tag: str, title: str, tooltip: str) -> dict[str, Any]:
    """A link to every dashboard tagged ``tag``, keeping the time range and variables."""
    return {
        "asDropdown": False,
        "icon": "external link",
        "includeVars": True,
        "keepTime": True,
        "tags": [tag],
        "targetBlank": False,
        "title": title,
        "tooltip": tooltip,
        "type": "dashboards",
    }


def _builtin_annotation() -> dict[str, Any]:
    """Grafana's own "Annotations & Alerts", which every saved dashboard carries."""
    return {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }


def dashboard_json(
    *,
    title: str,
    uid: str,
    description: str,
    tags: Sequence[str],
    time_from: str,
    refresh: str,
    links: Sequence[dict[str, Any]],
    variables: Sequence[dict[str, Any]],
    panels: Sequence[Panel | Row],
) -> dict[str, Any]:
    """The dashboard: read-only, shared crosshair, browser time zone; panels numbered
    from 1 in their order."""
    return {
        "annotations": {"list": [_builtin_annotation()]},
        "description": description,
        "editable": False,
        "graphTooltip": 1,  # shared crosshair
        "links": [dict(link) for link in links],
        "panels": [panel.to_json(i) for i, panel in enumerate(panels, start=1)],
        "refresh": refresh,
        "schemaVersion": SCHEMA_VERSION,
        "tags": list(tags),
        "templating": {"list": [dict(v) for v in variables]},
        "time": {"from": time_from, "to": "now"},
        "timepicker": {"refresh_intervals": list(REFRESH_INTERVALS)},
        "timezone": "browser",
        "title": title,
        "uid": uid,
    }
