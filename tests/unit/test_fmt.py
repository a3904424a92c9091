"""pack.fmt writes every number, and a threshold reaches each reader one way (issue 41)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferwatch.demo.demo_cmd import lines_caption
from inferwatch.pack import fmt
from inferwatch.pack import loops as L
from inferwatch.pack.rules.catalogue import alerts
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report.summary import band_ranges
from inferwatch.stats import Over

PACKAGE = Path(__file__).resolve().parents[2] / "agent" / "inferwatch"


def test_lines_are_written_as_the_user_wrote_them() -> None:
    assert fmt.pct(0.3) == "30%"
    assert fmt.pct(0.925) == "92.5%"
    assert fmt.num(600.0) == "600"
    assert fmt.num(0.3) == "0.3"
    assert fmt.lit(1e6 / 3600) == "277.777777778"
    assert fmt.dur(1800) == "30m"
    assert fmt.secs(2.0) == "2s"
    assert fmt.secs(0.1) == "100ms"
    assert fmt.spaced_secs(0.25) == "0.25 s"
    assert fmt.quantile(0.99) == "P99"
    assert fmt.quantile(0.999) == "P99.9"


def test_measurements_are_rounded_and_a_missing_one_is_a_dash() -> None:
    assert fmt.percent(0.456) == "46%"
    assert fmt.percent(0.4567, 1) == "45.7%"
    assert fmt.percent(None) == fmt.DASH
    assert fmt.percent(None, none="-") == "-"
    assert fmt.percent(-0.12, sign=True) == "-12%"
    assert fmt.percent(0.12, sign=True) == "+12%"
    assert fmt.points(0.12) == "12 pts"
    assert fmt.points(0.12, sign=True) == "+12 pts"
    assert fmt.number(3.456, 2) == "3.46"
    assert fmt.seconds(0.0095) == "9.5 ms"
    assert fmt.seconds(1.75) == "1.75 s"
    assert fmt.seconds(Over(60.0)) == "over 60.0 s"
    assert fmt.count(1_234_567) == "1.23 M"
    assert fmt.duration(7200) == "2h 00m"
    assert fmt.age(5400) == "90 min"
    assert fmt.clock(125) == "2m05s"
    assert fmt.gib(80 * 1024**3) == "80.0 GiB"
    assert fmt.gib(80 * 1024**3, 2) == "80.00 GiB"
    assert fmt.money(1234.5, "USD") == "1,234.50 USD"
    assert fmt.money(1234.5, None) == "1,234.5"
    assert fmt.quantity(0.3, "ratio") == "30%"
    assert fmt.quantity(0.25, "s") == "250 ms"
    assert fmt.band(None, 0.3) == "< 30%"
    assert fmt.band(0.85, None, gap="") == ">85%"
    assert fmt.band(0.3, 0.6) == "30-60%"
    with pytest.raises(ValueError):
        fmt.band(None, None)


def test_a_line_is_read_from_the_thresholds_it_is_handed(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("gpu_utilization:\n  waste_below: 0.25\n  scale_review_above: 0.9\n")
    t = load_thresholds(mine)
    assert L.WASTE.key == "gpu_utilization.waste_below"
    assert (L.WASTE.of(t), L.SCALE_REVIEW.of(t)) == (0.25, 0.9)
    assert L.WASTE.past(0.2, t) and not L.WASTE.past(0.25, t) and not L.WASTE.past(None, t)
    assert L.SCALE_REVIEW.past(0.95, t) and not L.SCALE_REVIEW.past(0.9, t)
    assert L.utilization_lines(t) == (0.25, 0.6, 0.85, 0.9)
    # the one object reaches the rules, the report and the demo alike
    (under,) = [a for a in alerts(t) if a.name == "InferenceGPUUnderutilized"]
    assert under.expr.endswith(" < 0.25")
    assert band_ranges(t) == {
        "waste": "< 25%",
        "low": "25-60%",
        "healthy": "60-85%",
        "scale_review": "> 90%",
    }
    assert "GPU util < 25% waste, > 90% scale review" in lines_caption(t)


def files_naming(root: Path, word: str) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in [*root.rglob("*.py"), *root.rglob("*.j2")]
        if word in p.read_text(encoding="utf-8")
    )


def test_the_file_counter_finds_a_planted_reader(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = t.gpu_utilization.waste_below\n")
    (tmp_path / "b.md.j2").write_text("{{ g.waste_below | pct }}\n")
    (tmp_path / "c.py").write_text("x = L.WASTE.of(t)\n")
    assert files_naming(tmp_path, "waste_below") == ["a.py", "b.md.j2"]


def test_the_waste_line_is_named_in_few_files() -> None:
    # its definition (thresholds.py), its owner (pack/loops.py) and the runbook page that
    # tells users which key to change; every other reader asks pack.loops.WASTE
    found = files_naming(PACKAGE, "waste_below")
    assert len(found) <= 6, found


#: an f-string that turns a ratio into percent by hand: ``{x * 100:.0f}%``, ``{x:.0%}``
INLINE_PERCENT = re.compile(r"\*\s*100\s*:[^}]*\}%|:[+]?\.\d+%\}")


def test_the_inline_percent_finder_finds_planted_formats() -> None:
    source = 'a = f"{x * 100:.0f}%"\nb = f"{x:.0%}"\nc = f"{fmt.percent(x)}"\nd = x * 100\n'
    assert [n for n, line in enumerate(source.splitlines(), 1) if INLINE_PERCENT.search(line)] == [
        1,
        2,
    ]


@pytest.mark.parametrize(
    "where",
    [
        "report",
        "demo",
        "pack/rules",
        "pack/runbooks",
        "pack/dashboards/common.py",
        "pack/dashboards/weekly.py",
        "pack/dashboards/cost_row.py",
    ],
)
def test_percent_is_written_by_pack_fmt_only(where: str) -> None:
    root = PACKAGE / where
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    hits = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if INLINE_PERCENT.search(line)
    ]
    assert not hits, hits
