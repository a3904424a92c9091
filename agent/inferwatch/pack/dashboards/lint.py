"""Static checks of the generated dashboards: the dashboard-linter rules, in Python.

grafana/dashboard-linter cannot run here, so its rules (the ones STYLE.md
lists, and the job/instance rules that go with our ``job`` and ``instance``
variables) are applied by this module, without exclusions:

=================================  ====================================================
template-datasource-rule           one ``datasource`` variable, label "Data source", Prometheus
template-job-rule / -instance-     ``job`` / ``instance`` query variables on ``${datasource}``,
rule                               multi-value, All = ``.+``
template-label-promql-rule         every query variable is ``label_values(<PromQL>, label)``
template-on-time-change-reload     query variables refresh on time-range change (2)
template-uneditable-rule           ``editable: false``
panel-datasource-rule              every panel and target uses ``${datasource}``
panel-title-description-rule       every panel has a title and a description
panel-units-rule                   every panel has a valid unit (no exception for tables,
                                   state panels or heatmaps: they carry one too)
panel-no-targets-rule              every panel has a query
target-promql-rule                 every query parses (promql-parser) after expansion
target-rate-interval-rule          every rate/irate/increase ranges over ``$__rate_interval``
target-counter-agg-rule            ``_total`` counters appear only inside rate/irate/increase
target-job-rule / -instance-rule   every selector filters ``job=~"$job"`` / ``instance=~...``
=================================  ====================================================

The job/instance matcher may also be ``"$job|"``: alerts aggregated above one
host have no ``job``/``instance`` label, and an empty value must match them.

``inferwatch generate --lint`` runs these rules on the dashboards generated from
the user's thresholds; the tests run them too. Needs ``promql-parser`` (the
``generate`` extra); it is imported when a check runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from inferwatch.pack.dashboards import GLOBAL_DEFAULTS, expand_variables
from inferwatch.pack.dashboards.cost_row import GRAFANA_CURRENCIES

#: Grafana unit IDs (packages/grafana-data valueFormats); the ones a dashboard may use.
VALID_UNITS = frozenset(
    [
        "none",
        "string",
        "short",
        "percent",
        "percentunit",
        "humidity",
        "dB",
        "hex0x",
        "hex",
        "sci",
        "locale",
        "pixel",
        "bytes",
        "decbytes",
        "bits",
        "decbits",
        "kbytes",
        "deckbytes",
        "mbytes",
        "decmbytes",
        "gbytes",
        "decgbytes",
        "tbytes",
        "dectbytes",
        "pbytes",
        "decpbytes",
        "pps",
        "binBps",
        "Bps",
        "binbps",
        "bps",
        "KiBs",
        "Kibits",
        "KBs",
        "Kbits",
        "MiBs",
        "Mibits",
        "MBs",
        "Mbits",
        "GiBs",
        "Gibits",
        "GBs",
        "Gbits",
        "TiBs",
        "Tibits",
        "TBs",
        "Tbits",
        "dateTimeAsIso",
        "dateTimeAsIsoNoDateIfToday",
        "dateTimeAsUS",
        "dateTimeAsUSNoDateIfToday",
        "dateTimeAsLocal",
        "dateTimeAsLocalNoDateIfToday",
        "dateTimeAsSystem",
        "dateTimeFromNow",
        "watt",
        "kwatt",
        "megwatt",
        "gwatt",
        "mwatt",
        "Wm2",
        "voltamp",
        "kvoltamp",
        "watth",
        "watthperkg",
        "kwatth",
        "kwattm",
        "joule",
        "ev",
        "amp",
        "kamp",
        "mamp",
        "volt",
        "kvolt",
        "mvolt",
        "dBm",
        "ohm",
        "kohm",
        "Mohm",
        "celsius",
        "fahrenheit",
        "kelvin",
        "hertz",
        "ns",
        "µs",
        "ms",
        "s",
        "m",
        "h",
        "d",
        "dtdurationms",
        "dtdurations",
        "dthms",
        "dtdhms",
        "timeticks",
        "clockms",
        "clocks",
        "cps",
        "ops",
        "reqps",
        "rps",
        "wps",
        "iops",
        "cpm",
        "opm",
        "rpm",
        "wpm",
        "flops",
        "mflops",
        "gflops",
        "tflops",
        "pflops",
        "bool",
        "bool_yes_no",
        "bool_on_off",
        # the Currency category (money panels of the cost row)
        *(f"currency{code}" for code in GRAFANA_CURRENCIES),
    ]
)

#: What a dashboard variable becomes while linting: a marker string the matcher
#: rules can recognise (it only ever appears inside label-value quotes).
_MARK = "IWVAR_{}"

#: ``$__rate_interval`` while linting: a duration no one writes by hand, so a
#: range equal to it can only come from the variable.
_RATE_MARK = "17d3h7m11s"
_RATE_MARK_TD = timedelta(days=17, hours=3, minutes=7, seconds=11)

RATE_FUNCTIONS = frozenset({"rate", "irate", "increase"})

Rule = Callable[[Mapping[str, Any]], list[str]]


# --- PromQL helpers ------------------------------------------------------------------


def _pp() -> Any:
    import promql_parser

    return promql_parser


def lint_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Expansion values for linting: markers for the variables, a marked rate interval."""
    values = {
        str(v["name"]): _MARK.format(v["name"])
        for v in (dashboard.get("templating") or {}).get("list") or []
    }
    return {**GLOBAL_DEFAULTS, "__rate_interval": _RATE_MARK, **values}


