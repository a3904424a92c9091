"""The warm-up readiness gate: its configuration, its restart watch, and the gate live.

The live tests run the real agent (``inferwatch run``) and the simulated worker
with its cold start (``--cold-start-requests``, ``--cold-start-seconds``): the
first requests of a fresh simulator wait an extra delay before their first
token, as an unwarmed vLLM does. The sleeps of that delay are lower bounds, so
"the cold TTFT is at least the delay" holds on any machine.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.agentrun import AgentRun
from tests.support.proc import Process, free_port, inferwatch_cmd, wait_until
from tests.support.warmgate import (
    COLD_DELAY,
    MODEL,
    gate_open,
    gated_agent,
    gated_worker,
    metrics,
    readyz,
    sample,
    simulator,
)

from inferwatch.agent.collectors.warmup import (
    RestartWatch,
    WarmupRequest,
    parse_warmup,
    plan_requests,
)
from inferwatch.agent.config import load_config
from inferwatch.errors import ConfigError

SYSTEM_PROMPT = " ".join(f"rule{i} answer briefly and politely" for i in range(40))


# --------------------------------------------------------------------------- configuration


def config_with(tmp_path: Path, warmup: Any, workers: Any = None) -> Path:
    path = tmp_path / "agent.yaml"
    doc = {
        "workers": workers or [{"name": "w0", "url": "http://127.0.0.1:9"}],
        "warmup": warmup,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def settings_of(tmp_path: Path, warmup: Any, workers: Any = None) -> Any:
    return parse_warmup(load_config(str(config_with(tmp_path, warmup, workers)), env={}))


def test_default_plan_warms_both_endpoints_then_each_system_prompt(tmp_path: Path) -> None:
    (tmp_path / "support.txt").write_text("You are the support assistant of ACME.")
    s = settings_of(
        tmp_path, {"system_prompts": ["You are terse.", {"file": "support.txt"}]}
    )  # a relative file is read next to the config file
    assert s.enabled and s.workers == ("w0",)
    assert (s.timeout, s.deadline) == (60.0, 600.0)
    assert plan_requests(s) == (
        WarmupRequest("completions", "warm-up", 1),
        WarmupRequest("chat", "warm-up", 1),
        WarmupRequest("chat", "ping", 1, "You are terse."),
        WarmupRequest("chat", "ping", 1, "You are the support assistant of ACME."),
    )


def test_requests_count_explicit_list_and_completions_only(tmp_path: Path) -> None:
    s = settings_of(
        tmp_path, {"requests": 2, "endpoints": ["completions"], "system_prompts": ["S"]}
    )
    assert [r.endpoint for r in plan_requests(s)] == ["completions"] * 3
    assert plan_requests(s)[-1].prompt == "S"  # no chat: the system prompt as a completion
    s = settings_of(
        tmp_path,
        {"requests": [{"endpoint": "chat", "prompt": "hi", "max_tokens": 4, "system_prompt": "X"}]},
    )
    assert plan_requests(s) == (WarmupRequest("chat", "hi", 4, "X"),)


@pytest.mark.parametrize(
    ("warmup", "key", "expected"),
    [
        ({"timeout": "-1s"}, "warmup.timeout", "a duration such as 2s"),
        ({"deadline": "soon"}, "warmup.deadline", "a duration"),
        ({"enabled": "yes"}, "warmup.enabled", "true or false"),
        ({"workers": ["nope"]}, "warmup.workers[0]", "the name of a configured worker (w0)"),
        ({"endpoints": ["embeddings"]}, "warmup.endpoints[0]", "one of completions, chat"),
        ({"requests": 0}, "warmup.requests", "a whole number >= 1"),
        ({"requests": [{"endpoint": "chat", "mode": 1}]}, "warmup.requests[0].mode", "known keys"),
        (
            {"requests": [{"prompt": "x", "system_prompt": "y"}]},
            "warmup.requests[0].system_prompt",
            "endpoint: chat",
        ),
        ({"system_prompts": [{"file": "absent.txt"}]}, "warmup.system_prompts[0].file", "readable"),
        ({"system_prompts": [3]}, "warmup.system_prompts[0]", "a string or {file: PATH}"),
        ({"warm_ttft_below": 0}, "warmup.warm_ttft_below", "greater than zero"),
        ({"retries": 3}, "warmup.retries", "one of the known keys"),
    ],
)
def test_bad_settings_name_the_file_and_key(
    tmp_path: Path, warmup: dict[str, Any], key: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        settings_of(tmp_path, warmup)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'agent.yaml'}: {key}: expected"), message
    assert expected in message


def test_bad_warmup_config_ends_the_agent_with_one_line_and_exit_2(tmp_path: Path) -> None:
    path = config_with(tmp_path, {"deadline": "10 minutes"})
    done = subprocess.run(
        inferwatch_cmd("run", "--config", str(path), "--gpu-backend", "none"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"inferwatch run: error: {path}: warmup.deadline: expected a duration such as 2s, "
        "500ms or 1m, got '10 minutes'"
    ]


# --------------------------------------------------------------------------- restarts


def test_restart_watch_counts_one_restart_once() -> None:
    w = RestartWatch()
    assert w.observe(None, None) is None  # nothing known yet
    assert w.observe(100.0, 50.0) is None  # baselines
    assert w.observe(100.0, 80.0) is None  # counters grow: same process
    # a new process: its start time shows first, the counters' drop follows
    assert w.observe(200.0, 80.0) == "its process start time changed"
    assert w.observe(200.0, 3.0) is None  # the same restart, not a second one
    assert w.observe(200.0, 9.0) is None
    # an engine restart inside the same process tree: only the counters say it
    assert w.observe(200.0, 1.0) == "its engine counters went back"
    # /health noticed a restart; the process source still reports the old start time
    w.forget()
    assert w.observe(200.0, 5.0) is None  # stale start time ignored, counter drop absorbed
    assert w.observe(300.0, 6.0) is None  # the new process becomes the baseline
    assert w.observe(301.0, 7.0) == "its process start time changed"


# --------------------------------------------------------------------------- live


def served(sim_url: str) -> float:
    """Requests the simulator has finished (every finish reason)."""
    return sample(metrics(sim_url), "vllm:request_success_total") or 0.0


def first_token_seconds(url: str, body: dict[str, Any], path: str = "/v1/completions") -> float:
    """Send one streamed request; seconds until its first token."""
    data = json.dumps({"model": MODEL, "stream": True, **body}).encode()
    req = urllib.request.Request(
        url + path, data=data, headers={"Content-Type": "application/json"}
    )
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=30) as resp:
        for raw in resp:
            line = raw.strip()
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                choice = json.loads(line[5:])["choices"][0]
                if choice.get("text") or (choice.get("delta") or {}).get("content"):
                    return time.monotonic() - started
    raise AssertionError("no token in the stream")


def test_gate_opens_after_warmup_first_request_is_fast_and_a_restart_recloses_it(
    tmp_path: Path, procs: list[Process], make_agent: Callable[..., AgentRun]
) -> None:
    sim_port, sim_url, agent = gated_worker(
        make_agent, interval="200ms", system_prompts=[SYSTEM_PROMPT]
    )

    # 1. The worker is not up yet: the gate is shut and says so.
    def shut() -> bool:
        got = metrics(agent)
        return readyz(agent) == 503 and sample(got, "inferwatch_worker_ready", worker="w0") == 0

    wait_until(shut, timeout=20, message="a shut gate while the worker is down")
    assert sample(metrics(agent), "inferwatch_warmups_total", worker="w0") == 0

    # 2. The worker starts cold; the gate opens once the warm-up is done.
    sim = simulator(tmp_path, sim_port, "first")
    procs.append(sim)
    wait_until(lambda: gate_open(agent, "w0"), timeout=60, message="the gate open after warm-up")
    got = metrics(agent)
    assert sample(got, "inferwatch_worker_ready", worker="w0") == 1
    assert sample(got, "inferwatch_warmups_total", worker="w0") == 1
    cold = sample(got, "inferwatch_warmup_ttft_seconds", worker="w0", phase="cold")
    warm = sample(got, "inferwatch_warmup_ttft_seconds", worker="w0", phase="warm")
    assert cold is not None and warm is not None
    assert cold >= COLD_DELAY  # the first warm-up request paid the cold start
    assert warm < cold
    assert (sample(got, "inferwatch_warmup_duration_seconds", worker="w0") or 0) >= COLD_DELAY
    assert sample(got, "inferwatch_warmup_deadline_exceeded", worker="w0") == 0
    # completions ping, chat ping, the system prompt, the warm probe: 4 requests
    assert served(sim_url) == 4

    # 3. The first user request after the gate opens is fast; on a cold simulator it is not.
    request = {"prompt": "hello there general kenobi", "max_tokens": 4}
    warmed_first = first_token_seconds(sim_url, request)
    cold_port = free_port()
    procs.append(simulator(tmp_path, cold_port, "cold"))
    cold_first = first_token_seconds(f"http://127.0.0.1:{cold_port}", request)
    assert cold_first >= COLD_DELAY
    assert warmed_first < cold_first

    # The system prompt is in the prefix cache: a user chat that carries it hits.
    hits = sample(metrics(sim_url), "vllm:prefix_cache_hits_total") or 0.0
    chat = {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "hi"},
        ]
    }
    first_token_seconds(sim_url, {**chat, "max_tokens": 2}, "/v1/chat/completions")
    assert (sample(metrics(sim_url), "vllm:prefix_cache_hits_total") or 0.0) > hits

    # 4. The worker restarts: the gate shuts, then opens again after a second warm-up.
    sim.stop()
    wait_until(shut, timeout=30, message="the gate to shut after the worker went away")
    procs.append(simulator(tmp_path, sim_port, "second"))
    wait_until(lambda: gate_open(agent, "w0"), timeout=60, message="the gate open after re-warm")
    got = metrics(agent)
    assert sample(got, "inferwatch_warmups_total", worker="w0") == 2
    assert (
        sample(got, "inferwatch_warmup_ttft_seconds", worker="w0", phase="cold") or 0
    ) >= COLD_DELAY
    assert served(sim_url) == 4  # the new process got the whole warm-up again


def test_deadline_opens_the_gate_with_a_warning_and_failures_are_counted(
    tmp_path: Path, procs: list[Process], make_agent: Callable[..., AgentRun]
) -> None:
    sim_port = free_port()
    procs.append(simulator(tmp_path, sim_port, "wrong-model"))
    nothing = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    run = gated_agent(
        make_agent,
        {
            "workers": [
                {"name": "silent", "url": nothing},
                {"name": "refusing", "url": f"http://127.0.0.1:{sim_port}"},
            ],
            # the simulator answers 404 to a model it does not serve
            "warmup": {"interval": "200ms", "deadline": "3s", "model": "no-such-model"},
        },
    )
    agent = run.url
    wait_until(
        lambda: (
            gate_open(agent, "silent", "inferwatch_warmup_deadline_exceeded")
            and gate_open(agent, "refusing", "inferwatch_warmup_deadline_exceeded")
        ),
        timeout=30,
        message="the deadline to open the gate",
    )
    got = metrics(agent)
    for worker in ("silent", "refusing"):
        assert sample(got, "inferwatch_warmup_deadline_exceeded", worker=worker) == 1
        assert sample(got, "inferwatch_worker_ready", worker=worker) == 0
    assert (
        sample(got, "inferwatch_warmup_failures_total", worker="refusing", reason="http_status")
        or 0
    ) >= 1
    # waiting for /health is not a failure: the silent worker never got a request
    assert sample(got, "inferwatch_warmup_failures_total", worker="silent") == 0
    log = run.log()
    assert "worker silent: not warm after 3s; the gate opens anyway" in log
