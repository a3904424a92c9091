"""``inferwatch demo``: the whole loop on one machine, no GPU needed.

Starts simulated vLLM workers on simulated GPUs in the scenario's layout
(``demo_layouts``: a pair of workers on two GPUs, tensor parallelism over four,
two workers on one card, an 8-GPU host, two MIG slices), the agent watching
them, and the load generators; prints the URLs; shows the four lifelines per
worker (GPU utilization, VRAM, queue depth, TTFT/TPOT quantiles) and which
alert conditions hold, read from the agent's own ``/metrics`` and judged by the
conditions of ``pack.loops`` (``demo_conditions``): each is pending until it has
held for its alert's ``for``, then firing. With ``--stack`` it also starts
Prometheus (with the generated alert and recording rules) and Alertmanager on
loopback, and shows the alerts Prometheus has firing.

Every part is a child process started exactly as a user would start it, so the
demo exercises the same commands as a real deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import json
import math
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferwatch.agent.config import parse_listen
from inferwatch.cli import add_options
from inferwatch.demo.conditions import (
    FIRING,
    AlertState,
    AlertStates,
    CounterRate,
    Reading,
    alert_for,
    conditions,
)
from inferwatch.demo.layouts import SCENARIOS, Layout, layout_for
from inferwatch.engines import contract
from inferwatch.errors import UsageError
from inferwatch.pack import fmt, reading
from inferwatch.pack import loops as L
from inferwatch.sim.gpustate import has_state

#: the checkout's shipped Alertmanager example and runbooks (an editable install, as the
#: README's quick start makes)
_ROOT = Path(__file__).resolve().parents[3]
SHIPPED_ALERTMANAGER = _ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
RUNBOOKS_DIR = _ROOT / "runbooks"

#: what a table cell shows for a value not read
NA = "-"


def alertmanager_config(shipped: str | None) -> str:
    """The demo's Alertmanager: the shipped example's grouping and inhibitions, every
    notification to a receiver that sends nothing (the alerts show in its UI and API)."""
    import yaml

    doc = yaml.safe_load(shipped) if shipped else {}
    route = (doc or {}).get("route", {})
    cfg: dict[str, Any] = {
        "route": {
            "receiver": "log",
            "group_by": route.get("group_by", ["alertname", "worker"]),
            "group_wait": "5s",
        },
        "receivers": [{"name": "log"}],
    }
    if doc and doc.get("inhibit_rules"):
        cfg["inhibit_rules"] = doc["inhibit_rules"]
    return json.dumps(cfg, indent=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(
        parser,
        (
            "--listen",
            "HOST:PORT",
            "where the demo's agent serves /metrics (default 127.0.0.1:10127)",
            "127.0.0.1:10127",
        ),
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        default=None,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="steady",
        help="load scenario for the worker pair, or a layout: tp, colocate, host8, mig "
        "(default steady)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        metavar="F",
        default=1.0,
        help="simulated durations x F for the workers and the load (default 1)",
    )
    parser.add_argument(
        "--stack",
        action="store_true",
        help="also start Prometheus and Alertmanager with the generated rules",
    )
    add_options(
        parser,
        (
            "--thresholds",
            "FILE",
            "thresholds file for the alert conditions shown (default: packaged)",
        ),
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="print a status line every few seconds instead of the live view",
    )


#: the demo agent's stats window (seconds): its quantiles and queue slope, and the span
#: of the view's preemption rate
STATS_WINDOW = 30.0


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "inferwatch.cli", *args]


@dataclass
class Child:
    name: str
    args: list[str]
    log: Path
    proc: asyncio.subprocess.Process | None = None
    expect_exit: bool = False

    async def start(self) -> None:
        fh = self.log.open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, stdout=fh, stderr=asyncio.subprocess.STDOUT, start_new_session=True
        )
        fh.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def parse_agent_metrics(
    text: str,
    layout: Layout | None = None,
    now: float | None = None,
    preemptions: dict[str, float] | None = None,
) -> dict[str, Reading]:
    """Per-worker readings (``pack.reading``) from one scrape, each worker on the devices
    the layout put it on (SM activity on a MIG slice), its uptime to ``now`` (default:
    the clock); its preemption counter added into ``preemptions`` where given."""
    now = time.time() if now is None else now
    layout = layout or layout_for("steady")
    scrape = reading.parse_exposition(text)
    devices = {
        w.name: [
            {"gpu": str(g), "gpu_instance": "" if w.gpu_instance is None else str(w.gpu_instance)}
            for g in w.gpus
        ]
        for w in layout.workers
    }
    readings = reading.read_workers([(now, scrape)], workers=layout.names, devices=devices)
    for w, r in readings.items():
        r.flags = r.known_flags
        counted = reading.total(scrape, contract.PREEMPTIONS, worker=w)
        if preemptions is not None and counted is not None:
            preemptions[w] = preemptions.get(w, 0.0) + counted
    return readings


def _q(d: dict[str, float], scale: float = 1.0, unit: str = "s") -> str:
    if not d:
        return "-"
    parts = [f"{d[k] * scale:.2f}" if k in d else "-" for k in ("0.5", "0.95", "0.99")]
    return "/".join(parts) + unit


#: a value past a guide's line: red past a line that pages or scales, blue in the waste band
PAST, WASTE = "red", "blue"


@dataclass(frozen=True)
class Cell:
    """One lifeline value as the live table shows it: its text, the line it is past (if
    any) and its colour, and a note that says what the rule reads."""

    text: str
    past: str = ""
    style: str = ""
    note: str = ""

    def plain(self) -> str:
        out = self.text + (f" ({self.past})" if self.past else "")
        return out + (f" [{self.note}]" if self.note else "")

    def markup(self) -> str:
        from rich.markup import escape

        body = escape(self.text + (f" {self.past}" if self.past else ""))
        if self.style:
            body = f"[{self.style}]{body}[/]"
        return body + (f"\n[dim]{escape(self.note)}[/]" if self.note else "")


def lifeline_cells(r: Reading, t: Any) -> dict[str, Cell]:
    """GPU utilization, VRAM, KV cache and queue against the guide's lines (thresholds
    ``t``): utilization past ``pack.loops.WASTE`` (30 %) or ``SCALE_REVIEW`` (85 %); memory pressure above ``vram.scale_above`` (92 %), read from the KV cache
    where the engine exports it (vLLM reserves its pool at start: NVML's VRAM reads near
    full by design), else from NVML; the queue above what the worker can batch."""
    u = r.gpu_util
    gpu = Cell(fmt.percent(u, none=NA))
    if L.waste(u, t):
        gpu = Cell(fmt.percent(u, none=NA), f"< {fmt.percent(L.WASTE.of(t))}", WASTE)
    elif L.scale_review(u, t):
        gpu = Cell(fmt.percent(u, none=NA), f"> {fmt.percent(L.SCALE_REVIEW.of(t))}", PAST)
    line = t.vram.scale_above
    kv = Cell(fmt.percent(r.kv, none=NA))
    if r.kv is not None and r.kv > line:
        kv = Cell(fmt.percent(r.kv, none=NA), f"> {fmt.percent(line)}", PAST)
    vram = Cell(fmt.percent(r.vram, none=NA))
    if r.kv is not None:
        if r.vram is not None and r.vram > line:
            vram = Cell(
                fmt.percent(r.vram, none=NA),
                style="dim",
                note=f"reserved pool; the rule reads KV {fmt.percent(r.kv, none=NA)}",
            )
    elif r.vram is not None and r.vram > line:
        vram = Cell(
            fmt.percent(r.vram, none=NA),
            f"> {fmt.percent(line)}",
            PAST,
            "no KV gauge: the rule reads VRAM",
        )
    text = f"{fmt.number(r.queue, none=NA)} / {fmt.number(r.running, none=NA)} / {fmt.number(r.capacity, none=NA)}"
    if r.slope is not None:
        text += f" ({r.slope:+.1f}/s)"
    queue = Cell(text)
    if L.over_capacity(r.queue, r.capacity, r.running, r.kv, t):
        cap = L.batch_capacity(r.capacity, r.running, r.kv, t) or 0.0
        queue = Cell(text, f"> capacity {cap:.0f}", PAST)
    return {"gpu": gpu, "vram": vram, "kv": kv, "queue": queue}


def lines_caption(t: Any) -> str:
    """The guide's lines the table marks, from the thresholds."""
    return (
        f"Lines (thresholds.yaml): GPU util < {fmt.percent(L.WASTE.of(t))} waste, "
        f"> {fmt.percent(L.SCALE_REVIEW.of(t))} scale review; memory pressure > "
        f"{fmt.percent(t.vram.scale_above)}, read from the KV cache where the engine exports it "
        "(vLLM reserves its pool at start, so NVML's VRAM reads near full by design), else "
        "from VRAM; queue > what the worker can batch."
    )


