"""Generated alerts and recording rules: promtool, the catalogue, quality checks, Alertmanager.

The quality checks follow mixtool's and pint's offline lints: names, severities,
static summaries, templated descriptions, runbook links, no ``$value`` in labels,
counters only under rate()/increase(), every metric in METRICS.md.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import pack_readback
from tests.support.proc import (
    AMTOOL,
    PROMTOOL,
    REPO,
    SHARED,
    Alertmanager,
    Prometheus,
    require_binary,
    running,
    wait_until,
)

from inferwatch.engines import ENGINES
from inferwatch.pack import rules
from inferwatch.pack.dashboards import lint as dashlint
from inferwatch.pack.names import RECORDED_HISTOGRAMS, names, slo_good, slo_requests
from inferwatch.pack.rules import own_histograms, slo
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.validate import duration_seconds, format_duration

ALERTS_FILE = REPO / rules.ALERTS_FILE
RULES_FILE = REPO / rules.RULES_FILE
PROMETHEUS_RULE = REPO / rules.PROMETHEUS_RULE_FILE
UNIT_TESTS = sorted((REPO / "alerts" / "tests").glob("*.yaml"))
ALERTMANAGER_YML = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
METRICS_MD = SHARED / "design" / "METRICS.md"
ALERTS_MD = SHARED / "design" / "ALERTS.md"
DEVELOPMENT_MD = REPO / "docs" / "development.md"
ALERTS_DOC = REPO / "docs" / "alerts.md"
PROJECT_METRICS_DOC = REPO / dashlint.PROJECT_METRICS_DOC

WORKER_LABELS = {"cluster", "job", "instance", "worker", "model", "engine"}
GPU_LABELS = {"cluster", "job", "instance", "gpu", "uuid"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def all_rules(*paths: Path) -> list[dict[str, Any]]:
    return [r for p in paths for g in load(p)["groups"] for r in g["rules"]]


ALERT_RULES = all_rules(ALERTS_FILE)
RECORD_RULES = all_rules(RULES_FILE)
RECORDED = {r["record"] for r in RECORD_RULES}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require_binary(PROMTOOL, "promtool")
    # a guard against a hung promtool, not a speed check: the unit files take minutes of CPU
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=1100, check=False
    )


def promtool_tests(files: list[Path]) -> dict[Path, subprocess.CompletedProcess[str]]:
    """``promtool test rules`` on each file, side by side (one process a core): promtool
    evaluates a file's tests one after the other on one core, and the files take minutes."""
    workers = max(1, min(len(files), len(os.sched_getaffinity(0))))
    # the longest first, so that the last one to start is a short one
    ordered = sorted(files, key=lambda f: f.stat().st_size, reverse=True)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        done = pool.map(lambda f: promtool("test", "rules", str(f)), ordered)
        return dict(zip(ordered, done, strict=True))


# --------------------------------------------------------------------------- promtool


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES_FILE), str(ALERTS_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RECORD_RULES)} rules found" in result.stdout
    assert f"SUCCESS: {len(ALERT_RULES)} rules found" in result.stdout


@pytest.mark.timeout(1200)
def test_promtool_unit_tests_pass(promtool_runs: PromtoolRuns) -> None:
    assert len(UNIT_TESTS) >= 3
    for path, result in promtool_runs.results.items():
        assert result.returncode == 0, f"{path.name}: {result.stdout}{result.stderr}"
        assert result.stdout.count("SUCCESS") == 1, f"{path.name}: {result.stdout}"


