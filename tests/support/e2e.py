"""A whole inferwatch stack on loopback, for the live tests and the latency benchmark.

Simulated vLLM workers (``inferwatch simulate``, one fake GPU each), the agent
watching all of them (``inferwatch run`` with the fake GPU backend), a real
Prometheus rendered from the shipped ``deploy/prometheus/prometheus.yml``
(:func:`tests.support.stack.render_prometheus_config`) with rule files
generated from a thresholds file, and optionally a real Alertmanager whose
configuration is the shipped ``deploy/alertmanager/alertmanager.yml`` with its
webhook URLs pointed at a test receiver and its timers shortened
(:func:`render_alertmanager_config`). Load comes from ``inferwatch loadgen``.

Every part is a child process started the way a user starts it::

    stack = Stack(tmp, [WorkerSpec("w-over", max_num_seqs=4)],
                  thresholds=E2E_THRESHOLDS, webhook=hook.url)
    try:
        stack.wait_load(stack.load("overload", ["w-over"], 20), timeout=60)
    finally:
        stack.stop()
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tests.support.agentrun import AgentRun
from tests.support.proc import (
    REPO,
    Alertmanager,
    Process,
    Prometheus,
    free_port,
    http_get,
    inferwatch_cmd,
    wait_answering,
    wait_until,
)
from tests.support.stack import parse_duration, render_prometheus_config
from tests.support.webhook import AlertEvent, WebhookReceiver, parse_time

from inferwatch.pack import rules
from inferwatch.pack.thresholds import Thresholds, load_thresholds

#: the thresholds of the live tests: every `for` in seconds, 1 s scrapes, a 15 s window
E2E_THRESHOLDS = REPO / "tests" / "data" / "e2e-thresholds.yaml"
ALERTMANAGER_CONFIG = REPO / "deploy" / "alertmanager" / "alertmanager.yml"

#: the job of Prometheus' own scrape of the simulators (WorkerSpec.scraped_directly)
ENGINE_JOB = "vllm"
#: agent timers of the live stacks (defaults: 2s and 60s)
COLLECT_INTERVAL = "0.5s"
STATS_WINDOW = "10s"


@dataclass(frozen=True)
class AlertmanagerTimers:
    """Alertmanager's notification timers, shortened for a test (shipped: 30s/10s, 5m, 12h)."""

    group_wait: str = "1s"
    group_interval: str = "1s"
    repeat_interval: str = "1h"
    resolve_timeout: str = "1m"


def rule_files(t: Thresholds, out: Path) -> list[str]:
    """Write the recording and alerting rule files generated for ``t`` into ``out``; their paths."""
    files = rules.generate(t)
    written = []
    for rel in (rules.RULES_FILE, rules.ALERTS_FILE):
        path = out / Path(rel).name
        path.write_text(files[rel])
        written.append(str(path))
    return written


def generate_rule_files(t: Thresholds, out: Path) -> Path:
    """Write the alert and recording rule files generated for ``t``; returns their directory.

    The same generator as ``inferwatch generate --thresholds FILE --out DIR``
    (``inferwatch.pack.rules.generate``, one of ``GENERATORS``); only the
    Prometheus rule files are written (``DIR/alerts/*.yaml``, the layout
    ``render_prometheus_config(rules_dir=...)`` expects).
    """
    rules_dir = out / "alerts"
    rules_dir.mkdir(parents=True, exist_ok=True)
    for rel, text in rules.generate(t).items():
        if rel.startswith("alerts/") and rel.endswith(".yaml"):
            (out / rel).write_text(text)
    if not list(rules_dir.glob("*.yaml")):
        raise AssertionError(f"the rules generator wrote no alerts/*.yaml under {out}")
    return rules_dir


