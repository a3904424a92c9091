"""The NVML source against nvidia-smi on a real GPU, under a known load and idle (issue 8).

    PYTHONPATH=agent python3 bench/device/validate_h200.py --out DIR [--bench]

Phases: ``load`` (a PyTorch bf16 matmul loop holding a known amount of memory,
bench/device/gpu_load.py), ``pause`` (the same process, memory held, no
kernels) and ``idle`` (the process gone). In each phase, every sample starts
``nvidia-smi --query-gpu`` and ``--query-compute-apps`` and runs one NVML pass of
the agent at the same moment, then compares each quantity within a stated
tolerance. GPM activity and clock-event reasons are recorded per phase with
what the phase implies (busy SMs and tensor pipes under load, none idle);
``nvidia-smi dmon --gpm-metrics`` and ``pmon`` are recorded beside them.
With ``--bench``, bench/bench_gpu_collect.py runs at the end, GPU idle.

Writes DIR/validation.json (every sample and comparison) and DIR/validation.md
(the tables for docs/validation.md). Never stops half way: a failing step is
recorded under ``errors`` and the rest still runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "agent"))

import pynvml  # noqa: E402

from inferwatch.agent.collectors.nvml import NvmlSource  # noqa: E402

MIB = 1024**2

#: nvidia-smi field -> (agent family, how to turn the agent's value into smi's unit).
GPU_FIELDS: dict[str, tuple[str, float]] = {
    "utilization.gpu": ("inferwatch_gpu_utilization_ratio", 100.0),
    "utilization.memory": ("inferwatch_gpu_memory_busy_ratio", 100.0),
    "memory.total": ("inferwatch_gpu_memory_total_bytes", 1 / MIB),
    "memory.reserved": ("inferwatch_gpu_memory_reserved_bytes", 1 / MIB),
    "memory.used": ("inferwatch_gpu_memory_used_bytes", 1 / MIB),
    "power.draw": ("inferwatch_gpu_power_watts", 1.0),
    "enforced.power.limit": ("inferwatch_gpu_power_limit_watts", 1.0),
    "temperature.gpu": ("inferwatch_gpu_temperature_celsius", 1.0),
    "clocks.sm": ("inferwatch_gpu_sm_clock_hertz", 1e-6),
    "clocks.mem": ("inferwatch_gpu_memory_clock_hertz", 1e-6),
}
#: Recorded beside the comparisons, not compared (other readings of the same thing).
EXTRA_FIELDS = ["power.draw.instant", "power.draw.average", "clocks.max.sm", "pstate"]
TEXT_FIELDS = ["index", "uuid", "name", "pci.bus_id", "driver_version", "mig.mode.current"]
EVENT_FIELDS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]
ECC_FIELDS = {
    "ecc.errors.corrected.volatile.total": "corrected",
    "ecc.errors.uncorrected.volatile.total": "uncorrected",
}


@dataclass(frozen=True)
class Tolerance:
    """|agent - smi| <= max(abs, rel * |smi|); ``hard``: must hold in every sample."""

    abs: float
    rel: float = 0.0
    hard: bool = True
    why: str = ""


TOLERANCES: dict[str, Tolerance] = {
    "utilization.gpu": Tolerance(
        10, why="same NVML counter, read ~50 ms apart; it moves between sample periods"
    ),
    "utilization.memory": Tolerance(15, why="as utilization.gpu; memory activity varies more"),
    "memory.total": Tolerance(1, why="nvidia-smi rounds to MiB"),
    "memory.reserved": Tolerance(1, why="nvidia-smi rounds to MiB"),
    "memory.used": Tolerance(2, why="nvidia-smi rounds to MiB; steady allocations"),
    "power.draw": Tolerance(
        30, 0.15, hard=False, why="power moves within milliseconds under a matmul loop"
    ),
    "enforced.power.limit": Tolerance(1, why="static"),
    "temperature.gpu": Tolerance(2, why="moves slowly"),
    "clocks.sm": Tolerance(
        60, 0.05, hard=False, why="boost clock moves with power and temperature"
    ),
    "clocks.mem": Tolerance(1, why="HBM clock is fixed"),
    "clock_events": Tolerance(
        0, hard=False, why="reasons toggle within a sample period (power cap under load)"
    ),
    "ecc": Tolerance(0, why="counters; no errors expected during the run"),
    "process.used_memory": Tolerance(2, why="nvidia-smi rounds to MiB"),
    "process.pids": Tolerance(0, why="the same processes"),
    "labels": Tolerance(0, why="static descriptions"),
}
#: Share of samples a soft comparison must hold in.
SOFT_AGREEMENT = 2 / 3
#: What each phase implies for GPM, as (family, low, high).
GPM_EXPECTED = {
    "load": [
        ("inferwatch_gpu_sm_active_ratio", 0.5, 1.0),
        ("inferwatch_gpu_tensor_active_ratio", 0.2, 1.0),
        ("inferwatch_gpu_dram_active_ratio", 0.0, 1.0),
        ("inferwatch_gpu_sm_occupancy_ratio", 0.0, 1.0),
    ],
    "pause": [
        ("inferwatch_gpu_sm_active_ratio", 0.0, 0.05),
        ("inferwatch_gpu_tensor_active_ratio", 0.0, 0.05),
        ("inferwatch_gpu_dram_active_ratio", 0.0, 0.05),
    ],
    "idle": [
        ("inferwatch_gpu_sm_active_ratio", 0.0, 0.05),
        ("inferwatch_gpu_tensor_active_ratio", 0.0, 0.05),
        ("inferwatch_gpu_dram_active_ratio", 0.0, 0.05),
    ],
}
EVENT_BITS = 0xFF  # the eight reasons the agent exports


def run(cmd: list[str], timeout: float = 60) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr or proc.stdout}")
    return proc.stdout


def smi_fields() -> set[str]:
    """Every name (aliases too) this driver's ``nvidia-smi --query-gpu`` accepts."""
    import re

    names: set[str] = set()
    for line in run(["nvidia-smi", "--help-query-gpu"]).splitlines():
        if line.startswith('"'):
            names.update(re.findall(r'"([^"\s]+)"', line))
    return names