def test_promtool_catches_a_broken_expectation(tmp_path: Path) -> None:
    """The unit tests can fail: flip one expectation and promtool must say FAILED."""
    doc = load(REPO / "alerts" / "tests" / "worker.yaml")
    doc["rule_files"] = [str(RULES_FILE), str(ALERTS_FILE)]
    doc["tests"] = [t for t in doc["tests"] if t["name"].startswith("three consecutive")]
    (case,) = (c for c in doc["tests"][0]["alert_rule_test"] if c["exp_alerts"])
    annotations = case["exp_alerts"][0]["exp_annotations"]
    target = tmp_path / "worker.yaml"
    target.write_text(yaml.safe_dump(doc))
    assert promtool("test", "rules", str(target)).returncode == 0
    annotations["description"] = annotations["description"].replace("10 are", "11 are")
    target.write_text(yaml.safe_dump(doc))
    result = promtool("test", "rules", str(target))
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def unit_test_cases() -> Iterator[tuple[str, str, bool]]:
    """(file, alertname, fires) for every alert_rule_test entry."""
    for path in UNIT_TESTS:
        for test in load(path)["tests"]:
            for case in test.get("alert_rule_test", []):
                yield path.name, case["alertname"], bool(case.get("exp_alerts"))


def test_every_alert_has_firing_and_silent_unit_tests() -> None:
    cases = list(unit_test_cases())
    for name in pack_readback.alert_names(load_thresholds()):
        assert name in {c[1] for c in cases if c[2]}, f"{name}: no promtool case where it fires"
        assert name in {c[1] for c in cases if not c[2]}, f"{name}: no case where it stays silent"


def test_unit_tests_check_just_short_of_for() -> None:
    """Each alert with a `for` has a silent check one evaluation (15s) before it fires."""
    with_boundary = set()
    for path in UNIT_TESTS:
        for test in load(path)["tests"]:
            cases = test.get("alert_rule_test", [])
            silent = {
                (c["alertname"], duration_seconds(c["eval_time"]))
                for c in cases
                if not c["exp_alerts"]
            }
            for case in cases:
                when = duration_seconds(case["eval_time"])
                if (
                    case["exp_alerts"]
                    and when is not None
                    and (case["alertname"], when - 15) in silent
                ):
                    with_boundary.add(case["alertname"])
    with_for = {r["alert"] for r in ALERT_RULES if "for" in r}
    assert with_for <= with_boundary, with_for - with_boundary


# Silent cases whose condition is true on purpose, but not for long enough.
HELD_PENDING = {
    "a short busy spell resets the 30m",
    "two consecutive samples over capacity do not fire",
    "agents that are up, or that recover within 5m, do not page",
    # pending at 15m, firing from 20m (checked on ALERTS in its promql_expr_test)
    "loop 1 with the model's average wobbling around 40% over 20-minute periods opens a ticket and keeps it",
}
WITH_FOR = {r["alert"] for r in ALERT_RULES if "for" in r}


def pending_checks(test: dict[str, Any]) -> list[dict[str, Any]]:
    """The ALERTS checks of one promtool test's silent cases (see the test below)."""
    cases = test.get("alert_rule_test", [])
    firing = {(c["alertname"], duration_seconds(c["eval_time"])) for c in cases if c["exp_alerts"]}
    never = {c["alertname"] for c in cases} - {name for name, _ in firing}
    checks = []
    for case in cases:
        name, when = case["alertname"], duration_seconds(case["eval_time"])
        assert when is not None
        if case["exp_alerts"]:
            continue
        if (name, when + 15) in firing and name in WITH_FOR:
            expected = [
                {
                    "labels": "ALERTS"
                    + _labels({**a["exp_labels"], "alertname": name, "alertstate": "pending"}),
                    "value": 1,
                }
                for a in next(
                    c
                    for c in cases
                    if c["alertname"] == name and duration_seconds(c["eval_time"]) == when + 15
                )["exp_alerts"]
            ]
        elif (name in never and test["name"] not in HELD_PENDING) or ((name, when + 15) in firing):
            expected = []
        else:
            continue
        checks.append(
            {
                "expr": f'ALERTS{{alertname="{name}"}}',
                "eval_time": case["eval_time"],
                "exp_samples": expected,
            }
        )
    return checks


