"""Worker-to-GPU attribution on real GPUs, against nvidia-smi (issue 15).

    PYTHONPATH=agent python3 bench/device/validate_attribution.py [--out DIR]

On a host with N >= 1 NVIDIA GPUs it starts CUDA processes (PyTorch), each one
a "worker" that also serves a small vLLM exposition on its own port:

  (i)   colo-a, colo-b: two processes on GPU 0 (co-location), holding 2 and 3 GiB
  (ii)  by-uuid: CUDA_VISIBLE_DEVICES=<GPU 0's UUID>, holding 1.5 GiB
  and where N >= 2
  (iii) pair: CUDA_VISIBLE_DEVICES=0,1, 1 GiB on each
  (iv)  reversed: CUDA_VISIBLE_DEVICES=1,0, 2.5 GiB on cuda:0 and 1 GiB on
        cuda:1, so nvidia-smi shows which physical GPU CUDA's index 0 is

Each process runs matmuls on its devices. Then the real agent (`inferwatch run
--gpu-backend nvml`, this checkout) watches them by `pid:`; its
`inferwatch_worker_gpu_info` series must name, per worker, exactly the GPUs
`nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory` lists for that pid.
The environment source is checked on its own as well: attribution from each
process's CUDA_VISIBLE_DEVICES alone, over the devices of a real NVML pass,
must give the same GPUs (this is where PCI order and UUID matching meet real
hardware).

Writes DIR/attribution.json (the record), DIR/agent_metrics_*.txt (raw
/metrics captures), DIR/nvidia_smi_apps.csv and DIR/agent.log; DIR is --out, else
$OUT, else a new temporary directory. Exit code 0 when every check agrees.
Runs in well under 3 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "agent"))

GIB = 1024**3
MIB = 1024**2
#: the agent answers within this long once every load is on its GPUs
AGENT_DEADLINE = 60.0
#: memory nvidia-smi shows for a process: what it holds plus CUDA's context, within this
MEMORY_SLACK_MIB = 1024.0


# ---------------------------------------------------------------------- the load process


def exposition(model: str) -> str:
    """A minimal vLLM (V1) exposition, enough for the agent to see a vLLM worker."""
    labels = f'engine="0",model_name="{model}"'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} 0.0\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} 0.0\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.0\n"
    )


def serve_metrics(port: int, model: str) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = exposition(model).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def load_main(args: argparse.Namespace) -> int:
    """One worker stand-in: hold memory on each visible CUDA device, run matmuls, serve /metrics."""
    import torch

    sizes = [float(x) for x in args.gib.split(",")]
    count = torch.cuda.device_count()
    if count < len(sizes):
        raise SystemExit(f"{len(sizes)} devices asked, {count} visible")
    held, mats = [], []
    for index, gib in enumerate(sizes):
        device = torch.device("cuda", index)
        block = torch.empty(int(gib * GIB), dtype=torch.uint8, device=device)
        block.fill_(1)  # commit it
        held.append(block)
        a = torch.randn(4096, 4096, dtype=torch.bfloat16, device=device)
        mats.append((a, a.clone()))
    for index in range(len(sizes)):
        torch.cuda.synchronize(index)
    serve_metrics(args.port, args.name)
    uuids = []
    for index in range(len(sizes)):
        # CUDA's own answer to "which GPU is my device i" (torch >= 2.x: props.uuid)
        raw = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        uuids.append(None if raw is None else "GPU-" + str(raw).removeprefix("GPU-"))
    args.ready.write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "held_gib": sizes,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "devices": [torch.cuda.get_device_name(i) for i in range(len(sizes))],
                "cuda_uuids": uuids,
            }
        )
    )
    while not args.stop.exists():
        for a, b in mats:
            for _ in range(4):
                torch.matmul(a, b)
        for index in range(len(sizes)):
            torch.cuda.synchronize(index)
        time.sleep(0.01)
    return 0


# ---------------------------------------------------------------------- the validation


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cmd: list[str], timeout: float = 60) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr or proc.stdout}")
    return proc.stdout


def smi_gpus() -> list[dict[str, str]]:
    out = run(["nvidia-smi", "--query-gpu=index,uuid,name,pci.bus_id", "--format=csv,noheader"])
    rows = []
    for line in out.splitlines():
        if line.strip():
            index, uuid, name, bus = (part.strip() for part in line.split(","))
            rows.append({"index": index, "uuid": uuid, "name": name, "pci_bus_id": bus})
    return rows


def smi_apps(out_dir: Path | None = None) -> list[dict[str, Any]]:
    text = run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv"])
    if out_dir is not None:
        (out_dir / "nvidia_smi_apps.csv").write_text(text)
    rows = []
    for line in text.splitlines()[1:]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        memory = parts[2].split()[0]
        rows.append(
            {
                "pid": int(parts[0]),
                "uuid": parts[1],
                "used_mib": float(memory) if memory.replace(".", "").isdigit() else None,
            }
        )
    return rows


class Load:
    """A worker stand-in process (``load`` mode of this script) with its own /metrics port."""

    def __init__(self, scratch: Path, name: str, cuda_visible: str, gib: list[float]) -> None:
        self.name, self.cuda_visible, self.gib = name, cuda_visible, gib
        self.port = free_port()
        self.ready = scratch / f"{name}.ready"
        self.stop_file = scratch / f"{name}.stop"
        self.log = scratch / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_ORDER"}
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible
        self.env = env
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "load", "--name", name,
                 "--gib", ",".join(str(g) for g in gib), "--port", str(self.port),
                 "--ready", str(self.ready), "--stop", str(self.stop_file)],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.info: dict[str, Any] = {}

    def wait_ready(self, deadline: float) -> None:
        while not (self.ready.exists() and self.ready.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"load {self.name} exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"load {self.name} not ready in time")
            time.sleep(0.2)
        self.info = json.loads(self.ready.read_text())

    def stop(self) -> None:
        self.stop_file.write_text("stop")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def agent_config(loads: list[Load], port: int) -> str:
    lines = [
        f'listen: "127.0.0.1:{port}"',
        "collect_interval: 1s",
        "process_interval: 1s",
        "stats_window: 10s",
        "gpu: {backend: nvml, interval: 1s, slow_interval: 5s, activity_interval: 5s}",
        "workers:",
    ]
    for load in loads:
        lines += [
            f"  - name: {load.name}",
            f"    url: http://127.0.0.1:{load.port}",
            "    engine: vllm",
            f"    pid: {load.proc.pid}",
        ]
    return "\n".join(lines) + "\n"


def worker_gpus(text: str) -> dict[str, set[str]]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "inferwatch_worker_gpu_info":
                out.setdefault(sample.labels["worker"], set()).add(sample.labels["uuid"])
    return out


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def truth(loads: list[Load], apps: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Each load's GPUs: nvidia-smi's compute apps for its pid; where nvidia-smi lists no
    pid of ours (the tool in another PID namespace), what CUDA told the load itself."""
    out = {}
    for load in loads:
        smi = {a["uuid"] for a in apps if a["pid"] == load.proc.pid}
        cuda = {u for u in load.info.get("cuda_uuids", []) if u}
        out[load.name] = smi or cuda
    return out


