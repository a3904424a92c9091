"""One definition of each loop: the alerts, advise, the weekly report and the demo agree.

Every load scenario of the simulator (``inferwatch loadgen --scenario``) runs through
the simulator's engine in virtual time (tests/support/scenarios.py); what an agent
would read of it becomes ``advise``'s pictures, the report's query answers and the
demo's view, and each must name exactly the ``pack.loops`` ids that the alerts of
``pack.rules`` raise on that scenario (``expected_loops``). Three seeds per scenario:
one run's P99 is a handful of requests, and a definition that agrees only by luck
of the draw does not agree.

The fourth leg holds the alerts themselves to ``expected_loops``: the scenario's load
sustained (``run(name, duration=...)``) as the series an agent scraped every
``pack.scrape_interval`` would have left, evaluated by the generated rule files in
``promtool test rules`` for longer than every loop alert's ``for`` and window; the
loops whose alerts fired at any time, suppression applied, must be the expected ones.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from tests.support import scenarios as S
from tests.support.e2e import rule_files
from tests.support.pack_readback import alert_names
from tests.support.proc import promtool

from inferwatch.advise import advise
from inferwatch.advise.rules import OOM_RISK, prefix_caching
from inferwatch.demo.conditions import alert_for, conditions, loops_of
from inferwatch.pack import loops as L
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report.build import build_report

T = load_thresholds()
SEEDS = (1, 2, 11)
CASES = [(name, seed) for name in S.SCENARIOS for seed in SEEDS]


def test_every_loop_names_alerts_the_rules_define() -> None:
    defined = set(alert_names(T))
    for loop in L.LOOPS:
        assert loop.alerts and set(loop.alerts) <= defined, loop.id
    # the scenarios' table speaks of real alerts too
    for scenario, alerts in S.SCENARIO_ALERTS.items():
        assert alerts <= defined, scenario
    assert set(S.SCENARIO_ALERTS) == set(S.SCENARIOS)


def test_every_loop_reads_thresholds_that_exist() -> None:
    for loop in L.LOOPS:
        for key in loop.thresholds:
            section, name = key.split(".")
            assert hasattr(getattr(T, section), name), f"{loop.id}: {key}"


def test_every_loop_is_raised_by_some_scenario() -> None:
    raised = set().union(*(S.expected_loops(s) for s in S.SCENARIOS))
    # warmup (an old worker's cold prompt path) needs a worker up longer than
    # cold_start.within: no minute-long scenario has one; its advise and report tests
    # build that picture directly
    assert raised == {loop.id for loop in L.LOOPS} - {"warmup"}


@pytest.mark.parametrize(("scenario", "seed"), CASES)
def test_advise_names_the_loops_the_alerts_raise(scenario: str, seed: int) -> None:
    pictures = S.pictures(S.run(scenario, seed))
    recs = advise(pictures, T)
    found = {r.id for r in recs}
    # the VRAM loop's out-of-memory note has no alert: advise names it where
    # pack.loops.oom_risk holds (the simulator's default 0.95 with prefix caching on is
    # the guide's own case, [2.3]), except where the same loop's condition holds (a full
    # KV pool): there it is that item's last step (pack.ranking.reconcile)
    at_risk = {p.label for p in pictures if L.oom_risk(p.vram_used_ratio, prefix_caching(p))}
    short = {w for r in recs if r.id in ("memory", "preemptions") for w in r.workers}
    assert {w for r in recs if r.id == OOM_RISK for w in r.workers} == at_risk - short
    assert found - {OOM_RISK} == S.expected_loops(scenario), [p.as_dict() for p in pictures]
    for r in recs:
        if r.id != OOM_RISK:
            assert set(r.alerts) == set(L.BY_ID[r.id].alerts)


@pytest.mark.parametrize(("scenario", "seed"), CASES)
def test_the_report_names_the_loops_the_alerts_raise(scenario: str, seed: int) -> None:
    report = build_report(S.raw_data(S.run(scenario, seed), T), T)
    found = {f.id for f in report.findings if f.id}
    assert found == S.expected_loops(scenario), [(f.id, f.title) for f in report.findings]


def test_loop_1_suppresses_consolidation_and_nothing_else() -> None:
    assert L.loops_of_alerts({"InferenceLoadImbalance", "InferenceGPUUnderutilized"}) == {
        "imbalance"
    }
    assert L.loops_of_alerts({"InferenceGPUUnderutilized"}) == {"consolidate"}
    assert L.loops_of_alerts({"InferenceTTFTSLOBreach", "InferenceGPULost"}) == frozenset()
    assert L.suppress({"imbalance", "long_tail"}) == {"imbalance", "long_tail"}


def test_a_cold_start_silences_its_own_workers_long_tail_only() -> None:
    assert L.loops_of_alerts({"InferenceWorkerColdStart", "InferenceLatencyLongTail"}) == {
        "cold_start"
    }
    cold = [("cold_start", "m", ("a",))]
    assert L.silenced("long_tail", "m", ("a",), cold)
    assert not L.silenced("long_tail", "m", ("b",), cold)  # per worker
    assert not L.silenced("long_tail", "n", ("a",), cold)
    # loop 1's suppression covers the model's every worker
    spread = [("imbalance", "m", ("a",))]
    assert L.silenced("consolidate", "m", ("b",), spread)
    assert not L.silenced("consolidate", "n", ("b",), spread)
    assert not L.silenced("imbalance", "m", ("a",), cold + spread)
    # advise: the cold worker's tail is its cold start; another worker's tail stays
    cold_tail = S.pictures(S.run("cold-start"))[0]
    tail = S.pictures(S.run("long-tail"))[0]
    tail = dataclasses.replace(tail, model=cold_tail.model, worker="other", gpus=("other",))
    found = {(r.id, r.workers) for r in advise([cold_tail, tail], T)}
    assert ("cold_start", (cold_tail.worker,)) in found
    assert ("long_tail", ("other",)) in found
    assert ("long_tail", (cold_tail.worker,)) not in found


@pytest.mark.parametrize(("scenario", "seed"), CASES)
def test_the_demo_names_the_loops_the_alerts_raise(scenario: str, seed: int) -> None:
    conds = conditions(S.demo_readings(S.run(scenario, seed)), T)
    assert loops_of(conds) == S.expected_loops(scenario), conds


# --------------------------------------------------------------------------- the alerts

INTERVAL = T.pack.scrape_interval
#: past the longest `for` of the loops' alerts plus the longest window its rules read
_WAITS = alert_for(T)
HORIZON = (
    max(_WAITS[a] for loop in L.LOOPS for a in loop.alerts)
    + max(T.pack.rate_window, T.queue.rising_window)
    + 2 * INTERVAL
)


def _fired(loop: L.Loop) -> str:
    """1 where any alert of the loop was firing at any evaluation of the run."""
    names = "|".join(loop.alerts)
    return (
        f'max(max_over_time(ALERTS{{alertname=~"{names}",alertstate="firing"}}[{int(HORIZON)}s]))'
    )


def promtool_disagrees(tmp: Path, scenario: str, expected: frozenset[str]) -> str:
    """``promtool test rules`` over the scenario sustained for HORIZON: each loop's alerts
    must have fired iff the loop is in ``expected`` (a loop that an expected loop
    suppresses may do either). Returns promtool's report, "" when it agreed."""
    runs = S.run(scenario, 1, duration=HORIZON)
    checks = [
        {
            "expr": _fired(loop),
            "eval_time": f"{int(HORIZON)}s",
            "exp_samples": [{"labels": "{}", "value": 1}] if loop.id in expected else [],
        }
        for loop in L.LOOPS
        if loop.id in expected or not set(loop.suppressed_by) & expected
    ]
    doc = {
        "rule_files": rule_files(T, tmp),
        "evaluation_interval": f"{int(INTERVAL)}s",
        "tests": [
            {
                "interval": f"{int(INTERVAL)}s",
                "input_series": S.promtool_series(runs, INTERVAL),
                "promql_expr_test": checks,
            }
        ],
    }
    test_file = tmp / f"{scenario}.test.yaml"
    test_file.write_text(yaml.safe_dump(doc, width=1_000_000))
    done = promtool("test", "rules", str(test_file))
    return "" if done.returncode == 0 else done.stdout + done.stderr


@pytest.mark.parametrize("scenario", list(S.SCENARIOS))
def test_the_alerts_on_prometheus_raise_the_expected_loops(tmp_path: Path, scenario: str) -> None:
    out = promtool_disagrees(tmp_path, scenario, S.expected_loops(scenario))
    assert not out, f"the generated rules disagree on {scenario}:\n{out}"


def test_a_disagreement_with_the_alerts_fails(tmp_path: Path) -> None:
    """The leg can fail: claim that a trickle overloads the worker and wastes nothing."""
    out = promtool_disagrees(tmp_path, "idle", frozenset({"over_capacity"}))
    assert "FAILED" in out and "InferenceQueueOverCapacity" in out
