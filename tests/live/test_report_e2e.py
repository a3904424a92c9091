"""The weekly report against a real Prometheus holding two generated weeks.

The TSDB is built once per module with ``promtool tsdb create-blocks-from
openmetrics`` from ``tests/support/report_fixture.py`` (which also computes the truth), a
real Prometheus opens it, and ``inferwatch report`` runs through the real CLI
entry point. Mail goes to aiosmtpd on loopback; the HTML is opened in headless
Chromium.

Tolerances, and why:
- counters, latency quantiles, SLO attainment, VRAM and queue peaks: exact
  (relative 1e-9). Every day window ends on a sample, and Prometheus 2.42
  includes both ends of a range, so ``increase(x[1d])`` is the exact counter
  difference and ``max_over_time`` sees every sample of the day.
- utilization mean and percentiles: between the values computed with and
  without the sample on the window's start boundary (backends differ on
  whether a range includes it), plus 1e-9.
- band shares: 1/1440 plus 1e-9, one 1-minute subquery point at the boundary.
- time over capacity: 60 s, one subquery step.
- alert firing time: 60 s per firing, one ``count_over_time`` step at the end
  of a firing; firing counts exact.
"""

from __future__ import annotations

import csv
import email
import email.policy
import math
import re
import shlex
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from tests.support import report_fixture as fx
from tests.support.browser import Headless
from tests.support.proc import (
    PROMTOOL,
    REPO,
    free_port,
    require_binary,
)
from tests.support.promblocks import PromOnBlocks
from tests.support.tls import self_signed_cert

from inferwatch.cli import main as cli_main
from inferwatch.report.query import count_steps

OPENSSL = shutil.which("openssl")
END_ISO = "2026-11-23T00:00:00Z"
ARTIFACTS = REPO / "tests" / "artifacts" / "report"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning"),
]


@pytest.fixture(scope="module")
def tsdb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, fx.Truth]:
    promtool = require_binary(PROMTOOL, "promtool")
    return fx.build_tsdb(tmp_path_factory.mktemp("tsdb"), promtool)


@pytest.fixture(scope="module")
def prom(
    tsdb: tuple[Path, fx.Truth], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PromOnBlocks]:
    server = PromOnBlocks(tmp_path_factory.mktemp("prom"), tsdb[0])
    # The blocks are readable once a query over the whole span answers.
    server.loaded("count(inferwatch_gpu_utilization_ratio)", fx.END)
    yield server
    server.stop()


def run_report(*args: str) -> int:
    return cli_main(["report", "--end", END_ISO, "--quiet", *args])


