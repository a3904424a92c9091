"""bench/bench_fleet_history.py end to end: its quick mode with the real VictoriaMetrics and vmalert.

The bench's figures are never asserted (performance lives in bench/); this holds that one run
imports the history, replays the recorded history the long windows read at each group's own
interval, runs vmalert over it with the committed rules without an error, and reads each
group's evaluations from vmalert's own metrics.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.support import benchrun


@pytest.mark.slow
def test_quick_mode_runs_vmalert_over_the_replayed_history(tmp_path: Path) -> None:
    if not (shutil.which("victoria-metrics") and shutil.which("vmalert")):
        pytest.skip(
            "victoria-metrics and vmalert are not installed (apt-get install victoria-metrics)"
        )
    out = tmp_path / "fleet.json"
    res = benchrun.run_bench(
        "bench_fleet_history.py", "--quick", "--json", str(out), "--tmp", str(tmp_path)
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (size,) = json.loads(out.read_text())["results"]
    assert size["workers"] == 2
    assert size["rule_errors"] == []
    groups = size["groups"]
    # every group of the committed rule files, each seen by its interval
    assert {"inferwatch.rules", "inferwatch-slo.rules", "inferwatch-slo-long.rules"} <= set(groups)
    assert groups["inferwatch-slo-long.rules"]["interval_s"] == 150
    assert groups["inferwatch-slo.rules"]["evaluations"] >= 1
    assert groups["inferwatch-slo.rules"]["mean_s"] > 0
    # the day's 2m30s averages were replayed at the long group's interval: 576 a day (vmalert
    # 1.79's replay steps by -datasource.queryStep, 5m by default: 288 without the flag)
    for name, n in size["long_windows"]["samples_in_window"].items():
        assert n >= 576, name
    assert "projection to 1000 workers" in res.stdout


def test_bad_flag_is_one_line_and_exit_2() -> None:
    res = benchrun.run_bench("bench_fleet_history.py", "--days", "0", timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip() == "--days: 1 to 90 expected (the store keeps 100 d), got 0"
