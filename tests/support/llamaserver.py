"""llama.cpp's real ``llama-server`` for the live tests, and a client that counts.

The server and the tiny model come from ``tests/engines/llamacpp/setup.sh``
(built from the llama-cpp-python sdist, cached per machine), which leaves
links under ``.llama-server/`` in the repository. Without them the live tests
skip, except under ``CI=true``, where a missing server fails them: CI builds it.

The client speaks the server's own API (``POST /completion``, ``/tokenize``)
and adds up what each answer says it did (``timings.prompt_n``, ``cache_n``,
``predicted_n``), so the tests compare the engine's counters with the client's
counts, never with timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentrun import AgentRun
from tests.support.proc import REPO, Process, free_port, http_get, wait_answering, wait_until

from inferwatch.pack.reading import parse_exposition, total
from inferwatch.traces import read_trace

BUILD = REPO / ".llama-server"
SERVER = BUILD / "llama-server"
MODEL = BUILD / "tiny.gguf"
SETUP = "tests/engines/llamacpp/setup.sh"
#: the context shared by the slots: room for four requests of the tests' sizes
CTX = 4096


def require_server() -> None:
    """Skip (fail under CI=true) when setup.sh has not built the server here."""
    if SERVER.exists() and MODEL.exists():
        return
    message = f"llama-server is not built here: run {SETUP} (about 5-10 minutes, then cached)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; .ci/run builds it before the tests", pytrace=False)
    pytest.skip(message)


def trace_prompt_tokens(trace: Path) -> tuple[float, float]:
    """(prompt tokens processed, prompt tokens taken from the prompt cache) over a recorded
    trace: the increase of llama-server's two counters between the first and the last of
    its ``/metrics`` texts the trace holds."""
    names = ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total")
    seen = [
        counts
        for _, text in read_trace(trace).engine
        if None not in (counts := [total(parse_exposition(text), n) for n in names])
    ]
    assert len(seen) >= 2, f"{trace}: fewer than two scrapes of llama-server's counters"
    (processed0, cached0), (processed1, cached1) = seen[0], seen[-1]
    return processed1 - processed0, cached1 - cached0


def build_info() -> str:
    """The build's BUILD_INFO file (sdist version and hash, flags, build seconds)."""
    return (BUILD / "BUILD_INFO").read_text()


