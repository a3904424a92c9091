"""Unit tests of the report's pure parts: arithmetic, formatting, settings, findings, CLI checks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.proc import free_port
from tests.support.report_raw import steady_gpu, steady_worker

from inferwatch.cli import main as cli_main
from inferwatch.errors import ConfigError, UsageError
from inferwatch.pack import fmt
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.report import words
from inferwatch.report.build import build_report
from inferwatch.report.cli import parse_end
from inferwatch.report.model import (
    Change,
    Hourly,
    Period,
    RawData,
    RawWorker,
    alert_runs,
    merge_buckets,
    quantile,
    share_within,
)
from inferwatch.report.promapi import MAX_POINTS, range_chunks
from inferwatch.report.settings import SmtpSettings, load_settings

T = load_thresholds()
END = 1795392000.0  # Monday 2026-11-23 00:00 UTC

# ------------------------------------------------------------------- arithmetic


def test_quantile_follows_promql() -> None:
    buckets = (
        (0.1, 60.0),
        (0.25, 140.0),
        (0.5, 180.0),
        (1.0, 196.0),
        (2.5, 200.0),
        (math.inf, 200.0),
    )
    assert quantile(0.99, buckets) == pytest.approx(1.75)
    assert quantile(0.5, buckets) == pytest.approx(0.1 + 0.15 * 40 / 80)
    # A rank in the +Inf bucket answers the highest finite bound.
    assert quantile(0.99, ((1.0, 10.0), (math.inf, 20.0))) == 1.0
    # No observations: no value, never a zero.
    assert quantile(0.99, ((1.0, 0.0), (math.inf, 0.0))) is None
    assert quantile(0.99, None) is None
    assert share_within(2.0, ((1.0, 0.0), (math.inf, 0.0))) is None


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=1000), min_size=2, max_size=8),
    q=st.floats(min_value=0.01, max_value=0.99),
)
def test_share_within_inverts_quantile(counts: list[int], q: float) -> None:
    bounds = [0.05 * 2**i for i in range(len(counts))]
    cumulative = []
    running = 0
    for c in counts:
        running += c
        cumulative.append(float(running))
    buckets = (*zip(bounds, cumulative, strict=True), (math.inf, float(running)))
    value = quantile(q, buckets)
    if running == 0:
        assert value is None
        return
    assert value is not None
    share = share_within(value, buckets)
    assert share is not None
    # Exact where the quantile lies inside a bucket with observations.
    assert share == pytest.approx(q, abs=1e-9) or any(
        value == b and share >= q - 1e-9 for b in bounds
    )


def test_merge_buckets_sums_by_bound() -> None:
    a = ((1.0, 2.0), (math.inf, 3.0))
    b = ((1.0, 5.0), (math.inf, 5.0))
    assert merge_buckets([a, None, b]) == ((1.0, 7.0), (math.inf, 8.0))
    assert merge_buckets([None, None]) is None


def test_alert_runs_split_on_gaps() -> None:
    points = [60.0 * i for i in range(10, 14)] + [60.0 * i for i in range(20, 21)]
    assert alert_runs(points, 60) == [(600.0, 780.0), (1200.0, 1260.0)]
    assert alert_runs([], 60) == []


def test_range_chunks_cover_every_step_once() -> None:
    step = 60.0
    start, end = 0.0, step * (3 * MAX_POINTS + 17)
    chunks = list(range_chunks(start, end, step))
    assert len(chunks) == 4
    points = [t for a, b in chunks for t in range(int(a), int(b) + 1, int(step))]
    assert points == list(range(int(start), int(end) + 1, int(step)))
    assert all((b - a) / step + 1 <= MAX_POINTS for a, b in chunks)


def test_period_days() -> None:
    p = Period(END, 7)
    ends = p.day_ends()
    assert len(ends) == 14 and ends[-1] == END and ends[6] == p.start
    assert words.day(p.day_starts()[7]) == "Mon 16 Nov"


# -------------------------------------------------------------------- formatting


def test_change_and_delta_text() -> None:
    assert words.delta(Change(4.29, 1.75), "rel") == "▲ 145%"
    assert words.delta(Change(0.93, 0.86), "pts") == "▲ 7 pts"
    assert words.delta(Change(100.0, 100.5), "rel") == "▶ 0%"
    assert words.delta(Change(3600.0, 7200.0), "abs_seconds") == "▼ 1h 00m"
    assert words.delta(Change(5.0, None), "rel") == "new"
    assert words.delta(Change(None, 5.0), "rel") == ""
    assert Change(2.0, 0.0).ratio is None and Change(2.0, 0.0).direction() == "up"


def test_number_formats() -> None:
    assert fmt.seconds(0.0992) == "99 ms"
    assert fmt.seconds(0.0095) == "9.5 ms"
    assert fmt.seconds(1.75) == "1.75 s"
    assert fmt.seconds(None) == fmt.DASH
    assert fmt.count(821_400) == "821 k"
    assert fmt.count(1_234_567) == "1.23 M"
    assert fmt.duration(7200) == "2h 00m"
    assert fmt.duration(45) == "45s"
    assert fmt.percent(0.456) == "46%"


def test_parse_end() -> None:
    assert parse_end("2026-11-23") == END
    assert parse_end("2026-11-23T00:00:00Z") == END
    assert parse_end("2026-11-23T01:00:00+01:00") == END
    assert parse_end("1795392000") == END
    assert parse_end("now", now=42.0) == 42.0
    assert parse_end("today", now=END + 6 * 3600 + 5) == END
    with pytest.raises(UsageError, match="--end: expected ISO 8601"):
        parse_end("last monday")


# ---------------------------------------------------------------------- settings


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_settings_file_then_env(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("file-secret\n")
    cfg = write(
        tmp_path / "c.yaml",
        f"""
