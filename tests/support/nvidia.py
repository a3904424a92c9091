"""The device tests' parts: the host's NVIDIA GPUs as ``nvidia-smi -L`` lists them (the
tests skip without), and a run of one of bench/device/'s validators."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.support.benchrun import run_bench


def gpu_count() -> int:
    """How many GPUs ``nvidia-smi -L`` lists (0 without nvidia-smi or when it fails)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def validated(
    script: str, out: Path, record: str, *, gpus: int, torch_for: str, timeout: float
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run ``bench/device/<script>`` where the host has ``gpus`` GPUs or more and PyTorch
    (``torch_for``: what the validator needs it for), else skip; the run and the JSON record
    it wrote to ``out/<record>``."""
    if gpu_count() < gpus:
        pytest.skip(f"needs a host with {gpus} or more NVIDIA GPUs (nvidia-smi -L lists fewer)")
    pytest.importorskip("torch", reason=torch_for)
    result = run_bench(f"device/{script}", "--out", str(out), timeout=timeout)
    return result, json.loads((out / record).read_text())
