"""Engines' self-descriptions (/props, /version, /get_server_info, /info): reading and use.

The llama.cpp document is the real server's (``tests/data/llamacpp/props.json``,
captured by ``tests/engines/llamacpp/capture.py``). The others are shaped as
the engines' sources write them (cited in ``inferwatch.agent.collectors.selfdesc``):
only the fields the agent reads, with the types those sources give them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from aiohttp import web
from tests.support.aioapp import serve_app
from tests.support.proc import REPO

from inferwatch.agent.collectors import selfdesc
from inferwatch.agent.collectors.engine import EngineSource
from inferwatch.agent.collectors.selfdesc import SelfDescription, describe
from inferwatch.agent.config import ScrapeConfig, load_config
from inferwatch.engines import ENGINES
from inferwatch.engines.mapping import map_exposition
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo.llamacpp import create
from inferwatch.sim.stats import EngineSnapshot, StepStats

PROPS = json.loads((REPO / "tests" / "data" / "llamacpp" / "props.json").read_text())


def doc(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_llamacpp_props() -> None:
    got = describe("llamacpp", doc(PROPS))
    assert got == SelfDescription(PROPS["build_info"], PROPS["model_alias"], PROPS["total_slots"])
    # without an alias field (older builds), the model path names the model
    older = {k: v for k, v in PROPS.items() if k != "model_alias"}
    assert describe("llamacpp", doc(older)).model == PROPS["model_path"]


def test_vllm_sglang_tgi() -> None:
    assert describe("vllm", doc({"version": "0.11.0"})) == SelfDescription("0.11.0")
    sglang = {
        "model_path": "/models/qwen",
        "served_model_name": "qwen",
        "max_running_requests": 128,
        "max_total_num_tokens": 500000,
        "internal_states": [{}],
        "version": "0.5.3",
    }
    assert describe("sglang", doc(sglang)) == SelfDescription("0.5.3", "qwen", 128)
    # SGLang leaves max_running_requests None unless it is set
    assert describe("sglang", doc({**sglang, "max_running_requests": None})).max_num_seqs is None
    tgi = {
        "model_id": "bigscience/bloom-560m",
        "max_concurrent_requests": 128,
        "max_batch_size": None,
        "version": "2.0.4",
        "sha": None,
    }
    assert describe("tgi", doc(tgi)) == SelfDescription("2.0.4", "bigscience/bloom-560m", 128)


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'"text"',
        doc({"total_slots": "4", "build_info": None, "model_alias": ""}),
        doc({"total_slots": -1, "build_info": True, "model_alias": {"x": 1}}),
        doc({"total_slots": 2.5, "build_info": "unknown"}),
        doc({"total_slots": True}),
    ],
)
def test_unusable_answers_state_nothing(body: bytes) -> None:
    assert describe("llamacpp", body) == SelfDescription()


def test_engines_without_a_self_description_and_long_values() -> None:
    assert describe("triton", doc({"version": "2.50"})) == SelfDescription()
    long = describe("vllm", doc({"version": "v" * 500}))
    assert long.version is not None and len(long.version) == 128


def test_with_model_fills_only_an_empty_model_label() -> None:
    text = create(SimConfig(engine="llamacpp")).render([EngineSnapshot(0, 2, 5)]).body.decode()
    mapped = map_exposition(text, ENGINES["llamacpp"])
    named = selfdesc.with_model(mapped, "tiny")
    assert named.gauges["inferwatch_queue_depth"] == {(("model", "tiny"),): 5.0}
    assert named.models() == {"tiny"}
    assert selfdesc.with_model(mapped, None) is mapped
    assert selfdesc.with_model(named, "other") is named  # the engine's own label wins


def test_a_counter_going_down_is_a_restart() -> None:
    writer = create(SimConfig(engine="llamacpp"))
    engine = ENGINES["llamacpp"]
    writer.on_step(0, StepStats(engine=0, prompt_tokens=50))
    before = map_exposition(writer.render([]).body.decode(), engine)
    writer.on_step(0, StepStats(engine=0, prompt_tokens=10))
    later = map_exposition(writer.render([]).body.decode(), engine)
    fresh = map_exposition(create(SimConfig(engine="llamacpp")).render([]).body.decode(), engine)
    assert not selfdesc.restarted(before, later)
    assert selfdesc.restarted(selfdesc.with_model(before, "tiny"), fresh)  # labels aside


# --------------------------------------------------------------------------- in the source
@dataclass
class Worker:
    """A worker serving an exposition and a self-description that the test changes."""

    metrics: str = ""
    path: str = "/props"
    document: dict[str, Any] = field(default_factory=dict)
    asked: int = 0
    url: str = ""

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics, content_type="text/plain")

    async def handle_doc(self, request: web.Request) -> web.Response:
        self.asked += 1
        return web.json_response(self.document)


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    w = Worker()
    app = web.Application()
    app.router.add_get("/metrics", w.handle_metrics)
    for path in ("/props", "/info"):
        app.router.add_get(path, w.handle_doc)
    runner, w.url = await serve_app(app)
    yield w
    await runner.cleanup()


def source_for(url: str) -> EngineSource:
    config = load_config(
        env={}, flags={"workers": [f"w={url}"], "collect_interval": "1s", "stats_window": "60s"}
    )
    return EngineSource(replace(config, scrape=ScrapeConfig(1.0, 1 << 20)))


def capacity_gauges(src: EngineSource) -> dict[tuple[str, ...], float]:
    out = {}
    for fam in src.families():
        if fam.name == "inferwatch_max_num_seqs":
            for s in fam.samples:
                out[(s.labels["engine"], s.labels["model"])] = s.value
    return out


async def test_props_once_per_start_for_version_model_and_capacity(worker: Worker) -> None:
    sim = create(SimConfig(engine="llamacpp"))
    sim.on_step(0, StepStats(engine=0, prompt_tokens=500))
    worker.metrics = sim.render([EngineSnapshot(0, 1, 0)]).body.decode()
    worker.document = dict(PROPS)
    src = source_for(worker.url)
    try:
        await src.refresh()
        await src.refresh()
        assert worker.asked == 1  # once, not once per pass
        model = PROPS["model_alias"]
        assert src.engine_facts("w") == {
            "engine": "llamacpp",
            "model": model,
            "version": PROPS["build_info"],
            "max_num_seqs": str(PROPS["total_slots"]),
        }
        assert capacity_gauges(src) == {("llamacpp", model): PROPS["total_slots"]}

        # restarted between two scrapes with other settings: the counters went down
        worker.metrics = create(SimConfig(engine="llamacpp")).render([]).body.decode()
        worker.document = {**PROPS, "total_slots": 6, "model_alias": "renamed"}
        await src.refresh()
        assert worker.asked == 2
        assert capacity_gauges(src) == {("llamacpp", "renamed"): 6}
    finally:
        await src.stop()


async def test_tgi_info_names_the_model_of_label_free_series(worker: Worker) -> None:
    worker.metrics = (
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n"
        "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 2\n"
    )
    worker.document = {"model_id": "org/m", "max_concurrent_requests": 64, "version": "2.0.4"}
    src = source_for(worker.url)
    try:
        await src.refresh()
        facts = src.engine_facts("w")
        assert (facts["engine"], facts["model"], facts["version"]) == ("tgi", "org/m", "2.0.4")
        assert capacity_gauges(src) == {("tgi", "org/m"): 64}
    finally:
        await src.stop()
