"""Issue 5, live: every panel query of the committed dashboards returns data.

The stack is the shipped one: ``dashboards/*.json`` and the recording and
alert rules of ``alerts/`` exactly as committed (default thresholds, 5m
window, rule groups every 15s), loaded by Prometheus through the shipped
``deploy/prometheus/prometheus.yml`` (only the scrape interval, targets and
rule path changed, ``tests/support/stack.py``). Two simulated workers, each on
its own fake GPU, watched by one agent:

- ``w-busy``: ``max_num_seqs`` 4 (given to the agent, as for any simulator)
  and ``--max-queued-requests 8`` under the overload scenario, so requests
  wait beyond capacity (InferenceQueueOverCapacity fires: the "Firing alerts"
  table has a row) and some are rejected (the rejection panels have data);
- ``w-steady``: the steady scenario (prefix-cache hits, no queue).

Each query is evaluated the way Grafana would run it, with the dashboard's
variables expanded twice: to their "All" values (what a dashboard shows when
opened) and to one worker of the running setup, resolved through the
variables' own ``label_values`` queries. A query returns data when some series
has a value that is not NaN.

- Range targets: two range queries, as Grafana runs them: over the
  dashboard's default time range (1h, or 7 days for the weekly trends) with
  Grafana's ``$__interval`` for it (5s; 10m for 7 days), and over the
  Prometheus's whole life (the dashboard set to "last N minutes", N its age,
  1 s steps). The 7-day query runs against a Prometheus a few minutes old and
  must show the minutes it has. ``end`` is "now", not aligned to the step as
  Grafana aligns it: an aligned 10m step can end before a young Prometheus
  has any sample.
- Instant targets (tables): an instant query at "now".

Queries declared in ``HARDWARE_OPTIONAL`` (GPM, XID, MIG) are run and
reported, not required.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support import pack_readback
from tests.support.e2e import Stack, WorkerSpec
from tests.support.proc import REPO, Process, wait_until
from tests.support.stack import ALERTS_DIR

from inferwatch.pack import dashboards as dash

pytestmark = pytest.mark.slow

DASHBOARD_DIR = REPO / "dashboards"
SCRAPE = 1.0  # seconds: the test Prometheus's scrape interval (Grafana's min interval)
BUSY, STEADY = "w-busy", "w-steady"
MODEL = "sim-7b"
BAND_PANEL = "Time in each utilization band"

#: Grafana's interval rounding (public/app/core/utils/kbn: roundInterval), in ms:
#: an interval below the bound becomes the value next to it.
_ROUND_MS = [
    (15, 10),
    (35, 20),
    (75, 50),
    (150, 100),
    (350, 200),
    (750, 500),
    (1500, 1000),
    (3500, 2000),
    (7500, 5000),
    (12500, 10000),
    (17500, 15000),
    (25000, 20000),
    (45000, 30000),
    (90000, 60000),
    (210000, 120000),
    (450000, 300000),
    (750000, 600000),
    (1050000, 900000),
    (1500000, 1200000),
    (2700000, 1800000),
    (5400000, 3600000),
    (9000000, 7200000),
    (16200000, 10800000),
    (32400000, 21600000),
    (86400000, 43200000),
    (604800000, 86400000),
]
#: data points Grafana asks for: about the width in pixels of a full-width panel
MAX_DATA_POINTS = 1000


def grafana_interval(range_s: float, min_interval_s: float = SCRAPE) -> float:
    """``$__interval`` in seconds for a time range, as Grafana computes it."""
    raw_ms = range_s * 1000 / MAX_DATA_POINTS
    rounded = next((v for bound, v in _ROUND_MS if raw_ms < bound), 604800000)
    return max(rounded / 1000, min_interval_s)


def prom_duration(seconds: float) -> str:
    s = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def grafana_globals(range_s: float) -> dict[str, str]:
    """Grafana's global variables for a dashboard showing the last ``range_s`` seconds."""
    interval = grafana_interval(range_s)
    rate_interval = max(interval + SCRAPE, 4 * SCRAPE)
    return {
        "__interval": prom_duration(interval),
        "__interval_ms": str(int(interval * 1000)),
        "__rate_interval": prom_duration(rate_interval),
        "__range": prom_duration(range_s),
        "__range_s": str(int(range_s)),
        "__range_ms": str(int(range_s * 1000)),
    }


