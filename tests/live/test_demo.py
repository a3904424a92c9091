"""`inferwatch demo` runs the whole loop and its agent serves the contract."""

from __future__ import annotations

import contextlib
import http.server
import re
import socket
import subprocess
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from tests.support.proc import (
    PROMETHEUS,
    REPO,
    Prometheus,
    free_port,
    http_get,
    inferwatch_cmd,
    wait_until,
)

from inferwatch.demo.conditions import (
    FIRING,
    PENDING,
    AlertStates,
    Condition,
    CounterRate,
    Reading,
    alert_for,
    conditions,
)
from inferwatch.demo.demo_cmd import parse_agent_metrics
from inferwatch.demo.layouts import SCENARIOS, layout_for
from inferwatch.pack import names as an
from inferwatch.pack.thresholds import load_thresholds

# Families the demo cannot produce without a fault, and why.
NOT_IN_DEMO = {
    "inferwatch_collect_errors_total": "exists only after a collector met an error",
    "inferwatch_gpu_xid_errors_total": "the demo's fake GPUs raise no XID events",
    "inferwatch_gpu_xid_last_timestamp_seconds": "the demo's fake GPUs raise no XID events",
    "inferwatch_requests_rejected_total": "steady load stays under any admission limit",
    "inferwatch_tpot_mean_seconds": "only for engines without a TPOT histogram (llama.cpp)",
    "inferwatch_e2e_latency_mean_seconds": "only for engines without an E2E histogram (Triton)",
    "inferwatch_gpu_graphics_active_ratio": "the dcgm-exporter backend only (the demo runs NVML's fake)",
    "inferwatch_gpu_nvlink_throughput_bytes_per_second": "the dcgm-exporter backend only",
    "inferwatch_worker_gpu_info": "the demo's agent has no attribution source on the fake backend",
    "inferwatch_lora_adapter_active": "the simulated vLLM serves no LoRA adapters",
    "inferwatch_lora_max_adapters": "the simulated vLLM serves no LoRA adapters",
    "inferwatch_kubernetes_workers": "only with kubernetes: discovery (tests/live/test_kubernetes_e2e.py)",
}
# the measuring proxy's families exist only for a worker with `proxy:` (tests/live/test_proxy.py);
# the demo's load goes to the simulated workers directly
NOT_IN_DEMO.update(
    {
        name: "only for a worker behind the measuring proxy"
        for name in (
            "inferwatch_proxy_client_aborts_total",
            "inferwatch_proxy_connections",
            "inferwatch_proxy_e2e_latency_seconds",
            "inferwatch_proxy_generation_tokens_total",
            "inferwatch_proxy_prompt_tokens_total",
            "inferwatch_proxy_rejected_total",
            "inferwatch_proxy_requests_in_flight",
            "inferwatch_proxy_requests_total",
            "inferwatch_proxy_samples_dropped_total",
            "inferwatch_proxy_tpot_seconds",
            "inferwatch_proxy_ttft_seconds",
            "inferwatch_proxy_upstream_errors_total",
            "inferwatch_proxy_upstream_retries_total",
        )
    }
)


def families(text: str) -> set[str]:
    names = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            if fam.type == "histogram":
                name = re.sub(r"_(bucket|count|sum|created)$", "", name)
            if name.startswith("inferwatch_"):
                names.add(name)
    return names


