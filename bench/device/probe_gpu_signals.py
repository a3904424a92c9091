"""The NVML source's P-state, fan and PCIe readings on a real GPU, beside nvidia-smi (issue 23).

    PYTHONPATH=agent python3 bench/device/probe_gpu_signals.py --out DIR

Idle first, then while a PyTorch loop copies 1 GiB host -> device and back
(PCIe traffic both ways) and multiplies bf16 matrices: one agent pass per
sample (``activity_interval`` 0, so PCIe is read every pass) next to
``nvidia-smi --query-gpu=pstate,fan.speed`` and ``nvidia-smi dmon -s t``
(PCIe rx/tx in MB/s). Writes DIR/probe.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "agent"))

import pynvml  # noqa: E402

from inferwatch.collectors.nvml import NvmlSource  # noqa: E402


def smi() -> dict[str, str]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=pstate,fan.speed", "--format=csv,noheader", "-i", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    pstate, fan = (p.strip() for p in out.split(",", 1))
    dmon = subprocess.run(
        ["nvidia-smi", "dmon", "-s", "t", "-c", "1", "-i", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    rows = [line.split() for line in dmon.splitlines() if line.strip() and not line.startswith("#")]
    return {"pstate": pstate, "fan": fan, "dmon_t": " ".join(rows[-1]) if rows else dmon}


def agent_pass(src: NvmlSource) -> dict[str, Any]:
    asyncio.run(src.refresh())
    out: dict[str, Any] = {}
    for fam in src.families():
        for s in fam.samples:
            if s.labels.get("gpu") != "0" or "gpu_instance" in s.labels:
                continue
            if s.name in ("inferwatch_gpu_performance_state", "inferwatch_gpu_fan_speed_ratio"):
                out[s.name] = s.value
            if s.name == "inferwatch_gpu_pcie_throughput_bytes_per_second":
                out[f"pcie_{s.labels['direction']}_MBps"] = round(s.value / 1e6, 1)
    return out


def load(stop: threading.Event) -> None:
    import torch

    host = torch.empty(1 << 30, dtype=torch.uint8).pin_memory()
    dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        dev.copy_(host, non_blocking=True)
        host.copy_(dev, non_blocking=True)
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    src = NvmlSource(pynvml, interval=0.01, slow_interval=1.0, activity_interval=0.0)
    result: dict[str, Any] = {"phases": {}}
    stop = threading.Event()
    worker: threading.Thread | None = None
    for phase in ("idle", "load"):
        if phase == "load":
            worker = threading.Thread(target=load, args=(stop,), daemon=True)
            worker.start()
            time.sleep(5)
        rows = []
        for _ in range(args.samples):
            rows.append({"agent": agent_pass(src), "nvidia-smi": smi()})
            time.sleep(1)
        result["phases"][phase] = rows
    stop.set()
    if worker is not None:
        worker.join(30)
    result["not_supported"] = sorted(src.health.errors)
    asyncio.run(src.stop())
    (args.out / "probe.json").write_text(json.dumps(result, indent=2))
    for phase, rows in result["phases"].items():
        for row in rows:
            print(phase, json.dumps(row["agent"]), "|", json.dumps(row["nvidia-smi"]))
    print("health errors:", result["not_supported"])


if __name__ == "__main__":
    main()
