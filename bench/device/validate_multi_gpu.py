"""The NVML source on a host of several GPUs, against nvidia-smi (issue 12).

    PYTHONPATH=agent python3 bench/device/validate_multi_gpu.py --out DIR

One PyTorch load per GPU (bench/device/gpu_load.py with CUDA_VISIBLE_DEVICES set),
each holding a different, known amount of memory (8 GiB x (index + 1)); GPU 0
runs matmuls, the others hold their memory idle. Then, GPU by GPU: the agent's
series (index, UUID, memory, utilization) against ``nvidia-smi --query-gpu``
taken at the same moment, and each load's PID and memory against
``nvidia-smi --query-compute-apps``, attributed to the right GPU. Also the cost
of one NVML pass over all GPUs, and the agent itself (`inferwatch run
--gpu-backend nvml`) serving one series per GPU.

Writes DIR/multi_gpu.json and DIR/multi_gpu.md. A failing step is recorded and
the rest still runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "agent"))

import pynvml  # noqa: E402
from validate_h200 import agent_end_to_end, agent_series, parse_csv, pick, run  # noqa: E402

from inferwatch.agent.collectors.nvml import NvmlSource  # noqa: E402

MIB = 1024**2
GIB = 1024**3
#: memory agrees within this (nvidia-smi rounds to MiB; allocations move a little)
MEMORY_TOLERANCE_MIB = 64.0


class GpuLoad:
    """bench/device/gpu_load.py pinned to one GPU."""

    def __init__(self, out: Path, index: int, gib: float, state: str) -> None:
        self.dir = out / f".load-{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.control = self.dir / "control"
        self.ready = self.dir / "ready"
        self.control.write_text(state)
        self.ready.unlink(missing_ok=True)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(index))
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "gpu_load.py"), "--gib", str(gib),
             "--control", str(self.control), "--ready", str(self.ready)],
            env=env,
        )  # fmt: skip
        self.index, self.gib, self.state = index, gib, state
        self.info: dict[str, Any] = {}

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists() or not self.ready.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError(f"load on GPU {self.index} exited: {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"load on GPU {self.index} not ready in time")
            time.sleep(0.2)
        self.info = json.loads(self.ready.read_text())

    def stop(self) -> None:
        self.control.write_text("stop")
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def smi_gpus() -> list[dict[str, str]]:
    fields = ["index", "uuid", "memory.used", "memory.total", "utilization.gpu"]
    out = run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    return parse_csv(out, fields)


def smi_apps() -> list[dict[str, str]]:
    fields = ["gpu_uuid", "pid", "used_memory"]
    out = run(["nvidia-smi", f"--query-compute-apps={','.join(fields)}",
               "--format=csv,noheader,nounits"])  # fmt: skip
    return parse_csv(out, fields)


def compare_gpus(src: NvmlSource, loads: list[GpuLoad]) -> list[dict[str, Any]]:
    """One sample: agent and nvidia-smi at the same moment, per GPU and per load process."""
    src.collect_once()
    series = agent_series(src)
    gpus, apps = smi_gpus(), smi_apps()
    rows: list[dict[str, Any]] = []
    for g in gpus:
        i, uuid = g["index"], g["uuid"]
        agent_uuid = next((lab["uuid"] for lab, _ in series.get("inferwatch_gpu_info", [])
                           if lab.get("gpu") == i), None)  # fmt: skip
        used = pick(series, "inferwatch_gpu_memory_used_bytes", gpu=i)
        util = pick(series, "inferwatch_gpu_utilization_ratio", gpu=i)
        row: dict[str, Any] = {
            "gpu": i,
            "uuid_smi": uuid,
            "uuid_agent": agent_uuid,
            "uuid_ok": agent_uuid == uuid,
            "memory_used_mib_smi": float(g["memory.used"]),
            "memory_used_mib_agent": None if used is None else used / MIB,
            "utilization_pct_smi": float(g["utilization.gpu"]),
            "utilization_pct_agent": None if util is None else util * 100,
        }
        row["memory_ok"] = (
            used is not None
            and abs(row["memory_used_mib_agent"] - row["memory_used_mib_smi"])
            <= MEMORY_TOLERANCE_MIB
        )
        procs = []
        for load in loads:
            pid = str(load.info.get("pid", ""))
            smi = next((a for a in apps if a["pid"] == pid), None)
            agent = pick(series, "inferwatch_gpu_process_memory_used_bytes", gpu=i, pid=pid)
            on_this_gpu = smi is not None and smi["gpu_uuid"] == uuid
            if not on_this_gpu and agent is None:
                continue
            entry = {
                "pid": pid,
                "load_gpu": load.index,
                "held_gib": load.gib,
                "smi_mib": float(smi["used_memory"]) if on_this_gpu and smi else None,
                "agent_mib": None if agent is None else agent / MIB,
            }
            entry["ok"] = (
                load.index == int(i)
                and on_this_gpu
                and entry["agent_mib"] is not None
                and abs(entry["agent_mib"] - entry["smi_mib"]) <= MEMORY_TOLERANCE_MIB
                and entry["agent_mib"] >= load.gib * 1024
            )
            procs.append(entry)
        row["processes"] = procs
        row["processes_ok"] = bool(procs) and all(p["ok"] for p in procs)
        rows.append(row)
    return rows


def pass_cost(src: NvmlSource, passes: int = 200) -> dict[str, float]:
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        src.collect_once()
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": statistics.median(times),
            "p90_ms": sorted(times)[int(0.9 * len(times))]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"errors": [], "samples": []}
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    record["gpus"] = count
    record["driver"] = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
                           ).splitlines()[0].strip()  # fmt: skip
    src = NvmlSource(pynvml, interval=1.0, slow_interval=30.0, activity_interval=0.0)
    try:
        record["pass_cost_idle"] = pass_cost(src)
        record["pass_cost_idle"]["per_gpu_ms"] = record["pass_cost_idle"]["median_ms"] / count
    except Exception:
        record["errors"].append(traceback.format_exc())
    loads: list[GpuLoad] = []
    try:
        scratch = Path(tempfile.mkdtemp(prefix="inferwatch-loads-"))
        loads = [GpuLoad(scratch, i, 8.0 * (i + 1), "run" if i == 0 else "pause")
                 for i in range(count)]  # fmt: skip
        for load in loads:
            load.wait_ready()
        time.sleep(3)  # utilization is averaged by the driver over its sample period
        for _ in range(args.samples):
            record["samples"].append(compare_gpus(src, loads))
            time.sleep(1)
        record["pass_cost_loaded"] = pass_cost(src)
        record["pass_cost_loaded"]["per_gpu_ms"] = record["pass_cost_loaded"]["median_ms"] / count
        record["agent"] = agent_end_to_end(args.out)
    except Exception:
        record["errors"].append(traceback.format_exc())
    finally:
        for load in loads:
            load.stop()
    record["all_ok"] = bool(record["samples"]) and all(
        r["uuid_ok"] and r["memory_ok"] and r["processes_ok"]
        for sample in record["samples"] for r in sample
    ) and not record["errors"]  # fmt: skip
    (args.out / "multi_gpu.json").write_text(json.dumps(record, indent=2))
    (args.out / "multi_gpu.md").write_text(markdown(record))
    print(markdown(record))
    return 0 if record["all_ok"] else 1


def markdown(record: dict[str, Any]) -> str:
    lines = [f"GPUs: {record.get('gpus')}, driver {record.get('driver')}", ""]
    if record["samples"]:
        last = record["samples"][-1]
        lines += ["| GPU | UUID agrees | memory used MiB (smi / agent) | util % (smi / agent) "
                  "| processes (pid: held GiB, smi / agent MiB) |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for r in last:
            procs = "; ".join(
                f"{p['pid']}: {p['held_gib']:g} GiB, {p['smi_mib']} / {p['agent_mib']:.0f}"
                for p in r["processes"]
            )
            lines.append(
                f"| {r['gpu']} | {r['uuid_ok']} | {r['memory_used_mib_smi']:.0f} / "
                f"{r['memory_used_mib_agent']:.0f} | {r['utilization_pct_smi']:.0f} / "
                f"{r['utilization_pct_agent']:.0f} | {procs} |"
            )
    for key in ("pass_cost_idle", "pass_cost_loaded"):
        if key in record:
            c = record[key]
            lines.append(f"\n{key}: median {c['median_ms']:.3f} ms for all GPUs "
                         f"({c['per_gpu_ms']:.3f} ms per GPU), p90 {c['p90_ms']:.3f} ms")  # fmt: skip
    lines.append(f"\nagent end to end: {record.get('agent')}")
    lines.append(f"all comparisons agree: {record.get('all_ok')}; errors: {len(record['errors'])}")
    for e in record["errors"]:
        lines.append("```\n" + e + "```")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
