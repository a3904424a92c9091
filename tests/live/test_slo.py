"""SLOs: the ``slos:`` spec and its errors, the two alert families' switches, and the
SLI rule against a backfilled week read by a real Prometheus."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support import pack_readback
from tests.support import report_fixture as fx
from tests.support.proc import (
    PROMTOOL,
    REPO,
    cli,
    http_get,
    promtool,
    require_binary,
    wait_until,
)
from tests.support.promblocks import PromOnBlocks

from inferwatch.engines import proxy
from inferwatch.errors import ConfigError
from inferwatch.pack import generate, rules
from inferwatch.pack.rules import slo
from inferwatch.pack.slo_spec import ENGINE_BUCKETS, Objective, SloEntry
from inferwatch.pack.thresholds import Thresholds, load_thresholds


def thresholds_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_have_one_entry_with_three_objectives() -> None:
    spec = load_thresholds().slos
    assert spec.enabled and spec.p99_alerts and spec.window == 30 * 86400
    (default,) = spec.entries
    assert default.model is None and "vllm" in default.engines
    assert [(o.kind, o.objective, o.le) for o in default.objectives] == [
        ("ttft", 0.99, 2.5),
        ("tpot", 0.99, 0.1),
        ("availability", 0.995, None),
    ]


def test_vllm_ttft_buckets_are_upstreams() -> None:
    """vLLM's fixed TTFT buckets (vllm/v1/metrics/loggers.py, v0.33.0, as listed in
    shared/reference/vllm-metrics.md)."""
    assert ENGINE_BUCKETS["vllm"]["ttft"] == (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    )  # fmt: skip
    # TGI's TTFT and llama.cpp's latency come from the agent's measuring proxy (issue 30)
    assert ENGINE_BUCKETS["tgi"]["ttft"] == proxy.TTFT_BUCKETS
    assert ENGINE_BUCKETS["llamacpp"] == {"ttft": proxy.TTFT_BUCKETS, "tpot": proxy.TPOT_BUCKETS}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "slos:\n  default:\n    ttft: {threshold_seconds: 2, objective: 0.99}\n",
            "slos.default.ttft.threshold_seconds: expected a bucket boundary of vllm's TTFT "
            "histogram; the nearest are 1 or 2.5, got 2",
        ),
        (
            "slos:\n  models:\n    qwen:\n      engine: sglang\n",
            "slos.models.qwen.ttft.threshold_seconds: expected a bucket boundary of sglang's "
            "TTFT histogram; the nearest are 2 or 4, got 2.5",
        ),
        (
            "slos:\n  models:\n    q:\n      engine: tgi\n      tpot: null\n"
            "      ttft: {threshold_seconds: 2.2, objective: 0.99}\n",
            "slos.models.q.ttft.threshold_seconds: expected a bucket boundary of tgi's TTFT "
            "histogram; the nearest are 2 or 2.5, got 2.2",
        ),
        (
            "slos:\n  models:\n    t:\n      engine: triton\n      ttft: null\n",
            "slos.models.t.tpot: expected no TPOT SLO for engine triton (it exports no TPOT "
            "histogram); set it to null",
        ),
        (
            "slos:\n  default:\n    availability: {objective: 1}\n",
            "slos.default.availability.objective: expected a share between 0 and 1",
        ),
        ("slos:\n  window: 12h\n", "slos.window: expected a duration of at least 1d"),
        ("slos:\n  default:\n    engine: vllmx\n", "slos.default.engine: expected an engine"),
        ("slos:\n  enabled: maybe\n", "slos.enabled: expected true or false"),
        ("slos:\n  default:\n    ttft: {le: 1}\n", "slos.default.ttft.le: expected one of"),
    ],
)
def test_bad_specs_name_the_file_key_and_expectation(
    tmp_path: Path, text: str, message: str
) -> None:
    path = thresholds_file(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_thresholds(path)
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)


def test_cli_exits_2_with_one_line_naming_the_nearest_boundaries(tmp_path: Path) -> None:
    path = thresholds_file(
        tmp_path, "slos:\n  default:\n    tpot: {threshold_seconds: 0.12, objective: 0.99}\n"
    )
    result = cli("generate", "--thresholds", path, "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "the nearest are 0.1 or 0.15" in lines[0], result.stderr
    assert path in lines[0] and "slos.default.tpot.threshold_seconds" in lines[0]


def test_model_entries_inherit_the_default_and_leave_it_the_other_models(
    tmp_path: Path,
) -> None:
    t = load_thresholds(
        thresholds_file(
            tmp_path,
            "slos:\n  models:\n    meta-llama/Llama-3.1-8B:\n"
            "      ttft: {objective: 0.995}\n      tpot: null\n"
            "    qwen:\n      engine: sglang\n      ttft: {threshold_seconds: 2}\n",
        )
    )
    by_model = {e.model: e for e in t.slos.entries}
    llama = by_model["meta-llama/Llama-3.1-8B"]
    assert [(o.kind, o.objective, o.le) for o in llama.objectives] == [
        ("ttft", 0.995, 2.5),
        ("availability", 0.995, None),
    ]
    assert by_model["qwen"].engines == ("sglang",) and by_model["qwen"].get("ttft").le == 2.0
    assert slo.entry_matchers(t.slos, by_model[None]) == (
        'engine=~"vllm|trtllm|nim|lmdeploy|llamacpp"',
        'model!~"meta\\\\-llama/Llama\\\\-3\\\\.1\\\\-8B|qwen"',
    )
    # the budget series carries each model's own objective
    (budget,) = (
        r
        for r in slo.recording_rules(t)
        if r["record"] == "model:inferwatch_slo_error_budget:ratio"
    )
    assert '{slo="ttft",model="meta-llama/Llama-3.1-8B"}) + 0.005)' in budget["expr"]
    files = rules.generate(t)
    check = promtool("check", "rules", "/dev/stdin", stdin=files[rules.RULES_FILE])
    assert check.returncode == 0, check.stdout + check.stderr


def test_either_family_can_be_turned_off(tmp_path: Path) -> None:
    default = load_thresholds()
    base = pack_readback.alert_names(default)
    assert {"InferenceTTFTBudgetBurn", "InferenceTTFTSLOBreach"} <= set(base)

    off = load_thresholds(thresholds_file(tmp_path, "slos:\n  enabled: false\n"))
    assert set(pack_readback.alert_names(off)) == set(base) - set(slo.ALERT_NAMES.values())
    recording, alerting = rules.rule_groups(off)
    assert slo.RECORD_GROUP not in {g["name"] for g in recording}
    assert slo.ALERT_GROUP not in {g["name"] for g in alerting}
    assert not any("BudgetBurn" in p for p in generate.render(off))

    p99_off = load_thresholds(thresholds_file(tmp_path, "slos:\n  p99_alerts: false\n"))
    assert set(pack_readback.alert_names(p99_off)) == set(base) - set(slo.P99_FAMILY)
    assert "runbooks/InferenceTTFTSLOBreach.md" not in generate.render(p99_off)


def test_the_default_output_keeps_every_other_alert_unchanged(tmp_path: Path) -> None:
    """The SLO family adds groups; the alerts and rules before it are the same with it off."""
    on = rules.rule_groups(load_thresholds())
    off = rules.rule_groups(load_thresholds(thresholds_file(tmp_path, "slos:\n  enabled: false\n")))
    assert on[0][0] == off[0][0]  # inferwatch.rules
    assert [g for g in on[1] if g["name"] != slo.ALERT_GROUP] == off[1]


# --------------------------------------------------------------------------- a real week

WEEK = 7 * fx.DAY


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, fx.Truth]]:
    blocks, truth = fx.build_tsdb(
        tmp_path_factory.mktemp("tsdb"), require_binary(PROMTOOL, "promtool")
    )
    server = PromOnBlocks(tmp_path_factory.mktemp("prom"), blocks)
    server.loaded("count(inferwatch_ttft_seconds_bucket)", fx.END)
    yield server, truth
    server.stop()


def good_and_total(
    truth: fx.Truth, kind: str, bounds: tuple[float, ...], le: float
) -> tuple[float, float]:
    """The llama-8b workers' requests of the second week within ``le``, and all of them."""
    good = total = 0.0
    for worker in ("vllm-0", "vllm-1"):
        for day in range(7, 14):
            counts = truth.buckets[worker][kind][day]
            total += sum(counts)
            good += sum(c for b, c in zip(bounds, counts, strict=True) if b <= le)
    return good, total


