"""Serving: ``/metrics`` latency under 50 concurrent scrapers, for 1, 8 and 32 GPUs and workers.

    PYTHONPATH=agent python3 bench/bench_serving.py [--sizes 1,8,32] [--scrapers 50]
        [--duration 15] [--workers sim|stub] [--json out/serving.json]

For each size N: N workers (``inferwatch simulate`` processes, or stub workers
with ``--workers stub``), then ``inferwatch run --gpu-backend fake --fake-gpus N
--worker ...`` at its default intervals (GPU 1 s, engine 2 s, process 5 s), so
collection and rebuilds keep running in the agent's event loop while it serves.
The scrapers live in separate client processes (aiohttp, one keep-alive
connection each, ``Accept-Encoding: gzip`` as Prometheus sends, body not
decompressed); latency is from sending the request to the last byte. Three
load shapes, each for ``--duration`` seconds:

* ``paced``: every scraper scrapes every ``--interval`` s (0.5 s: 100 scrapes/s
  for 50 scrapers, 30 times what 50 Prometheus servers at 15 s would send), at
  a random phase;
* ``burst``: the same, with every scraper firing at the same instant (the
  worst case of aligned scrape schedules);
* ``closed``: every scraper scrapes back to back (saturation: latency is then
  in-flight requests / throughput, Little's law).

Prints p50/p90/p99/max per size and shape, the agent's CPU while serving, and
the exposition size. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

import benchlib

DEFAULT_SIZES = (1, 8, 32)
SHAPES = ("paced", "burst", "closed")
PROM_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
)


# --------------------------------------------------------------------------- client side
async def _scraper(
    url: str, shape: str, start: float, duration: float, interval: float, phase: float
) -> tuple[list[float], int, int]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    nbytes = 0
    headers = {"Accept": PROM_ACCEPT, "Accept-Encoding": "gzip"}
    connector = aiohttp.TCPConnector(limit=1, force_close=False)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(
        connector=connector, auto_decompress=False, timeout=timeout
    ) as session:
        # one unmeasured request opens the keep-alive connection, as a running scraper has
        async with session.get(url, headers=headers) as resp:
            await resp.read()
        end = start + duration
        planned = start + (phase if shape == "paced" else 0.0)
        while True:
            if shape != "closed":
                delay = planned - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            elif time.time() < start:
                await asyncio.sleep(start - time.time())
            if time.time() >= end:
                break
            t0 = time.perf_counter()
            try:
                async with session.get(url, headers=headers) as resp:
                    body = await resp.read()
                    ok = resp.status == 200
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok, body = False, b""
            latencies.append(time.perf_counter() - t0)
            if ok:
                nbytes = len(body)
            else:
                errors += 1
            if shape != "closed":
                planned += interval
                # a scraper never overlaps its own scrapes; a late one skips ahead
                while planned < time.time() - interval:
                    planned += interval
    return latencies, errors, nbytes


def _client(
    url: str,
    shape: str,
    start: float,
    duration: float,
    interval: float,
    phases: list[float],
    cpus: set[int] | None,
    out: Any,
) -> None:
    benchlib.pin(cpus)

    async def run() -> list[tuple[list[float], int, int]]:
        return await asyncio.gather(
            *(_scraper(url, shape, start, duration, interval, p) for p in phases)
        )

    results = asyncio.run(run())
    lat = [x for r in results for x in r[0]]
    out.send((lat, sum(r[1] for r in results), max(r[2] for r in results)))
    out.close()


def scrape(
    url: str,
    shape: str,
    scrapers: int,
    duration: float,
    interval: float,
    client_procs: int,
    client_cpus: set[int] | None,
    agent_pid: int,
) -> dict[str, Any]:
    """Run one load shape; latencies of every scraper, and the agent's CPU meanwhile."""
    ctx = mp.get_context("spawn")
    rng = random.Random(8)
    phases = [rng.uniform(0, interval) for _ in range(scrapers)]
    start = time.time() + 2.0 + 0.2 * client_procs  # the clients' start-up stays outside
    procs, pipes = [], []
    for i in range(client_procs):
        mine = phases[i::client_procs]
        if not mine:
            continue
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_client,
            args=(url + "/metrics", shape, start, duration, interval, mine, client_cpus, send),
        )
        p.start()
        procs.append(p)
        pipes.append(recv)
    agent = psutil.Process(agent_pid)
    while time.time() < start:
        time.sleep(0.01)
    cpu0, wall0 = agent.cpu_times(), time.perf_counter()
    time.sleep(duration)
    cpu1, wall1 = agent.cpu_times(), time.perf_counter()
    lat: list[float] = []
    errors = nbytes = 0
    for recv, p in zip(pipes, procs, strict=True):
        got, err, size = recv.recv()
        lat += got
        errors += err
        nbytes = max(nbytes, size)
        p.join(30)
    used = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    out = benchlib.summary_ms(lat)
    out.update(
        errors=errors,
        gzip_body_bytes=nbytes,
        throughput_per_s=len(lat) / duration,
        agent_cpu_share=used / (wall1 - wall0),
    )
    return out


