"""pytest configuration shared by every test module."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.agentrun import AgentRun, agents
from tests.support.proc import Process

from inferwatch.agent.collectors.nvml import NvmlSource

logging.getLogger("asyncio").setLevel(logging.WARNING)


@pytest.fixture
async def make_source() -> AsyncIterator[Callable[..., NvmlSource]]:
    """NvmlSource(...) that is stopped (event thread joined, NVML shut down) after the test."""
    made: list[NvmlSource] = []

    def make(*args: Any, **kwargs: Any) -> NvmlSource:
        # Activity windows (GPM, per-process SM share) on every pass unless a test says otherwise.
        kwargs.setdefault("activity_interval", 0.0)
        src = NvmlSource(*args, **kwargs)
        made.append(src)
        return src

    yield make
    for src in made:
        await src.stop()


@pytest.fixture
def make_agent(tmp_path: Path) -> Iterator[Callable[..., AgentRun]]:
    """AgentRun(tmp_path, ...): ``inferwatch run`` as a program, stopped after the test."""
    with agents(tmp_path) as start:
        yield start


@pytest.fixture
def procs() -> Iterator[list[Process]]:
    """Processes a test starts (append them); stopped after it, the last started first."""
    started: list[Process] = []
    yield started
    for p in reversed(started):
        p.stop()
