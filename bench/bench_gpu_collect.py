"""GPU collection cost: one NVML pass of the agent against one ``nvidia-smi --query-gpu`` call.

Issue 8, benchmark 1. Prints its figures (medians and ratios) and, with
``--json``, writes them with the machine they ran on. Asserts nothing.

    PYTHONPATH=agent python3 bench/bench_gpu_collect.py                  # real GPUs
    PYTHONPATH=agent python3 bench/bench_gpu_collect.py --backend fake   # plumbing only

What is timed:

* ``pass``: ``NvmlSource.collect_once()`` with the default metric set and
  intervals, in the calling thread, after the first passes (which open the GPUs
  and take the first activity sample): the cheap readings, as in most passes
  (activity readings every 15 s and slow calls every 30 s are off their
  interval). Divided by the number of GPUs.
* ``pass with activity readings``: ``activity_interval=0``, so every pass also
  takes a GPM sample and reads per-process SM shares.
* ``pass with slow calls``: ``slow_interval=0``, so every pass also makes the
  slow calls (energy, ECC, power limit, MIG layout).
* ``amortised``: the mean cost per pass at the default cadences (1 s / 15 s /
  30 s), computed from the three medians.
* ``refresh``: ``await NvmlSource.refresh()``, i.e. the pass plus the hop to a
  worker thread and back, as the agent runs it.
* ``families``: building the metric families from a snapshot (no NVML).
* ``nvidia-smi``: one ``nvidia-smi --query-gpu=FIELDS --format=csv`` process
  for the same quantities (``same``), and for every field the driver offers
  (``all``, what nvidia_gpu_exporter asks for by default), per GPU.
* a per-function breakdown of the NVML calls in one pass (separate run,
  through a timing wrapper).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from inferwatch.agent.collectors.nvml import NvmlSource, build_families
from inferwatch.agent.config import GpuConfig
from inferwatch.agent.wiring import load_backend

#: nvidia-smi fields for the quantities the agent exports (older names as fallbacks).
SAME_FIELDS = [
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "mig.mode.current",
    "utilization.gpu",
    "utilization.memory",
    "memory.total",
    "memory.reserved",
    "memory.used",
    "power.draw",
    "enforced.power.limit",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "clocks_event_reasons.active",
    "clocks_throttle_reasons.active",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
]


def smi_fields() -> tuple[list[str], set[str]]:
    """This driver's ``--query-gpu`` fields: (one name per field, every name and alias)."""
    out = subprocess.run(
        ["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, timeout=30
    ).stdout
    primary, names = [], set()
    for line in out.splitlines():
        if line.startswith('"'):
            found = re.findall(r'"([^"\s]+)"', line)
            if found:
                primary.append(found[0])
                names.update(found)
    return primary, names


def pick_fields(wanted: list[str], have: set[str]) -> list[str]:
    picked = [f for f in wanted if f in have]
    if "clocks_event_reasons.active" in picked and "clocks_throttle_reasons.active" in picked:
        picked.remove("clocks_throttle_reasons.active")
    return picked


def time_smi(fields: list[str], calls: int) -> list[float]:
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout}")
    return times