def render_alertmanager_config(
    webhook_url: str,
    timers: AlertmanagerTimers = AlertmanagerTimers(),
    path: Path = ALERTMANAGER_CONFIG,
) -> str:
    """The shipped Alertmanager configuration, pointed at ``webhook_url`` and made fast.

    Kept as shipped: the routing tree (severity -> receiver), grouping and
    inhibition rules. Replaced: the scheme and host of every webhook URL (the
    path stays, so ``/page`` and ``/ticket`` tell which receiver a
    notification was routed to), ``global.resolve_timeout``, and
    ``group_wait``/``group_interval``/``repeat_interval`` on the root route
    and on every child route that sets them.
    """
    doc = yaml.safe_load(path.read_text())
    base = webhook_url.rstrip("/")
    doc.setdefault("global", {})["resolve_timeout"] = timers.resolve_timeout

    def shorten(route: dict[str, Any], root: bool) -> None:
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if root or key in route:
                route[key] = getattr(timers, key)
        for child in route.get("routes") or []:
            shorten(child, False)

    shorten(doc["route"], True)
    webhooks = 0
    for receiver in doc.get("receivers") or []:
        for hook in receiver.get("webhook_configs") or []:
            hook["url"] = re.sub(r"^https?://[^/]+", base, str(hook["url"]))
            webhooks += 1
    if not webhooks:
        raise AssertionError(f"{path} has no webhook receiver to point at the test")
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True)
class WorkerSpec:
    """One simulated worker of a stack; its GPU is the next fake GPU index, or ``gpu``."""

    name: str
    max_num_seqs: int = 20
    time_scale: float = 1.0
    #: more ``inferwatch simulate`` flags (``--num-gpu-blocks``, ``--tensor-parallel``,
    #: ``--mig``...)
    args: tuple[str, ...] = ()
    model: str = "sim-7b"
    #: the (first) fake GPU it runs on; None: one GPU of its own, the next index
    gpu: int | None = None
    #: the agent's workers[].export_histograms
    export_histograms: bool = True
    #: Prometheus also scrapes the simulator itself (job ``vllm``), as a user running
    #: vLLM's own dashboard does (docs/engines.md "When Prometheus scrapes the engine too")
    scraped_directly: bool = False
    #: the agent's workers[].gpus (UUIDs): attribution where the GPU source cannot see
    #: the worker's process (the dcgm-exporter backend); empty: not set
    gpus: tuple[str, ...] = ()


