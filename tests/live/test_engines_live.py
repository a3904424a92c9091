"""Each engine's exposition, served live and watched by a real agent subprocess (``engine: auto``).

The worker is the engine's simulator writer (``agent/inferwatch/sim/expo/<engine>.py``)
fed the same step of known statistics four times a second, served on the
engine's own path: ``inferwatch simulate --engine X`` where the simulator has
the writer registered, else a local server. Because every tick adds the same
work, the agent's window ratios, means and quantiles are known exactly; the
families an engine cannot tell must be absent, never zero.
"""

from __future__ import annotations

import importlib
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, http_get, inferwatch_cmd, wait_until
from tests.support.stubworker import QuietHandler, StubWorker, ThreadedServer

from inferwatch.sim.config import SimConfig
from inferwatch.sim.stats import EngineSnapshot, FinishedRequest, StepStats
from inferwatch.stats import histogram_quantile

# ------------------------------------------------------------------ one tick of known work
TTFT_BATCH = (0.15, 0.3, 0.3, 0.7)
ITL_BATCH = (0.03, 0.05)
FINISHED = FinishedRequest(
    finish_reason="stop",
    prompt_tokens=100,
    generation_tokens=20,
    cached_tokens=40,
    max_tokens_param=20,
    e2e=2.0,
    queue_time=0.5,
    prefill_time=0.3,
    decode_time=1.2,
    inference_time=1.5,
    mean_tpot=0.06,
    preemptions=0,
)
STEP = StepStats(
    engine=0,
    prompt_tokens=100,
    cached_prompt_tokens=40,
    generation_tokens=20,
    preemptions=1,
    ttfts=TTFT_BATCH,
    itls=ITL_BATCH,
    finished=(FINISHED,),
)
SNAPSHOT = EngineSnapshot(
    engine=0, running=3, waiting=5, kv_usage=0.25, blocks_in_use=100, num_gpu_blocks=400,
    max_num_seqs=20,
)  # fmt: skip


@dataclass(frozen=True)
class Expect:
    """What the agent must export for one engine, and what it must not."""

    engine: str
    #: the writer's format to serve
    fmt: str
    #: TTFT bucket bounds of the engine, in seconds (None: no TTFT histogram)
    ttft_bounds: tuple[float, ...] | None
    kv: bool
    max_num_seqs: bool
    finished: bool
    rejected: bool
    preemptions: bool
    tpot: bool
    e2e: bool
    queue_time: bool
    #: prompt tokens counted per tick
    prompt_per_tick: float
    #: ratio gauge -> its exact value
    ratios: dict[str, float] = field(default_factory=dict)
    #: TTFT observations per tick, as the engine measures them
    ttft_batch: tuple[float, ...] = TTFT_BATCH
    #: per-request prefill and decode time histograms (issue 23)
    phases: bool = False
    #: prompt and generation length histograms (issue 23)
    lengths: bool = False


def _bounds(module: str, name: str, scale: float = 1.0) -> tuple[float, ...]:
    mod = importlib.import_module(f"inferwatch.sim.expo.{module}")
    return tuple(float(b) * scale for b in getattr(mod, name))