def demo_polled(
    port: int, take: Callable[[str], None], timeout: float, *args: str
) -> subprocess.CompletedProcess[str]:
    """``inferwatch demo ARGS --no-live`` on ``port``; each second's /metrics goes to ``take``."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            try:
                status, body, _ = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            except OSError:  # not listening yet, or already stopped
                continue
            if status == 200:
                take(body.decode())

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        return subprocess.run(
            inferwatch_cmd("demo", *args, "--no-live", "--listen", f"127.0.0.1:{port}"),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        stop.set()
        poller.join(5)


@pytest.mark.slow
def test_demo_runs_and_serves_every_contract_series(tmp_path: Path) -> None:
    port = free_port()
    seen: set[str] = set()

    def take(body: str) -> None:
        seen.update(families(body))

    result = demo_polled(port, take, 180, "--duration", "20")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"http://127.0.0.1:{port}/metrics" in result.stdout  # the URLs are printed
    assert "conditions:" in result.stdout  # the status view ran
    documented = set(
        re.findall(r"`(inferwatch_[a-z0-9_]+)`", (REPO / "docs" / "metrics.md").read_text())
    )
    missing = documented - seen - set(NOT_IN_DEMO)
    assert not missing, f"the demo's agent never served: {sorted(missing)}"
    assert "inferwatch_ttft_quantile_seconds" in seen and "inferwatch_gpu_up" in seen


def test_demo_refuses_a_bad_duration() -> None:
    result = subprocess.run(
        inferwatch_cmd("demo", "--duration", "0"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--duration" in result.stderr


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_demo_refuses_a_bad_time_scale(bad: str) -> None:
    result = subprocess.run(
        inferwatch_cmd("demo", "--time-scale", bad), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--time-scale" in result.stderr


class _AnswersEverything(http.server.BaseHTTPRequestHandler):
    """Another program on the demo's port that answers every GET with 200 (another
    demo's agent would): the demo once took its /healthz for its own agent's."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("holder", ["listener", "http"])
