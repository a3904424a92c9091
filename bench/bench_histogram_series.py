"""Series stored per vLLM worker, with and without the agent re-exporting its histograms.

Issue 23 item 2: a user whose Prometheus also scrapes vLLM itself (vLLM's own
dashboard needs the raw series) stores every latency bucket twice: once as
``vllm:*_bucket`` and once as ``inferwatch_*_bucket``. ``workers[].export_histograms:
false`` drops the agent's copy. This counts the series of each side for a
vLLM worker with 1 and with 8 data-parallel engines (the exposition of
``bench_engine_parse.py``, with vLLM's optional families), scraped by a real
``EngineSource`` over loopback HTTP.

Run: ``PYTHONPATH=agent python bench/bench_histogram_series.py [--json FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from prometheus_client.parser import text_string_to_metric_families
from tests.support.stubworker import StubWorker

from bench_engine_parse import exposition
from benchlib import write_json
from inferwatch.agent.collectors.engine import EngineSource
from inferwatch.agent.config import AgentConfig, WorkerSpec


def engine_series(text: str) -> dict[str, int]:
    """Series of vLLM's own exposition: all, and those of histograms."""
    total = hist = 0
    for fam in text_string_to_metric_families(text):
        n = sum(1 for s in fam.samples if not s.name.endswith("_created"))
        total += n
        if fam.type == "histogram":
            hist += n
    return {"all": total, "histogram": hist}


def agent_series(url: str, export: bool) -> dict[str, int]:
    worker = WorkerSpec(name="w", url=url, engine="vllm", export_histograms=export)
    source = EngineSource(AgentConfig(workers=(worker,)))

    async def scrape() -> list[Any]:
        try:
            await source.refresh()
            return list(source.families())
        finally:
            await source.stop()

    total = hist = 0
    for fam in asyncio.run(scrape()):
        n = len(fam.samples)
        total += n
        if fam.type == "histogram":
            hist += n
    return {"all": total, "histogram": hist}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    print(f"{'engines':>7}  {'vllm all':>8}  {'vllm hist':>9}  {'agent on':>8}  "
          f"{'agent off':>9}  {'stored, both scraped: on -> off':>32}")  # fmt: skip
    for engines in (1, 8):
        text = exposition(engines, optional=True)
        stub = StubWorker(lambda text=text: text)
        try:
            on = agent_series(stub.url, True)
            off = agent_series(stub.url, False)
        finally:
            stub.stop()
        vllm = engine_series(text)
        results[str(engines)] = {"vllm": vllm, "agent_on": on, "agent_off": off}
        print(
            f"{engines:>7}  {vllm['all']:>8}  {vllm['histogram']:>9}  {on['all']:>8}  "
            f"{off['all']:>9}  {vllm['all'] + on['all']:>15} -> {vllm['all'] + off['all']}"
        )
    write_json(args.json, results)


if __name__ == "__main__":
    main()