def parse_number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    try:
        return float(int(text, 16)) if text.startswith("0x") else float(text)
    except ValueError:
        return None


def parse_csv(text: str, fields: list[str]) -> list[dict[str, str]]:
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(fields):
            rows.append(dict(zip(fields, parts, strict=True)))
    return rows


class Smi:
    """nvidia-smi queries for the fields this driver knows."""

    def __init__(self) -> None:
        known = smi_fields()
        self.gpu_fields = [
            f
            for f in [*TEXT_FIELDS, *GPU_FIELDS, *EXTRA_FIELDS, *ECC_FIELDS, *EVENT_FIELDS]
            if f in known
        ]
        if "clocks_event_reasons.active" in self.gpu_fields:
            with contextlib.suppress(ValueError):
                self.gpu_fields.remove("clocks_throttle_reasons.active")
        self.missing = sorted(set([*TEXT_FIELDS, *GPU_FIELDS, *ECC_FIELDS]) - set(self.gpu_fields))

    def start(self) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
        gpu = subprocess.Popen(
            [
                "nvidia-smi",
                f"--query-gpu={','.join(self.gpu_fields)}",
                "--format=csv,noheader,nounits",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        apps = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-compute-apps=gpu_uuid,pid,used_memory",
                "--format=csv,noheader,nounits",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return gpu, apps

    def finish(
        self, procs: tuple[subprocess.Popen[str], subprocess.Popen[str]]
    ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        gpu_out, gpu_err = procs[0].communicate(timeout=60)
        apps_out, _ = procs[1].communicate(timeout=60)
        if procs[0].returncode != 0:
            raise RuntimeError(f"nvidia-smi --query-gpu failed: {gpu_err or gpu_out}")
        return (
            parse_csv(gpu_out, self.gpu_fields),
            parse_csv(apps_out, ["gpu_uuid", "pid", "used_memory"]),
        )


def agent_series(src: NvmlSource) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in src.families():
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def pick(series: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> Any:
    for ls, v in series.get(name, []):
        if all(ls.get(k) == want for k, want in labels.items()):
            return v
    return None


def compare(
    phase: str,
    sample: int,
    quantity: str,
    agent: float | None,
    smi: float | None,
    key: str,
    group: str | None = None,
) -> dict[str, Any]:
    """One reading of one quantity by both; ``group`` names it in the summary."""
    tol = TOLERANCES[key]
    if agent is None or smi is None:
        ok = agent is None and smi is None  # both absent agrees; one absent does not
        diff = None
    else:
        diff = agent - smi
        ok = abs(diff) <= max(tol.abs, tol.rel * abs(smi)) + 1e-9
    return {
        "phase": phase,
        "sample": sample,
        "quantity": quantity,
        "group": f"{phase}: {group or quantity.split(' ', 1)[-1]}",
        "agent": agent,
        "smi": smi,
        "diff": diff,
        "ok": ok,
        "hard": tol.hard,
        "tolerance": asdict(tol),
    }


def compare_sample(
    phase: str,
    n: int,
    series: dict[str, list[tuple[dict[str, str], float]]],
    gpus: list[dict[str, str]],
    apps: list[dict[str, str]],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for g in gpus:
        idx = g.get("index", "0")
        uuid = g.get("uuid", "")
        where = {"gpu": idx, "uuid": uuid}
        info = next(
            (ls for ls, _ in series.get("inferwatch_gpu_info", []) if ls.get("uuid") == uuid), {}
        )
        for field, label in (
            ("name", "name"),
            ("pci.bus_id", "pci_bus_id"),
            ("driver_version", "driver_version"),
            ("mig.mode.current", "mig_mode"),
        ):
            if field in g:
                smi_text = g[field].strip().lower()
                agent_text = str(info.get(label, "")).lower()
                row = compare(phase, n, f"gpu{idx} {field}", 0.0, 0.0, "labels")
                row.update(agent=agent_text, smi=smi_text, ok=agent_text == smi_text, diff=None)
                rows.append(row)
        for field, (family, scale) in GPU_FIELDS.items():
            if field not in g:
                continue
            value = pick(series, family, **where)
            agent = None if value is None else value * scale
            rows.append(
                compare(phase, n, f"gpu{idx} {field}", agent, parse_number(g[field]), field)
            )
        event_field = next((f for f in EVENT_FIELDS if f in g), None)
        if event_field:
            smi_mask = parse_number(g[event_field])
            mask = 0
            present = False
            for ls, v in series.get("inferwatch_gpu_clock_event_active", []):
                if ls.get("uuid") == uuid:
                    present = True
                    bit = dict(CLOCK_BITS)[ls["reason"]]
                    mask |= bit if v else 0
            rows.append(
                compare(
                    phase,
                    n,
                    f"gpu{idx} {event_field} (8 exported bits)",
                    float(mask) if present else None,
                    None if smi_mask is None else float(int(smi_mask) & EVENT_BITS),
                    "clock_events",
                )
            )
        for field, kind in ECC_FIELDS.items():
            if field in g:
                agent = pick(series, "inferwatch_gpu_ecc_errors_total", type=kind, **where)
                rows.append(
                    compare(phase, n, f"gpu{idx} {field}", agent, parse_number(g[field]), "ecc")
                )
        smi_procs = {
            int(a["pid"]): parse_number(a["used_memory"]) for a in apps if a.get("gpu_uuid") == uuid
        }
        agent_procs = {
            int(ls["pid"]): v / MIB
            for ls, v in series.get("inferwatch_gpu_process_memory_used_bytes", [])
            if ls.get("uuid") == uuid
        }
        row = compare(phase, n, f"gpu{idx} compute-apps pids", 0.0, 0.0, "process.pids")
        row.update(
            agent=sorted(agent_procs),
            smi=sorted(smi_procs),
            ok=set(agent_procs) == set(smi_procs),
            diff=None,
        )
        rows.append(row)
        for pid in sorted(set(agent_procs) & set(smi_procs)):
            rows.append(
                compare(
                    phase,
                    n,
                    f"gpu{idx} pid {pid} used_memory",
                    agent_procs[pid],
                    smi_procs[pid],
                    "process.used_memory",
                    group="process used_memory",
                )
            )
    return rows


CLOCK_BITS = (
    ("idle", 0x01),
    ("app_clocks", 0x02),
    ("sw_power_cap", 0x04),
    ("hw_slowdown", 0x08),
    ("sync_boost", 0x10),
    ("sw_thermal", 0x20),
    ("hw_thermal", 0x40),
    ("power_brake", 0x80),
)


class Load:
    """The PyTorch load process (bench/device/gpu_load.py)."""

    def __init__(self, out: Path, gib: float) -> None:
        self.control = out / ".load-control"
        self.ready = out / ".load-ready"
        self.control.write_text("run")
        self.ready.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "gpu_load.py"),
                "--gib",
                str(gib),
                "--control",
                str(self.control),
                "--ready",
                str(self.ready),
            ]
        )
        self.info: dict[str, Any] = {}

    def wait_ready(self, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.ready.exists() or not self.ready.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the load process exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("the load process did not get ready in time")
            time.sleep(0.2)
        self.info = json.loads(self.ready.read_text())
        return self.info

    def set(self, state: str) -> None:
        self.control.write_text(state)

    def stop(self) -> None:
        self.set("stop")
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.control, self.ready):
            f.unlink(missing_ok=True)


async def sample_phase(
    phase: str,
    src: NvmlSource,
    smi: Smi,
    samples: int,
    spacing: float,
    record: dict[str, Any],
) -> None:
    rows = record["comparisons"]
    gpm: list[dict[str, Any]] = []
    energy: list[tuple[float, float]] = []
    power: list[float] = []
    for n in range(samples):
        started = time.monotonic()
        procs = smi.start()  # nvidia-smi and the agent's pass read the same moment
        t0 = time.perf_counter()
        await src.refresh()
        pass_ms = (time.perf_counter() - t0) * 1e3
        gpus, apps = smi.finish(procs)
        series = agent_series(src)
        rows.extend(compare_sample(phase, n, series, gpus, apps))
        snapshot = {
            name: [(ls, v) for ls, v in values if "gpu_instance" not in ls]
            for name, values in series.items()
        }
        gpm.append(
            {
                "sample": n,
                "pass_ms": pass_ms,
                **{name: pick(snapshot, name, gpu="0") for name, *_ in GPM_EXPECTED["load"]},
                "clock_events": {
                    ls["reason"]: v
                    for ls, v in series.get("inferwatch_gpu_clock_event_active", [])
                    if ls.get("gpu") == "0"
                },
                "process_sm": {
                    ls["pid"]: v
                    for ls, v in series.get("inferwatch_gpu_process_sm_utilization_ratio", [])
                },
                "smi": gpus[0] if gpus else {},
            }
        )
        joules = pick(series, "inferwatch_gpu_energy_joules_total", gpu="0")
        watts = pick(series, "inferwatch_gpu_power_watts", gpu="0")
        if joules is not None and (not energy or energy[-1][1] != joules):
            energy.append((time.monotonic(), joules))
        if watts is not None:
            power.append(watts)
        await asyncio.sleep(max(0.0, spacing - (time.monotonic() - started)))
    record["phases"][phase] = {"samples": gpm}
    expected = []
    for name, low, high in GPM_EXPECTED[phase]:
        values = [g[name] for g in gpm[1:] if g.get(name) is not None]
        expected.append(
            {
                "series": name,
                "low": low,
                "high": high,
                "values": values,
                "ok": bool(values) and all(low <= v <= high for v in values),
            }
        )
    record["phases"][phase]["gpm_expected"] = expected
    if len(energy) >= 2 and power:
        (t1, j1), (t2, j2) = energy[0], energy[-1]
        record["phases"][phase]["energy_check"] = {
            "average_watts_from_energy": (j2 - j1) / (t2 - t1),
            "mean_power_watts": sum(power) / len(power),
            "note": "energy is read every slow_interval; times are when the agent saw it change",
        }


def tool_output(cmd: list[str], timeout: float = 30) -> str:
    try:
        return run(cmd, timeout=timeout)
    except Exception as exc:  # recorded, never fatal
        return f"failed: {exc!r}"


def agent_end_to_end(out: Path) -> str:
    """Best effort: `inferwatch run --gpu-backend nvml`, one /metrics scrape."""
    import socket
    import urllib.request

    if not (REPO / "agent" / "inferwatch" / "agent.py").exists():
        return "skipped: agent/inferwatch/agent/wiring.py is not in this checkout yet"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = agent_env()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferwatch.cli",
            "run",
            "--gpu-backend",
            "nvml",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return f"agent exited with {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        (out / "agent_metrics.txt").write_text(text)
        return f"ok: {sum(1 for line in text.splitlines() if line.startswith('inferwatch_gpu'))} GPU lines"
    except Exception as exc:
        return f"failed: {exc!r}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def summarise(record: dict[str, Any]) -> dict[str, Any]:
    by_quantity: dict[str, dict[str, Any]] = {}
    for row in record["comparisons"]:
        key = row["group"]
        q = by_quantity.setdefault(key, {"ok": 0, "n": 0, "hard": row["hard"], "rows": []})
        q["n"] += 1
        q["ok"] += int(row["ok"])
        q["rows"].append(row)
    failures = []
    for key, q in by_quantity.items():
        share = q["ok"] / q["n"]
        q["agreement"] = share
        q["pass"] = share == 1.0 if q["hard"] else share >= SOFT_AGREEMENT
        if not q["pass"]:
            failures.append(key)
    for phase in GPM_EXPECTED:
        if phase not in record["phases"]:
            failures.append(f"{phase}: phase did not run")
    failures.extend(f"error: {e.strip().splitlines()[-1]}" for e in record["errors"])
    for phase, data in record["phases"].items():
        for exp in data.get("gpm_expected", []):
            if not exp["ok"]:
                failures.append(f"{phase}: {exp['series']} outside [{exp['low']}, {exp['high']}]")
    return {"by_quantity": by_quantity, "failures": failures}


def fmt(v: Any) -> str:
    if v is None:
        return "absent"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.6g}"
    return str(v)


def markdown(record: dict[str, Any]) -> str:
    m = record["machine"]
    lines = [
        f"Machine: {m.get('gpu')}, driver {m.get('driver')}, nvidia-ml-py {m.get('nvidia_ml_py')}, "
        f"Python {m.get('python')}, {m.get('kernel')}. Load: {json.dumps(record.get('load', {}))}",
        "",
        "| phase: quantity | agent (last sample) | nvidia-smi (last sample) | agree | tolerance |",
        "|---|---|---|---|---|",
    ]
    for key, q in record["summary"]["by_quantity"].items():
        last = q["rows"][-1]
        tol = last["tolerance"]
        tol_text = f"±max({tol['abs']:g}, {tol['rel']:.0%})" + ("" if tol["hard"] else " (soft)")
        lines.append(
            f"| {key} | {fmt(last['agent'])} | {fmt(last['smi'])} | {q['ok']}/{q['n']} | {tol_text} |"
        )
    lines += [
        "",
        "| phase | GPM series | values (passes 2..n) | expected | ok |",
        "|---|---|---|---|---|",
    ]
    for phase, data in record["phases"].items():
        for exp in data.get("gpm_expected", []):
            vals = ", ".join(f"{v:.3f}" for v in exp["values"])
            lines.append(
                f"| {phase} | {exp['series']} | {vals} | [{exp['low']}, {exp['high']}] | {exp['ok']} |"
            )
    lines += ["", "| phase | clock-event reasons active (agent, last sample) |", "|---|---|"]
    for phase, data in record["phases"].items():
        samples = data.get("samples") or [{}]
        active = [r for r, v in samples[-1].get("clock_events", {}).items() if v]
        lines.append(f"| {phase} | {', '.join(active) or 'none'} |")
    for phase, data in record["phases"].items():
        if "energy_check" in data:
            e = data["energy_check"]
            lines.append(
                f"\n{phase}: average power from the energy counter {e['average_watts_from_energy']:.1f} W, "
                f"mean of power readings {e['mean_power_watts']:.1f} W"
            )
    lines += ["", f"Failures: {record['summary']['failures'] or 'none'}"]
    if record["errors"]:
        lines += ["", f"Errors: {record['errors']}"]
    return "\n".join(lines) + "\n"


async def validate(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    record: dict[str, Any] = {"comparisons": [], "phases": {}, "errors": [], "tools": {}}
    record["machine"] = {
        "python": platform.python_version(),
        "kernel": platform.release(),
        "nvidia_smi_L": tool_output(["nvidia-smi", "-L"]).strip(),
    }
    try:
        from importlib.metadata import version

        record["machine"]["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception as exc:
        record["machine"]["nvidia_ml_py"] = f"unknown ({exc!r})"
    smi = Smi()
    record["smi_fields"] = smi.gpu_fields
    record["smi_missing_fields"] = smi.missing
    # Activity windows of one sample period, so GPM and per-process shares are compared
    # within a phase (the agent's default window is 15 s).
    src = NvmlSource(
        pynvml,
        interval=args.spacing,
        slow_interval=args.slow_interval,
        activity_interval=args.spacing,
    )
    await src.refresh()
    first = agent_series(src)
    record["first_pass_gpm_absent"] = pick(first, "inferwatch_gpu_sm_active_ratio") is None
    info = first.get("inferwatch_gpu_info", [({}, 0)])[0][0]
    record["machine"]["gpu"] = info.get("name")
    record["machine"]["driver"] = info.get("driver_version")

    # Diagnostics for any disagreement: both memory structures, raw.
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        record["memory_raw_idle"] = {
            "v1": {"total": v1.total, "free": v1.free, "used": v1.used},
            "v2": {"total": v2.total, "reserved": v2.reserved, "free": v2.free, "used": v2.used},
        }
        record["supported_event_types"] = hex(pynvml.nvmlDeviceGetSupportedEventTypes(h))
    except Exception as exc:
        record["errors"].append(f"diagnostics: {exc!r}")

    load = None
    try:
        load = Load(out, args.hold_gib)
        record["load"] = load.wait_ready()
        load.set("run")
        await asyncio.sleep(args.warmup)
        await sample_phase("load", src, smi, args.samples, args.spacing, record)
        record["tools"]["load_dmon_gpm"] = tool_output(
            ["nvidia-smi", "dmon", "--gpm-metrics", "2,3,5,10", "-c", "3", "-d", "1"]
        )
        record["tools"]["load_pmon"] = tool_output(["nvidia-smi", "pmon", "-c", "1", "-s", "um"])
        load.set("pause")
        await asyncio.sleep(args.settle)
        await sample_phase("pause", src, smi, args.samples, args.spacing, record)
    except Exception:
        record["errors"].append(f"load phases: {traceback.format_exc()}")
    finally:
        if load is not None:
            load.stop()
    try:
        await asyncio.sleep(args.settle)
        await sample_phase("idle", src, smi, args.samples, args.spacing, record)
        record["tools"]["idle_dmon_gpm"] = tool_output(
            ["nvidia-smi", "dmon", "--gpm-metrics", "2,3,5,10", "-c", "3", "-d", "1"]
        )
    except Exception:
        record["errors"].append(f"idle phase: {traceback.format_exc()}")
    record["health_errors"] = dict(src.health.errors)
    record["xid_thread_alive"] = any(
        t.name == "inferwatch-nvml-xid" and t.is_alive() for t in threading.enumerate()
    )
    await src.stop()
    record["agent_end_to_end"] = agent_end_to_end(out)
    record["summary"] = summarise(record)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--hold-gib", type=float, default=16.0)
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--spacing", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--slow-interval", type=float, default=2.0)
    parser.add_argument("--bench", action="store_true", help="run bench/bench_gpu_collect.py too")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record = asyncio.run(validate(args))
    (args.out / "validation.json").write_text(json.dumps(record, indent=1, default=str))
    (args.out / "validation.md").write_text(markdown(record))
    print(markdown(record))
    if args.bench:
        run_bench(args.out, "idle", None)
        load = Load(args.out, args.hold_gib)
        try:
            load.wait_ready()
            run_bench(args.out, "load", load)
        except Exception:
            traceback.print_exc()
        finally:
            load.stop()
    return 0


def run_bench(out: Path, label: str, load: Load | None) -> None:
    """bench/bench_gpu_collect.py, idle or beside the matmul load (a process on the GPU)."""
    note = (
        "GPU idle, no process"
        if load is None
        else (
            f"bf16 matmul loop running, {load.info.get('torch_reserved_bytes', 0) / 1024**3:.1f} GiB held"
        )
    )
    bench = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "bench_gpu_collect.py"),
            "--json",
            str(out / f"bench_{label}.json"),
            "--markdown",
            str(out / f"bench_{label}.md"),
            "--label",
            note,
        ],
        env=agent_env(),
        timeout=400,
    )
    print(f"bench ({label}) exit code {bench.returncode}")


def agent_env() -> dict[str, str]:
    """This environment with the checkout's agent/ first on PYTHONPATH (wheels carried stay)."""
    paths = [str(REPO / "agent"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


if __name__ == "__main__":
    sys.exit(main())
