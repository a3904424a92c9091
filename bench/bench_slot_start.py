"""Does a request's first token at a free slot cost more on a server with more slots?

    python bench/bench_slot_start.py [--slots 4 32 64] [--variants default noidle noram kvu]
    python3 bench/bench_slot_start.py --server BIN --model GGUF --extra='-ngl 99'   (a GPU)
    PYTHONPATH=agent python bench/bench_slot_start.py --traces tests/data/whatif/h100-fresh

Starts the real ``llama-server`` (CPU build and tiny model under ``.llama-server/``)
as the sweep recorder does (``--parallel N -c N x ctx-per-slot``, bench/device/
llamacpp_trace.py), once per slot count and launch variant:

- ``default``: the sweep's own flags (llama-server then keeps one KV stream per slot);
- ``kvu``: with ``-kvu``, one unified KV cache shared by every slot, where a batch's
  attention runs over the cells up to the highest one in use;
- ``noidle``: with ``--no-cache-idle-slots``. By default (``--cache-idle-slots``, with
  the 8192 MiB host-memory prompt cache of ``--cache-ram``) llama-server, at every new
  task it launches, goes over every idle slot and copies its KV state into the prompt
  cache, unless that prompt is already there (tools/server/server-context.cpp);
- ``noram``: with ``--cache-ram 0``, no host-memory prompt cache at all (neither the
  idle slots' copies nor the copy of the slot a new request takes).

On each server: ``--cold`` single requests one after the other, then a burst of
2 x slots concurrent requests (the sweep's warm-up), then ``--warm`` single requests
one after the other. Each request is a non-streamed ``/completion`` of one token with a
prompt of its own, so its client time is its TTFT; the server's ``timings`` give the
prompt evaluation's own time. Prints (``--json FILE``: also writes), per server and
phase, the median client time, the median prompt evaluation time and the median rest
(client less prompt and prediction: HTTP, tokenization, slot selection, the prompt
cache), the first request's and the slowest request's client time, in milliseconds;
after the burst also the server's own median time for the prompt cache at the slot
a request takes (``prompt cache update took``, logged at ``-lv 4``).

``--traces DIR`` reads a slot sweep recorded by bench/device/llamacpp_trace.py instead
(``sweep.json`` and ``sweep-s<slots>-r<rate>.jsonl.gz``, loads in the order run on each
server) and prints, per server and load, how many slots held a prompt that the idle-slot
copies had not taken yet when the load began (every slot after the warm burst, none on
a server that had none; after an earlier load, its requests that ended after its last
send) and the TTFT of the
load's first request, then the least-squares line through them.
Nothing is asserted; docs/advise.md ("What the first token at a free slot pays for") reads these figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from benchlib import Proc, free_port

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / ".llama-server" / "llama-server"
MODEL = REPO / ".llama-server" / "tiny.gguf"
WORDS = ["the", "agent", "reads", "queue", "of", "each", "slot", "and", "counts", "every"]
VARIANTS = {
    "default": [],
    "kvu": ["-kvu"],
    "noidle": ["--no-cache-idle-slots"],
    "noram": ["--cache-ram", "0"],
}


def prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def one(
    s: aiohttp.ClientSession, url: str, rng: random.Random, words: int, n_predict: int
) -> dict[str, float]:
    body = {"prompt": prompt(rng, words), "n_predict": n_predict, "cache_prompt": True}
    t0 = time.monotonic()
    async with s.post(url + "/completion", json=body) as r:
        out: dict[str, Any] = await r.json()
    client_ms = (time.monotonic() - t0) * 1000.0
    t = out.get("timings") or {}
    prompt_ms = float(t.get("prompt_ms", 0.0))
    rest = client_ms - prompt_ms - float(t.get("predicted_ms", 0.0))
    return {
        "client_ms": client_ms,
        "prompt_ms": prompt_ms,
        "rest_ms": rest,
        "prompt_n": float(t.get("prompt_n", 0)),
    }


async def wait_up(s: aiohttp.ClientSession, url: str, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            async with s.get(url + "/health") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.3)
    raise RuntimeError(f"{url} not up in {timeout:.0f} s")


async def measure(
    args: argparse.Namespace, url: str, slots: int, variant: str, log: Path
) -> list[dict[str, Any]]:
    rng = random.Random(slots * 1000 + len(variant))
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        await wait_up(s, url)
        phases: list[tuple[str, list[dict[str, float]]]] = []
        cold = [await one(s, url, rng, args.words, 1) for _ in range(args.cold)]
        phases.append(("cold", cold))
        t0 = time.monotonic()
        await asyncio.gather(
            *(one(s, url, rng, args.words, args.burst_tokens) for _ in range(2 * slots))
        )
        burst_s = time.monotonic() - t0
        at_warm = log.stat().st_size
        warm = [await one(s, url, rng, args.words, 1) for _ in range(args.warm)]
        phases.append(("warm", warm))
    with log.open("rb") as f:
        f.seek(at_warm)
        text = f.read().decode("utf-8", "replace")
    # llama-server's own time for the prompt cache when a request takes the least
    # recently used slot (saving its old prompt, looking for a cached one), at -lv 4
    cache_ms = [float(m) for m in re.findall(r"prompt cache update took ([0-9.]+) ms", text)]
    for name, recs in phases:
        row: dict[str, Any] = {
            "slots": slots,
            "variant": variant,
            "phase": name,
            "n": len(recs),
            "prompt_tokens": statistics.median(r["prompt_n"] for r in recs),
            "client_ms": statistics.median(r["client_ms"] for r in recs),
            "prompt_ms": statistics.median(r["prompt_ms"] for r in recs),
            "rest_ms": statistics.median(r["rest_ms"] for r in recs),
            "first_ms": recs[0]["client_ms"],
            "max_ms": max(r["client_ms"] for r in recs),
        }
        if name == "warm":
            row["lru_cache_ms"] = statistics.median(cache_ms) if cache_ms else 0.0
            row["burst_s"] = burst_s
        rows.append(row)
    return rows


async def one_server(args: argparse.Namespace, slots: int, variant: str) -> list[dict[str, Any]]:
    port = free_port()
    argv = [
        str(args.server), "-m", str(args.model), "--host", "127.0.0.1", "--port", str(port),
        "--parallel", str(slots), "-c", str(slots * args.ctx_per_slot),
        "--no-ui", "-lv", "4", *args.extra, *VARIANTS[variant],
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="slot-start-") as tmp:
        log = Path(tmp) / "server.log"
        proc = Proc(argv, log)
        try:
            return await measure(args, f"http://127.0.0.1:{port}", slots, variant, log)
        finally:
            proc.stop()


def from_traces(sweep: Path) -> None:
    from inferwatch.advise.trace import read_trace

    summary = json.loads((sweep / "sweep.json").read_text())
    runs = [r for r in summary if "rate" in r]
    # servers that served a burst of 2 x slots before their loads (the warmed sweep)
    warmed = {int(r["warm_up_slots"]) for r in summary if "warm_up_slots" in r}
    print(f"{sweep}: per server and load, in the order run")
    print("slots   rate  uncopied  first_ttft_ms")
    pts: list[tuple[float, float]] = []
    last: dict[int, list[tuple[float, float, float]]] = {}
    for run in runs:
        slots, rate = int(run["slots"]), run["rate"]
        tr = read_trace(sweep / f"sweep-s{slots}-r{rate}.jsonl.gz")
        # (sent, ttft, ended) of the requests that answered (the reader gives send times)
        reqs = sorted(
            (t, float(c["ttft_s"]), t + float(c["e2e_s"]))
            for t, c in tr.client
            if c.get("ok") and c.get("ttft_s") is not None
        )
        prev = last.get(slots)
        if prev is None:
            # after the burst every slot holds a prompt; a fresh server's slots are empty
            uncopied = slots if slots in warmed else 0
        else:
            last_send = max(r[0] for r in prev)
            uncopied = min(slots, sum(1 for r in prev if r[2] > last_send))
        last[slots] = reqs
        pts.append((uncopied, reqs[0][1] * 1000.0))
        print(f"{slots:>5} {rate:>6} {uncopied:>9} {reqs[0][1] * 1000.0:>14.0f}")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    slope, icpt = statistics.linear_regression(xs, ys)
    r = statistics.correlation(xs, ys)
    print(
        f"first TTFT = {icpt:.0f} ms + {slope:.1f} ms x uncopied slots (r = {r:.2f}, {len(pts)} loads)"
    )


async def main_async(args: argparse.Namespace) -> None:
    print(
        f"{args.server.name} {' '.join(args.extra)}, {args.ctx_per_slot} context per slot, "
        f"prompts of {args.words} words, burst answers of {args.burst_tokens} tokens"
    )
    print("slots  variant phase   n prompt client_ms prompt_ms rest_ms first_ms  max_ms cache_ms")
    rows: list[dict[str, Any]] = []
    for variant in args.variants:
        for slots in args.slots:
            for r in await one_server(args, slots, variant):
                rows.append(r)
                print(
                    f"{r['slots']:>5} {r['variant']:>8} {r['phase']:>5} {r['n']:>3} "
                    f"{r['prompt_tokens']:>6.0f} {r['client_ms']:>9.1f} {r['prompt_ms']:>9.1f} "
                    f"{r['rest_ms']:>7.1f} {r['first_ms']:>8.1f} {r['max_ms']:>7.1f}"
                    + (
                        f" {r['lru_cache_ms']:>8.1f}   (burst of {2 * r['slots']}: "
                        f"{r['burst_s']:.1f} s)"
                        if r["phase"] == "warm"
                        else ""
                    ),
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", type=Path, default=Path(os.environ.get("LLAMA_SERVER", SERVER)))
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--slots", type=int, nargs="+", default=[4, 32])
    ap.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["default"])
    ap.add_argument("--ctx-per-slot", type=int, default=1280)
    ap.add_argument("--words", type=int, default=320)
    ap.add_argument("--burst-tokens", type=int, default=64)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--traces", type=Path, help="a recorded slot sweep's folder, read only")
    ap.add_argument("--extra", default="-t 1", help="llama-server flags (GPU: --extra='-ngl 99')")
    args = ap.parse_args()
    args.extra = shlex.split(args.extra)
    if args.traces is not None:
        if not (args.traces / "sweep.json").is_file():
            print(f"--traces: {args.traces} has no sweep.json (expected a recorded slot sweep)")
            return 2
        from_traces(args.traces)
        return 0
    if not args.server.exists():
        print(f"--server: {args.server} does not exist (expected a llama-server binary)")
        return 2
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
