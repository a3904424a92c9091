"""Issue 29: the weekly report's figures that contradicted the guide, each held by a test
that failed before its fix.

- the cost section named a waster's loop from its own TTFT P95 > 2 s figure, so an
  overloaded model was told to warm up: it reads the loops of ``pack.loops`` the
  report's findings hold (the definition the alerts, advise and the insights share).
"""

from __future__ import annotations

from tests.support import scenarios as S

from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report import render
from inferwatch.report.build import build_report
from inferwatch.report.cost import RawCost, cost_section
from inferwatch.report.insights import loops_by_model
from inferwatch.report.model import Period, bands_from_thresholds

T = load_thresholds()


def _cost_of(model: str) -> RawCost:
    """One model whose GPU was held idle 12 hours a day, both weeks."""
    day = (12.0,) * 14
    return RawCost(None, {(model, "held_idle"): day, (model, "serving"): day}, {}, {}, {}, {})


def test_an_overloaded_model_is_not_called_a_warm_up_problem() -> None:
    report = build_report(S.raw_data(S.run("overload", 1), T), bands_from_thresholds(T))
    (model,) = [m.total.model for m in report.models]
    # its first tokens were slow: queueing, far over the warm-up line, over the week
    ttft = report.models[0].total.latency["ttft"].week[0.95].current
    assert ttft is not None and ttft > T.ttft.warmup_p95_seconds
    loops = loops_by_model(report.findings)
    assert "over_capacity" in loops[model] and not {"warmup", "cold_start"} & loops[model]
    section = cost_section(_cost_of(model), Period(S.REPORT_END, 7), T, loops)
    assert section is not None
    (waster,) = section.wasters
    assert waster.loop_id == "over_capacity" and waster.loop == 4, waster
    text = "\n".join(render._cost_text(section))
    assert "warm" not in text.lower() and "-> loop 4 (over capacity): scale with the load" in text


def test_a_cold_start_is_the_warm_up_loop_and_idle_hours_alone_consolidate() -> None:
    report = build_report(S.raw_data(S.run("cold-start", 1), T), bands_from_thresholds(T))
    (model,) = [m.total.model for m in report.models]
    loops = loops_by_model(report.findings)
    section = cost_section(_cost_of(model), Period(S.REPORT_END, 7), T, loops)
    assert section is not None and section.wasters[0].loop_id == "cold_start"
    alone = cost_section(_cost_of("quiet"), Period(S.REPORT_END, 7), T, {})
    assert alone is not None and alone.wasters[0].loop_id == "consolidate"
    assert alone.wasters[0].loop is None
    assert "-> consolidation: serve the model on fewer GPUs" in "\n".join(render._cost_text(alone))
