"""Issue 21: the fleet path on a real distributed store (Debian's VictoriaMetrics 1.79).

Two clusters, ``east`` and ``west``, each with its own real Prometheus
(external label ``cluster``) scraping replayed agents
(``tests/support/replay.py``: a real agent's capture served per host) and
remote-writing to one single-node VictoriaMetrics. The clusters are built to
collide: both have a host ``gpu-node-0:10127`` running workers ``vllm-0``...,
as two Kubernetes clusters with the same node and pod names would. Only the
``cluster`` label tells their series apart.

The Prometheus servers load no rules (evaluated there too and remote-written,
every recorded series would reach the store twice). One ``vmalert`` evaluates
the generated recording and alerting rules against the whole store and
notifies one real Alertmanager (the shipped configuration, timers shortened).
The rules are the committed ``alerts/inferwatch-rules.yaml`` and
``alerts/inferwatch-alerts.yaml``, unchanged: ``cluster`` leads every label
list of the generator (``inferwatch.pack.names``), so the clusters' same-named
workers stay apart.

Proven here:
- vmalert evaluates every rule, recording and alerting, without error;
- an overload on ``east``'s ``vllm-0`` fires InferenceQueueOverCapacity once,
  labelled ``cluster="east"``, and nothing for ``west``'s ``vllm-0``;
- recorded series exist once per cluster and entity (no double counting: the
  per-worker rates sum to the raw rate over the store), the cluster-level rules
  give each cluster's own figures, and the same expressions over the whole store
  aggregate across clusters with every GPU counted once;
- every dashboard query runs on the store (MetricsQL accepts it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from tests.support import pack_readback
from tests.support.fleet import (
    GPUS,
    OVERLOADED,
    QUEUE,
    cluster_hosts,
    clusters,
    overload,
    wait_overload_paged,
)
from tests.support.proc import REPO, Alertmanager, Prometheus, http_get, running, wait_until
from tests.support.replay import ReplayHost, load_capture
from tests.support.vm import VictoriaMetrics, VMAlert
from tests.support.webhook import WebhookReceiver, parse_time

from inferwatch.pack import dashboards as dash
from inferwatch.pack.names import names
from inferwatch.pack.thresholds import load_thresholds

pytestmark = pytest.mark.slow

RULE_FILES = [REPO / "alerts" / "inferwatch-rules.yaml", REPO / "alerts" / "inferwatch-alerts.yaml"]
SCRAPE = "2s"
#: GPU utilization set on the replayed GPUs: (cluster, gpu index) -> ratio
UTILIZATION = {("east", 0): 0.9, ("east", 1): 0.5, ("west", 0): 0.1}
VRAM = {("east", 0): 0.55, ("east", 1): 0.6, ("west", 0): 0.8}


@dataclass
class Fleet:
    vm: VictoriaMetrics
    proms: dict[str, Prometheus]
    vmalerts: dict[str, VMAlert]
    alertmanager: Alertmanager
    hook: WebhookReceiver
    hosts: dict[str, ReplayHost]
    started: float


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet")
    hosts = cluster_hosts(load_capture())
    for (cluster, i), ratio in UTILIZATION.items():
        hosts[cluster].set("inferwatch_gpu_utilization_ratio", str(i), ratio)
        hosts[cluster].set("inferwatch_gpu_memory_used_ratio", str(i), VRAM[(cluster, i)])
    overload(hosts)
    with clusters(tmp, hosts, scrape_interval=SCRAPE, evaluation_interval=SCRAPE) as c:
        vmalert = VMAlert(
            tmp,
            datasource_url=c.vm.url,
            remote_write_url=c.vm.url,
            rule_files=RULE_FILES,
            notifier_url=c.alertmanager.url,
        )
        with running(vmalert):
            fleet = Fleet(
                c.vm, c.proms, {"fleet": vmalert}, c.alertmanager, c.hook, hosts, time.time()
            )
            wait_until(
                lambda: all(p.targets_up() for p in c.proms.values()), 60, message="targets up"
            )
            wait_until(
                lambda: (
                    len(c.vm.query('count by (cluster) (inferwatch_gpu_up{job="inferwatch"})')) == 2
                ),
                60,
                message="both clusters' samples in the store",
            )
            yield fleet


def values(fleet: Fleet, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for item in fleet.vm.query(expr):
        labels = {k: v for k, v in item["metric"].items() if k != "__name__"}
        out[tuple(sorted(labels.items()))] = float(item["value"][1])
    return out


def test_vmalert_evaluates_every_rule_without_error(fleet: Fleet) -> None:
    expected = sum(
        len(g["rules"]) for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]
    )
    # data from both clusters has reached the recording rules: from now on an
    # evaluation sees every series the rules join
    wait_recorded(fleet, "worker:inferwatch_requests_finished:rate5m", sum(GPUS.values()))
    since = time.time()

    def evaluated() -> list[dict[str, Any]] | None:
        rules = fleet.vmalerts["fleet"].rules()
        done = [r for r in rules if parse_time(r["lastEvaluation"]) > since]
        return rules if len(done) == expected else None

    # the SLO windows of a day or more are evaluated every 2m30s (pack.rules.slo.LONG_GROUP)
    rules = wait_until(evaluated, 200, interval=1.0, message="every rule evaluated again")
    failing = sorted({f"{r['name']}: {r['lastError']}" for r in rules if r.get("lastError")})
    assert not failing, "rules vmalert 1.79 cannot evaluate:\n" + "\n".join(failing)
    assert {r["health"] for r in rules} == {"ok"}


def test_overload_fires_once_labelled_with_its_cluster(fleet: Fleet) -> None:
    cluster, worker = OVERLOADED
    event = wait_overload_paged(fleet.hook)
    assert event.labels["instance"] == "gpu-node-0:10127"

    def active() -> list[dict[str, Any]]:
        status, body, _ = http_get(
            f"{fleet.alertmanager.url}/api/v2/alerts?filter=alertname%3D%22"
            "InferenceQueueOverCapacity%22",
            timeout=5,
        )
        assert status == 200
        return list(json.loads(body))

    # one alert in Alertmanager: west's vllm-0 (same instance and worker name)
    # is not overloaded and must not be merged with east's
    alerts = active()
    assert [a["labels"]["cluster"] for a in alerts] == [cluster], alerts
    assert {a["labels"]["worker"] for a in alerts} == {worker}
    firing = [
        a
        for v in fleet.vmalerts.values()
        for a in v.alerts()
        if a["name"] == "InferenceQueueOverCapacity"
    ]
    assert [a["labels"]["cluster"] for a in firing] == [cluster]
    assert float(firing[0]["value"]) == QUEUE
    events = fleet.hook.events("InferenceQueueOverCapacity", "firing")
    assert {e.fingerprint for e in events} == {event.fingerprint}


def wait_recorded(
    fleet: Fleet, record: str, count: int
) -> dict[tuple[tuple[str, str], ...], float]:
    def ready() -> dict[tuple[tuple[str, str], ...], float] | None:
        got = values(fleet, record)
        return got if len(got) == count else None

    return wait_until(ready, 90, interval=1.0, message=f"{count} series of {record}")


def test_recorded_series_once_per_cluster_without_double_counting(fleet: Fleet) -> None:
    workers = sum(GPUS.values())
    rates = wait_recorded(fleet, "worker:inferwatch_requests_finished:rate5m", workers)
    assert sorted(dict(k)["cluster"] for k in rates) == ["east", "east", "west"]
    assert {dict(k)["instance"] for k in rates} == {"gpu-node-0:10127"}
    # the recorded per-worker rates add up to the raw rate over the store: each
    # worker counted once, although both clusters name it gpu-node-0/vllm-0
    recorded = sum(rates.values())
    raw = values(fleet, 'sum(rate(inferwatch_requests_finished_total{job="inferwatch"}[5m]))')
    assert recorded > 0
    assert math.isclose(recorded, next(iter(raw.values())), rel_tol=0.05)

    # per-GPU rules: one series per GPU of each cluster, with that GPU's value
    util = wait_recorded(fleet, "gpu:inferwatch_gpu_utilization_ratio:avg5m", workers)
    for key, value in util.items():
        labels = dict(key)
        assert math.isclose(value, UTILIZATION[(labels["cluster"], int(labels["gpu"]))])


def test_cluster_rules_per_cluster_and_across_the_fleet(fleet: Fleet) -> None:
    util = wait_recorded(fleet, "cluster:inferwatch_gpu_utilization_ratio:avg", 2)
    by_cluster = {dict(k)["cluster"]: v for k, v in util.items()}
    assert math.isclose(by_cluster["east"], (0.9 + 0.5) / 2)
    assert math.isclose(by_cluster["west"], 0.1)
    vram = wait_recorded(fleet, "cluster:inferwatch_gpu_memory_used_ratio:max", 2)
    assert {dict(k)["cluster"]: v for k, v in vram.items()} == {"east": 0.6, "west": 0.8}
    # the cluster rules keep each cluster apart (one series per cluster, above); a
    # fleet-wide figure aggregates the recorded per-GPU series over the store:
    # every GPU once, 3 GPUs, not the mean of 2 means
    gpu_util = names(load_thresholds()).gpu_util
    fleet_util = values(fleet, f"avg({gpu_util})")
    assert len(fleet_util) == 1
    assert math.isclose(next(iter(fleet_util.values())), (0.9 + 0.5 + 0.1) / 3)
    fleet_vram = values(fleet, "max(cluster:inferwatch_gpu_memory_used_ratio:max)")
    assert list(fleet_vram.values()) == [0.8]
    count = values(fleet, 'count(inferwatch_gpu_up{job="inferwatch"})')
    assert list(count.values()) == [3.0]


def test_every_dashboard_query_runs_on_the_store(fleet: Fleet) -> None:
    wait_recorded(fleet, "worker:inferwatch_requests_finished:rate5m", sum(GPUS.values()))
    errors: list[str] = []
    total = with_data = 0
    now = time.time()
    for path in sorted((REPO / "dashboards").glob("*.json")):
        doc = json.loads(path.read_text())
        variables = dash.dashboard_variables(doc)
        for q in pack_readback.query_targets(doc):
            expr = dash.expand_variables(q.expr, variables)
            total += 1
            endpoint = "query" if q.instant else "query_range"
            params = (
                {"query": expr, "time": f"{now:.3f}"}
                if q.instant
                else {"query": expr, "start": f"{now - 600:.3f}", "end": f"{now:.3f}", "step": "15"}
            )
            try:
                result = fleet.vm.api(endpoint, **params)["result"]
            except AssertionError as err:
                errors.append(f"{path.stem} / {q.panel} {q.ref_id}: {err}")
                continue
            with_data += bool(result)
    print(f"\n{total} dashboard queries on VictoriaMetrics, {with_data} with data")
    assert total >= 100
    assert not errors, "dashboard queries the store refuses:\n" + "\n".join(errors)
    assert with_data >= total // 2
