"""Which processes use a device: NVML's compute-process list, per-process SM share, names.

The PIDs read here feed the worker-to-GPU attribution (NVML's process list is its
first source) and the per-process series.
"""

from __future__ import annotations

import psutil
import pynvml

from inferwatch.agent.collectors.nvml.calls import SKIP, Device, NvmlCalls, ratio
from inferwatch.agent.collectors.nvml.snapshot import ProcessReading


class Processes:
    """Per-device process readings; remembers process names while their PIDs are seen."""

    def __init__(self, calls: NvmlCalls) -> None:
        self.calls = calls
        self._names: dict[int, str] = {}

    def read(
        self, dev: Device, seen: set[int], *, shares: bool | None
    ) -> tuple[ProcessReading, ...]:
        """Per-process memory; SM shares read when ``shares`` (None: never, as on MIG)."""
        procs = self.calls.call(
            dev, "processes", "nvmlDeviceGetComputeRunningProcesses", dev.handle
        )
        if procs is SKIP or not procs:
            return ()
        memory: dict[int, int | None] = {}
        for proc in procs:
            pid = int(proc.pid)
            used = proc.usedGpuMemory
            if used is None:
                memory.setdefault(pid, None)
            else:
                memory[pid] = (memory.get(pid) or 0) + int(used)
        if shares:
            read = self._shares(dev)
            # A listed process without a sample ran no kernel in the window.
            dev.shares = None if read is None else {pid: read.get(pid, 0.0) for pid in memory}
        known = dev.shares if shares is not None else None
        out = []
        for pid, used in memory.items():
            seen.add(pid)
            share = None if known is None else known.get(pid)
            out.append(ProcessReading(pid, self._name(pid), used, share))
        return tuple(out)

    def forget_except(self, seen: set[int]) -> None:
        """Drop the names of PIDs no device listed in this pass."""
        for pid in [p for p in self._names if p not in seen]:
            del self._names[pid]

    def _shares(self, dev: Device) -> dict[int, float] | None:
        """Per-pid SM share since the previous pass; None when NVML cannot say."""
        key = "process_utilization"
        if key in dev.unsupported:
            return None
        fn = getattr(self.calls.nvml, "nvmlDeviceGetProcessUtilization", None)
        if fn is None:
            self.calls.unsupported(dev, key, "this pynvml has no nvmlDeviceGetProcessUtilization")
            return None
        try:
            samples = fn(dev.handle, dev.proc_ts)
        except pynvml.NVMLError as err:
            if err.value in (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS):
                # No sample newer than the last one (pynvml raises on an empty success too).
                return {}
            self.calls.failed(dev, key, err)
            return None
        sums: dict[int, list[float]] = {}
        newest = dev.proc_ts
        for sample in samples:
            acc = sums.setdefault(int(sample.pid), [0.0, 0.0])
            acc[0] += sample.smUtil
            acc[1] += 1
            newest = max(newest, int(sample.timeStamp))
        dev.proc_ts = newest
        self.calls.succeeded(dev, key)
        return {pid: ratio(total / n) for pid, (total, n) in sums.items()}

    def _name(self, pid: int) -> str:
        name = self._names.get(pid)
        if name is None:
            try:
                name = psutil.Process(pid).name()
            except (psutil.Error, OSError):
                # Another PID namespace (a container without hostPID) or already gone.
                name = "unknown"
            self._names[pid] = name
        return name
