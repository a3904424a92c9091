"""The proxy under a real engine's connection habits: a soak against llama-server (issue 39).

The real ``llama-server`` (the CPU build of tests/engines/llamacpp/setup.sh, the tiny
model, ``--parallel 2``) behind three paths, each soaked the same way by
``tests/support/soak.py``: ``--clients`` threads (more streams than slots), half of
them keeping one connection alive and half opening one per request, each
alternating streamed and plain chat completions of ``--max-tokens`` tokens.

- ``direct``: the clients talk to llama-server itself;
- ``inferwatch``: through the agent's measuring proxy (``inferwatch run`` with
  ``workers[].proxy``);
- ``nginx``: through Debian's nginx, one worker process, ``proxy_buffering off``,
  upstream keep-alive (bench/bench_proxy.py's configuration).

Each path gets two phases: ``steady`` (``--requests`` requests) and ``restart``
(``--restart-requests`` requests, llama-server killed (SIGKILL, as an OOM kill or a
crash; under SIGTERM it waits up to 10 s for its open connections) and started again
when half of them have been sent). For the restart the table splits the
failures into those that were in flight when the engine stopped and the others.
The agent's own counters (``inferwatch_proxy_upstream_errors_total``,
``inferwatch_proxy_upstream_retries_total``) are read after each path.

Nothing is asserted; the test with a pass or a fail is tests/live/test_proxy_soak.py.
``INFERWATCH_SRC=/path/to/agent`` runs another copy of the agent (the code before a
change) for a before/after on one machine.

    PYTHONPATH=agent python bench/bench_proxy_soak.py [--requests 10000] [--paths inferwatch,nginx]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib
from bench_proxy import NGINX_CONF
from benchlib import Proc, free_port, http_get, http_status, processes, wait_until

if str(benchlib.REPO) not in sys.path:
    sys.path.insert(0, str(benchlib.REPO))

from tests.support import soak  # needs the repository root on sys.path
from tests.support.llamaserver import SERVER, LlamaServer

PATHS = ("direct", "inferwatch", "nginx")


def start_agent(tmp: Path, llama_url: str, started: list[Proc]) -> tuple[int, int]:
    """The agent with a proxy for the worker: (proxy port, agent port)."""
    proxy_port, agent_port = free_port(), free_port()
    config = tmp / "agent.yaml"
    config.write_text(json.dumps({
        "gpu": {"backend": "none"}, "log_level": "info", "collect_interval": "1s",
        "workers": [{"name": "llama", "url": llama_url, "engine": "llamacpp",
                     "proxy": {"listen": f"127.0.0.1:{proxy_port}"}}],
    }))  # fmt: skip
    agent = Proc(benchlib.inferwatch_cmd("run", "--config", str(config), "--listen",
                                         f"127.0.0.1:{agent_port}"), tmp / "agent.log",
                 name="agent")  # fmt: skip
    started.append(agent)
    wait_until(lambda: http_status(f"http://127.0.0.1:{proxy_port}/health") == 200, 60,
               "the agent's proxy")  # fmt: skip
    return proxy_port, agent_port


def start_nginx(tmp: Path, upstream: int, started: list[Proc]) -> int | None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        print("nginx not installed (apt-get install -y nginx): compared with nothing")
        return None
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=upstream, port=port))
    proc = Proc([nginx, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(conf)],
                tmp / "nginx.out", name="nginx")  # fmt: skip
    started.append(proc)
    wait_until(lambda: http_status(f"http://127.0.0.1:{port}/health") == 200, 20, "nginx")
    return port


def agent_counters(agent_port: int) -> dict[str, float]:
    """The proxy's error and retry counters, by family and reason."""
    text = http_get(f"http://127.0.0.1:{agent_port}/metrics").decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        for fam in ("inferwatch_proxy_upstream_errors_total",
                    "inferwatch_proxy_upstream_retries_total"):  # fmt: skip
            if line.startswith(fam + "{"):
                reason = line.split('reason="', 1)[1].split('"', 1)[0]
                short = fam.removeprefix("inferwatch_proxy_upstream_").removesuffix("_total")
                out[f"{short}.{reason}"] = float(line.rsplit(" ", 1)[1])
    return out