HIT = {"inferwatch_prefix_cache_hit_ratio": 0.4}
EXPECT = {
    "sglang": Expect(
        "sglang", "tp2", _bounds("sglang", "TTFT_BUCKETS"), kv=True, max_num_seqs=False,
        finished=True, rejected=False, preemptions=True, tpot=True, e2e=True, queue_time=True,
        prompt_per_tick=100, ratios=HIT, lengths=True,
    ),
    "tgi": Expect(
        "tgi", "v3", None, kv=False, max_num_seqs=False, finished=True, rejected=True,
        preemptions=False, tpot=True, e2e=True, queue_time=True, prompt_per_tick=100,
        lengths=True,
    ),
    "llamacpp": Expect(
        "llamacpp", "server", None, kv=False, max_num_seqs=False, finished=False,
        rejected=False, preemptions=False, tpot=False, e2e=False, queue_time=False,
        prompt_per_tick=100,  # 60 evaluated + 40 from the cache, counted at prefill
        ratios={**HIT, "inferwatch_tpot_mean_seconds": 1.2 / 20},
    ),
    "triton": Expect(
        "triton", "histograms", _bounds("triton", "FIRST_RESPONSE_MS_BUCKETS", 1e-3), kv=True,
        max_num_seqs=True, finished=True, rejected=True, preemptions=False, tpot=False,
        e2e=False, queue_time=False, prompt_per_tick=100,
        ratios={"inferwatch_e2e_latency_mean_seconds": 2.0},
    ),
    "trtllm": Expect(
        "trtllm", "v1", _bounds("trtllm", "TTFT_BUCKETS"), kv=True, max_num_seqs=True,
        finished=True, rejected=False, preemptions=False, tpot=True, e2e=True, queue_time=True,
        prompt_per_tick=100, ratios=HIT,
        # per finished request: queue time + prefill time of FINISHED
        ttft_batch=(0.8,), phases=True,
    ),
    "nim": Expect(
        "nim", "v1", _bounds("nim", "TTFT_BUCKETS"), kv=True, max_num_seqs=True, finished=True,
        rejected=False, preemptions=False, tpot=True, e2e=True, queue_time=False,
        prompt_per_tick=100, lengths=True,
    ),
    "lmdeploy": Expect(
        "lmdeploy", "pytorch", _bounds("lmdeploy", "TTFT_BUCKETS"), kv=True, max_num_seqs=False,
        finished=True, rejected=False, preemptions=False, tpot=True, e2e=True, queue_time=True,
        prompt_per_tick=100, ratios=HIT, phases=True, lengths=True,
    ),
}  # fmt: skip


# ------------------------------------------------------------------ the worker side
class Feed:
    """An engine writer that does the same step of work at every tick of its thread."""

    def __init__(self, engine: str, fmt: str) -> None:
        module = importlib.import_module(f"inferwatch.sim.expo.{engine}")
        self.writer: Any = module.create(SimConfig(engine=engine, format=fmt))
        self.lock = threading.Lock()
        self.ticks = 0
        with self.lock:
            self.writer.on_rejection("max_num_queued_reqs")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            with self.lock:
                self.writer.on_step(0, STEP)
                self.ticks += 1

    def text(self) -> str:
        with self.lock:
            body: bytes = self.writer.render([SNAPSHOT]).body
        return body.decode()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class PathWorker(ThreadedServer):
    """Serves an exposition at one path (NIM's /v1/metrics, trtllm-serve's /prometheus/metrics).

    Like the real servers, ``/metrics`` answers something that is not the
    exposition: JSON iteration statistics for trtllm-serve, 404 otherwise.
    """

    def __init__(self, path: str, body: Callable[[], str], json_metrics: bool) -> None:
        worker = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if self.path == path:
                    data, ctype, status = body().encode(), "text/plain; version=0.0.4", 200
                elif self.path == "/metrics" and json_metrics:
                    data, ctype, status = (
                        json.dumps([{"iter": 1}]).encode(),
                        "application/json",
                        200,
                    )
                else:
                    data, ctype, status = b"not found", "text/plain", 404
                worker.paths.append(self.path)
                self.reply(status, data, ctype)

        self.paths: list[str] = []
        self.serve(Handler)


# ------------------------------------------------------------------ the agent side
Series = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> Series:
    status, body, _ = http_get(url + "/metrics")
    assert status == 200
    out: Series = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def worker_values(series: Series, name: str, **labels: str) -> list[float]:
    return [
        v
        for lab, v in series.get(name, [])
        if lab.get("worker") == "w" and all(lab.get(k) == x for k, x in labels.items())
    ]


def one(series: Series, name: str, **labels: str) -> float:
    values = worker_values(series, name, **labels)
    assert len(values) == 1, (name, labels, series.get(name))
    return values[0]


