"""A real agent exports the contract's families as engines/contract.py types them.

docs/metrics.md's tables are written from that table by ``inferwatch generate``
(``tests/unit/test_generate.py`` holds the committed doc to it); this holds the
table to what an agent running against a vLLM-like worker and fake GPUs exports:
every ``inferwatch_*`` family it writes is a row, with the row's HELP text, type
and labels.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import EngineValues, render

from inferwatch.engines import contract


def exposition(tmp_path: Path) -> str:
    e = EngineValues(waiting=1, running=1, ttft=[0.1], itl=[0.02], e2e=[1.0])

    def text() -> str:
        e.ttft.append(0.2)
        e.itl.append(0.03)
        e.e2e.append(1.1)
        e.prefix_queries += 10
        e.prefix_hits += 5
        e.waiting += 1
        return render("v1", [e])

    stub = StubWorker(text)
    agent = AgentRun(
        tmp_path,
        *("--worker", f"w={stub.url}", "--gpu-backend", "fake"),
        *("--collect-interval", "0.2s", "--stats-window", "5s"),
    )
    try:
        return agent.until(
            lambda t: "inferwatch_queue_depth_slope" in t, 30, "agent with worker windows"
        )
    finally:
        agent.stop()
        stub.stop()


def test_the_agent_exports_the_contract_table(tmp_path: Path) -> None:
    families = {
        fam.name: fam
        for fam in text_string_to_metric_families(exposition(tmp_path))
        if fam.name.startswith("inferwatch_")
    }
    # the parser names a counter family without _total, as Family.base does
    rows = {row.base: row for row in contract.FAMILIES}
    assert {"inferwatch_ttft_seconds", "inferwatch_gpu_up", "inferwatch_worker_info"} <= set(
        families
    )
    assert set(families) - set(rows) == set(), "exported but not in engines/contract.py"
    for name, fam in families.items():
        row = rows[name]
        assert fam.documentation == row.help, name
        assert fam.type == ("gauge" if row.kind == "info" else row.kind), name
        for sample in fam.samples:
            missing = set(row.labels) - set(sample.labels)
            assert not missing, f"{sample.name} lacks {sorted(missing)}"
