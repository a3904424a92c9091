"""The report's leg of the agreement, through a real Prometheus.

tests/unit/test_loops_agree.py gives the report the figures its queries would return;
this test runs the queries. Each scenario's virtual-time run (tests/support/
scenarios.py) is stored as the series an agent scraped every second would have
left (``promtool tsdb create-blocks-from openmetrics``), a real Prometheus opens
the blocks, and ``report.query.collect`` with ``build_report`` must name the
loops the alerts raise on that scenario (``expected_loops``). One Prometheus per
scenario: the report's waste finding lists every GPU in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import scenarios as S
from tests.support.promblocks import PromOnBlocks, create_blocks

from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report.build import build_report

pytestmark = pytest.mark.slow

T = load_thresholds()


def blocks(tmp: Path, scenario: str) -> Path:
    om = tmp / f"{scenario}.om"
    om.write_text(S.openmetrics(S.run(scenario)))
    return create_blocks(om, tmp / f"data-{scenario}", timeout=120)


@pytest.mark.parametrize("scenario", list(S.SCENARIOS))
def test_the_report_from_prometheus_names_the_loops_the_alerts_raise(
    tmp_path: Path, scenario: str
) -> None:
    prom = PromOnBlocks(tmp_path, blocks(tmp_path, scenario))
    try:
        raw = prom.collect(S.REPORT_END, 1, T)
    finally:
        prom.stop()
    report = build_report(raw, T)
    found = {f.id for f in report.findings if f.id}
    assert found == S.expected_loops(scenario), [
        (f.id, f.title, f.evidence) for f in report.findings
    ]
