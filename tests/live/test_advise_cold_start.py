"""Issue 29 item 3: the InferenceWorkerColdStart runbook's `inferwatch advise --agent-url`
step, run when the alert fires, sees the cold start the alert saw.

The alert fires at least cold_start.cold_start_for after the slow first tokens; by then
they have left the agent's stats window (60 s, 30 s in the demo), so advise saw an idle
young worker and told it to scale in, which the same runbook warns against. Here a real
simulator serves its cold first requests to a real agent with a 4 s stats window, and
advise reads the agent after the window has let them go: it names the cold start from
the worker's since-start TTFT (the engine's cumulative buckets, for a worker within
cold_start.within) and never says "scale in" to a worker within its cold-start window.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until

from inferwatch.advise import WorkerPicture, advise
from inferwatch.pack.thresholds import load_thresholds
from inferwatch.sim.loadgen import run_load

T = load_thresholds()
#: the simulator's clock runs 4x faster than real time; the latency lines scale with it
TIME_SCALE = 0.25
STATS_WINDOW = 4.0


def test_a_young_idle_worker_is_never_told_to_scale_in() -> None:
    young = WorkerPicture(
        worker="w", instance="a:10127", model="m", gpu_utilization=0.02, uptime_seconds=180
    )
    (rec,) = advise([young], T)
    assert rec.id == "consolidate"
    assert not any("Or scale in" in a for a in rec.actions), rec.actions
    assert any(a.startswith("Do not scale in yet: the worker started") for a in rec.actions)
    assert (
        "worker uptime 180.00 s < 600.00 s (cold_start.within) "
        "[inferwatch_worker_start_time_seconds]" in [e.text() for e in rec.evidence]
    )
    old = WorkerPicture(
        worker="w", instance="a:10127", model="m", gpu_utilization=0.02, uptime_seconds=86400
    )
    (rec,) = advise([old], T)
    assert any("Or scale in" in a for a in rec.actions)


def test_the_since_start_figure_counts_only_within_the_cold_start_window() -> None:
    base: dict[str, Any] = {"worker": "w", "instance": "a:10127", "model": "m"}
    young = WorkerPicture(**base, ttft_p95=0.1, ttft_p95_since_start=4.0, uptime_seconds=200)
    assert {r.id for r in advise([young], T)} == {"cold_start"}
    # a worker up for hours: its lifetime says nothing about a cold start now
    old = WorkerPicture(**base, ttft_p95=0.1, ttft_p95_since_start=4.0, uptime_seconds=7200)
    assert "cold_start" not in {r.id for r in advise([old], T)}


@pytest.mark.slow
def test_advise_from_the_agent_sees_the_cold_start_the_alert_saw(tmp_path: Path) -> None:
    state = tmp_path / "gpus"
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text(
        yaml.safe_dump(
            {
                "ttft": {
                    "p99_slo_seconds": T.ttft.p99_slo_seconds * TIME_SCALE,
                    "warmup_p95_seconds": T.ttft.warmup_p95_seconds * TIME_SCALE,
                }
            }
        )
    )
    sim = Process(
        inferwatch_cmd(
            "simulate", "--port", str(sim_port), "--model", "model-cold",
            "--max-num-seqs", "20", "--time-scale", str(TIME_SCALE),
            "--gpu-state-dir", str(state), "--gpu-index", "0", "--seed", "3",
            "--no-enable-prefix-caching",
            "--cold-start-requests", "3", "--cold-start-seconds", "4.6",
        ),
        tmp_path / "sim.log",
    )  # fmt: skip
    agent = AgentRun(
        tmp_path,
        "--gpu-backend", "fake", "--fake-gpus", "1", "--fake-gpu-state", str(state),
        "--collect-interval", "500ms", "--stats-window", f"{STATS_WINDOW:g}s",
        "--worker", f"cold={sim_url}",
        ready=None,
    )  # fmt: skip
    agent_url = agent.url
    try:

        def metrics() -> str:
            for p in (sim, agent):
                if not p.alive():
                    raise AssertionError(f"{p.args[3]} exited:\n{p.log()[-2000:]}")
            status, body, _ = http_get(f"{agent_url}/metrics", timeout=2)
            return body.decode() if status == 200 else ""

        wait_until(
            lambda: (
                'inferwatch_target_up{worker="cold"} 1.0' in (text := metrics())
                and "inferwatch_worker_start_time_seconds{" in text
            ),
            timeout=90,
            message="the agent watching the simulator",
        )
        # the cold requests and a few warm ones
        asyncio.run(run_load([sim_url], "cold-start", 6.0, time_scale=TIME_SCALE, seed=7, drain=5))
        ended = time.time()
        wait_until(lambda: time.time() > ended + STATS_WINDOW + 2, timeout=30, message="the window")
        # what the defect saw: the agent's window quantile no longer holds the cold start
        window = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics().splitlines()
            if line.startswith("inferwatch_ttft_quantile_seconds{") and 'quantile="0.95"' in line
        ]
        line = T.ttft.warmup_p95_seconds * TIME_SCALE
        assert not [v for v in window if v > line], window
        done = subprocess.run(
            inferwatch_cmd(
                "advise", "--agent-url", agent_url, "--json", "--thresholds", str(thresholds)
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        recs = {r["id"]: r for r in doc["recommendations"]}
        assert "cold_start" in recs, json.dumps(doc, indent=1)
        evidence = [e["text"] for e in recs["cold_start"]["evidence"]]
        assert any(e.startswith("TTFT P95 since the start (") for e in evidence), evidence
        actions = [a for r in doc["recommendations"] for a in r["actions"]]
        assert not any("Or scale in" in a for a in actions), actions
    finally:
        agent.stop()
        sim.stop()
