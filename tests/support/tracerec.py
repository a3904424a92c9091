"""Record a backtest trace from live parts: the agent's /metrics, the engine's, a client.

Writes the trace format of :mod:`inferwatch.traces` (gzip'd JSON lines, a header
with the phases). :class:`TraceRecorder` polls the agent's and the engine's
``/metrics`` once a second in a thread; :class:`StreamingClient` sends
``/completion`` requests with ``stream: true`` to a llama.cpp server, a fixed number
at a time (closed loop), and records each one's time to first token, time per
output token and end-to-end latency as the client saw them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.proc import http_get

from inferwatch.traces import write_trace


class TraceRecorder:
    def __init__(
        self,
        path: Path,
        agent_url: str,
        engine_url: str | None,
        workers: dict[str, dict[str, Any]],
        source: str,
        every: float = 1.0,
    ) -> None:
        self.path = path
        self.agent_url = agent_url
        self.engine_url = engine_url
        self.workers = workers
        self.source = source
        self.every = every
        self.phases: list[dict[str, Any]] = []
        self.rows: list[tuple[float, str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> TraceRecorder:
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            status, body, _ = http_get(self.agent_url + "/metrics", timeout=5)
            if status == 200:
                self._add((t, "agent", body.decode()))
            if self.engine_url:
                status, body, _ = http_get(self.engine_url + "/metrics", timeout=5)
                if status == 200:
                    self._add((t, "engine", body.decode()))
            self._stop.wait(max(0.0, self.every - (time.time() - t)))

    def _add(self, row: tuple[float, str, Any]) -> None:
        with self._lock:
            self.rows.append(row)

    def client(self, record: dict[str, Any]) -> None:
        self._add((time.time(), "client", record))

    def phase(self, name: str, seconds: float, during: Any = None) -> None:
        """Run one phase: ``during`` (a callable taking the stop time) or just wait."""
        start = time.time()
        if during is not None:
            during(start + seconds)
        else:
            time.sleep(seconds)
        self.phases.append({"name": name, "start": start, "end": time.time()})

    def stop(self) -> Path:
        self._stop.set()
        self._thread.join(30)
        header = {
            "scrape_interval_s": self.every,
            "source": self.source,
            "phases": self.phases,
            "workers": self.workers,
        }
        with self._lock:
            rows = list(self.rows)
        return write_trace(self.path, header, rows)


def stream_completion(url: str, prompt: str, n_predict: int) -> dict[str, Any]:
    """One streamed completion: the client's own TTFT, TPOT and end-to-end latency."""
    body = {
        "prompt": prompt,
        "n_predict": n_predict,
        "ignore_eos": True,
        "stream": True,
        "cache_prompt": False,
    }
    req = urllib.request.Request(
        url + "/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    sent = time.time()
    first: float | None = None
    tokens = 0
    prompt_tokens = 0
    ok = True
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            for raw in resp:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                doc = json.loads(line[5:])
                if doc.get("content"):
                    tokens += 1
                    if first is None:
                        first = time.time()
                if doc.get("stop"):
                    prompt_tokens = int(doc.get("tokens_evaluated", 0))
                    tokens = int(doc.get("timings", {}).get("predicted_n", tokens))
    except OSError:
        ok = False
    end = time.time()
    ttft = None if first is None else first - sent
    tpot = None if first is None or tokens < 2 else (end - first) / (tokens - 1)
    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": end - sent,
        "prompt_tokens": prompt_tokens,
        "gen_tokens": tokens,
        "ok": ok,
    }


class StreamingClient:
    """``concurrency`` closed-loop clients until a stop time, each answer recorded."""

    def __init__(self, rec: TraceRecorder, url: str, worker: str, prompt: str, n_predict: int):
        self.rec = rec
        self.url = url
        self.worker = worker
        self.prompt = prompt
        self.n_predict = n_predict

    def run(self, concurrency: int) -> Any:
        def during(until: float) -> None:
            def loop() -> None:
                while time.time() < until:
                    answer = stream_completion(self.url, self.prompt, self.n_predict)
                    self.rec.client({"worker": self.worker, **answer})

            threads = [threading.Thread(target=loop, daemon=True) for _ in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(until - time.time() + 300)

        return during
