"""Helpers shared by the serving, footprint and growth benchmarks (issue 8).

Nothing here times anything by itself: it describes the machine, starts and
stops the processes a benchmark needs (the agent, simulated or stub workers),
and summarises samples. Benchmarks print figures; none asserts a time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
#: the package's source root; INFERWATCH_SRC points the benchmarks at another copy
#: (e.g. the code before a change, to measure both on one machine)
AGENT_SRC = Path(os.environ.get("INFERWATCH_SRC") or REPO / "agent").resolve()
BENCH = REPO / "bench"


# --------------------------------------------------------------------------- machine
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import importlib.metadata as md

    versions = {}
    for dist in ("prometheus-client", "aiohttp", "psutil", "nvidia-ml-py"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = "absent"
    try:
        load = os.getloadavg()
    except OSError:
        load = (math.nan, math.nan, math.nan)
    return {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
        "loadavg_at_start": [round(x, 2) for x in load],
        "packages": versions,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"machine: {m['cpu']} x{m['cpus']} (allowed {m['cpus_allowed']}), {m['python']}, "
        f"kernel {m['kernel']}, load {m['loadavg_at_start']}, {m['date']}"
    )


# --------------------------------------------------------------------------- numbers
def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default method)."""
    if not ordered:
        return math.nan
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max/mean in milliseconds of durations given in seconds."""
    ordered = sorted(seconds)
    if not ordered:
        return {"n": 0}
    return {
        "n": len(ordered),
        "p50_ms": quantile(ordered, 0.5) * 1e3,
        "p90_ms": quantile(ordered, 0.9) * 1e3,
        "p99_ms": quantile(ordered, 0.99) * 1e3,
        "max_ms": ordered[-1] * 1e3,
        "mean_ms": sum(ordered) / len(ordered) * 1e3,
    }


def write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


# --------------------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env() -> dict[str, str]:
    """The environment for child processes: the checkout's package first on the path."""
    env = dict(os.environ)
    paths = [str(AGENT_SRC), str(REPO)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def inferwatch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "inferwatch.cli", *args]


def parse_cpus(spec: str | None) -> set[int] | None:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8}; None or "" -> None (no pinning)."""
    if not spec:
        return None
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else cpus
    return (cpus & allowed) or None


def pin(cpus: set[int] | None, pid: int = 0) -> None:
    if cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cpus)


class Proc:
    """A child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(
        self, cmd: Sequence[str], log: Path, *, cpus: set[int] | None = None, name: str = ""
    ) -> None:
        self.name = name or Path(cmd[0]).name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._out = log.open("wb")
        self.popen = subprocess.Popen(
            list(cmd), stdout=self._out, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO
        )
        pin(cpus, self.popen.pid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._out.close()
        return self.popen.returncode

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@contextlib.contextmanager
def processes() -> Iterator[list[Proc]]:
    """A list to put started processes in; all are stopped on the way out, last first."""
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            with contextlib.suppress(Exception):
                proc.stop()


def wait_until(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:g}s waiting for {what} (last error: {last!r})")


def http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def http_get(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return bytes(resp.read())


# --------------------------------------------------------------------------- the stack
def start_sim_workers(
    count: int, logs: Path, started: list[Proc], cpus: set[int] | None = None
) -> list[str]:
    """``count`` ``inferwatch simulate`` processes; their base URLs once each answers /metrics.

    Each binds a port of its own choosing (``--port 0``) and names it in its first
    line: a port picked here and bound later can be taken meanwhile by someone else.
    """
    procs = []
    for i in range(count):
        proc = Proc(
            inferwatch_cmd("simulate", "--port", "0", "--log-level", "warning", "--seed", str(i)),
            logs / f"sim-{i}.log",
            cpus=cpus,
            name=f"sim-{i}",
        )
        started.append(proc)
        procs.append(proc)
    urls = []
    for proc in procs:
        url = wait_until(
            partial(_announced, proc, r" on (http://[0-9.]+:\d+) "), 60, f"{proc.name}'s address"
        )
        wait_until(partial(_up, url + "/metrics", proc), 60, proc.name)
        urls.append(url)
    return urls


def start_stub_workers(
    count: int,
    logs: Path,
    started: list[Proc],
    cpus: set[int] | None = None,
    procs: int = 1,
    engines: int = 1,
) -> list[str]:
    """``count`` stub workers (bench/stub_workers.py) spread over ``procs`` processes."""
    urls: list[str] = []
    per = [count // procs + (1 if i < count % procs else 0) for i in range(procs)]
    for i, n in enumerate(p for p in per if p):
        proc = Proc(
            [sys.executable, str(BENCH / "stub_workers.py"), "--engines", str(engines),
             "--count", str(n)],
            logs / f"stub-{i}.log",
            cpus=cpus,
            name=f"stub-{i}",
        )  # fmt: skip
        started.append(proc)
        ports = wait_until(
            partial(_announced, proc, r"stub ports: ([\d ]+)"), 60, f"{proc.name}'s ports"
        )
        for port in ports.split():
            url = f"http://127.0.0.1:{port}"
            wait_until(partial(_up, url + "/metrics", proc), 60, f"stub {url}")
            urls.append(url)
    return urls


def _announced(proc: Proc, pattern: str) -> str | None:
    """The first group of ``pattern`` in the process's output so far."""
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited: {proc.tail()}")
    found = re.search(pattern, proc.log.read_text(errors="replace"))
    return found.group(1) if found else None


def start_agent(
    worker_urls: Sequence[str],
    gpus: int,
    logs: Path,
    started: list[Proc],
    cpus: set[int] | None = None,
    extra: Sequence[str] = (),
    ready_timeout: float = 60.0,
) -> tuple[Proc, str]:
    """``inferwatch run`` with the fake GPU backend; returns it and its base URL once ready."""
    port = free_port()
    args = ["run", "--listen", f"127.0.0.1:{port}", "--log-level", "warning"]
    if gpus:
        args += ["--gpu-backend", "fake", "--fake-gpus", str(gpus)]
    else:
        args += ["--gpu-backend", "none"]
    for i, url in enumerate(worker_urls):
        args += ["--worker", f"w{i}={url}"]
    proc = Proc(inferwatch_cmd(*args, *extra), logs / "agent.log", cpus=cpus, name="agent")
    started.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_until(partial(_ready, url, proc), ready_timeout, "the agent's /readyz")
    return proc, url


def _up(url: str, proc: Proc) -> bool:
    if not proc.alive():
        raise RuntimeError(f"{proc.name} exited: {proc.tail()}")
    return http_status(url) == 200


def _ready(url: str, proc: Proc) -> bool:
    if not proc.alive():
        raise RuntimeError(f"agent exited: {proc.tail()}")
    return http_status(url + "/readyz") == 200