listen: 0.0.0.0:10127
report:
  prometheus_url: http://prom:9090
  days: 14
  smtp:
    host: smtp.example.com
    security: tls
    username: reports
    password_file: {secret}
    from: reports@example.com
    to: [a@example.com, b@example.com]
""",
    )
    s = load_settings(cfg, {})
    assert s.prometheus_url == "http://prom:9090" and s.days == 14
    assert s.smtp.effective_port == 465 and s.smtp.password == "file-secret"
    assert s.smtp.to == ("a@example.com", "b@example.com")
    assert "file-secret" not in repr(s)
    s = load_settings(
        cfg,
        {
            "INFERWATCH_SMTP_PORT": "2525",
            "INFERWATCH_SMTP_PASSWORD": "env",
            "INFERWATCH_SMTP_TO": "c@example.com, d@example.com",
            "INFERWATCH_SMTP_SECURITY": "STARTTLS",
        },
    )
    assert s.smtp.effective_port == 2525 and s.smtp.password == "env"
    assert s.smtp.to == ("c@example.com", "d@example.com") and s.smtp.security == "starttls"


def test_settings_store_access_from_file_then_environment(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.yaml",
        "report:\n  prometheus_username: reports\n  prometheus_tenant: team-a\n",
    )
    env = {
        "INFERWATCH_PROMETHEUS_PASSWORD_FILE": "/run/pw",
        "INFERWATCH_PROMETHEUS_TENANT": "team-b",
        "INFERWATCH_PROMETHEUS_TENANT_HEADER": "X-Org",
    }
    assert load_settings(cfg, env).store.values == {
        "username": ("reports", cfg, "report.prometheus_username"),
        "password_file": ("/run/pw", "environment", "INFERWATCH_PROMETHEUS_PASSWORD_FILE"),
        "tenant": ("team-b", "environment", "INFERWATCH_PROMETHEUS_TENANT"),
        "tenant_header": ("X-Org", "environment", "INFERWATCH_PROMETHEUS_TENANT_HEADER"),
    }


def test_settings_smtp_from_environment_alone(tmp_path: Path) -> None:
    assert load_settings(None, {}).smtp == SmtpSettings()
    secret = tmp_path / "pw"
    secret.write_text("file-secret\n")
    env = {
        "INFERWATCH_SMTP_HOST": "smtp.example.com",
        "INFERWATCH_SMTP_USERNAME": "reports",
        "INFERWATCH_SMTP_PASSWORD_FILE": str(secret),
        "INFERWATCH_SMTP_FROM": "reports@example.com",
        "INFERWATCH_SMTP_TO": "a@example.com",
    }
    assert load_settings(None, env).smtp == SmtpSettings(
        host="smtp.example.com",
        username="reports",
        password="file-secret",
        sender="reports@example.com",
        to=("a@example.com",),
    )


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("report:\n  prometheus: x\n", {}, "c.yaml: report.prometheus: expected one of"),
        (
            "report:\n  days: seven\n",
            {},
            "c.yaml: report.days: expected a whole number from 1 to 366",
        ),
        (
            "report:\n  smtp:\n    password: hunter2\n",
            {},
            "report.smtp.password: expected one of host, port",
        ),
        (
            "report:\n  smtp:\n    security: ssl\n",
            {},
            "report.smtp.security: expected one of starttls, tls, none, got 'ssl'",
        ),
        ("report:\n  smtp:\n    to: nobody\n", {}, "report.smtp.to: expected a list of mail"),
        ("report: [1]\n", {}, "c.yaml: report: expected a mapping"),
        ("report: {\n", {}, "c.yaml: line 2: expected valid YAML"),
        (
            "",
            {"INFERWATCH_SMTP_PORT": "smtp"},
            "environment: INFERWATCH_SMTP_PORT: expected a whole number from 1 to 65535",
        ),
        ("", {"INFERWATCH_SMTP_USERNAME": "u"}, "expected a password for user 'u'"),
        ("", {"INFERWATCH_SMTP_PASSWORD": "hunter2"}, "report.smtp.username: expected a user name"),
    ],
)
def test_settings_errors(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    cfg = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, env)
    assert message in str(err.value)
    assert "hunter2" not in str(err.value)


def test_password_file_errors_name_the_file_not_the_secret(tmp_path: Path) -> None:
    # a path longer than a message shows: its end (the file's name, the reason) is kept
    deep = tmp_path / ("d" * 90) / "missing"
    env = {"INFERWATCH_SMTP_USERNAME": "u", "INFERWATCH_SMTP_PASSWORD_FILE": str(deep)}
    with pytest.raises(ConfigError) as err:
        load_settings(None, env)
    message = str(err.value)
    assert "expected a readable password file, got '" in message
    assert message.endswith("/missing (No such file or directory)'"), message
    assert str(deep) not in message  # shortened: one short line


# --------------------------------------------------------------------------- CLI


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli_main(["report"]) == 2
    assert "--prometheus-url is required" in capsys.readouterr().err
    assert cli_main(["report", "--prometheus-url", "prom:9090"]) == 2
    assert "expected an http:// or https:// URL" in capsys.readouterr().err
    cfg = write(tmp_path / "c.yaml", "report:\n  smtp:\n    host: h\n")
    # --send with incomplete mail settings fails before any query (no Prometheus here).
    url = f"http://127.0.0.1:{free_port()}"
    assert cli_main(["report", "--prometheus-url", url, "--send", "--config", cfg]) == 2
    assert "report.smtp.from: expected a value for --send" in capsys.readouterr().err
    bad = write(tmp_path / "t.yaml", "vram:\n  scale_above: 1.5\n")
    assert cli_main(["report", "--prometheus-url", url, "--thresholds", bad]) == 2
    assert "vram.scale_above" in capsys.readouterr().err


# ---------------------------------------------------------------------- findings


def _buckets(fast: bool, n: float) -> tuple[tuple[float, float], ...]:
    # TTFT P99 0.3 s when fast, otherwise fine but slower (0.9 s).
    top = 0.25 if fast else 1.0
    return ((0.1, 0.5 * n), (top, 0.995 * n), (2.5, n), (math.inf, n))


def _raw(
    util: float | tuple[float, float],
    vram: float,
    requests: tuple[float, float],
    **worker: Any,
) -> RawData:
    """Two workers of model m on a GPU each; ``worker`` holds ``RawWorker.of_series``
    arguments (figures of WorkerReading, ``histograms``), each a (w0, w1) pair, and
    ``waste`` a (w0, w1) pair of daily waste-condition shares."""
    period = Period(END, 7)
    n = 14
    utils = util if isinstance(util, tuple) else (util, util)
    waste = worker.pop("waste", (None, None))
    pressure = worker.pop("pressure", None)
    workers = []
    for i, (name, per_day) in enumerate(zip(("w0", "w1"), requests, strict=True)):
        extra = {k: v[i] for k, v in worker.items()}
        histograms = extra.pop("histograms", {"ttft": (_buckets(True, per_day),) * n})
        workers.append(steady_worker(name, n, histograms, per_day, f"{name}:1", **extra))
    gpus = tuple(
        steady_gpu(
            n,
            util=u,
            p90=u,
            vram=vram,
            uuid=f"GPU-{name}",
            instance=f"{name}:1",
            workers=(name,),
            pressure_peak=(pressure,) * n if pressure is not None else None,
            pressure_from="kv_cache" if pressure is not None else "gpu_memory",
            waste_alert_daily=(w,) * n if w is not None else None,
        )
        for name, u, w in zip(("w0", "w1"), utils, waste, strict=True)
    )
    hourly = Hourly((), (), "", (), ())
    return RawData(period, tuple(workers), gpus, (), hourly, ())


def ids(report: Any) -> set[str]:
    return {f.id for f in report.findings if f.id}


def test_loop1_one_busy_worker_over_idle_gpus_points_at_the_spread() -> None:
    # [6.2] loop 1: one GPU busy, the other idle, the model's average under 40 %
    report = build_report(_raw(util=(0.5, 0.1), vram=0.5, requests=(1000.0, 1000.0)), T)
    (loop1,) = [f for f in report.findings if f.id == "imbalance"]
    assert loop1.loop == "Low utilization with normal latency · imbalance"
    assert "averaged 30%" in loop1.evidence and "w0 carried over 3x" in loop1.evidence
    assert "least connections" in loop1.action and "Do not scale in" in loop1.action
    # open requests are the other load the rules compare
    report = build_report(
        _raw(util=0.25, vram=0.5, requests=(1000.0, 1000.0), open_requests=((9.0,) * 14, (1.0,) * 14)),
        T,
    )  # fmt: skip
    assert ids(report) == {"imbalance"}
    # requests served are not a load: 3x the requests over equal GPUs is no imbalance
    report = build_report(_raw(util=0.25, vram=0.5, requests=(3000.0, 1000.0)), T)
    assert "imbalance" not in ids(report)


def test_the_waste_of_an_imbalanced_model_is_loop_1s() -> None:
    # the quiet GPU spends its days under the waste line: consolidation, unless loop 1 holds
    raw = _raw(util=(0.5, 0.1), vram=0.5, requests=(1000.0, 1000.0), waste=(0.0, 1.0))
    assert ids(build_report(raw, T)) == {"imbalance"}
    balanced = _raw(util=(0.1, 0.1), vram=0.5, requests=(1000.0, 1000.0), waste=(1.0, 1.0))
    assert ids(build_report(balanced, T)) == {"consolidate"}


def test_first_tokens_within_the_cold_start_window_are_not_an_slo_miss() -> None:
    n = 14
    # 20 slow first tokens (2.5-5 s), every one observed right after a worker start
    both = ((0.1, 500.0), (0.25, 995.0), (2.5, 1000.0), (5.0, 1020.0), (math.inf, 1020.0))
    slow = ((0.1, 0.0), (0.25, 0.0), (2.5, 0.0), (5.0, 20.0), (math.inf, 20.0))
    raw = _raw(
        util=0.7, vram=0.5, requests=(1000.0, 1000.0),
        histograms=({"ttft": (both,) * n, "cold_ttft": (slow,) * n},) * 2,
    )  # fmt: skip
    report = build_report(raw, T)
    assert not [f for f in report.findings if f.loop == "SLO"]
    assert "cold_start" in ids(report)
    # the same observations outside the window are an SLO miss
    warm = _raw(util=0.7, vram=0.5, requests=(1000.0, 1000.0),
                histograms=({"ttft": (both,) * n},) * 2)  # fmt: skip
    slo = [f for f in build_report(warm, T).findings if f.loop == "SLO"]
    assert slo and slo[0].level == "act"


def test_memory_pressure_is_the_kv_cache_with_a_rising_queue() -> None:
    # NVML shows the pre-allocated pool (95 %), the KV cache is what fills
    rising = ((0.1,) * 14, (0.0,) * 14)  # requests per second
    raw = _raw(util=0.7, vram=0.95, requests=(1000.0, 1000.0), pressure=0.97,
               slope_max=rising)  # fmt: skip
    (act,) = [f for f in build_report(raw, T).findings if f.id == "memory"]
    assert act.level == "act" and "KV cache peak 97%" in act.title
    assert "scale out or rate-limit" in act.action
    assert "--gpu-memory-utilization" not in act.action
    # a flat queue: no loop 3
    flat = _raw(util=0.7, vram=0.95, requests=(1000.0, 1000.0), pressure=0.97,
                slope_max=((0.0,) * 14, (0.0,) * 14))  # fmt: skip
    assert "memory" not in ids(build_report(flat, T))
    # an empty KV cache in a full pre-allocated pool: nothing
    empty = _raw(util=0.7, vram=0.95, requests=(1000.0, 1000.0), pressure=0.2,
                 slope_max=rising)  # fmt: skip
    assert "memory" not in ids(build_report(empty, T))


def test_a_long_tail_is_ttft_or_tpot_at_or_above_the_ratio() -> None:
    n = 14
    # TTFT P50 0.1 s, P99 exactly 0.5 s (5x): at the line counts
    tail = ((0.1, 500.0), (0.5, 990.0), (1.0, 1000.0), (math.inf, 1000.0))
    raw = _raw(util=0.7, vram=0.5, requests=(1000.0, 1000.0),
               histograms=({"ttft": (tail,) * n}, {"ttft": (_buckets(True, 1000.0),) * n}))  # fmt: skip
    tails = [f for f in build_report(raw, T).findings if f.id == "long_tail"]
    assert [f.title.split(":")[0] for f in tails] == ["w0"]
    # a long end-to-end tail alone is the answer-length mix, not a finding
    e2e = ((0.5, 500.0), (10.0, 990.0), (20.0, 1000.0), (math.inf, 1000.0))
    raw = _raw(util=0.7, vram=0.5, requests=(1000.0, 1000.0),
               histograms=({"e2e": (e2e,) * n}, {"e2e": (e2e,) * n}))  # fmt: skip
    assert "long_tail" not in ids(build_report(raw, T))


def test_healthy_squeeze_is_not_an_action() -> None:
    report = build_report(_raw(util=0.7, vram=0.88, requests=(1000.0, 1000.0)), T)
    assert {f.level for f in report.findings} == {"ok"}
    assert any("healthy squeeze" in f.title for f in report.findings)


def test_a_quiet_week_says_so() -> None:
    report = build_report(_raw(util=0.7, vram=0.6, requests=(1000.0, 1000.0)), T)
    assert [f.title for f in report.findings] == ["Nothing needs a look this week."]


def test_a_fleet_without_gpu_series_renders_without_gpu_sections() -> None:
    from dataclasses import replace

    from inferwatch.report import charts, render

    raw = replace(
        _raw(util=0.5, vram=0.5, requests=(1000.0, 1000.0)),
        gpus=(),
        notes=("No GPU series in either period: the GPU sections are left out.",),
    )
    report = build_report(raw, T)
    drawn = charts.all_charts(report)
    assert [c.name for c in drawn] == ["latency-m"]  # no hourly data, no GPU charts
    page = render.html(report, drawn, lambda c: f"{c.name}.png")
    assert ">GPUs<" not in page and "No GPU series" in page
    assert "GPU busy" not in page  # no made-up utilization headline
    table = render.csv_text(report)
    assert ",current,gpu," not in table and ",previous,gpu," not in table
    assert ",worker,m,w0,,,requests,1000.0" in table
    assert "GPUS" not in render.text(report)


def test_a_worker_is_a_daily_series_of_the_one_worker_reading() -> None:
    """Issue 41: every figure the report queries per worker lands in a field of
    pack.reading's WorkerReading (or one of its buckets), one reading per day; RawWorker
    gives a figure back day by day, None where its series is absent, and keeps an absent
    histogram apart from a day without its +Inf bucket."""
    from dataclasses import fields

    from inferwatch.pack.reading import WorkerReading
    from inferwatch.report.query import BUCKETED, WORKER_FIGURES

    assert set(WORKER_FIGURES) - set(BUCKETED) <= {f.name for f in fields(WorkerReading)}
    day = ((0.5, 2.0), (math.inf, 3.0))
    w = RawWorker.of_series(
        "m", "w0", histograms={"ttft": (None, day)}, capacity=64.0,
        requests=(None, 5.0), failed=(None, None), queue_max=None,
    )  # fmt: skip
    assert all(isinstance(d, WorkerReading) for d in w.days) and len(w.days) == 2
    assert w.days[1].requests == 5.0 and w.days[1].buckets == {"ttft": day}
    assert w.daily("requests") == (None, 5.0)
    assert w.daily("failed") is None and w.daily("queue_max") is None
    assert w.histogram("ttft") == (None, day) and w.histogram("e2e") is None
    assert w.capacity == 64.0 and w.days[0].capacity is None
    # as many days as asked for where no series says (a worker seen, nothing measured)
    assert len(RawWorker.of_series("m", "w1", days=14).days) == 14


def test_the_notes_say_what_the_data_leaves_out_once_each() -> None:
    from dataclasses import replace

    raw = _raw(util=0.5, vram=0.5, requests=(1000.0, 1000.0))
    w0, w1 = raw.workers
    unknown = tuple(replace(day, over_capacity_seconds=None) for day in w0.days)
    raw = replace(raw, workers=(replace(w0, days=unknown), w1), notes=("from the collector",))
    notes = build_report(raw, T).notes
    assert notes[:3] == (
        "w0 (m): no inferwatch_tpot_seconds_bucket series, so its TPOT figures are left out "
        "(the engine may not export it).",
        "w0 (m): no inferwatch_e2e_latency_seconds_bucket series, so its end-to-end figures "
        "are left out (the engine may not export it).",
        "w0 (m): batch capacity (inferwatch_max_num_seqs) unknown, so time over capacity is "
        "left out; set max_num_seqs in the agent's worker config.",
    )
    assert "SM activity (GPM) is not available for w0:1 GPU 0, w1:1 GPU 0" in notes[-2]
    assert notes[-1] == "from the collector"
    assert not any("No GPU series" in n for n in notes)
    bare = build_report(replace(raw, gpus=(), notes=(notes[-1],) * 2), T).notes
    assert bare[-2:] == (
        "No GPU series (inferwatch_gpu_utilization_ratio) in either period: the GPU sections "
        "are left out.",
        "from the collector",
    )
