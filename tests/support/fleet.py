"""Two clusters of replayed agents behind one store, for the fleet tests (docs/fleet.md).

The clusters collide on purpose: each has a host ``gpu-node-0:10127`` running
workers ``vllm-0``..., as two Kubernetes clusters with the same node and pod
names would, so only the ``cluster`` label tells their series apart. Each cluster
has its own Prometheus (external label ``cluster``) that scrapes its host and
remote-writes to one VictoriaMetrics; one Alertmanager notifies one webhook.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.e2e import render_alertmanager_config
from tests.support.proc import Alertmanager, Prometheus, wait_until
from tests.support.replay import Capture, ReplayHost, ReplayServer, scrape_targets
from tests.support.stack import render_prometheus_config
from tests.support.vm import VictoriaMetrics
from tests.support.webhook import AlertEvent, WebhookReceiver

#: GPUs (and workers) per cluster
GPUS = {"east": 2, "west": 1}
#: the instance label every cluster's host carries
INSTANCE = "gpu-node-0:10127"
#: the worker :func:`overload` fills: (cluster, worker)
OVERLOADED = ("east", "vllm-0")
#: waiting requests it gets; its max_num_seqs is 8
QUEUE = 40.0


def host_name(cluster: str) -> str:
    return f"{cluster}-gpu-node-0"


def cluster_hosts(capture: Capture) -> dict[str, ReplayHost]:
    """One replayed host per cluster (:data:`GPUS`), all with the same instance label."""
    return {
        cluster: ReplayHost(host_name(cluster), n, capture, host_index=i, instance=INSTANCE)
        for i, (cluster, n) in enumerate(GPUS.items())
    }


def overload(hosts: Mapping[str, ReplayHost]) -> None:
    """Queue :data:`QUEUE` requests on the :data:`OVERLOADED` worker."""
    cluster, worker = OVERLOADED
    hosts[cluster].set("inferwatch_queue_depth", worker, QUEUE)


def wait_overload_paged(hook: WebhookReceiver) -> AlertEvent:
    """The overloaded worker's InferenceQueueOverCapacity notification, once it arrives;
    it must carry the worker's cluster."""
    cluster, worker = OVERLOADED

    def arrived() -> AlertEvent | None:
        return hook.first("InferenceQueueOverCapacity", "firing", {"worker": worker})

    event: AlertEvent = wait_until(
        arrived, 150, interval=1.0, message="InferenceQueueOverCapacity notified"
    )
    assert event.labels["cluster"] == cluster
    return event


@dataclass
class Clusters:
    """The running parts of :func:`clusters`."""

    hook: WebhookReceiver
    vm: VictoriaMetrics
    alertmanager: Alertmanager
    proms: dict[str, Prometheus]


@contextlib.contextmanager
def clusters(
    tmp: Path,
    hosts: Mapping[str, ReplayHost],
    *,
    scrape_interval: str,
    evaluation_interval: str,
    rules_dir: Path | None = None,
) -> Iterator[Clusters]:
    """Serve ``hosts`` (cluster -> host) and start the store, the Alertmanager and one
    Prometheus per cluster, which remote-writes to the store; with ``rules_dir`` each
    Prometheus evaluates those rules and notifies the Alertmanager. Everything stops when
    the block ends."""
    server = ReplayServer(hosts.values())
    parts: list[Any] = [server]
    try:
        hook = WebhookReceiver()
        parts.append(hook)
        vm = VictoriaMetrics(tmp)
        parts.append(vm)
        am = Alertmanager(tmp, render_alertmanager_config(hook.url))
        parts.append(am)
        proms = {}
        for cluster in hosts:
            # the shipped prometheus.yml: this cluster's host, labelled with the cluster
            cfg = render_prometheus_config(
                rules_dir=rules_dir,
                alertmanager=am.url if rules_dir is not None else None,
                scrape_interval=scrape_interval,
                evaluation_interval=evaluation_interval,
            )
            for job in cfg["scrape_configs"]:
                if job["job_name"] == "inferwatch":
                    job["static_configs"] = scrape_targets(server, [host_name(cluster)])
            cfg["global"]["external_labels"] = {"cluster": cluster}
            cfg["remote_write"] = [
                {
                    "url": vm.write_url,
                    "queue_config": {"batch_send_deadline": "1s", "max_backoff": "1s"},
                }
            ]
            proms[cluster] = Prometheus(tmp, json.dumps(cfg))
            parts.append(proms[cluster])
        yield Clusters(hook, vm, am, proms)
    finally:
        for part in reversed(parts):
            part.stop()