class SimWorker:
    """An ``inferwatch simulate`` process on a fixed port, so a restart keeps its URL."""

    def __init__(self, spec: WorkerSpec, gpu_index: int, gpu_dir: Path, log_dir: Path) -> None:
        self.spec = spec
        self.name = spec.name
        self.gpu_index = gpu_index
        self.gpu = str(gpu_index)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._gpu_dir = gpu_dir
        self._log_dir = log_dir
        self._starts = 0
        self.process: Process | None = None
        #: time.time() of the last start (process launched) and last kill
        self.started_at = 0.0
        self.killed_at = 0.0

    def command(self) -> list[str]:
        s = self.spec
        return inferwatch_cmd(
            "simulate",
            "--port",
            str(self.port),
            "--model",
            s.model,
            "--max-num-seqs",
            str(s.max_num_seqs),
            "--time-scale",
            str(s.time_scale),
            "--gpu-state-dir",
            str(self._gpu_dir),
            "--gpu-index",
            str(self.gpu_index),
            "--seed",
            str(self.gpu_index + 1),
            *s.args,
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def start(self, timeout: float = 60.0) -> None:
        if self.alive():
            raise AssertionError(f"{self.name} is already running")
        self._starts += 1
        log = self._log_dir / f"{self.name}.{self._starts}.log"
        self.started_at = time.time()
        self.process = Process(self.command(), log)
        wait_answering(self.process, f"{self.url}/health", self.name, timeout)

    def kill(self) -> None:
        """SIGKILL: the worker dies without closing anything, as an OOM kill does."""
        if self.process is None or not self.process.alive():
            raise AssertionError(f"{self.name} is not running")
        self.killed_at = time.time()
        self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class Stack:
    """Simulated workers + agent + Prometheus (+ Alertmanager); see the module doc."""

    def __init__(
        self,
        tmp: Path,
        workers: Sequence[WorkerSpec],
        *,
        thresholds: Path | None = E2E_THRESHOLDS,
        rules_dir: Path | None = None,
        webhook: str | None = None,
        scrape_interval: str | None = None,
        timers: AlertmanagerTimers = AlertmanagerTimers(),
        warmup: dict[str, Any] | None = None,
        gpu_count: int | None = None,
        gpu: dict[str, Any] | None = None,
    ) -> None:
        """``rules_dir`` None: generate rule files from ``thresholds`` (None: the defaults).

        ``webhook`` None: no Alertmanager. ``scrape_interval`` None: the
        thresholds' ``pack.scrape_interval`` (used for scrapes and rule
        evaluation alike). ``warmup``: the agent's ``warmup:`` section (its
        readiness gate warms the workers before the stack is up), None: no gate.
        ``gpu_count``: the fake GPUs of the host (None: one per worker); workers with
        ``gpu`` set share, span (tensor parallelism) or slice (MIG) them.
        ``gpu``: the agent's ``gpu:`` section instead of the fake NVML (e.g. the
        dcgm-exporter backend pointed at a stand-in).
        """
        self._gpu = gpu
        self._warmup = warmup
        self.tmp = tmp
        self.thresholds = load_thresholds(str(thresholds) if thresholds else None)
        self.scrape_interval = scrape_interval or self.thresholds.pack.interval
        self.gpu_dir = tmp / "gpus"
        self.gpu_dir.mkdir(parents=True)
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.rules_dir = rules_dir or generate_rule_files(self.thresholds, tmp / "pack")
        self.workers = {
            spec.name: SimWorker(spec, i if spec.gpu is None else spec.gpu, self.gpu_dir, self.logs)
            for i, spec in enumerate(workers)
        }
        self.gpu_count = gpu_count if gpu_count is not None else len(self.workers)
        if len(self.workers) != len(workers):
            raise ValueError("worker names must be unique")
        self.agent: AgentRun | None = None
        self.alertmanager: Alertmanager | None = None
        self.prometheus: Prometheus | None = None
        self._loads: list[Process] = []
        try:
            self._start(webhook, timers)
        except BaseException:
            self.stop()
            raise

    def _start(self, webhook: str | None, timers: AlertmanagerTimers) -> None:
        # every worker starts with the stack: one the agent watches but cannot reach
        # is a worker down (InferenceWorkerDown after a few seconds with short `for`s)
        for worker in self.workers.values():
            worker.start()
        config = {
            "collect_interval": COLLECT_INTERVAL,
            "stats_window": STATS_WINDOW,
            "gpu": self._gpu
            or {
                "backend": "fake",
                "fake_count": self.gpu_count,
                "fake_state_dir": str(self.gpu_dir),
            },
            # max_num_seqs: the simulator's command line is not `vllm serve`
            "workers": [
                {
                    "name": w.name,
                    "url": w.url,
                    "engine": "vllm",
                    "max_num_seqs": w.spec.max_num_seqs,
                    "export_histograms": w.spec.export_histograms,
                    **({"gpus": list(w.spec.gpus)} if w.spec.gpus else {}),
                }
                for w in self.workers.values()
            ],
        }
        if self._warmup is not None:
            config["warmup"] = self._warmup
        self.agent = AgentRun(self.tmp, config=config, ready="/readyz", log=self.logs / "agent.log")
        self.agent_port, self.agent_target = self.agent.port, self.agent.target
        self.agent_url = self.agent.url
        if webhook is not None:
            self.alertmanager = Alertmanager(self.tmp, render_alertmanager_config(webhook, timers))
        prom_config = render_prometheus_config(
            agent_targets=[self.agent_target],
            alertmanager=self.alertmanager.url if self.alertmanager else None,
            scrape_interval=self.scrape_interval,
            evaluation_interval=self.scrape_interval,
            rules_dir=self.rules_dir,
        )
        direct = [f"127.0.0.1:{w.port}" for w in self.workers.values() if w.spec.scraped_directly]
        if direct:
            prom_config["scrape_configs"].append(
                {"job_name": ENGINE_JOB, "static_configs": [{"targets": direct}]}
            )
        self.prometheus = Prometheus(self.tmp, prom_config)
        self.started_at = time.time()
        prom = self.prometheus
        wait_until(prom.targets_up, 60, message="the agent scraped by Prometheus")

    # ------------------------------------------------------------------ helpers
    @property
    def prom(self) -> Prometheus:
        if self.prometheus is None:
            raise AssertionError("the stack has no Prometheus")
        return self.prometheus

    def record(self, documented: str) -> str:
        """The recording rule name generated for this stack's window (``..._5m`` -> ``..._15s``)."""
        return rules.record_names(self.thresholds)[documented]

    def load(
        self,
        scenario: str,
        workers: Sequence[str],
        duration: float,
        *,
        rate: float | None = None,
        time_scale: float | None = None,
        seed: int = 1,
        drain: float = 5.0,
        extra: Sequence[str] = (),
    ) -> Process:
        """Start ``inferwatch loadgen`` against some workers; ``wait_load`` waits for it."""
        if time_scale is None:
            time_scale = self.workers[workers[0]].spec.time_scale
        args = ["loadgen", "--scenario", scenario]
        for name in workers:
            args += ["--target", self.workers[name].url]
        args += ["--duration", f"{duration:g}", "--time-scale", f"{time_scale:g}"]
        args += ["--seed", str(seed), "--drain", f"{drain:g}"]
        if rate is not None:
            args += ["--rate", f"{rate:g}"]
        args += list(extra)
        n = len(self._loads) + 1
        proc = Process(inferwatch_cmd(*args), self.logs / f"loadgen-{n}-{scenario}.log")
        self._loads.append(proc)
        return proc

    @staticmethod
    def wait_load(proc: Process, timeout: float) -> str:
        """Wait for a loadgen run to end; its output (the summary) or AssertionError."""
        try:
            code = proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.stop()
            raise AssertionError(
                f"loadgen still running after {timeout}s:\n{proc.log()[-2000:]}"
            ) from None
        out = proc.log()
        proc.stop()
        if code != 0:
            raise AssertionError(f"loadgen exited {code}:\n{out[-3000:]}")
        return out

    def firing(self, alertname: str, **labels: str) -> list[dict[str, Any]]:
        """Prometheus's active alerts of that name (pending or firing) matching the labels."""
        data = self.prom.api("alerts")
        return [
            a
            for a in data["alerts"]
            if a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def alertmanager_alerts(self) -> list[dict[str, Any]]:
        if self.alertmanager is None:
            return []
        status, body, _ = http_get(f"{self.alertmanager.url}/api/v2/alerts", timeout=5)
        return list(json.loads(body)) if status == 200 else []

    def logs_tail(self, lines: int = 30) -> str:
        """The last lines of every log, for a failure message."""
        out = []
        for path in sorted(self.logs.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in self._loads:
            with contextlib.suppress(Exception):
                proc.stop()
        for part in (self.prometheus, self.alertmanager, self.agent):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.stop()
        for worker in self.workers.values():
            with contextlib.suppress(Exception):
                worker.stop()


def seconds(duration: str) -> float:
    """A duration in seconds: Prometheus's (``1s``, ``1m30s``) or decimal seconds (``0.5s``)."""
    m = re.fullmatch(r"(\d+\.\d+)s", duration)
    return float(m.group(1)) if m else parse_duration(duration)


# --------------------------------------------------------------------------- scenarios
#
# Each scenario drives one alert (or two) through the whole pipeline and returns
# what happened, with the timestamps the benchmark prints. The tests assert on
# the same records. Waiting is always on a condition with a deadline.


@dataclass(frozen=True)
class Detection:
    """One alert of a scenario, from the condition's start to its resolution at the webhook."""

    alert: str
    #: the labels that pick this alert out (its worker or GPU)
    labels: dict[str, str]
    #: what the scenario did to cause it: load started, worker killed, GPU left idle
    condition_start: float
    #: Prometheus's activeAt: the first evaluation at which the expression held (pending)
    active_at: float
    #: the firing notification at the webhook (its starts_at: when Prometheus fired it)
    fired: AlertEvent
    #: the scenario ended: load stopped, worker restarted, GPU busy again
    condition_end: float
    #: the resolved notification of the same episode
    resolved: AlertEvent

    @property
    def latency(self) -> float:
        """Condition start to the firing notification at the webhook."""
        return self.fired.received - self.condition_start

    @property
    def to_pending(self) -> float:
        """Condition start to the expression holding (workload, agent, scrape, window, eval)."""
        return self.active_at - self.condition_start

    @property
    def pending(self) -> float:
        """Pending to firing: the rule's `for` (plus at most one evaluation interval)."""
        return self.fired.starts_at - self.active_at

    @property
    def notify(self) -> float:
        """Firing to the webhook: Prometheus -> Alertmanager -> group_wait -> POST."""
        return self.fired.received - self.fired.starts_at

    @property
    def resolve_latency(self) -> float:
        """Condition end to the resolved notification at the webhook."""
        return self.resolved.received - self.condition_end


def _describe(stack: Stack, hook: WebhookReceiver) -> str:
    alerts = [
        f"{a['labels'].get('alertname')} {a['state']} {a['labels'].get('worker') or a['labels'].get('gpu')}"
        for a in stack.prom.api("alerts")["alerts"]
    ]
    events = [
        f"{e.path} {e.status} {e.alertname} {e.labels.get('worker') or e.labels.get('gpu')}"
        for e in hook.events()
    ]
    return (
        f"Prometheus alerts: {alerts}\nwebhook events: {events}\n"
        f"Alertmanager alerts: {len(stack.alertmanager_alerts())}\n{stack.logs_tail(15)}"
    )


def wait_firing(
    stack: Stack,
    hook: WebhookReceiver,
    alert: str,
    since: float,
    timeout: float,
    **labels: str,
) -> tuple[AlertEvent, float]:
    """The first firing notification of an alert that started at or after ``since``.

    Returns it with Prometheus's ``activeAt`` for the same episode, read while
    the alert is active (pending or firing).
    """
    active: list[float] = []

    def arrived() -> AlertEvent | None:
        for a in stack.firing(alert, **labels):
            at = parse_time(a["activeAt"])
            if at >= since - 1.0 and not active:
                active.append(at)
        return hook.first(alert, "firing", labels, started_after=since)

    try:
        event = wait_until(arrived, timeout, interval=0.2, message=f"{alert} {labels} firing")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_describe(stack, hook)}") from None
    if not active:  # fired within one poll of becoming active: ask once more
        arrived()
    active_at = active[0] if active else event.starts_at
    return event, active_at


def wait_resolved(
    stack: Stack, hook: WebhookReceiver, fired: AlertEvent, timeout: float
) -> AlertEvent:
    try:
        return wait_until(
            lambda: hook.resolution(fired),
            timeout,
            interval=0.2,
            message=f"{fired.alertname} {fired.labels} resolved",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_describe(stack, hook)}") from None


#: The workers of the alert scenarios (tests/live/test_e2e_alerts.py, bench/bench_alert_latency.py)
OVER, COLD, IDLE, DOWN = "w-over", "w-cold", "w-idle", "w-down"
ALERT_WORKERS = (
    # the simulator's defaults (max_num_seqs 20, 1702 KV blocks), four times faster so
    # the batch fills and VRAM passes 92% within seconds; no warm-up (that is w-cold's)
    WorkerSpec(OVER, time_scale=0.25, args=("--cold-start-requests", "0")),
    # the defaults: the first 3 requests wait for a warm-up of up to 4.6 s
    WorkerSpec(COLD),
    WorkerSpec(IDLE),
    WorkerSpec(DOWN),
)

#: How the scenarios drive the simulators (overload: arrivals per second at time scale 1)
OVERLOAD_RATE = 4.0
#: long enough for the KV cache's window average to pass 92 % with the queue rising
OVERLOAD_SECONDS = 40.0
COLD_START_SECONDS = 12.0
FIRE_TIMEOUT = 60.0
RESOLVE_TIMEOUT = 60.0


def scenario_overload(stack: Stack, hook: WebhookReceiver, worker: str) -> list[Detection]:
    """Overload: InferenceQueueOverCapacity, then InferenceVRAMPressureQueueRising.

    Long prompts arrive faster than the worker serves them: the queue passes
    max_num_seqs within seconds; the running requests' KV blocks push VRAM past
    92% while the queue keeps rising. The load stops with its requests
    cancelled (``--drain 0``): the queue empties and VRAM falls back at once.
    """
    w = stack.workers[worker]
    start = time.time()
    load = stack.load("overload", [worker], OVERLOAD_SECONDS, rate=OVERLOAD_RATE, drain=0)
    try:
        queue, queue_active = wait_firing(
            stack, hook, "InferenceQueueOverCapacity", start, FIRE_TIMEOUT, worker=worker
        )
        vram, vram_active = wait_firing(
            stack, hook, "InferenceVRAMPressureQueueRising", start, FIRE_TIMEOUT, gpu=w.gpu
        )
        stack.wait_load(load, OVERLOAD_SECONDS + 60)
    finally:
        load.stop()
    end = time.time()
    return [
        Detection(
            "InferenceQueueOverCapacity",
            {"worker": worker},
            start,
            queue_active,
            queue,
            end,
            wait_resolved(stack, hook, queue, RESOLVE_TIMEOUT),
        ),
        Detection(
            "InferenceVRAMPressureQueueRising",
            {"gpu": w.gpu},
            start,
            vram_active,
            vram,
            end,
            wait_resolved(stack, hook, vram, RESOLVE_TIMEOUT),
        ),
    ]


def scenario_cold_start(stack: Stack, hook: WebhookReceiver, worker: str) -> list[Detection]:
    """Cold start: the first requests of a worker that has served none wait for its warm-up.

    The simulator's defaults: the first 3 requests pay a warm-up of up to 4.6 s
    (field guide 5.2), so the TTFT P95 passes 2 s within the worker's first
    minutes. The alert resolves once those slow first tokens leave the
    quantile window after the load ends.
    """
    start = time.time()
    load = stack.load("cold-start", [worker], COLD_START_SECONDS, drain=0)
    try:
        fired, active = wait_firing(
            stack, hook, "InferenceWorkerColdStart", start, FIRE_TIMEOUT, worker=worker
        )
        stack.wait_load(load, COLD_START_SECONDS + 60)
    finally:
        load.stop()
    end = time.time()
    resolved = wait_resolved(stack, hook, fired, RESOLVE_TIMEOUT)
    return [Detection(fired.alertname, {"worker": worker}, start, active, fired, end, resolved)]


def scenario_idle(stack: Stack, hook: WebhookReceiver, worker: str) -> list[Detection]:
    """Idle: the GPU works (steady load), then only the idle trickle reaches it, then work again.

    InferenceGPUUnderutilized fires once the GPU's windowed average falls
    below the waste line for the (shortened) ``waste_for``, and resolves when
    steady traffic brings the average back above it.
    """
    w = stack.workers[worker]
    util = stack.record("gpu:inferwatch_gpu_utilization_ratio:avg5m")
    line = stack.thresholds.gpu_utilization.waste_below
    alert = "InferenceGPUUnderutilized"

    def working() -> bool:
        value = stack.prom.scalar(f'{util}{{gpu="{w.gpu}"}}')
        return value is not None and value >= line and not stack.firing(alert, gpu=w.gpu)

    busy = stack.load("steady", [worker], 600, drain=0)
    try:
        wait_until(working, 90, interval=0.5, message=f"GPU {w.gpu} busy above {line:.0%}")
    finally:
        busy.stop()
    start = time.time()
    idle = stack.load("idle", [worker], 600, drain=0)
    try:
        fired, active = wait_firing(stack, hook, alert, start, FIRE_TIMEOUT, gpu=w.gpu)
    finally:
        idle.stop()
    end = time.time()
    busy = stack.load("steady", [worker], 600, drain=0, seed=2)
    try:
        resolved = wait_resolved(stack, hook, fired, RESOLVE_TIMEOUT)
    finally:
        busy.stop()
    return [Detection(alert, {"gpu": w.gpu}, start, active, fired, end, resolved)]


def scenario_worker_killed(stack: Stack, hook: WebhookReceiver, worker: str) -> list[Detection]:
    """A worker is SIGKILLed; InferenceWorkerDown fires, and resolves when it is restarted."""
    w = stack.workers[worker]
    w.kill()
    fired, active = wait_firing(
        stack, hook, "InferenceWorkerDown", w.killed_at, FIRE_TIMEOUT, worker=worker
    )
    w.start()
    resolved = wait_resolved(stack, hook, fired, RESOLVE_TIMEOUT)
    return [
        Detection(
            fired.alertname, {"worker": worker}, w.killed_at, active, fired, w.started_at, resolved
        )
    ]


# ---------------------------------------------------------------- short pages, panels


def fast_ttft_page_thresholds(tmp: Path) -> Path:
    """The e2e thresholds with the TTFT page after 2 s of a P99 over 2 s, for a worker
    started a second ago (the shipped rule leaves a worker's first minutes to
    InferenceWorkerColdStart): a stack's overload pages within its test."""
    doc = yaml.safe_load(E2E_THRESHOLDS.read_text())
    doc["ttft"]["slo_for"] = "2s"
    doc["cold_start"]["within"] = "1s"
    path = tmp / "thresholds.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def worker_panel_expr(expr: str, worker: str) -> str:
    """A dashboard query as Grafana sends it with every variable at All but the worker."""
    expr = re.sub(r'=~"\$(?!worker)\w+"', '=~".*"', expr)
    return expr.replace("$worker", worker).replace("$__rate_interval", "15s")


def wait_panel_shows_worker(stack: Stack, expr: str, worker: str, what: str) -> None:
    """Wait until the worker-dashboard query ``expr`` (with ``$worker`` = ``worker``)
    returns one non-NaN series, labelled with that worker alone."""
    query = worker_panel_expr(expr, worker)

    def shown() -> list[dict[str, str]]:
        return [
            r["metric"] for r in stack.prom.query(query) if not math.isnan(float(r["value"][1]))
        ]

    (labels,) = wait_until(shown, 60, message=f"{what} for {worker}")
    assert labels == {"worker": worker}, (what, query, labels)