def answer_rows(recs: list[Any], top: int = 3) -> list[tuple[str, str, str, str]]:
    """(rank, workers, urgency, the first action) of the ranked answer's first items."""
    return [
        (
            str(i),
            ", ".join(r.workers),
            r.urgency,
            r.actions[0] if r.actions else r.title,
        )
        for i, r in enumerate(recs[:top], 1)
    ]


def render(
    readings: dict[str, Reading],
    states: list[AlertState],
    firing: list[str] | None,
    header: str,
    scaler: list[tuple[str, str, str, str, str]] | None = None,
    t: Any = None,
    recs: list[Any] | None = None,
) -> Any:
    from rich.console import Group
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    if t is None:
        from inferwatch.pack.thresholds import load_thresholds

        t = load_thresholds()
    table = Table(title="The four lifelines", expand=True, caption=lines_caption(t))
    for col in (
        "worker",
        "up",
        f"GPU util ({fmt.percent(L.WASTE.of(t))} | {fmt.percent(L.SCALE_REVIEW.of(t))})",
        "VRAM (NVML)",
        "queue / running / capacity",
        f"KV ({fmt.percent(t.vram.scale_above)})",
        "TTFT p50/p95/p99",
        "TPOT p50/p95/p99 (ms)",
    ):
        table.add_column(col)
    for w, r in readings.items():
        cells = lifeline_cells(r, t)
        table.add_row(
            escape(w),
            "yes" if r.up else "[red]no[/]",
            cells["gpu"].markup(),
            cells["vram"].markup(),
            cells["queue"].markup(),
            cells["kv"].markup(),
            _q(r.ttft),
            _q(r.tpot, 1000, ""),
        )
    cond_table = Table(
        title="Alert conditions: pending until they have held for the alert's 'for', then firing",
        expand=True,
    )
    for col in ("alert", "worker", "state", "why"):
        cond_table.add_column(col)
    for st in states:
        cond_table.add_row(st.condition.alert, st.condition.worker, _state(st), st.condition.why)
    if not states:
        cond_table.add_row("none", "", "", "")
    parts: list[Any] = [Panel(header), table, cond_table]
    if recs is not None:
        todo = Table(title="What to do first: inferwatch advise's ranking", expand=True)
        for col in ("#", "worker", "urgency", "do"):
            todo.add_column(col, overflow="fold")
        for row in answer_rows(recs):
            todo.add_row(*(escape(cell) for cell in row))
        if not recs:
            todo.add_row("-", "", "", "nothing: every worker is within its lines")
        parts.append(todo)
    if scaler:
        scale_table = Table(
            title="A scaler following the autoscaling rules",
            caption=scaler_cap_note(),
            expand=True,
        )
        for col in ("model", "workers", "desired", f"runs (cap {max_replicas()})", "why"):
            scale_table.add_column(col)
        for scaled in scaler:
            scale_table.add_row(*scaled)
        parts.append(scale_table)
    if firing is not None:
        parts.append(Panel(", ".join(firing) or "none", title="Firing in Prometheus"))
    return Group(*parts)