# --------------------------------------------------------------------------- per size
def run_size(n: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    worker_cpus = benchlib.parse_cpus(args.worker_cpus)
    with benchlib.processes() as started:
        if args.workers == "sim":
            urls = benchlib.start_sim_workers(n, logs / f"n{n}", started, cpus=worker_cpus)
        else:
            urls = benchlib.start_stub_workers(
                n, logs / f"n{n}", started, cpus=worker_cpus, procs=min(4, n)
            )
        agent, url = benchlib.start_agent(
            urls, n, logs / f"n{n}", started, cpus=benchlib.parse_cpus(args.agent_cpus)
        )
        time.sleep(args.warmup)  # a few engine passes: windows filled, quantiles exported
        plain = benchlib.http_get(url + "/metrics")
        result: dict[str, Any] = {
            "n": n,
            "workers": args.workers,
            "exposition_bytes": len(plain),
            "exposition_series": sum(
                1 for line in plain.split(b"\n") if line and not line.startswith(b"#")
            ),
        }
        for shape in args.shapes.split(","):
            r = scrape(
                url,
                shape,
                args.scrapers,
                args.duration,
                args.interval,
                args.client_procs,
                benchlib.parse_cpus(args.client_cpus),
                agent.pid,
            )
            result[shape] = r
            print(
                f"N={n:>2} {shape:<6} n={r['n']:>6} p50 {r['p50_ms']:.2f} ms  p90 {r['p90_ms']:.2f}"
                f"  p99 {r['p99_ms']:.2f}  max {r['max_ms']:.1f}  {r['throughput_per_s']:.0f}/s"
                f"  errors {r['errors']}  agent CPU {100 * r['agent_cpu_share']:.1f}%",
                flush=True,
            )
        if not agent.alive():
            raise RuntimeError(f"the agent died: {agent.tail()}")
        result["agent_log_tail"] = agent.tail(5)
        return result


def report(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        benchlib.machine_line(result["machine"]),
        f"{a['scrapers']} scrapers in {a['client_procs']} client processes, {a['duration']:g} s "
        f"per shape, paced/burst interval {a['interval']:g} s, workers: {a['workers']}, "
        f"CPUs agent {a['agent_cpus'] or 'any'}, clients {a['client_cpus'] or 'any'}",
        "",
        "| N GPUs + workers | shape | scrapes | p50 ms | p90 ms | p99 ms | max ms | scrapes/s "
        "| agent CPU | body (gzip) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["sizes"]:
        for shape in SHAPES:
            if shape not in r:
                continue
            s = r[shape]
            lines.append(
                f"| {r['n']} | {shape} | {s['n']} | {s['p50_ms']:.2f} | {s['p90_ms']:.2f} "
                f"| {s['p99_ms']:.2f} | {s['max_ms']:.1f} | {s['throughput_per_s']:.0f} "
                f"| {100 * s['agent_cpu_share']:.1f}% | {s['gzip_body_bytes'] / 1024:.1f} KiB "
                f"({r['exposition_bytes'] / 1024:.0f} KiB plain) |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--scrapers", type=int, default=50)
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per load shape")
    parser.add_argument("--interval", type=float, default=0.5, help="paced/burst scrape interval")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--workers", choices=("sim", "stub"), default="sim")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--client-procs", type=int, default=5)
    parser.add_argument("--agent-cpus", help="pin the agent, e.g. 2-3")
    parser.add_argument("--worker-cpus", help="pin the workers")
    parser.add_argument("--client-cpus", help="pin the scrapers")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, help="directory for the processes' logs")
    args = parser.parse_args(argv)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="iw-serving-"))
    result: dict[str, Any] = {
        "machine": benchlib.machine(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "sizes": [],
    }
    for n in (int(s) for s in args.sizes.split(",")):
        result["sizes"].append(run_size(n, args, logs))
        benchlib.write_json(args.json, result)
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