class TimingBackend:
    """Wraps an NVML backend and sums the wall time of each function it hands out."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.spent: dict[str, list[float]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or not name.startswith("nvml"):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.spent[name].append(time.perf_counter() - start)

        return timed


class RefusingBackend:
    """Answers NOT_SUPPORTED for some functions, so the source leaves them out for good.

    Measures what a pass costs without one group of readings, through the
    source's own NOT_SUPPORTED path (no change to the source).
    """

    def __init__(self, inner: Any, refuse: set[str]) -> None:
        self._inner = inner
        self._refuse = refuse

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in self._refuse:
            return value

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        return refused


#: Groups of readings left out one at a time in the ablation.
ABLATION = {
    "nothing (baseline of this table)": set(),
    "gpm": {"nvmlGpmQueryDeviceSupport"},
    "processes": {"nvmlDeviceGetComputeRunningProcesses"},
    "process_utilization": {"nvmlDeviceGetProcessUtilization"},
    "clock_events": {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    },
    "power": {"nvmlDeviceGetPowerUsage"},
    "utilization": {"nvmlDeviceGetUtilizationRates"},
}


def summary(values: list[float], per: int = 1) -> dict[str, float]:
    ordered = sorted(v / per for v in values)
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1e3,
        "min_ms": ordered[0] * 1e3,
        "mean_ms": statistics.fmean(ordered) * 1e3,
        "n": len(ordered),
    }


def time_passes(src: NvmlSource, passes: int, spacing: float) -> tuple[list[float], list[float]]:
    """Wall and thread-CPU seconds of ``passes`` passes, ``spacing`` seconds apart."""
    wall, cpu = [], []
    for _ in range(passes):
        w0, c0 = time.perf_counter(), time.thread_time()
        ok = src.collect_once()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
        if not ok:
            raise RuntimeError(f"NVML pass failed: {src.health.errors}")
        if spacing:
            time.sleep(spacing)
    return wall, cpu


def machine(backend: Any, kind: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "backend": kind,
    }
    try:
        backend.nvmlInit()
        info["driver"] = str(backend.nvmlSystemGetDriverVersion())
        count = int(backend.nvmlDeviceGetCount())
        info["gpus"] = count
        info["gpu_names"] = sorted(
            {
                str(backend.nvmlDeviceGetName(backend.nvmlDeviceGetHandleByIndex(i)))
                for i in range(count)
            }
        )
        backend.nvmlShutdown()
    except Exception as exc:  # a description, not a measurement: never fail on it
        info["error"] = repr(exc)
    try:
        from importlib.metadata import version

        info["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception:  # not installed as a distribution (a vendored copy)
        info["nvidia_ml_py"] = "unknown"
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run(args: argparse.Namespace) -> dict[str, Any]:
    gpu = GpuConfig(backend=args.backend, fake_count=args.fake_gpus)
    make: Callable[[], Any] = lambda: load_backend(gpu)  # noqa: E731
    backend = make()
    result: dict[str, Any] = {"machine": machine(backend, args.backend)}
    gpus = int(result["machine"].get("gpus") or 1)

    # Default intervals: most passes skip the slow calls.
    src = NvmlSource(
        backend,
        interval=1.0,
        slow_interval=args.slow_interval,
        activity_interval=args.activity_interval,
    )
    if not src.collect_once():
        raise SystemExit(f"cannot read NVML: {src.health.errors}")
    src.collect_once()  # GPM needs a previous sample: measure steady passes only
    wall, cpu = time_passes(src, args.passes, args.spacing)
    result["pass_per_gpu"] = summary(wall, gpus)
    result["pass_cpu_per_gpu"] = summary(cpu, gpus)
    result["series_per_pass"] = sum(len(f.samples) for f in src.families())

    fam_times = []
    for _ in range(max(args.passes // 2, 10)):
        start = time.perf_counter()
        build_families(src.snapshot, {})  # families() itself caches per snapshot
        fam_times.append(time.perf_counter() - start)
    result["families_per_gpu"] = summary(fam_times, gpus)

    async def refreshes() -> list[float]:
        times = []
        for _ in range(max(args.passes // 2, 10)):
            start = time.perf_counter()
            await src.refresh()
            times.append(time.perf_counter() - start)
            await asyncio.sleep(args.spacing)
        await src.stop()
        return times

    result["refresh_per_gpu"] = summary(asyncio.run(refreshes()), gpus)

    # Every pass with the activity readings, then every pass with the slow calls.
    for key, slow_interval, activity_interval in (
        ("pass_with_activity_per_gpu", 3600.0, 0.0),
        ("pass_with_slow_calls_per_gpu", 0.0, 3600.0),
    ):
        other = NvmlSource(
            make(), interval=1.0, slow_interval=slow_interval, activity_interval=activity_interval
        )
        other.collect_once()
        other.collect_once()
        owall, _ = time_passes(other, max(args.passes // 4, 10), args.spacing)
        result[key] = summary(owall, gpus)
        asyncio.run(other.stop())
    fast_ms = result["pass_per_gpu"]["median_ms"]
    activity_ms = result["pass_with_activity_per_gpu"]["median_ms"]
    slow_ms = result["pass_with_slow_calls_per_gpu"]["median_ms"]
    result["amortised_pass_per_gpu_ms"] = (
        fast_ms
        + (activity_ms - fast_ms) / args.activity_interval
        + (slow_ms - fast_ms) / args.slow_interval
    )

    # Where a pass's time goes, function by function.
    timing = TimingBackend(make())
    probe = NvmlSource(timing, interval=1.0, slow_interval=0.0, activity_interval=0.0)
    probe.collect_once()
    probe.collect_once()
    timing.spent.clear()
    for _ in range(max(args.passes // 4, 10)):
        probe.collect_once()
        time.sleep(args.spacing)
    result["calls_ms"] = {
        name: {
            "median_ms": statistics.median(t) * 1e3,
            "per_pass": len(t) / max(args.passes // 4, 10),
        }
        for name, t in sorted(timing.spent.items())
        if name != "nvmlEventSetWait"
    }
    asyncio.run(probe.stop())

    # What each group of readings costs: the pass without it.
    ablation = {}
    for group, refuse in ABLATION.items():
        lean = NvmlSource(
            RefusingBackend(make(), refuse),
            interval=1.0,
            slow_interval=3600.0,
            activity_interval=0.0,
        )
        lean.collect_once()
        lean.collect_once()
        lwall, _ = time_passes(lean, max(args.passes // 3, 10), args.spacing)
        ablation[group] = summary(lwall, gpus)["median_ms"]
        asyncio.run(lean.stop())
    result["pass_without_per_gpu_ms"] = ablation

    if args.backend == "nvml" and shutil.which("nvidia-smi"):
        available, names = smi_fields()
        same = pick_fields(SAME_FIELDS, names)
        result["smi_fields_same"] = same
        result["smi_same_per_gpu"] = summary(time_smi(same, args.smi_calls), gpus)
        everything = [f for f in available if not f.startswith("gpu_operation_mode")]
        try:
            result["smi_all_per_gpu"] = summary(time_smi(everything, args.smi_calls), gpus)
            result["smi_fields_all"] = len(everything)
        except RuntimeError as exc:  # some fields are refused on some boards
            result["smi_all_error"] = str(exc)[:500]
        result["ratio_smi_same_over_pass"] = (
            result["smi_same_per_gpu"]["median_ms"] / result["pass_per_gpu"]["median_ms"]
        )
        result["ratio_smi_same_over_amortised_pass"] = (
            result["smi_same_per_gpu"]["median_ms"] / result["amortised_pass_per_gpu_ms"]
        )
        if "smi_all_per_gpu" in result:
            result["ratio_smi_all_over_pass"] = (
                result["smi_all_per_gpu"]["median_ms"] / result["pass_per_gpu"]["median_ms"]
            )
    return result


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"machine: {m.get('host')} {m.get('cpu')} x{m.get('cpus')}, "
        f"{m.get('gpus')} x {', '.join(m.get('gpu_names', []))}, driver {m.get('driver')}, "
        f"nvidia-ml-py {m.get('nvidia_ml_py')}, Python {m.get('python')}, backend {m.get('backend')}",
        f"series per pass: {result['series_per_pass']}",
        "",
        "| per GPU | median ms | p90 ms | n |",
        "|---|---|---|---|",
    ]
    for key, label in (
        ("pass_per_gpu", "NVML pass (wall)"),
        ("pass_cpu_per_gpu", "NVML pass (CPU of the thread)"),
        ("pass_with_activity_per_gpu", "NVML pass with the activity readings"),
        ("pass_with_slow_calls_per_gpu", "NVML pass with the slow calls"),
        ("refresh_per_gpu", "refresh() (pass + thread hop)"),
        ("families_per_gpu", "families() from the snapshot"),
        ("smi_same_per_gpu", "nvidia-smi --query-gpu, same quantities"),
        ("smi_all_per_gpu", "nvidia-smi --query-gpu, every field"),
    ):
        if key in result:
            s = result[key]
            lines.append(f"| {label} | {s['median_ms']:.3f} | {s['p90_ms']:.3f} | {s['n']} |")
    lines.append("")
    lines.append(
        f"amortised pass per GPU (1 s / {result['cadence'][0]:g} s / {result['cadence'][1]:g} s): "
        f"{result['amortised_pass_per_gpu_ms']:.3f} ms"
    )
    for key, label in (
        ("ratio_smi_same_over_pass", "nvidia-smi (same) / NVML pass"),
        ("ratio_smi_same_over_amortised_pass", "nvidia-smi (same) / amortised pass"),
        ("ratio_smi_all_over_pass", "nvidia-smi (all fields) / NVML pass"),
    ):
        if key in result:
            lines.append(f"{label}: {result[key]:.0f}x")
    lines.append("")
    lines.append("| activity pass per GPU without | median ms | saves ms |")
    lines.append("|---|---|---|")
    without = result.get("pass_without_per_gpu_ms", {})
    baseline = next(iter(without.values()), 0.0)
    for group, ms in without.items():
        saved = baseline - ms
        lines.append(f"| {group} | {ms:.3f} | {saved:.3f} |")
    lines.append("")
    lines.append("| NVML function | median ms per call | calls per pass |")
    lines.append("|---|---|---|")
    for name, c in result["calls_ms"].items():
        lines.append(f"| {name} | {c['median_ms']:.4f} | {c['per_pass']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["nvml", "fake"], default="nvml")
    parser.add_argument("--fake-gpus", type=int, default=1)
    parser.add_argument("--passes", type=int, default=300)
    parser.add_argument("--spacing", type=float, default=0.02, help="seconds between passes")
    parser.add_argument("--slow-interval", type=float, default=30.0)
    parser.add_argument("--activity-interval", type=float, default=15.0)
    parser.add_argument("--smi-calls", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--label", default="", help="a note on the conditions (idle, load)")
    args = parser.parse_args(argv)
    result = run(args)
    result["label"] = args.label
    result["cadence"] = [args.activity_interval, args.slow_interval]
    text = (f"conditions: {args.label}\n" if args.label else "") + report(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True))
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
