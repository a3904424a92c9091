"""The agent against llama.cpp's real ``llama-server`` (CPU, tiny model), no simulator.

The server is built from the llama-cpp-python sdist by
``tests/engines/llamacpp/setup.sh`` (``.ci/run`` runs it); without it these
tests skip, or fail under ``CI=true``. Load comes from our own client in
bounded amounts; every check compares counters with counters (the agent's,
the server's raw ``/metrics``, the client's sums of what each answer said),
never timings: the machine is shared and slow.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.e2e import E2E_THRESHOLDS, generate_rule_files
from tests.support.llamaserver import (
    PROMPTS,
    Counted,
    LlamaServer,
    Pressure,
    require_server,
    run_load,
)
from tests.support.proc import (
    PROMETHEUS,
    REPO,
    Prometheus,
    http_get,
    require_binary,
    wait_until,
)
from tests.support.stack import render_prometheus_config

from inferwatch.engines.launchflags import parse_launch
from inferwatch.pack.thresholds import load_thresholds

pytestmark = pytest.mark.slow

Series = dict[str, list[tuple[dict[str, str], float]]]

#: families the agent must export for llama.cpp (docs/engines.md, "What each engine tells")
GIVEN = (
    "inferwatch_queue_depth",
    "inferwatch_queue_depth_slope",
    "inferwatch_requests_running",
    "inferwatch_max_num_seqs",
    "inferwatch_prompt_tokens_total",
    "inferwatch_generation_tokens_total",
    "inferwatch_prefix_cache_hit_ratio",
    "inferwatch_tpot_mean_seconds",
)
#: what llama.cpp cannot tell: absent, never zero
ABSENT = (
    "inferwatch_kv_cache_usage_ratio",
    "inferwatch_preemptions_total",
    "inferwatch_requests_finished_total",
    "inferwatch_requests_rejected_total",
    "inferwatch_ttft_seconds_count",
    "inferwatch_tpot_seconds_count",
    "inferwatch_e2e_latency_seconds_count",
    "inferwatch_queue_time_seconds_count",
)


#: alerts that need a signal llama.cpp lacks (TTFT, TPOT histogram, latency, preemptions,
#: errors): silent for it (docs/engines.md, "Alerts on signals an engine lacks")
SILENT_FOR_LLAMACPP = (
    "InferenceTTFTSLOBreach",
    "InferenceTTFTHighGPUIdle",
    "InferenceTPOTSLOBreach",
    "InferenceLatencyLongTail",
    "InferenceWorkerColdStart",
    "InferenceKVCachePreemptions",
    "InferenceRequestErrors",
)


def parse(text: str) -> Series:
    out: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def raw(server: LlamaServer) -> dict[str, float]:
    """The server's own samples by name (llama.cpp's have no labels)."""
    return {name: series[0][1] for name, series in parse(server.metrics_text()).items()}


class Agent:
    """``inferwatch run`` watching some workers, with engine: auto and no capacity set."""

    def __init__(self, tmp: Path, workers: dict[str, str], window: str = "30s") -> None:
        config = {
            "collect_interval": "0.5s",
            "stats_window": window,
            "gpu": {"backend": "none"},
            "workers": [{"name": n, "url": u} for n, u in workers.items()],
        }
        self.run = AgentRun(tmp, config=config, ready="/readyz")
        self.process = self.run.process
        self.port, self.target, self.url = self.run.port, self.run.target, self.run.url

    def scrape(self) -> Series:
        status, body, _ = http_get(self.url + "/metrics")
        assert status == 200
        return parse(body.decode())

    def log(self) -> str:
        return self.process.log()

    def stop(self) -> None:
        self.process.stop()
        assert "Traceback" not in self.log(), self.log()[-3000:]


def of(series: Series, name: str, worker: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [
        (lab, v)
        for lab, v in series.get(name, [])
        if lab.get("worker") == worker and all(lab.get(k) == x for k, x in labels.items())
    ]


def one(series: Series, name: str, worker: str, **labels: str) -> float:
    found = of(series, name, worker, **labels)
    assert len(found) == 1, (name, worker, labels, series.get(name))
    return found[0][1]


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[list[Any]]:
    """Things a test starts; stopped in reverse order afterwards."""
    require_server()
    started: list[Any] = []
    yield started
    for part in reversed(started):
        with contextlib.suppress(Exception):
            part.stop()


def settled(agent: Agent, server: LlamaServer, worker: str) -> tuple[Series, dict[str, float]]:
    """Agent and raw exposition once the agent has scraped the idle server's final counts."""

    last: list[object] = []

    def same() -> tuple[Series, dict[str, float]] | None:
        r = raw(server)
        s = agent.scrape()
        prompt = of(s, "inferwatch_prompt_tokens_total", worker)
        gen = of(s, "inferwatch_generation_tokens_total", worker)
        want = r["llamacpp:prompt_tokens_total"] + r["llamacpp:prompt_tokens_cached_total"]
        last[:] = [("agent", prompt, gen), ("server", want, r["llamacpp:tokens_predicted_total"])]
        if not prompt or not gen:
            return None
        if prompt[0][1] != want or gen[0][1] != r["llamacpp:tokens_predicted_total"]:
            return None
        return s, r

    try:
        return wait_until(same, 60, interval=0.3, message=f"agent caught up with {worker}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last prompt/generated counts: {last}") from None


