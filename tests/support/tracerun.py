"""Record a serving run of the real ``llama-server`` as an inferwatch trace.

One server at a ``--parallel`` value, the agent watching it, an open-loop Poisson
load (a fixed seed: the same send times at every slot count) of streamed
completions with fixed prompt and answer lengths; the agent's and the server's
``/metrics`` every ``scrape_interval`` seconds and every request's client-side
TTFT, TPOT and end-to-end time go into a trace (:mod:`inferwatch.traces`).
Used by ``bench/bench_whatif.py record`` and ``tests/live/test_whatif_live.py``.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.agentrun import AgentRun
from tests.support.llamaserver import LlamaServer
from tests.support.proc import http_get

from inferwatch.traces import write_trace


@dataclass(frozen=True)
class OpenLoad:
    """An open-loop load: Poisson sends at ``rate`` per second for ``seconds``."""

    rate: float
    seconds: float
    prompt_words: int = 160
    n_predict: int = 128
    seed: int = 7
    #: streamed answers time the first token at the client; unstreamed ones (cheaper
    #: for a client on a busy 2-core machine) take TTFT as the end-to-end time less the
    #: server's generation time (``timings.predicted_ms``)
    stream: bool = False

    def send_times(self) -> list[float]:
        rng = random.Random(self.seed)
        out, t = [], 0.0
        while True:
            t += rng.expovariate(self.rate)
            if t >= self.seconds:
                return out
            out.append(t)

    def prompt(self, i: int) -> str:
        rng = random.Random(self.seed * 100_003 + i)
        words = ("queue", "slot", "batch", "token", "cache", "worker", "prompt", "answer")
        return f"Request {i}: " + " ".join(rng.choice(words) for _ in range(self.prompt_words))


def watching(tmp: Path, worker: str, url: str) -> AgentRun:
    """``inferwatch run`` watching one worker (no GPU), answering /readyz."""
    config = {
        "collect_interval": "0.5s",
        "stats_window": "30s",
        "gpu": {"backend": "none"},
        "workers": [{"name": worker, "url": url}],
    }
    return AgentRun(tmp, config=config, ready="/readyz")


def stream_completion(
    port: int, prompt: str, n_predict: int, timeout: float, stream: bool = True
) -> dict[str, Any]:
    """One ``/completion``: client-side TTFT, TPOT and end-to-end time (see OpenLoad.stream)."""
    body = json.dumps(
        {
            "prompt": prompt,
            "n_predict": n_predict,
            "ignore_eos": True,
            "cache_prompt": False,
            "stream": stream,
        }
    )
    sent = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    first: float | None = None
    last: dict[str, Any] = {}
    try:
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return {"ok": False, "status": resp.status}
        if not stream:
            last = json.loads(resp.read())
            end = time.monotonic()
            timings = last.get("timings") or {}
            gen = int(timings.get("predicted_n") or 0)
            gen_s = float(timings.get("predicted_ms") or 0.0) / 1000
            return {
                "ok": gen > 0,
                "ttft_s": round(max(end - sent - gen_s, 0.0), 5),
                "tpot_s": round(gen_s / max(gen - 1, 1), 6),
                "e2e_s": round(end - sent, 5),
                "prompt_tokens": int(timings.get("prompt_n") or 0),
                "gen_tokens": gen,
            }
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            event = json.loads(line[5:])
            if first is None:
                first = time.monotonic()
            last = event
            if event.get("stop"):
                break
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return {"ok": False, "error": type(exc).__name__}
    finally:
        conn.close()
    end = time.monotonic()
    timings = last.get("timings") or {}
    gen = int(timings.get("predicted_n") or last.get("tokens_predicted") or 0)
    prompt_n = int(timings.get("prompt_n") or last.get("tokens_evaluated") or 0)
    if first is None or gen <= 0:
        return {"ok": False, "error": "no tokens"}
    ttft = first - sent
    return {
        "ok": True,
        "ttft_s": round(ttft, 5),
        "tpot_s": round((end - first) / max(gen - 1, 1), 6),
        "e2e_s": round(end - sent, 5),
        "prompt_tokens": prompt_n,
        "gen_tokens": gen,
    }


def carried_rate(tmp: Path, slots: int, load: OpenLoad, seconds: float = 8.0) -> float:
    """Requests a second a fresh ``llama-server --parallel slots`` completes with every slot
    kept busy (``slots`` closed-loop clients sending ``load``'s requests for ``seconds``):
    what this machine carries now, so a test's open load can be set past it wherever it
    runs (the tiny model's speed on a shared CPU moves several-fold with what else runs)."""
    tmp.mkdir(parents=True, exist_ok=True)
    server = LlamaServer(tmp, ("--metrics", "--parallel", str(slots)), name=f"llama-c{slots}")
    server.start()
    done: list[bool] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        i = k
        while time.monotonic() < end:
            answer = stream_completion(server.port, load.prompt(i), load.n_predict, 60, load.stream)
            with lock:
                done.append(bool(answer["ok"]) and time.monotonic() <= end)
            i += slots

    try:
        start = time.monotonic()
        end = start + seconds
        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(slots)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(seconds + 60)
    finally:
        server.stop()
    return sum(done) / seconds


def record(
    path: Path,
    tmp: Path,
    slots: int,
    load: OpenLoad,
    scrape_interval: float = 1.0,
    settle: float = 3.0,
    timeout: float = 300.0,
) -> Path:
    """Run ``load`` against a fresh ``llama-server --parallel slots``; write the trace."""
    worker = "llama"
    tmp.mkdir(parents=True, exist_ok=True)
    server = LlamaServer(tmp, ("--metrics", "--parallel", str(slots)), name=f"llama-p{slots}")
    server.start()
    agent = watching(tmp, worker, server.url)
    lock = threading.Lock()
    records: list[tuple[float, str, Any]] = []
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            t = time.time()
            for kind, url in (("agent", agent.url), ("engine", server.url)):
                status, body, _ = http_get(url + "/metrics", timeout=5)
                if status == 200:
                    with lock:
                        records.append((t, kind, body.decode()))
            stop.wait(max(0.0, scrape_interval - (time.time() - t)))

    def client(i: int, when: float) -> None:
        answer = stream_completion(
            server.port, load.prompt(i), load.n_predict, timeout, load.stream
        )
        answer["worker"] = worker
        with lock:
            records.append((when, "client", answer))

    try:
        scrape_thread = threading.Thread(target=scraper, daemon=True)
        scrape_thread.start()
        time.sleep(settle)
        start = time.time()
        threads = []
        for i, offset in enumerate(load.send_times()):
            delay = start + offset - time.time()
            if delay > 0:
                time.sleep(delay)
            th = threading.Thread(target=client, args=(i, time.time()), daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join(max(1.0, start + timeout - time.time()))
        end = time.time()
        time.sleep(settle)
        stop.set()
        scrape_thread.join(10)
    finally:
        stop.set()
        agent.stop()
        server.stop()
    header = {
        "scrape_interval_s": scrape_interval,
        "source": f"llama-server CPU (tests/support/tracerun.py), rate {load.rate}/s, "
        f"{load.seconds}s, prompt {load.prompt_words} words, n_predict {load.n_predict}",
        "phases": [{"name": "load", "start": start, "end": end}],
        "workers": {worker: {"engine": "llamacpp", "slots": slots}},
        "load": {
            "stream": load.stream,
            "rate": load.rate,
            "seconds": load.seconds,
            "n_predict": load.n_predict,
            "seed": load.seed,
        },
    }
    return write_trace(path, header, records)
