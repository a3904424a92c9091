"""A ninth engine planted in a copy of the package: its table and its simulator module only.

``planted_tree(root)`` copies ``agent/inferwatch`` under ``root`` and adds the two
files an engine is made of, ``engines/ninth.py`` (:data:`ENGINE_MODULE`) and
``sim/expo/ninth.py`` (:data:`WRITER_MODULE`); nothing else in the copy is
touched. A program started with :func:`env` imports the copy, so whatever it
finds of the engine there was derived from those two files
(``tests/unit/test_engines_planted.py``, ``tests/live/test_engines_planted_live.py``).

The engine is invented: prefix ``ninth:``, metrics on ``/ninth/metrics``, a launcher
``ninth-server up`` (or ``python -m ninth.server up``), pods by the image
``example.org/ninth`` on port 9999, and TTFT buckets with bounds no other engine
has (3.5 s, 35 s), so that the warm-up bounds and the SLO check can only know
them from its table.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.proc import REPO

NAME = "ninth"
#: TTFT bounds of the planted engine: 3.5 and 35 are no other engine's
TTFT_BUCKETS = (0.05, 0.5, 3.5, 35.0)
TPOT_BUCKETS = (0.02, 0.2, 2.0)
METRICS_PATH = "/ninth/metrics"
POD_PORT = 9999

ENGINE_MODULE = f'''"""A planted engine (tests/support/planted.py): the whole of its table."""

from __future__ import annotations

from inferwatch.engines import contract
from inferwatch.engines.base import (
    EngineFlags,
    EngineMap,
    Flag,
    Launcher,
    PodFacts,
    SelfDescribed,
    counter,
    gauge,
    histogram,
)

TTFT_BUCKETS = {TTFT_BUCKETS!r}
TPOT_BUCKETS = {TPOT_BUCKETS!r}

ENGINE = EngineMap(
    name="{NAME}",
    prefixes=("ninth:",),
    model_label="model",
    metrics_path="{METRICS_PATH}",
    signals=(
        gauge(contract.QUEUE_DEPTH.name, "ninth:waiting"),
        gauge(contract.REQUESTS_RUNNING.name, "ninth:running"),
        counter(contract.REQUESTS_FINISHED.base, "ninth:finished", labels={{"why": "reason"}}),
        histogram(contract.TTFT_SECONDS.name, "ninth:ttft_seconds"),
        histogram(contract.TPOT_SECONDS.name, "ninth:tpot_seconds"),
    ),
    flags=EngineFlags(
        (
            Flag(("--listen-port",), "port", "int"),
            Flag(("--slots",), "max_num_seqs", "int"),
            Flag(("--weights",), "model"),
            Flag(("--cache",), "prefix_caching", "true"),
        ),
        launchers=(Launcher("ninth-server", ("up",), modules=("ninth.server",)),),
    ),
    pods=PodFacts(("example.org/ninth",), ("ninth-server up",), {POD_PORT}),
    # "release" first; the simulator, which states vLLM's /version, answers "version"
    self_description=SelfDescribed(
        "/version", version=("release", "version"), model=("served",), max_num_seqs=("slots",)
    ),
    ttft_buckets=TTFT_BUCKETS,
    tpot_buckets=TPOT_BUCKETS,
    own_histograms=True,
)
'''

WRITER_MODULE = f'''"""The planted engine's /metrics (tests/support/planted.py)."""

from __future__ import annotations

from collections.abc import Sequence

from inferwatch.engines.{NAME} import TPOT_BUCKETS, TTFT_BUCKETS
from inferwatch.sim.config import SimConfig
from inferwatch.sim.expo import Exposition
from inferwatch.sim.expo.common import RegistryWriter, observe_latencies
from inferwatch.sim.stats import EngineSnapshot, StepStats

FORMATS = ("v1",)


class NinthWriter(RegistryWriter):
    metrics_path = "{METRICS_PATH}"
    prefix = "ninth:"
    labels = ("model",)

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        self.lv = (cfg.model,)
        self.waiting = self.gauge("waiting", "Requests waiting.")
        self.running = self.gauge("running", "Requests running.")
        self.finished = self.counter("finished", "Requests finished.", ("model", "why"))
        self.ttft = self.histogram("ttft_seconds", "Time to first token.", TTFT_BUCKETS)
        self.tpot = self.histogram("tpot_seconds", "Time per output token.", TPOT_BUCKETS)

    def on_step(self, engine: int, stats: StepStats) -> None:
        observe_latencies(stats, self.lv, self.ttft, self.tpot)
        for req in stats.finished:
            self.finished.labels(self.cfg.model, req.finish_reason).inc()

    def render(self, states: Sequence[EngineSnapshot], accept: str = "") -> Exposition:
        self.waiting.labels(*self.lv).set(sum(s.waiting for s in states))
        self.running.labels(*self.lv).set(sum(s.running for s in states))
        return self.text(self.registry)


def create(cfg: SimConfig) -> NinthWriter:
    return NinthWriter(cfg)
'''


def planted_tree(root: Path) -> Path:
    """A copy of the package under ``root`` with the planted engine's two files; the
    source root to put on PYTHONPATH (``root/agent``)."""
    source = REPO / "agent" / "inferwatch"
    target = root / "agent" / "inferwatch"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (target / "engines" / f"{NAME}.py").write_text(ENGINE_MODULE, encoding="utf-8")
    (target / "sim" / "expo" / f"{NAME}.py").write_text(WRITER_MODULE, encoding="utf-8")
    return root / "agent"


def env(source_root: Path) -> dict[str, str]:
    """The environment of a program that imports the planted copy (and no other)."""
    return {"PYTHONPATH": str(source_root), "PYTHONDONTWRITEBYTECODE": "1"}