# --------------------------------------------------------------------------- mapping
def test_every_series_llamacpp_gives_matches_the_server_and_the_client(
    tmp_path: Path, parts: list[Any]
) -> None:
    server = LlamaServer(tmp_path, ["--metrics", "--parallel", "2", "-a", "tiny-alias"])
    parts.append(server.start())
    agent = Agent(tmp_path, {"w": server.url})
    parts.append(agent)
    wait_until(lambda: one(agent.scrape(), "inferwatch_target_up", "w") == 1, 30, message="up")

    counted = run_load(server, PROMPTS, n_predict=48, concurrency=3)
    s, r = settled(agent, server, "w")

    # the client's sums, the server's counters and the agent's agree
    assert counted.requests == len(PROMPTS)
    assert counted.predicted == counted.asked == r["llamacpp:tokens_predicted_total"]
    assert counted.evaluated == r["llamacpp:prompt_tokens_total"]
    assert counted.cached == r["llamacpp:prompt_tokens_cached_total"] > 0
    assert counted.prompt == counted.evaluated + counted.cached
    assert one(s, "inferwatch_prompt_tokens_total", "w") == counted.prompt
    assert one(s, "inferwatch_generation_tokens_total", "w") == counted.predicted
    # the prompts' lengths in the server's tokens: what the client sent
    assert counted.prompt == sum(server.n_tokens(p) for p in PROMPTS)

    # window values from counters (the window still holds the idle samples before the load)
    hit = one(s, "inferwatch_prefix_cache_hit_ratio", "w")
    assert hit == pytest.approx(counted.cached / counted.prompt, rel=1e-9)
    tpot = one(s, "inferwatch_tpot_mean_seconds", "w")
    want = r["llamacpp:tokens_predicted_seconds_total"] / r["llamacpp:tokens_predicted_total"]
    assert tpot == pytest.approx(want, rel=1e-3)  # the server prints six digits
    assert one(s, "inferwatch_queue_depth", "w") == r["llamacpp:requests_deferred"] == 0
    assert one(s, "inferwatch_requests_running", "w") == r["llamacpp:requests_processing"] == 0
    assert one(s, "inferwatch_max_num_seqs", "w") == 2  # --parallel 2

    for name in GIVEN:
        assert of(s, name, "w"), f"{name} missing"
    for name in ABSENT:
        assert not of(s, name, "w"), f"{name} present for llama.cpp: {of(s, name, 'w')}"

    # engine: auto found llama.cpp; every engine series names the served model (-a),
    # as worker_info and the process series do: joins by model work
    for name in GIVEN:
        for labels, _ in of(s, name, "w"):
            assert labels["engine"] == "llamacpp", (name, labels)
            assert labels["model"] == "tiny-alias", (name, labels)
    info = of(s, "inferwatch_worker_info", "w")
    assert len(info) == 1, s.get("inferwatch_worker_info")
    labels = info[0][0]
    props = server.props()
    assert labels["engine"] == "llamacpp" and labels["model"] == "tiny-alias"
    assert labels["version"] == props["build_info"] != ""
    assert labels["max_num_seqs"] == "2"
    assert labels["pid"] == str(server.pid)
    for name in ("inferwatch_worker_cpu_seconds_total", "inferwatch_worker_start_time_seconds"):
        assert [lab["model"] for lab, _ in of(s, name, "w")] == ["tiny-alias"], name