@dataclass(frozen=True)
class PromtoolRuns:
    #: committed unit file -> promtool's run of it with the pending checks added
    results: dict[Path, subprocess.CompletedProcess[str]]
    #: how many tests carry pending checks
    with_checks: int


@pytest.fixture(scope="module")
def promtool_runs(tmp_path_factory: pytest.TempPathFactory) -> PromtoolRuns:
    """``promtool test rules`` once per unit file, each test with its pending checks added
    to its own promql_expr_test: the file's expectations and the checks share one
    evaluation (a second run of the files for the checks alone took minutes of CPU).
    Adding checks only adds ways to fail, so a pass here is a pass of the committed file."""
    out = tmp_path_factory.mktemp("promtool")
    committed: dict[Path, Path] = {}
    with_checks = 0
    for path in UNIT_TESTS:
        doc = load(path)
        for test in doc["tests"]:
            checks = pending_checks(test)
            if checks:
                test["promql_expr_test"] = [*test.get("promql_expr_test", []), *checks]
                with_checks += 1
        doc["rule_files"] = [str(RULES_FILE), str(ALERTS_FILE)]
        target = out / path.name
        target.write_text(yaml.safe_dump(doc))
        committed[target] = path
    results = {committed[t]: r for t, r in promtool_tests(list(committed)).items()}
    return PromtoolRuns(results, with_checks)


@pytest.mark.timeout(1200)
def test_silent_cases_are_silent_for_the_right_reason(promtool_runs: PromtoolRuns) -> None:
    """promtool's alert checks see only firing alerts; ALERTS also shows pending ones.

    A check one evaluation before an alert with a `for` fires must find it pending (the
    condition holds, `for` has not elapsed); before a `for: 0` alert fires, and in a test
    where the alert never fires, nothing at all (the condition itself is false).
    """
    assert promtool_runs.with_checks >= 25
    for path, result in promtool_runs.results.items():
        assert result.returncode == 0, f"{path.name}: {result.stdout}{result.stderr}"


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


# --------------------------------------------------------------------------- catalogue


CATALOGUE_ROW = re.compile(r"^\| (Inference\w+) \|[^|]*\| ([^|]+) \| ([^|]+) \|$", re.M)
EXTENSIONS_HEADING = "### Extensions to the catalogue"
CHANGES_HEADING = "### Changes to the catalogue"


def catalogue() -> dict[str, tuple[str, str]]:
    """ALERTS.md catalogue: alert -> (for, severity)."""
    if not ALERTS_MD.exists():
        pytest.skip(f"{ALERTS_MD} is not there (shared design documents not mounted)")
    rows = CATALOGUE_ROW.findall(ALERTS_MD.read_text())
    return {name: (for_.strip(), sev.strip()) for name, for_, sev in rows}


def _doc_table(heading: str) -> dict[str, tuple[str, str]]:
    """alert -> (for, severity) from the table under ``heading`` in docs/alerts.md."""
    text = ALERTS_DOC.read_text()
    assert heading in text, f"{ALERTS_DOC}: no {heading!r} section"
    section = re.split(r"^#{1,3} ", text.split(heading, 1)[1], maxsplit=1, flags=re.M)[0]
    rows = CATALOGUE_ROW.findall(section)
    return {name: (for_.strip(), sev.strip()) for name, for_, sev in rows}


def documented_extensions() -> dict[str, tuple[str, str]]:
    """Alerts beyond the catalogue, from the extensions table of docs/alerts.md only."""
    return _doc_table(EXTENSIONS_HEADING)


def documented_changes() -> dict[str, tuple[str, str]]:
    """Catalogue alerts whose for or severity an issue changed, from docs/alerts.md."""
    return _doc_table(CHANGES_HEADING)


