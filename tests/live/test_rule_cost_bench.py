"""bench/bench_rule_cost.py end to end: its quick mode with the real promtool and Prometheus.

The bench's figures are never asserted (performance lives in bench/); this holds that one run
backfills, measures our rule groups and both anchors (Sloth-style, Pyrra-style), and prints them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.support import benchrun

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_mode_measures_our_rules_and_both_anchors(tmp_path: Path) -> None:
    if not (shutil.which("promtool") and shutil.which("prometheus")):
        pytest.skip("promtool and prometheus are not installed (apt-get install prometheus)")
    out = tmp_path / "cost.json"
    res = benchrun.run_bench(
        "bench_rule_cost.py", "--quick", "--json", str(out), "--tmp", str(tmp_path)
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(out.read_text())
    (size,) = doc["results"]
    assert size["workers"] == 4
    assert set(size["sets"]) == {"inferwatch", "sloth-style", "pyrra-style"}
    for name, s in size["sets"].items():
        total = sum(g["samples_per_eval"] for g in s["groups"])
        assert total > 0, name
    ours = {g["group"]: g for g in size["sets"]["inferwatch"]["groups"]}
    # every group of the committed rule files, not only the SLO ones
    assert {"inferwatch.rules", "inferwatch-slo.rules", "inferwatch-slo.alerts"} <= set(ours)
    assert ours["inferwatch-slo.rules"]["samples_per_eval"] > 0
    # Sloth's period ratio reads its 5-minute record over the window: that history was backfilled
    sloth = {g["group"]: g for g in size["sets"]["sloth-style"]["groups"]}
    period = [
        r
        for r in sloth["sloth-slo-sli-recordings-inference-ttft"]["rules"]
        if r["rule"] == "slo:sli_error:ratio_rate30d"
    ]
    assert period and period[0]["samples"] > 0
    # the long-window ratios were compared with the exact ones, for every SLO
    assert {(r["slo"], r["window"]) for r in size["accuracy"]} >= {
        ("ttft", "30d"),
        ("tpot", "30d"),
        ("availability", "30d"),
    }
    assert all(0 < v < 1 for r in size["accuracy"] for v in r["exact"].values())
    assert {p["dashboard"] for p in size["dashboards"]} == {
        p.stem for p in (REPO / "dashboards").glob("*.json")
    }
    for name in ("inferwatch", "sloth-style", "pyrra-style", "TOTAL", "dashboards"):
        assert name in res.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--workers", "4,x"), "--workers"),
        (("--workers", "0"), "--workers"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: tuple[str, ...], says: str) -> None:
    res = benchrun.run_bench("bench_rule_cost.py", *args, timeout=60)
    assert res.returncode == 2
    assert says in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_rules_directory_without_rule_files_is_refused(tmp_path: Path) -> None:
    if not (shutil.which("promtool") and shutil.which("prometheus")):
        pytest.skip("promtool and prometheus are not installed (apt-get install prometheus)")
    res = benchrun.run_bench("bench_rule_cost.py", "--rules", str(tmp_path), "--quick", timeout=60)
    assert res.returncode == 2
    assert "--rules" in res.stderr and "*.yaml" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