def default_range(doc: Mapping[str, Any]) -> float:
    """Seconds in the dashboard's default time range (``now-1h`` ... ``now``)."""
    m = re.fullmatch(r"now-(\d+)([smhdw])", str(doc["time"]["from"]))
    assert m and doc["time"]["to"] == "now", doc["time"]
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def regex_value(value: str) -> str:
    """A single variable value as Grafana's Prometheus data source puts it into ``=~``."""
    return re.sub(r"([\\$^*{}\[\]'+?.()|])", r"\\\\\1", value)


def has_data(result: Any) -> bool:
    """Some series with a value that is not NaN (vector or matrix result)."""
    for series in result:
        values = series.get("values") or [series.get("value")]
        if any(v is not None and not math.isnan(float(v[1])) for v in values):
            return True
    return False


@dataclass
class Outcome:
    dashboard: str
    panel: str
    ref_id: str
    how: str
    query: str
    data: bool
    optional: str | None


# ---------------------------------------------------------------------- the stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("dashboards-live")
    st = Stack(
        tmp,
        [
            WorkerSpec(BUSY, max_num_seqs=4, model=MODEL, args=("--max-queued-requests", "8")),
            WorkerSpec(STEADY, max_num_seqs=20, model=MODEL),
        ],
        thresholds=None,  # the packaged defaults: the committed rules and dashboards
        rules_dir=ALERTS_DIR,
        scrape_interval=f"{SCRAPE:g}s",
        # the agent's warm-up gate on: the worker dashboard's Warm-up row has data
        warmup={"enabled": True},
    )
    loads: list[Process] = []
    try:
        loads.append(st.load("overload", [BUSY], 600, drain=0))
        loads.append(st.load("steady", [STEADY], 600, drain=0))
        prom = st.prom

        needed = dict(NEEDED)
        # The utilization-band shares resample at a fixed 1m resolution
        # (`[$__range:1m]`): on a Prometheus younger than its first whole minute
        # with data they are empty, in Grafana too. Wait for that minute (the
        # queue alert needs about as long).
        trends = load_dashboards()["inference-weekly-trends"]
        week = {**dash.dashboard_variables(trends), **grafana_globals(default_range(trends))}
        for q in pack_readback.query_targets(trends):
            if q.panel == BAND_PANEL:
                needed[f"{BAND_PANEL} {q.ref_id}"] = dash.expand_variables(q.expr, week)
        assert any(k.startswith(BAND_PANEL) for k in needed), f"no {BAND_PANEL!r} panel"

        def missing() -> list[str]:
            return [name for name, promql in needed.items() if not has_data(prom.query(promql))]

        def ready() -> list[str]:
            for load in loads:
                if not load.alive():
                    raise AssertionError(f"loadgen ended early:\n{load.log()[-2000:]}")
            return [] if missing() else ["ready"]

        try:
            # QueueOverCapacity needs 3 evaluations 15s apart after the queue passes 4,
            # ... and the long SLO group's first evaluation, within its 2m30s
            wait_until(ready, 200, interval=1.0, message="the conditions the dashboards need")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still missing: {missing()}\n{st.logs_tail()}") from None
        yield st
    finally:
        for load in loads:
            load.stop()
        st.stop()


#: what must exist before the panels are judged (name -> PromQL)
NEEDED = {
    "an Inference alert firing": 'ALERTS{alertstate="firing", alertname=~"Inference.*"}',
    "rejected requests": f'inferwatch_requests_rejected_total{{worker="{BUSY}"}} > 0',
    "max_num_seqs": f'inferwatch_max_num_seqs{{worker="{BUSY}"}}',
    "finished requests on both workers": (
        "count(sum by (worker) (inferwatch_e2e_latency_seconds_count) > 0) == 2"
    ),
    "recording rules evaluated": "worker:inferwatch_e2e_latency_seconds:p99_5m",
    "GPU state rule": "gpu:inferwatch_gpu_state:code",
    "prefix-cache hits": "inferwatch_prefix_cache_hit_ratio > 0",
    # the SLO windows of a day or more: a group of their own, every 2m30s (pack.rules.slo)
    "the long SLO windows evaluated": "model:inferwatch_slo_burn_rate:ratio_rate3d",
}


def load_dashboards() -> dict[str, dict[str, Any]]:
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}
    assert set(docs) == set(dash.DASHBOARDS), f"dashboards/ holds {sorted(docs)}"
    return docs


# ---------------------------------------------------------------------- variables

