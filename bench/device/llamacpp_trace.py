"""A real llama.cpp server under load, watched by the agent, recorded as a trace.

    PYTHONPATH=agent python3 bench/device/llamacpp_trace.py trace --server BIN --model GGUF \
        --out DIR [--prometheus BIN] [--slots 8]
    PYTHONPATH=agent python3 bench/device/llamacpp_trace.py sweep --server BIN --model GGUF \
        --out DIR --slots 4,8,16,32,64 [--rate R]

``trace`` (issue 29): one ``llama-server`` with ``--slots`` slots, the agent
(NVML backend, or ``--fake-gpu`` off a GPU) and, with ``--prometheus``, a real
Prometheus loading the committed rule files; a streaming client runs the
phases idle, steady (fewer streams than slots), overload (many times the slots)
and idle. ``sweep`` (issue 31): the same open-loop Poisson load (``--rate``
requests a second, or 1.5 times what a calibration run says 4 slots carry) at
each slot count in turn, one server start per count.

Each run writes ``DIR/<name>.jsonl.gz`` in the trace format of
docs/alerts.md ("Backtest"): a header line, then ``agent`` snapshots (the
agent's /metrics text), ``engine`` snapshots (llama-server's /metrics), ``gpu``
readings (nvidia-smi, for the validation table) and one ``client`` line per
finished request. Prometheus' firing alerts at the end of ``trace`` go to
``DIR/alerts.json``. Nothing is asserted here: the figures are computed from the
traces afterwards (bench/device/llamacpp_report.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from inferwatch.traces import TraceWriter

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

#: the recorder's period (the deployment scrapes every 15 s; the backtest downsamples)
RECORD_EVERY = 5.0
#: tokens each answer generates (ignore_eos keeps the length fixed)
GEN_TOKENS = 128
#: words of the prompt (the tiny BPE vocabulary makes about one token per short word)
PROMPT_WORDS = 160
_WORDS = [
    "the",
    "agent",
    "reads",
    "the",
    "queue",
    "of",
    "each",
    "slot",
    "and",
    "counts",
    "every",
    "token",
    "it",
    "sends",
    "back",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    p: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        fh = self.log.open("ab")
        self.p = subprocess.Popen(
            self.argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            start_new_session=True,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        if self.p is None or self.p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.p.pid, signal.SIGTERM)
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(5)


async def wait_http(session: aiohttp.ClientSession, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{url} did not answer 200 within {timeout:.0f} s")


def start_server(args: argparse.Namespace, slots: int, out: Path, tag: str) -> tuple[Proc, str]:
    port = free_port()
    ngl = [] if args.cpu else ["-ngl", "99"]
    ctx = slots * args.ctx_per_slot
    argv = [
        args.server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
        "--parallel", str(slots), "-c", str(ctx), "--metrics", "--slots", "--no-ui", *ngl,
        *(["-t", "1"] if args.cpu else []),
    ]  # fmt: skip
    return Proc(f"llama-{tag}", argv, out / f"llama-{tag}.log").start(), f"http://127.0.0.1:{port}"


def start_agent(
    args: argparse.Namespace, server_url: str, out: Path, tag: str
) -> tuple[Proc, str, str]:
    """The agent watching the server; its URL, and the URL clients send to (the agent's
    measuring proxy with ``--proxy``, else the server itself)."""
    port = free_port()
    cfg = out / f"agent-{tag}.yaml"
    gpu = {"backend": "fake", "fake_count": 1} if args.fake_gpu else {"backend": "nvml"}
    worker: dict[str, Any] = {"name": "llama", "url": server_url, "engine": "llamacpp"}
    client_url = server_url
    if args.proxy:
        proxy_port = free_port()
        worker["proxy"] = {"listen": f"127.0.0.1:{proxy_port}"}
        client_url = f"http://127.0.0.1:{proxy_port}"
    cfg.write_text(
        json.dumps(
            {
                "listen": f"127.0.0.1:{port}",
                "collect_interval": "2s",
                "stats_window": "60s",
                "gpu": gpu,
                "workers": [worker],
            }
        )
    )
    env = {"PYTHONPATH": str(REPO / "agent") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    argv = [sys.executable, "-m", "inferwatch.cli", "run", "--config", str(cfg)]
    agent = Proc(f"agent-{tag}", argv, out / f"agent-{tag}.log", env).start()
    return agent, f"http://127.0.0.1:{port}", client_url


def start_prometheus(binary: str, agent_url: str, out: Path) -> tuple[Proc, str]:
    port = free_port()
    data = out / "prom-data"
    data.mkdir(exist_ok=True)
    rules = sorted(str(p) for p in (REPO / "alerts").glob("*.yaml"))
    config = {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": rules,
        "scrape_configs": [
            {
                "job_name": "inferwatch",
                "static_configs": [{"targets": [agent_url.split("//", 1)[1]]}],
            }
        ],
    }
    cfg = out / "prometheus.yml"
    cfg.write_text(json.dumps(config))
    argv = [
        binary, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]  # fmt: skip
    return Proc("prometheus", argv, out / "prometheus.log").start(), f"http://127.0.0.1:{port}"


def gpu_reading() -> dict[str, Any] | None:
    """nvidia-smi's view of GPU 0 at this moment (absent off a GPU)."""
    if shutil.which("nvidia-smi") is None:
        return None
    fields = "utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,clocks.sm"
    r = subprocess.run(
        ["nvidia-smi", "-i", "0", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    if r.returncode != 0:
        return {"error": r.stderr.strip()[:200]}
    vals = [v.strip() for v in r.stdout.strip().split(",")]
    return dict(zip(fields.split(","), vals, strict=False))


async def recorder(
    session: aiohttp.ClientSession,
    trace: TraceWriter,
    agent_url: str,
    server_url: str,
    stop: asyncio.Event,
    every: float = RECORD_EVERY,
) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = time.time()
        for kind, url in (("agent", agent_url + "/metrics"), ("engine", server_url + "/metrics")):
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=4)) as r:
                    trace.record(t, kind, await r.text())
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                trace.record(t, "error", f"{kind}: {type(exc).__name__}")
        reading = await loop.run_in_executor(None, gpu_reading)
        if reading is not None:
            trace.record(t, "gpu", reading)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), every - (time.time() - t) % every)


