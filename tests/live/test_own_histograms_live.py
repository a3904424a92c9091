"""Issue 23 item 2, live: vLLM's own histograms, stored once, drive the latency pages.

The simulator's vLLM exposition is scraped by a real Prometheus twice over: by
the agent (``export_histograms: false`` for ``w-own``) and directly (job
``vllm``, the scrape a user keeps for vLLM's own dashboard). The generated
rules are loaded; overload on ``w-own`` fires the TTFT page for that worker,
whose latency comes only from vLLM's own series: Prometheus stores no
``inferwatch_*_bucket`` of it. ``w-copy`` keeps the agent's copy and is scraped
directly too: its recorded bucket rate is the agent's alone, not the sum.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import pack_readback
from tests.support.e2e import (
    ENGINE_JOB,
    Stack,
    WorkerSpec,
    fast_ttft_page_thresholds,
    wait_panel_shows_worker,
    worker_panel_expr,
)
from tests.support.proc import PROMETHEUS, require_binary, wait_until

from inferwatch.pack import dashboards as dash
from inferwatch.pack.dashboards.common import latency_panel
from inferwatch.report.model import Period
from inferwatch.report.promapi import PrometheusClient
from inferwatch.report.query import Collector

OWN, COPY = "w-own", "w-copy"
TTFT_PAGE = "InferenceTTFTSLOBreach"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binary(PROMETHEUS, "prometheus")
    tmp = tmp_path_factory.mktemp("own-histograms")
    thresholds = fast_ttft_page_thresholds(tmp)
    s = Stack(
        tmp,
        [
            WorkerSpec(
                OWN,
                time_scale=0.25,
                args=("--cold-start-requests", "0"),
                export_histograms=False,
                scraped_directly=True,
            ),
            WorkerSpec(COPY, args=("--cold-start-requests", "0"), scraped_directly=True),
        ],
        thresholds=thresholds,
    )
    try:
        yield s
    finally:
        s.stop()


def test_overload_pages_the_worker_from_vllms_own_buckets(stack: Stack) -> None:
    prom = stack.prom
    rate = stack.record("worker:inferwatch_ttft_seconds_bucket:rate5m")
    p99 = stack.record("worker:inferwatch_ttft_seconds:p99_5m")
    load = stack.load("overload", [OWN], 40, rate=4.0, drain=0)
    steady = stack.load("steady", [COPY], 40, rate=1.0, drain=0)
    try:

        def paged() -> list[dict[str, str]]:
            return [
                a["labels"]
                for a in stack.firing(TTFT_PAGE)
                if a["state"] == "firing" and a["labels"].get("worker") == OWN
            ]

        try:
            (labels,) = wait_until(paged, 90, interval=0.5, message=f"{TTFT_PAGE} for {OWN}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{prom.query(p99)}\n{stack.logs_tail(10)}") from None
        assert labels["engine"] == "vllm" and labels["model"] == "sim-7b"
        assert labels["instance"] == stack.agent_target and labels["job"] == "inferwatch"
        assert not [a for a in stack.firing(TTFT_PAGE) if a["labels"].get("worker") == COPY]

        # w-copy: the agent's buckets and vLLM's both stored. Its quantiles read the agent's
        # copy, and the engine-side recorded rate leaves it out: no third copy is stored.
        p99_copy = f'{p99}{{worker="{COPY}"}}'
        wait_until(lambda: prom.query(p99_copy), 60, message=f"{COPY} quantile recorded")
        w = stack.thresholds.pack.window
        own = prom.query(
            f'sum(rate(vllm:time_to_first_token_seconds_bucket{{job="{ENGINE_JOB}",'
            f'instance="127.0.0.1:{stack.workers[COPY].port}",le="+Inf"}}[{w}]))'
        )
        assert float(own[0]["value"][1]) > 0, "vLLM's own series of w-copy are stored too"
        assert prom.query(f'{rate}{{worker="{COPY}"}}') == []
    finally:
        load.stop()
        steady.stop()

    # Stored once: no agent bucket of w-own, vLLM's own are there, the recorded rate is.
    own_buckets = prom.query(
        f'count by (__name__) ({{__name__=~"inferwatch_.*_bucket",worker="{OWN}"}})'
    )
    assert own_buckets == []
    copy_buckets = prom.query(
        f'count by (__name__) ({{__name__=~"inferwatch_.*_bucket",worker="{COPY}"}})'
    )
    assert {b["metric"]["__name__"] for b in copy_buckets} >= {"inferwatch_ttft_seconds_bucket"}
    direct = f'instance="127.0.0.1:{stack.workers[OWN].port}"'
    assert prom.query(f'vllm:time_to_first_token_seconds_bucket{{job="{ENGINE_JOB}",{direct}}}')
    assert prom.query(f'{rate}{{worker="{OWN}"}}')


def test_the_worker_dashboards_latency_panels_show_the_worker(stack: Stack) -> None:
    """The TTFT/TPOT/E2E panels, built for this stack's thresholds, have data for w-own
    (its buckets are vLLM's own) and for w-copy, with the worker variable set to each."""
    t = stack.thresholds
    panels = [
        latency_panel(t, "TTFT", "inferwatch_ttft_seconds", t.ttft.p99_slo_seconds, "worker"),
        latency_panel(t, "TPOT", "inferwatch_tpot_seconds", t.tpot.p99_slo_seconds, "worker"),
        latency_panel(t, "End-to-end latency", "inferwatch_e2e_latency_seconds", None, "worker"),
    ]
    load = stack.load("steady", [OWN, COPY], 30, rate=2.0, drain=0)
    try:
        for worker in (OWN, COPY):
            for panel in panels:
                for target in panel.targets:
                    wait_panel_shows_worker(stack, target.expr, worker, panel.title)
    finally:
        load.stop()


HEATMAPS = (
    "Prompt length distribution",
    "Generation length distribution",
    "TTFT distribution",
    "TPOT distribution",
    "End-to-end latency distribution",
)
QUANTILE_PANELS = ("Prefill, decode and queue time P50 / P95", "Queue time P50 / P95 / P99")


def test_the_heatmaps_and_phase_panels_show_the_worker(stack: Stack) -> None:
    """The worker dashboard's request-shape and latency heatmaps and its queue / phase
    quantile panels, as generated for this stack's thresholds, have data for w-own,
    whose buckets (prompt and generation length, prefill, decode and queue time
    included) are only vLLM's own: each reads the recorded rate there."""
    doc = dash.dashboards(stack.thresholds)["inference-worker"]
    queries: dict[str, list[str]] = {}
    for q in pack_readback.query_targets(doc):
        queries.setdefault(q.panel, []).append(q.expr)
    assert set(HEATMAPS) | set(QUANTILE_PANELS) <= set(queries)
    load = stack.load("steady", [OWN, COPY], 30, rate=2.0, drain=0)
    try:
        for worker in (OWN, COPY):
            for title in HEATMAPS:
                (expr,) = (worker_panel_expr(e, worker) for e in queries[title])

                def counted(expr: str = expr) -> list[dict[str, Any]] | None:
                    got = stack.prom.query(expr)
                    return got if any(float(r["value"][1]) > 0 for r in got) else None

                rows = wait_until(counted, 60, message=f"{title} for {worker}")
                assert {tuple(r["metric"]) for r in rows} == {("le",)}, (title, rows)
                assert "+Inf" in {r["metric"]["le"] for r in rows}
            for title in QUANTILE_PANELS:
                for expr in queries[title]:
                    wait_panel_shows_worker(stack, expr, worker, title)
    finally:
        load.stop()


def test_the_weekly_report_counts_the_workers_latency_and_prompts(stack: Stack) -> None:
    """The report's per-day buckets (TTFT, TPOT, E2E, prompt length) for w-own come from
    vLLM's own series through the endpoint join; w-copy's are the agent's alone."""
    load = stack.load("steady", [OWN, COPY], 20, rate=2.0, drain=0)
    try:
        wait_until(
            lambda: stack.prom.query(
                f'sum(vllm:request_prompt_tokens_count{{instance="127.0.0.1:'
                f'{stack.workers[OWN].port}"}}) > 0'
            ),
            60,
            message=f"{OWN} finished requests stored",
        )
    finally:
        load.stop()
    at = float(math.floor(time.time()))
    c = Collector(PrometheusClient(stack.prom.url), Period(at, 1), stack.thresholds)
    rows = {w.worker: w for w in c.workers()}

    def total(buckets: Any) -> float:
        assert buckets is not None
        return float(dict(buckets)[math.inf])

    own = rows[OWN]
    latency = {n: own.histogram(n) for n in ("ttft", "tpot", "e2e")}
    for name, days in latency.items():
        assert days is not None and total(days[-1]) > 0, name
    prompt_lengths = own.histogram("prompt_length")
    assert prompt_lengths is not None and total(prompt_lengths[-1]) > 0
    direct = f'instance="127.0.0.1:{stack.workers[OWN].port}",le="+Inf"'
    (vllm,) = stack.prom.query(
        f"sum(increase(vllm:time_to_first_token_seconds_bucket{{{direct}}}[1d]))", at
    )
    assert total((latency["ttft"] or ())[-1]) == pytest.approx(float(vllm["value"][1]), rel=1e-9)
    # both stored for w-copy: the agent's count, not the sum of the two
    (agent,) = stack.prom.query(
        f'sum(increase(inferwatch_ttft_seconds_bucket{{worker="{COPY}",le="+Inf"}}[1d]))', at
    )
    assert total((rows[COPY].histogram("ttft") or ())[-1]) == pytest.approx(
        float(agent["value"][1]), rel=1e-9
    )