def parse(expr: str, values: Mapping[str, str]) -> Any:
    """The parsed expression after variable expansion (raises ValueError / KeyError)."""
    return _pp().parse(expand_variables(expr, values))


def _children(node: Any) -> list[Any]:
    pp = _pp()
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.AggregateExpr):
        param = node.param
        return [node.expr] + ([param] if isinstance(param, pp.Expr) else [])
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    if isinstance(node, (pp.SubqueryExpr, pp.ParenExpr, pp.UnaryExpr)):
        return [node.expr]
    return []


def walk(node: Any, parents: tuple[Any, ...] = ()) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Every node of the tree with its ancestors (nearest last), depth first."""
    yield node, parents
    for child in _children(node):
        yield from walk(child, (*parents, node))


def selector_name(selector: Any) -> str | None:
    if selector.name:
        return str(selector.name)
    for m in selector.matchers.matchers:
        if m.name == "__name__" and m.op == _pp().MatchOp.Equal:
            return str(m.value)
    return None


def selectors(tree: Any) -> list[Any]:
    pp = _pp()
    return [node for node, _ in walk(tree) if isinstance(node, pp.VectorSelector)]


# --- dashboard traversal ---------------------------------------------------------------


def panels(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every panel that shows data (rows excluded, panels inside rows included)."""
    out: list[Mapping[str, Any]] = []
    for panel in dashboard.get("panels") or []:
        if panel.get("type") == "row":
            out.extend(panel.get("panels") or [])
        else:
            out.append(panel)
    return out


