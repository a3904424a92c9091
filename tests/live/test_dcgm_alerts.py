"""Issue 23 item 1: the generated alerts work unchanged when the GPUs come from dcgm-exporter.

A loopback dcgm-exporter stand-in serves the captures of ``tests/data/dcgm/``;
the agent reads it (``gpu.backend: dcgm-exporter``, no NVML at all); a real
Prometheus scrapes the agent and evaluates the rules generated from
``tests/data/e2e-thresholds.yaml`` (the packaged levels, every ``for`` in
seconds). GPU 1 of the captures idles at 12 % with its thermal clock-event
bits set: InferenceGPUUnderutilized and InferenceGPUThermalThrottling fire for
it and not for the busy, cool GPU 0, whichever DCGM name set is served, and
the thermal alert resolves once the bits clear.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.agentrun import AgentRun
from tests.support.dcgm_data import NEW, OLD
from tests.support.e2e import E2E_THRESHOLDS, generate_rule_files
from tests.support.proc import (
    Prometheus,
    wait_until,
)
from tests.support.stack import render_prometheus_config
from tests.support.stubworker import StubWorker

from inferwatch.pack.thresholds import load_thresholds

U1 = "GPU-b27e9c40-5a3d-4e8f-8c61-2d4e6f8a0b22"
_GPU1_EVENTS = re.compile(r'^(DCGM_FI_DEV_CLOCKS_EVENT_REASONS\{gpu="1",.*\}) 96$', re.M)


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.exporter = StubWorker(lambda: NEW)
        gpu = {
            "backend": "dcgm-exporter",
            "dcgm_exporter_url": f"{self.exporter.url}/metrics",
            "dcgm_interval": "0.5s",
        }
        self.agent = AgentRun(tmp, config={"gpu": gpu}, ready="/readyz", timeout=30)
        target = self.agent.target
        rules_dir = generate_rule_files(load_thresholds(str(E2E_THRESHOLDS)), tmp)
        self.prom = Prometheus(
            tmp, render_prometheus_config(agent_targets=[target], rules_dir=rules_dir)
        )

    def firing(self, alert: str) -> set[tuple[str, str]]:
        """(gpu, reason) of the firing instances of ``alert`` ("" where it has no reason)."""
        result = self.prom.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')
        return {(r["metric"].get("gpu", ""), r["metric"].get("reason", "")) for r in result}

    def stop(self) -> None:
        self.prom.stop()
        self.agent.stop()
        self.exporter.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("dcgm-alerts"))
    try:
        yield s
    finally:
        s.stop()


def test_gpu_alerts_fire_on_dcgm_exporter_data(stack: Stack) -> None:
    thermal = {("1", "sw_thermal"), ("1", "hw_thermal")}
    wait_until(
        lambda: stack.firing("InferenceGPUThermalThrottling") == thermal,
        90,
        interval=0.5,
        message="InferenceGPUThermalThrottling firing for GPU 1 only",
    )
    wait_until(
        lambda: stack.firing("InferenceGPUUnderutilized") == {("1", "")},
        90,
        interval=0.5,
        message="InferenceGPUUnderutilized firing for GPU 1 only",
    )
    util = stack.prom.scalar(f'gpu:inferwatch_gpu_utilization_ratio:avg15s{{uuid="{U1}"}}')
    assert util == pytest.approx(0.12)
    assert stack.firing("InferenceGPUTelemetryDown") == set()


def test_older_field_names_keep_every_series(stack: Stack) -> None:
    before = stack.prom.query('count by (__name__) ({__name__=~"inferwatch_gpu_.*"})')
    stack.exporter.body = lambda: OLD
    wait_until(
        lambda: (
            stack.prom.scalar('count(inferwatch_gpu_info{driver_version="570.124.06"})') == 2
            and stack.prom.scalar("count(inferwatch_gpu_energy_joules_total)") == 2
        ),
        30,
        message="GPUs read from the pre-4.9 names",
    )
    after = stack.prom.query('count by (__name__) ({__name__=~"inferwatch_gpu_.*"})')
    assert {r["metric"]["__name__"] for r in after} == {r["metric"]["__name__"] for r in before}
    assert stack.firing("InferenceGPUThermalThrottling") == {
        ("1", "sw_thermal"),
        ("1", "hw_thermal"),
    }
    stack.exporter.body = lambda: NEW


def test_thermal_alert_resolves_when_the_bits_clear(stack: Stack) -> None:
    cool = _GPU1_EVENTS.sub(r"\1 0", NEW)
    assert cool != NEW
    stack.exporter.body = lambda: cool
    wait_until(
        lambda: stack.firing("InferenceGPUThermalThrottling") == set(),
        60,
        interval=0.5,
        message="InferenceGPUThermalThrottling resolved",
    )
    assert stack.firing("InferenceGPUUnderutilized") == {("1", "")}
