"""Issue 21: the fleet layout that works with the committed rules as they are (docs/fleet.md).

Each cluster's Prometheus evaluates the committed ``alerts/*.yaml`` itself
(``rule_files`` as shipped) and remote-writes raw and recorded series to one
VictoriaMetrics. Prometheus adds its external labels to what it remote-writes
and to the alerts it sends, so every recorded series and alert carries its
cluster although the rules know nothing of clusters. The two clusters collide
on host and worker names as in ``test_fleet_victoriametrics.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.support.e2e import render_alertmanager_config
from tests.support.proc import Alertmanager, Prometheus, http_get, wait_until
from tests.support.replay import ReplayHost, ReplayServer, load_capture, scrape_targets
from tests.support.stack import ALERTS_DIR, render_prometheus_config
from tests.support.vm import VictoriaMetrics
from tests.support.webhook import WebhookReceiver

pytestmark = pytest.mark.slow

GPUS = {"east": 2, "west": 1}
OVERLOADED = ("east", "vllm-0")


@dataclass
class Fleet:
    vm: VictoriaMetrics
    alertmanager: Alertmanager
    hook: WebhookReceiver
    proms: dict[str, Prometheus]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet-local")
    capture = load_capture()
    hosts = {
        cluster: ReplayHost(
            f"{cluster}-gpu-node-0", n, capture, host_index=i, instance="gpu-node-0:10127"
        )
        for i, (cluster, n) in enumerate(GPUS.items())
    }
    hosts[OVERLOADED[0]].set("inferwatch_queue_depth", OVERLOADED[1], 40.0)
    server = ReplayServer(hosts.values())
    hook = WebhookReceiver()
    vm = VictoriaMetrics(tmp)
    am = Alertmanager(tmp, render_alertmanager_config(hook.url))
    parts: list[Any] = [hook, vm, am]
    try:
        proms = {}
        for cluster in GPUS:
            cfg = render_prometheus_config(
                rules_dir=ALERTS_DIR, alertmanager=am.url, scrape_interval="2s"
            )
            for job in cfg["scrape_configs"]:
                if job["job_name"] == "inferwatch":
                    job["static_configs"] = scrape_targets(server, [f"{cluster}-gpu-node-0"])
            cfg["global"]["external_labels"] = {"cluster": cluster}
            cfg["remote_write"] = [
                {"url": vm.write_url, "queue_config": {"batch_send_deadline": "1s"}}
            ]
            proms[cluster] = Prometheus(tmp, json.dumps(cfg))
            parts.append(proms[cluster])
        yield Fleet(vm, am, hook, proms)
    finally:
        for part in reversed(parts):
            part.stop()
        server.stop()


def test_local_rules_alert_once_with_the_cluster_label(fleet: Fleet) -> None:
    cluster, worker = OVERLOADED

    def arrived() -> Any:
        return fleet.hook.first("InferenceQueueOverCapacity", "firing", {"worker": worker})

    event = wait_until(arrived, 150, interval=1.0, message="InferenceQueueOverCapacity notified")
    assert event.labels["cluster"] == cluster
    status, body, _ = http_get(
        f"{fleet.alertmanager.url}/api/v2/alerts?filter=alertname%3D%22"
        "InferenceQueueOverCapacity%22",
        timeout=5,
    )
    assert status == 200
    alerts = json.loads(body)
    assert [(a["labels"]["cluster"], a["labels"]["worker"]) for a in alerts] == [OVERLOADED]


def test_recorded_series_reach_the_store_once_per_cluster(fleet: Fleet) -> None:
    record = "worker:inferwatch_requests_finished:rate5m"

    def recorded() -> list[dict[str, Any]] | None:
        got = fleet.vm.query(f"timestamp({record})")
        return got if len(got) == sum(GPUS.values()) else None

    stamps = wait_until(recorded, 90, interval=1.0, message="recorded rates in the store")
    assert sorted(s["metric"]["cluster"] for s in stamps) == ["east", "east", "west"]
    for item in stamps:
        labels = item["metric"]
        at = float(item["value"][1])  # when that cluster's Prometheus evaluated the rule
        selector = ",".join(f'{k}="{v}"' for k, v in labels.items() if k != "cluster")
        stored = fleet.vm.query(f'{record}{{cluster="{labels["cluster"]}",{selector}}}', at)
        local = fleet.proms[labels["cluster"]].query(f"{record}{{{selector}}}", at)
        # exactly one series in the store per series recorded in its cluster, same value
        assert len(stored) == len(local) == 1, (labels, stored, local)
        assert float(stored[0]["value"][1]) == pytest.approx(float(local[0]["value"][1]))
