"""On a host with two or more NVIDIA GPUs: per-GPU series and per-process attribution agree
with nvidia-smi (bench/device/validate_multi_gpu.py). Skipped elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.nvidia import gpu_count, run_validator


@pytest.mark.device
def test_every_gpu_and_process_agrees_with_nvidia_smi(tmp_path: Path) -> None:
    if gpu_count() < 2:
        pytest.skip("needs a host with two or more NVIDIA GPUs (nvidia-smi -L)")
    pytest.importorskip("torch", reason="the GPU load is a PyTorch process")
    result = run_validator("validate_multi_gpu.py", tmp_path, timeout=600)
    record = json.loads((tmp_path / "multi_gpu.json").read_text())
    assert not record["errors"], record["errors"]
    assert record["gpus"] >= 2
    for sample in record["samples"]:
        assert len(sample) == record["gpus"]
        for row in sample:
            assert row["uuid_ok"] and row["memory_ok"], row
            assert row["processes_ok"], row
    assert record["agent"].startswith("ok"), record["agent"]
    assert result.returncode == 0, result.stdout[-3000:]
