"""Cost of one fake NVML call reading simulator state files (the agent's ``--gpu-backend fake``).

The fake backend runs inside the agent in the demo, the tests and the
footprint benchmarks, so its cost shows in their CPU figures. Each call
lists the GPU's state fragments (``gpu-<i>.<port>.json``) and re-parses only
those that changed. Prints the best-of-N mean per call for GPUs with one
fragment each and with several (co-located workers). Asserts nothing.

    PYTHONPATH=agent python3 bench/bench_fake_gpu.py [--gpus 8] [--workers-per-gpu 1 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pynvml

from inferwatch.sim import gpustate
from inferwatch.sim.fakegpu import FakeNvml
from inferwatch.sim.gpustate import SimGpuProcess, SimGpuState


def per_call_seconds(gpus: int, per_gpu: int, calls: int, repeats: int) -> float:
    state_dir = tempfile.mkdtemp(prefix="bench-fake-gpu-")
    for index in range(gpus):
        for w in range(per_gpu):
            # as a running simulator writes it: just now, by a living process
            state = SimGpuState(
                processes=[SimGpuProcess(pid=os.getpid(), used_bytes=1)], updated=time.time()
            )
            gpustate.write_state(state_dir, index, state, tag=8000 + w)
    nvml = FakeNvml(gpus, state_dir=state_dir)
    nvml.nvmlInit()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
    # what a pass asks of every GPU most often
    functions: list[Callable[[Any], Any]] = [
        lambda h: nvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2),
        nvml.nvmlDeviceGetUtilizationRates,
        nvml.nvmlDeviceGetPowerUsage,
        nvml.nvmlDeviceGetComputeRunningProcesses,
    ]
    for fn in functions:
        fn(handles[0])
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for k in range(calls):
            for fn in functions:
                fn(handles[k % gpus])
        best = min(best, (time.perf_counter() - started) / (calls * len(functions)))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--workers-per-gpu", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    out = {}
    for per_gpu in args.workers_per_gpu:
        s = per_call_seconds(args.gpus, per_gpu, args.calls, args.repeats)
        out[str(per_gpu)] = s
        print(f"{args.gpus} GPUs, {per_gpu} fragment(s) each: {s * 1e6:.1f} us per call")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"gpus": args.gpus, "seconds_per_call": out}, fh, indent=2)


if __name__ == "__main__":
    main()
