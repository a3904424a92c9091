"""``inferwatch backtest``: every scenario through the committed rules on promtool.

One run of every built-in scenario (and the recorded traces under tests/data/traces)
at the deployment's intervals; each scenario must have no false critical page, no
miss and no detection slower than its alert's bound. A scenario that fails today
because of a known defect of issue 29 carries ``xfail:`` in its file: it must still
fail (strict), so the fix flips it by deleting that line. The committed table in
docs/alerts.md must be what the command writes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.support.proc import REPO

from inferwatch.backtest import (
    MARK_BEGIN,
    MARK_END,
    catalogue,
    inputs,
    rule_files,
    run_backtest,
)
from inferwatch.backtest.engine import evaluate, promtool_binary, rule_copies
from inferwatch.backtest.scenario import (
    Expect,
    exact_error_ratios,
    load_scenario,
    scenario_files,
)
from inferwatch.backtest.score import ScenarioScore, markdown, pair_row, score, summarize
from inferwatch.backtest.truth import BURN_KINDS, PAIRS, alert_facts
from inferwatch.engines import proxy
from inferwatch.pack.thresholds import load_thresholds

SCRAPE = EVALUATION = 15.0  # deploy/prometheus/prometheus.yml
RULES = rule_files(str(REPO / "alerts"))
H200 = REPO / "tests" / "data" / "traces" / "h200-llamacpp.jsonl.gz"


def _all_inputs() -> list[Path]:
    os.chdir(REPO)
    return inputs(argparse.Namespace(scenarios=[], all=True))


# the module's fixture replays every scenario once (minutes of promtool on 2 cores): the
# first test that asks for it carries that time
pytestmark = pytest.mark.timeout(2400)


@pytest.fixture(scope="module")
def results() -> dict[str, ScenarioScore]:
    started = time.monotonic()
    scores = run_backtest(_all_inputs(), RULES, SCRAPE, EVALUATION, jobs=2)
    print(f"backtest of {len(scores)} scenarios: {time.monotonic() - started:.0f} s")
    return {s.scenario: s for s in scores}


SCENARIOS = [p.stem for p in scenario_files()]
XFAIL = {
    p.stem: (doc.split("xfail:", 1)[1].splitlines()[0].strip().strip('"'))
    for p in scenario_files()
    if "\nxfail:" in (doc := p.read_text())
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=XFAIL[n], strict=True)) if n in XFAIL else n
        for n in SCENARIOS
    ],
)
def test_scenario_meets_its_ground_truth(results: dict[str, ScenarioScore], name: str) -> None:
    s = results[name]
    assert not s.failures, f"{name}:\n" + "\n".join(s.failures)


def test_h200_trace(results: dict[str, ScenarioScore]) -> None:
    if not H200.exists():
        pytest.skip(f"{H200.relative_to(REPO)} is not recorded yet (issue 29 item 4)")
    s = results["trace:h200-llamacpp"]
    assert s.xfail or not s.failures, "\n".join(s.failures)


def test_committed_table_is_current(results: dict[str, ScenarioScore]) -> None:
    """docs/alerts.md holds what `inferwatch backtest --all --markdown-into` writes."""
    scores = list(results.values())
    facts = alert_facts(load_thresholds())
    body = markdown(summarize(scores, facts, SCRAPE, EVALUATION), scores, SCRAPE, EVALUATION)
    text = (REPO / "docs" / "alerts.md").read_text()
    committed = text.split(MARK_BEGIN, 1)[1].split(MARK_END, 1)[0].lstrip("\n")
    assert committed == body, (
        "docs/alerts.md's backtest table is stale: run "
        "`inferwatch backtest --all --markdown-into docs/alerts.md`"
    )


def test_every_burn_alert_is_expected_as_a_page_and_as_a_ticket(
    results: dict[str, ScenarioScore],
) -> None:
    """Each burn-rate alert is held, by some scenario, to firing as a page and as a
    ticket, each with a pair's own bound, and every one of the four pairs is exercised."""
    pairs: dict[str, set[str]] = {}
    for s in results.values():
        for name, a in s.alerts.items():
            for alert in BURN_KINDS:
                for pair in PAIRS:
                    if name == pair_row(alert, pair) and a.expected:
                        assert a.detected and not a.misses, (s.scenario, name)
                        pairs.setdefault(alert, set()).add(pair)
    for alert in BURN_KINDS:
        severities = {PAIRS[p].severity for p in pairs.get(alert, set())}
        assert severities == {"critical", "warning"}, (alert, pairs.get(alert))
    assert set().union(*pairs.values()) == set(PAIRS)