_LABEL_VALUES = re.compile(r"label_values\((?:(.*),\s*)?(\w+)\)")


def variable_values(
    stack: Stack, doc: Mapping[str, Any], chosen: Mapping[str, str]
) -> dict[str, list[str]]:
    """Each query variable's options, resolved in order through Prometheus's series API.

    A variable's query refers to the variables before it; those are expanded
    to the value ``chosen`` for them (regex-escaped, as Grafana does).
    """
    resolved: dict[str, list[str]] = {}
    values: dict[str, str] = {"datasource": "prometheus"}
    for var in doc["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = _LABEL_VALUES.fullmatch(str(var["query"]).strip())
        assert m, f"{doc['uid']}: variable {var['name']}: not a label_values query: {var['query']}"
        selector, label = m.group(1), m.group(2)
        data = stack.prom.api(
            "series", **{"match[]": dash.expand_variables(selector, values)}, start=stack.started_at
        )
        resolved[var["name"]] = sorted({s[label] for s in data if label in s})
        # a variable the setup leaves at All (cluster, node, namespace, pod here) takes
        # its All value, as in Grafana
        name = var["name"]
        values[name] = regex_value(chosen[name]) if name in chosen else str(var["allValue"])
    return resolved


#: variables over labels this (non-Kubernetes, single-cluster) stack does not have
OPTIONAL = {"cluster", "node", "namespace", "pod"}


def setup_values(stack: Stack) -> dict[str, str]:
    """The running setup, as a user would pick it: the busy worker and its GPU."""
    return {
        "job": "inferwatch",
        "instance": stack.agent_target,
        "model": MODEL,
        "worker": BUSY,
        "gpu": stack.workers[BUSY].gpu,
    }


def test_variables_list_the_running_setup(stack: Stack) -> None:
    setup = setup_values(stack)
    for name, doc in load_dashboards().items():
        options = variable_values(stack, doc, setup)
        assert set(options) == {"job", "instance", "model", "worker", "gpu"} | OPTIONAL, name
        # no Kubernetes, one cluster: those labels are absent, their variables empty (All)
        assert all(options[o] == [] for o in OPTIONAL), name
        assert options["job"] == ["inferwatch"], name
        assert options["instance"] == [stack.agent_target], name
        assert options["model"] == [MODEL], name
        assert options["worker"] == sorted([BUSY, STEADY]), name
        assert options["gpu"] == sorted(w.gpu for w in stack.workers.values()), name


# ---------------------------------------------------------------------- panel queries


def evaluate(
    stack: Stack, doc: Mapping[str, Any], q: pack_readback.PanelQuery, variables: Mapping[str, str]
) -> list[Outcome]:
    """One target, run as Grafana would (see the module doc): one Outcome per evaluation."""
    prom = stack.prom
    now = time.time()
    age = now - stack.started_at
    lifetime = grafana_globals(age)
    default = grafana_globals(default_range(doc))
    runs: list[tuple[str, str, Any]] = []
    if q.instant:
        expr = dash.expand_variables(q.expr, {**variables, **default})
        runs.append(("instant", expr, prom.query(expr, now)))
    else:
        for globs in (default, lifetime):
            expr = dash.expand_variables(q.expr, {**variables, **globs})
            span = float(globs["__range_s"])
            step = float(globs["__interval_ms"]) / 1000
            data = prom.api("query_range", query=expr, start=now - span, end=now, step=step)
            runs.append((f"range {globs['__range']} step {step:g}s", expr, data["result"]))
    return [
        Outcome(doc["uid"], q.panel, q.ref_id, how, e, has_data(result), q.optional)
        for how, e, result in runs
    ]


def check_all(stack: Stack, variables: Mapping[str, Mapping[str, str]], label: str) -> None:
    """Every target of every dashboard; ``variables`` maps dashboard name -> values."""
    outcomes: list[Outcome] = []
    retried: list[str] = []
    for name, doc in load_dashboards().items():
        for q in pack_readback.query_targets(doc):
            results = evaluate(stack, doc, q, variables[name])
            if not q.optional and not all(r.data for r in results):
                # right at a scrape or rule-evaluation boundary: give it a few more scrapes
                retried.append(f"{name} / {q.panel} {q.ref_id}")

                def again(
                    doc: Mapping[str, Any] = doc, q: pack_readback.PanelQuery = q, name: str = name
                ) -> list[Outcome] | None:
                    r = evaluate(stack, doc, q, variables[name])
                    return r if all(o.data for o in r) else None

                try:
                    results = wait_until(again, 15, interval=1.0, message=f"{name} / {q.panel}")
                except AssertionError:
                    results = evaluate(stack, doc, q, variables[name])
            outcomes += results
    required = [o for o in outcomes if not o.optional]
    empty = [o for o in required if not o.data]
    print(
        f"\n{label}: {len(required) - len(empty)}/{len(required)} evaluations of required "
        f"queries returned data (retried: {retried or 'none'})"
    )
    optional = [o for o in outcomes if o.optional]
    optional_empty = sorted(
        {f"{o.dashboard} / {o.panel} {o.ref_id}" for o in optional if not o.data}
    )
    print(
        f"  optional (HARDWARE_OPTIONAL, not required): {sum(o.data for o in optional)} "
        f"evaluations with data, {len(optional) - sum(o.data for o in optional)} empty: "
        f"{', '.join(optional_empty) or 'none'}"
    )
    assert not empty, f"panel queries without data ({label}):\n" + "\n".join(
        f"  {o.dashboard} / {o.panel} {o.ref_id} [{o.how}]: {o.query}" for o in empty
    )
    assert len({(o.dashboard, o.panel, o.ref_id) for o in required}) >= 100, "too few queries"


def test_every_panel_query_returns_data_with_all_selected(stack: Stack) -> None:
    docs = load_dashboards()
    check_all(stack, {n: dash.dashboard_variables(d) for n, d in docs.items()}, "All selected")


def test_every_panel_query_returns_data_for_one_worker(stack: Stack) -> None:
    """The busy worker and its GPU picked in the variables, values escaped as Grafana does."""
    setup = {k: regex_value(v) for k, v in setup_values(stack).items()}
    docs = load_dashboards()
    check_all(
        stack,
        {n: {**dash.dashboard_variables(d), **setup} for n, d in docs.items()},
        f"worker {BUSY}, GPU {stack.workers[BUSY].gpu}",
    )


def row_panels(doc: Mapping[str, Any], row_title: str) -> list[str]:
    """Titles of the panels under a row (an expanded row: the panels that follow it)."""
    titles: list[str] = []
    inside = False
    for panel in doc["panels"]:
        if panel["type"] == "row":
            inside = panel["title"] == row_title
            titles += [p["title"] for p in panel.get("panels") or []] if inside else []
        elif inside:
            titles.append(panel["title"])
    return titles


def test_warmup_row_returns_data_with_the_gate_on(stack: Stack) -> None:
    """Declared optional (the gate may be off); this stack turns the gate on, so require it."""
    doc = load_dashboards()["inference-worker"]
    titles = row_panels(doc, "Warm-up")
    assert len(titles) >= 5, titles
    variables = dash.dashboard_variables(doc)
    outcomes = [
        o
        for q in pack_readback.query_targets(doc)
        if q.panel in titles
        for o in evaluate(stack, doc, q, variables)
    ]
    assert len(outcomes) >= 2 * len(titles)
    empty = [f"{o.panel} {o.ref_id} [{o.how}]: {o.query}" for o in outcomes if not o.data]
    assert not empty, "Warm-up panels without data:\n" + "\n".join(empty)


#: optional panels (HARDWARE_OPTIONAL: other engines and boards lack them) whose series this
#: stack has: the simulated vLLM exports the per-request phase histograms (vLLM 0.33.0's
#: loggers.py, shared/reference/vllm-metrics.md) and the fake GPU a fan (gpustate defaults)
SERVED_HERE = {
    ("inference-worker", "Prefill, decode and queue time P50 / P95"),
    ("inference-gpu", "Fan speed"),
}


def test_optional_signals_this_stack_serves_return_data(stack: Stack) -> None:
    docs = load_dashboards()
    outcomes = []
    for name, title in sorted(SERVED_HERE):
        doc = docs[name]
        variables = dash.dashboard_variables(doc)
        queries = [q for q in pack_readback.query_targets(doc) if q.panel == title]
        assert queries and any(q.optional for q in queries), title
        outcomes += [o for q in queries for o in evaluate(stack, doc, q, variables)]
    empty = [f"{o.panel} {o.ref_id} [{o.how}]: {o.query}" for o in outcomes if not o.data]
    assert not empty, "optional panels this stack serves, without data:\n" + "\n".join(empty)
