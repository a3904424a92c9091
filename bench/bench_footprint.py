"""Footprint: the agent's CPU share and memory, live and across 100,000 collection passes.

    # the agent as deployed, at its default intervals, for 10 minutes
    PYTHONPATH=agent python3 bench/bench_footprint.py live --duration 600 [--gpus 8 --workers 8]
    # RSS across 100,000 collection passes, driven back to back in this process
    PYTHONPATH=agent python3 bench/bench_footprint.py passes --passes 100000
    # where the memory goes: imports step by step, growth per GPU and per worker
    PYTHONPATH=agent python3 bench/bench_footprint.py components --gpus 8 --workers 8

``live``: N ``inferwatch simulate`` workers under ``inferwatch loadgen
--scenario steady`` (their counters and histograms move as on a served
model), and ``inferwatch run --gpu-backend fake --fake-gpus N --worker ...`` at
its default intervals (GPU 1 s, activity 15 s, slow calls 30 s, engine 2 s,
process 5 s), scraped every 15 s with gzip as Prometheus does. After a warm-up,
the agent's CPU time (user + system, psutil) and RSS are read every second for
``--duration`` seconds: CPU share of one core over the run and per minute, RSS
at the start and end of the run, and its maximum. USS (memory not shared with
other processes) every 15 s.

``passes``: the agent's sources (``inferwatch.agent.wiring.Agent``, N fake GPUs, N stub
workers serving the simulator's vLLM exposition with rising counters) refreshed
back to back in the agent's own proportions (per 10 rounds: 10 NVML, 5 engine, 2
process passes), each refresh followed by the rebuild the agent does. One
collection pass is one source refresh. The statistics window is scaled down so
that it holds as many samples as the default 60 s at a 2 s interval (30), as a
long-running agent's windows do. RSS and the number of live Python objects are
sampled every ``--sample-every`` passes; growth is measured from the first
sample after ``--warmup-passes``. Stops at ``--passes`` or ``--max-seconds``,
whichever comes first, and says which. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

import benchlib

sys.path.insert(0, str(benchlib.AGENT_SRC))

MB = 1e6


# --------------------------------------------------------------------------- live
def live(args: argparse.Namespace) -> dict[str, Any]:
    logs = args.logs or Path(tempfile.mkdtemp(prefix="iw-footprint-"))
    result: dict[str, Any] = {"machine": benchlib.machine(), "mode": "live", "args": _args(args)}
    with benchlib.processes() as started:
        urls = benchlib.start_sim_workers(
            args.workers, logs, started, cpus=benchlib.parse_cpus(args.worker_cpus)
        )
        if args.load != "none":
            targets = [x for url in urls for x in ("--target", url)]
            started.append(
                benchlib.Proc(
                    benchlib.inferwatch_cmd(
                        "loadgen",
                        *targets,
                        "--scenario",
                        args.load,
                        "--duration",
                        str(args.duration + args.warmup + 60),
                    ),
                    logs / "loadgen.log",
                    cpus=benchlib.parse_cpus(args.worker_cpus),
                    name="loadgen",
                )
            )
        agent, url = benchlib.start_agent(
            urls, args.gpus, logs, started, cpus=benchlib.parse_cpus(args.agent_cpus)
        )
        proc = psutil.Process(agent.pid)
        scrape_due = time.monotonic()
        warm_until = time.monotonic() + args.warmup
        scrapes = 0
        while time.monotonic() < warm_until:
            if time.monotonic() >= scrape_due:
                benchlib.http_get(url + "/metrics", headers={"Accept-Encoding": "gzip"})
                scrapes += 1
                scrape_due += args.scrape_interval
            time.sleep(0.2)
        samples: list[dict[str, float]] = []
        uss: list[float] = []
        t0 = time.monotonic()
        cpu0 = _cpu(proc)
        next_tick = t0
        while True:
            now = time.monotonic()
            if now >= scrape_due:
                benchlib.http_get(url + "/metrics", headers={"Accept-Encoding": "gzip"})
                scrapes += 1
                scrape_due += args.scrape_interval
            if now >= next_tick:
                samples.append(
                    {"t": now - t0, "cpu": _cpu(proc) - cpu0, "rss": proc.memory_info().rss}
                )
                if len(samples) % 15 == 1:
                    uss.append(proc.memory_full_info().uss)
                next_tick += 1.0
                if now - t0 >= args.duration:
                    break
            time.sleep(max(0.0, min(next_tick, scrape_due) - time.monotonic()))
        body = benchlib.http_get(url + "/metrics").decode()
        if not agent.alive():
            raise RuntimeError(f"the agent died: {agent.tail()}")
    wall = samples[-1]["t"]
    per_minute = []
    for start in range(0, int(wall) - 59, 60):
        a = min(samples, key=lambda s: abs(s["t"] - start))
        b = min(samples, key=lambda s: abs(s["t"] - start - 60))
        per_minute.append((b["cpu"] - a["cpu"]) / (b["t"] - a["t"]))
    rss = [s["rss"] for s in samples]
    result.update(
        duration_s=wall,
        cpu_share=samples[-1]["cpu"] / wall,
        cpu_share_per_minute=per_minute,
        rss_start_mb=rss[0] / MB,
        rss_end_mb=rss[-1] / MB,
        rss_max_mb=max(rss) / MB,
        rss_median_mb=statistics.median(rss) / MB,
        rss_growth=(rss[-1] - rss[0]) / rss[0],
        uss_start_mb=uss[0] / MB,
        uss_end_mb=uss[-1] / MB,
        scrapes=scrapes,
        targets_up=_targets_up(body),
        collect_errors=[
            line for line in body.splitlines() if line.startswith("inferwatch_collect_errors_total")
        ],
        samples=samples,
    )
    return result


def _targets_up(body: str) -> str:
    up = [line for line in body.splitlines() if line.startswith("inferwatch_target_up{")]
    return f"{sum(1 for line in up if line.endswith(' 1.0'))}/{len(up)}"


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


# --------------------------------------------------------------------------- passes
class Rounds:
    """The agent's sources refreshed back to back in their default proportions."""

    def __init__(self, urls: list[str], gpus: int, stats_window: float) -> None:
        from bench_growth import agent_config
        from inferwatch.agent.wiring import Agent

        self.agent = Agent(agent_config(urls, gpus, stats_window=stats_window))
        self.by_name: dict[str, Any] = {s.name: s for s in self.agent.sources}
        self.round = 0
        self.passes = 0
        self.engine_passes = 0

    async def start(self) -> None:
        for s in self.agent.sources:
            await s.start()

    async def stop(self) -> None:
        for s in self.agent.sources:
            await s.stop()

    async def one_round(self) -> None:
        i = self.round
        self.round += 1
        due = [self.by_name["nvml"]]
        if i % 2 == 0:
            due.append(self.by_name["engine"])
            self.engine_passes += 1
        if i % 5 == 0:
            due.append(self.by_name["process"])
        for source in due:
            await source.refresh()
            # the exposition the agent rebuilds (inferwatch.agent.exposition; older code: the agent)
            output = getattr(self.agent, "output", self.agent)
            rebuild = getattr(output, "rebuild_async", None)
            if rebuild is not None:
                await rebuild()
            else:
                output.rebuild()
            self.passes += 1


