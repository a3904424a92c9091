"""One definition of each loop: advise and the weekly report name the loops the alerts raise.

Every load scenario of the simulator (``inferwatch loadgen --scenario``) runs through
the simulator's engine in virtual time (tests/support/scenarios.py); what an agent
would read of it becomes ``advise``'s pictures and the report's query answers, and
both must name exactly the ``pack.loops`` ids that the alerts of ``pack.rules``
raise on that scenario (``expected_loops``). Three seeds per scenario: one run's
P99 is a handful of requests, and a definition that agrees only by luck of the
draw does not agree.
"""

from __future__ import annotations

import pytest
from tests.support import scenarios as S

from inferwatch.advise import advise
from inferwatch.pack import loops as L
from inferwatch.pack.rules import alert_names
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report.build import build_report
from inferwatch.report.model import bands_from_thresholds

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
    assert {r.id for r in recs} == S.expected_loops(scenario), [p.as_dict() for p in pictures]
    for r in recs:
        assert set(r.alerts) == set(L.BY_ID[r.id].alerts)


@pytest.mark.parametrize(("scenario", "seed"), CASES)
def test_the_report_names_the_loops_the_alerts_raise(scenario: str, seed: int) -> None:
    report = build_report(S.raw_data(S.run(scenario, seed), T), bands_from_thresholds(T))
    found = {f.id for f in report.findings if f.id}
    assert found == S.expected_loops(scenario), [(f.id, f.title) for f in report.findings]


def test_loop_1_suppresses_consolidation_and_nothing_else() -> None:
    assert L.loops_of_alerts({"InferenceLoadImbalance", "InferenceGPUUnderutilized"}) == {
        "imbalance"
    }
    assert L.loops_of_alerts({"InferenceGPUUnderutilized"}) == {"consolidate"}
    assert L.loops_of_alerts({"InferenceTTFTSLOBreach", "InferenceGPULost"}) == frozenset()
    assert L.suppress({"imbalance", "long_tail"}) == {"imbalance", "long_tail"}