#: what a scaler following pack.rules.autoscale's rules would do, per model (``--stack`` only)
SCALER_QUERIES = {
    "replicas": "model:inferwatch_replicas:count",
    "desired": "model:inferwatch_desired_replicas:count",
    "pressure": "model:inferwatch_queue_pressure:ratio",
    "scale_out": "model:inferwatch_scale_out:bool",
    "scale_in": "model:inferwatch_scale_in:bool",
}


def max_replicas() -> int:
    """The cap of the shipped KEDA ScaledObject and HPA (``pack.rules.autoscale``)."""
    from inferwatch.pack.rules.autoscale import MAX_REPLICAS

    return MAX_REPLICAS


def scaler_cap_note() -> str:
    return (
        "runs: what the ScaledObject and HPA of deploy/kubernetes/autoscaling would run, "
        f"maxReplicaCount / maxReplicas {max_replicas()} (edit them for more)"
    )


def scaler_rows(values: dict[str, dict[str, float]]) -> list[tuple[str, str, str, str, str]]:
    """(model, workers, desired, runs, why) from ``{query key: {model: value}}``: runs is
    the desired count within the shipped objects' bounds, ``8 (capped)`` above them."""
    from inferwatch.pack.rules.autoscale import MIN_REPLICAS

    cap = max_replicas()
    rows = []
    for model in sorted(values.get("desired", {})):
        replicas = values.get("replicas", {}).get(model)
        desired = values["desired"][model]
        pressure = values.get("pressure", {}).get(model)
        if values.get("scale_out", {}).get(model) == 1:
            why = "scale out: a queue over capacity for the last samples"
        elif values.get("scale_in", {}).get(model) == 1 and replicas and desired < replicas:
            why = "scale in: GPUs below the waste line, nothing warming up"
        else:
            why = "hold"
        if pressure is not None:
            why += f" (queue pressure {pressure:.2f})"
        runs = min(max(desired, MIN_REPLICAS), cap)
        shown = f"{cap} (capped)" if desired > cap else fmt.number(runs, none=NA)
        rows.append(
            (model, fmt.number(replicas, none=NA), fmt.number(desired, none=NA), shown, why)
        )
    return rows


