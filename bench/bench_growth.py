"""Growth: the agent's cost per collection pass for 1, 2, 4, ... 64 GPUs and workers (issue 8).

    PYTHONPATH=agent python3 bench/bench_growth.py [--sizes 1,2,4,8,16,32,64] [--passes 30]
        [--json out/growth.json] [--plot docs/perf-growth.png]
    python3 bench/bench_growth.py --plot docs/perf-growth.png --from out/growth.json

For each size N the agent's own sources run in this process, as ``inferwatch
run`` builds them (``inferwatch.agent.wiring.Agent``), against N fake GPUs and N stub
workers (bench/stub_workers.py: the simulator's vLLM 0.33 exposition, about
46 KB, counters rising between scrapes, served gzip-compressed as vLLM does).
The stubs run in other processes, so this process's CPU time is the agent's.

Each pass is timed alone, back to back, after warm-up passes:

* ``nvml``: ``NvmlSource.refresh()``, most passes (no activity reading, no slow
  call), then passes that also take the activity readings or the slow calls;
* ``engine``: ``EngineSource.refresh()``, all N workers scraped concurrently,
  parsed, mapped, windows updated;
* ``process``: ``ProcessSource.refresh()`` (psutil over the process table);
* ``rebuild``: ``Agent.output.rebuild()``, the exposition rebuilt once after a refresh.

CPU is ``time.process_time()`` (all threads of this process: the NVML and
process passes run in a worker thread); wall is ``time.perf_counter()``. The
``per second`` column is the CPU the agent spends per second of running at the
default intervals (GPU 1 s, activity 15 s, slow calls 30 s, engine 2 s,
process 5 s, one rebuild after each refresh). The fake GPU backend is Python;
what a real NVML call costs is in the GPU collection benchmark. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import benchlib

sys.path.insert(0, str(benchlib.AGENT_SRC))

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64)


def agent_config(urls: list[str], gpus: int, **overrides: Any) -> Any:
    """The configuration ``inferwatch run --gpu-backend fake --fake-gpus N --worker ...`` makes."""
    from inferwatch.agent.config import AgentConfig, GpuConfig, WorkerSpec

    return AgentConfig(
        listen_host="127.0.0.1",
        workers=tuple(WorkerSpec(name=f"w{i}", url=u) for i, u in enumerate(urls)),
        gpu=GpuConfig(backend="fake" if gpus else "none", fake_count=max(gpus, 1)),
        **overrides,
    )


def sources_of(agent: Any) -> dict[str, Any]:
    return {s.name: s for s in agent.sources}


async def timed(fn: Callable[[], Awaitable[Any] | Any], passes: int) -> dict[str, Any]:
    """CPU and wall seconds of ``passes`` calls, each measured alone."""
    cpu, wall = [], []
    for _ in range(passes):
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        if asyncio.iscoroutine(result):
            await result
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return {
        "cpu_ms": statistics.median(cpu) * 1e3,
        "wall_ms": statistics.median(wall) * 1e3,
        "cpu_mean_ms": statistics.fmean(cpu) * 1e3,
        "n": passes,
    }


async def measure(urls: list[str], gpus: int, passes: int) -> dict[str, Any]:
    from prometheus_client import generate_latest

    from inferwatch.agent.wiring import Agent

    agent = Agent(agent_config(urls, gpus))
    src = sources_of(agent)
    # the exposition the agent rebuilds (inferwatch.agent.exposition; older code: the agent)
    output = getattr(agent, "output", agent)
    rebuild_async = getattr(output, "rebuild_async", None)

    async def rebuild() -> None:
        # what the agent's loop does after each refresh (older code: rebuild())
        if rebuild_async is not None:
            await rebuild_async()
        else:
            output.rebuild()

    def then_rebuild(source: Any) -> Callable[[], Awaitable[None]]:
        async def one() -> None:
            await source.refresh()
            await rebuild()

        return one

    for s in agent.sources:
        await s.start()
    try:
        for _ in range(3):  # warm-up: open GPUs, detect the engine, fill the windows
            for s in agent.sources:
                await s.refresh()
                await rebuild()
        for name, s in src.items():
            if s.health.errors:
                raise RuntimeError(f"source {name} reported errors: {s.health.errors}")
        out: dict[str, Any] = {"gpus": gpus, "workers": len(urls)}
        gc.collect()
        nvml = src["nvml"]
        out["nvml"] = await timed(then_rebuild(nvml), passes * 3)
        for key, activity, slow in (("nvml_activity", 0.0, 3600.0), ("nvml_slow", 3600.0, 0.0)):
            nvml.activity_interval, nvml.slow_interval = activity, slow
            out[key] = await timed(then_rebuild(nvml), passes)
        nvml.activity_interval, nvml.slow_interval = 15.0, 30.0
        out["engine"] = await timed(then_rebuild(src["engine"]), passes)
        if not all(w.up for w in src["engine"].workers.values()):
            raise RuntimeError("a stub worker is down")
        out["process"] = await timed(then_rebuild(src["process"]), max(passes // 3, 5))
        # the parts alone: each source's refresh without the rebuild, and a full render
        out["engine_refresh"] = await timed(src["engine"].refresh, passes)
        out["nvml_refresh"] = await timed(nvml.refresh, passes)
        out["rebuild_full"] = await timed(lambda: generate_latest(output.registry), passes)
        body = getattr(output, "body", None) or getattr(output, "exposition", b"")
        out["exposition_bytes"] = len(body)
        out["exposition_series"] = sum(
            1 for line in body.split(b"\n") if line and not line.startswith(b"#")
        )
        out["gzip_bytes"] = len(gzip.compress(body, compresslevel=5))
        out["per_second_cpu_ms"] = per_second(out)
        return out
    finally:
        for s in agent.sources:
            await s.stop()


def per_second(r: dict[str, Any]) -> float:
    """CPU ms per second of running at the default intervals (each refresh + its rebuild)."""
    fast = r["nvml"]["cpu_ms"]
    return (
        fast
        + (r["nvml_activity"]["cpu_ms"] - fast) / 15.0
        + (r["nvml_slow"]["cpu_ms"] - fast) / 30.0
        + r["engine"]["cpu_ms"] / 2.0
        + r["process"]["cpu_ms"] / 5.0
    )


def report(result: dict[str, Any]) -> str:
    lines = [
        benchlib.machine_line(result["machine"]),
        "",
        "CPU ms per pass, each refresh followed by its rebuild (median); per GPU or worker "
        "in brackets",
        "| N | nvml | nvml+activity | nvml+slow | engine | process | engine refresh alone "
        "| full render | exposition | CPU ms per s at defaults |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["sizes"]:
        n = r["gpus"] or r["workers"]
        lines.append(
            f"| {n} | {r['nvml']['cpu_ms']:.3f} ({r['nvml']['cpu_ms'] / n:.3f}) "
            f"| {r['nvml_activity']['cpu_ms']:.3f} | {r['nvml_slow']['cpu_ms']:.3f} "
            f"| {r['engine']['cpu_ms']:.2f} ({r['engine']['cpu_ms'] / n:.2f}) "
            f"| {r['process']['cpu_ms']:.2f} "
            f"| {r['engine_refresh']['cpu_ms']:.2f} ({r['engine_refresh']['cpu_ms'] / n:.2f}) "
            f"| {r['rebuild_full']['cpu_ms']:.2f} "
            f"| {r['exposition_bytes'] / 1024:.0f} KiB, {r['exposition_series']} series "
            f"| {r['per_second_cpu_ms']:.2f} |"
        )
    lines.append("")
    lines.append("wall ms per pass (median): engine includes the stubs' HTTP answers")
    lines.append("| N | nvml | engine | process |")
    lines.append("|---|---|---|---|")
    for r in result["sizes"]:
        lines.append(
            f"| {r['gpus'] or r['workers']} | {r['nvml']['wall_ms']:.3f} "
            f"| {r['engine']['wall_ms']:.2f} | {r['process']['wall_ms']:.2f} |"
        )
    parse = result.get("parse")
    if parse:
        lines.append("")
        lines.append(
            f"one stub exposition ({parse['bytes'] / 1024:.0f} KiB) parsed and mapped: "
            f"{parse['cold_ms']:.2f} ms the first time (series cache cold), "
            f"{parse['warm_ms']:.2f} ms on later scrapes"
        )
    fit = result.get("fit")
    if fit:
        lines.append("")
        lines.append("growth exponent k of CPU cost ~ N^k (least squares on log-log, N >= 4):")
        lines.append(", ".join(f"{k} {v:.2f}" for k, v in fit.items()))
    return "\n".join(lines)


def exponents(sizes: list[dict[str, Any]]) -> dict[str, float]:
    """Slope of log(cost) against log(N) for N >= 4 (1: linear, < 1: better than linear)."""
    import math

    out = {}
    for key in ("nvml", "engine", "rebuild_full"):
        pts = [
            (math.log(r["gpus"] or r["workers"]), math.log(r[key]["cpu_ms"]))
            for r in sizes
            if (r["gpus"] or r["workers"]) >= 4 and r[key]["cpu_ms"] > 0
        ]
        if len(pts) >= 2:
            mx = statistics.fmean(x for x, _ in pts)
            my = statistics.fmean(y for _, y in pts)
            num = sum((x - mx) * (y - my) for x, y in pts)
            den = sum((x - mx) ** 2 for x, _ in pts)
            out[key] = num / den
    pts = [
        (math.log(r["gpus"] or r["workers"]), math.log(r["per_second_cpu_ms"]))
        for r in sizes
        if (r["gpus"] or r["workers"]) >= 4
    ]
    if len(pts) >= 2:
        mx = statistics.fmean(x for x, _ in pts)
        my = statistics.fmean(y for _, y in pts)
        out["per_second"] = sum((x - mx) * (y - my) for x, y in pts) / sum(
            (x - mx) ** 2 for x, _ in pts
        )
    return out


def plot(result: dict[str, Any], path: Path, before: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = result["sizes"]
    ns = [r["gpus"] or r["workers"] for r in sizes]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
    series = [
        ("engine", "engine pass + rebuild (N workers)", "tab:blue", "o"),
        ("rebuild_full", "full render of the exposition", "tab:orange", "s"),
        ("nvml", "NVML pass + rebuild, fake (N GPUs)", "tab:green", "^"),
        ("process", "process pass + rebuild", "tab:gray", "v"),
    ]
    for key, label, color, marker in series:
        ax.plot(ns, [r[key]["cpu_ms"] for r in sizes], marker=marker, color=color, label=label)
    per_s = [r["per_second_cpu_ms"] for r in sizes]
    ax.plot(ns, per_s, marker="D", color="black", label="agent CPU ms per second at defaults")
    if before:
        bns = [r["gpus"] or r["workers"] for r in before["sizes"]]
        ax.plot(
            bns, [r["per_second_cpu_ms"] for r in before["sizes"]],
            marker="D", color="tab:red", ls=":", label="agent CPU ms per second, before",
        )  # fmt: skip
    ref = per_s[0]
    ax.plot(ns, [ref * n / ns[0] for n in ns], ls="--", color="black", lw=0.8, label="linear")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs and workers (N)")
    ax.set_ylabel("CPU ms per pass (median)")
    ax.set_title("Cost per pass")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    for key, label, color, marker in series[:3]:
        ax2.plot(
            ns, [r[key]["cpu_ms"] / n for r, n in zip(sizes, ns, strict=True)],
            marker=marker, color=color, label=label,
        )  # fmt: skip
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("GPUs and workers (N)")
    ax2.set_ylabel("CPU ms per pass / N")
    ax2.set_ylim(bottom=0)
    ax2.set_title("Cost per GPU or worker (flat = linear)")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=7)
    m = result["machine"]
    fig.suptitle(f"inferwatch agent growth: {m['cpu']}, {m['python']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_cost(url: str, repeat: int = 50) -> dict[str, float]:
    """One stub exposition parsed and mapped: with the series cache cold, and warm."""
    from inferwatch.engines import ENGINES, mapping

    text = benchlib.http_get(url + "/metrics").decode()
    vllm = ENGINES["vllm"]
    cache = getattr(mapping, "_SERIES", None)
    cold, warm = [], []
    for _ in range(repeat):
        if cache is not None:
            cache.clear()
        t0 = time.process_time()
        mapping.map_exposition(text, vllm)
        cold.append(time.process_time() - t0)
        t0 = time.process_time()
        mapping.map_exposition(text, vllm)
        warm.append(time.process_time() - t0)
    return {
        "bytes": len(text),
        "cold_ms": statistics.median(cold) * 1e3,
        "warm_ms": statistics.median(warm) * 1e3,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",")]
    logs = Path(tempfile.mkdtemp(prefix="iw-growth-"))
    benchlib.pin(benchlib.parse_cpus(args.cpus))
    result: dict[str, Any] = {"machine": benchlib.machine(), "sizes": [], "logs": str(logs)}
    with benchlib.processes() as started:
        urls = benchlib.start_stub_workers(
            max(sizes),
            logs,
            started,
            cpus=benchlib.parse_cpus(args.stub_cpus),
            procs=args.stub_procs,
        )
        result["parse"] = parse_cost(urls[0])
        for n in sizes:
            r = asyncio.run(measure(urls[:n], n, args.passes))
            result["sizes"].append(r)
            print(
                f"N={n}: nvml {r['nvml']['cpu_ms']:.3f} ms, engine {r['engine']['cpu_ms']:.2f} ms, "
                f"full render {r['rebuild_full']['cpu_ms']:.2f} ms, "
                f"per s {r['per_second_cpu_ms']:.2f} ms",
                flush=True,
            )
    result["fit"] = exponents(result["sizes"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--passes", type=int, default=30, help="timed passes per source and size")
    parser.add_argument("--stub-procs", type=int, default=4, help="processes serving the stubs")
    parser.add_argument("--cpus", help="pin this process to these CPUs, e.g. 6-7")
    parser.add_argument("--stub-cpus", help="pin the stub workers to these CPUs")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--plot", type=Path, help="draw the PNG here (needs matplotlib)")
    parser.add_argument("--from", dest="source", type=Path, help="plot/print a saved --json")
    parser.add_argument("--before", type=Path, help="a saved --json to draw beside (before)")
    args = parser.parse_args(argv)
    if args.source:
        result = json.loads(args.source.read_text())
    else:
        result = run(args)
        benchlib.write_json(args.json, result)
    print(report(result))
    if args.plot:
        plot(result, args.plot, json.loads(args.before.read_text()) if args.before else None)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