def test_the_30_day_ratios_are_checked(results: dict[str, ScenarioScore]) -> None:
    """The 30-day scenario's 3d and 30d error ratios (the long group's, from the 5m
    records) were read back and compared; its availability burn is not trivially 0."""
    s = results["slo-30d"]
    checked = {(w, k): (exact, got) for w, _, k, exact, got in s.ratios}
    assert {w for w, _ in checked} == {"3d", "30d"}
    exact, got = checked[("30d", "availability")]
    assert exact > 0.002 and got is not None and abs(got / exact - 1) < 0.02


# --------------------------------------------------------------------------- promtool-free


def test_stated_bad_shares_are_what_the_series_hold() -> None:
    """A burn row's ``share`` (its bound's input) is the share of bad requests the
    synthesized counters hold from its onset on: at most 10 % above it, never below it
    by more than 10 %."""
    alerts = catalogue(RULES)
    rows = 0
    for path in scenario_files():
        if "share:" not in path.read_text():
            continue
        sc = load_scenario(path, alerts, SCRAPE)
        step = sc.scrape or SCRAPE
        for exp in sc.truth.expect:
            if exp.share is None:
                continue
            rows += 1
            kind = BURN_KINDS[exp.alert]
            held = dict(
                exact_error_ratios(sc.series, exp.labels["model"], exp.onset, sc.duration, step)
            )
            assert 0.9 * exp.share <= held[kind] <= 1.1 * exp.share, (path.name, exp, held)
    assert rows >= 6


def test_a_burn_rows_bound_is_its_pairs() -> None:
    """The ticket's bound waits for its coverage (half a day of a 1d window) or its fill
    (the long window's bad share past factor x budget), the page's keeps today's formula."""
    facts = alert_facts(load_thresholds())
    ttft = facts["InferenceTTFTBudgetBurn"]
    # at 100 % bad the fast pair's bound is the alert's default one
    assert ttft.burn_bound("1h", 1.0, 1800.0, 15, 15) == ttft.bound(15, 15)
    # 1d at 4.5x: fill 16h + 5m, more than 12h of coverage from an onset at 2h
    assert ttft.burn_bound("1d", 0.045, 7200.0, 15, 15) == 60 + 16 * 3600 + 300 + 150
    # 3d at 1.5x from day 20: 2 days' fill; coverage (36h) long past
    avail = facts["InferenceAvailabilityBudgetBurn"]
    got = avail.burn_bound("3d", 0.0075, 20 * 86400.0, 60, 150)
    assert got is not None and abs(got - (420 + 2 * 86400 + 300 + 150)) < 1e-6
    # a share the pair's factor never passes has no bound: the row is reported
    assert avail.burn_bound("1h", 0.07, 0.0, 15, 15) is None


