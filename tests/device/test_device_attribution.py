"""On a host with NVIDIA GPUs: inferwatch_worker_gpu_info names, per worker, the GPUs its CUDA
processes run on, as nvidia-smi (or CUDA itself) says (bench/device/validate_attribution.py).
Skipped elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.nvidia import validated


@pytest.mark.device
def test_worker_gpu_info_agrees_with_nvidia_smi(tmp_path: Path) -> None:
    result, record = validated("validate_attribution.py", tmp_path, "attribution.json", gpus=1,
                               torch_for="the worker stand-ins are PyTorch processes",
                               timeout=300)  # fmt: skip
    assert not record["errors"], record["errors"]
    assert record["agent_ok"], record["agent"]
    assert record["environment_ok"], record["environment"]
    if record.get("smi_lists_our_pids"):
        assert record["colocation_memory_ok"], record["colocation_memory"]
    if len(record["gpus"]) >= 2:
        assert record["reversed_order_ok"], record.get("reversed_order")
    assert (tmp_path / "agent_metrics_final.txt").exists()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