def query(url: str, promql: str, at: float) -> list[dict[str, object]]:
    import json
    import urllib.parse

    qs = urllib.parse.urlencode({"query": promql, "time": at})
    _, body, _ = http_get(f"{url}/api/v1/query?{qs}", timeout=30)
    doc = json.loads(body)
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def raw_error_ratio(t: Thresholds, entry: SloEntry, objective: Objective) -> str:
    """The short windows' SLI (good and requests straight from the raw buckets) over 7d."""
    good = slo.good_rate(t, t.slos, entry, objective, "7d")
    requests = slo.request_rate(t, t.slos, entry, objective, "7d")
    return f"1 - ({good}) / ({requests})"


@pytest.mark.slow
def test_sli_over_a_backfilled_week_matches_the_generated_counts(
    prom: tuple[object, fx.Truth],
) -> None:
    """The TTFT SLI rule's expression over this week (days 7..13) against the fixture's own
    bucket counts: llama-8b's two vLLM workers, from Friday on with a slow tail."""
    server, truth = prom
    t = load_thresholds()
    (entry,) = t.slos.entries
    results = {}
    for kind in ("ttft", "tpot"):
        objective = entry.get(kind)
        assert objective is not None
        expr = raw_error_ratio(t, entry, objective)
        (sample,) = [
            r
            for r in query(server.url, expr, fx.END)
            if r["metric"]["model"] == "llama-8b"  # type: ignore[index]
        ]
        results[kind] = float(sample["value"][1])  # type: ignore[index]
    # qwen-7b runs on TGI: not an engine of the default entry, so it has no SLI here
    assert all(
        r["metric"]["model"] == "llama-8b"  # type: ignore[index]
        for r in query(server.url, raw_error_ratio(t, entry, entry.objectives[0]), fx.END)
    )
    for kind, bounds, le in (("ttft", fx.TTFT_LE, 2.5), ("tpot", fx.TPOT_LE, 0.1)):
        good, total = good_and_total(truth, kind, bounds, le)
        expected = 1 - good / total
        assert expected > 0 and math.isclose(results[kind], expected, rel_tol=1e-9), kind
    # the slow tail from Friday on spends the TTFT budget: more than 1% of this week is bad
    assert results["ttft"] > entry.get("ttft").budget  # type: ignore[union-attr]