@pytest.fixture(scope="module")
def output(prom: PromOnBlocks, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "out"
    assert run_report("--prometheus-url", prom.url, "--output", str(out)) == 0
    return out


def read_csv(path: Path) -> dict[tuple[str, str, str, str, str], float]:
    """(date, scope, worker or gpu uuid, model, metric) -> value."""
    out = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            who = row["uuid"] if row["scope"] == "gpu" else row["worker"]
            key = (row["date"], row["scope"], who, row["model"], row["metric"])
            assert key not in out, f"duplicate CSV row {key}"
            out[key] = float(row["value"])
    return out


def dates() -> list[str]:
    import datetime as dt

    return [
        dt.datetime.fromtimestamp(fx.day_start(d), dt.timezone.utc).strftime("%Y-%m-%d")
        for d in range(14)
    ]


# ----------------------------------------------------------------------------- CSV


def test_csv_counters_and_latency_match_the_generated_truth(
    output: Path, tsdb: tuple[Path, fx.Truth]
) -> None:
    truth = tsdb[1]
    rows = read_csv(output / "daily.csv")
    days = dates()
    checked = 0
    for model, worker, _engine, _instance in fx.WORKERS:
        for d, day in enumerate(days):
            for metric, expected in (
                ("requests", truth.requests[worker][d]),
                ("prompt_tokens", truth.prompt_tokens[worker][d]),
                ("generation_tokens", truth.generation_tokens[worker][d]),
            ):
                got = rows[(day, "worker", worker, model, metric)]
                assert got == pytest.approx(expected, rel=1e-9), (worker, day, metric)
                checked += 1
            for name, bounds in (("ttft", fx.TTFT_LE), ("tpot", fx.TPOT_LE), ("e2e", fx.E2E_LE)):
                if name not in truth.buckets[worker]:
                    assert (day, "worker", worker, model, f"{name}_p99_seconds") not in rows
                    continue
                counts = truth.buckets[worker][name][d]
                for q in (0.5, 0.95, 0.99):
                    got = rows[(day, "worker", worker, model, f"{name}_p{q * 100:g}_seconds")]
                    assert got == pytest.approx(
                        fx.histogram_quantile(q, counts, bounds), rel=1e-9
                    ), (worker, day, name, q)
                    checked += 1
                slo = {"ttft": 2.0, "tpot": 0.1}.get(name)
                if slo is not None:
                    got = rows[(day, "worker", worker, model, f"{name}_slo_attainment_ratio")]
                    assert got == pytest.approx(fx.share_within(slo, counts, bounds), rel=1e-9)
    assert checked == 3 * 14 * 3 + (2 * 3 + 2) * 3 * 14  # every figure of every day


def test_ttft_p99_rises_on_the_fifth_day(output: Path) -> None:
    rows = read_csv(output / "daily.csv")
    days = dates()[7:]
    p99 = [rows[(day, "model", "", "llama-8b", "ttft_p99_seconds")] for day in days]
    assert all(v < 2.0 for v in p99[:4]), p99
    assert all(v >= 2.5 for v in p99[4:]), p99


def test_model_rows_aggregate_their_workers(output: Path, tsdb: tuple[Path, fx.Truth]) -> None:
    truth = tsdb[1]
    rows = read_csv(output / "daily.csv")
    for d, day in enumerate(dates()):
        expected = truth.requests["vllm-0"][d] + truth.requests["vllm-1"][d]
        assert rows[(day, "model", "", "llama-8b", "requests")] == pytest.approx(expected)
        merged = [
            a + b
            for a, b in zip(
                truth.buckets["vllm-0"]["ttft"][d], truth.buckets["vllm-1"]["ttft"][d], strict=True
            )
        ]
        assert rows[(day, "model", "", "llama-8b", "ttft_p95_seconds")] == pytest.approx(
            fx.histogram_quantile(0.95, merged, fx.TTFT_LE), rel=1e-9
        )


def test_csv_queue_and_capacity(output: Path, tsdb: tuple[Path, fx.Truth]) -> None:
    truth = tsdb[1]
    rows = read_csv(output / "daily.csv")
    for model, worker, _e, _i in fx.WORKERS:
        for d, day in enumerate(dates()):
            assert (
                rows[(day, "worker", worker, model, "queue_depth_peak")]
                == truth.queue_peak[worker][d]
            )
            key = (day, "worker", worker, model, "queue_over_capacity_seconds")
            if worker in truth.over_capacity_seconds:
                assert abs(rows[key] - truth.over_capacity_seconds[worker][d]) <= 60
            else:
                assert key not in rows  # capacity unknown: no row, never a zero
    assert truth.over_capacity_seconds["vllm-0"][11] == 7200


def _util_bounds(
    samples: list[tuple[int, float]], start: int, end: int, stat: str
) -> tuple[float, float]:
    def value(vals: list[float]) -> float:
        if stat == "mean":
            return sum(vals) / len(vals)
        q = {"p50": 0.5, "p90": 0.9}[stat]
        ordered = sorted(vals)
        rank = q * (len(ordered) - 1)
        lo = math.floor(rank)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)

    inclusive = value([v for t, v in samples if start <= t <= end])
    exclusive = value([v for t, v in samples if start < t <= end])
    return min(inclusive, exclusive), max(inclusive, exclusive)