# --------------------------------------------------------------------------- capacity
def test_capacity_from_flags_environment_and_props(tmp_path: Path, parts: list[Any]) -> None:
    # no --parallel: the server picks its slot count and says it in /props only
    auto = LlamaServer(tmp_path, ["--metrics"], name="auto")
    # both settings from the environment, LLAMA_ARG_ENDPOINT_METRICS instead of --metrics
    env = LlamaServer(
        tmp_path,
        [],
        env={"LLAMA_ARG_N_PARALLEL": "3", "LLAMA_ARG_ENDPOINT_METRICS": "1"},
        name="env",
    )
    for server in (auto, env):
        parts.append(server.start())
    agent = Agent(tmp_path, {"auto": auto.url, "env": env.url})
    parts.append(agent)

    total = auto.props()["total_slots"]
    assert isinstance(total, int) and total > 0
    assert env.props()["total_slots"] == 3

    def capacities() -> dict[str, float] | None:
        s = agent.scrape()
        got = {w: of(s, "inferwatch_max_num_seqs", w) for w in ("auto", "env")}
        return {w: v[0][1] for w, v in got.items()} if all(got.values()) else None

    assert wait_until(capacities, 30, message="both capacities") == {"auto": total, "env": 3}
    s = agent.scrape()
    assert one(s, "inferwatch_target_up", "env") == 1  # metrics on from the environment
    infos = {w: of(s, "inferwatch_worker_info", w)[0][0] for w in ("auto", "env")}
    assert infos["auto"]["max_num_seqs"] == str(total)
    assert infos["env"]["max_num_seqs"] == "3"

    # the launch-flag reader on the real process: command line + environment
    proc = psutil.Process(env.pid)
    launch = parse_launch(proc.cmdline(), environ=proc.environ())
    assert launch is not None and launch.engine == "llamacpp"
    assert launch.max_num_seqs == 3
    assert launch.extra.get("metrics") == "true"
    plain = psutil.Process(auto.pid)
    assert parse_launch(plain.cmdline(), environ=plain.environ()).max_num_seqs is None  # type: ignore[union-attr]


# --------------------------------------------------------------------------- restart
def test_a_restart_resets_the_counters_and_rereads_props(tmp_path: Path, parts: list[Any]) -> None:
    server = LlamaServer(tmp_path, ["--metrics", "--parallel", "2"])
    parts.append(server.start())
    agent = Agent(tmp_path, {"w": server.url})
    parts.append(agent)
    first = run_load(server, PROMPTS[:4], n_predict=32, concurrency=2)
    s, _ = settled(agent, server, "w")
    assert one(s, "inferwatch_generation_tokens_total", "w") == first.predicted > 0
    assert one(s, "inferwatch_max_num_seqs", "w") == 2

    server.kill()
    wait_until(
        lambda: one(agent.scrape(), "inferwatch_target_up", "w") == 0, 30, message="seen down"
    )
    s = agent.scrape()
    assert not of(s, "inferwatch_generation_tokens_total", "w")  # nothing stale while down

    server.args = ["--metrics", "--parallel", "3"]
    server.start()
    second: Counted = run_load(server, PROMPTS[4:6], n_predict=16, concurrency=1)
    s, r = settled(agent, server, "w")
    # the new process's counts only: the counters started again from zero
    assert one(s, "inferwatch_generation_tokens_total", "w") == second.predicted
    assert r["llamacpp:tokens_predicted_total"] == second.predicted < first.predicted
    assert one(s, "inferwatch_prompt_tokens_total", "w") == second.prompt

    # the restarted process's own flags and account of itself, not the old one's
    # (the process source finds the new pid on its own timer)
    def renewed() -> Series | None:
        s = agent.scrape()
        info = of(s, "inferwatch_worker_info", "w")
        return s if info and info[0][0]["pid"] == str(server.pid) else None

    s = wait_until(renewed, 30, message="the new process found")
    assert one(s, "inferwatch_max_num_seqs", "w") == 3
    assert of(s, "inferwatch_worker_info", "w")[0][0]["max_num_seqs"] == "3"
    assert server.props()["total_slots"] == 3


# --------------------------------------------------------------------------- no --metrics
def test_without_metrics_the_worker_is_down_with_a_clear_reason(
    tmp_path: Path, parts: list[Any]
) -> None:
    server = LlamaServer(tmp_path, ["--parallel", "2"])
    parts.append(server.start())
    status, body = server.get("/metrics")
    assert status == 501, (status, body[:200])
    agent = Agent(tmp_path, {"w": server.url})
    parts.append(agent)

    def counted() -> Series | None:
        s = agent.scrape()
        errors = of(s, "inferwatch_target_scrape_errors_total", "w", reason="http_status")
        return s if errors and errors[0][1] >= 2 else None

    s = wait_until(counted, 30, message="http_status errors counted")
    assert one(s, "inferwatch_target_up", "w") == 0
    assert not of(s, "inferwatch_queue_depth", "w")
    # one warning saying what the 501 means and how to turn metrics on
    log = agent.log()
    assert "HTTP 501 (llama-server without --metrics" in log, log[-2000:]
    assert log.count("HTTP 501") == 1, log[-2000:]
    # the process is still known as a llama.cpp worker from its command line
    info = of(s, "inferwatch_worker_info", "w")
    assert info and info[0][0]["engine"] == "llamacpp" and info[0][0]["max_num_seqs"] == "2"