class LlamaServer:
    """One ``llama-server`` process on a fixed loopback port (a restart keeps its URL)."""

    def __init__(
        self,
        log_dir: Path,
        args: Sequence[str] = ("--metrics", "--parallel", "2"),
        env: dict[str, str] | None = None,
        name: str = "llama",
    ) -> None:
        self.log_dir = log_dir
        self.args = list(args)
        self.env = dict(env or {})
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None
        self._starts = 0

    def command(self) -> list[str]:
        # one thread: the machine is shared; the model is tiny
        return [
            str(SERVER), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(self.port),
            "-t", "1", "-c", str(CTX), "--no-ui", *self.args,
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> LlamaServer:
        if self.process is not None and self.process.alive():
            raise AssertionError(f"{self.name} is already running")
        self._starts += 1
        proc = Process(self.command(), self.log_dir / f"{self.name}.{self._starts}.log", self.env)
        self.process = proc
        wait_answering(proc, f"{self.url}/health", self.name, timeout)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.popen.pid

    def kill(self) -> None:
        """SIGKILL, as an OOM kill does."""
        assert self.process is not None and self.process.alive(), f"{self.name} is not running"
        self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def get(self, path: str) -> tuple[int, bytes]:
        status, body, _ = http_get(self.url + path, timeout=10)
        return status, body

    def props(self) -> dict[str, Any]:
        status, body = self.get("/props")
        assert status == 200, (status, body[:200])
        doc: dict[str, Any] = json.loads(body)
        return doc

    def metrics_text(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, (status, body[:300])
        return body.decode()

    def post(self, path: str, doc: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(doc).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
        return answer

    def n_tokens(self, prompt: str) -> int:
        """The prompt's length in the server's own tokens, BOS included."""
        return len(self.post("/tokenize", {"content": prompt, "add_special": True})["tokens"])


@dataclass
class Counted:
    """What the client sent and what the server's answers said they did."""

    requests: int = 0
    #: tokens_evaluated: the whole prompt, cached part included
    prompt: int = 0
    #: timings.prompt_n: the part evaluated; timings.cache_n: the part from the cache
    evaluated: int = 0
    cached: int = 0
    #: timings.predicted_n
    predicted: int = 0
    #: what the client asked for: requests x n_predict (ignore_eos, so all of it)
    asked: int = 0

    def add(self, answer: dict[str, Any], n_predict: int) -> None:
        t = answer["timings"]
        self.requests += 1
        self.prompt += int(answer["tokens_evaluated"])
        self.evaluated += int(t["prompt_n"])
        self.cached += int(t["cache_n"])
        self.predicted += int(t["predicted_n"])
        self.asked += n_predict


def completion(prompt: str, n_predict: int) -> dict[str, Any]:
    # ignore_eos: every request generates exactly n_predict tokens, whatever the model
    return {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "cache_prompt": True}


def run_load(
    server: LlamaServer, prompts: Sequence[str], n_predict: int, concurrency: int
) -> Counted:
    """Send every prompt once, ``concurrency`` at a time; the sum of the answers."""
    counted = Counted()
    lock = threading.Lock()
    todo = list(prompts)
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo or errors:
                    return
                prompt = todo.pop(0)
            try:
                answer = server.post("/completion", completion(prompt, n_predict))
            except BaseException as exc:
                with lock:
                    errors.append(exc)
                return
            with lock:
                counted.add(answer, n_predict)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors:
        raise AssertionError(f"a completion failed: {errors[0]!r}")
    if any(t.is_alive() for t in threads):
        raise AssertionError("the load did not finish within 300 s")
    return counted


class Pressure:
    """Keeps ``clients`` long completions outstanding until stopped (a queue that stays)."""

    def __init__(self, server: LlamaServer, clients: int, n_predict: int, prompt: str) -> None:
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self.done = 0
        body = completion(prompt, n_predict)

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    server.post("/completion", body)
                except BaseException as exc:
                    if not self._stop.is_set():
                        self.errors.append(exc)
                    return
                self.done += 1

        self._threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)


#: prompts that share a long prefix, so the slots' caches serve part of each
PREFIX = (
    "Capacity planning for a fleet of inference workers starts from the queue: "
    "when more requests wait than the batch can hold, the worker is overloaded. "
)
PROMPTS = tuple(
    f"{PREFIX}Question {i}: how many slots does worker {i % 3} have?" for i in range(12)
)


@contextlib.contextmanager
def proxied(tmp_path: Path, args: Sequence[str]) -> Iterator[tuple[LlamaServer, AgentRun, int]]:
    """llama-server (started with ``args``) behind the agent's measuring proxy: the server,
    the agent and the proxy's port once the proxy answers; both stopped at the end, and the
    agent's log free of tracebacks."""
    require_server()
    server = LlamaServer(tmp_path, list(args)).start()
    proxy_port = free_port()
    config = {
        "collect_interval": "0.5s",
        "gpu": {"backend": "none"},
        "workers": [{"name": "llama", "url": server.url, "engine": "llamacpp",
                     "proxy": {"listen": f"127.0.0.1:{proxy_port}"}}],
    }  # fmt: skip
    agent = AgentRun(tmp_path, config=config, ready=None)
    try:
        wait_until(lambda: http_get(f"http://127.0.0.1:{proxy_port}/health")[0] == 200, 60,
                   message="the proxy in front of llama-server")  # fmt: skip
        yield server, agent, proxy_port
    finally:
        agent.stop()
        server.stop()
    assert "Traceback" not in agent.log(), agent.log()[-3000:]