@pytest.mark.parametrize(
    ("evaluation", "expected", "fast"),
    [
        # 15 s divides 2m30s: a new value at each multiple, held between; x is stale from
        # 5m15s, so the record ends at 7m30s instead of living on for the 5m lookback
        (
            15,
            {0: 0, 135: 0, 150: 10, 165: 10, 285: 10, 300: 20, 435: 20, 450: None, 465: None},
            (165, 11),
        ),
        # 1m does not: a new value at the first step at or after each multiple (3m, 5m)
        (60, {0: 0, 120: 0, 180: 12, 240: 12, 300: 20, 420: 20, 480: None, 540: None}, (240, 16)),
    ],
)
def test_a_held_record_changes_only_every_interval_and_goes_stale(
    tmp_path: Path, evaluation: int, expected: dict[int, int | None], fast: tuple[int, int]
) -> None:
    """``rule_copies`` holds a 2m30s group's record between its evaluations when promtool
    evaluates every step: the record of a counter x rising by one every 15 s (0 to 20,
    then stale) keeps the value of its group's last evaluation, and once x is gone the
    record ends at the group's next evaluation, as Prometheus' staleness marker ends it.
    A group at the evaluation interval follows x at every step."""
    rules = tmp_path / "slow.yaml"
    rules.write_text(
        "groups:\n  - name: slow\n    interval: 2m30s\n    rules:\n"
        "      - record: r\n        expr: sum(x)\n"
        "  - name: fast\n    interval: 15s\n    rules:\n"
        "      - record: f\n        expr: sum(x)\n"
    )
    copies = tmp_path / "copies"
    copies.mkdir()
    files = rule_copies([rules], float(evaluation), copies)
    tests = [
        {
            "expr": "r",
            "eval_time": f"{t}s",
            "exp_samples": [] if v is None else [{"labels": "r", "value": v}],
        }
        for t, v in expected.items()
    ]
    tests.append(
        {
            "expr": "f",
            "eval_time": f"{fast[0]}s",
            "exp_samples": [{"labels": "f", "value": fast[1]}],
        }
    )
    test = tmp_path / "held.test.yaml"
    test.write_text(
        json.dumps(
            {
                "rule_files": files,
                "evaluation_interval": f"{evaluation}s",
                "tests": [
                    {
                        "interval": "15s",
                        "input_series": [{"series": "x", "values": "0+1x20 stale"}],
                        "promql_expr_test": tests,
                    }
                ],
            }
        )
    )
    done = subprocess.run(
        [promtool_binary(), "test", "rules", str(test)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- the check can fail


def evaluated(stem: str) -> tuple[Any, Any, Any]:
    """One shipped scenario: loaded, its rules evaluated, and the alerts' facts."""
    path = next(p for p in scenario_files() if p.stem == stem)
    sc = load_scenario(path, catalogue(RULES), SCRAPE)
    timeline = evaluate(sc.series, sc.duration, RULES, SCRAPE, EVALUATION)
    return sc, timeline, alert_facts(load_thresholds())


def test_a_miss_a_false_page_and_a_slow_detection_are_reported() -> None:
    """The overload scenario held to a wrong ground truth: every kind of failure shows."""
    sc, timeline, facts = evaluated("overload")
    wrong = sc.truth
    wrong.allow = []
    wrong.expect = [
        # the queue page "should" have come at 0: 30 minutes late
        Expect("InferenceQueueOverCapacity", 0.0, {"worker": "w0"}),
        Expect("InferenceGPULost", 60 * 60.0),
    ]
    s = score(sc.name, sc.source, timeline, wrong, facts, SCRAPE, EVALUATION)
    kinds = {f.split(":")[0] for f in s.failures}
    assert {"miss", "slow", "false critical page"} <= kinds, s.failures
    assert s.alerts["InferenceGPULost"].misses == 1
    # the queue passes capacity at 30m: pending then, firing after its 30s `for`
    assert s.alerts["InferenceQueueOverCapacity"].detected == [1830.0]


def test_flaps_are_counted() -> None:
    """A pending alert that resets before its `for` is a flap: the wobbling loop 1 case."""
    sc, timeline, facts = evaluated("imbalance-2-wobble")
    s = score(sc.name, sc.source, timeline, sc.truth, facts, SCRAPE, EVALUATION)
    imbalance = s.alerts["InferenceLoadImbalance"]
    assert imbalance.flaps + len(imbalance.detected) >= 1


# --------------------------------------------------------------------------- bad input


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferwatch.cli", "backtest", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for part in parts:
        assert part in lines[0], lines[0]


def test_malformed_scenario_names_the_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: inferwatch-scenario\nname: bad\nduration: 10m\nworkers: {w0: {}}\n"
        "phases: [{at: 0s, w0: {util: high}}]\n"
    )
    _one_error_line(_cli(str(bad)), str(bad), "phases[0].w0.util", "expected")
    bad.write_text(
        "kind: inferwatch-scenario\nname: bad\nduration: 10m\nworkers: {w0: {}}\n"
        "phases: [{at: 0s}]\nexpect: [{alert: NoSuchAlert, onset: 1m}]\n"
    )
    _one_error_line(_cli(str(bad)), str(bad), "expect[0].alert", "catalogue")


def test_malformed_trace_names_the_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    header = {"kind": "inferwatch-trace", "version": 1, "scrape_interval_s": "1s"}
    with gzip.open(bad, "wt") as fh:
        fh.write(json.dumps(header) + "\n")
    _one_error_line(_cli(str(bad)), str(bad), "scrape_interval_s", "a number")
    bad.write_bytes(b"not gzip")
    _one_error_line(_cli(str(bad)), str(bad), "gzip")


def test_missing_promtool_is_one_line(tmp_path: Path) -> None:
    path = next(p for p in scenario_files() if p.stem == "steady")
    done = _cli(str(path), env={"PATH": str(tmp_path)})
    _one_error_line(done, "promtool not found")


def test_a_promtool_past_its_time_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A promtool that does not finish (here: given 10 ms) ends the run with one line
    naming the scenario's length and what to do, not a traceback."""
    from inferwatch.backtest import engine
    from inferwatch.errors import UsageError

    path = next(p for p in scenario_files() if p.stem == "steady")
    sc = load_scenario(path, catalogue(RULES), SCRAPE)
    monkeypatch.setattr(engine, "PROMTOOL_TIMEOUT", 0.01)
    with pytest.raises(UsageError) as err:
        evaluate(sc.series, sc.duration, RULES, SCRAPE, EVALUATION)
    message = str(err.value)
    assert "\n" not in message and "did not finish a 2h backtest within 0.01 s" in message


def test_a_scenario_past_promtools_sample_limit_is_one_error() -> None:
    """A month at 2m30s has 17,281 steps: the 30d record would read more samples of its
    2m30s records than promtool allows (10,000) and fail at day 17; the run says so
    up front, with the least evaluation interval that fits."""
    from inferwatch.errors import UsageError

    with pytest.raises(UsageError) as err:
        evaluate({"x{}": [0.0]}, 30 * 86400.0, RULES, 60.0, 150.0)
    message = str(err.value)
    assert "\n" not in message and "17281 steps" in message and "4m20s or more" in message


# --------------------------------------------------------------------------- traces


def _exposition(series: dict[str, list[float | str | None]], k: int) -> str:
    """The agent's /metrics at scrape k of synthetic series (without job and instance)."""
    lines = []
    for sel, values in series.items():
        v = values[k]
        if v is None or v == "stale" or sel.startswith("up{"):
            continue
        name, labels = sel.split("{", 1)
        kept = [p for p in labels.rstrip("}").split(",") if not p.startswith(("job=", "instance="))]
        lines.append(f"{name}{{{','.join(kept)}}} {float(v)!r}")
    return "\n".join(lines) + "\n"


def test_a_trace_replays_with_its_phases_as_ground_truth(tmp_path: Path) -> None:
    """A trace written in the recorder's format (here: the overload scenario's series as
    the agent's expositions, one a second apart... every 15 s): the queue page is held
    to the overload phase, nothing critical may fire before it."""
    alerts = catalogue(RULES)
    doc = (
        "kind: inferwatch-scenario\nname: t\nduration: 20m\nworkers: {w0: {slots: 20}}\n"
        "phases:\n  - {at: 0s, all: {util: 0.6, running: 8}}\n"
        "  - {at: 5m, all: {util: 0.97, running: 20, waiting: {base: 25, to: 60}}}\n"
        "  - {at: 15m, all: {util: 0.3, running: 2, waiting: 0}}\n"
    )
    spec = tmp_path / "t.yaml"
    spec.write_text(doc)
    sc = load_scenario(spec, alerts, SCRAPE)
    t0 = 1_800_000_000.0
    steps = len(next(iter(sc.series.values())))
    header = {
        "kind": "inferwatch-trace",
        "version": 1,
        "scrape_interval_s": SCRAPE,
        "source": "tests/unit/test_backtest.py",
        "phases": [
            {"name": "steady", "start": t0, "end": t0 + 300},
            {"name": "overload", "start": t0 + 300, "end": t0 + 900},
            {"name": "idle", "start": t0 + 900, "end": t0 + 1200},
        ],
        "workers": {"w0": {"engine": "vllm", "slots": 20}},
    }
    trace = tmp_path / "t.jsonl.gz"
    with gzip.open(trace, "wt") as fh:
        fh.write(json.dumps(header) + "\n")
        for k in range(steps):
            fh.write(json.dumps({"t": t0 + k * SCRAPE, "agent": _exposition(sc.series, k)}) + "\n")
            fh.write(
                json.dumps({"t": t0 + k * SCRAPE + 1, "client": {"worker": "w0", "ok": True}})
                + "\n"
            )
    (s,) = run_backtest([trace], RULES, SCRAPE, EVALUATION, jobs=1)
    assert s.scenario == "trace:t"
    assert not s.failures, s.failures
    assert s.alerts["InferenceQueueOverCapacity"].detected[0] <= 90.0


def test_llamacpp_latency_comes_only_from_the_proxy(tmp_path: Path) -> None:
    """llama.cpp exports no latency histogram: without ``proxy: true`` its scenario has no
    TTFT/TPOT/E2E buckets (so no TTFT page could fire, as on the H200 before issue 30);
    with it, the buckets are the proxy's bounds, and the scenario's pages come from them."""
    path = REPO / "agent/inferwatch/backtest/scenarios/llamacpp-proxy.yaml"
    alerts = catalogue(RULES)

    def bucket_bounds(scenario_path: Path) -> dict[str, set[str]]:
        got: dict[str, set[str]] = {}
        for selector in load_scenario(scenario_path, alerts, SCRAPE).series:
            name = selector.split("{", 1)[0]
            if name.endswith("_bucket"):
                got.setdefault(name, set()).add(selector.split('le="', 1)[1].split('"', 1)[0])
        return got

    with_proxy = bucket_bounds(path)
    assert set(with_proxy) == {
        "inferwatch_ttft_seconds_bucket",
        "inferwatch_tpot_seconds_bucket",
        "inferwatch_e2e_latency_seconds_bucket",
    }
    assert with_proxy["inferwatch_ttft_seconds_bucket"] == {
        *(repr(float(b)) for b in proxy.TTFT_BUCKETS),
        "+Inf",
    }
    direct = tmp_path / "llamacpp-direct.yaml"
    direct.write_text(path.read_text().replace("proxy: true, ", ""))
    assert bucket_bounds(direct) == {}
