"""Issue 23 item 3: the weekly report's long-tail finding counts the long prompts [5.3].

The share of prompts over ``pack.loops.LONG_PROMPT_TOKENS`` is the one definition
advise uses (``pack.loops.long_prompt_share`` over ``stats.share_above``), here
over the week's ``increase(inferwatch_prompt_length_tokens_bucket[1d])`` days.
"""

from __future__ import annotations

import calendar
import math

from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report.build import build_report
from inferwatch.report.model import (
    Buckets,
    Hourly,
    Period,
    RawData,
    RawWorker,
)
from inferwatch.report.summary import Finding

MONDAY = calendar.timegm((2026, 11, 30, 0, 0, 0))
#: TTFT P50 about 0.1 s, P99 about 2 s: a long tail (P99 >= 5x P50)
TAIL: Buckets = ((0.1, 50.0), (0.5, 90.0), (2.5, 100.0), (math.inf, 100.0))


def _prompts(short: float, long: float) -> Buckets:
    """A day of vLLM's 1-2-5 prompt buckets: ``short`` prompts of 1,000-2,000 tokens and
    ``long`` of 2,000-5,000."""
    return ((1000.0, 0.0), (2000.0, short), (5000.0, short + long), (math.inf, short + long))


def long_tail(lengths: tuple[Buckets | None, ...] | None) -> Finding:
    period = Period(MONDAY, 7)
    n = 2 * period.days
    worker = RawWorker.of_series(
        "m",
        "w0",
        "vllm",
        ("h:1",),
        histograms={"ttft": (TAIL,) * n, "prompt_length": lengths},
        capacity=256.0,
        requests=(100.0,) * n,
        prompt_tokens=(100.0,) * n,
        generation_tokens=(100.0,) * n,
        queue_max=(0.0,) * n,
        over_capacity_seconds=(0.0,) * n,
    )
    raw = RawData(period, (worker,), (), (), Hourly((), (), "", (), ()), ())
    report = build_report(raw, load_thresholds())
    (finding,) = [f for f in report.findings if f.id == "long_tail"]
    return finding


def test_a_real_share_of_long_prompts_asks_for_a_long_context_pool() -> None:
    # the week before: no long prompt; this week: 20 of 100 a day (missing days count nothing)
    days = (_prompts(100, 0),) * 7 + (_prompts(80, 20),) * 6 + (None,)
    f = long_tail(days)
    assert "prompts over 2,000 tokens: 20% (line: 2%)" in f.evidence
    assert f.action.startswith(
        "Give long-context traffic its own pool: 20% of the prompts are over 2,000 tokens."
    )


def test_almost_no_long_prompt_sends_the_tail_elsewhere() -> None:
    f = long_tail((_prompts(999, 1),) * 14)
    assert "prompts over 2,000 tokens: 0% (line: 2%)" in f.evidence
    assert f.action.startswith("Almost no prompt is over 2,000 tokens: the tail is elsewhere")
    assert "its own pool" not in f.action


def test_an_engine_without_prompt_lengths_gets_the_general_advice() -> None:
    f = long_tail(None)
    assert "prompts over" not in f.evidence
    assert f.action.startswith("Give long-context traffic its own pool: route requests")