def test_csv_gpu_figures(output: Path, tsdb: tuple[Path, fx.Truth]) -> None:
    truth = tsdb[1]
    rows = read_csv(output / "daily.csv")
    for instance, _gpu, uuid in fx.GPUS:
        samples = truth.util_samples[instance]
        for d, day in enumerate(dates()):
            start, end = fx.day_start(d), fx.day_start(d) + fx.DAY
            key = (day, "gpu", uuid)
            for stat in ("mean", "p50", "p90"):
                lo, hi = _util_bounds(samples, start, end, stat)
                got = next(
                    v
                    for k, v in rows.items()
                    if k[:3] == key and k[4] == f"gpu_utilization_{stat}_ratio"
                )
                assert lo - 1e-9 <= got <= hi + 1e-9, (instance, day, stat, got, lo, hi)
            minutes = [fx.gpu_utilization(instance, t) for t in range(start, end, 60)]
            for band, test in (
                ("waste", lambda u: u < 0.30),
                ("healthy", lambda u: 0.60 <= u <= 0.85),
                ("scale_review", lambda u: u > 0.85),
            ):
                expected = sum(1 for u in minutes if test(u)) / len(minutes)
                got = next(
                    v for k, v in rows.items() if k[:3] == key and k[4] == f"gpu_time_{band}_ratio"
                )
                assert abs(got - expected) <= 1 / 1440 + 1e-9, (instance, day, band)
            got = next(v for k, v in rows.items() if k[:3] == key and k[4] == "vram_peak_ratio")
            assert got == pytest.approx(truth.vram_peak[instance][d], rel=1e-9)
    # The weekend sits in the waste band, a weekday does not.
    sat = dates()[12]
    waste = [v for k, v in rows.items() if k[0] == sat and k[4] == "gpu_time_waste_ratio"]
    assert len(waste) == 3 and all(v > 0.99 for v in waste)


# -------------------------------------------------------------- figures and findings


@pytest.fixture(scope="module")
def report(prom: PromOnBlocks) -> Any:
    from inferwatch.pack.thresholds import load_thresholds
    from inferwatch.report.build import build_report

    t = load_thresholds()
    return build_report(prom.collect(fx.END, 7, t), t)


def test_alerts_counted_and_timed(report: Any) -> None:
    week = fx.alert_truth(fx.END - 7 * fx.DAY, fx.END)
    before = fx.alert_truth(fx.END - 14 * fx.DAY, fx.END - 7 * fx.DAY)
    got = {a.alertname: a for a in report.alerts}
    assert set(got) == set(week)
    for name, (count, seconds) in week.items():
        a = got[name]
        assert a.firings.current == count
        assert a.firings.previous == before[name][0]
        assert abs(a.seconds.current - seconds) <= 60 * count, name
        assert abs(a.seconds.previous - before[name][1]) <= 60 * max(1, before[name][0])
    assert got["InferenceTTFTSLOBreach"].subjects == ("vllm-0",)


def test_what_to_look_at_applies_the_closed_loops(report: Any) -> None:
    by_loop: dict[str, list[Any]] = {}
    for f in report.findings:
        by_loop.setdefault(f.loop, []).append(f)
    # Loop 2: TTFT P95 > 2 s on the weekend while the GPUs idle at 15 %.
    warm = by_loop["Slow first token on an idle GPU · warm-up"]
    assert len(warm) == 1 and "llama-8b" in warm[0].title
    assert "Sat 21 Nov" in warm[0].evidence and "Fri 20 Nov" not in warm[0].evidence
    assert warm[0].id == "warmup"
    # Loop 3: gpu-a's memory (no KV gauge in the fixture: NVML's ratio) ends at 93 % while
    # vllm-0's queue rises past capacity on Friday.
    memory = [f for f in by_loop["VRAM near the limit · memory"] if f.level == "act"]
    assert [f.title.split(":")[0] for f in memory] == ["gpu-a GPU 0"]
    assert "scale out or rate-limit" in memory[0].action and memory[0].id == "memory"
    assert "the queue of vllm-0 rose" in memory[0].evidence
    # The queue over max_num_seqs on Friday.
    queue = by_loop["Queue over capacity · leading indicator"]
    assert len(queue) == 1 and "vllm-0" in queue[0].title and "Fri 20 Nov" in queue[0].evidence
    # The SLO regression names the day it started.
    slo = [f for f in by_loop["SLO"] if "TTFT" in f.title]
    assert len(slo) == 1 and "Fri 20 Nov" in slo[0].evidence and slo[0].level == "act"
    # Latency was not fine and the load is spread 3:1 in requests over equal GPUs: no loop 1.
    assert "imbalance" not in {f.id for f in report.findings}
    # The long tail is TTFT's (the slow Friday tail); qwen-7b has no TTFT or TPOT histogram.
    assert sorted(f.title.split(":")[0] for f in by_loop["Long tail"]) == ["vllm-0", "vllm-1"]
    assert "Sat 21 Nov, Sun 22 Nov" in by_loop["GPU waste · waste band"][0].title
    assert by_loop["GPU waste · waste band"][0].id == "consolidate"
    assert [f.level for f in report.findings] == sorted(
        (f.level for f in report.findings), key=["act", "watch", "ok"].index
    )


