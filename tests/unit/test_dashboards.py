"""Static checks of the generated Grafana dashboards (issue 5).

- every dashboard validates against Grafana's dashboard JSON schema, and every
  panel's options / custom field config / Prometheus targets against their
  panel schemas (read from ../shared/reference/grafana-schema, skipped when absent);
- the dashboard-linter rules of STYLE.md (inferwatch.pack.dashboards.lint) pass with no
  exclusion, and each rule is shown to catch a violation;
- every metric a panel or variable queries is in METRICS.md, the Extensions
  section of docs/metrics.md, a generated recording rule, or a series
  Prometheus writes itself;
- thresholds drawn on panels follow thresholds.yaml;
- the committed files equal the generator's output, byte for byte;
- the sidecar ConfigMaps and the Grafana provisioning files are valid;
- the compute-/memory-bound classification (field guide 6.1) and the
  utilization-band shares evaluate as intended in promtool.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import pack_readback
from tests.support.proc import REPO, SHARED, promtool

from inferwatch.pack import dashboards as dash
from inferwatch.pack.dashboards import lint as dashlint
from inferwatch.pack.dashboards.worker import PROXY_GAP_TITLE
from inferwatch.pack.thresholds import Thresholds, load_thresholds

SCHEMA_DIR = SHARED / "reference" / "grafana-schema"
METRICS_MD = SHARED / "design" / "METRICS.md"
PROJECT_METRICS_DOC = REPO / dashlint.PROJECT_METRICS_DOC
RULES_FILE = REPO / "alerts" / "inferwatch-rules.yaml"
PROVISIONING = REPO / "deploy" / "grafana" / "provisioning"
COMPOSE_MONITORING = REPO / "deploy" / "compose" / "monitoring.yml"

NAMES = list(dash.DASHBOARDS)
EXPECTED_VARIABLES = [
    "datasource",
    "cluster",
    "job",
    "node",
    "instance",
    "namespace",
    "pod",
    "model",
    "worker",
    "gpu",
]
#: labels a deployment may lack: their All matches series without them (issue 18)
OPTIONAL_VARIABLES = {"cluster", "node", "namespace", "pod"}
PANEL_SCHEMA_FILE = {"state-timeline": "statetimeline"}


@pytest.fixture(scope="module")
def thresholds() -> Thresholds:
    return load_thresholds()


@pytest.fixture(scope="module")
def boards(thresholds: Thresholds) -> dict[str, dict[str, Any]]:
    return dash.dashboards(thresholds)


@pytest.fixture(scope="module")
def files(thresholds: Thresholds) -> dict[str, str]:
    return dash.generate(thresholds)


def _schema(name: str) -> dict[str, Any]:
    path = SCHEMA_DIR / f"{name}.jsonschema.json"
    if not path.exists():
        pytest.skip(f"{path} is absent: the Grafana schemas are read from ../shared/reference")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _errors(schema: dict[str, Any], instance: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message[:300]}"
        for e in validator.iter_errors(instance)
    ]


def _definition(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return {"$ref": f"#/definitions/{name}", "definitions": schema["definitions"]}


# --- shape ---------------------------------------------------------------------------


def test_four_dashboards_with_uids_from_thresholds(
    boards: dict[str, dict[str, Any]], thresholds: Thresholds
) -> None:
    assert set(boards) == {
        "inference-overview",
        "inference-worker",
        "inference-gpu",
        "inference-weekly-trends",
    }
    uids = {name: doc["uid"] for name, doc in boards.items()}
    assert uids == {
        name: getattr(thresholds.pack.dashboard_uids, key) for name, key in dash.DASHBOARDS.items()
    }
    titles = {doc["title"] for doc in boards.values()}
    assert titles == {
        "Inference overview",
        "Inference worker",
        "Inference GPU",
        "Inference weekly trends",
    }
    for doc in boards.values():
        assert doc["editable"] is False
        assert "inferwatch" in doc["tags"]
        assert doc["description"]
    assert boards["inference-weekly-trends"]["time"] == {"from": "now-7d", "to": "now"}


def _datasource_refs(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every value of a "datasource" key in a JSON document, with its path."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                found.append((f"{path}/{key}", value))
            found += _datasource_refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += _datasource_refs(item, f"{path}/{i}")
    return found


def test_variables_and_datasource_references(boards: dict[str, dict[str, Any]]) -> None:
    for name, doc in boards.items():
        assert "__inputs" not in doc, name
        assert [v["name"] for v in doc["templating"]["list"]] == EXPECTED_VARIABLES
        for var in doc["templating"]["list"][1:]:
            assert var["type"] == "query" and var["refresh"] == 2
            assert var["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            want = ".*" if var["name"] in OPTIONAL_VARIABLES else ".+"
            assert var["allValue"] == want, (name, var["name"])
        refs = _datasource_refs(doc)
        assert len(refs) > 20
        for path, ref in refs:
            assert isinstance(ref, dict), f"{name} {path}: datasource reference is {ref!r}"
            if not path.startswith("/annotations"):
                assert ref == {"type": "prometheus", "uid": "${datasource}"}, (name, path)


def test_links_between_dashboards_keep_time_and_variables(
    boards: dict[str, dict[str, Any]],
) -> None:
    for doc in boards.values():
        (link,) = doc["links"]
        assert link["type"] == "dashboards" and link["tags"] == ["inferwatch"]
        assert link["keepTime"] is True and link["includeVars"] is True


def test_panel_titles_unique_and_grid_inside_24_columns(
    boards: dict[str, dict[str, Any]],
) -> None:
    for name, doc in boards.items():
        titles = [p["title"] for p in dashlint.panels(doc)]
        assert len(titles) == len(set(titles)), f"{name}: duplicate panel titles"
        ids = [p["id"] for p in doc["panels"]]
        assert len(ids) == len(set(ids))
        for panel in doc["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, (name, panel["title"])


def test_lines_share_the_grid_and_stack_under_their_row() -> None:
    from inferwatch.pack.dashboards import panels as p

    assert p.line(*"abcde", h=4).widths == (5, 5, 5, 5, 4)
    assert p.line(*"abc", h=8).widths == (8, 8, 8)
    assert p.line("a", "b", h=8, widths=(10, 14)).widths == (10, 14)
    for widths in ((12, 13), (24,)):
        with pytest.raises(ValueError):
            p.line("a", "b", h=8, widths=widths)
    section = p.Section("s", p.line(p.row("a"), p.row("b"), h=3), p.line(p.row("c"), h=2))
    placed = [panel.grid for panel in p.layout([section, p.Section("t")])]
    assert [(pos.x, pos.y, pos.w, pos.h) for pos in placed] == [
        (0, 0, 24, 1),
        (0, 1, 12, 3),
        (12, 1, 12, 3),
        (0, 4, 24, 2),
        (0, 6, 24, 1),
    ]


# --- JSON schema -----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_dashboard_validates_against_grafana_schema(
    name: str, boards: dict[str, dict[str, Any]]
) -> None:
    schema = _schema("dashboard")
    doc = boards[name]
    assert _errors(schema, doc) == []
    default = schema["definitions"]["Dashboard"]["properties"]["schemaVersion"]["default"]
    # the v11 line writes 39..41; never newer than the schema knows
    assert 39 <= doc["schemaVersion"] <= default


@pytest.mark.parametrize("name", NAMES)
def test_panels_validate_against_their_panel_schemas(
    name: str, boards: dict[str, dict[str, Any]]
) -> None:
    target_schema = _definition(_schema("prometheus"), "Dataquery")
    problems = []
    for panel in dashlint.panels(boards[name]):
        kind = panel["type"]
        schema = _schema(PANEL_SCHEMA_FILE.get(kind, kind))
        where = f"{panel['title']} ({kind})"
        problems += [
            f"{where} options {e}"
            for e in _errors(_definition(schema, "Options"), panel["options"])
        ]
        custom = panel["fieldConfig"]["defaults"].get("custom", {})
        if "FieldConfig" in schema["definitions"]:
            problems += [
                f"{where} custom {e}" for e in _errors(_definition(schema, "FieldConfig"), custom)
            ]
        else:
            assert custom == {}, f"{where}: custom field config on a panel that has none"
        for target in panel["targets"]:
            problems += [f"{where} target {e}" for e in _errors(target_schema, target)]
    assert problems == []


#: What grafanalib 0.7.1 writes where Grafana's schema wants another shape (docs/dashboards.md,
#: "Why our own panel model"): each, put into a generated dashboard, must fail the schema.
LEGACY_SHAPES: dict[str, Callable[[dict[str, Any]], None]] = {
    "datasource by name": lambda d: _first(d, lambda p: True).update(datasource="${datasource}"),
    'base threshold "null"': lambda d: _first(d, lambda p: p["type"] == "stat")["fieldConfig"][
        "defaults"
    ]["thresholds"]["steps"][0].update(value="null"),
    "panel span": lambda d: _first(d, lambda p: True).update(span=6),
    "variable tags": lambda d: _var(d, "job")["current"].update(tags=[]),
}


@pytest.mark.parametrize("shape", sorted(LEGACY_SHAPES))
def test_schema_check_refuses_legacy_shapes(shape: str, boards: dict[str, dict[str, Any]]) -> None:
    """The schema check can fail: each shape grafanalib wrote (and plain.py used to
    convert) is refused once it is in a dashboard."""
    schema = _schema("dashboard")
    doc = copy.deepcopy(boards["inference-overview"])
    assert _errors(schema, doc) == []
    LEGACY_SHAPES[shape](doc)
    assert _errors(schema, doc), f"{shape} unexpectedly validates"


def test_heatmap_schema_refuses_the_pre_v8_heatmap(boards: dict[str, dict[str, Any]]) -> None:
    """grafanalib's heatmap options (the panel Grafana 9.1 replaced) miss what the new
    heatmap's schema requires; ours pass."""
    schema = _definition(_schema("heatmap"), "Options")
    ours = _first(boards["inference-worker"], lambda p: p["type"] == "heatmap")["options"]
    assert _errors(schema, ours) == []
    legacy = {"yAxis": {"format": "s"}, "dataFormat": "tsbuckets", "cards": {}}
    assert _errors(schema, legacy)