def _state(st: AlertState) -> str:
    """``firing``, or ``pending 40s/2m`` (held so far / the alert's ``for``)."""
    if st.state == FIRING:
        return "[red]firing[/]"
    return f"[yellow]pending[/] {fmt.clock(st.held)}/{fmt.clock(st.wait)}"


def status_line(
    readings: dict[str, Reading],
    states: list[AlertState],
    t: Any = None,
    recs: list[Any] | None = None,
) -> str:
    """One line per view (``--no-live``): each worker's lifelines, a value past a guide's
    line marked with it (``gpu=93% (> 85%)``), the conditions, and the answer's first item."""
    if t is None:
        from inferwatch.pack.thresholds import load_thresholds

        t = load_thresholds()
    parts = []
    for w, r in readings.items():
        c = lifeline_cells(r, t)
        queue = f"{fmt.number(r.queue, none=NA)}/{fmt.number(r.capacity, none=NA)}"
        if c["queue"].past:
            queue += f" ({c['queue'].past})"
        parts.append(
            f"{w}: up={int(r.up)} gpu={c['gpu'].plain()} vram={c['vram'].plain()} "
            f"kv={c['kv'].plain()} queue={queue} ttft_p99={fmt.number(r.ttft.get('0.99'), 2, none=NA)}s"
        )
    shown = sorted({(st.condition.alert, st.state) for st in states})
    alerts = ",".join(f"{alert}({state})" for alert, state in shown) or "none"
    line = " | ".join(parts) + f" | conditions: {alerts}"
    if recs:
        first = recs[0]
        line += f" | first: {first.title} ({', '.join(first.workers)}; {first.urgency})"
    return line


