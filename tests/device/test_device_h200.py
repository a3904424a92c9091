"""The agent's GPU readings agree with nvidia-smi on a real NVIDIA GPU (issue 8).

Runs bench/device/validate_h200.py (a PyTorch load holding a known amount of
memory, then idle; the agent's NVML pass and nvidia-smi read at the same
moments) and asserts that every quantity agrees within the tolerance the script
states for it, and that GPM activity matches the phase. Skipped where there is
no NVIDIA GPU, driver or PyTorch (CI, laptops). On the device machine:

    INFERWATCH_VALIDATION_OUT=$OUT INFERWATCH_VALIDATION_BENCH=1 \\
        PYTHONPATH=agent python3 -m pytest tests/device/test_device_h200.py -q -s
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.proc import REPO

SCRIPT = REPO / "bench" / "device" / "validate_h200.py"

pytestmark = pytest.mark.device


def _why_not() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH: this test needs a machine with an NVIDIA GPU"
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return "libnvidia-ml.so.1 cannot be loaded: no NVIDIA driver here"
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    if listing.returncode != 0 or "GPU 0" not in listing.stdout:
        return f"nvidia-smi lists no GPU: {listing.stdout or listing.stderr}".strip()
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed: the validation's load needs it"
    return None


@pytest.mark.timeout(900)
def test_gpu_readings_agree_with_nvidia_smi(tmp_path: Path) -> None:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    out = Path(os.environ.get("INFERWATCH_VALIDATION_OUT") or tmp_path)
    cmd = [sys.executable, str(SCRIPT), "--out", str(out)]
    if os.environ.get("INFERWATCH_VALIDATION_BENCH"):
        cmd.append("--bench")
    paths = [str(REPO / "agent"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.run(cmd, env=env, timeout=900)
    assert proc.returncode == 0
    record = json.loads((out / "validation.json").read_text())

    assert record["errors"] == []
    assert set(record["phases"]) == {"load", "pause", "idle"}
    assert record["first_pass_gpm_absent"], "GPM needs two samples: absent on the first pass"
    summary = record["summary"]["by_quantity"]
    for group in ("memory.used", "memory.total", "utilization.gpu", "process used_memory"):
        assert f"load: {group}" in summary, f"nothing compared for {group} under load"
    # The load process and its memory are seen by both, and its memory is what it holds.
    load_pid = record["load"]["pid"]
    pids = [r["agent"] for r in summary["load: compute-apps pids"]["rows"]]
    assert all(load_pid in p for p in pids)
    held = record["load"]["torch_reserved_bytes"] / 1024**2
    used = [r["agent"] for r in summary["load: process used_memory"]["rows"]]
    assert all(held <= u <= held + 2048 for u in used), (held, used)
    assert record["summary"]["failures"] == [], json.dumps(
        {
            k: [(r["quantity"], r["agent"], r["smi"]) for r in q["rows"] if not r["ok"]]
            for k, q in summary.items()
            if not q["pass"]
        },
        indent=1,
        default=str,
    )
