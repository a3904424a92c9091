"""grafanalib's output as plain, schema-valid Grafana JSON.

Panels are built with grafanalib, whose raw JSON is older than the Grafana
schema we target (string datasource references, the string ``"null"`` as the
base threshold, schemaVersion 12, pre-v8 heatmap options, legacy keys such as
``span`` or ``editable`` on panels). :func:`normalise_dashboard` turns that raw
output into JSON that validates against Grafana's v11 dashboard and panel
schemas; the builders of :mod:`inferwatch.pack.dashboards.panels` put the modern
fields grafanalib does not know into ``extraJson`` so the normaliser only has
to remove and convert.

Two quirks of the schema shape what panels may use: a field override's value
and its matcher's options are typed as objects (so no ``byName``/``byRegexp``
overrides and no scalar override values: series are told apart by legend), and
a table's ``cellOptions`` with only a ``type`` matches several of its ``oneOf``
shapes (so tables keep Grafana's default cell).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from inferwatch.pack.dashboards.panels import DATASOURCE

#: Grafana v11 writes schemaVersion 39 to 41; 41 is the newest of that line and
#: loads unchanged in Grafana 11.3+ and 12 (older ones migrate nothing they lack).
SCHEMA_VERSION = 41

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
