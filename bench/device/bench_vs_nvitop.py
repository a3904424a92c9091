"""The agent next to nvitop-exporter on the same GPU, in one run (issue 32's table).

    python3 bench/device/bench_vs_nvitop.py [--load] [--json FILE]
    python3 bench/device/bench_vs_nvitop.py --fake          # no GPU: the agent alone

Starts ``inferwatch run --gpu-backend nvml`` (``fake`` with ``--fake``) and
``python3 -m nvitop_exporter`` one after the other, each on loopback, on the same
GPU and under the same load (``--load``: ``bench/device/gpu_load.py`` running
bf16 matmuls, which needs PyTorch; without it the GPU is idle for both), and
measures each with the same client, in this order:

1. ``/metrics`` latency, one scraper: ``--single`` scrapes back to back;
2. ``/metrics`` latency, ``--scrapers`` (20) concurrent scrapers: ``--rounds``
   bursts in which all of them send at the same instant, ``--gap`` apart;
3. CPU share of one core while scraped once a second for ``--cpu-seconds``
   (user + system time of the exporter's process, psutil);
4. RSS and USS at the end (psutil ``memory_full_info``).

Every scrape asks for gzip (``Accept-Encoding: gzip``), as Prometheus does, on
a connection of its own (``Connection: close``: prometheus_client's server
closes each connection anyway); latency runs from the connect to the last
byte. The client is asyncio on raw sockets, in this process, so that both
exporters meet the same client cost. Nothing here asserts: it prints one table.

Needs only: python3 with nvidia-ml-py, prometheus-client, psutil, aiohttp,
pyyaml, and the wheels inferwatch, bcrypt, nvitop==1.7.2 and
nvitop-exporter==1.7.2 (``pip install --no-deps`` them). ``--agent-cmd`` and
``--peer-cmd`` replace the commands (e.g. ``python3 -m inferwatch.cli`` from a
checkout with ``PYTHONPATH=agent``). ``--baseline-cmd`` measures a second agent
(an earlier build) in the same run, in its own column, between the agent and the
peer, so that a change is compared before/after on one machine at one time::

    python3 bench/device/bench_vs_nvitop.py --fake \
        --baseline-cmd "env PYTHONPATH=/tmp/before/agent python3 -m inferwatch.cli"

Each exporter's row also says whether aiohttp's C extensions are mapped into
its process (``/proc/<pid>/maps``): issue 32's base agent loads none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
REQUEST = (
    b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\n"
    b"User-Agent: bench-vs-nvitop\r\nConnection: close\r\n\r\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ the client
async def scrape(port: int) -> float:
    """One scrape on a connection of its own: seconds from the connect to the last byte."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(REQUEST)
        data = await reader.read()  # the server closes after the body
    finally:
        writer.close()
    took = time.perf_counter() - started
    if not data.startswith(b"HTTP/1.") or data[9:12] != b"200":
        raise RuntimeError(f"scrape of port {port} answered {data[:40]!r}")
    return took


async def single(port: int, count: int) -> list[float]:
    return [await scrape(port) for _ in range(count)]


async def bursts(port: int, scrapers: int, rounds: int, gap: float) -> list[float]:
    out: list[float] = []
    for _ in range(rounds):
        out += await asyncio.gather(*(scrape(port) for _ in range(scrapers)))
        await asyncio.sleep(gap)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return (ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)) * 1000


def measure(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """The four measurements of one exporter, listening on ``port``, process ``pid``."""
    proc = psutil.Process(pid)
    asyncio.run(single(port, 20))  # warm-up: connections, first render, caches
    cpu0 = proc.cpu_times()
    one = asyncio.run(single(port, args.single))
    cpu1 = proc.cpu_times()
    # the exporter's CPU per scrape while scraped back to back (its collection included)
    per_scrape = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / max(1, len(one))
    burst = asyncio.run(bursts(port, args.scrapers, args.rounds, args.gap))
    before = proc.cpu_times()
    t0 = time.monotonic()

    async def paced() -> None:
        end = t0 + args.cpu_seconds
        while time.monotonic() < end:
            await scrape(port)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0) % 1.0))

    asyncio.run(paced())
    after = proc.cpu_times()
    wall = time.monotonic() - t0
    cpu = (after.user + after.system - before.user - before.system) / wall
    mem = proc.memory_full_info()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        maps = ""
    return {
        "aiohttp_loaded": "aiohttp/" in maps,
        "single_p50_ms": pct(one, 0.5),
        "single_p99_ms": pct(one, 0.99),
        "single_n": len(one),
        "cpu_per_scrape_us": per_scrape * 1e6,
        "burst_p50_ms": pct(burst, 0.5),
        "burst_p99_ms": pct(burst, 0.99),
        "burst_max_ms": max(burst) * 1000,
        "burst_n": len(burst),
        "cpu_share": cpu,
        "rss_mb": mem.rss / 1e6,
        "uss_mb": mem.uss / 1e6,
        "threads": proc.num_threads(),
    }