# --------------------------------------------------------------------------- alerts
def test_llamacpp_alerts_through_prometheus_with_the_generated_rules(
    tmp_path: Path, parts: list[Any]
) -> None:
    require_binary(PROMETHEUS, "prometheus")
    # capacity only from /props (no --parallel); metrics missing on the other worker
    busy = LlamaServer(tmp_path, ["--metrics"], name="busy")
    off = LlamaServer(tmp_path, ["--parallel", "2"], name="off")
    for server in (busy, off):
        parts.append(server.start())
    agent = Agent(tmp_path, {"busy": busy.url, "off": off.url}, window="10s")
    parts.append(agent)
    t = load_thresholds(str(E2E_THRESHOLDS))
    config = render_prometheus_config(
        agent_targets=[agent.target],
        scrape_interval=t.pack.interval,
        evaluation_interval=t.pack.interval,
        rules_dir=generate_rule_files(t, tmp_path / "pack"),
    )
    prom = Prometheus(tmp_path, config)
    parts.append(prom)
    wait_until(prom.targets_up, 60, message="the agent scraped by Prometheus")
    slots = busy.props()["total_slots"]

    def active(alert: str, worker: str, state: str = "firing") -> dict[str, Any] | None:
        for a in prom.api("alerts")["alerts"]:
            lab = a["labels"]
            if (lab.get("alertname"), lab.get("worker"), a["state"]) == (alert, worker, state):
                return dict(a)
        return None

    down = wait_until(lambda: active("InferenceWorkerDown", "off"), 90, interval=0.5)
    assert down["labels"]["severity"] == "critical"

    # three times the slots outstanding: twice the slot count waits in the queue
    pressure = Pressure(busy, clients=3 * slots, n_predict=400, prompt=PROMPTS[0])
    parts.append(pressure)
    try:
        fired = wait_until(
            lambda: active("InferenceQueueOverCapacity", "busy"),
            120,
            interval=0.5,
            message="InferenceQueueOverCapacity firing for busy",
        )
    finally:
        pressure.stop()
    assert not pressure.errors, pressure.errors[:1]
    assert fired["labels"]["engine"] == "llamacpp"
    assert fired["labels"]["model"] == busy.props()["model_alias"]
    assert float(fired["value"]) > slots  # more waiting than /props says can run
    # the capacity the rule compared with is the one /props gave
    cap = prom.query('inferwatch_max_num_seqs{worker="busy"}')
    assert [float(c["value"][1]) for c in cap] == [slots]
    assert not active("InferenceWorkerDown", "busy", "pending")
    assert not active("InferenceWorkerDown", "busy")
    # alerts on signals llama.cpp does not give stay silent under the same overload
    for silent in SILENT_FOR_LLAMACPP:
        for state in ("pending", "firing"):
            assert not active(silent, "busy", state), (silent, state)

    # load gone: the queue alert ends; the worker without metrics stays down
    wait_until(
        lambda: (
            not active("InferenceQueueOverCapacity", "busy")
            and not active("InferenceQueueOverCapacity", "busy", "pending")
        ),
        90,
        interval=0.5,
        message="InferenceQueueOverCapacity resolved",
    )
    assert active("InferenceWorkerDown", "off")
    assert math.isfinite(float(down["value"]))


# --------------------------------------------------------------------------- capture drift
def test_the_server_built_here_writes_the_captured_families(
    tmp_path: Path, parts: list[Any]
) -> None:
    """The simulator is held to tests/data/llamacpp/: a new pin must come with a new capture."""
    server = LlamaServer(tmp_path, ["--metrics", "--parallel", "1"])
    parts.append(server.start())
    captured = (REPO / "tests" / "data" / "llamacpp" / "metrics-idle.txt").read_text()

    def shape(text: str) -> list[tuple[str, str, str]]:
        return [(f.name, f.type, f.documentation) for f in text_string_to_metric_families(text)]

    assert shape(server.metrics_text()) == shape(captured), (
        "llama-server's families changed: run `python -m tests.engines.llamacpp.capture`"
    )
    assert (
        server.props()["build_info"]
        == json.loads((REPO / "tests" / "data" / "llamacpp" / "props.json").read_text())[
            "build_info"
        ]
    )