def check_agent(loads: list[Load], out: Path, record: dict[str, Any]) -> None:
    port = free_port()
    config = out / "agent.yaml"
    config.write_text(agent_config(loads, port))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "agent"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        ),
    }
    for var in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        env.pop(var, None)  # the agent sees every GPU, as a host agent does
    log = open(out / "agent.log", "wb")  # noqa: SIM115 - closed below
    agent = subprocess.Popen(
        [sys.executable, "-m", "inferwatch.cli", "run", "--config", str(config)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + AGENT_DEADLINE
        text, got, want = "", {}, {}
        first = True
        started = time.monotonic()
        while time.monotonic() < deadline:
            if agent.poll() is not None:
                raise RuntimeError(f"agent exited with {agent.returncode}")
            try:
                text = fetch(url)
            except OSError:
                time.sleep(0.5)
                continue
            if first:
                (out / "agent_metrics_first.txt").write_text(text)
                first = False
            got = worker_gpus(text)
            want = truth(loads, smi_apps())
            if got == want:
                break
            time.sleep(1)
        record["agent_seconds_to_agree"] = round(time.monotonic() - started, 1)
        (out / "agent_metrics_final.txt").write_text(text)
        smi_apps(out)
        record["agent"] = {
            name: {"agent": sorted(got.get(name, ())), "nvidia_smi": sorted(want.get(name, ()))}
            for name in sorted(set(got) | set(want))
        }
        record["agent_ok"] = bool(want) and got == want and all(want.values())
        record["agent_log"] = [
            line
            for line in (out / "agent.log").read_text(errors="replace").splitlines()
            if "attribution" in line or "runs on" in line
        ][:40]
        health = [
            line for line in text.splitlines()
            if line.startswith("inferwatch_collect_errors_total") and "nvml" in line
        ]  # fmt: skip
        record["agent_nvml_errors"] = health
    finally:
        agent.terminate()
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()


def check_environment(loads: list[Load], record: dict[str, Any]) -> None:
    """The environment source alone over a real NVML pass (no process list, no pids)."""
    import pynvml

    from inferwatch.agent.collectors.attribution import WorkerGpuInputs, attribute, gpu_env
    from inferwatch.agent.collectors.nvml import NvmlSource

    src = NvmlSource(pynvml, interval=1.0, slow_interval=5.0, activity_interval=5.0)
    try:
        src.collect_once()
        devices = src.snapshot.devices
        inputs = [WorkerGpuInputs(load.name, gpu_env(load.env)) for load in loads]
        answers = attribute(inputs, devices, pid_workers={}, own_env={})
        want = truth(loads, smi_apps())
        rows = {}
        for load in loads:
            answer = answers[load.name]
            got = {d.uuid for d in answer.devices}
            rows[load.name] = {
                "cuda_visible_devices": load.cuda_visible,
                "source": answer.source,
                "environment": sorted(got),
                "nvidia_smi": sorted(want[load.name]),
                "ok": answer.source == "environment" and got == want[load.name],
                "notes": list(answer.notes),
            }
        record["environment"] = rows
        record["environment_ok"] = all(r["ok"] for r in rows.values())
    finally:
        src._shutdown()


def check_order(loads: list[Load], gpus: list[dict[str, str]], record: dict[str, Any]) -> None:
    """CUDA_VISIBLE_DEVICES=1,0: cuda:0 (2.5 GiB) must sit on physical GPU 1 per nvidia-smi."""
    rev = next((load for load in loads if load.name == "reversed"), None)
    if rev is None:
        return
    cuda = rev.info.get("cuda_uuids") or []
    record["reversed_cuda_uuids"] = cuda
    record["reversed_cuda_ok"] = cuda == [gpus[1]["uuid"], gpus[0]["uuid"]]
    apps = [a for a in smi_apps() if a["pid"] == rev.proc.pid]
    if not apps:
        record["reversed_order_ok"] = record["reversed_cuda_ok"]
        return
    by_uuid = {a["uuid"]: a["used_mib"] for a in apps}
    gpu1, gpu0 = gpus[1]["uuid"], gpus[0]["uuid"]
    big, small = by_uuid.get(gpu1), by_uuid.get(gpu0)
    record["reversed_order"] = {"gpu1_mib": big, "gpu0_mib": small}
    record["reversed_order_ok"] = big is not None and small is not None and big > small + 1024


def check_memory(loads: list[Load], record: dict[str, Any]) -> None:
    """Each co-located process's memory is its own (the distinct amounts tell them apart)."""
    apps = smi_apps()
    rows = {}
    record["smi_lists_our_pids"] = any(a["pid"] in {load.proc.pid for load in loads} for a in apps)
    if not record["smi_lists_our_pids"]:
        record["colocation_memory"] = "nvidia-smi lists no pid of ours (another PID namespace)"
        return
    for load in loads:
        if not load.name.startswith("colo"):
            continue
        mib = sum(a["used_mib"] or 0 for a in apps if a["pid"] == load.proc.pid)
        held = sum(load.gib) * 1024
        rows[load.name] = {"held_mib": held, "smi_mib": mib,
                           "ok": held <= mib <= held + MEMORY_SLACK_MIB}  # fmt: skip
    record["colocation_memory"] = rows
    record["colocation_memory_ok"] = bool(rows) and all(r["ok"] for r in rows.values())


def validate(out: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"errors": []}
    try:
        gpus = smi_gpus()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        record["errors"].append(f"nvidia-smi failed: {exc}")
        gpus = []
    record["gpus"] = gpus
    if not gpus:
        record["errors"].append("no NVIDIA GPU (nvidia-smi lists none)")
        record["all_ok"] = False
        return record
    scratch = Path(tempfile.mkdtemp(prefix="inferwatch-attrib-"))
    plan = [
        ("colo-a", "0", [2.0]),
        ("colo-b", "0", [3.0]),
        ("by-uuid", gpus[0]["uuid"], [1.5]),
    ]
    if len(gpus) >= 2:
        plan += [("pair", "0,1", [1.0, 1.0]), ("reversed", "1,0", [2.5, 1.0])]
    record["plan"] = [{"worker": n, "CUDA_VISIBLE_DEVICES": v, "gib": g} for n, v, g in plan]
    loads: list[Load] = []
    try:
        loads = [Load(scratch, name, visible, gib) for name, visible, gib in plan]
        deadline = time.monotonic() + 120
        for load in loads:
            load.wait_ready(deadline)
        record["loads"] = {load.name: load.info for load in loads}
        for step in (
            lambda: check_memory(loads, record),
            lambda: check_order(loads, gpus, record),
            lambda: check_environment(loads, record),
            lambda: check_agent(loads, out, record),
        ):
            try:
                step()
            except Exception:
                record["errors"].append(traceback.format_exc())
    except Exception:
        record["errors"].append(traceback.format_exc())
    finally:
        for load in loads:
            with contextlib.suppress(Exception):
                load.stop()
    checks = ["agent_ok", "environment_ok"]
    if record.get("smi_lists_our_pids"):
        checks.append("colocation_memory_ok")
    if len(gpus) >= 2:
        checks.append("reversed_order_ok")
    record["all_ok"] = not record["errors"] and all(record.get(c) is True for c in checks)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    load = sub.add_parser("load", help="(internal) one CUDA worker stand-in")
    load.add_argument("--name", required=True)
    load.add_argument("--gib", required=True, help="GiB per visible device, comma-separated")
    load.add_argument("--port", type=int, required=True)
    load.add_argument("--ready", type=Path, required=True)
    load.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.mode == "load":
        return load_main(args)
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    out = out or Path(tempfile.mkdtemp(prefix="inferwatch-attribution-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    record = validate(out)
    record["seconds"] = round(time.monotonic() - started, 1)
    (out / "attribution.json").write_text(json.dumps(record, indent=2, default=str))
    print(json.dumps({k: record.get(k) for k in (
        "all_ok", "agent_ok", "environment_ok", "colocation_memory_ok", "reversed_order_ok",
        "smi_lists_our_pids",
        "agent_seconds_to_agree", "seconds")}, indent=2))  # fmt: skip
    for error in record["errors"]:
        print(error, file=sys.stderr)
    print(f"record: {out / 'attribution.json'}")
    return 0 if record["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