def test_extensions_are_documented_and_do_not_redefine_the_catalogue() -> None:
    extensions = documented_extensions()
    assert extensions["InferenceWarmupDeadlineExceeded"] == ("1m", "warning")
    assert extensions["InferenceGPUTelemetryDown"] == ("1m", "critical")
    # an extension adds an alert; it may not change a catalogue alert's for or severity
    assert not set(extensions) & set(catalogue())


def test_changes_to_the_catalogue_are_documented_and_name_catalogue_alerts() -> None:
    changes = documented_changes()
    # the guide's leading indicator pages [6 FAQ]: act on the queue before latency alerts
    assert changes["InferenceQueueOverCapacity"] == ("(samples)", "critical")
    assert set(changes) <= set(catalogue())


def test_every_catalogue_alert_exists_with_its_for_and_severity() -> None:
    base = catalogue()
    assert len(base) >= 15
    expected = {**base, **documented_changes(), **documented_extensions()}
    generated: dict[str, list[dict[str, Any]]] = {}
    for rule in ALERT_RULES:
        generated.setdefault(rule["alert"], []).append(rule)
    assert set(generated) == set(expected)
    for name, (for_, severity) in expected.items():
        severities = {r["labels"]["severity"] for r in generated[name]}
        assert severities == set(severity.split("/")), name
        if re.fullmatch(r"\d+m", for_):
            for rule in generated[name]:
                assert duration_seconds(rule.get("for", "0s")) == duration_seconds(for_), name


# --------------------------------------------------------------------------- quality

TEMPLATE_VALUE = re.compile(r"\{\{[^}]*\$value[^}]*\}\}")


@pytest.mark.parametrize(
    "rule", ALERT_RULES, ids=lambda r: f"{r['alert']}-{r['labels']['severity']}"
)
def test_alert_quality(rule: dict[str, Any]) -> None:
    t = load_thresholds()
    name = rule["alert"]
    assert re.fullmatch(r"Inference(?:[A-Z][a-z0-9]*|[A-Z]+(?=[A-Z][a-z]|$))+", name), name
    assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
    assert set(rule["labels"]) == {"severity"}
    assert rule["labels"]["severity"] in rules.SEVERITIES
    for value in rule["labels"].values():
        assert "$value" not in value and "{{" not in value
    ann = rule["annotations"]
    assert set(ann) == {"summary", "description", "runbook_url", "dashboard_url"}
    assert ann["summary"].endswith(".") and "{{" not in ann["summary"]
    assert "{{" in ann["description"]
    assert re.sub(r"\{\{ end \}\}$", "", ann["description"]).endswith(".")
    for use in TEMPLATE_VALUE.findall(ann["description"]):
        assert re.search(r"humanize|printf", use), f"{name}: raw {use} in description"
    # the rendered page, opened on the alert's labels and the Prometheus that fired it
    assert ann["runbook_url"].startswith(f"{t.pack.runbook_base_url}{name}.html?")
    assert ann["runbook_url"].endswith("prometheus={{ $externalURL | urlquery }}")
    assert ann["dashboard_url"].startswith(t.pack.dashboard_base_url)
    if "for" in rule:
        assert duration_seconds(rule["for"]) is not None
    assert "vector(0)" not in rule["expr"].replace(" ", "")


# --------------------------------------------------------------------------- metrics


