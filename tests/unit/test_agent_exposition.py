"""The agent's own text writer gives the bytes prometheus_client would.

The agent renders its exposition in parts and writes the text format itself for
speed (docs/performance.md); this holds it to generate_latest() over the same
families, with a live worker, fake GPUs and awkward label values.
"""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import EngineValues, render

from inferwatch.agent.config import load_config
from inferwatch.agent.wiring import Agent

# values that change between two reads: the agent's own process and pass timings
VOLATILE = (
    "process_",
    "python_gc_",
    "inferwatch_collect_duration_seconds",
    "inferwatch_last_collect_timestamp_seconds",
)


def metric_name(line: str) -> str:
    if line.startswith("#"):
        return line.split(" ", 3)[2]
    return line.split("{", 1)[0].split(" ", 1)[0]


def stable(text: bytes) -> list[str]:
    return [
        line for line in text.decode().splitlines() if not metric_name(line).startswith(VOLATILE)
    ]


async def test_rendered_exposition_equals_generate_latest() -> None:
    values = EngineValues(
        waiting=2,
        running=3,
        kv=0.5,
        ttft=[0.1, 0.4],
        itl=[0.02],
        e2e=[1.0],
        finished={"stop": 1, "length": 0, "abort": 0, "error": 0},
    )
    # a model name that needs escaping in the text format
    model = 'we"ird\\mo\ndel'
    stub = StubWorker(
        lambda: render(
            "v1",
            [values],
            model=model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"),
        )
    )
    config = load_config(
        env={},
        flags={
            "workers": [f"w={stub.url}"],
            "gpu.backend": "fake",
            "gpu.fake_count": "3",
            "collect_interval": "1s",
            "stats_window": "10s",
        },
    )
    agent = Agent(config)
    try:
        await agent.start()
        for _ in range(2):
            for source in agent.sources:
                await source.refresh()
            values.ttft.append(0.3)
            await agent.output.rebuild_async()
            await asyncio.sleep(0.01)
        ours = stable(agent.output.body)
        theirs = stable(generate_latest(agent.output.registry))
        assert any("inferwatch_queue_depth{" in line for line in ours)
        assert any('model="we\\"ird\\\\mo\\ndel"' in line for line in ours)
        assert ours == theirs
        agent.output.rebuild()  # the one-go path gives the same text
        assert stable(agent.output.body) == theirs
    finally:
        await agent.stop()
        stub.stop()
