"""Replayed agents: a captured ``inferwatch run`` exposition served for many hosts.

The fleet test and the scale benchmark need many agents whose output is the
real agent's, without running one agent, one simulated worker and one fake
GPU per host on a 2-core machine. ``tests/data/agent-capture-vllm.prom`` is
the ``/metrics`` of a real agent (``inferwatch run --gpu-backend fake`` over
one ``inferwatch simulate`` vLLM worker under ``loadgen --scenario steady``,
see its header); this module replays it:

- each host has G GPUs and G workers, worker ``vllm-i`` on GPU ``i`` (one
  GPU per worker, tensor parallelism 1): series with a ``gpu`` label are
  repeated per GPU (``uuid`` derived from the host and the index, ``worker``
  set to that GPU's worker where the series has one), series with only a
  ``worker`` label per worker, the rest (agent health, python/process) once;
- ``inferwatch_worker_gpu_info{worker, gpu, uuid}`` (METRICS.md) is added, one
  per pair: the capture predates the agent emitting it;
- counters and histogram samples grow by one common factor that rises
  linearly with time, so rates are steady and every histogram keeps the
  captured shape (its quantiles are the capture's, buckets stay monotonic);
- gauges keep their captured values unless the test sets one
  (:meth:`ReplayHost.set`), timestamps are moved to the replay's clock;
- ``histograms=False`` leaves out the histogram families the agent passes
  through from the engines (what the agent would serve if Prometheus scraped
  the engines' own histograms instead).

Every host is served by one threaded HTTP server at ``/hosts/<name>/metrics``:
Prometheus scrapes one target per host with ``__metrics_path__`` set, and an
``instance`` label naming the host (:func:`scrape_targets`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.stubworker import QuietHandler, ThreadedServer

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "agent-capture-vllm.prom"

#: how old the captured counters are taken to be: rate = captured value / AGE
AGE_SECONDS = 600.0

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_TIME_SUFFIXES = ("_timestamp_seconds", "_start_time_seconds")

WORKER_GPU_INFO = (
    "# HELP inferwatch_worker_gpu_info A GPU a worker runs on; always 1.\n"
    "# TYPE inferwatch_worker_gpu_info gauge\n"
)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    cumulative: bool  # a counter or a histogram sample: grows with time
    family: str


@dataclass
class Capture:
    """The captured exposition: families in order, each with its header and samples."""

    headers: dict[str, str]
    samples: dict[str, list[Sample]]
    captured_at: float
    histogram_families: frozenset[str]

    @property
    def families(self) -> list[str]:
        return list(self.headers)


def load_capture(path: Path = CAPTURE) -> Capture:
    headers: dict[str, str] = {}
    samples: dict[str, list[Sample]] = {}
    types: dict[str, str] = {}
    family = ""
    for line in path.read_text().splitlines():
        if not line or line.startswith("# captured"):
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            name = line.split()[2]
            if name != family:
                family = name
                headers[family] = ""
                samples[family] = []
            headers[family] += line + "\n"
            if line.startswith("# TYPE "):
                types[family] = line.split()[3]
            continue
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"{path}: not a sample line: {line!r}")
        name, label_text, value = match.groups()
        labels = tuple(_LABEL.findall(label_text or ""))
        kind = types.get(family, "untyped")
        samples[family].append(
            Sample(name, labels, float(value), kind in ("counter", "histogram"), family)
        )
    stamps = [
        s.value
        for group in samples.values()
        for s in group
        if s.name == "inferwatch_last_collect_timestamp_seconds"
    ]
    histos = frozenset(
        f for f, kind in types.items() if kind == "histogram" and f.startswith("inferwatch_")
    )
    return Capture(headers, samples, max(stamps) if stamps else time.time(), histos)


def _fmt(value: float) -> str:
    return repr(float(value))


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in pairs)
    return "{" + text + "}" if text else ""


@dataclass
class ReplayHost:
    """One replayed agent: G GPUs, G workers."""

    name: str
    gpus: int
    capture: Capture
    histograms: bool = True
    host_index: int = 0
    #: the target's ``instance`` label (default ``<name>:10127``)
    instance: str = ""
    #: (metric name, worker name or gpu index) -> value, replacing a captured gauge
    overrides: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.instance = self.instance or f"{self.name}:10127"
        self._lock = threading.Lock()
        self._compile()

    def worker(self, i: int) -> str:
        return f"vllm-{i}"

    def uuid(self, i: int) -> str:
        return f"GPU-{self.host_index:08x}-0000-4000-8000-{i:012x}"

    def set(self, metric: str, entity: str, value: float) -> None:
        """Replace a gauge of one worker (``vllm-0``) or one GPU (``0``) from now on."""
        with self._lock:
            self.overrides[(metric, entity)] = value

    def _compile(self) -> None:
        # (prefix text, value, cumulative, metric, entity, is time) per output line
        lines: list[tuple[str, float, bool, str, str, bool]] = []
        header_after: dict[int, str] = {}
        for family in self.capture.families:
            if not self.histograms and family in self.capture.histogram_families:
                continue
            header_after[len(lines)] = (
                header_after.get(len(lines), "") + (self.capture.headers[family])
            )
            for s in self.capture.samples[family]:
                keys = dict(s.labels)
                is_time = s.name.endswith(_TIME_SUFFIXES) and s.value > 1e9
                if "gpu" in keys:
                    for i in range(self.gpus):
                        pairs = [
                            (k, str(i) if k == "gpu" else self._relabel(k, v, i))
                            for k, v in s.labels
                        ]
                        lines.append(
                            (
                                s.name + _labels(pairs) + " ",
                                s.value,
                                s.cumulative,
                                s.name,
                                str(i),
                                is_time,
                            )
                        )
                elif "worker" in keys:
                    for i in range(self.gpus):
                        pairs = [(k, self._relabel(k, v, i)) for k, v in s.labels]
                        lines.append(
                            (
                                s.name + _labels(pairs) + " ",
                                s.value,
                                s.cumulative,
                                s.name,
                                self.worker(i),
                                is_time,
                            )
                        )
                else:
                    lines.append(
                        (
                            s.name + _labels(s.labels) + " ",
                            s.value,
                            s.cumulative,
                            s.name,
                            "",
                            is_time,
                        )
                    )
        header_after[len(lines)] = header_after.get(len(lines), "") + WORKER_GPU_INFO
        for i in range(self.gpus):
            pairs = (("gpu", str(i)), ("uuid", self.uuid(i)), ("worker", self.worker(i)))
            lines.append(
                (
                    "inferwatch_worker_gpu_info" + _labels(pairs) + " ",
                    1.0,
                    False,
                    "inferwatch_worker_gpu_info",
                    str(i),
                    False,
                )
            )
        self._lines = lines
        self._headers = header_after

    def _relabel(self, key: str, value: str, i: int) -> str:
        if key == "uuid":
            return self.uuid(i)
        if key == "worker":
            return self.worker(i)
        return value

    def render(self, now: float, started: float) -> str:
        growth = 1.0 + max(0.0, now - started) / AGE_SECONDS
        shift = now - self.capture.captured_at
        with self._lock:
            overrides = dict(self.overrides)
        out: list[str] = []
        headers = self._headers
        for n, (prefix, value, cumulative, metric, entity, is_time) in enumerate(self._lines):
            header = headers.get(n)
            if header:
                out.append(header)
            if is_time:
                value = value + shift
            elif cumulative:
                value = value * growth
            elif overrides:
                value = overrides.get((metric, entity), value)
            out.append(prefix + _fmt(value) + "\n")
        tail = headers.get(len(self._lines))
        if tail:
            out.append(tail)
        return "".join(out)

    def series(self) -> int:
        """Series this host exposes (sample lines)."""
        return len(self._lines)


class ReplayServer(ThreadedServer):
    """Serves every host's exposition at ``/hosts/<name>/metrics``, in a thread."""

    def __init__(self, hosts: Iterable[ReplayHost]) -> None:
        self.hosts = {h.name: h for h in hosts}
        self.started = time.time()
        self.scrapes = 0
        server = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                host = server.hosts.get(parts[1]) if len(parts) == 3 else None
                if host is None or parts[0] != "hosts" or parts[2] != "metrics":
                    self.send_error(404)
                    return
                server.scrapes += 1
                data = host.render(time.time(), server.started).encode()
                self.reply(200, data, "text/plain; version=0.0.4; charset=utf-8")

        self.serve(Handler)
        self.address = f"127.0.0.1:{self.port}"


def scrape_targets(
    server: ReplayServer, names: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """``static_configs`` entries: one target per host, labelled with the host's ``instance``."""
    return [
        {
            "targets": [server.address],
            "labels": {
                "__metrics_path__": f"/hosts/{name}/metrics",
                "instance": server.hosts[name].instance,
            },
        }
        for name in (names if names is not None else server.hosts)
    ]


def make_hosts(
    gpus: int, per_host: int = 8, *, histograms: bool = True, prefix: str = "gpu-node"
) -> list[ReplayHost]:
    """``gpus`` GPUs (and as many workers) on hosts of ``per_host`` GPUs, the last one partial."""
    capture = load_capture()
    hosts = []
    left = gpus
    index = 0
    while left > 0:
        count = min(per_host, left)
        hosts.append(
            ReplayHost(f"{prefix}-{index}", count, capture, histograms=histograms, host_index=index)
        )
        left -= count
        index += 1
    return hosts