def test_demo_on_a_busy_port_is_one_line_and_exit_2(holder: str) -> None:
    """Issue 39: nothing starts, no WorkerDown that is not true, one line, exit 2."""
    port = free_port()
    with contextlib.ExitStack() as stack:
        if holder == "http":
            server = http.server.HTTPServer(("127.0.0.1", port), _AnswersEverything)
            stack.callback(server.server_close)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stack.callback(server.shutdown)
        else:
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", port))
            s.listen()
        result = subprocess.run(
            inferwatch_cmd(
                "demo", "--duration", "15", "--no-live", "--listen", f"127.0.0.1:{port}"
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout == ""  # no URLs, no lifelines, no alert conditions
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"inferwatch demo: error: --listen 127.0.0.1:{port}: cannot listen: in use by "
        "another program (choose a free port with --listen)"
    )


@pytest.mark.slow
def test_demo_stack_loads_the_generated_rules(tmp_path: Path) -> None:
    import json
    import shutil
    import subprocess as sp

    if not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")):
        pytest.skip("Prometheus and Alertmanager are not installed")
    port = free_port()
    proc = sp.Popen(
        inferwatch_cmd(
            "demo", "--stack", "--duration", "30", "--no-live", "--listen", f"127.0.0.1:{port}"
        ),
        stdout=sp.PIPE,
        stderr=sp.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    prometheus = alertmanager = alerts_page = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        words = line.split()
        if words[:1] == ["prometheus"]:
            alerts_page = words[1]
            prometheus = "http://" + urllib.parse.urlsplit(alerts_page).netloc
        if words[:1] == ["alertmanager"]:
            alertmanager = words[1]
        if prometheus and alertmanager:
            break
    try:
        assert prometheus and alertmanager and alerts_page, "".join(lines)
        # issue 39: the printed alerts page answers on the Prometheus found (Debian's 2.42
        # serves /classic/alerts only), and the line names that Prometheus's version
        status, body, _ = http_get(alerts_page)
        assert status == 200 and b"Alerts" in body, (alerts_page, status)
        line = next(x for x in lines if x.split()[:1] == ["prometheus"])
        assert f"Prometheus {_prometheus_version()}" in line, line
        for link in (f"http://127.0.0.1:{port}/metrics", alertmanager):
            assert http_get(link)[0] == 200, link
        status, body, _ = http_get(f"{prometheus}/api/v1/rules")
        groups = json.loads(body)["data"]["groups"]
        rules = {r["name"] for g in groups for r in g["rules"]}
        assert status == 200 and "InferenceQueueOverCapacity" in rules
        assert "worker:inferwatch_ttft_seconds:p99_5m" in rules
        assert "model:inferwatch_desired_replicas:count" in rules  # the demo's scaler view
        status, body, _ = http_get(f"{alertmanager}/-/ready")
        assert status == 200

        def targets() -> list[str]:
            doc = json.loads(http_get(f"{prometheus}/api/v1/targets")[1])
            return [t["labels"]["instance"] for t in doc["data"]["activeTargets"]]

        assert wait_until(targets, 20, message="the agent as a target") == [f"127.0.0.1:{port}"]
    finally:
        rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, "".join(lines) + rest


def _prometheus_version() -> str:
    """The installed Prometheus's version, as ``prometheus --version`` prints it."""
    out = subprocess.run(
        [str(PROMETHEUS), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    found = re.match(r"prometheus, version (\S+)", out.stdout + out.stderr)
    assert found, out
    return found.group(1)


def test_the_demo_links_the_alerts_page_of_the_prometheus_it_finds(tmp_path: Path) -> None:
    """Issue 39: the page is read from the real Prometheus's version, and answers."""
    from inferwatch.demo.demo_cmd import prometheus_alerts_page

    prom = Prometheus(tmp_path, {"global": {"scrape_interval": "15s"}})
    try:
        page, version = prometheus_alerts_page(prom.url)
        assert version == _prometheus_version()
        status, body, _ = http_get(page)
        assert status == 200 and b"Alerts" in body, (page, status)
        if "+ds" in version:  # Debian's build: the classic pages only (/alerts is a 404)
            assert page == f"{prom.url}/classic/alerts"
            assert http_get(f"{prom.url}/alerts")[0] == 404
    finally:
        prom.stop()


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def _by_device(samples: list[tuple[str, dict[str, str], float]], name: str) -> dict:
    """{(gpu, gpu_instance or ""): value} of one GPU family."""
    return {(lab["gpu"], lab.get("gpu_instance", "")): v for n, lab, v in samples if n == name}


def _processes(samples: list[tuple[str, dict[str, str], float]]) -> dict:
    """{(gpu, gpu_instance or ""): sorted pids} from the per-process memory series."""
    out: dict[tuple[str, str], list[int]] = {}
    for n, lab, _ in samples:
        if n == "inferwatch_gpu_process_memory_used_bytes":
            key = (lab["gpu"], lab.get("gpu_instance", ""))
            out.setdefault(key, []).append(int(lab["pid"]))
    return {k: sorted(v) for k, v in out.items()}


GIB = 1024**3


def _tp(samples: list, seen: list) -> None:
    used = _by_device(samples, "inferwatch_gpu_memory_used_bytes")
    procs = _processes(samples)
    # four ranks, one process each, on GPUs 0-3; GPUs 4 and 5 are idle spares
    assert used == {
        **{(str(i), ""): float(int(0.95 * 24 * GIB)) for i in range(4)},
        ("4", ""): 0.0,
        ("5", ""): 0.0,
    }
    assert sorted(procs) == [(str(i), "") for i in range(4)]
    assert len({p for pids in procs.values() for p in pids}) == 4
    busy = [_by_device(s, "inferwatch_gpu_utilization_ratio") for s in seen]
    assert any(all(u[(str(i), "")] > 0 for i in range(4)) for u in busy)
    assert all(u[("4", "")] == 0 == u[("5", "")] for u in busy)


def _colocate(samples: list, seen: list) -> None:
    used = _by_device(samples, "inferwatch_gpu_memory_used_bytes")
    assert used == {("0", ""): float(2 * int(0.45 * 24 * GIB))}
    assert len(_processes(samples)[("0", "")]) == 2


def _queues(samples: list) -> dict[str, float]:
    return {
        lab["worker"]: v
        for n, lab, v in samples
        if n == "inferwatch_queue_depth" and "worker" in lab
    }


def _host8(samples: list, seen: list) -> None:
    procs = _processes(samples)
    assert sorted(procs) == [(str(i), "") for i in range(8)]
    assert all(len(p) == 1 for p in procs.values())
    assert len({p for pids in procs.values() for p in pids}) == 8
    last = _queues(samples)
    assert sorted(last) == [f"worker-{i}" for i in range(8)]
    # the first worker is overloaded: its queue passes its batch; the others keep up
    assert max(_queues(s).get("worker-0", 0) for s in seen) > 20, last
    assert all(last[f"worker-{i}"] < 5 for i in range(1, 8)), last


def _mig(samples: list, seen: list) -> None:
    used = _by_device(samples, "inferwatch_gpu_memory_used_bytes")
    slice_used = float(int(0.9 * 40 * GIB))
    assert used[("0", "1")] == slice_used == used[("0", "2")]
    assert used[("0", "")] == 2 * slice_used
    procs = _processes(samples)
    assert sorted(procs) == [("0", "1"), ("0", "2")]
    modes = {lab.get("mig_mode") for n, lab, _ in samples if n == "inferwatch_gpu_info"}
    assert modes == {"enabled"}
    profiles = {
        lab.get("mig_profile")
        for n, lab, _ in samples
        if n == "inferwatch_gpu_memory_used_bytes" and lab.get("gpu_instance")
    }
    assert profiles == {"3g.40gb"}


LAYOUT_CHECKS = {"tp": _tp, "colocate": _colocate, "host8": _host8, "mig": _mig}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(LAYOUT_CHECKS))
def test_demo_layout_scenarios_show_their_layout(scenario: str) -> None:
    port = free_port()
    seen: list[list] = []

    def take(body: str) -> None:
        samples = _samples(body)
        if any(n == "inferwatch_gpu_process_memory_used_bytes" for n, _, _ in samples):
            seen.append(samples)

    result = demo_polled(port, take, 240, "--scenario", scenario, "--duration", "12")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert seen, "the agent never listed a GPU process"
    LAYOUT_CHECKS[scenario](seen[-1], seen)


def test_the_view_reads_each_worker_on_the_devices_its_layout_gave_it() -> None:
    text = """# TYPE inferwatch_gpu_utilization_ratio gauge
inferwatch_gpu_utilization_ratio{gpu="0",uuid="a"} 0.5
inferwatch_gpu_utilization_ratio{gpu="1",uuid="b"} 0.7
inferwatch_gpu_utilization_ratio{gpu="2",uuid="c"} 0.6
inferwatch_gpu_utilization_ratio{gpu="3",uuid="d"} 0.6
inferwatch_gpu_utilization_ratio{gpu="4",uuid="e"} 0.0
# TYPE inferwatch_gpu_memory_used_ratio gauge
inferwatch_gpu_memory_used_ratio{gpu="0",uuid="a"} 0.97
inferwatch_gpu_memory_used_ratio{gpu="1",uuid="b"} 0.98
inferwatch_gpu_memory_used_ratio{gpu="4",uuid="e"} 0.0
inferwatch_gpu_memory_used_ratio{gpu="0",gpu_instance="2",uuid="m"} 0.9
# TYPE inferwatch_gpu_sm_active_ratio gauge
inferwatch_gpu_sm_active_ratio{gpu="0",gpu_instance="2",uuid="m"} 0.4
"""
    tp = parse_agent_metrics(text, layout_for("tp"))["worker-tp"]
    assert tp.gpu_util == pytest.approx(0.6)  # the mean over its four ranks' GPUs
    assert tp.vram == 0.98  # the fullest of them
    mig = parse_agent_metrics(text, layout_for("mig"))
    assert mig["slice-rising"].gpu_util == 0.4  # a MIG device has SM active, no utilization
    assert mig["slice-rising"].vram == 0.9
    assert mig["slice-full"].gpu_util is None  # nothing reported for instance 1
    pair = parse_agent_metrics(text)
    assert (pair["worker-a"].gpu_util, pair["worker-b"].gpu_util) == (0.5, 0.7)
    for name in SCENARIOS:
        layout = layout_for(name)
        assert all(g < layout.gpu_count for w in layout.workers for g in w.gpus)
        assert {n for group in layout.loads for n in group.workers} == set(layout.names)
    with pytest.raises(ValueError):
        layout_for("nope")


# --------------------------------------------------------------------------- the live conditions

T = load_thresholds()
GENERATED_FOR = {
    rule["alert"]: rule.get("for", "0s")
    for group in yaml.safe_load((REPO / "alerts" / "inferwatch-alerts.yaml").read_text())["groups"]
    for rule in group["rules"]
}


def _seconds(text: str) -> float:
    """A rule file's duration (``1h30m``, ``2m``, ``30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([hms])", text)
    assert "".join(n + u for n, u in parts) == text, text
    return float(sum(int(n) * units[u] for n, u in parts))


def _overloaded() -> dict[str, Reading]:
    return {"w": Reading(up=True, queue=30, running=20, capacity=20, kv=0.5)}


def test_the_demo_waits_the_rule_files_for_of_each_alert() -> None:
    waits = alert_for(T)
    assert set(waits) == set(GENERATED_FOR)
    for alert, text in GENERATED_FOR.items():
        assert waits[alert] == _seconds(text), alert


def test_a_condition_is_pending_until_it_has_held_for_its_for_then_firing() -> None:
    wait = alert_for(T)[an.QUEUE_OVER_CAPACITY]
    assert wait > 0
    states = AlertStates(alert_for(T))

    def state(at: float) -> list[tuple[str, str, float]]:
        return [
            (s.condition.alert, s.state, s.held)
            for s in states.update(conditions(_overloaded(), T), at)
        ]

    assert state(100.0) == [(an.QUEUE_OVER_CAPACITY, PENDING, 0.0)]
    assert state(100.0 + wait - 1) == [(an.QUEUE_OVER_CAPACITY, PENDING, wait - 1)]
    assert state(100.0 + wait) == [(an.QUEUE_OVER_CAPACITY, FIRING, wait)]
    assert state(100.0 + 10 * wait) == [(an.QUEUE_OVER_CAPACITY, FIRING, 10 * wait)]


def test_a_condition_that_stops_holding_goes_back_to_nothing_and_waits_afresh() -> None:
    wait = alert_for(T)[an.QUEUE_OVER_CAPACITY]
    states = AlertStates(alert_for(T))
    states.update(conditions(_overloaded(), T), 0.0)
    assert states.update(conditions(_overloaded(), T), wait)[0].state == FIRING
    calm = {"w": Reading(up=True, queue=3, running=20, capacity=20, kv=0.5)}
    assert states.update(conditions(calm, T), wait + 1) == []
    again = states.update(conditions(_overloaded(), T), wait + 2)
    assert [(s.state, s.held) for s in again] == [(PENDING, 0.0)]


def test_an_alert_without_for_fires_at_once() -> None:
    states = AlertStates({"X": 0.0})
    [s] = states.update([Condition("X", "w", "why")], 5.0)
    assert (s.state, s.held, s.wait) == (FIRING, 0.0, 0.0)


def _slow_idle(uptime: float | None) -> Reading:
    """First tokens over both the SLO and the warm-up line on an idle GPU."""
    slow = {"0.5": 0.3, "0.95": 3.0, "0.99": 3.0}
    return Reading(
        up=True, gpu_util=0.35, queue=0, running=1, capacity=20, kv=0.1, uptime=uptime, ttft=slow
    )


def _alerts(r: Reading) -> set[str]:
    return {c.alert for c in conditions({"w": r}, T)}


def test_the_cold_start_window_is_the_rules() -> None:
    within = T.cold_start.within
    young = _alerts(_slow_idle(within - 1))
    assert an.WORKER_COLD_START in young
    # the rules' `unless young`: no SLO breach and no missing-warm-up alert while young
    assert not young & {an.TTFT_SLO_BREACH, an.TTFT_HIGH_GPU_IDLE}
    old = _alerts(_slow_idle(within))
    assert an.WORKER_COLD_START not in old
    assert {an.TTFT_SLO_BREACH, an.TTFT_HIGH_GPU_IDLE} <= old
    # no start time exported: never young, as `unless` on an absent series
    assert _alerts(_slow_idle(None)) == old
    # an overloaded young worker's slow tokens are queueing, not a cold start
    queued = _slow_idle(within - 1)
    queued.queue = 50
    assert an.WORKER_COLD_START not in _alerts(queued)


def test_the_view_reads_uptime_model_and_preemptions_from_the_agent() -> None:
    text = """# TYPE inferwatch_worker_start_time_seconds gauge
inferwatch_worker_start_time_seconds{worker="worker-a",model="m",engine="vllm"} 1000
# TYPE inferwatch_preemptions_total counter
inferwatch_preemptions_total{worker="worker-a",model="m",engine="vllm"} 7
# TYPE inferwatch_requests_running gauge
inferwatch_requests_running{worker="worker-a",model="m",engine="vllm"} 0
# TYPE inferwatch_target_up gauge
inferwatch_target_up{worker="worker-a"} 1
"""
    counters: dict[str, float] = {}
    r = parse_agent_metrics(text, now=1250.0, preemptions=counters)["worker-a"]
    assert (r.up, r.model, r.uptime) == (True, "m", 250.0)
    assert counters == {"worker-a": 7.0}


def test_the_preemption_rate_spans_the_stats_window() -> None:
    rate = CounterRate(30.0)
    assert rate.update(0.0, 10) is None  # one view: no rate yet
    assert rate.update(1.0, 10) == 0.0
    # a burst of 30 between two views a second apart: spread over the window, not 30/s
    for at in range(2, 30):
        rate.update(float(at), 10)
    assert rate.update(30.0, 40) == pytest.approx(1.0)
    # later views drop the oldest ones: the burst leaves the span
    for at in range(31, 62):
        last = rate.update(float(at), 40)
    assert last == 0.0
    assert rate.update(62.0, 3) is None  # the counter went down: a restart


@pytest.mark.slow
def test_the_live_view_shows_an_overload_pending_then_firing_after_its_for() -> None:
    """The real demo: the queue passes capacity, the condition shows pending first and
    firing once it has held for InferenceQueueOverCapacity's `for`."""
    import subprocess as sp
    import time

    port = free_port()
    proc = sp.Popen(
        inferwatch_cmd(
            "demo",
            "--scenario",
            "overload",
            "--duration",
            "240",
            "--no-live",
            "--listen",
            f"127.0.0.1:{port}",
        ),
        stdout=sp.PIPE,
        stderr=sp.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    alert = an.QUEUE_OVER_CAPACITY
    pending_at = firing_at = None
    lines = []
    deadline = time.monotonic() + 240
    try:
        for line in proc.stdout:
            lines.append(line)
            if pending_at is None and f"{alert}(pending)" in line:
                pending_at = time.monotonic()
            if f"{alert}(firing)" in line:
                firing_at = time.monotonic()
                break
            if time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)[0]
    out = "".join(lines) + rest
    # pending first: the view waits the alert's `for` (AlertStates' unit tests above
    # hold the exact wait; wall-clock gaps between status lines are no test)
    assert alert_for(T)[alert] > 0
    assert pending_at is not None and firing_at is not None, out[-3000:]
    assert pending_at < firing_at, out[-3000:]


def test_the_demo_alertmanager_keeps_the_shipped_inhibitions(tmp_path: Path) -> None:
    """Issue 29 item 8: the demo's Alertmanager runs the shipped example's inhibit rules
    (a queue page holds back the same worker's latency pages), and amtool accepts it."""
    from tests.support.proc import AMTOOL, require_binary

    from inferwatch.demo import demo_cmd

    shipped_path = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
    assert shipped_path == demo_cmd.SHIPPED_ALERTMANAGER
    shipped = yaml.safe_load(shipped_path.read_text())
    text = demo_cmd.alertmanager_config(shipped_path.read_text())
    cfg = yaml.safe_load(text)
    assert cfg["inhibit_rules"] == shipped["inhibit_rules"]
    assert cfg["route"]["group_by"] == shipped["route"]["group_by"]
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    amtool = require_binary(AMTOOL, "amtool")
    done = subprocess.run(
        [amtool, "check-config", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the demo's runbook links resolve to this checkout's pages
    assert (demo_cmd.RUNBOOKS_DIR / "InferenceQueueOverCapacity.md").is_file()
    assert (demo_cmd.RUNBOOKS_DIR / "InferenceQueueOverCapacity.html").is_file()