async def drive_passes(urls: list[str], args: argparse.Namespace) -> dict[str, Any]:
    # Calibrate: how long apart engine passes are when rounds run back to back.
    probe = Rounds(urls, args.gpus, 60.0)
    await probe.start()
    t = time.perf_counter()
    while probe.round < 100:
        await probe.one_round()
    engine_gap = (time.perf_counter() - t) / probe.engine_passes
    await probe.stop()
    window = 30 * engine_gap

    rounds = Rounds(urls, args.gpus, window)
    await rounds.start()
    me = psutil.Process()
    samples: list[dict[str, float]] = []
    started = time.perf_counter()
    stopped_by = "passes"
    next_sample = 0
    try:
        while rounds.passes < args.passes:
            await rounds.one_round()
            if rounds.passes >= next_sample:
                sample = {
                    "passes": rounds.passes,
                    "seconds": time.perf_counter() - started,
                    "rss": me.memory_info().rss,
                }
                if len(samples) % 10 == 0:
                    sample["objects"] = len(gc.get_objects())
                samples.append(sample)
                next_sample += args.sample_every
            if time.perf_counter() - started > args.max_seconds:
                stopped_by = "max-seconds"
                break
        errors = {s.name: dict(s.health.errors) for s in rounds.agent.sources if s.health.errors}
        up = sum(1 for w in rounds.by_name["engine"].workers.values() if w.up)
    finally:
        await rounds.stop()
    samples.append(
        {
            "passes": rounds.passes,
            "seconds": time.perf_counter() - started,
            "rss": me.memory_info().rss,
            "objects": len(gc.get_objects()),
        }
    )
    base = next((s for s in samples if s["passes"] >= args.warmup_passes), samples[0])
    base_obj = next(
        (s for s in samples if s["passes"] >= args.warmup_passes and "objects" in s), samples[0]
    )
    end = samples[-1]
    return {
        "passes": rounds.passes,
        "rounds": rounds.round,
        "engine_passes": rounds.engine_passes,
        "stopped_by": stopped_by,
        "seconds": end["seconds"],
        "stats_window_s": window,
        "baseline_passes": base["passes"],
        "rss_baseline_mb": base["rss"] / MB,
        "rss_end_mb": end["rss"] / MB,
        "rss_max_mb": max(s["rss"] for s in samples) / MB,
        "rss_growth": (end["rss"] - base["rss"]) / base["rss"],
        "objects_baseline": base_obj.get("objects"),
        "objects_end": end["objects"],
        "workers_up_at_end": f"{up}/{len(urls)}",
        "source_errors": errors,
        "samples": samples,
    }