def _get(url: str, timeout: float = 2.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _wait_http(url: str, deadline: float, child: Child | None = None) -> bool:
    while time.monotonic() < deadline:
        if child is not None and not child.alive():
            return False
        if _get(url) is not None:
            return True
        time.sleep(0.2)
    return False


def prometheus_alerts_page(url: str) -> tuple[str, str]:
    """The alerts page of the Prometheus at ``url`` and its version (``/api/v1/status/
    buildinfo``): ``/alerts`` upstream (2.x's React UI, 3.x's), ``/classic/alerts`` on
    Debian's build (version ``+ds``: packaged without the React UI, so ``/alerts`` is a
    404 there; prometheus/prometheus#11669). The page chosen is checked to answer; where
    neither does, the API's ``/api/v1/alerts``."""
    text = _get(url + "/api/v1/status/buildinfo")
    version = "unknown version"
    if text is not None:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            version = str(json.loads(text)["data"]["version"])
    pages = ["/classic/alerts", "/alerts"] if "+ds" in version else ["/alerts", "/classic/alerts"]
    for page in pages:
        if _get(url + page) is not None:
            return url + page, version
    return url + "/api/v1/alerts", version


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        from inferwatch.pack.thresholds import load_thresholds

        self.args = args
        self.layout = layout_for(args.scenario)
        self.thresholds = load_thresholds(args.thresholds)
        host, port = parse_listen(args.listen, "--listen", "listen")
        self.agent_host = host
        self.agent_port = port
        self.dir = Path(tempfile.mkdtemp(prefix="inferwatch-demo-"))
        self.children: list[Child] = []
        self.worker_urls: dict[str, str] = {}
        self.prometheus_url: str | None = None
        #: the alerts page of the Prometheus started, and its version
        self.prometheus_page: tuple[str, str] | None = None
        self.alertmanager_url: str | None = None
        self.inhibitions = False
        #: pending vs firing, with each alert's `for` from the rules the pack generates
        self.states = AlertStates(alert_for(self.thresholds))
        #: worker -> its preemption counter's rate over the stats window
        self._preemptions: dict[str, CounterRate] = {}

    # ------------------------------------------------------------------ start
    async def start(self) -> None:
        gpu_dir = self.dir / "gpus"
        gpu_dir.mkdir()
        workers = []
        scale = str(self.args.time_scale)
        for w in self.layout.workers:
            port = _free_port()
            url = f"http://127.0.0.1:{port}"
            self.worker_urls[w.name] = url
            self.children.append(
                Child(
                    w.name,
                    _cli(
                        "simulate",
                        "--port",
                        str(port),
                        "--model",
                        w.served_model,
                        "--max-num-seqs",
                        str(w.max_num_seqs),
                        "--gpu-state-dir",
                        str(gpu_dir),
                        "--time-scale",
                        scale,
                        *w.sim_args,
                    ),
                    self.dir / f"{w.name}.log",
                )
            )
            # The simulator is not `vllm serve`, so its capacity cannot be read from
            # the command line: configure it, as a user would for such a worker.
            workers.append(
                {"name": w.name, "url": url, "engine": "vllm", "max_num_seqs": w.max_num_seqs}
            )
        config = {
            "listen": f"{self.agent_host}:{self.agent_port}",
            "collect_interval": "1s",
            "stats_window": f"{STATS_WINDOW:g}s",
            "gpu": {
                "backend": "fake",
                "fake_count": self.layout.gpu_count,
                "fake_state_dir": str(gpu_dir),
                # GPM every 2 s rather than 15 s, so the demo shows it at once
                "activity_interval": "2s",
            },
            "workers": workers,
        }
        if self.args.scenario != "cold-start":
            # The warm-up gate takes the simulators' cold start on itself, as in
            # production; the cold-start scenario leaves it off to show the cold path.
            config["warmup"] = {"enabled": True}
        config_path = self.dir / "agent.yaml"
        config_path.write_text(json.dumps(config, indent=2))
        agent_args = ["run", "--config", str(config_path)]
        self.agent = Child("agent", _cli(*agent_args), self.dir / "agent.log")
        simulators = list(self.children)
        for child in simulators:
            await child.start()
        deadline = time.monotonic() + 60
        for child, w in zip(simulators, self.layout.workers, strict=True):
            if not await asyncio.to_thread(
                _wait_http, self.worker_urls[w.name] + "/health", deadline, child
            ):
                raise RuntimeError(f"{w.name} did not start:\n{child.tail()}")
            # The agent reads what each GPU supports (GPM, MIG) when it opens it, as on
            # real hardware: start it once every simulated GPU has published its state.
            while not all(has_state(gpu_dir, g) for g in w.gpus):
                if time.monotonic() > deadline or not child.alive():
                    raise RuntimeError(f"{w.name} published no GPU state:\n{child.tail()}")
                await asyncio.sleep(0.1)
        self.children.append(self.agent)
        await self.agent.start()
        if not await asyncio.to_thread(
            _wait_http, self.agent_url + "/healthz", deadline, self.agent
        ):
            raise RuntimeError(f"the agent did not start:\n{self.agent.tail()}")
        if "warmup" in config:
            # As a Service would, send users only once the gate has warmed the workers.
            ready_by = time.monotonic() + 120
            if not await asyncio.to_thread(
                _wait_http, self.agent_url + "/readyz", ready_by, self.agent
            ):
                raise RuntimeError(f"the warm-up gate did not open:\n{self.agent.tail()}")
        if self.args.stack:
            await self._start_stack()
        for n, group in enumerate(self.layout.loads):
            load = ["loadgen", "--scenario", group.scenario, "--time-scale", scale]
            for name in group.workers:
                load += ["--target", self.worker_urls[name]]
            load += ["--duration", str(int(self.args.duration or 24 * 3600)), *group.extra]
            name = "loadgen" if n == 0 else f"loadgen-{n + 1}"
            child = Child(name, _cli(*load), self.dir / f"{name}.log", expect_exit=True)
            self.children.append(child)
            await child.start()

    @property
    def agent_url(self) -> str:
        host = "127.0.0.1" if self.agent_host in ("0.0.0.0", "") else self.agent_host
        return f"http://{host}:{self.agent_port}"

    async def _start_stack(self) -> None:
        from inferwatch.pack.generate import GENERATORS

        prometheus = shutil.which("prometheus")
        alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        if not prometheus or not alertmanager:
            raise UsageError(
                "--stack needs Prometheus and Alertmanager: "
                "sudo apt-get install prometheus prometheus-alertmanager"
            )
        rules_dir = self.dir / "rules"
        rule_files: list[str] = []
        # the rules' runbook links point at the runbooks of this checkout, which the demo
        # has on disk (the default base is a repository address an installation may not
        # reach); the dashboard links stay: the demo starts no Grafana (urls() says so)
        local = dataclasses.replace(
            self.thresholds,
            pack=dataclasses.replace(
                self.thresholds.pack, runbook_base_url=RUNBOOKS_DIR.as_uri() + "/"
            ),
        )
        for generator in GENERATORS:
            for rel, text in generator(local if RUNBOOKS_DIR.is_dir() else self.thresholds).items():
                if rel.startswith("alerts/") and rel.endswith(".yaml") and "/tests/" not in rel:
                    path = rules_dir / Path(rel).name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
                    rule_files.append(str(path))
        am_port, am_cluster, prom_port = _free_port(), _free_port(), _free_port()
        am_cfg = self.dir / "alertmanager.yml"
        shipped = SHIPPED_ALERTMANAGER.read_text() if SHIPPED_ALERTMANAGER.is_file() else None
        self.inhibitions = shipped is not None
        am_cfg.write_text(alertmanager_config(shipped))
        self.children.append(
            am := Child(
                "alertmanager",
                [
                    alertmanager,
                    f"--config.file={am_cfg}",
                    f"--storage.path={self.dir / 'am-data'}",
                    f"--web.listen-address=127.0.0.1:{am_port}",
                    f"--cluster.listen-address=127.0.0.1:{am_cluster}",
                ],
                self.dir / "alertmanager.log",
            )
        )
        agent_target = f"127.0.0.1:{self.agent_port}"
        prom_cfg = {
            # The generated rules count samples (the queue rule's three in a row): scrape
            # and evaluate at the interval the thresholds were generated for.
            "global": {
                "scrape_interval": self.thresholds.pack.interval,
                "evaluation_interval": self.thresholds.pack.interval,
            },
            "rule_files": rule_files,
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
            },
            "scrape_configs": [
                {"job_name": "inferwatch", "static_configs": [{"targets": [agent_target]}]}
            ],
        }
        cfg_path = self.dir / "prometheus.yml"
        cfg_path.write_text(json.dumps(prom_cfg, indent=2))
        self.children.append(
            prom := Child(
                "prometheus",
                [
                    prometheus,
                    f"--config.file={cfg_path}",
                    f"--storage.tsdb.path={self.dir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    # the alerts' runbook links carry it ($externalURL): their pages'
                    # "Run in Prometheus" links open this Prometheus
                    f"--web.external-url=http://127.0.0.1:{prom_port}/",
                ],
                self.dir / "prometheus.log",
            )
        )
        await am.start()
        await prom.start()
        self.alertmanager_url = f"http://127.0.0.1:{am_port}"
        self.prometheus_url = f"http://127.0.0.1:{prom_port}"
        deadline = time.monotonic() + 60
        for child, url in ((am, self.alertmanager_url), (prom, self.prometheus_url)):
            if not await asyncio.to_thread(_wait_http, url + "/-/ready", deadline, child):
                raise RuntimeError(f"{child.name} did not start:\n{child.tail()}")
        self.prometheus_page = await asyncio.to_thread(prometheus_alerts_page, self.prometheus_url)

    # ------------------------------------------------------------------ view
    def urls(self) -> list[str]:
        lines = [f"agent        {self.agent_url}/metrics"]
        lines += [f"{name:<12} {url}/v1/completions" for name, url in self.worker_urls.items()]
        if self.prometheus_page:
            page, version = self.prometheus_page
            lines.append(f"prometheus   {page} (Prometheus {version})")
        if self.alertmanager_url:
            how = (
                "with the inhibitions of deploy/alertmanager/alertmanager.yml"
                if self.inhibitions
                else "without inhibitions (deploy/alertmanager/alertmanager.yml not found)"
            )
            lines.append(f"alertmanager {self.alertmanager_url} ({how})")
            lines.append(
                "grafana      not started by the demo: the alerts' dashboard links "
                f"({self.thresholds.pack.dashboard_base_url}...) need your Grafana with "
                "dashboards/ imported (docs/dashboards.md)"
            )
        lines.append(f"logs         {self.dir}")
        return lines

    def firing(self) -> list[str] | None:
        if not self.prometheus_url:
            return None
        text = _get(self.prometheus_url + "/api/v1/alerts")
        if text is None:
            return []
        alerts = json.loads(text)["data"]["alerts"]
        return sorted(
            {
                f"{a['labels']['alertname']}"
                + (f"{{{a['labels']['worker']}}}" if "worker" in a["labels"] else "")
                for a in alerts
                if a.get("state") == "firing"
            }
        )

    def scaler(self) -> list[tuple[str, str, str, str, str]] | None:
        if not self.prometheus_url:
            return None
        values: dict[str, dict[str, float]] = {}
        for key, expr in SCALER_QUERIES.items():
            text = _get(
                self.prometheus_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            )
            if text is None:
                continue
            values[key] = {
                r["metric"].get("model", ""): float(r["value"][1])
                for r in json.loads(text)["data"]["result"]
            }
        return scaler_rows(values)

    def answer(self, readings: dict[str, Reading], states: list[AlertState]) -> list[Any]:
        """advise's ranked answer for this view (demo.answer)."""
        from inferwatch.demo.answer import answer

        return answer(readings, self.thresholds, states)

    def snapshot(self) -> tuple[dict[str, Reading], list[AlertState]]:
        text = _get(self.agent_url + "/metrics") or ""
        at = time.monotonic()
        counters: dict[str, float] = {}
        readings = parse_agent_metrics(text, self.layout, preemptions=counters)
        for w, total in counters.items():
            rate = self._preemptions.setdefault(w, CounterRate(STATS_WINDOW))
            readings[w].preemption_rate = rate.update(at, total)
        return readings, self.states.update(conditions(readings, self.thresholds), at)

    def dead_child(self) -> Child | None:
        for child in self.children:
            if not child.alive() and not (
                child.expect_exit and child.proc and child.proc.returncode == 0
            ):
                return child
        return None

    async def stop(self) -> None:
        for child in reversed(self.children):
            await child.stop()