def summarise(res: soak.Result, restart: tuple[float, float] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "requests": len(res.done), "ok": res.ok, "failed": len(res.failed),
        "failures": dict(res.failures()), "seconds": round(res.seconds, 1),
        "per_s": round(len(res.done) / res.seconds, 1) if res.seconds else 0.0,
        "by_kind": {k: {"requests": n, "failed": f} for k, (n, f) in res.by_kind().items()},
    }  # fmt: skip
    if restart is not None:
        kill, dead, up = restart
        flying = res.in_flight_at(kill, dead)
        row["in_flight_at_stop"] = len(flying)
        row["failed_in_flight"] = sum(1 for d in flying if d.outcome != "ok")
        row["failed_other"] = row["failed"] - row["failed_in_flight"]
        row["engine_down_s"] = round(up - kill, 3)
        # each failure: its start and end, seconds from the kill, its kind, what the client saw
        row["failed_when"] = [
            (round(d.start - kill, 3), round(d.end - kill, 3),
             f"{'stream' if d.stream else 'plain'}/{'keep-alive' if d.keep else 'close'}",
             d.outcome)
            for d in res.failed
        ][:40]  # fmt: skip
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=10_000, help="steady phase, per path")
    ap.add_argument("--restart-requests", type=int, default=2_000,
                    help="restart phase, per path (the engine restarts half way)")  # fmt: skip
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--deadline-s", type=float, default=900.0, help="per phase")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--logs", type=Path, help="keep the processes' logs here")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if not SERVER.exists():
        print(f"no llama-server at {SERVER}: run tests/engines/llamacpp/setup.sh", file=sys.stderr)
        return 2
    print(benchlib.machine_line(benchlib.machine()))
    print(f"agent source: {benchlib.AGENT_SRC}")
    print(f"llama-server --parallel 2, {args.clients} clients (half keep-alive), "
          f"max_tokens {args.max_tokens}, streamed and plain alternating")  # fmt: skip
    results: dict[str, Any] = {"machine": benchlib.machine(), "args": vars(args) | {"json": None, "logs": None},
                               "runs": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmpname, processes() as started:
        tmp = Path(tmpname)
        if args.logs is not None:
            tmp = args.logs.resolve()
            tmp.mkdir(parents=True, exist_ok=True)
        llama = LlamaServer(tmp, ["--metrics", "--parallel", "2"]).start()
        try:
            ports: dict[str, int] = {"direct": llama.port}
            agent_port = 0
            if "inferwatch" in paths:
                ports["inferwatch"], agent_port = start_agent(tmp, llama.url, started)
            if "nginx" in paths:
                ng = start_nginx(tmp, llama.port, started)
                if ng is not None:
                    ports["nginx"] = ng
            for name in paths:
                if name not in ports:
                    continue
                port = ports[name]
                print(f"\n{name}: steady, {args.requests} requests", flush=True)
                res = soak.run(port, args.requests, args.clients, args.max_tokens,
                               args.deadline_s)  # fmt: skip
                results["runs"][f"{name}/steady"] = summarise(res, None)
                print(f"  {results['runs'][f'{name}/steady']}", flush=True)
                moments: list[float] = []

                def restart(moments: list[float] = moments) -> None:
                    moments.append(time.monotonic())
                    llama.kill()  # SIGKILL: SIGTERM waits up to 10 s for open connections
                    moments.append(time.monotonic())
                    llama.start()
                    moments.append(time.monotonic())

                half = max(1, args.restart_requests // 2)
                print(f"{name}: restart, {args.restart_requests} requests", flush=True)
                res = soak.run(port, args.restart_requests, args.clients, args.max_tokens,
                               args.deadline_s, at={half: restart})  # fmt: skip
                row = summarise(res, (moments[0], moments[1], moments[2]) if len(moments) == 3
                                else None)  # fmt: skip
                results["runs"][f"{name}/restart"] = row
                print(f"  {row}", flush=True)
                if name == "inferwatch":
                    time.sleep(2.5)  # the exposition is rebuilt every second
                    results["runs"]["inferwatch/counters"] = agent_counters(agent_port)
                    print(f"  the agent's counters: {results['runs']['inferwatch/counters']}")
        finally:
            llama.stop()
    report(results["runs"])
    benchlib.write_json(args.json, results)
    return 0


def report(runs: dict[str, Any]) -> None:
    print("\nrequests that failed, by path and phase (the engine restarted half way "
          "through 'restart')")  # fmt: skip
    print(f"{'path':<12}{'phase':<9}{'requests':>9}{'failed':>8}{'in flight':>11}"
          f"{'of them failed':>16}{'other fails':>13}{'req/s':>8}  failures seen")  # fmt: skip
    for key, row in runs.items():
        if key.endswith("/counters"):
            continue
        name, phase = key.split("/")
        flying = row.get("in_flight_at_stop", "")
        fin = row.get("failed_in_flight", "")
        other = row.get("failed_other", "")
        seen = ", ".join(f"{k} {v}" for k, v in sorted(row["failures"].items())) or "-"
        print(f"{name:<12}{phase:<9}{row['requests']:>9}{row['failed']:>8}{flying!s:>11}"
              f"{fin!s:>16}{other!s:>13}{row['per_s']:>8}  {seen}")  # fmt: skip
    print("\nfailures by client kind (requests / failed)")
    kinds = ("stream/keep-alive", "plain/keep-alive", "stream/close", "plain/close")
    print(f"{'path/phase':<22}" + "".join(f"{k:>20}" for k in kinds))
    for key, row in runs.items():
        if key.endswith("/counters"):
            continue
        cells = []
        for k in kinds:
            c = row["by_kind"].get(k, {"requests": 0, "failed": 0})
            cells.append(f"{c['requests']} / {c['failed']}")
        print(f"{key:<22}" + "".join(f"{c:>20}" for c in cells))
    counters = runs.get("inferwatch/counters")
    if counters:
        print("\nthe agent's counters after both phases: "
              + ", ".join(f"{k} {v:g}" for k, v in sorted(counters.items())))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