def passes(args: argparse.Namespace) -> dict[str, Any]:
    logs = args.logs or Path(tempfile.mkdtemp(prefix="iw-passes-"))
    benchlib.pin(benchlib.parse_cpus(args.agent_cpus))
    result: dict[str, Any] = {"machine": benchlib.machine(), "mode": "passes", "args": _args(args)}
    with benchlib.processes() as started:
        urls = benchlib.start_stub_workers(
            args.workers, logs, started, cpus=benchlib.parse_cpus(args.worker_cpus), procs=1
        )
        result.update(asyncio.run(drive_passes(urls, args)))
    return result


# --------------------------------------------------------------------------- components
#: cumulative import steps, each measured in a fresh interpreter (RSS, USS, modules)
#: (the base agent loads no aiohttp since issue 32: its server and client are the
#: stdlib's asyncio and ssl; the last step shows what aiohttp would add, for the
#: measuring proxy, which imports it only when a worker has ``proxy:``)
IMPORT_STEPS = (
    ("interpreter", "pass"),
    ("+ asyncio, ssl", "import asyncio, ssl"),
    ("+ prometheus_client", "import asyncio, ssl, prometheus_client"),
    ("+ yaml, psutil", "import asyncio, ssl, prometheus_client, yaml, psutil"),
    ("+ the agent's modules (inferwatch run)", "import inferwatch.agent.run_cmd"),
    ("  (+ aiohttp, proxy workers only)", "import inferwatch.agent.run_cmd, aiohttp.web"),
)
_MEASURE = (
    "\nimport gc, json, sys, psutil\ngc.collect()\nm = psutil.Process().memory_full_info()\n"
    "print(json.dumps([m.rss, m.uss, len(sys.modules)]))"
)


def _memory(pid: int) -> tuple[float, float]:
    info = psutil.Process(pid).memory_full_info()
    return info.rss / MB, info.uss / MB


