"""Issue 23 item 4: the weekly report's four fixes, each held by a test that failed before.

1. ``--end now`` (days that do not start at midnight): a day is named by the
   end of its 24 hours, so Tuesday morning's data no longer reads "Mon 30 Nov";
2. the GPU band table shows the 30-60 % ("low") band the CSV already had;
3. ``--days 1`` reads "1 day" and never "this week";
4. a worker whose engine has no finished-requests counter (llama.cpp) is found
   through ``inferwatch_target_up`` / ``inferwatch_worker_info`` (a real
   Prometheus on promtool-built blocks).
"""

from __future__ import annotations

import calendar
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.support.proc import PROMTOOL, Process, free_port, http_get, require_binary, wait_until
from tests.support.report_raw import steady_gpu, steady_worker

from inferwatch.cli import main as cli_main
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report import render
from inferwatch.report.build import build_report
from inferwatch.report.model import (
    Hourly,
    Period,
    RawData,
)

DAY = 86400
# Tuesday 1 December 2026, 10:00 UTC: what `--end now` gives on a Tuesday morning
TUESDAY_10 = calendar.timegm((2026, 12, 1, 10, 0, 0))
MONDAY_MIDNIGHT = calendar.timegm((2026, 11, 23, 0, 0, 0))


def _raw(period: Period, band_daily: dict[str, tuple[float, ...]] | None = None) -> RawData:
    n = 2 * period.days
    buckets = ((0.1, 50.0), (0.25, 99.5), (2.5, 100.0), (math.inf, 100.0))
    worker = steady_worker("w0", n, {"ttft": (buckets,) * n})
    gpu = steady_gpu(n, band_daily)
    return RawData(period, (worker,), (gpu,), (), Hourly((), (), "", (), ()), ())


def _text_and_html(period: Period, **kw: dict[str, tuple[float, ...]]) -> tuple[str, str]:
    report = build_report(_raw(period, **kw), load_thresholds())
    return render.text(report), render.html(report, [], lambda c: c.name)


# ---------------------------------------------------------------------- 1. day names


def test_days_up_to_now_are_named_by_their_end() -> None:
    text, page = _text_and_html(Period(TUESDAY_10, 7))
    # the last 24 hours run Monday 10:00 -> Tuesday 10:00: not "Mon 30 Nov"
    assert "to Tue 1 Dec 10:00" in text and "to Tue 1 Dec 10:00" in page
    day_rows = [line.split("|")[0].strip() for line in text.splitlines() if "|" in line]
    assert "Mon 30 Nov" not in day_rows
    assert "2026-11-24 10:00 UTC – 2026-12-01 10:00 UTC" in render.title(
        build_report(_raw(Period(TUESDAY_10, 7)), load_thresholds())
    )
    assert "24-hour windows" in text


def test_calendar_days_keep_their_names() -> None:
    text, _ = _text_and_html(Period(MONDAY_MIDNIGHT, 7))
    assert "Sun 22 Nov" in text and "to " not in text.split("WHAT TO LOOK AT")[1][:2000]
    assert "Days are UTC days." in text


# ---------------------------------------------------------------------- 2. the low band


def test_gpu_table_shows_the_band_between_waste_and_healthy() -> None:
    n = 14
    bands = {"waste": (0.1,) * n, "healthy": (0.2,) * n, "scale_review": (0.0,) * n}
    text, page = _text_and_html(Period(MONDAY_MIDNIGHT, 7), band_daily=bands)
    assert "Low 30-60%" in page
    gpus = text.split("GPUS")[1].split("ALERTS")[0]
    head = next(line for line in gpus.splitlines() if "waste" in line)
    columns = [c.strip() for c in head.split("|")] if "|" in head else head.split()
    assert "low" in columns
    # 1 - 0.1 - 0.2 - 0 = 70 % of the time between 30 % and 60 %
    assert re.search(r"\b70%", gpus)


# ---------------------------------------------------------------------- 3. --days 1


def test_one_day_reads_as_one_day() -> None:
    report = build_report(_raw(Period(MONDAY_MIDNIGHT, 1)), load_thresholds())
    text, page = render.text(report), render.html(report, [], lambda c: c.name)
    findings = [(f.title, f.evidence, f.action) for f in report.findings]
    for out in (text, page.replace("&#x27;", "'")):
        assert "1 days" not in out
        for sentence in (s for f in findings for s in f):
            out = out.replace(sentence, "")  # report/insights.py's sentences: not this module's
        assert "week" not in out.lower().replace("weekly report", "")
    assert render.title(report) == "inferwatch weekly report: Sun 22 Nov 2026"
    assert "1 day to 2026-11-23 00:00 UTC, compared with the day before" in text
    assert "This period" in page and "Previous period" in page


# ---------------------------------------------------------------------- 4. llama.cpp


def _openmetrics(path: Path) -> None:
    """Two days of a llama.cpp worker: no finished-requests counter, no GPU series."""
    end = MONDAY_MIDNIGHT
    lines = []
    lab = 'job="inferwatch",instance="h:10127",worker="llama-0"'
    info = lab + ',engine="llamacpp",model="qwen-0.5b",pid="1",version=""'
    series = 'engine="llamacpp",model="qwen-0.5b",' + lab
    tokens = 0
    for t in range(end - 2 * DAY, end + 1, 300):
        tokens += 1500
        lines.append(f"inferwatch_target_up{{{lab}}} 1 {t}")
        lines.append(f"inferwatch_worker_info{{{info}}} 1 {t}")
        lines.append(f"inferwatch_prompt_tokens_total{{{series}}} {tokens} {t}")
        lines.append(f"inferwatch_queue_depth{{{series}}} 2 {t}")
    path.write_text("\n".join(lines) + "\n# EOF\n")


@pytest.fixture(scope="module")
def llama_prometheus(tmp_path_factory: pytest.TempPathFactory) -> object:
    promtool = require_binary(PROMTOOL, "promtool")
    binary = require_binary(shutil.which("prometheus"), "prometheus")
    tmp = tmp_path_factory.mktemp("llama")
    data = tmp / "data"
    data.mkdir()
    _openmetrics(tmp / "llama.om")
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "-q",
            str(tmp / "llama.om"),
            str(data),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (tmp / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    proc = Process(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp / "prometheus.log",
    )
    url = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: (
            http_get(
                f"{url}/api/v1/query?query=count(inferwatch_target_up)&time={MONDAY_MIDNIGHT}",
                timeout=2,
            )[0]
            == 200
            and json.loads(
                http_get(
                    f"{url}/api/v1/query?query=count(inferwatch_target_up)&time={MONDAY_MIDNIGHT}"
                )[1]
            )["data"]["result"]
        ),
        timeout=90,
        message="prometheus with the llama.cpp blocks",
    )
    yield url
    proc.stop()


def test_a_worker_without_a_finished_requests_counter_is_in_the_report(
    llama_prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = cli_main(
        [
            "report",
            "--end",
            "2026-11-23T00:00:00Z",
            "--days",
            "1",
            "--quiet",
            "--prometheus-url",
            llama_prometheus,
            "--output",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    text = (out / "report.txt").read_text()
    assert "MODEL qwen-0.5b" in text and "llama-0" in text
    assert "No worker series in this period" not in text
    rows = (out / "daily.csv").read_text().splitlines()
    tokens = [r for r in rows if ",llama-0," in r and ",prompt_tokens," in r]
    # 288 five-minute steps of 1500 tokens in the day
    assert any(r.endswith(",432000.0") for r in tokens), tokens
