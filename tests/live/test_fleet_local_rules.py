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
from typing import Any

import pytest
from tests.support.fleet import (
    GPUS,
    OVERLOADED,
    Clusters,
    cluster_hosts,
    clusters,
    overload,
    wait_overload_paged,
)
from tests.support.proc import http_get, wait_until
from tests.support.replay import load_capture
from tests.support.stack import ALERTS_DIR

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    tmp = tmp_path_factory.mktemp("fleet-local")
    hosts = cluster_hosts(load_capture())
    overload(hosts)
    with clusters(
        tmp, hosts, scrape_interval="2s", evaluation_interval="1s", rules_dir=ALERTS_DIR
    ) as running:
        yield running


def test_local_rules_alert_once_with_the_cluster_label(fleet: Clusters) -> None:
    wait_overload_paged(fleet.hook)
    status, body, _ = http_get(
        f"{fleet.alertmanager.url}/api/v2/alerts?filter=alertname%3D%22"
        "InferenceQueueOverCapacity%22",
        timeout=5,
    )
    assert status == 200
    alerts = json.loads(body)
    assert [(a["labels"]["cluster"], a["labels"]["worker"]) for a in alerts] == [OVERLOADED]


def test_recorded_series_reach_the_store_once_per_cluster(fleet: Clusters) -> None:
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