def components(args: argparse.Namespace) -> dict[str, Any]:
    """Where the agent's memory goes: imports step by step, then the running agent with
    1 GPU and 1 worker, with ``--gpus`` GPUs, with ``--workers`` workers: the growth per
    GPU and per worker. Each agent is read after ``--settle`` seconds (its first heap
    trim is at 20 s)."""
    import json
    import subprocess

    logs = args.logs or Path(tempfile.mkdtemp(prefix="iw-components-"))
    result: dict[str, Any] = {"machine": benchlib.machine(), "mode": "components",
                              "args": _args(args), "imports": []}  # fmt: skip
    steps = list(IMPORT_STEPS)
    if args.nvml:  # on a GPU machine: what NVML itself holds once initialised
        steps.append(("+ NVML initialised, every GPU's handle", "import inferwatch.agent.run_cmd, "
                      "pynvml\npynvml.nvmlInit()\n[pynvml.nvmlDeviceGetHandleByIndex(i) for i in "
                      "range(pynvml.nvmlDeviceGetCount())]"))  # fmt: skip
    for label, code in steps:
        out = subprocess.run(
            [sys.executable, "-c", code + _MEASURE], capture_output=True, text=True,
            env=benchlib.child_env(), check=True, timeout=120,
        )  # fmt: skip
        rss, uss, mods = json.loads(out.stdout.splitlines()[-1])
        result["imports"].append({"step": label, "rss_mb": rss / MB, "uss_mb": uss / MB,
                                  "modules": mods})  # fmt: skip
    shapes = [("1 GPU, 1 worker", 1, 1), (f"{args.gpus} GPUs, 1 worker", args.gpus, 1),
              (f"1 GPU, {args.workers} workers", 1, args.workers)]  # fmt: skip
    if args.nvml:
        shapes.append(("NVML (every GPU), 1 worker", 0, 1))
    result["agents"] = []
    with benchlib.processes() as started:
        urls = benchlib.start_stub_workers(
            args.workers, logs, started, cpus=benchlib.parse_cpus(args.worker_cpus), procs=1
        )
        for label, gpus, workers in shapes:
            with benchlib.processes() as mine:
                nvml = ("--gpu-backend", "nvml") if gpus == 0 else ()
                proc, url = benchlib.start_agent(urls[:workers], gpus, logs, mine, extra=nvml,
                                                 cpus=benchlib.parse_cpus(args.agent_cpus))  # fmt: skip
                end = time.monotonic() + args.settle
                while time.monotonic() < end:  # scraped as Prometheus would, gzip
                    benchlib.http_get(url + "/metrics", headers={"Accept-Encoding": "gzip"})
                    time.sleep(1.0)
                rss, uss = _memory(proc.pid)
                threads = psutil.Process(proc.pid).num_threads()
                aiohttp = "aiohttp/" in Path(f"/proc/{proc.pid}/maps").read_text()
            result["agents"].append({"shape": label, "gpus": gpus, "workers": workers,
                                     "rss_mb": rss, "uss_mb": uss, "threads": threads,
                                     "aiohttp_loaded": aiohttp})  # fmt: skip
    base, many_gpus, many_workers = result["agents"][:3]
    result["per_gpu_mb"] = (many_gpus["rss_mb"] - base["rss_mb"]) / max(1, args.gpus - 1)
    result["per_worker_mb"] = (many_workers["rss_mb"] - base["rss_mb"]) / max(1, args.workers - 1)
    result["per_gpu_uss_mb"] = (many_gpus["uss_mb"] - base["uss_mb"]) / max(1, args.gpus - 1)
    result["per_worker_uss_mb"] = (many_workers["uss_mb"] - base["uss_mb"]) / max(
        1, args.workers - 1
    )
    return result


# --------------------------------------------------------------------------- output
def _args(args: argparse.Namespace) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "fn"}


