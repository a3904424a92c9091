"""Issue 4 item 7: alerts end to end on a live stack, from a workload to a webhook and back.

One stack for the module (``tests/support/e2e.py``): four simulated vLLM
workers on four fake GPUs, the agent watching them, a real Prometheus loaded
with the rules generated from ``tests/data/e2e-thresholds.yaml`` (every `for`
in seconds, 1 s scrapes and evaluations, a 15 s window) through the shipped
``deploy/prometheus/prometheus.yml``, and a real Alertmanager running the
shipped ``deploy/alertmanager/alertmanager.yml`` with its webhooks pointed at
a receiver in this process and its timers at 1 s. Each scenario makes its
alert arrive at the webhook, routed by severity (critical to ``/page``,
warning to ``/ticket``), and resolve when the scenario ends:

- overload (``w-over``): InferenceQueueOverCapacity, then
  InferenceVRAMPressureQueueRising;
- cold start (``w-cold``, no request before): InferenceWorkerColdStart;
- idle (``w-idle``): InferenceGPUUnderutilized, resolved by steady traffic;
- a SIGKILLed worker (``w-down``): InferenceWorkerDown, resolved by a restart.

Latency figures: ``bench/bench_alert_latency.py`` runs the same scenarios.
"""

from __future__ import annotations

import dataclasses
import subprocess
import typing
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.support.e2e import (
    ALERT_WORKERS,
    ALERTMANAGER_CONFIG,
    COLD,
    DOWN,
    E2E_THRESHOLDS,
    IDLE,
    OVER,
    Detection,
    Stack,
    generate_rule_files,
    render_alertmanager_config,
    scenario_cold_start,
    scenario_idle,
    scenario_overload,
    scenario_worker_killed,
)
from tests.support.proc import AMTOOL, PROMTOOL, require_binary
from tests.support.webhook import WebhookReceiver

from inferwatch.pack.rules import slo
from inferwatch.pack.thresholds import load_thresholds

# ---------------------------------------------------------------------- without a stack


def test_test_thresholds_change_only_time() -> None:
    """The live tests alert on the packaged levels; only durations and the window shrink."""
    default, short = load_thresholds(), load_thresholds(str(E2E_THRESHOLDS))
    durations = 0
    for section in dataclasses.fields(default):
        d, s = getattr(default, section.name), getattr(short, section.name)
        if section.name == "pack" or not dataclasses.is_dataclass(d):
            continue
        # a field's kind is the metadata of its Annotated type (pack.thresholds)
        hints = typing.get_type_hints(type(d), include_extras=True)
        for f in dataclasses.fields(d):
            dv, sv = getattr(d, f.name), getattr(s, f.name)
            kind = getattr(hints[f.name], "__metadata__", (None,))[0]
            if kind in ("duration", "positive"):
                assert sv < dv, f"{section.name}.{f.name} is not shortened: {sv} >= {dv}"
                durations += 1
            else:
                assert sv == dv, f"{section.name}.{f.name}: {sv} != {dv} (a level changed)"
    assert durations >= 15
    assert short.pack.scrape_interval == 1.0 and short.pack.window == "15s"


def test_generated_rules_for_the_test_thresholds_pass_promtool(tmp_path: Path) -> None:
    promtool = require_binary(PROMTOOL, "promtool")
    t = load_thresholds(str(E2E_THRESHOLDS))
    rules_dir = generate_rule_files(t, tmp_path)
    files = sorted(rules_dir.glob("*.yaml"))
    assert [f.name for f in files] == ["inferwatch-alerts.yaml", "inferwatch-rules.yaml"]
    result = subprocess.run(
        [promtool, "check", "rules", *map(str, files)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    groups = [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]
    # = the test Prometheus's scrape interval, but for the SLO windows of a day or more
    # (pack.rules.slo.LONG_GROUP), whose interval does not follow the scrape's
    intervals = {g["name"]: g["interval"] for g in groups}
    assert intervals.pop(slo.LONG_GROUP) == "2m30s"
    assert set(intervals.values()) == {"1s"}
    fors = {r["alert"]: r.get("for") for g in groups for r in g["rules"] if "alert" in r}
    assert fors["InferenceQueueOverCapacity"] == "2s"  # 3 samples 1 s apart
    assert fors["InferenceWorkerDown"] == "3s"


def test_alertmanager_config_is_the_shipped_one_pointed_at_the_webhook(tmp_path: Path) -> None:
    shipped = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    rendered_text = render_alertmanager_config("http://127.0.0.1:5999")
    rendered = yaml.safe_load(rendered_text)
    # routing tree, grouping and inhibition exactly as shipped
    assert rendered["inhibit_rules"] == shipped["inhibit_rules"]
    assert rendered["route"]["group_by"] == shipped["route"]["group_by"]
    assert [(r["receiver"], r["matchers"]) for r in rendered["route"]["routes"]] == [
        (r["receiver"], r["matchers"]) for r in shipped["route"]["routes"]
    ]
    urls = {
        r["name"]: [h["url"] for h in r.get("webhook_configs") or []] for r in rendered["receivers"]
    }
    assert urls == {
        "page": ["http://127.0.0.1:5999/page"],
        "ticket": ["http://127.0.0.1:5999/ticket"],
        "null": [],
    }
    assert rendered["route"]["group_wait"] == "1s"
    assert all(r.get("group_wait", "1s") == "1s" for r in rendered["route"]["routes"])
    amtool = require_binary(AMTOOL, "amtool")
    path = tmp_path / "alertmanager.yml"
    path.write_text(rendered_text)
    check = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    route = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={path}", "severity=critical"],
        capture_output=True,
        text=True,
    )
    assert route.stdout.strip() == "page", route.stdout + route.stderr


# ---------------------------------------------------------------------- the live stack


@pytest.fixture(scope="module")
def hook() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, hook: WebhookReceiver) -> Iterator[Stack]:
    st = Stack(tmp_path_factory.mktemp("e2e-alerts"), ALERT_WORKERS, webhook=hook.url)
    try:
        yield st
    finally:
        st.stop()


