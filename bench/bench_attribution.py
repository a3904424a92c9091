"""Cost of worker-to-GPU attribution (issue 15) per NVML snapshot, by source and size.

    PYTHONPATH=agent python3 bench/bench_attribution.py [--json FILE]

Attribution runs once per new NVML snapshot (every ``gpu.interval``), inside
``NvmlSource.families()``. The devices come from a real pass of the NVML source
over the fake backend (N GPUs, one process each); the workers are found through
NVML's process list (source 1) or their CUDA_VISIBLE_DEVICES (source 2).
Prints the median and p90 of one ``attribute()`` call per shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

from inferwatch.agent.collectors.attribution import WorkerGpuInputs, attribute
from inferwatch.agent.collectors.nvml import DeviceReading, NvmlSource
from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import GIB, SimGpuProcess, SimGpuState


def devices(gpus: int, workers: int) -> tuple[DeviceReading, ...]:
    """Worker n's process (pid 10000 + n) on GPU n % gpus."""
    fake = FakeNvml(gpus)
    for i in range(gpus):
        procs = [SimGpuProcess(pid=10_000 + n, used_bytes=GIB)
                 for n in range(workers) if n % gpus == i]  # fmt: skip
        fake.set_state(i, SimGpuState(name="NVIDIA H200", processes=procs))
    src = NvmlSource(fake, interval=1.0, slow_interval=30.0, activity_interval=15.0)
    src.collect_once()
    snapshot = src.snapshot.devices
    src._shutdown()
    return snapshot


def measure(gpus: int, workers: int, source: str, repeat: int) -> dict[str, Any]:
    devs = devices(gpus, workers)
    if source == "processes":
        inputs = [WorkerGpuInputs(f"w{n}") for n in range(workers)]
        pid_workers = {10_000 + n: f"w{n}" for n in range(workers)}
    else:
        inputs = [
            WorkerGpuInputs(f"w{n}", {"CUDA_VISIBLE_DEVICES": str(n % gpus)})
            for n in range(workers)
        ]
        pid_workers = {}
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answers = attribute(inputs, devs, pid_workers=pid_workers, own_env={})
        times.append((time.perf_counter() - start) * 1e6)
    assert all(a.devices for a in answers.values()), "every worker must be attributed"
    times.sort()
    return {
        "gpus": gpus,
        "workers": workers,
        "source": source,
        "median_us": statistics.median(times),
        "p90_us": times[int(0.9 * len(times))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--repeat", type=int, default=500)
    args = parser.parse_args()
    rows = [
        measure(gpus, workers, source, args.repeat)
        for gpus, workers in ((1, 1), (8, 8), (8, 64), (64, 64))
        for source in ("processes", "environment")
    ]
    for r in rows:
        print(f"{r['gpus']:>2} GPUs {r['workers']:>3} workers {r['source']:<11} "
              f"median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
