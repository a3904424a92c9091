"""The report's "What-if advice, checked" section on a real Prometheus.

Two weeks backfilled with ``promtool tsdb create-blocks-from openmetrics`` (END is
Monday 2026-11-23 00:00 UTC): one llama.cpp worker ``llama-0`` and one vLLM worker
``vllm-0`` watched the whole time (``inferwatch_target_up``), and the gauges of
``advise --shadow-metrics`` as node_exporter's textfile collector serves them
(job ``node``), scraped every five minutes from a minute after the change on:

=======  ========  ======================  ======================================
change   worker    flag                    figures (predicted / measured)
=======  ========  ======================  ======================================
A  d-10  llama-0   max_num_seqs 2 -> 4     throughput 40 / 50; replaced by B
B  d-3   llama-0   max_num_seqs 4 -> 8     throughput 100 / 80, TTFT P50 0.5 / 0.4
                                           (error series written), TTFT P95 2.0 /
                                           NaN, queue 1.0 / (no measured series)
C  d-2   vllm-0    max_num_batched_tokens  throughput 50 / 50, queue 2 / 4 (no
                   2048 -> 4096            error series: the report computes it)
=======  ========  ======================  ======================================

The week's section lists B and C, not A (its change was the week before); the
errors B +25 % / +25 %, C 0 % / -50 %; the median absolute error of throughput over
B and C is 12.5 %. NaN and missing figures read as a dash, never break the report.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.promblocks import PromOnBlocks, create_blocks

from inferwatch.advise import shadow
from inferwatch.cli import main as cli_main
from inferwatch.report import whatif
from inferwatch.report.model import Period

DAY = 86400
END = calendar.timegm((2026, 11, 23, 0, 0, 0))
START = END - 14 * DAY
END_ISO = "2026-11-23T00:00:00Z"

pytestmark = pytest.mark.slow

#: (name, worker, flag, from, to, at, until, {figure: (predicted, measured, error)})
CHANGES = [
    (
        "A",
        "llama-0",
        "max_num_seqs",
        "2",
        "4",
        END - 10 * DAY,
        END - 3 * DAY,
        {"throughput": (40.0, 50.0, -0.2)},
    ),
    (
        "B",
        "llama-0",
        "max_num_seqs",
        "4",
        "8",
        END - 3 * DAY,
        END,
        {
            "throughput": (100.0, 80.0, 0.25),
            "ttft_p50": (0.5, 0.4, 0.25),
            "ttft_p95": (2.0, float("nan"), None),
            "queue": (1.0, None, None),
        },
    ),
    (
        "C",
        "vllm-0",
        "max_num_batched_tokens",
        "2048",
        "4096",
        END - 2 * DAY,
        END,
        {"throughput": (50.0, 50.0, None), "queue": (2.0, 4.0, None)},
    ),
]


def _num(v: float) -> str:
    return "NaN" if v != v else repr(v)


def _openmetrics() -> str:
    fams: dict[str, list[str]] = {"inferwatch_target_up": [], "inferwatch_worker_info": []}
    for worker, engine in (("llama-0", "llamacpp"), ("vllm-0", "vllm")):
        lab = f'instance="h:10127",job="inferwatch",worker="{worker}"'
        for t in range(START, END + 1, 300):
            fams["inferwatch_target_up"].append(f"inferwatch_target_up{{{lab}}} 1 {t}")
            fams["inferwatch_worker_info"].append(
                f'inferwatch_worker_info{{{lab},engine="{engine}",model="m-{worker}"}} 1 {t}'
            )
    for _, worker, flag, old, new, at, until, figures in CHANGES:
        base = (
            f'flag="{flag}",from="{old}",instance="gpu-host:9100",job="node",'
            f'to="{new}",worker="{worker}"'
        )
        for t in range(at + 60, until, 300):
            stamp = whatif.SERIES["at"]
            fams.setdefault(stamp, []).append(f"{stamp}{{{base}}} {at} {t}")
            for figure, (p, m, e) in figures.items():
                lab = f'{base},figure="{figure}"'
                for kind, v in (("predicted", p), ("measured", m), ("error", e)):
                    if v is not None:
                        name = whatif.SERIES[kind]
                        fams.setdefault(name, []).append(f"{name}{{{lab}}} {_num(v)} {t}")
    out = []
    for name, lines in fams.items():
        out.append(f"# TYPE {name} gauge")
        out += sorted(lines, key=lambda line: (line.rsplit(" ", 2)[0], int(line.rsplit(" ")[-1])))
    return "\n".join(out) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromOnBlocks]:
    tmp = tmp_path_factory.mktemp("whatif-tsdb")
    (tmp / "whatif.om").write_text(_openmetrics())
    data = create_blocks(tmp / "whatif.om", tmp / "data")
    server = PromOnBlocks(tmp_path_factory.mktemp("whatif-prom"), data)
    server.loaded("count(inferwatch_target_up)", END)
    yield server
    server.stop()


def _report(prom: PromOnBlocks, out: Path, *extra: str) -> tuple[str, str]:
    args = ["report", "--quiet", "--prometheus-url", prom.url, "--output", str(out), *extra]
    assert cli_main(args) == 0
    return (out / "report.txt").read_text(), (out / "report.html").read_text()


def test_the_weeks_changes_with_predicted_measured_and_error(
    prom: PromOnBlocks, tmp_path: Path
) -> None:
    text, page = _report(prom, tmp_path / "out", "--end", END_ISO)
    assert "WHAT-IF ADVICE, CHECKED" in text and "What-if advice, checked" in page
    section = text.split("WHAT-IF ADVICE, CHECKED", 1)[1].split("ALERTS", 1)[0]
    lines = [line.split() for line in section.splitlines() if line.strip()]
    # A (the week before) is not listed; B then C, in time order
    assert "2 -> 4" not in section
    assert section.index("max_num_seqs 4 -> 8") < section.index("max_num_batched_tokens 2048")
    assert "2026-11-20 00:00 UTC" in section and "2026-11-21 00:00 UTC" in section

    b_throughput = next(ln for ln in lines if "llama-0" in ln and "Throughput" in ln)
    assert b_throughput[-3:] == ["100.0", "80.0", "+25%"], b_throughput
    assert next(ln for ln in lines if ln[:2] == ["TTFT", "P50"])[-5:] == [
        "500",
        "ms",
        "400",
        "ms",
        "+25%",
    ]
    # NaN measured and a missing measured series: a dash, no error
    p95 = next(ln for ln in lines if ln[:2] == ["TTFT", "P95"])
    assert p95[-4:] == ["2.00", "s", "–", "–"], p95
    b_queue = next(ln for ln in lines if ln[:2] == ["Queue", "(requests)"])
    assert b_queue[-3:] == ["1.0", "–", "–"], b_queue
    # C: no error series, computed from predicted and measured
    c_rows = section.split("max_num_batched_tokens", 1)[1]
    assert "50.0" in c_rows and "+0%" in c_rows
    c_queue = next(ln for ln in c_rows.splitlines() if "Queue" in ln).split()
    assert c_queue[-3:] == ["2.0", "4.0", "-50%"], c_queue
    # the one-line summary: median |error| per figure over B and C
    assert (
        "Median absolute error over 2 flag changes: Throughput (tokens/s) 12% (2), "
        "Queue (requests) 50% (1), TTFT P50 25% (1)." in section
    ), section
    assert "max_num_seqs 4 -&gt; 8" in page and "+25%" in page


def test_absent_without_shadow_series_or_a_change_in_the_period(
    prom: PromOnBlocks, tmp_path: Path
) -> None:
    # the first days: no shadow series at all
    text, page = _report(prom, tmp_path / "none", "--end", "2026-11-11T00:00:00Z", "--days", "1")
    assert "WHAT-IF" not in text and "What-if advice" not in page
    # a day when change A's series are served but A happened before it
    text, page = _report(prom, tmp_path / "old", "--end", "2026-11-19T00:00:00Z", "--days", "1")
    assert "WHAT-IF" not in text and "What-if advice" not in page


def test_figures_agree_with_the_shadow_and_a_change_without_from() -> None:
    assert whatif.FIGURES == shadow.FIGURES
    period = Period(END, 7)
    base = {"worker": "w", "flag": "max_num_seqs", "to": "16"}
    samples = [
        ({**base, "kind": "at"}, float(END - DAY)),
        ({**base, "kind": "predicted", "figure": "throughput"}, 10.0),
        ({**base, "kind": "measured", "figure": "throughput"}, 0.0),
        ({**base, "kind": "predicted", "figure": "nonsense"}, 1.0),
        ({**base, "kind": "measured", "figure": "queue"}, float("inf")),
    ]
    (change,) = whatif.changes_from(samples, period)
    assert change.old == "" and change.new == "16"
    (f,) = change.figures  # the unknown figure and the infinite value are left out
    assert (f.predicted, f.measured, f.error) == (10.0, 0.0, None)  # no division by zero
    section = whatif.section([change])
    assert section is not None and section.median_abs_error == {}