def test_generated_without_grafanalib() -> None:
    """One way to build dashboards: generating with grafanalib and attrs unimportable gives
    the committed files, byte for byte."""
    code = (
        "import sys\n"
        "sys.modules['grafanalib'] = sys.modules['attr'] = None\n"
        "from inferwatch.pack import dashboards\n"
        "from inferwatch.pack.thresholds import load_thresholds\n"
        "for path, text in dashboards.generate(load_thresholds()).items():\n"
        "    if path.endswith('.json'):\n"
        "        print(path, text == open(path).read())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")[:-1]
    assert lines == [f"dashboards/{name}.json True" for name in NAMES]


def test_panel_model_refuses_what_grafana_cannot_show() -> None:
    from inferwatch.pack.dashboards import panels as p

    q = [p.Query("up")]
    with pytest.raises(ValueError, match="title and a description"):
        p.stat("", "d", q, unit="none")
    with pytest.raises(ValueError, match="at least one query"):
        p.timeseries("t", "d", [], unit="s")
    with pytest.raises(ValueError, match="no place on the grid"):
        p.heatmap("t", "d", q, unit="s").to_json(1)


# --- dashboard-linter rules ------------------------------------------------------------


@pytest.mark.parametrize("rule", sorted(dashlint.RULES))
@pytest.mark.parametrize("name", NAMES)
def test_lint_rule_passes(name: str, rule: str, boards: dict[str, dict[str, Any]]) -> None:
    assert dashlint.RULES[rule](boards[name]) == []


