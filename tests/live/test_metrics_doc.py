"""docs/metrics.md lists exactly what the agent exports, and only contract names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support.agentrun import AgentRun
from tests.support.proc import (
    REPO,
    SHARED,
)
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import EngineValues, render

DOC = REPO / "docs" / "metrics.md"
NAME = re.compile(r"`((?:inferwatch)_[a-z0-9_]+)`")


def documented(path: Path) -> set[str]:
    return set(NAME.findall(path.read_text()))


def exported_families(tmp_path: Path) -> set[str]:
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
        exposition = agent.until(
            lambda t: "inferwatch_queue_depth_slope" in t, 30, "agent with worker windows"
        )
    finally:
        agent.stop()
        stub.stop()
    names = set()
    for fam in text_string_to_metric_families(exposition):
        for s in fam.samples:
            base = s.name
            for suffix in ("_bucket", "_count", "_sum", "_created"):
                if base.endswith(suffix) and fam.type == "histogram":
                    base = base[: -len(suffix)]
            if base.startswith("inferwatch_"):
                names.add(base)
    return names


def test_every_exported_family_is_documented(tmp_path: Path) -> None:
    exported = exported_families(tmp_path)
    assert "inferwatch_ttft_seconds" in exported and "inferwatch_gpu_up" in exported
    missing = exported - documented(DOC)
    assert not missing, f"exported but not in docs/metrics.md: {sorted(missing)}"


def test_documented_names_are_contract_names() -> None:
    contract_path = SHARED / "design" / "METRICS.md"
    if not contract_path.exists():
        pytest.skip(f"{contract_path} is absent (the shared design folder is not beside the repo)")
    contract = contract_path.read_text()
    # the contract writes some pairs with a slash: "a / b"
    contract_names = set(re.findall(r"inferwatch_[a-z0-9_]+", contract))
    extra = {n for n in documented(DOC) if n not in contract_names}
    allowed_extensions = (
        set(
            re.findall(
                r"`(inferwatch_[a-z0-9_]+)`",
                (REPO / "docs" / "metrics.md").read_text().split("## Extensions")[-1],
            )
        )
        if "## Extensions" in DOC.read_text()
        else set()
    )
    assert extra <= allowed_extensions, f"not in the contract: {sorted(extra - allowed_extensions)}"