def prompt(rng: random.Random, words: int = PROMPT_WORDS) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


#: the prompt lengths (words) a run mixes, one drawn per request (--prompt-mix); one
#: length leaves every window with the same prompt/answer ratio, so the fit cannot
#: tell a prompt token's cost from a decode step's (docs/advise.md, "Calibration")
PROMPT_MIX: tuple[int, ...] = (PROMPT_WORDS,)


async def one_request(
    url: str, trace: TraceWriter | None, rng: random.Random, gen: int = GEN_TOKENS
) -> dict[str, Any]:
    """One streamed completion on a fresh connection; its client-side figures."""
    body = {
        "prompt": prompt(rng, rng.choice(PROMPT_MIX)), "max_tokens": gen, "stream": True, "ignore_eos": True,
        "temperature": 0, "stream_options": {"include_usage": True},
    }  # fmt: skip
    sent = time.monotonic()
    events: list[float] = []
    usage: dict[str, Any] = {}
    ok = False
    conn = aiohttp.TCPConnector(force_close=True)
    try:
        async with (
            aiohttp.ClientSession(connector=conn) as s,
            s.post(
                url + "/v1/completions", json=body, timeout=aiohttp.ClientTimeout(total=600)
            ) as r,
        ):
            async for raw in r.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    events.append(time.monotonic())
            ok = r.status == 200 and bool(events)
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError):
        ok = False
    done = time.monotonic()
    rec = {
        "worker": "llama",
        "ttft_s": (events[0] - sent) if events else None,
        "tpot_s": ((events[-1] - events[0]) / (len(events) - 1)) if len(events) > 1 else None,
        "e2e_s": done - sent,
        "prompt_tokens": usage.get("prompt_tokens"),
        "gen_tokens": usage.get("completion_tokens", len(events)),
        "ok": ok,
    }
    if trace is not None:
        trace.record(time.time(), "client", rec)
    return rec


async def closed_loop(
    url: str, trace: TraceWriter, streams: int, seconds: float, seed: int
) -> None:
    """``streams`` clients, each sending its next request when the last one ends."""
    end = time.monotonic() + seconds
    rng = random.Random(seed)

    async def client() -> None:
        while time.monotonic() < end:
            await one_request(url, trace, rng)

    await asyncio.gather(*(client() for _ in range(streams)))


async def open_loop(
    url: str,
    trace: TraceWriter,
    rate: float,
    seconds: float,
    drain: float,
    seed: int,
    prompts: str,
) -> int:
    """Poisson arrivals at ``rate`` a second for ``seconds``; what is still open after
    ``drain`` more seconds is cancelled (the client gives up, counted not ok)."""
    rng = random.Random(seed)
    # the prompts from their own stream, distinct for each run: drawn from the arrivals'
    # stream, every load on one server repeated the last one's prompts in order, and
    # llama-server answered them from its prompt cache (docs/advise.md, "The warmed
    # sweep")
    texts = random.Random(prompts)
    tasks: list[asyncio.Task[dict[str, Any]]] = []
    start = time.monotonic()
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            break
        await asyncio.sleep(max(0.0, start + t - time.monotonic()))
        tasks.append(asyncio.create_task(one_request(url, trace, texts)))
    _, pending = await asyncio.wait(tasks, timeout=drain) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for _ in pending:
        trace.record(time.time(), "client", {"worker": "llama", "cancelled": True, "ok": False})
    return len(tasks)


