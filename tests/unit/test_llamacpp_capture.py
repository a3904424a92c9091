"""The simulator's llama.cpp output and the self-description reader, held to real captures.

``tests/data/llamacpp/`` was written by ``tests/engines/llamacpp/capture.py``
from the real ``llama-server`` (built by ``setup.sh`` from the pinned sdist):
its ``/metrics`` idle, during a request (after its first token) and after two
requests, its ``/props``, and what the client counted. No server runs here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.proc import REPO

from inferwatch.agent.collectors import selfdesc
from inferwatch.engines import ENGINES
from inferwatch.engines.mapping import map_exposition
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo.llamacpp import create
from inferwatch.sim.stats import EngineSnapshot, FinishedRequest, StepStats

DATA = REPO / "tests" / "data" / "llamacpp"
FACTS: dict[str, Any] = json.loads((DATA / "capture.json").read_text())
IDLE = EngineSnapshot(engine=0, running=0, waiting=0)
BUSY = EngineSnapshot(engine=0, running=1, waiting=0)


def capture(moment: str) -> str:
    return (DATA / f"metrics-{moment}.txt").read_text()


def shape(text: str) -> list[tuple[str, str, str, list[dict[str, str]]]]:
    """(name, type, help, label sets) of each family, in the order written."""
    return [
        (f.name, f.type, f.documentation, [dict(s.labels) for s in f.samples])
        for f in text_string_to_metric_families(text)
    ]


def values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def finished(prompt: int, cached: int, generated: int) -> FinishedRequest:
    return FinishedRequest(
        finish_reason="length",
        prompt_tokens=prompt,
        generation_tokens=generated,
        cached_tokens=cached,
        max_tokens_param=generated,
        e2e=1.0,
        queue_time=0.0,
        prefill_time=0.01,
        decode_time=0.9,
        inference_time=0.91,
        mean_tpot=0.9 / max(generated - 1, 1),
        preemptions=0,
    )


def test_the_capture_is_the_real_servers_own() -> None:
    # the facts the rest of this file relies on, as the server and client reported them
    assert FACTS["build"][0] == "llama-cpp-python==0.3.36"
    second = FACTS["second_request_timings"]
    assert second["prompt_n"] + second["cache_n"] == FACTS["prompt_tokens"]
    assert second["cache_n"] > 0


def test_families_types_help_and_labels_match_the_real_server() -> None:
    writer = create(SimConfig(engine="llamacpp", format="server"))
    sim = writer.render([IDLE]).body.decode()
    assert shape(sim) == shape(capture("idle"))
    # C++ stream formatting of whole numbers: "0", not "0.0"
    assert "llamacpp:prompt_tokens_total 0\n" in sim
    assert "llamacpp:prompt_tokens_total 0\n" in capture("idle")
    assert shape(capture("during")) == shape(capture("idle")) == shape(capture("after"))


def test_counting_moments_match_the_real_server() -> None:
    """Prompt tokens at prefill, generated tokens when the request ends; cached tokens apart."""
    n_prompt = FACTS["prompt_tokens"]
    long, short = FACTS["n_predict"]
    cached = FACTS["second_request_timings"]["cache_n"]
    writer = create(SimConfig(engine="llamacpp", format="server"))

    # request 1 produced its first token: its prompt is counted, none of its tokens yet
    writer.on_step(0, StepStats(engine=0, prompt_tokens=n_prompt, generation_tokens=1))
    during = values(writer.render([BUSY]).body.decode())
    real = values(capture("during"))
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:prompt_tokens_cached_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
    ):
        assert during[name] == real[name], name
    assert real["llamacpp:prompt_tokens_total"] == n_prompt
    assert real["llamacpp:tokens_predicted_total"] == 0

    # request 1 ends; request 2 (same prompt, mostly from the slot's cache) runs and ends
    writer.on_step(0, StepStats(engine=0, finished=(finished(n_prompt, 0, long),)))
    writer.on_step(0, StepStats(engine=0, prompt_tokens=n_prompt, cached_prompt_tokens=cached))
    writer.on_step(0, StepStats(engine=0, finished=(finished(n_prompt, cached, short),)))
    after = values(writer.render([IDLE]).body.decode())
    real = values(capture("after"))
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:prompt_tokens_cached_total",
        "llamacpp:tokens_predicted_total",
    ):
        assert after[name] == real[name], name
    assert real["llamacpp:tokens_predicted_total"] == long + short
    assert real["llamacpp:prompt_tokens_cached_total"] == cached


def test_the_agent_maps_the_capture_and_the_simulator_alike() -> None:
    engine = ENGINES["llamacpp"]
    real = map_exposition(capture("after"), engine)
    n_prompt = FACTS["prompt_tokens"]
    none = (("model", ""),)
    # two requests of the same prompt: all of both prompts, evaluated or cached
    assert real.counters["inferwatch_prompt_tokens"] == {none: 2 * n_prompt}
    assert real.counters["inferwatch_prefix_cache_hits"] == {
        none: FACTS["second_request_timings"]["cache_n"]
    }
    assert set(real.gauges) == {"inferwatch_queue_depth", "inferwatch_requests_running"}


@pytest.mark.parametrize("moment", ["idle", "during", "after"])
def test_every_captured_family_is_known_to_the_simulator(moment: str) -> None:
    sim_names = {
        name for name, *_ in shape(create(SimConfig(engine="llamacpp")).render([]).body.decode())
    }
    assert {name for name, *_ in shape(capture(moment))} == sim_names


def test_props_gives_version_model_and_capacity() -> None:
    body = (DATA / "props.json").read_bytes()
    props = json.loads(body)
    desc = selfdesc.describe("llamacpp", body)
    assert desc.version == props["build_info"] == "b1-0c1e570"
    assert desc.model == props["model_alias"]
    assert desc.max_num_seqs == props["total_slots"] == 1  # the capture ran --parallel 1
