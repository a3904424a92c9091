"""The shape that keeps the generated rules cheap on day 30 (issue 38; docs/alerts.md, "What
the SLO rules cost"): no raw series is read over a day or more by a group evaluated more often
than every 2 minutes, and no SLO rule reads the same raw series over the same window twice.
The figures themselves come from bench/bench_rule_cost.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferwatch.pack import rules
from inferwatch.pack.rules import slo
from inferwatch.pack.thresholds import load_thresholds

promql_parser = pytest.importorskip("promql_parser")

REPO = Path(__file__).resolve().parents[2]
DAY = timedelta(days=1)


def groups() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in (rules.RULES_FILE, rules.ALERTS_FILE):
        out += yaml.safe_load((REPO / name).read_text())["groups"]
    return out


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * units[ch]
            number = ""
    return total


def ranges(node: Any) -> Iterator[tuple[str, timedelta]]:
    """(selector as written, range) of every range selector of a parsed expression."""
    kind = type(node).__name__
    if kind == "MatrixSelector":
        yield str(node.vector_selector), node.range
    elif kind == "Call":
        for arg in node.args:
            yield from ranges(arg)
    elif kind == "BinaryExpr":
        yield from ranges(node.lhs)
        yield from ranges(node.rhs)
    elif kind in ("AggregateExpr", "ParenExpr", "UnaryExpr", "SubqueryExpr"):
        yield from ranges(node.expr)


def recorded() -> set[str]:
    return {r["record"] for g in groups() for r in g["rules"] if "record" in r}


def is_raw(selector: str) -> bool:
    return selector.split("{")[0] not in recorded()


def test_no_group_faster_than_2m_reads_a_raw_series_over_a_day() -> None:
    seen = 0
    for group in groups():
        fast = seconds(group["interval"]) < 120
        for rule in group["rules"]:
            for selector, window in ranges(promql_parser.parse(rule["expr"])):
                seen += 1
                if fast and is_raw(selector):
                    assert window < DAY, (group["name"], rule.get("record"), selector, window)
    assert seen > 100  # the walk found the rules' range selectors


def test_the_long_slo_windows_read_only_records() -> None:
    (long,) = [g for g in groups() if g["name"] == slo.LONG_GROUP]
    assert seconds(long["interval"]) == slo.LONG_INTERVAL >= 120
    windows = [w for r in long["rules"] for w in ranges(promql_parser.parse(r["expr"]))]
    assert windows and all(not is_raw(sel) for sel, _ in windows), windows
    assert max(w for _, w in windows) >= timedelta(days=29)  # the 30-day budget is here


def test_no_slo_rule_reads_a_raw_series_twice_over_one_window() -> None:
    (fast,) = [g for g in groups() if g["name"] == slo.RECORD_GROUP]
    for rule in fast["rules"]:
        reads = Counter(
            (sel, w) for sel, w in ranges(promql_parser.parse(rule["expr"])) if is_raw(sel)
        )
        twice = {k: n for k, n in reads.items() if n > 1}
        assert not twice, (rule["record"], twice)


def test_a_double_read_is_caught() -> None:
    expr = "rate(a{le='1'}[5m]) / rate(a{le='1'}[5m])"
    reads = Counter(ranges(promql_parser.parse(expr)))
    assert max(reads.values()) == 2


def test_every_window_of_the_slos_is_recorded_once() -> None:
    t = load_thresholds()
    records = [r["record"] for g in groups() for r in g["rules"] if "record" in r]
    for w in slo.windows(t.slos):
        assert records.count(f"model:inferwatch_slo_errors:ratio_rate{w}") == 1, w