def metrics_md_names() -> set[str]:
    """METRICS.md's names, plus the exact names of docs/metrics.md's Extensions section."""
    if not METRICS_MD.exists():
        pytest.skip(f"{METRICS_MD} is not there (shared design documents not mounted)")
    names = dashlint.extension_metrics(PROJECT_METRICS_DOC.read_text())
    for line in METRICS_MD.read_text().splitlines():
        m = re.match(r"^\| ([a-z_*][a-z0-9_ /*]*) \| ([a-z0-9 =/]+) \|", line)
        if not m:
            continue
        for name in m.group(1).split(" / "):
            name = name.strip()
            names.add(name)
            if "histogram" in m.group(2):
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def walk(node: Any, counter_fn: bool = False) -> Iterator[tuple[str, bool]]:
    """(metric name, inside rate/increase) for every selector of a parsed expression."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node.name, counter_fn
    elif kind == "MatrixSelector":
        yield from walk(node.vector_selector, counter_fn)
    elif kind == "Call":
        inside = node.func.name in ("rate", "increase", "irate", "resets")
        for arg in node.args:
            yield from walk(arg, inside)
    elif kind == "BinaryExpr":
        yield from walk(node.lhs)
        yield from walk(node.rhs)
    elif kind == "AggregateExpr" or kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        yield from walk(node.expr)


def selectors(expr: str) -> list[tuple[str, bool]]:
    promql_parser = pytest.importorskip("promql_parser")
    return list(walk(promql_parser.parse(expr)))


def test_every_metric_exists_in_metrics_md() -> None:
    known = metrics_md_names() | RECORDED | {"up"}
    assert "inferwatch_ttft_seconds_bucket" in known and "inferwatch_gpu_up" in known
    assert "inferwatch_warmup_deadline_exceeded" in known  # an extension of docs/metrics.md
    # The one exception: the per-worker bucket rates and the SLO SLIs and request rates also read the
    # engines' own histograms, scraped by Prometheus directly (pack.own_histograms),
    # under the family names of the agent's engine tables.
    t = load_thresholds()
    n = names(t)
    bucket_rates = {n.histogram_rate(metric) for metric in RECORDED_HISTOGRAMS}
    bucket_rates |= {slo_good(w) for w in slo.windows(t.slos)}
    bucket_rates |= {slo_requests(w) for w in slo.windows(t.slos)}
    engine_buckets = {
        f"{source}_bucket"
        for name in own_histograms.ENGINES
        for source in ENGINES[name].source_families()
    }
    for rule in RECORD_RULES + ALERT_RULES:
        for name, _ in selectors(rule["expr"]):
            if rule.get("record") in bucket_rates and name in engine_buckets:
                continue
            assert name in known, (
                f"{rule.get('record') or rule['alert']}: {name} is not in METRICS.md"
            )


def test_counters_only_under_rate_and_rate_only_over_counters() -> None:
    # InferenceGPUTelemetryDown asks whether the NVML collector has reported errors
    # at all (and never a finished pass): the counter's presence, not its value.
    # The engine-side bucket rates leave out workers whose agent re-exports the
    # buckets: whether the agent's copy exists, not its value.
    presence_checks = {"inferwatch_collect_errors_total"} | {
        f"{metric}_bucket" for metric in RECORDED_HISTOGRAMS
    }
    for rule in RECORD_RULES + ALERT_RULES:
        for name, in_rate in selectors(rule["expr"]):
            counter = name.endswith(("_total", "_bucket"))
            if in_rate:
                assert counter, f"{name}: rate()/increase() of a gauge"
            elif counter:
                assert name in presence_checks, f"{name}: counter used without rate()"


def test_recording_rules_keep_the_contract_labels() -> None:
    promql_parser = pytest.importorskip("promql_parser")
    for rule in RECORD_RULES:
        level = rule["record"].split(":")[0]
        outer = promql_parser.parse(rule["expr"])
        while type(outer).__name__ in ("Call", "ParenExpr"):
            outer = outer.args[-1] if type(outer).__name__ == "Call" else outer.expr
        if type(outer).__name__ != "AggregateExpr":
            continue  # binary expressions: their operands are checked where recorded
        labels = (
            set(outer.modifier.labels) - {"le", "state", "currency"} if outer.modifier else set()
        )
        expected = {
            "worker": WORKER_LABELS,
            "worker_gpu": {"cluster", "job", "instance", "worker", "gpu", "uuid"},
            "gpu": GPU_LABELS,
            "instance": {"cluster", "job", "instance"},
            "model": {"cluster", "job", "model"},
            "cluster": {"cluster"},
        }[level]
        assert labels == expected, rule["record"]


def test_contract_recording_rules_exist() -> None:
    """Every recording rule named in docs/development.md (the dashboards' contract)."""
    text = DEVELOPMENT_MD.read_text()
    section = text.split("## Recording rules", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        prefix = ""
        for token in re.findall(r"`([a-z0-9_:]+)`", line):
            if token.startswith(":"):  # `:p95_5m` continues the name before it
                names.add(prefix + token[1:])
            elif token.count(":") == 2:
                names.add(token)
                prefix = token.rsplit(":", 1)[0] + ":"
    assert len(names) >= 18
    assert names <= RECORDED, names - RECORDED


def test_record_names_maps_the_documented_names() -> None:
    t = load_thresholds()
    t10 = replace(t, pack=replace(t.pack, rate_window=600.0))
    mapping = rules.record_names(t10)
    assert (
        mapping["worker:inferwatch_ttft_seconds:p99_5m"] == "worker:inferwatch_ttft_seconds:p99_10m"
    )
    assert mapping["worker:inferwatch_requests_finished:rate5m"] == (
        "worker:inferwatch_requests_finished:rate10m"
    )
    assert mapping["gpu:inferwatch_gpu_state:code"] == "gpu:inferwatch_gpu_state:code"
    assert set(rules.record_names(t)) == RECORDED


def test_warmup_deadline_alert_reads_only_the_gate_gauge(tmp_path: Path) -> None:
    custom = tmp_path / "t.yaml"
    custom.write_text(
        "cold_start:\n  warmup_deadline_for: 3m\npack:\n  agent_selector: 'job=\"iw\"'\n"
    )
    (rule,) = (
        a
        for a in rules.alerts(load_thresholds(str(custom)))
        if a.name == "InferenceWarmupDeadlineExceeded"
    )
    assert rule.expr == (
        'max by (cluster, job, instance, worker) (inferwatch_warmup_deadline_exceeded{job="iw"}) == 1'
    )
    assert rule.for_seconds == 180.0 and rule.severity == "warning"
    assert "for at least 3m." in rule.description
    # the gauge carries no model or engine: the description may not template them
    assert "$labels.model" not in rule.description and "$labels.engine" not in rule.description
    (default,) = (r for r in ALERT_RULES if r["alert"] == "InferenceWarmupDeadlineExceeded")
    assert default["for"] == "1m"


def test_groups_evaluate_at_the_scrape_interval() -> None:
    """Every group at the scrape interval but the SLO windows of a day or more, which read
    only the 5m records every 2m30s (docs/alerts.md, "What the SLO rules cost")."""
    t = load_thresholds()
    for path in (RULES_FILE, ALERTS_FILE):
        for group in load(path)["groups"]:
            if group["name"] == slo.LONG_GROUP:
                assert group["interval"] == format_duration(slo.LONG_INTERVAL) == "2m30s"
            else:
                assert group["interval"] == t.pack.interval, group["name"]


def test_queue_alert_counts_samples_with_for(tmp_path: Path) -> None:
    custom = tmp_path / "t.yaml"
    custom.write_text("queue:\n  over_capacity_samples: 5\npack:\n  scrape_interval: 10s\n")
    t = load_thresholds(str(custom))
    (rule,) = (a for a in rules.alerts(t) if a.name == "InferenceQueueOverCapacity")
    assert rule.for_seconds == 40.0  # the 5th sample, 10 s apart
    assert "5 consecutive samples (10s apart)" in rule.description


def test_custom_thresholds_generate_valid_rules(tmp_path: Path) -> None:
    custom = tmp_path / "t.yaml"
    custom.write_text(
        'pack:\n  agent_selector: \'job="gpu-agents", env=~"prod|staging"\'\n'
        "  rate_window: 2m\n  runbook_base_url: https://wiki.example/rb/\n"
        "vram:\n  scale_above: 0.9\n"
    )
    t = load_thresholds(str(custom))
    files = rules.generate(t)
    for path, text in files.items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    result = promtool(
        "check", "rules", str(tmp_path / rules.RULES_FILE), str(tmp_path / rules.ALERTS_FILE)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    alerts_text = files[rules.ALERTS_FILE]
    assert 'job="gpu-agents",env=~"prod|staging"' in alerts_text
    assert 'job="inferwatch"' not in alerts_text
    assert "worker:inferwatch_ttft_seconds:p99_2m > 2" in alerts_text
    assert "worker_gpu:inferwatch_memory_pressure:ratio > 0.9\n" in alerts_text
    assert "https://wiki.example/rb/InferenceGPULost.html?instance=" in alerts_text


def test_prometheus_loads_and_evaluates_the_rules(tmp_path: Path) -> None:
    """The Debian Prometheus loads the generated files and evaluates every rule cleanly."""
    custom = tmp_path / "t.yaml"
    custom.write_text("pack:\n  scrape_interval: 1s\n  rate_window: 1m\n")
    rule_dir = tmp_path / "rules"
    for path, text in rules.generate(load_thresholds(str(custom))).items():
        if path.startswith("alerts/"):
            (rule_dir / path).parent.mkdir(parents=True, exist_ok=True)
            (rule_dir / path).write_text(text)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_dir / "alerts" / "*.yaml")],
        "scrape_configs": [],
    }
    prom = Prometheus(tmp_path, config)
    with running(prom):

        def evaluated() -> list[dict[str, Any]] | None:
            groups = prom.api("rules")["groups"]
            found = [r for g in groups for r in g["rules"]]
            if len(found) != len(RECORD_RULES) + len(ALERT_RULES):
                return None
            done = all(r.get("lastEvaluation", "").startswith("20") for r in found)
            return found if done else None

        # the long SLO group runs every 2m30s: its first evaluation may take that long
        found = wait_until(evaluated, timeout=200, message="every rule evaluated once")
        assert {r["health"] for r in found} == {"ok"}, [r for r in found if r["health"] != "ok"]
        # no agent target at all: the absent() form of InferenceAgentDown is pending
        agent_down = [r for r in found if r.get("name") == "InferenceAgentDown"]
        assert agent_down and agent_down[0]["state"] == "pending"


