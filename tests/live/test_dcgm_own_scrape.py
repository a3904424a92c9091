"""Issue 23, "done when": dcgm-exporter for the GPUs and vLLM's own scrape, together.

The cluster users run: the GPU Operator's dcgm-exporter already reads the GPUs
(here a loopback stand-in serving the dcgm-exporter 4.9 capture of
``tests/data/dcgm/``, two H200s: GPU 0 busy, GPU 1 idle at 12 % with thermal
clock-event bits), and Prometheus scrapes vLLM itself for vLLM's dashboard.
The agent runs with ``gpu.backend: dcgm-exporter`` (no NVML poller at all) and
``export_histograms: false`` for both simulated vLLM workers, whose GPUs come
from ``workers[].gpus`` (dcgm-exporter lists no processes, and these workers
are no pods). Proven:

- the agent exports no NVML collector and Prometheus stores no
  ``inferwatch_*_bucket`` series: every bucket is stored once, vLLM's own;
- each worker is attributed to its GPU and the joint rules pair them;
- the worker alerts fire from vLLM's own buckets (TTFT page) and the agent's
  gauges (queue over capacity) for the overloaded worker only, and the GPU
  alerts from dcgm-exporter's readings for the idle, throttled GPU only;
- the worker dashboard's latency panels and the GPU dashboard's utilization
  panel show every worker and GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from tests.support.e2e import (
    ENGINE_JOB,
    Stack,
    WorkerSpec,
    fast_ttft_page_thresholds,
    wait_panel_shows_worker,
)
from tests.support.proc import PROMETHEUS, REPO, http_get, require_binary, wait_until
from tests.support.stubworker import StubWorker

from inferwatch.pack.dashboards.common import latency_panel

CAPTURE = (REPO / "tests" / "data" / "dcgm" / "dcgm-exporter-4.9-h200x2.prom").read_text()
U0 = "GPU-6f1d3a52-0c4e-4b1a-9d2e-1f7a8b9c0d11"
U1 = "GPU-b27e9c40-5a3d-4e8f-8c61-2d4e6f8a0b22"
BUSY, IDLE = "w-busy", "w-idle"


@pytest.fixture(scope="module")
def exporter() -> Iterator[StubWorker]:
    stub = StubWorker(lambda: CAPTURE)
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, exporter: StubWorker) -> Iterator[Stack]:
    require_binary(PROMETHEUS, "prometheus")
    tmp = tmp_path_factory.mktemp("dcgm-own-scrape")
    thresholds = fast_ttft_page_thresholds(tmp)
    s = Stack(
        tmp,
        [
            WorkerSpec(
                BUSY,
                time_scale=0.25,
                args=("--cold-start-requests", "0"),
                gpus=(U0,),
                export_histograms=False,
                scraped_directly=True,
            ),
            WorkerSpec(
                IDLE,
                args=("--cold-start-requests", "0"),
                gpus=(U1,),
                export_histograms=False,
                scraped_directly=True,
            ),
        ],
        thresholds=thresholds,
        gpu={
            "backend": "dcgm-exporter",
            "dcgm_exporter_url": f"{exporter.url}/metrics",
            "dcgm_interval": "0.5s",
        },
    )
    try:
        yield s
    finally:
        s.stop()


def test_no_nvml_poller_and_every_bucket_stored_once(stack: Stack) -> None:
    status, body, _ = http_get(f"{stack.agent_url}/metrics", timeout=5)
    assert status == 200
    text = body.decode()
    assert 'collector="dcgm"' in text
    assert 'collector="nvml"' not in text
    prom = stack.prom
    wait_until(
        lambda: prom.scalar("count(inferwatch_gpu_utilization_ratio)") == 2,
        30,
        message="both GPUs from dcgm-exporter",
    )
    pairs = {
        (r["metric"]["worker"], r["metric"]["uuid"])
        for r in prom.query("inferwatch_worker_gpu_info")
    }
    assert pairs == {(BUSY, U0), (IDLE, U1)}
    # the joint rules pair each worker's KV cache with its own GPU through that series
    pressure = "worker_gpu:inferwatch_memory_pressure:ratio"
    joined = wait_until(
        lambda: (
            {(r["metric"]["worker"], r["metric"]["uuid"]) for r in prom.query(pressure)} or None
        ),
        60,
        message=f"{pressure} recorded",
    )
    assert joined == {(BUSY, U0), (IDLE, U1)}
    direct = prom.query(
        f'count by (instance) (vllm:time_to_first_token_seconds_bucket{{job="{ENGINE_JOB}"}})'
    )
    assert len(direct) == 2, "vLLM's own buckets of both workers are stored"
    assert prom.query('count by (__name__) ({__name__=~"inferwatch_.*_bucket"})') == []


def test_worker_and_gpu_alerts_fire_for_the_right_worker_and_gpu(stack: Stack) -> None:
    load = stack.load("overload", [BUSY], 60, rate=4.0, drain=0)
    steady = stack.load("steady", [IDLE], 60, rate=0.5, drain=0)
    try:

        def firing(alert: str, label: str) -> set[str]:
            return {
                a["labels"].get(label, "") for a in stack.firing(alert) if a["state"] == "firing"
            }

        for alert in ("InferenceTTFTSLOBreach", "InferenceQueueOverCapacity"):
            try:
                wait_until(
                    lambda alert=alert: firing(alert, "worker") == {BUSY},
                    120,
                    interval=0.5,
                    message=f"{alert} for {BUSY}",
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{stack.logs_tail(10)}") from None
        wait_until(
            lambda: firing("InferenceGPUUnderutilized", "uuid") == {U1},
            120,
            interval=0.5,
            message="InferenceGPUUnderutilized for the idle GPU only",
        )
        assert firing("InferenceGPUThermalThrottling", "uuid") <= {U1}
        assert firing("InferenceTTFTSLOBreach", "worker") == {BUSY}
        assert firing("InferenceGPUTelemetryDown", "instance") == set()
    finally:
        load.stop()
        steady.stop()


def test_latency_and_gpu_panels_show_every_worker_and_gpu(stack: Stack) -> None:
    t = stack.thresholds
    panels = [
        latency_panel(t, "TTFT", "inferwatch_ttft_seconds", t.ttft.p99_slo_seconds, "worker"),
        latency_panel(t, "TPOT", "inferwatch_tpot_seconds", t.tpot.p99_slo_seconds, "worker"),
    ]
    load = stack.load("steady", [BUSY, IDLE], 30, rate=2.0, drain=0)
    try:
        for worker in (BUSY, IDLE):
            for panel in panels:
                for target in panel.targets:
                    wait_panel_shows_worker(stack, target.expr, worker, panel.title)
    finally:
        load.stop()
    util = stack.prom.query(stack.record("gpu:inferwatch_gpu_utilization_ratio:avg5m"))
    assert {r["metric"]["uuid"] for r in util if not math.isnan(float(r["value"][1]))} == {U0, U1}