# ------------------------------------------------------------------ the exporters
def wait_up(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(
        f"not answering after {timeout:g}s: {log.read_text(errors='replace')[-2000:]}"
    )


def run_one(
    name: str, cmd: list[str], port: int, tmp: Path, args: argparse.Namespace
) -> dict[str, Any]:
    log = tmp / f"{name}.log"
    env = dict(os.environ)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        if args.exporter_cpus:
            os.sched_setaffinity(proc.pid, {int(c) for c in args.exporter_cpus.split(",")})
        wait_up(port, proc, log)
        time.sleep(args.settle)  # a few passes, the agent's first heap trim (20 s)
        result = measure(port, proc.pid, args)
        result["cmd"] = " ".join(shlex.quote(c) for c in cmd)
        return result
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_load(tmp: Path) -> subprocess.Popen[bytes]:
    control, ready = tmp / "load.control", tmp / "load.ready"
    control.write_text("run")
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "gpu_load.py"), "--gib", "16", "--control", str(control),
         "--ready", str(ready)]
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ready.exists() or not ready.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the GPU load did not start (PyTorch with CUDA needed)")
        time.sleep(0.5)
    return proc


# ------------------------------------------------------------------ output
ROWS = (
    ("/metrics P50 / P99, one scraper", "single_p50_ms", "single_p99_ms", "{:.2f} / {:.2f} ms"),
    ("{n} concurrent scrapers P50 / P99", "burst_p50_ms", "burst_p99_ms", "{:.2f} / {:.2f} ms"),
    ("CPU at one scrape a second", "cpu_share", None, "{:.2%} of a core"),
    ("CPU per scrape, back to back", "cpu_per_scrape_us", None, "{:.0f} us"),
    ("RSS (USS)", "rss_mb", "uss_mb", "{:.1f} ({:.1f}) MB"),
    ("aiohttp loaded", "aiohttp_loaded", None, "{}"),
)


def table(results: dict[str, dict[str, Any]], scrapers: int) -> str:
    names = list(results)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, a, b, fmt in ROWS:
        cells = []
        for name in names:
            r = results[name]
            if "error" in r:
                cells.append("n/a")
            elif b is None:
                cells.append(fmt.format(r[a]))
            else:
                cells.append(fmt.format(r[a], r[b]))
        lines.append(f"| {label.format(n=scrapers)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fake", action="store_true", help="no GPU: the agent's fake backend, no peer")
    ap.add_argument("--fake-gpus", type=int, default=1)
    ap.add_argument("--load", action="store_true", help="run bench/device/gpu_load.py meanwhile")
    ap.add_argument("--single", type=int, default=1000, help="back-to-back scrapes")
    ap.add_argument("--scrapers", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=100, help="bursts")
    ap.add_argument("--gap", type=float, default=0.25, help="seconds between bursts")
    ap.add_argument("--cpu-seconds", type=float, default=60.0)
    ap.add_argument("--settle", type=float, default=25.0, help="seconds before measuring")
    ap.add_argument("--exporter-cpus", help="pin each exporter, e.g. 6")
    ap.add_argument("--agent-args", default="", help="more arguments of inferwatch run")
    ap.add_argument("--agent-cmd", default=f"{sys.executable} -m inferwatch.cli")
    ap.add_argument("--peer-cmd", default=f"{sys.executable} -m nvitop_exporter")
    ap.add_argument("--baseline-cmd", help="a second agent to measure (e.g. an earlier build)")
    ap.add_argument("--baseline-name", default="inferwatch (baseline)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="vs-nvitop-") as name:
        tmp = Path(name)
        load = start_load(tmp) if args.load and not args.fake else None
        try:
            port = free_port()
            backend = ["--gpu-backend", "fake", "--fake-gpus", str(args.fake_gpus)] if args.fake \
                else ["--gpu-backend", "nvml"]  # fmt: skip
            agents = [("inferwatch", args.agent_cmd)]
            if args.baseline_cmd:
                agents.append((args.baseline_name, args.baseline_cmd))
            for label, command in agents:
                port = free_port()
                agent = [*shlex.split(command), "run", "--listen", f"127.0.0.1:{port}",
                         "--log-level", "warning", *backend, *shlex.split(args.agent_args)]  # fmt: skip
                try:
                    results[label] = run_one(label.replace(" ", "_"), agent, port, tmp, args)
                except Exception as exc:  # say why, still measure the peer
                    results[label] = {"error": str(exc)[-500:]}
            if args.fake:
                results["nvitop-exporter"] = {"error": "--fake: no GPU for the peer"}
            else:
                port = free_port()
                peer = [*shlex.split(args.peer_cmd), "--bind-address", "127.0.0.1",
                        "--port", str(port), "--interval", "1"]  # fmt: skip
                try:
                    results["nvitop-exporter"] = run_one("nvitop-exporter", peer, port, tmp, args)
                except Exception as exc:  # say why, still print the agent's column
                    results["nvitop-exporter"] = {"error": str(exc)[-500:]}
        finally:
            if load is not None:
                (tmp / "load.control").write_text("stop")
                try:
                    load.wait(30)
                except subprocess.TimeoutExpired:
                    load.kill()
    meta = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "fake": args.fake,
        "load": bool(args.load and not args.fake),
        "single": args.single,
        "bursts": f"{args.rounds} x {args.scrapers}, {args.gap:g} s apart",
        "cpu_seconds": args.cpu_seconds,
    }
    print(json.dumps(meta))
    for name, r in results.items():
        if "error" in r:
            print(f"{name}: {r['error']}")
        else:
            extra = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
            print(f"{name}: {json.dumps(extra)}")
    print(table(results, args.scrapers))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
