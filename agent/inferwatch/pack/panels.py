"""Building blocks for the generated Grafana dashboards.

Panels are built with grafanalib, whose raw JSON is older than the Grafana
schema we target (string datasource references, the string ``"null"`` as the
base threshold, schemaVersion 12, pre-v8 heatmap options, legacy keys such as
``span`` or ``editable`` on panels). :func:`normalise_dashboard` turns that raw
output into JSON that validates against Grafana's v11 dashboard and panel
schemas; the builders here put the modern fields grafanalib does not know
into ``extraJson`` so the normaliser only has to remove and convert.

Two quirks of the schema shape what panels may use: a field override's value
and its matcher's options are typed as objects (so no ``byName``/``byRegexp``
overrides and no scalar override values: series are told apart by legend), and
a table's ``cellOptions`` with only a ``type`` matches several of its ``oneOf``
shapes (so tables keep Grafana's default cell).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import attr
from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

#: Grafana v11 writes schemaVersion 39 to 41; 41 is the newest of that line and
#: loads unchanged in Grafana 11.3+ and 12 (older ones migrate nothing they lack).
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


@dataclass(frozen=True)
class Cell:
    """A panel and its size on the 24-column grid."""

    panel: Any
    w: int
    h: int


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


@dataclass
class Section:
    """A titled row of panels, laid out left to right, wrapping at 24 columns."""

    title: str
    cells: list[Cell] = field(default_factory=list)


def layout(sections: Sequence[Section]) -> list[Any]:
    """Panels with grid positions: a row panel per section, then its cells."""
    panels: list[Any] = []
    y = 0
    for section in sections:
        panels.append(attr.evolve(row(section.title), gridPos=g.GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        x = 0
        line_h = 0
        for cell in section.cells:
            if x + cell.w > 24:
                y += line_h
                x = 0
                line_h = 0
            panels.append(attr.evolve(cell.panel, gridPos=g.GridPos(h=cell.h, w=cell.w, x=x, y=y)))
            x += cell.w
            line_h = max(line_h, cell.h)
        y += line_h
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
        query_variable("cluster", "inferwatch_agent_info", all_value=optional),
        query_variable("job", "inferwatch_agent_info", '{cluster=~"$cluster"}'),
        query_variable(
            "node",
            "inferwatch_agent_info",
            '{cluster=~"$cluster", job=~"$job"}',
            all_value=optional,
        ),
        query_variable(
            "instance", "inferwatch_agent_info", '{cluster=~"$cluster", job=~"$job", node=~"$node"}'
        ),
        query_variable("namespace", "inferwatch_target_up", host_sel(), all_value=optional),
        query_variable(
            "pod", "inferwatch_target_up", host_sel('namespace=~"$namespace"'), all_value=optional
        ),
        query_variable("model", "inferwatch_requests_running", host_sel()),
        query_variable(
            "worker", "inferwatch_target_up", host_sel('namespace=~"$namespace", pod=~"$pod"')
        ),
        query_variable("gpu", "inferwatch_gpu_info", host_sel()),
    ]


# --- normalisation --------------------------------------------------------------

_DASHBOARD_KEYS = (
    "annotations",
    "description",
    "editable",
    "graphTooltip",
    "links",
    "panels",
    "refresh",
    "schemaVersion",
    "tags",
    "templating",
    "time",
    "timepicker",
    "timezone",
    "title",
    "uid",
)
_PANEL_KEYS = (
    "datasource",
    "description",
    "fieldConfig",
    "gridPos",
    "id",
    "interval",
    "links",
    "options",
    "targets",
    "timeFrom",
    "timeShift",
    "title",
    "transformations",
    "type",
)
_FIELD_KEYS = (
    "color",
    "custom",
    "decimals",
    "links",
    "mappings",
    "max",
    "min",
    "noValue",
    "thresholds",
    "unit",
)
_TARGET_KEYS = ("datasource", "expr", "format", "instant", "legendFormat", "range", "refId")
_VARIABLE_KEYS = (
    "allValue",
    "current",
    "datasource",
    "definition",
    "hide",
    "includeAll",
    "label",
    "multi",
    "name",
    "options",
    "query",
    "refresh",
    "regex",
    "sort",
    "type",
)
_TIMESERIES_CUSTOM = (
    "axisLabel",
    "axisPlacement",
    "axisSoftMax",
    "axisSoftMin",
    "barAlignment",
    "drawStyle",
    "fillOpacity",
    "gradientMode",
    "hideFrom",
    "lineInterpolation",
    "lineStyle",
    "lineWidth",
    "pointSize",
    "scaleDistribution",
    "showPoints",
    "spanNulls",
    "stacking",
    "thresholdsStyle",
)
_HIDE_FROM = {"legend": False, "tooltip": False, "viz": False}


def _pick(src: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: src[k] for k in keys if src.get(k) is not None}


def _datasource(ref: Any) -> dict[str, str]:
    """Whatever grafanalib carried (a name, a dict, None) becomes the variable reference:
    no panel or target of ours may point at a fixed datasource."""
    return dict(DATASOURCE)


def _thresholds(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    out_steps = []
    for i, item in enumerate((raw or {}).get("steps") or []):
        value = item.get("value")
        # grafanalib writes the base step's value as the string "null"
        base = i == 0 or value in (None, "null")
        out_steps.append({"color": item["color"], "value": None if base else float(value)})
    if not out_steps:
        out_steps = [{"color": "green", "value": None}]
    return {"mode": (raw or {}).get("mode") or "absolute", "steps": out_steps}


def _field_defaults(kind: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    defaults = _pick(raw, _FIELD_KEYS)
    defaults["thresholds"] = _thresholds(raw.get("thresholds"))
    if not defaults.get("links"):
        defaults.pop("links", None)
    if defaults.get("noValue") == "none":  # grafanalib's stat default prints "none"
        del defaults["noValue"]
    if defaults.get("unit") == "":
        del defaults["unit"]
    custom = dict(raw.get("custom") or {})
    if kind == "timeseries":
        custom = _pick(custom, _TIMESERIES_CUSTOM)
        if custom.get("stacking") == {}:
            custom["stacking"] = {"group": "A", "mode": "none"}
        if custom.get("axisLabel") == "":
            del custom["axisLabel"]
        scale = custom.get("scaleDistribution") or {}
        custom["scaleDistribution"] = (
            {"type": "linear"} if scale.get("type", "linear") == "linear" else scale
        )
    elif kind == "table":
        display = custom.pop("displayMode", "auto")
        # cellOptions stays out: with only a "type" it matches several of the
        # schema's oneOf cell shapes, and Grafana's default is the auto cell anyway.
        if display != "auto":
            raise ValueError(f"table cell display mode {display!r} is not supported")
        custom = {
            "align": custom.get("align", "auto"),
            "filterable": bool(custom.get("filterable", False)),
            "inspect": False,
        }
    elif kind == "state-timeline":
        custom = {
            "fillOpacity": int(custom.get("fillOpacity", 70)),
            "hideFrom": dict(_HIDE_FROM),
            "lineWidth": int(custom.get("lineWidth", 0)),
        }
    elif kind == "heatmap":
        custom = {"hideFrom": dict(_HIDE_FROM), "scaleDistribution": {"type": "linear"}}
        defaults.pop("unit", None)
    defaults["custom"] = custom
    if kind == "table" and "color" not in defaults:
        defaults["color"] = {"mode": "thresholds"}
    return defaults


def _options(kind: str, raw: Any) -> dict[str, Any]:
    opts = dict(raw) if isinstance(raw, Mapping) else {}
    if kind == "timeseries":
        legend = dict(opts.get("legend") or {})
        legend.setdefault("showLegend", True)
        legend.setdefault("calcs", [])
        return {"legend": legend, "tooltip": dict(opts.get("tooltip") or {})}
    if kind == "stat":
        reduce = dict(opts.get("reduceOptions") or {})
        reduce = {
            "calcs": list(reduce.get("calcs") or ["lastNotNull"]),
            "fields": "",
            "values": False,
        }
        return {
            "colorMode": opts.get("colorMode", "value"),
            "graphMode": opts.get("graphMode", "area"),
            "justifyMode": opts.get("justifyMode", "auto"),
            "orientation": opts.get("orientation", "auto"),
            "percentChangeColorMode": opts.get("percentChangeColorMode", "standard"),
            "reduceOptions": reduce,
            "showPercentChange": bool(opts.get("showPercentChange", False)),
            "textMode": opts.get("textMode", "auto"),
            "wideLayout": bool(opts.get("wideLayout", True)),
        }
    if kind == "table":
        return {
            "cellHeight": "sm",
            "footer": {"countRows": False, "reducer": ["sum"], "show": False},
            "frameIndex": 0,
            "showHeader": bool(opts.get("showHeader", True)),
            "sortBy": list(opts.get("sortBy") or []),
        }
    if kind == "state-timeline":
        legend = dict(opts.get("legend") or {})
        tooltip = dict(opts.get("tooltip") or {})
        return {
            "alignValue": opts.get("alignValue", "left"),
            "legend": {
                "calcs": list(legend.get("calcs") or []),
                "displayMode": legend.get("displayMode", "list"),
                "placement": legend.get("placement", "bottom"),
                "showLegend": bool(legend.get("showLegend", True)),
            },
            "mergeValues": bool(opts.get("mergeValues", True)),
            "rowHeight": float(opts.get("rowHeight", 0.9)),
            "showValue": opts.get("showValue", "auto"),
            "tooltip": {"mode": tooltip.get("mode", "single"), "sort": tooltip.get("sort", "none")},
        }
    if kind == "heatmap":
        unit = ((opts.get("yAxis") or {}).get("unit")) or "short"
        return {
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
        }
    return opts


def _target(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(raw, _TARGET_KEYS)
    out["datasource"] = _datasource(raw.get("datasource"))
    out["editorMode"] = "code"
    if out.get("instant"):
        out["range"] = False
    else:
        out["instant"] = False
        out["range"] = True
    if not out.get("legendFormat"):
        out["legendFormat"] = "__auto"
    return out


def _panel(raw: Mapping[str, Any]) -> dict[str, Any]:
    kind = raw["type"]
    if kind == "row":
        return {
            "collapsed": bool(raw.get("collapsed", False)),
            "gridPos": raw["gridPos"],
            "id": raw["id"],
            "panels": [],
            "title": raw.get("title", ""),
            "type": "row",
        }
    out = _pick(raw, _PANEL_KEYS)
    out["datasource"] = _datasource(raw.get("datasource"))
    out["targets"] = [_target(t) for t in raw.get("targets") or []]
    options = _options(kind, raw.get("options"))
    field_config = raw.get("fieldConfig") or {}
    out["fieldConfig"] = {
        "defaults": _field_defaults(kind, field_config.get("defaults") or {}),
        "overrides": list(field_config.get("overrides") or []),
    }
    out["options"] = options
    for key in ("links", "transformations"):
        if not out.get(key):
            out.pop(key, None)
    if out.get("interval") == "":
        del out["interval"]
    return out


def _variable(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(raw, _VARIABLE_KEYS)
    # grafanalib's "current" carries "tags" and null texts the schema refuses; only a
    # default of All survives (as Grafana itself writes it), otherwise Grafana picks.
    current = raw.get("current") or {}
    out.pop("current", None)
    if current.get("value") == "$__all":
        out["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    out.pop("options", None)  # options of query variables are filled in at load time
    if out["type"] == "datasource":
        out.pop("datasource", None)
        out.pop("allValue", None)
    else:
        out["datasource"] = _datasource(raw.get("datasource"))
        out["definition"] = out["query"]
    if out.get("regex") is None:
        out["regex"] = ""
    return out


def _dashboard_link(raw: Mapping[str, Any]) -> dict[str, Any]:
    link = dict(raw)
    if link.get("url") == "":
        del link["url"]
    return link


def normalise_dashboard(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Schema-valid dashboard JSON from grafanalib's raw output (already plain JSON)."""
    out = _pick(raw, _DASHBOARD_KEYS)
    out["schemaVersion"] = SCHEMA_VERSION
    out["panels"] = [_panel(p) for p in raw.get("panels") or []]
    out["templating"] = {"list": [_variable(v) for v in raw["templating"]["list"]]}
    out["links"] = [_dashboard_link(link) for link in raw.get("links") or []]
    picker = raw.get("timepicker") or {}
    out["timepicker"] = {"refresh_intervals": list(picker.get("refresh_intervals") or [])}
    out["annotations"] = {
        "list": [_builtin_annotation(), *(raw.get("annotations") or {}).get("list", [])]
    }
    return out


def _builtin_annotation() -> dict[str, Any]:
    return {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }


def to_plain(dashboard: g.Dashboard) -> dict[str, Any]:
    """grafanalib objects -> plain JSON values (dicts, lists, strings, numbers)."""
    result: dict[str, Any] = json.loads(
        json.dumps(dashboard.to_json_data(), cls=DashboardEncoder, sort_keys=True)
    )
    return result