def report(r: dict[str, Any]) -> str:
    lines = [benchlib.machine_line(r["machine"])]
    a = r["args"]
    if r["mode"] == "live":
        pm = r["cpu_share_per_minute"]
        lines += [
            f"live: {a['gpus']} fake GPUs, {a['workers']} simulated workers (load: {a['load']}), "
            f"default intervals, scraped every {a['scrape_interval']:g} s; {r['duration_s']:.0f} s "
            f"measured after {a['warmup']:g} s of warm-up",
            f"CPU share of one core: {100 * r['cpu_share']:.2f}% over the run"
            + (
                f"; per minute {100 * min(pm):.2f}-{100 * max(pm):.2f}%"
                if pm
                else " (shorter than a minute)"
            ),
            f"RSS: {r['rss_start_mb']:.1f} MB at the start, {r['rss_end_mb']:.1f} MB at the end "
            f"({100 * r['rss_growth']:+.1f}%), max {r['rss_max_mb']:.1f} MB; USS "
            f"{r['uss_start_mb']:.1f} -> {r['uss_end_mb']:.1f} MB",
            f"targets up at the end: {r['targets_up']}; {r['scrapes']} scrapes; "
            f"collect errors: {r['collect_errors'] or 'none'}",
        ]
    elif r["mode"] == "components":
        lines.append("imports, each step in a fresh interpreter: RSS / USS MB, modules")
        for step in r["imports"]:
            lines.append(f"  {step['step']:<42} {step['rss_mb']:6.1f} / {step['uss_mb']:5.1f}"
                         f"  {step['modules']}")  # fmt: skip
        lines.append(
            f"the agent running, after {a['settle']:g} s: RSS / USS MB, threads, aiohttp loaded"
        )
        for ag in r["agents"]:
            lines.append(f"  {ag['shape']:<42} {ag['rss_mb']:6.1f} / {ag['uss_mb']:5.1f}"
                         f"  {ag['threads']}  {ag.get('aiohttp_loaded', '?')}")  # fmt: skip
        lines.append(
            f"growth per extra GPU: {r['per_gpu_mb']:+.2f} MB RSS ({r['per_gpu_uss_mb']:+.2f} USS); "
            f"per extra worker: {r['per_worker_mb']:+.2f} MB RSS ({r['per_worker_uss_mb']:+.2f} USS)"
        )
    else:
        lines += [
            f"passes: {a['gpus']} fake GPUs, {a['workers']} stub workers; {r['passes']} "
            f"collection passes ({r['engine_passes']} engine passes) in {r['seconds']:.0f} s, "
            f"stopped by {r['stopped_by']}; stats window {r['stats_window_s']:.2f} s",
            f"RSS: {r['rss_baseline_mb']:.1f} MB after {r['baseline_passes']} passes, "
            f"{r['rss_end_mb']:.1f} MB at the end ({100 * r['rss_growth']:+.2f}%), "
            f"max {r['rss_max_mb']:.1f} MB; live objects {r['objects_baseline']} -> "
            f"{r['objects_end']}",
            f"workers up at the end: {r['workers_up_at_end']}; source errors: "
            f"{r['source_errors'] or 'none'}",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    for name, fn in (("live", live), ("passes", passes), ("components", components)):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        p.add_argument("--gpus", type=int, default=8)
        p.add_argument("--workers", type=int, default=8)
        p.add_argument("--agent-cpus", help="pin the agent (or this process), e.g. 0")
        p.add_argument("--worker-cpus", help="pin the workers (and load generator)")
        p.add_argument("--json", type=Path)
        p.add_argument("--logs", type=Path)
    lv = sub.choices["live"]
    lv.add_argument("--duration", type=float, default=600.0, help="seconds measured")
    lv.add_argument("--warmup", type=float, default=30.0, help="seconds before measuring")
    lv.add_argument("--scrape-interval", type=float, default=15.0)
    lv.add_argument("--load", default="steady", help="loadgen scenario for the workers, or none")
    ps = sub.choices["passes"]
    ps.add_argument("--passes", type=int, default=100_000)
    ps.add_argument("--max-seconds", type=float, default=3600.0)
    ps.add_argument("--sample-every", type=int, default=1000)
    ps.add_argument("--warmup-passes", type=int, default=2000)
    cp = sub.choices["components"]
    cp.add_argument("--settle", type=float, default=25.0, help="seconds before reading")
    cp.add_argument("--nvml", action="store_true", help="also NVML itself and the agent on it")
    args = parser.parse_args(argv)
    result = args.fn(args)
    benchlib.write_json(args.json, result)
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