async def run_trace(args: argparse.Namespace) -> None:
    out = Path(args.out)
    slots = int(args.slots)
    server, server_url = start_server(args, slots, out, "trace")
    agent, agent_url, client_url = start_agent(args, server_url, out, "trace")
    prom = None
    prom_url = ""
    procs = [server, agent]
    try:
        async with aiohttp.ClientSession() as session:
            await wait_http(session, server_url + "/health", 180)
            await wait_http(session, agent_url + "/metrics", 60)
            if args.prometheus:
                prom, prom_url = start_prometheus(args.prometheus, agent_url, out)
                procs.append(prom)
                await wait_http(session, prom_url + "/-/ready", 60)
            header = {
                "scrape_interval_s": RECORD_EVERY, "client_time": "answered",
                "source": f"{args.source}; llama-server --parallel {slots}"
                + ("; clients through the agent's measuring proxy" if args.proxy else ""),
                "phases": [], "workers": {"llama": {"engine": "llamacpp", "slots": slots}},
            }  # fmt: skip
            trace = TraceWriter(out / "trace.jsonl.gz", header)
            stop = asyncio.Event()
            rec = asyncio.create_task(recorder(session, trace, agent_url, server_url, stop))
            phases: list[dict[str, Any]] = []
            plan = [
                ("idle", 0, args.idle),
                ("steady", max(1, slots // 2), args.steady),
                ("overload", slots * args.overload_factor, args.overload),
                ("idle", 0, args.idle),
            ]
            for name, streams, seconds in plan:
                t0 = time.time()
                print(f"phase {name}: {streams} streams for {seconds:.0f} s", flush=True)
                if streams:
                    await closed_loop(client_url, trace, streams, seconds, seed=len(phases))
                else:
                    await asyncio.sleep(seconds)
                phases.append({"name": name, "start": t0, "end": time.time(), "streams": streams})
            stop.set()
            await rec
            trace.close(phases)
            if prom_url:
                async with session.get(prom_url + "/api/v1/alerts") as r:
                    (out / "alerts.json").write_text(await r.text())
                async with session.get(
                    prom_url + "/api/v1/query_range",
                    params={"query": "ALERTS", "start": phases[0]["start"],
                            "end": time.time(), "step": "15"},
                ) as r:  # fmt: skip
                    (out / "alerts_range.json").write_text(await r.text())
    finally:
        for p in reversed(procs):
            p.stop()


async def calibrate(url: str, slots: int) -> float:
    """Requests a second that ``slots`` slots carry under a burst of 2 x slots concurrent
    requests."""
    t0 = time.monotonic()
    recs = await asyncio.gather(
        *(one_request(url, None, random.Random(i)) for i in range(slots * 2))
    )
    return sum(1 for r in recs if r["ok"]) / (time.monotonic() - t0)


async def run_sweep(args: argparse.Namespace) -> None:
    """Each slot count in turn (one server start per count), under each offered load.

    ``--rate R`` (one load) or ``--rates R1,R2`` (requests a second), else
    ``--rate-factors F1,F2`` times what a closed-loop calibration at the first slot
    count carries (one factor: ``--rate-factor``). With one load the traces are
    ``sweep-s<slots>.jsonl.gz``; with several ``sweep-s<slots>-r<rate>.jsonl.gz``.
    """
    out = Path(args.out)
    counts = [int(s) for s in str(args.slots).split(",")]
    rates: list[float] | None = None
    if args.rates:
        rates = [float(r) for r in str(args.rates).split(",")]
    elif args.rate is not None:
        rates = [args.rate]
    factors = [float(f) for f in str(args.rate_factors or args.rate_factor).split(",")]
    every = args.every
    summary: list[dict[str, Any]] = []
    for slots in counts:
        server, server_url = start_server(args, slots, out, f"s{slots}")
        agent, agent_url, client_url = start_agent(args, server_url, out, f"s{slots}")
        try:
            async with aiohttp.ClientSession() as session:
                await wait_http(session, server_url + "/health", 180)
                await wait_http(session, agent_url + "/metrics", 60)
                # every server serves one burst of 2 x slots concurrent requests before
                # its recorded loads, as the first one always did for the rate
                # calibration: each slot count starts from the same state
                # (docs/advise.md, "The warmed sweep")
                per_s = await calibrate(client_url, slots)
                summary.append({"warm_up_slots": slots, "carried_per_s": per_s})
                if rates is None:
                    rates = [round(f * per_s, 2) for f in factors]
                    print(f"calibration at {slots} slots: {per_s:.2f} req/s -> rates {rates}")
                else:
                    print(f"warm-up at {slots} slots: {per_s:.2f} req/s", flush=True)
                for rate in rates:
                    name = f"sweep-s{slots}" + (f"-r{rate:g}" if len(rates) > 1 else "")
                    settle = None
                    if args.settle:
                        # one request, not recorded, before the load: its launch copies
                        # every idle slot the burst or the last load left out of the
                        # prompt cache, so the load starts from a settled server
                        # (docs/advise.md, "The settled recording")
                        got = await one_request(client_url, None, random.Random(name))
                        settle = got["ttft_s"]
                    header = {
                        "scrape_interval_s": every, "client_time": "answered",
                        "source": f"{args.source}; llama-server --parallel {slots}; open loop "
                                  f"{rate} req/s, {GEN_TOKENS} tokens each",
                        "phases": [],
                        "workers": {"llama": {"engine": "llamacpp", "slots": slots}},
                        "load": {"rate_per_s": rate, "gen_tokens": GEN_TOKENS,
                                 "prompt_words": list(PROMPT_MIX), "seconds": args.load,
                                 "settled": bool(args.settle)},
                    }  # fmt: skip
                    trace = TraceWriter(out / f"{name}.jsonl.gz", header)
                    stop = asyncio.Event()
                    rec = asyncio.create_task(
                        recorder(session, trace, agent_url, server_url, stop, every)
                    )
                    await asyncio.sleep(every)
                    t0 = time.time()
                    sent = await open_loop(
                        client_url,
                        trace,
                        rate,
                        args.load,
                        args.drain,
                        seed=7,
                        prompts=f"{slots}-{rate:g}",
                    )
                    t1 = time.time()
                    await asyncio.sleep(every)
                    stop.set()
                    await rec
                    trace.close([{"name": "load", "start": t0, "end": t1, "rate": rate}])
                    summary.append(
                        {
                            "slots": slots,
                            "rate": rate,
                            "sent": sent,
                            "seconds": t1 - t0,
                            **({"settle_ttft_s": settle} if args.settle else {}),
                        }
                    )
                    print(
                        f"slots {slots} rate {rate}: {sent} requests in {t1 - t0:.0f} s", flush=True
                    )
                    (out / "sweep.json").write_text(json.dumps(summary, indent=1))
        finally:
            agent.stop()
            server.stop()
    (out / "sweep.json").write_text(json.dumps(summary, indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", choices=("trace", "sweep"))
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--slots", default="8")
    ap.add_argument("--ctx-per-slot", type=int, default=1024)
    ap.add_argument("--prometheus", default="")
    ap.add_argument("--fake-gpu", action="store_true", help="the agent's fake GPU (off a GPU)")
    ap.add_argument("--proxy", action="store_true", help="clients go through the agent's proxy")
    ap.add_argument("--cpu", action="store_true", help="no -ngl; one thread (off a GPU)")
    ap.add_argument("--source", default="llama.cpp on an NVIDIA H200")
    ap.add_argument("--idle", type=float, default=45)
    ap.add_argument("--steady", type=float, default=90)
    ap.add_argument("--overload", type=float, default=150)
    ap.add_argument("--overload-factor", type=int, default=6)
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--rate-factor", type=float, default=1.5)
    ap.add_argument("--rates", default="", help="sweep: several loads, requests a second")
    ap.add_argument(
        "--rate-factors", default="", help="sweep: several loads, times the calibration"
    )
    ap.add_argument("--every", type=float, default=RECORD_EVERY, help="record period, s")
    ap.add_argument("--load", type=float, default=30)
    ap.add_argument("--drain", type=float, default=25)
    ap.add_argument(
        "--settle", action="store_true",
        help="sweep: one request, not recorded, before each load (the load starts from a "
        "server whose idle slots are in its prompt cache)",
    )  # fmt: skip
    ap.add_argument(
        "--prompt-mix", default=str(PROMPT_WORDS),
        help="prompt lengths in words, one drawn per request (e.g. 40,160,320)",
    )  # fmt: skip
    args = ap.parse_args()
    global PROMPT_MIX
    try:
        PROMPT_MIX = tuple(int(w) for w in args.prompt_mix.split(","))
    except ValueError:
        ap.error(
            f"--prompt-mix: whole numbers of words separated by commas, not {args.prompt_mix!r}"
        )
    if not PROMPT_MIX or min(PROMPT_MIX) < 1:
        ap.error(f"--prompt-mix: word counts of 1 or more, not {args.prompt_mix!r}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    asyncio.run(run_trace(args) if args.mode == "trace" else run_sweep(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