@pytest.fixture
def agent_for(make_agent: Callable[..., AgentRun]) -> Iterator[Callable[[str], str]]:
    started: list[AgentRun] = []

    def start(worker_url: str) -> str:
        agent = make_agent(
            "--worker", f"w={worker_url}",
            "--gpu-backend", "none", "--collect-interval", "0.2s", "--stats-window", "5s",
            ready="/readyz", timeout=30,
        )  # fmt: skip
        started.append(agent)
        return agent.url

    yield start
    for agent in started:
        agent.stop()
        assert "Traceback" not in agent.log(), agent.log()[-3000:]


def _serve(engine: str, feed: Feed) -> tuple[str, Callable[[], None], list[str] | None]:
    """The worker's URL, how to stop it, and the paths asked of it (path engines only)."""
    path = feed.writer.metrics_path
    if path == "/metrics":
        stub = StubWorker(feed.text)
        return stub.url, stub.stop, None
    worker = PathWorker(path, feed.text, json_metrics=engine == "trtllm")
    return worker.url, worker.stop, worker.paths


# ------------------------------------------------------------------ the tests
@pytest.mark.parametrize("engine", sorted(EXPECT))
def test_engine_watched_by_the_agent_exports_what_it_can_tell_and_nothing_else(
    engine: str, agent_for: Callable[[str], str]
) -> None:
    exp = EXPECT[engine]
    feed = Feed(engine, exp.fmt)
    worker_url, stop_worker, asked = _serve(engine, feed)
    try:
        agent = agent_for(worker_url)
        derived = [*exp.ratios, "inferwatch_queue_depth_slope"]
        if exp.ttft_bounds:
            derived.append("inferwatch_ttft_quantile_seconds")

        def ready() -> Series | None:
            s = scrape(agent)
            return s if all(worker_values(s, name) for name in derived) else None

        s = wait_until(ready, 30, message=f"{engine}: windows filled")
        if asked is not None:
            # engine: auto found the exposition after /metrics, then stayed with it
            path = feed.writer.metrics_path
            assert asked[0] == "/metrics" and path in asked, asked
            assert asked.count("/metrics") == 1, asked
        labels = {"engine": engine}
        assert one(s, "inferwatch_target_up") == 1
        assert one(s, "inferwatch_queue_depth", **labels) == 5
        assert one(s, "inferwatch_requests_running", **labels) == 3

        def present(name: str, yes: bool) -> None:
            got = worker_values(s, name, **labels)
            assert bool(got) == yes, (engine, name, got)

        present("inferwatch_kv_cache_usage_ratio", exp.kv)
        if exp.kv:
            assert one(s, "inferwatch_kv_cache_usage_ratio", **labels) == pytest.approx(0.25)
        present("inferwatch_max_num_seqs", exp.max_num_seqs)
        if exp.max_num_seqs:
            assert one(s, "inferwatch_max_num_seqs", **labels) == 20
        present("inferwatch_requests_finished_total", exp.finished)
        present("inferwatch_requests_rejected_total", exp.rejected)
        if exp.rejected:
            assert one(s, "inferwatch_requests_rejected_total", **labels) == 1
        present("inferwatch_preemptions_total", exp.preemptions)
        present("inferwatch_tpot_seconds_count", exp.tpot)
        present("inferwatch_e2e_latency_seconds_count", exp.e2e)
        present("inferwatch_queue_time_seconds_count", exp.queue_time)
        present("inferwatch_ttft_seconds_count", exp.ttft_bounds is not None)
        for name in ("inferwatch_prefill_time_seconds", "inferwatch_decode_time_seconds"):
            present(name + "_count", exp.phases)
        for name in ("inferwatch_prompt_length_tokens", "inferwatch_generation_length_tokens"):
            present(name + "_count", exp.lengths)
        for name in (
            "inferwatch_prefix_cache_hit_ratio",
            "inferwatch_tpot_mean_seconds",
            "inferwatch_e2e_latency_mean_seconds",
        ):
            present(name, name in exp.ratios)
        for name, value in exp.ratios.items():
            assert one(s, name, **labels) == pytest.approx(value, rel=1e-4), name

        prompt = one(s, "inferwatch_prompt_tokens_total", **labels)
        assert prompt > 0 and prompt % exp.prompt_per_tick == 0, prompt
        with feed.lock:
            ticks = feed.ticks
        assert prompt / exp.prompt_per_tick <= ticks
        if exp.finished:
            reasons = {
                lab["reason"]: v
                for lab, v in s["inferwatch_requests_finished_total"]
                if lab.get("worker") == "w"
            }
            assert sum(reasons.values()) > 0, reasons
        if exp.ttft_bounds:
            bounds = (*exp.ttft_bounds, float("inf"))
            cumulative = [float(sum(1 for o in exp.ttft_batch if o <= b)) for b in bounds]
            for q in (0.5, 0.99):
                want = histogram_quantile(q, list(zip(bounds, cumulative, strict=True)))
                got = one(s, "inferwatch_ttft_quantile_seconds", quantile=f"{q:g}", **labels)
                assert got == pytest.approx(want, rel=1e-9), (q, got, want)
    finally:
        stop_worker()
        feed.stop()


