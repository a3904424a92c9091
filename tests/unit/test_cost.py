"""Cost: the pricing section, the money rules (promtool) and the report's copy of the rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.support.proc import REPO, cli, promtool

from inferwatch.errors import ConfigError
from inferwatch.pack import rules
from inferwatch.pack.names import cost_names, names
from inferwatch.pack.rules import cost
from inferwatch.pack.thresholds import Thresholds, load_thresholds

DATA = REPO / "tests" / "data" / "cost"
PRICING = DATA / "pricing.yaml"


def _rules(t: object) -> dict[str, str]:
    return {
        r["record"]: r["expr"]
        for g in yaml.safe_load(rules.generate(t)[rules.RULES_FILE])["groups"]  # type: ignore[arg-type]
        for r in g["rules"]
    }


def priced_case(tmp_path: Path, t: Thresholds) -> subprocess.CompletedProcess[str]:
    """promtool's run of tests/data/pricing/priced.test.yaml over the recording rules of ``t``."""
    (tmp_path / "rules.yaml").write_text(rules.generate(t)[rules.RULES_FILE])
    shutil.copy(DATA / "priced.test.yaml", tmp_path / "priced.test.yaml")
    return promtool("test", "rules", str(tmp_path / "priced.test.yaml"))


def test_money_rules_pass_their_promtool_case(tmp_path: Path) -> None:
    t = load_thresholds(str(PRICING))
    result = priced_case(tmp_path, t)
    assert result.returncode == 0, result.stdout + result.stderr


def test_money_rules_fail_with_another_price(tmp_path: Path) -> None:
    """The priced case can fail: one price changed and promtool says FAILED."""
    other = tmp_path / "pricing.yaml"
    other.write_text(PRICING.read_text().replace("per_gpu_hour: 2.5", "per_gpu_hour: 3"))
    result = priced_case(tmp_path, load_thresholds(str(other)))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_without_prices_only_gpu_hours_are_recorded() -> None:
    t = load_thresholds()
    c = cost_names(t)
    recorded = _rules(t)
    assert c.gpu_states in recorded and c.model_gpu_hours_per_mtok in recorded
    for name in (c.gpu_price, c.gpu_cost, c.model_cost, c.cluster_cost, c.model_cost_per_mtok):
        assert name not in recorded
    priced = _rules(load_thresholds(str(PRICING)))
    assert c.model_cost_per_mtok in priced and 'currency", "EUR"' in priced[c.gpu_price]


def test_the_report_classifies_with_the_rules_utilization() -> None:
    """The report's raw-series copy of gpu:...:avg5m is the rule's own expression."""
    t = load_thresholds()
    assert cost.raw_util_expr(t, t.pack.agent_selector) == _rules(t)[names(t).gpu_util]


def test_instance_prices_become_per_gpu_prices() -> None:
    p = load_thresholds(str(PRICING)).pricing
    assert p.currency == "EUR"
    assert [(x.instance_type, x.gpu_name, x.per_gpu_hour) for x in p.prices] == [
        ("p5.48xlarge", None, 10.0),
        (None, "NVIDIA H100.*", 2.5),
        (None, "NVIDIA A10G", 1.0),
    ]


BAD = [
    ("pricing: 3", "pricing", "a mapping"),
    ("pricing: {prices: [{gpu_name: H100, per_gpu_hour: 2}]}", "pricing.currency", "currency"),
    ("pricing: {currency: usd, prices: []}", "pricing.currency", "three-letter"),
    ("pricing: {currency: USD, prices: {a: 1}}", "pricing.prices", "a list"),
    ("pricing: {currency: USD, prices: [{per_gpu_hour: 2}]}", "pricing.prices[0]", "exactly one"),
    (
        "pricing: {currency: USD, prices: [{gpu_name: H100, per_gpu_hour: -1}]}",
        "pricing.prices[0].per_gpu_hour",
        "greater than 0",
    ),
    (
        "pricing: {currency: USD, prices: [{gpu_name: 'H100(', per_gpu_hour: 1}]}",
        "pricing.prices[0].gpu_name",
        "regular expression",
    ),
    (
        "pricing: {currency: USD, prices: [{gpu_name: '(?!A)', per_gpu_hour: 1}]}",
        "pricing.prices[0].gpu_name",
        "RE2",
    ),
    (
        "pricing: {currency: USD, prices: [{instance_type: p5, per_instance_hour: 9}]}",
        "pricing.prices[0].gpus",
        "GPU count",
    ),
    (
        "pricing: {currency: USD, prices: [{instance_type: p5, per_gpu_hour: 1, gpus: 8}]}",
        "pricing.prices[0]",
        "not both",
    ),
    (
        "pricing: {currency: USD, prices: [{gpu_name: H100, per_gpu_hour: 1, gpus: 8}]}",
        "pricing.prices[0].gpus",
        "known keys",
    ),
    ("pricing: {currency: USD, instance_type_label: 'a-b'}", "pricing.instance_type_label", ""),
    ("pricing: {currency: USD, price: []}", "pricing.price", "known keys"),
]


@pytest.mark.parametrize(("text", "key", "expected"), BAD)
def test_bad_pricing_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, key: str, expected: str
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_thresholds(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: {key}: expected "), message
    assert expected in message and "\n" not in message


def test_generate_exits_2_on_bad_pricing(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("pricing:\n  currency: USD\n  prices:\n    - gpu_name: H100\n")
    result = cli("generate", "--thresholds", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pricing.prices[0].per_gpu_hour" in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_priced_overview_passes_the_dashboard_lint() -> None:
    pytest.importorskip("promql_parser")
    from inferwatch.pack.dashboards import common, overview
    from inferwatch.pack.dashboards import lint as dashlint

    t = load_thresholds(str(PRICING))
    board = common.build(overview.DASHBOARD, t)
    for name, check in dashlint.RULES.items():
        assert check(board) == [], name
    panels = {panel["title"]: panel for panel in board["panels"] if panel.get("type") != "row"}
    money = panels["Cost per million generated tokens (EUR)"]
    assert money["fieldConfig"]["defaults"]["unit"] == "currencyEUR"
    assert "Money on idle GPUs (EUR, time range)" in panels
    unpriced = {
        panel["title"] for panel in common.build(overview.DASHBOARD, load_thresholds())["panels"]
    }
    assert "GPU-hours per million generated tokens" in unpriced
    assert not any("EUR" in title for title in unpriced)


def test_report_section_without_attribution_says_why() -> None:
    from inferwatch.report.cost import RawCost, cost_section
    from inferwatch.report.model import Period

    t = load_thresholds()
    period = Period(end=1_795_392_000.0, days=7)
    day = (24.0,) * 14
    raw = RawCost(None, {("", "unallocated"): day}, {}, {}, {}, {})
    section = cost_section(raw, period, t)
    assert section is not None and not section.wasters and section.models[0].model == ""
    assert "inferwatch_worker_gpu_info" in section.note
    assert section.total.hours["unallocated"].current == 168.0
    empty = RawCost(None, {}, {}, {}, {}, {})
    assert cost_section(empty, period, t) is None
