"""`inferwatch demo` runs the whole loop and its agent serves the contract."""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.proc import REPO, free_port, http_get, inferwatch_cmd, wait_until

# Families the demo cannot produce without a fault, and why.
NOT_IN_DEMO = {
    "inferwatch_collect_errors_total": "exists only after a collector met an error",
    "inferwatch_gpu_xid_errors_total": "the demo's fake GPUs raise no XID events",
    "inferwatch_requests_rejected_total": "steady load stays under any admission limit",
    "inferwatch_tpot_mean_seconds": "only for engines without a TPOT histogram (llama.cpp)",
    "inferwatch_e2e_latency_mean_seconds": "only for engines without an E2E histogram (Triton)",
}


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


@pytest.mark.slow
def test_demo_runs_and_serves_every_contract_series(tmp_path: Path) -> None:
    port = free_port()
    seen: set[str] = set()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            try:
                status, body, _ = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            except OSError:  # not listening yet, or already stopped
                continue
            if status == 200:
                seen.update(families(body.decode()))

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    result = subprocess.run(
        inferwatch_cmd("demo", "--duration", "20", "--no-live", "--listen", f"127.0.0.1:{port}"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    stop.set()
    poller.join(5)
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


@pytest.mark.slow
def test_demo_stops_when_a_worker_cannot_start(tmp_path: Path) -> None:
    port = free_port()
    # occupy the agent's port so the agent cannot start: the demo must say so and exit 1
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        result = subprocess.run(
            inferwatch_cmd(
                "demo", "--duration", "15", "--no-live", "--listen", f"127.0.0.1:{port}"
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert "the agent did not start" in result.stdout


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
    prometheus = alertmanager = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        words = line.split()
        if words[:1] == ["prometheus"]:
            prometheus = words[1].removesuffix("/alerts")
        if words[:1] == ["alertmanager"]:
            alertmanager = words[1]
        if prometheus and alertmanager:
            break
    try:
        assert prometheus and alertmanager, "".join(lines)
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