def check_delivered(stack: Stack, d: Detection, receiver: str, severity: str) -> None:
    """Routed as the shipped config says, annotated, and resolved after the scenario ended."""
    fired = d.fired
    assert fired.path == f"/{receiver}" and fired.receiver == receiver, fired
    assert fired.labels["severity"] == severity
    assert fired.labels["job"] == "inferwatch" and fired.labels["instance"] == stack.agent_target
    # Prometheus filled the runbook link with the alert's labels (runbooks/<alert>.html)
    runbook = urllib.parse.urlsplit(fired.annotations["runbook_url"])
    assert runbook.path.endswith(f"/{d.alert}.html")
    opened_on = dict(urllib.parse.parse_qsl(runbook.query))
    assert opened_on["instance"] == stack.agent_target
    for label in ("worker", "gpu", "model"):
        if label in opened_on:
            assert opened_on[label] == fired.labels[label], (label, opened_on)
    assert fired.annotations["summary"].endswith(".")
    for value in d.labels.values():
        assert value in fired.annotations["description"], fired.annotations["description"]
    # Prometheus's own timeline: pending once the condition held, firing after `for`
    assert d.condition_start - 1.0 <= d.active_at <= fired.starts_at <= fired.received
    resolved = d.resolved
    assert resolved.path == fired.path and resolved.ends_at is not None
    # resolved because the scenario ended, not before
    assert resolved.received >= d.condition_end, (d.alert, resolved.received, d.condition_end)
    assert resolved.ends_at >= d.condition_end - 1.0
    assert not stack.firing(d.alert, **d.labels), f"{d.alert} {d.labels} still active"


@pytest.mark.slow
def test_overload_fires_queue_over_capacity_then_vram_pressure(
    stack: Stack, hook: WebhookReceiver
) -> None:
    queue, vram = scenario_overload(stack, hook, OVER)
    # the leading indicator pages too [6 FAQ]
    check_delivered(stack, queue, "page", "critical")
    check_delivered(stack, vram, "page", "critical")
    # the pressure page names the overloaded worker's own GPU, and the worker itself
    assert vram.fired.labels["gpu"] == stack.workers[OVER].gpu
    assert vram.fired.labels["worker"] == OVER
    # the queue is the leading indicator: it fires, and reaches the webhook, first
    assert queue.fired.starts_at < vram.fired.starts_at
    assert queue.fired.received <= vram.fired.received


@pytest.mark.slow
def test_cold_start_fires_worker_cold_start(stack: Stack, hook: WebhookReceiver) -> None:
    # the worker has served nothing since it started: its first requests pay the warm-up
    assert stack.prom.scalar(f'sum(inferwatch_requests_finished_total{{worker="{COLD}"}})') == 0
    (cold,) = scenario_cold_start(stack, hook, COLD)
    check_delivered(stack, cold, "ticket", "warning")


@pytest.mark.slow
def test_idle_gpu_fires_underutilized_and_traffic_resolves_it(
    stack: Stack, hook: WebhookReceiver
) -> None:
    (idle,) = scenario_idle(stack, hook, IDLE)
    check_delivered(stack, idle, "ticket", "warning")
    assert idle.fired.labels["gpu"] == stack.workers[IDLE].gpu
    assert "worker" not in idle.fired.labels  # a GPU alert: grouped per alert name


@pytest.mark.slow
def test_killed_worker_fires_worker_down_until_restarted(
    stack: Stack, hook: WebhookReceiver
) -> None:
    (down,) = scenario_worker_killed(stack, hook, DOWN)
    check_delivered(stack, down, "page", "critical")
    # the restarted worker is watched again under the same name and URL
    assert stack.prom.scalar(f'inferwatch_target_up{{worker="{DOWN}"}}') == 1
    assert hook.errors == []