def test_prometheusrule_holds_the_same_groups() -> None:
    doc = load(PROMETHEUS_RULE)
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"] == "inferwatch"
    assert doc["spec"]["groups"] == load(RULES_FILE)["groups"] + load(ALERTS_FILE)["groups"]


def test_generated_files_carry_the_header() -> None:
    for path in (RULES_FILE, ALERTS_FILE, PROMETHEUS_RULE):
        assert path.read_text().startswith("# generated by inferwatch generate; do not edit")


# --------------------------------------------------------------------------- Alertmanager


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = require_binary(AMTOOL, "amtool")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


def test_amtool_check_config() -> None:
    result = amtool("check-config", str(ALERTMANAGER_YML))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "alertname=InferenceTTFTSLOBreach"], "page"),
        (["severity=warning", "alertname=InferenceGPUUnderutilized"], "ticket"),
        (["severity=info", "alertname=Anything"], "null"),
        (["alertname=NoSeverity"], "ticket"),
    ],
)
def test_routing_by_severity(labels: list[str], receiver: str) -> None:
    result = amtool("config", "routes", "test", f"--config.file={ALERTMANAGER_YML}", *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_grouping_by_alertname_cluster_and_worker() -> None:
    route = load(ALERTMANAGER_YML)["route"]
    assert route["group_by"] == ["alertname", "cluster", "worker"]


def test_inhibition_stays_inside_its_cluster(tmp_path: Path) -> None:
    """Two clusters name a host and worker alike: a page in one mutes nothing in the other."""
    am = Alertmanager(tmp_path, ALERTMANAGER_YML.read_text())
    same = {"job": "inferwatch", "instance": "gpu-node-0:10127", "worker": "vllm-0"}
    posted = [
        {"alertname": "InferenceQueueOverCapacity", "severity": "critical", "cluster": "east"},
        {"alertname": "InferenceTTFTSLOBreach", "severity": "critical", "cluster": "east"},
        {"alertname": "InferenceTTFTSLOBreach", "severity": "critical", "cluster": "west"},
        {"alertname": "InferenceGPULost", "severity": "critical", "cluster": "east", "gpu": "0"},
        {"alertname": "InferenceGPUUnderutilized", "severity": "warning", "cluster": "west"},
    ]
    posted[4]["gpu"] = "0"  # GPU alerts carry no worker label (dropped below)
    with running(am):
        sent = [{**same, **labels} for labels in posted]
        for labels in sent[3:]:
            labels.pop("worker")
        am.post([{"labels": labels} for labels in sent])

        def states() -> dict[tuple[str, str], str] | None:
            result = {
                (a["labels"]["alertname"], a["labels"]["cluster"]): a["status"]["state"]
                for a in am.alerts()
            }
            settled = len(result) == len(posted) and "suppressed" in result.values()
            return result if settled else None

        got = wait_until(states, timeout=30, message="alerts in Alertmanager, one inhibited")
    assert got[("InferenceTTFTSLOBreach", "east")] == "suppressed"  # its own queue pages
    assert got[("InferenceTTFTSLOBreach", "west")] == "active"  # same names, other cluster
    assert got[("InferenceGPUUnderutilized", "west")] == "active"  # east's lost GPU is not its


def test_critical_inhibits_warnings_of_the_same_worker(tmp_path: Path) -> None:
    am = Alertmanager(tmp_path, ALERTMANAGER_YML.read_text())
    with running(am):
        common = {"job": "inferwatch", "instance": "host-a:10127"}
        posted = [
            # the queue pages first (the leading indicator): the same worker's latency
            # pages wait, another worker's do not
            {"alertname": "InferenceQueueOverCapacity", "severity": "critical", "worker": "w0"},
            {"alertname": "InferenceTTFTSLOBreach", "severity": "critical", "worker": "w0"},
            {"alertname": "InferenceTPOTSLOBreach", "severity": "warning", "worker": "w0"},
            {"alertname": "InferenceTTFTSLOBreach", "severity": "critical", "worker": "w1"},
            {
                "alertname": "InferenceGPULost",
                "severity": "critical",
                "gpu": "0",
                "uuid": "G0",
                "instance": "host-b:10127",
            },
            {
                "alertname": "InferenceTTFTHighGPUIdle",
                "severity": "warning",
                "worker": "w9",
                "instance": "host-b:10127",
            },
        ]
        am.post([{"labels": {**common, **labels}} for labels in posted])

        def states() -> dict[tuple[str, str], str] | None:
            result = {
                (a["labels"]["alertname"], a["labels"].get("worker", "")): a["status"]["state"]
                for a in am.alerts()
            }
            # the inhibitor reads new alerts asynchronously: wait until it has seen them
            settled = len(result) == len(posted) and list(result.values()).count("suppressed") >= 3
            return result if settled else None

        got = wait_until(states, timeout=30, message="alerts in Alertmanager, some inhibited")
    assert got[("InferenceQueueOverCapacity", "w0")] == "active"
    assert got[("InferenceTTFTSLOBreach", "w0")] == "suppressed"  # the queue pages for it
    assert got[("InferenceTPOTSLOBreach", "w0")] == "suppressed"  # a warning of a paged worker
    assert got[("InferenceTTFTSLOBreach", "w1")] == "active"  # another worker
    assert got[("InferenceGPULost", "")] == "active"
    assert got[("InferenceTTFTHighGPUIdle", "w9")] == "suppressed"  # host of a lost GPU
