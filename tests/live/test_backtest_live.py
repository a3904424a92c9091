"""A live trace: the real llama-server, the agent and a streaming client, then the backtest.

llama.cpp's ``llama-server`` (CPU, the tiny model, 2 slots) behind ``inferwatch run``;
a client runs idle (nothing), steady (one request at a time, under the slots) and
overload (sixteen at a time, eight times the slots) phases, then idle again, about
three and a half minutes in all. The recorder keeps the agent's and the engine's
``/metrics`` each second and every request's client-side latencies, writes the
trace format of ``inferwatch.backtest.trace``, and the backtest replays it at the
deployment's intervals: the queue page must fire during the overload, nothing
critical outside it.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path

import pytest
from tests.support.agentrun import AgentRun
from tests.support.llamaserver import LlamaServer, require_server
from tests.support.proc import REPO
from tests.support.tracerec import StreamingClient, TraceRecorder

from inferwatch.backtest import rule_files, run_backtest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SLOTS = 2
PROMPT = "Write a short note on queueing in inference servers. " * 4
# The tiny model answers 48 tokens in about 14 ms on a CPU: with answers that short the
# closed-loop clients, not the slots, set the pace, and a client stalled for CPU (a busy
# CI machine) let the queue read empty at a sample in the middle of the overload. Answers
# of 256 tokens and sixteen clients keep the slots the bottleneck: in a run beside the
# unit backtest, with eight clients, 2 of 115 samples still read 2 or fewer waiting.
N_PREDICT = 256


def test_live_llamacpp_trace_backtests_clean(tmp_path: Path) -> None:
    require_server()
    started: list[object] = []
    try:
        server = LlamaServer(tmp_path, args=("--metrics", "--parallel", str(SLOTS)), name="llama")
        server.start()
        started.append(server)
        config = {
            "collect_interval": "0.5s",
            "gpu": {"backend": "none"},
            "workers": [{"name": "llama", "url": server.url}],
        }
        agent = AgentRun(tmp_path, config=config, ready="/readyz")
        started.append(agent)
        agent_url = agent.url
        trace = tmp_path / "llamacpp-live.jsonl.gz"
        rec = TraceRecorder(
            trace,
            agent_url,
            server.url,
            {"llama": {"engine": "llamacpp", "slots": SLOTS}},
            "tests/live/test_backtest_live.py: llama-server (CPU, tiny model) + inferwatch run",
        ).start()
        client = StreamingClient(rec, server.url, "llama", PROMPT, n_predict=N_PREDICT)
        rec.phase("idle", 20)
        rec.phase("steady", 40, client.run(1))
        rec.phase("overload", 120, client.run(8 * SLOTS))
        rec.phase("idle", 20)
        rec.stop()
    finally:
        for part in reversed(started):
            with contextlib.suppress(Exception):
                part.stop()  # type: ignore[attr-defined]

    with gzip.open(trace, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    clients = [r["client"] for r in rows[1:] if "client" in r]
    assert sum(1 for r in rows[1:] if "agent" in r) > 150
    assert clients and all(c["ok"] for c in clients)
    assert any(c["ttft_s"] is not None for c in clients)

    (score,) = run_backtest([trace], rule_files(str(REPO / "alerts")), 15.0, 15.0, jobs=1)
    # kept for a look (tests/artifacts/ is ignored): inferwatch backtest FILE replays it
    keep = REPO / "tests" / "artifacts"
    keep.mkdir(exist_ok=True)
    (keep / trace.name).write_bytes(trace.read_bytes())
    pages = sorted({(a, sev, t) for a, sev, t, _ in score.pages}, key=lambda p: p[2])
    print(f"live trace: {len(clients)} requests; pages {pages}")
    assert score.alerts["InferenceQueueOverCapacity"].detected, score.failures
    assert not score.failures, "\n".join(score.failures)