def test_an_unknown_exposition_keeps_the_target_down_and_says_what_was_seen(
    agent_for: Callable[[str], str], tmp_path: Path
) -> None:
    text = (
        "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n"
        "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 9\n"
    )
    stub = StubWorker(lambda: text)
    try:
        agent = agent_for(stub.url)

        def errors() -> float | None:
            got = worker_values(
                scrape(agent), "inferwatch_target_scrape_errors_total", reason="no_engine_metrics"
            )
            return got[0] if got and got[0] >= 2 else None

        wait_until(errors, 30, message="no_engine_metrics counted")
        s = scrape(agent)
        assert one(s, "inferwatch_target_up") == 0
        assert not worker_values(s, "inferwatch_queue_depth")
        log = "".join(p.read_text() for p in tmp_path.glob("agent-*.log"))
        # one warning naming what /metrics carried and what the other paths answered
        assert "go_goroutines" in log and "node_load1" in log, log[-2000:]
        assert "/v1/metrics" in log and "/prometheus/metrics" in log, log[-2000:]
        assert log.count("go_goroutines") == 1, log[-2000:]
    finally:
        stub.stop()


# ------------------------------------------------------------------ the real simulator
def _registered(engine: str) -> bool:
    from inferwatch.sim.expo import WRITERS

    return engine in WRITERS


def _complete(url: str, n: int) -> None:
    body = json.dumps(
        {"model": "sim", "prompt": "hello " * 50, "max_tokens": 8, "ignore_eos": True}
    ).encode()
    for _ in range(n):
        req = urllib.request.Request(
            url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200


@pytest.mark.parametrize("engine", sorted(EXPECT))
def test_inferwatch_simulate_engine_is_detected_and_mapped(
    engine: str, agent_for: Callable[[str], str], tmp_path: Path
) -> None:
    if not _registered(engine):
        pytest.skip(
            f"`inferwatch simulate --engine {engine}` needs {engine!r} in "
            "inferwatch.sim.expo.WRITERS (the simulator's registry)"
        )
    port = free_port()
    sim = Process(
        inferwatch_cmd(
            "simulate", "--engine", engine, "--port", str(port), "--model", "sim", "--time-scale", "0.05",
            "--cold-start-requests", "0",
        ),
        tmp_path / "sim.log",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_get(url + "/health")[0] == 200, 30, message="simulator up")
        agent = agent_for(url)
        _complete(url, 4)

        def mapped() -> Series | None:
            s = scrape(agent)
            tokens = worker_values(s, "inferwatch_generation_tokens_total", engine=engine)
            return s if tokens and tokens[0] >= 32 else None

        s = wait_until(mapped, 30, message=f"{engine}: tokens through the agent")
        assert one(s, "inferwatch_target_up") == 1
        assert worker_values(s, "inferwatch_queue_depth", engine=engine)
        exp = EXPECT[engine]
        present = bool(worker_values(s, "inferwatch_kv_cache_usage_ratio", engine=engine))
        assert present == exp.kv
    finally:
        sim.stop()