async def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=False)
    demo = Demo(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP: the terminal closed. The children run in sessions of their own and
    # would be left behind if the demo died of it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    code = 0
    try:
        await demo.start()
        console.print("[bold]inferwatch demo[/] (Ctrl-C to stop)")
        for line in demo.urls():
            console.print("  " + line)
        started = time.monotonic()
        live_view = console.is_terminal and not args.no_live
        header = f"scenario {args.scenario}; agent {demo.agent_url}"

        async def step() -> Any:
            readings, states = await asyncio.to_thread(demo.snapshot)
            recs = demo.answer(readings, states)
            firing = await asyncio.to_thread(demo.firing)
            scaler = await asyncio.to_thread(demo.scaler)
            return readings, states, firing, scaler, recs

        live = Live(console=console, refresh_per_second=2) if live_view else None
        with live if live is not None else contextlib.nullcontext():
            last_print = 0.0
            while not stop.is_set():
                if args.duration is not None and time.monotonic() - started >= args.duration:
                    break
                dead = demo.dead_child()
                if dead is not None:
                    console.print(f"[red]{dead.name} exited unexpectedly:[/]\n{dead.tail()}")
                    code = 1
                    break
                readings, states, firing, scaler, recs = await step()
                t = demo.thresholds
                if live is not None:
                    live.update(render(readings, states, firing, header, scaler, t, recs))
                elif time.monotonic() - last_print >= 5:
                    last_print = time.monotonic()
                    print(status_line(readings, states, t, recs), flush=True)
                    for model, workers, desired, runs, why in scaler or ():
                        print(
                            f"scaler {model}: {workers} -> {desired} workers, runs {runs} "
                            f"(cap {max_replicas()}), {why}",
                            flush=True,
                        )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
    except RuntimeError as exc:
        console.print(f"[red]demo failed to start:[/] {exc}")
        code = 1
    finally:
        await demo.stop()
    console.print("demo stopped")
    return code


def check_listen(listen: str) -> None:
    """Refuse a ``--listen`` address the agent could not listen on, before anything
    starts: a port in use is one line and exit 2, as the agent itself says it, never a
    demo whose view reads another program on that port."""
    host, port = parse_listen(listen, "--listen", "listen")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            # as the agent binds (asyncio's reuse_address): a port in TIME_WAIT is free
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        why = (
            "in use by another program (choose a free port with --listen)"
            if exc.errno == errno.EADDRINUSE
            else exc.strerror or str(exc)
        )
        raise UsageError(f"--listen {listen}: cannot listen: {why}") from None


def main(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration: expected a number of seconds greater than zero")
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise UsageError("--time-scale: expected a number greater than zero")
    check_listen(args.listen)
    return asyncio.run(run_demo(args))