def variables(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((dashboard.get("templating") or {}).get("list") or [])


def _where(
    dashboard: Mapping[str, Any],
    panel: Mapping[str, Any] | None = None,
    target: Mapping[str, Any] | None = None,
) -> str:
    text = f"dashboard {dashboard.get('title')!r}"
    if panel is not None:
        text += f", panel {panel.get('title')!r}"
    if target is not None:
        text += f", target {target.get('refId')!r}"
    return text


def _targets(dashboard: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            yield panel, target


def _is_ds_ref(ref: Any) -> bool:
    return isinstance(ref, Mapping) and ref.get("uid") in ("$datasource", "${datasource}")


# --- template rules ----------------------------------------------------------------------


def template_datasource(d: Mapping[str, Any]) -> list[str]:
    found = [v for v in variables(d) if v.get("type") == "datasource"]
    if len(found) != 1:
        return [f"{_where(d)}: expected one datasource variable, found {len(found)}"]
    v = found[0]
    problems = []
    if v.get("name") != "datasource":
        problems.append(f"{_where(d)}: datasource variable is named {v.get('name')!r}")
    if v.get("label") != "Data source":
        problems.append(f"{_where(d)}: datasource variable is labelled {v.get('label')!r}")
    if v.get("query") != "prometheus":
        problems.append(f"{_where(d)}: datasource variable selects {v.get('query')!r}")
    return problems


def _label_values(query: str) -> tuple[str, str] | None:
    """(selector, label) of ``label_values(selector, label)``; selector "" for the 1-arg form."""
    m = re.fullmatch(r"\s*label_values\(\s*(?:(.*\S)\s*,\s*)?([A-Za-z_]\w*)\s*\)\s*", query)
    if not m:
        return None
    return (m.group(1) or ""), m.group(2)


def _template_rule(name: str) -> Rule:
    def rule(d: Mapping[str, Any]) -> list[str]:
        found = [v for v in variables(d) if v.get("name") == name]
        if not found:
            return [f"{_where(d)}: no {name!r} variable"]
        v = found[0]
        problems = []
        checks = {
            "is a query variable": v.get("type") == "query",
            f"is labelled {name!r}": v.get("label") == name,
            "uses the datasource variable": _is_ds_ref(v.get("datasource")),
            "is multi-value": v.get("multi") is True,
            "has All = '.+'": v.get("allValue") == ".+",
            "is a label_values() query": _label_values(str(v.get("query", ""))) is not None,
        }
        for what, ok in checks.items():
            if not ok:
                problems.append(f"{_where(d)}: variable {name!r} is not as required: {what}")
        return problems

    return rule


def template_label_promql(d: Mapping[str, Any]) -> list[str]:
    problems = []
    values = lint_values(d)
    for v in variables(d):
        if v.get("type") != "query":
            continue
        parsed = _label_values(str(v.get("query", "")))
        if parsed is None:
            problems.append(f"{_where(d)}: variable {v.get('name')!r} query is not label_values()")
            continue
        selector, _label = parsed
        if not selector:
            continue
        try:
            parse(selector, values)
        except (ValueError, KeyError) as exc:
            problems.append(f"{_where(d)}: variable {v.get('name')!r}: {exc}")
    return problems


def template_on_time_change_reload(d: Mapping[str, Any]) -> list[str]:
    return [
        f"{_where(d)}: query variable {v.get('name')!r} has refresh {v.get('refresh')!r}, not 2"
        for v in variables(d)
        if v.get("type") == "query" and v.get("refresh") != 2
    ]


def template_uneditable(d: Mapping[str, Any]) -> list[str]:
    return [] if d.get("editable") is False else [f"{_where(d)}: editable is not false"]


# --- panel rules ------------------------------------------------------------------------


def panel_datasource(d: Mapping[str, Any]) -> list[str]:
    problems = []
    for panel in panels(d):
        if not _is_ds_ref(panel.get("datasource")):
            problems.append(f"{_where(d, panel)}: datasource is {panel.get('datasource')!r}")
        for target in panel.get("targets") or []:
            if "datasource" in target and not _is_ds_ref(target["datasource"]):
                problems.append(
                    f"{_where(d, panel, target)}: datasource is {target['datasource']!r}"
                )
    return problems


def panel_title_description(d: Mapping[str, Any]) -> list[str]:
    return [
        f"{_where(d, panel)}: missing title or description"
        for panel in panels(d)
        if not str(panel.get("title") or "").strip()
        or not str(panel.get("description") or "").strip()
    ]


def panel_unit(panel: Mapping[str, Any]) -> str:
    if panel.get("type") == "heatmap":
        return str(((panel.get("options") or {}).get("yAxis") or {}).get("unit") or "")
    return str(((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit") or "")


def panel_units(d: Mapping[str, Any]) -> list[str]:
    return [
        f"{_where(d, panel)}: no or invalid unit {panel_unit(panel)!r}"
        for panel in panels(d)
        if panel_unit(panel) not in VALID_UNITS
    ]


def panel_no_targets(d: Mapping[str, Any]) -> list[str]:
    return [
        f"{_where(d, panel)}: no query"
        for panel in panels(d)
        if not any(str(t.get("expr") or "").strip() for t in panel.get("targets") or [])
    ]


# --- target rules -----------------------------------------------------------------------


def _parsed_targets(
    d: Mapping[str, Any],
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any], Any]]:
    """(panel, target, tree) for every target that parses; the rest is target-promql's."""
    values = lint_values(d)
    for panel, target in _targets(d):
        try:
            yield panel, target, parse(str(target.get("expr", "")), values)
        except (ValueError, KeyError):
            continue


def _parsed_nodes(d: Mapping[str, Any]) -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    """(where, node, its parents) for every node of every target that parses."""
    for panel, target, tree in _parsed_targets(d):
        where = _where(d, panel, target)
        for node, parents in walk(tree):
            yield where, node, parents


def target_promql(d: Mapping[str, Any]) -> list[str]:
    problems = []
    values = lint_values(d)
    for panel, target in _targets(d):
        try:
            parse(str(target.get("expr", "")), values)
        except (ValueError, KeyError) as exc:
            problems.append(f"{_where(d, panel, target)}: does not parse: {exc}")
    return problems


#: What a target rule looks for in one node of a parsed query: given promql_parser,
#: the node and its ancestors (nearest last), the problems it finds there.
NodeCheck = Callable[[Any, Any, tuple[Any, ...]], Iterator[str]]


def _node_rule(check: NodeCheck) -> Rule:
    """The rule that runs ``check`` on every node of every target that parses."""

    def rule(d: Mapping[str, Any]) -> list[str]:
        pp = _pp()
        return [
            f"{where}: {problem}"
            for where, node, parents in _parsed_nodes(d)
            for problem in check(pp, node, parents)
        ]

    return rule


def _rate_interval(pp: Any, node: Any, _parents: tuple[Any, ...]) -> Iterator[str]:
    if isinstance(node, pp.Call) and node.func.name in RATE_FUNCTIONS:
        arg = node.args[0] if node.args else None
        if not isinstance(arg, pp.MatrixSelector) or arg.range != _RATE_MARK_TD:
            yield f"{node.func.name}() does not range over $__rate_interval"


def _counter_agg(pp: Any, node: Any, parents: tuple[Any, ...]) -> Iterator[str]:
    if not isinstance(node, pp.VectorSelector):
        return
    name = selector_name(node) or ""
    under_rate = (
        len(parents) >= 2
        and isinstance(parents[-1], pp.MatrixSelector)
        and isinstance(parents[-2], pp.Call)
        and parents[-2].func.name in RATE_FUNCTIONS
    )
    if name.endswith("_total") and not under_rate:
        yield f"counter {name} outside rate/irate/increase"


target_rate_interval = _node_rule(_rate_interval)
target_counter_agg = _node_rule(_counter_agg)


def _matcher_rule(label: str) -> Rule:
    marker = _MARK.format(label)

    def check(pp: Any, node: Any, _parents: tuple[Any, ...]) -> Iterator[str]:
        if isinstance(node, pp.VectorSelector) and not any(
            m.name == label and m.op == pp.MatchOp.Re and m.value in (marker, marker + "|")
            for m in node.matchers.matchers
        ):
            yield f'{selector_name(node)} lacks {label}=~"${label}"'

    return _node_rule(check)


RULES: dict[str, Rule] = {
    "template-datasource-rule": template_datasource,
    "template-job-rule": _template_rule("job"),
    "template-instance-rule": _template_rule("instance"),
    "template-label-promql-rule": template_label_promql,
    "template-on-time-change-reload-rule": template_on_time_change_reload,
    "template-uneditable-rule": template_uneditable,
    "panel-datasource-rule": panel_datasource,
    "panel-title-description-rule": panel_title_description,
    "panel-units-rule": panel_units,
    "panel-no-targets-rule": panel_no_targets,
    "target-promql-rule": target_promql,
    "target-rate-interval-rule": target_rate_interval,
    "target-counter-agg-rule": target_counter_agg,
    "target-job-rule": _matcher_rule("job"),
    "target-instance-rule": _matcher_rule("instance"),
}


def lint(dashboard: Mapping[str, Any]) -> dict[str, list[str]]:
    """Rule name -> problems (an empty list when the rule passes)."""
    return {name: rule(dashboard) for name, rule in RULES.items()}


# --- the metric contract ------------------------------------------------------------------

#: Series Prometheus writes itself; panels may query them although no exporter does.
PROMETHEUS_SERIES: dict[str, str] = {
    "ALERTS": "Prometheus writes one ALERTS series per pending or firing alert",
}

_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def contract_metrics(metrics_md: str) -> tuple[set[str], set[str]]:
    """(exact names, name prefixes) from the tables of METRICS.md.

    A histogram row adds its ``_bucket``/``_sum``/``_count`` series; a row such as
    ``process_*`` adds a prefix.
    """
    names: set[str] = set()
    prefixes: set[str] = set()
    for line in metrics_md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|") or len(cells) < 2:
            continue
        first, kind = cells[0], cells[1]
        if first in ("name", "") or set(first) <= set("-: "):
            continue
        for raw in re.split(r"[/,]", first):
            name = raw.strip().strip("`").strip()
            if not name:
                continue
            if name.endswith("*"):
                prefixes.add(name[:-1])
            elif re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", name):
                names.add(name)
                if "histogram" in kind:
                    names.update(name + s for s in _HISTOGRAM_SUFFIXES)
    return names, prefixes


#: The project's metrics reference, relative to the repository root. Its "Extensions"
#: section documents families beyond METRICS.md (engines and features the original
#: contract did not cover, such as the warm-up gate); those count as contract names.
PROJECT_METRICS_DOC = "docs/metrics.md"

_EXTENSIONS_HEADING = "## Extensions"


def extension_metrics(project_metrics_md: str) -> set[str]:
    """Exact names from the tables of the "Extensions" section of docs/metrics.md.

    Only that section counts (up to the next ``## `` heading; its ``###`` subsections
    are part of it), and only exact names: a wildcard row there adds nothing, so an
    extension cannot open a whole prefix the way METRICS.md's ``process_*`` does.
    """
    lines = project_metrics_md.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == _EXTENSIONS_HEADING)
    except StopIteration:
        return set()
    section: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        section.append(line)
    names, _prefixes = contract_metrics("\n".join(section))
    return names


def recording_rules(rule_files: Mapping[str, Any]) -> set[str]:
    """``record:`` names in parsed Prometheus rule files (path -> YAML document)."""
    out: set[str] = set()
    for doc in rule_files.values():
        for group in (doc or {}).get("groups") or []:
            for rule in group.get("rules") or []:
                if "record" in rule:
                    out.add(str(rule["record"]))
    return out