def _first(doc: dict[str, Any], pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return next(p for p in dashlint.panels(doc) if pred(p))


def _var(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in doc["templating"]["list"] if v["name"] == name)


def _set_expr(doc: dict[str, Any], expr: str) -> None:
    _first(doc, lambda p: True)["targets"][0]["expr"] = expr


def _unrated(doc: dict[str, Any]) -> None:
    panel = _first(doc, lambda p: "$__rate_interval" in p["targets"][0]["expr"])
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace("$__rate_interval", "5m")


#: One violation per rule: proves the rule can fail.
VIOLATIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "template-datasource-rule": lambda d: _var(d, "datasource").update(label="DS"),
    "template-job-rule": lambda d: _var(d, "job").update(multi=False),
    "template-instance-rule": lambda d: _var(d, "instance").update(allValue=".*"),
    "template-label-promql-rule": lambda d: _var(d, "gpu").update(
        query="label_values(inferwatch_gpu_info{job=~, gpu)"
    ),
    "template-on-time-change-reload-rule": lambda d: _var(d, "model").update(refresh=1),
    "template-uneditable-rule": lambda d: d.update(editable=True),
    "panel-datasource-rule": lambda d: _first(d, lambda p: True).update(
        datasource={"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
    ),
    "panel-title-description-rule": lambda d: _first(d, lambda p: True).update(description=""),
    "panel-units-rule": lambda d: _first(d, lambda p: p["type"] == "timeseries")["fieldConfig"][
        "defaults"
    ].update(unit="furlongs"),
    "panel-no-targets-rule": lambda d: _first(d, lambda p: True).update(targets=[]),
    "target-promql-rule": lambda d: _set_expr(d, 'sum(rate(x{job=~"$job"}[1m])'),
    "target-rate-interval-rule": _unrated,
    "target-counter-agg-rule": lambda d: _set_expr(
        d, 'inferwatch_preemptions_total{job=~"$job", instance=~"$instance"}'
    ),
    "target-job-rule": lambda d: _set_expr(d, 'inferwatch_gpu_up{instance=~"$instance"}'),
    "target-instance-rule": lambda d: _set_expr(d, 'inferwatch_gpu_up{job=~"$job"}'),
}


@pytest.mark.parametrize("rule", sorted(dashlint.RULES))
def test_lint_rule_catches_its_violation(rule: str, boards: dict[str, dict[str, Any]]) -> None:
    doc = copy.deepcopy(boards["inference-overview"])
    VIOLATIONS[rule](doc)
    assert dashlint.RULES[rule](doc), f"{rule} did not notice the violation"


def test_counter_rule_accepts_counters_only_directly_under_rate() -> None:
    doc = {
        "title": "t",
        "templating": {"list": [{"name": "job"}, {"name": "instance"}]},
        "panels": [
            {"type": "stat", "title": "p", "targets": [{"refId": "A", "expr": e}]}
            for e in (
                'rate(a_total{job=~"$job"}[$__rate_interval])',
                'increase(a_total{job=~"$job"}[$__rate_interval])',
                'max_over_time(a_total{job=~"$job"}[$__rate_interval])',
                'rate(a_total{job=~"$job"}[$__rate_interval]) / a_total{job=~"$job"}',
            )
        ],
    }
    problems = dashlint.target_counter_agg(doc)
    assert len(problems) == 2
    rates = dashlint.target_rate_interval(doc)
    assert rates == []


# --- metric contract --------------------------------------------------------------------


def _used_metrics(boards: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Metric -> where it is used ("dashboard / panel" or "dashboard / variable")."""
    used: dict[str, set[str]] = {}
    for name, doc in boards.items():
        values = dashlint.lint_values(doc)
        for title, expr in pack_readback.panel_queries(doc):
            for metric in pack_readback.metric_names(expr, values):
                used.setdefault(metric, set()).add(f"{name} / {title}")
        for var in doc["templating"]["list"]:
            parsed = dashlint._label_values(str(var.get("query", "")))
            if var["type"] == "query" and parsed and parsed[0]:
                for metric in pack_readback.metric_names(parsed[0], values):
                    used.setdefault(metric, set()).add(f"{name} / ${var['name']}")
    return used


def test_every_queried_metric_is_in_the_contract(boards: dict[str, dict[str, Any]]) -> None:
    if not METRICS_MD.exists():
        pytest.skip(f"{METRICS_MD} is absent: the metric contract is read from ../shared/design")
    names, prefixes = dashlint.contract_metrics(METRICS_MD.read_text())
    assert "inferwatch_ttft_seconds_bucket" in names and "process_" in prefixes
    names |= dashlint.extension_metrics(PROJECT_METRICS_DOC.read_text())
    assert "inferwatch_worker_ready" in names
    missing = {
        metric: sorted(where)
        for metric, where in _used_metrics(boards).items()
        if ":" not in metric
        and metric not in names
        and metric not in dashlint.PROMETHEUS_SERIES
        and not any(metric.startswith(pre) for pre in prefixes)
    }
    assert missing == {}


def _generated_rule_files(thresholds: Thresholds) -> dict[str, Any]:
    if RULES_FILE.exists():
        return {str(RULES_FILE): yaml.safe_load(RULES_FILE.read_text())}
    try:
        from inferwatch.pack import rules
    except ImportError:
        pytest.skip("no recording rules yet: alerts/inferwatch-rules.yaml and pack.rules absent")
    return {
        path: yaml.safe_load(text)
        for path, text in rules.generate(thresholds).items()
        if path.endswith(".yaml")
    }


def test_every_recording_rule_a_panel_queries_is_generated(
    boards: dict[str, dict[str, Any]], thresholds: Thresholds
) -> None:
    recorded = dashlint.recording_rules(_generated_rule_files(thresholds))
    assert recorded, "the rule files record nothing"
    used = {m: w for m, w in _used_metrics(boards).items() if ":" in m}
    assert used, "the dashboards query no recording rule"
    assert {m: sorted(w) for m, w in used.items() if m not in recorded} == {}


def test_contract_parser_reads_tables() -> None:
    text = (
        "| name | type | meaning |\n|---|---|---|\n"
        "| a_seconds | histogram | x |\n| b_watts / b_limit_watts | gauge | y |\n"
        "| process_*, python_* | | z |\n"
    )
    names, prefixes = dashlint.contract_metrics(text)
    assert names == {
        "a_seconds",
        "a_seconds_bucket",
        "a_seconds_sum",
        "a_seconds_count",
        "b_watts",
        "b_limit_watts",
    }
    assert prefixes == {"process_", "python_"}


def test_extension_metrics_read_only_exact_names_of_the_extensions_section() -> None:
    text = (
        "# Metrics\n## Workers\n| name | type | meaning |\n|---|---|---|\n"
        "| `not_an_extension` | gauge | x |\n"
        "## Extensions\n| name | type | meaning |\n|---|---|---|\n"
        "| `ext_seconds` | histogram | y |\n| `ext_wild_*` | | z |\n"
        "### Warm-up gate\n| name | type | meaning |\n|---|---|---|\n"
        "| `gate_ready` | gauge 0/1 | w |\n| `gate_runs_total` | counter | v |\n"
        "## Later\n| name | type | meaning |\n|---|---|---|\n| `after_it` | gauge | u |\n"
    )
    assert dashlint.extension_metrics(text) == {
        "ext_seconds",
        "ext_seconds_bucket",
        "ext_seconds_sum",
        "ext_seconds_count",
        "gate_ready",
        "gate_runs_total",
    }
    assert dashlint.extension_metrics("# Metrics\n| name | type |\n| `a` | gauge |\n") == set()
    documented = dashlint.extension_metrics(PROJECT_METRICS_DOC.read_text())
    assert {
        "inferwatch_worker_ready",
        "inferwatch_warmup_duration_seconds",
        "inferwatch_warmup_ttft_seconds",
        "inferwatch_warmup_failures_total",
        "inferwatch_warmup_deadline_exceeded",
        "inferwatch_warmups_total",
    } <= documented
    # the main tables of docs/metrics.md are METRICS.md's, not extensions
    assert "inferwatch_gpu_up" not in documented


# --- the warm-up row -------------------------------------------------------------------------

WARMUP_TITLES = [
    "Warm",
    "Gate opened on deadline",
    "Warm-up TTFT",
    "Warm-up duration",
    "Warm-ups and failures",
]


def _rows(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(row title, its panels) in grid order."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for panel in sorted(doc["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if panel["type"] == "row":
            out.append((panel["title"], []))
        else:
            out[-1][1].append(panel)
    return out


def test_worker_dashboard_has_a_warmup_row_after_the_process_row(
    boards: dict[str, dict[str, Any]], thresholds: Thresholds
) -> None:
    rows = _rows(boards["inference-worker"])
    titles = [title for title, _ in rows]
    assert titles.index("Warm-up") == titles.index("Process") + 1
    panels = {p["title"]: p for p in dict(rows)["Warm-up"]}
    assert list(panels) == WARMUP_TITLES
    exprs = {t: [q["expr"] for q in p["targets"]] for t, p in panels.items()}
    worker_only = (
        '{cluster=~"$cluster", job=~"$job", node=~"$node", instance=~"$instance", '
        'worker=~"$worker"}'
    )
    assert exprs["Warm"] == [f"min by (worker) (inferwatch_worker_ready{worker_only})"]
    assert exprs["Gate opened on deadline"] == [
        f"max by (worker) (inferwatch_warmup_deadline_exceeded{worker_only})"
    ]
    assert exprs["Warm-up TTFT"] == [
        f"max by (worker, phase) (inferwatch_warmup_ttft_seconds{worker_only})"
    ]
    assert "inferwatch_warmup_duration_seconds" in exprs["Warm-up duration"][0]
    runs, failures = exprs["Warm-ups and failures"]
    assert f"increase(inferwatch_warmups_total{worker_only}[$__rate_interval])" in runs
    assert "by (worker, reason)" in failures and "inferwatch_warmup_failures_total" in failures
    # the series carry no model label: a model matcher would hide them all
    assert not any("model" in e for es in exprs.values() for e in es)

    def texts(title: str) -> dict[str, str]:
        (mapping,) = panels[title]["fieldConfig"]["defaults"]["mappings"]
        return {k: v["text"] for k, v in mapping["options"].items()}

    assert texts("Warm") == {"0": "cold", "1": "warm"}
    assert texts("Gate opened on deadline") == {"0": "no", "1": "serving cold"}
    ttft = panels["Warm-up TTFT"]["fieldConfig"]["defaults"]
    assert ttft["unit"] == "s"
    assert ttft["custom"]["thresholdsStyle"] == {"mode": "dashed"}
    assert _steps(boards["inference-worker"], "Warm-up TTFT")[1] == (
        thresholds.ttft.warmup_p95_seconds,
        "red",
    )
    assert panels["Warm-ups and failures"]["fieldConfig"]["defaults"]["custom"]["drawStyle"] == (
        "bars"
    )
    for panel in panels.values():
        assert panel["description"] and dashlint.panel_unit(panel) in dashlint.VALID_UNITS


def test_warmup_ttft_line_follows_the_thresholds(tmp_path: Path) -> None:
    custom = tmp_path / "warmup.yaml"
    custom.write_text("ttft:\n  warmup_p95_seconds: 0.75\n")
    doc = dash.dashboards(load_thresholds(str(custom)))["inference-worker"]
    assert _steps(doc, "Warm-up TTFT")[1] == (0.75, "red")
    assert "0.75 s" in _first(doc, lambda p: p["title"] == "Warm-up TTFT")["description"]


def test_warmup_panels_are_declared_optional_on_a_stack_without_the_gate(
    boards: dict[str, dict[str, Any]],
) -> None:
    for title in WARMUP_TITLES:
        entry = pack_readback.HARDWARE_OPTIONAL[title]
        assert "warmup:" in entry.reason and not entry.ref_ids
    targets = pack_readback.query_targets(boards["inference-worker"])
    assert {q.panel for q in targets if q.optional} == set(WARMUP_TITLES) | set(ENGINE_OPTIONAL) | {
        PROXY_GAP_TITLE
    }


def test_the_proxy_panel_draws_the_rules_ttft_and_the_clients(
    boards: dict[str, dict[str, Any]],
) -> None:
    """Issue 30: the rules' TTFT P99 next to the measuring proxy's; only the proxy's line
    may be empty (a worker without workers[].proxy)."""
    targets = [
        q
        for q in pack_readback.query_targets(boards["inference-worker"])
        if q.panel == PROXY_GAP_TITLE
    ]
    assert [(q.ref_id, q.optional is not None) for q in targets] == [("A", False), ("B", True)]
    assert "worker:inferwatch_ttft_seconds:p99_5m" in targets[0].expr
    assert "inferwatch_proxy_ttft_seconds_bucket" in targets[1].expr


#: worker panels whose series only some engines export (issue 23), and the queries optional
ENGINE_OPTIONAL = {
    "Prefill, decode and queue time P50 / P95": {"A", "B", "C", "D"},
    "LoRA adapters": {"A", "B"},
}


def test_issue23_worker_panels_read_the_new_signals(boards: dict[str, dict[str, Any]]) -> None:
    doc = boards["inference-worker"]
    targets = pack_readback.query_targets(doc)
    by_panel: dict[str, list[pack_readback.PanelQuery]] = {}
    for q in targets:
        by_panel.setdefault(q.panel, []).append(q)
    for title, metric in (
        ("Prompt length distribution", "inferwatch_prompt_length_tokens_bucket"),
        ("Generation length distribution", "inferwatch_generation_length_tokens_bucket"),
    ):
        panel = _first(doc, lambda p, t=title: p["title"] == t)
        assert panel["type"] == "heatmap" and panel["targets"][0]["format"] == "heatmap"
        (q,) = by_panel[title]
        # the agent's buckets per worker, else the recorded rate of the engine's own
        assert q.expr.startswith("sum by (le) (") and q.optional is None
        assert f"rate({metric}{{" in q.expr and f"worker:{metric}:rate5m{{" in q.expr
    phases = by_panel["Prefill, decode and queue time P50 / P95"]
    assert [(q.ref_id, q.optional is not None) for q in phases] == [
        (r, r in ENGINE_OPTIONAL["Prefill, decode and queue time P50 / P95"]) for r in "ABCDEF"
    ]
    assert all("queue_time" in q.expr for q in phases if q.ref_id in "EF")
    assert all(("prefill" in q.expr) == (q.ref_id in "AB") for q in phases)
    lora = {q.ref_id: q for q in by_panel["LoRA adapters"]}
    assert "inferwatch_lora_adapter_active" in lora["A"].expr and lora["A"].instant
    assert "inferwatch_lora_max_adapters" in lora["B"].expr and lora["B"].optional


def test_issue23_gpu_panels_read_the_new_signals(boards: dict[str, dict[str, Any]]) -> None:
    targets = {q.panel: q for q in pack_readback.query_targets(boards["inference-gpu"])}
    expected = {
        "PCIe throughput": ("inferwatch_gpu_pcie_throughput_bytes_per_second", False),
        "NVLink throughput": ("inferwatch_gpu_nvlink_throughput_bytes_per_second", True),
        "Performance state": ("inferwatch_gpu_performance_state", False),
        "Fan speed": ("inferwatch_gpu_fan_speed_ratio", True),
        "Energy rate": ("rate(inferwatch_gpu_energy_joules_total", False),
    }
    for title, (needle, optional) in expected.items():
        assert needle in targets[title].expr, title
        assert (targets[title].optional is not None) == optional, title


# --- thresholds on panels -------------------------------------------------------------------


def _steps(doc: dict[str, Any], title: str) -> list[tuple[float | None, str]]:
    panel = _first(doc, lambda p: p["title"] == title)
    return [
        (s["value"], s["color"]) for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    ]


def test_thresholds_drawn_from_thresholds_yaml(
    boards: dict[str, dict[str, Any]], thresholds: Thresholds, tmp_path: Path
) -> None:
    overview = boards["inference-overview"]
    gu = thresholds.gpu_utilization
    assert [v for v, _ in _steps(overview, "GPU utilization")] == [
        None,
        gu.waste_below,
        gu.healthy_band[0],
        gu.scale_review_above,
    ]
    assert [v for v, _ in _steps(overview, "Memory pressure")] == [
        None,
        thresholds.vram.squeeze_above,
        thresholds.vram.scale_above,
    ]
    assert _steps(overview, "TTFT P50 / P95 / P99")[1] == (thresholds.ttft.p99_slo_seconds, "red")
    assert _steps(overview, "TPOT P50 / P95 / P99")[1] == (thresholds.tpot.p99_slo_seconds, "red")
    assert _steps(overview, "Error ratio")[1] == (thresholds.errors.ratio_above, "red")

    custom = tmp_path / "mine.yaml"
    custom.write_text(
        "gpu_utilization:\n  waste_below: 0.25\n  healthy_band: [0.6, 0.8]\n"
        "ttft:\n  p99_slo_seconds: 0.2\nvram:\n  scale_above: 0.95\n"
        "pack:\n  runbook_base_url: https://runbooks.example/\n"
    )
    mine = load_thresholds(str(custom))
    other = dash.dashboards(mine)["inference-overview"]
    # a healthy band ending below the scale-review line gets its own orange band
    assert _steps(other, "GPU utilization") == [
        (None, "blue"),
        (0.25, "yellow"),
        (0.6, "green"),
        (0.8, "orange"),
        (0.85, "red"),
    ]
    assert _steps(other, "Memory pressure")[2] == (0.95, "red")
    assert _steps(other, "TTFT P50 / P95 / P99")[1] == (0.2, "red")
    alerts = _first(other, lambda p: p["title"] == "Firing alerts")
    (link,) = alerts["fieldConfig"]["defaults"]["links"]
    # the page opened on the row's labels (Grafana percent-encodes them)
    assert link["url"] == (
        "https://runbooks.example/${__data.fields.alertname}.html?instance=${__data.fields.instance}"
        "&worker=${__data.fields.worker}&gpu=${__data.fields.gpu}&model=${__data.fields.model}"
    )


def test_recording_rule_names_follow_the_rate_window(tmp_path: Path) -> None:
    custom = tmp_path / "window.yaml"
    custom.write_text("pack:\n  rate_window: 10m\n")
    doc = dash.dashboards(load_thresholds(str(custom)))["inference-worker"]
    exprs = " ".join(e for _, e in pack_readback.panel_queries(doc))
    assert "worker:inferwatch_ttft_seconds:p99_10m" in exprs
    assert "worker:inferwatch_request_errors:ratio_rate10m" in exprs
    assert "_5m" not in exprs


# --- generated files -----------------------------------------------------------------------


def test_generation_is_deterministic_and_canonical(
    files: dict[str, str], thresholds: Thresholds
) -> None:
    assert dash.generate(thresholds) == files
    assert sorted(files) == sorted(
        [f"dashboards/{n}.json" for n in NAMES]
        + [f"deploy/kubernetes/dashboards/{n}.yaml" for n in NAMES]
    )
    for path, text in files.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), path
        assert text.isascii(), path
        if path.endswith(".json"):
            assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_committed_files_equal_generator_output(files: dict[str, str]) -> None:
    stale = [
        path
        for path, text in files.items()
        if not (REPO / path).exists() or (REPO / path).read_text() != text
    ]
    assert stale == [], "run `inferwatch generate` from the repository root and commit"


def test_sidecar_configmaps(files: dict[str, str], boards: dict[str, dict[str, Any]]) -> None:
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    for name in NAMES:
        doc = yaml.safe_load(files[f"deploy/kubernetes/dashboards/{name}.yaml"])
        assert doc["kind"] == "ConfigMap"
        assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        (key, text) = next(iter(doc["data"].items()))
        assert key == f"{name}.json"
        assert text == files[f"dashboards/{name}.json"]
        assert json.loads(text) == boards[name]
        kubernetes_validate.validate(doc, version, strict=True)
        # `kubectl apply` keeps a copy in an annotation limited to 256 KiB
        assert len(files[f"deploy/kubernetes/dashboards/{name}.yaml"].encode()) < 256 * 1024


# --- Grafana provisioning --------------------------------------------------------------------


def test_grafana_provisioning_files() -> None:
    (ds_file,) = sorted((PROVISIONING / "datasources").glob("*.yaml"))
    datasources = yaml.safe_load(ds_file.read_text())
    assert datasources["apiVersion"] == 1
    (prom,) = datasources["datasources"]
    assert prom["type"] == "prometheus" and prom["access"] == "proxy" and prom["url"]

    (provider_file,) = sorted((PROVISIONING / "dashboards").glob("*.yaml"))
    providers = yaml.safe_load(provider_file.read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == dash.GRAFANA_DASHBOARDS_PATH
    assert provider["allowUiUpdates"] is False


def test_compose_mounts_what_provisioning_expects() -> None:
    if not COMPOSE_MONITORING.exists():
        pytest.skip(f"{COMPOSE_MONITORING} not written yet (the deploy issue)")
    compose = yaml.safe_load(COMPOSE_MONITORING.read_text())
    grafana = compose["services"]["grafana"]
    mounts = {}
    for volume in grafana["volumes"]:
        source, target = volume.split(":")[:2]
        mounts[target] = (COMPOSE_MONITORING.parent / source).resolve()
    assert mounts[dash.GRAFANA_DASHBOARDS_PATH] == (REPO / "dashboards").resolve()
    assert mounts["/etc/grafana/provisioning"] == PROVISIONING.resolve()


# --- queries for the live test -------------------------------------------------------------------


def test_panel_queries_cover_every_target_and_expand(boards: dict[str, dict[str, Any]]) -> None:
    import promql_parser

    for doc in boards.values():
        pairs = pack_readback.panel_queries(doc)
        assert len(pairs) == sum(len(p["targets"]) for p in dashlint.panels(doc))
        values = dash.dashboard_variables(doc)
        assert values["job"] == ".+" and values["datasource"] == "prometheus"
        for _title, expr in pairs:
            expanded = dash.expand_variables(expr, values)
            assert "$" not in expanded.replace('"$1"', "")
            promql_parser.parse(expanded)


def test_expand_variables() -> None:
    expr = 'rate(x{job=~"$job", gpu=~"${gpu:regex}"}[$__rate_interval]) [[instance]]'
    out = dash.expand_variables(expr, {"job": "a", "gpu": "0", "instance": "i"})
    assert out == 'rate(x{job=~"a", gpu=~"0"}[1m]) i'
    assert dash.expand_variables("x[$__rate_interval]", {"__rate_interval": "2m"}) == "x[2m]"
    with pytest.raises(KeyError, match="nope"):
        dash.expand_variables('x{a=~"$nope"}', {})


def test_hardware_optional_declarations_match_panels(boards: dict[str, dict[str, Any]]) -> None:
    targets = [q for doc in boards.values() for q in pack_readback.query_targets(doc)]
    for title, entry in pack_readback.HARDWARE_OPTIONAL.items():
        refs = {q.ref_id for q in targets if q.panel == title}
        assert refs, f"HARDWARE_OPTIONAL names a panel that does not exist: {title}"
        assert entry.ref_ids <= refs, title
        assert entry.reason
    optional = [q for q in targets if q.optional]
    gpm = [q for q in optional if q.panel.startswith("Utilization vs SM")]
    # the optional queries of the utilization panel are exactly the GPM ones
    assert len(gpm) == 4 and all(
        any(m in q.expr for m in ("sm_active", "sm_occupancy", "tensor_active", "dram_active"))
        for q in gpm
    )
    required = [q for q in targets if q.panel.startswith("Utilization vs SM") and not q.optional]
    assert [q.ref_id for q in required] == ["A", "B"]


# --- the 6.1 classification and the band shares, evaluated by promtool ----------------------------


def assert_promtool_passes(
    tmp_path: Path, rules: dict[str, Any], series: list[Any], checks: list[Any]
) -> None:
    """``promtool test rules``: over ``series`` sampled each minute, with ``rules`` (written as
    rules.yaml) and the pack's recording rules (the bottleneck reads memory pressure and the
    worker-to-GPU join from them), each of ``checks`` (promql_expr_test items) holds."""
    tests = {
        "rule_files": [str(REPO / "alerts" / "inferwatch-rules.yaml"), "rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bottleneck_and_band_queries_in_promtool(
    tmp_path: Path, thresholds: Thresholds, boards: dict[str, dict[str, Any]]
) -> None:
    from inferwatch.pack.dashboards import overview

    all_values = {"job": ".+", "instance": ".+", "gpu": ".+", "model": ".+", "worker": ".+"}
    all_values |= {"cluster": ".*", "node": ".*", "namespace": ".*", "pod": ".*"}
    bottleneck = dash.expand_variables(overview.bottleneck_expr(thresholds), all_values)
    weekly = boards["inference-weekly-trends"]
    bands = [
        dash.expand_variables(q.expr, {**all_values, "__range": "10m"})
        for q in pack_readback.query_targets(weekly)
        if q.panel == "Time in each utilization band"
    ]
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": "test:bottleneck:code", "expr": bottleneck},
                    {"record": "test:bands:sum", "expr": " + ".join(f"({b})" for b in bands)},
                    {"record": "test:band_waste:ratio", "expr": bands[0]},
                ],
            }
        ]
    }
    labels = 'job="inferwatch", instance="h{h}:10127", gpu="0", uuid="GPU-{h}"'
    series = []
    # h1: busy GPU with a queue on its worker (compute-bound); h2: full VRAM, low
    # utilization (memory-bound); h3: busy GPU without a queue (balanced); h4: idle GPU.
    # Each GPU runs its host's worker (the bottleneck joins queues through attribution).
    for h, util, vram, queue in (
        (1, 0.95, 0.5, 4),
        (2, 0.4, 0.9, 0),
        (3, 0.95, 0.5, 0),
        (4, 0.1, 0.2, 0),
    ):
        series += [
            {
                "series": f"inferwatch_gpu_utilization_ratio{{{labels.format(h=h)}}}",
                "values": f"{util}x20",
            },
            {
                "series": f"inferwatch_gpu_memory_used_ratio{{{labels.format(h=h)}}}",
                "values": f"{vram}x20",
            },
            {
                "series": f'inferwatch_queue_depth{{job="inferwatch", instance="h{h}:10127", '
                f'worker="w{h}", model="m"}}',
                "values": f"{queue}x20",
            },
            {
                "series": f'inferwatch_worker_gpu_info{{job="inferwatch", instance="h{h}:10127", '
                f'worker="w{h}", gpu="0", uuid="GPU-{h}"}}',
                "values": "1x20",
            },
        ]
    expected = [
        {"labels": f"test:bottleneck:code{{{labels.format(h=h)}}}", "value": code}
        for h, code in ((1, 1), (2, 2), (3, 0), (4, 0))
    ]
    checks = [
        {"expr": "test:bottleneck:code", "eval_time": "15m", "exp_samples": expected},
        {
            "expr": "test:bands:sum",
            "eval_time": "15m",
            "exp_samples": [{"labels": "test:bands:sum", "value": 1}],
        },
        # of four GPUs one is below the waste line (10% < 30%)
        {
            "expr": "test:band_waste:ratio",
            "eval_time": "15m",
            "exp_samples": [{"labels": "test:band_waste:ratio", "value": 0.25}],
        },
    ]
    assert_promtool_passes(tmp_path, rules, series, checks)


def test_weekly_memory_peak_is_the_kv_cache_of_an_engine_that_pre_allocates(
    tmp_path: Path, boards: dict[str, dict[str, Any]]
) -> None:
    """Issue 29 item 6: vLLM reserves --gpu-memory-utilization of the card at start, so
    NVML's VRAM peak was a flat 97 % line all week. The weekly memory curves read the
    memory pressure of the rules: the KV-cache usage where the engine exports it (named
    kv_cache), NVML's level else (gpu_memory)."""
    weekly = boards["inference-weekly-trends"]
    values = {"job": ".+", "instance": ".+", "gpu": ".+", "model": ".+", "worker": ".+"}
    values |= {"cluster": ".*", "node": ".*", "namespace": ".*", "pod": ".*"}
    values |= {"__interval": "5m", "__range": "10m"}
    targets = {
        (str(panel["title"]), str(target.get("legendFormat", ""))): target["expr"]
        for panel in weekly["panels"]
        for target in panel.get("targets") or []
    }
    per_gpu = targets[("Memory peak per GPU", "{{instance}} GPU {{gpu}} {{pressure_from}}")]
    one = targets[
        (
            "P99 latency, GPU utilization and memory peak",
            "memory peak (KV cache where exported, else VRAM)",
        )
    ]
    assert "inferwatch_gpu_memory_used_ratio{" not in one + per_gpu
    per_gpu, one = (dash.expand_variables(e, values) for e in (per_gpu, one))
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": "test:memory_peak_per_gpu:ratio", "expr": per_gpu},
                    {"record": "test:memory_peak:ratio", "expr": one},
                ],
            }
        ]
    }
    series = []
    # h1: vLLM, its card 97 % reserved by NVML, its KV cache 40 % used; h2: an engine
    # without a KV gauge, NVML 60 %
    for h, vram in ((1, 0.97), (2, 0.6)):
        gpu = f'job="inferwatch", instance="h{h}:10127", gpu="0", uuid="GPU-{h}"'
        series += [
            {"series": f"inferwatch_gpu_memory_used_ratio{{{gpu}}}", "values": f"{vram}x20"},
            {"series": f"inferwatch_gpu_utilization_ratio{{{gpu}}}", "values": "0.5x20"},
            {
                "series": f'inferwatch_worker_gpu_info{{job="inferwatch", instance="h{h}:10127", '
                f'worker="w{h}", gpu="0", uuid="GPU-{h}"}}',
                "values": "1x20",
            },
        ]
    series.append(
        {
            "series": 'inferwatch_kv_cache_usage_ratio{job="inferwatch", instance="h1:10127", '
            'worker="w1", model="m", engine="vllm"}',
            "values": "0.4x20",
        }
    )
    checks = [
        {
            "expr": "test:memory_peak_per_gpu:ratio",
            "eval_time": "15m",
            "exp_samples": [
                {
                    "labels": 'test:memory_peak_per_gpu:ratio{instance="h1:10127", '
                    'gpu="0", pressure_from="kv_cache"}',
                    "value": 0.4,
                },
                {
                    "labels": 'test:memory_peak_per_gpu:ratio{instance="h2:10127", '
                    'gpu="0", pressure_from="gpu_memory"}',
                    "value": 0.6,
                },
            ],
        },
        # the fleet's peak: h2's 60 %, never h1's flat 97 % reservation
        {
            "expr": "test:memory_peak:ratio",
            "eval_time": "15m",
            "exp_samples": [{"labels": "test:memory_peak:ratio", "value": 0.6}],
        },
    ]
    assert_promtool_passes(tmp_path, rules, series, checks)