@pytest.mark.timeout(1200)
def test_generated_rule_files_pass_promtool() -> None:
    result = subprocess.run(
        [
            require_binary(PROMTOOL, "promtool"),
            "test",
            "rules",
            str(REPO / "alerts" / "tests" / "slo.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=1100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_report_error_budget_section_over_the_backfilled_week(
    prom: tuple[object, fx.Truth], tmp_path: Path
) -> None:
    """``inferwatch report`` through its CLI: budget used this week per model and SLO."""
    from inferwatch.cli import main as cli_main

    server, truth = prom
    out = tmp_path / "out"
    code = cli_main(
        [
            "report",
            "--end",
            "2026-11-23T00:00:00Z",
            "--quiet",
            "--prometheus-url",
            server.url,  # type: ignore[attr-defined]
            "--output",
            str(out),
        ]
    )
    assert code == 0
    text = (out / "report.txt").read_text()
    section = text.split("ERROR BUDGETS", 1)[1].split("ALERTS", 1)[0]
    rows = {tuple(line.split()[:2]): line for line in section.splitlines() if "llama" in line}
    assert "qwen-7b" not in section  # TGI is not an engine of the default entry
    for kind, title, bounds, le in (
        ("ttft", "TTFT", fx.TTFT_LE, 2.5),
        ("tpot", "TPOT", fx.TPOT_LE, 0.1),
    ):
        good, total = good_and_total(truth, kind, bounds, le)
        burn = (1 - good / total) / 0.01
        line = rows[("llama-8b", title)]
        assert f"{burn:.2f}x" in line and f"{burn * 7 / 30 * 100:.1f}%" in line, line
    # no error reason and no rejection counter in the fixture: nothing failed
    assert "0.00x" in rows[("llama-8b", "availability")]
    html = (out / "report.html").read_text()
    assert "Error budgets" in html and "Budget used" in html


def test_report_budget_rows_follow_the_entries_and_engines(tmp_path: Path) -> None:
    """Pure arithmetic of report/budget.py on hand-made data (no Prometheus)."""
    from inferwatch.report.budget import budgets
    from inferwatch.report.model import Hourly, Period, RawData, RawWorker

    t = load_thresholds(
        thresholds_file(
            tmp_path,
            "slos:\n  models:\n    own:\n      ttft: {threshold_seconds: 1, objective: 0.9}\n"
            "      tpot: null\n      availability: null\n",
        )
    )
    period = Period(end=14 * 86400.0, days=7)
    # one day of buckets per day: 100 requests, 95 within 1 s, 98 within 2.5 s
    day = ((1.0, 95.0), (2.5, 98.0), (math.inf, 100.0))
    none7: tuple[None, ...] = (None,) * 7

    def worker(model: str, engine: str, failed: float | None) -> RawWorker:
        return RawWorker.of_series(
            model,
            f"{model}-0",
            engine,
            ("a",),
            histograms={"ttft": (None,) * 7 + (day,) * 7},
            requests=none7 + (100.0,) * 7,
            failed=None if failed is None else none7 + (failed,) * 7,
        )

    raw = RawData(
        period,
        (worker("own", "vllm", 7.0), worker("other", "vllm", 7.0), worker("tgi-m", "tgi", 1.0)),
        (),
        (),
        Hourly((), (), "", (), ()),
        (),
    )
    rows = {(b.model, b.kind): b for b in budgets(raw, t)}
    # "own" has only its TTFT objective (1 s, 90%): 5% bad = burn 0.5
    assert set(rows) == {("own", "ttft"), ("other", "ttft"), ("other", "availability")}
    own = rows[("own", "ttft")]
    assert own.requests == 700 and own.bad == 35 and math.isclose(own.burn_rate, 0.5)
    assert math.isclose(own.budget_used, 0.5 * 7 / 30)
    # "other" follows the default: 2% later than 2.5 s against a 1% budget; 7% errors
    assert math.isclose(rows[("other", "ttft")].burn_rate, 2.0)
    assert math.isclose(rows[("other", "availability")].sli, 0.93)
    # TGI is not an engine of the default entry
    assert not any(m == "tgi-m" for m, _ in rows)


def test_a_budget_page_mutes_only_its_own_ticket(tmp_path: Path) -> None:
    """deploy/alertmanager/alertmanager.yml with a real Alertmanager: the burn-rate alerts
    carry no instance/worker/gpu, so the generic critical-mutes-warning rule must not
    apply to them; their own rule pairs a page with the same model's and SLO's ticket."""

    from tests.support.proc import Alertmanager, running

    am = Alertmanager(tmp_path, (REPO / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    with running(am):
        posted = [
            ("InferenceTTFTBudgetBurn", "critical", "llama", "ttft"),
            ("InferenceTTFTBudgetBurn", "warning", "llama", "ttft"),
            ("InferenceTTFTBudgetBurn", "warning", "qwen", "ttft"),
            ("InferenceTPOTBudgetBurn", "warning", "llama", "tpot"),
            ("InferenceGPUUnderutilized", "warning", "", ""),
        ]
        alerts = []
        for name, severity, model, kind in posted:
            labels = {"alertname": name, "severity": severity, "job": "inferwatch"}
            if model:
                labels |= {"model": model, "slo": kind}
            else:
                labels |= {"instance": "host-a:10127", "gpu": "0", "uuid": "G0"}
            alerts.append({"labels": labels})
        am.post(alerts)

        def states() -> dict[tuple[str, str, str], str] | None:
            got = am.alerts()
            result = {
                (
                    a["labels"]["alertname"],
                    a["labels"]["severity"],
                    a["labels"].get("model", ""),
                ): a["status"]["state"]
                for a in got
            }
            settled = len(result) == len(posted) and "suppressed" in result.values()
            return result if settled else None

        got = wait_until(states, timeout=30, message="alerts in Alertmanager, one inhibited")
    assert got == {
        ("InferenceTTFTBudgetBurn", "critical", "llama"): "active",
        ("InferenceTTFTBudgetBurn", "warning", "llama"): "suppressed",
        ("InferenceTTFTBudgetBurn", "warning", "qwen"): "active",
        ("InferenceTPOTBudgetBurn", "warning", "llama"): "active",
        ("InferenceGPUUnderutilized", "warning", ""): "active",
    }