def test_missing_series_are_left_out_with_a_note(output: Path) -> None:
    page = (output / "report.html").read_text()
    assert "no inferwatch_ttft_seconds_bucket series" in page
    assert "batch capacity (inferwatch_max_num_seqs) unknown" in page
    assert "SM activity (GPM) is not available for gpu-c:10127 GPU 0" in page
    text = (output / "report.txt").read_text()
    row = next(line for line in text.splitlines() if line.strip().startswith("tgi-0"))
    assert "–" in row and " 0 s" not in row


# ---------------------------------------------------------------------------- HTML


def test_output_files_and_html_images(output: Path) -> None:
    page = (output / "report.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs[0] == "three-curves.png"  # the guide's three-curves panel comes first
    assert len(srcs) == 5
    for src in srcs:
        data = (output / src).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert (output / "report.txt").read_text().startswith("inferwatch weekly report")


def test_html_renders_in_chromium_with_every_image(output: Path, tmp_path: Path) -> None:
    browser = Headless(tmp_path / "chrome")
    probe = output / "probe.html"
    script = (
        "<script>window.addEventListener('load',function(){var s=[];"
        "for(var i=0;i<document.images.length;i++){var m=document.images[i];"
        "s.push(m.complete&&m.naturalWidth>0?'ok':'broken:'+m.getAttribute('src'));}"
        "document.body.setAttribute('data-images',s.join(' '));});</script>"
    )
    probe.write_text((output / "report.html").read_text().replace("</body>", script + "</body>"))
    dom = browser.dom(probe)
    match = re.search(r'data-images="([^"]*)"', dom.stdout)
    assert match, f"no image status in the DOM:\n{dom.stderr[-2000:]}"
    statuses = match.group(1).split()
    assert len(statuses) == 5 and all(s == "ok" for s in statuses), statuses
    shot = ARTIFACTS / "report.png"
    browser.screenshot(output / "report.html", shot, "900,5400")
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG")
    print(f"report screenshot: {shot}")


# ---------------------------------------------------------------------------- mail


class Inbox:
    """aiosmtpd handler that keeps what it receives; refuses recipients on request."""

    def __init__(self, refuse: str = "") -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []
        self.refuse = refuse

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        if self.refuse and address == self.refuse:
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted"


class Authenticator:
    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self.logins: list[str] = []

    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> Any:
        from aiosmtpd.smtp import AuthResult

        login = auth_data.login.decode()
        ok = login == self.user and auth_data.password.decode() == self.password
        if ok:
            self.logins.append(login)
        # handled=False: aiosmtpd sends the 535 itself.
        return AuthResult(success=ok, handled=ok)


@pytest.fixture
def smtp_server() -> Iterator[Any]:
    from aiosmtpd.controller import Controller

    started: list[Any] = []

    def start(handler: Any, **kwargs: Any) -> int:
        port = free_port()
        controller = Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
        controller.start()
        started.append(controller)
        return port

    yield start
    for c in started:
        c.stop()


def smtp_env(
    monkeypatch: pytest.MonkeyPatch,
    port: int,
    security: str = "none",
    to: str = "sre@example.com,oncall@example.com",
) -> None:
    for key in ("USERNAME", "PASSWORD", "PASSWORD_FILE"):
        monkeypatch.delenv(f"INFERWATCH_SMTP_{key}", raising=False)
    monkeypatch.setenv("INFERWATCH_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("INFERWATCH_SMTP_PORT", str(port))
    monkeypatch.setenv("INFERWATCH_SMTP_SECURITY", security)
    monkeypatch.setenv("INFERWATCH_SMTP_FROM", "inferwatch <reports@example.com>")
    monkeypatch.setenv("INFERWATCH_SMTP_TO", to)


def check_mime(raw: bytes, output: Path) -> EmailMessage:
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    assert msg["Subject"] == "inferwatch weekly report: Mon 16 Nov – Sun 22 Nov 2026"
    assert msg["From"] == "inferwatch <reports@example.com>"
    assert msg["To"] == "sre@example.com, oncall@example.com"
    assert msg["Date"] and msg["Message-ID"].endswith("@example.com>")
    assert msg["Auto-Submitted"] == "auto-generated"
    assert msg.get_content_type() == "multipart/mixed"
    related, attachment = msg.get_payload()
    assert related.get_content_type() == "multipart/related"
    assert related.get_param("type") == "multipart/alternative"
    alternative, *images = related.get_payload()
    assert alternative.get_content_type() == "multipart/alternative"
    plain, html = alternative.get_payload()
    assert plain.get_content_type() == "text/plain"
    assert html.get_content_type() == "text/html"
    assert "WHAT TO LOOK AT" in plain.get_content()
    cids = re.findall(r'src="cid:([^"]+)"', html.get_content())
    assert cids[0].startswith("three-curves@")
    image_ids = {}
    for image in images:
        assert image.get_content_type() == "image/png"
        assert image.get_content_disposition() == "inline"
        assert image.get_content().startswith(b"\x89PNG")
        image_ids[image["Content-ID"].strip("<>")] = image
    assert sorted(cids) == sorted(image_ids)  # every image referenced, every reference there
    assert attachment.get_content_type() == "text/csv"
    assert attachment.get_content_disposition() == "attachment"
    assert attachment.get_filename() == "inferwatch-daily-2026-11-22.csv"
    assert attachment.get_content() == (output / "daily.csv").read_text()
    return msg


def test_send_without_auth(
    prom: PromOnBlocks, output: Path, smtp_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = Inbox()
    port = smtp_server(inbox)
    smtp_env(monkeypatch, port)
    assert run_report("--prometheus-url", prom.url, "--send") == 0
    assert len(inbox.messages) == 1
    mail_from, rcpts, raw = inbox.messages[0]
    assert mail_from == "reports@example.com"
    assert rcpts == ["sre@example.com", "oncall@example.com"]
    check_mime(raw, output)


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path)


def test_send_with_starttls_and_auth(
    prom: PromOnBlocks,
    output: Path,
    smtp_server: Any,
    tls_cert: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*tls_cert)
    inbox = Inbox()
    auth = Authenticator("reports", "s3cret-pass")
    port = smtp_server(
        inbox, tls_context=context, require_starttls=True, auth_required=True, authenticator=auth
    )
    smtp_env(monkeypatch, port, security="starttls")
    secret = tmp_path / "smtp-password"
    secret.write_text("s3cret-pass\n")
    monkeypatch.setenv("INFERWATCH_SMTP_USERNAME", "reports")
    monkeypatch.setenv("INFERWATCH_SMTP_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_cert[0]))  # trust the test's own CA
    assert run_report("--prometheus-url", prom.url, "--send") == 0
    assert auth.logins == ["reports"]
    assert len(inbox.messages) == 1
    check_mime(inbox.messages[0][2], output)


def test_auth_failure_sends_nothing_and_hides_the_password(
    prom: PromOnBlocks,
    smtp_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    inbox = Inbox()
    port = smtp_server(
        inbox,
        auth_required=True,
        auth_require_tls=False,
        authenticator=Authenticator("reports", "right"),
    )
    smtp_env(monkeypatch, port)
    monkeypatch.setenv("INFERWATCH_SMTP_USERNAME", "reports")
    monkeypatch.setenv("INFERWATCH_SMTP_PASSWORD", "wrong-Pa55word")
    assert run_report("--prometheus-url", prom.url, "--send") == 6
    err = capsys.readouterr().err
    assert "SMTP authentication failed for user 'reports'" in err
    assert "no mail was sent" in err
    assert "wrong-Pa55word" not in err
    assert inbox.messages == []


def test_refused_recipient_sends_to_nobody(
    prom: PromOnBlocks,
    smtp_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    inbox = Inbox(refuse="oncall@example.com")
    port = smtp_server(inbox)
    smtp_env(monkeypatch, port)
    assert run_report("--prometheus-url", prom.url, "--send") == 6
    err = capsys.readouterr().err
    assert "refused oncall@example.com (550" in err and "no mail was sent to anyone" in err
    assert inbox.messages == []


def test_smtp_refused(
    prom: PromOnBlocks, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    smtp_env(monkeypatch, free_port())
    assert run_report("--prometheus-url", prom.url, "--send") == 6
    err = capsys.readouterr().err
    assert "cannot connect to the SMTP server 127.0.0.1:" in err and "no mail was sent" in err


# ------------------------------------------------------------------------ failures


def test_prometheus_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert run_report("--prometheus-url", url) == 3
    assert f"cannot reach Prometheus at {url}" in capsys.readouterr().err


def test_query_error(
    tsdb: tuple[Path, fx.Truth], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real execution error: this Prometheus may load only 100 samples per query.
    strict = PromOnBlocks(tmp_path, tsdb[0], "--query.max-samples=100")
    try:
        assert run_report("--prometheus-url", strict.url) == 4
    finally:
        strict.stop()
    err = capsys.readouterr().err
    assert "query failed" in err and "too many samples" in err and "query: " in err


def test_no_data_for_the_period(prom: PromOnBlocks, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["report", "--quiet", "--prometheus-url", prom.url, "--end", "2020-01-01"]) == 5
    assert (
        "no inferwatch data between 2019-12-25 00:00 UTC and 2020-01-01" in capsys.readouterr().err
    )


def test_plain_text_to_stdout_without_output_or_send(
    prom: PromOnBlocks, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_report("--prometheus-url", prom.url, "--days", "3") == 0
    out = capsys.readouterr().out
    assert out.startswith("inferwatch weekly report: Fri 20 Nov – Sun 22 Nov 2026")
    assert "[ACT]" in out and "MODEL llama-8b" in out


def test_config_file_supplies_url_and_days(
    prom: PromOnBlocks, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "inferwatch.yaml"
    config.write_text(f"listen: 0.0.0.0:10127\nreport:\n  prometheus_url: {prom.url}\n  days: 2\n")
    assert run_report("--config", str(config)) == 0
    assert capsys.readouterr().out.startswith("inferwatch weekly report: Sat 21 Nov")


def test_progress_only_on_a_terminal(prom: PromOnBlocks, tmp_path: Path) -> None:
    script = shutil.which("script") or pytest.skip("script (util-linux) is not installed")
    cmd = [
        sys.executable,
        "-m",
        "inferwatch.cli",
        "report",
        "--prometheus-url",
        prom.url,
        "--end",
        END_ISO,
        "--output",
        str(tmp_path / "out"),
    ]
    tty = subprocess.run(
        [script, "-qec", shlex.join(cmd), "/dev/null"], capture_output=True, text=True, timeout=120
    )
    assert tty.returncode == 0, tty.stdout[-2000:]
    steps = count_steps()
    assert "querying" in tty.stdout and f"/{steps}" in tty.stdout  # rich's progress bar
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0
    assert "querying" not in plain.stderr
    # 27 figures, plus the loops' 6 (open requests, queue slope, preemptions, cold-start
    # TTFT, memory pressure, the waste condition), the cost section's 3 (hours, energy,
    # tokens; the wasters' loops are the findings', issue 29), the availability SLO's 2
    # (errors, rejections), the long-tail finding's prompt-length buckets and the
    # workers' start times (the data's age bounds the latency quantiles, issue 29), and the
    # what-if section's one (advise --shadow's gauges, issue 31)
    assert plain.stderr.startswith("inferwatch report: 41 queries to")
