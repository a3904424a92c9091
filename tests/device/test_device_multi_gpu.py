"""On a host with two or more NVIDIA GPUs: per-GPU series and per-process attribution agree
with nvidia-smi (bench/device/validate_multi_gpu.py). Skipped elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.nvidia import validated


@pytest.mark.device
def test_every_gpu_and_process_agrees_with_nvidia_smi(tmp_path: Path) -> None:
    result, record = validated("validate_multi_gpu.py", tmp_path, "multi_gpu.json", gpus=2,
                               torch_for="the GPU load is a PyTorch process", timeout=600)  # fmt: skip
    assert not record["errors"], record["errors"]
    assert record["gpus"] >= 2
    for sample in record["samples"]:
        assert len(sample) == record["gpus"]
        for row in sample:
            assert row["uuid_ok"] and row["memory_ok"], row
            assert row["processes_ok"], row
    assert record["agent"].startswith("ok"), record["agent"]
    assert result.returncode == 0, result.stdout[-3000:]
