"""Autoscaling on the queue: the generated KEDA / HPA examples against the projects'
schemas, and the desired-replica rule on the simulator's overload and idle scenarios
with a real Prometheus."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from tests.support.e2e import E2E_THRESHOLDS, Stack, WorkerSpec
from tests.support.proc import REPO, wait_until

from inferwatch.pack.names import DESIRED_REPLICAS, QUEUE_PRESSURE_MODEL, REPLICAS, SCALE_IN
from inferwatch.pack.rules import autoscale, record_names
from inferwatch.pack.thresholds import load_thresholds

KUBECTL = shutil.which("kubectl")
DEPLOY = REPO / autoscale.DEPLOY_DIR

# Partial schemas of our own, written from the projects' published definitions (the
# full CRDs are not vendored here): KEDA's ScaledObject, keda.sh/v1alpha1
# (kedacore/keda apis/keda/v1alpha1/scaledobject_types.go: scaleTargetRef.name
# required; triggers[].type required, metadata a map of strings; metricType one of
# AverageValue, Value, Utilization; min/maxReplicaCount and pollingInterval int32;
# advanced.horizontalPodAutoscalerConfig.behavior an autoscaling/v2 behavior), and
# the Prometheus scaler's metadata (keda.sh/docs/scalers/prometheus: serverAddress,
# query and threshold required).
_BEHAVIOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        side: {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
                "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
                "policies": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "value", "periodSeconds"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"enum": ["Pods", "Percent"]},
                            "value": {"type": "integer", "minimum": 1},
                            "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
                        },
                    },
                },
            },
        }
        for side in ("scaleUp", "scaleDown")
    },
}
_TARGET_REF = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "name": {"type": "string", "minLength": 1},
    },
}
SCALED_OBJECT = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": _TARGET_REF,
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer"},
                "advanced": {
                    "type": "object",
                    "properties": {
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "behavior": _BEHAVIOR},
                        }
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"const": "prometheus"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "metadata": {
                                "type": "object",
                                "required": ["serverAddress", "query", "threshold"],
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
    },
}
# autoscaling/v2 HorizontalPodAutoscaler with an External metric (kubernetes
# api/autoscaling/v2/types.go: MetricSpec type External, MetricTarget type
# Value | AverageValue | Utilization, quantities as strings here).
HPA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "autoscaling/v2"},
        "kind": {"const": "HorizontalPodAutoscaler"},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "maxReplicas"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {**_TARGET_REF, "required": ["apiVersion", "kind", "name"]},
                "minReplicas": {"type": "integer", "minimum": 1},
                "maxReplicas": {"type": "integer", "minimum": 1},
                "behavior": _BEHAVIOR,
                "metrics": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "external"],
                        "properties": {
                            "type": {"const": "External"},
                            "external": {
                                "type": "object",
                                "required": ["metric", "target"],
                                "properties": {
                                    "metric": {
                                        "type": "object",
                                        "required": ["name"],
                                        "properties": {
                                            "name": {"type": "string"},
                                            "selector": {
                                                "type": "object",
                                                "properties": {
                                                    "matchLabels": {
                                                        "type": "object",
                                                        "additionalProperties": {
                                                            "type": "string",
                                                            # a Kubernetes label value
                                                            "pattern": "^([A-Za-z0-9][-A-Za-z0-9_.]{0,61}[A-Za-z0-9]?)?$",
                                                        },
                                                    }
                                                },
                                            },
                                        },
                                    },
                                    "target": {
                                        "type": "object",
                                        "required": ["type"],
                                        "properties": {
                                            "type": {"enum": ["Value", "AverageValue"]},
                                            "averageValue": {"type": "string"},
                                            "value": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
# prometheus-adapter's configuration (kubernetes-sigs/prometheus-adapter
# pkg/config/config.go: DiscoveryRule = seriesQuery, seriesFilters, resources
# {overrides, template, namespaced}, name {matches, as}, metricsQuery).
ADAPTER = {
    "type": "object",
    "required": ["externalRules"],
    "additionalProperties": False,
    "properties": {
        "externalRules": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["seriesQuery", "metricsQuery", "name"],
                "additionalProperties": False,
                "properties": {
                    "seriesQuery": {"type": "string"},
                    "seriesFilters": {"type": "array"},
                    "resources": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "overrides": {"type": "object"},
                            "template": {"type": "string"},
                            "namespaced": {"type": "boolean"},
                        },
                    },
                    "name": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"matches": {"type": "string"}, "as": {"type": "string"}},
                    },
                    "metricsQuery": {"type": "string", "pattern": "<<\\.Series>>"},
                },
            },
        }
    },
}


def kustomize(directory: Path) -> list[dict[str, Any]]:
    if KUBECTL is None:
        pytest.skip("kubectl (with kustomize) not installed")
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_keda_example_builds_and_matches_the_scaled_object_schema() -> None:
    (obj,) = kustomize(DEPLOY / "keda")
    jsonschema.validate(obj, SCALED_OBJECT)
    (trigger,) = obj["spec"]["triggers"]
    assert trigger["metadata"]["query"].startswith(DESIRED_REPLICAS + "{")
    # one replica per unit of the desired figure; never to zero (a cold start costs minutes)
    assert trigger["metricType"] == "AverageValue" and trigger["metadata"]["threshold"] == "1"
    assert obj["spec"]["minReplicaCount"] >= 1
    t = load_thresholds()
    down = obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] == t.gpu_utilization.waste_for


def test_schemas_can_fail() -> None:
    (obj,) = kustomize(DEPLOY / "keda")
    obj["spec"]["triggers"][0]["metadata"]["threshold"] = 1  # a number, not a string
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(obj, SCALED_OBJECT)


def test_hpa_example_builds_and_matches_hpa_and_adapter_schemas() -> None:
    docs = {d["kind"]: d for d in kustomize(DEPLOY / "hpa")}
    jsonschema.validate(docs["HorizontalPodAutoscaler"], HPA)
    adapter = yaml.safe_load(docs["ConfigMap"]["data"]["config.yaml"])
    jsonschema.validate(adapter, ADAPTER)
    (rule,) = adapter["externalRules"]
    assert (
        rule["name"]["as"] == autoscale.EXTERNAL_METRIC and DESIRED_REPLICAS in rule["seriesQuery"]
    )
    (metric,) = docs["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == autoscale.EXTERNAL_METRIC
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}


# --------------------------------------------------------------------------- live

OVER, IDLE_A, IDLE_B = "w-over", "w-idle-a", "w-idle-b"
WITHIN = 40.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("autoscale")
    doc = yaml.safe_load(E2E_THRESHOLDS.read_text())
    # warm-up lasts 40 s here, so the test sees it block a scale-in and then end
    doc["cold_start"]["within"] = f"{WITHIN:g}s"
    path = tmp / "thresholds.yaml"
    path.write_text(yaml.safe_dump(doc))
    st = Stack(
        tmp,
        [
            WorkerSpec(OVER, max_num_seqs=4, model="sim-over"),
            WorkerSpec(IDLE_A, model="sim-idle"),
            WorkerSpec(IDLE_B, model="sim-idle"),
        ],
        thresholds=path,
    )
    try:
        yield st
    finally:
        st.stop()


def value(stack: Stack, promql: str) -> float | None:
    return stack.prom.scalar(promql)


@pytest.mark.slow
def test_a_scaler_adds_workers_on_overload_and_removes_one_when_idle(stack: Stack) -> None:
    t = stack.thresholds
    assert record_names(t)[DESIRED_REPLICAS] == DESIRED_REPLICAS
    over = stack.load("overload", [OVER], 600, drain=0)
    idle = stack.load("idle", [IDLE_A, IDLE_B], 600, drain=0)
    try:
        # warm-up: both idle workers are younger than cold_start.within, so no scale-in
        wait_until(
            lambda: value(stack, f'{REPLICAS}{{model="sim-idle"}}') == 2,
            60,
            interval=0.5,
            message="two sim-idle workers",
        )
        young = value(
            stack,
            'min(time() - inferwatch_worker_start_time_seconds{worker=~"w-idle-.*"})',
        )
        if young is not None and young < WITHIN - 5:
            assert value(stack, f'{SCALE_IN}{{model="sim-idle"}}') == 0
            assert value(stack, f'{DESIRED_REPLICAS}{{model="sim-idle"}}') == 2
        # overload: the queue stays over max_num_seqs, the figure goes above one worker
        wait_until(
            lambda: (value(stack, f'{DESIRED_REPLICAS}{{model="sim-over"}}') or 0) >= 2,
            90,
            interval=0.5,
            message="desired replicas of sim-over above 1",
        )
        pressure = value(stack, f'{QUEUE_PRESSURE_MODEL}{{model="sim-over"}}')
        assert pressure is not None and pressure > 1
        # idle, after warm-up: the agent attributes each simulated worker to its fake
        # GPU (inferwatch_worker_gpu_info from the fake NVML process lists), the model's
        # own GPUs sit in the waste band, and the rule removes one worker
        wait_until(
            lambda: (
                (
                    value(
                        stack,
                        'min(time() - inferwatch_worker_start_time_seconds{worker=~"w-idle-.*"})',
                    )
                    or 0
                )
                > WITHIN + 5
            ),
            WITHIN + 60,
            interval=0.5,
            message="idle workers past warm-up",
        )
        wait_until(
            lambda: value(stack, f'{SCALE_IN}{{model="sim-idle"}}') == 1,
            60,
            interval=0.5,
            message="scale-in of sim-idle once its GPUs idle past warm-up",
        )
        assert value(stack, f'{DESIRED_REPLICAS}{{model="sim-idle"}}') == 1
    finally:
        over.stop()
        idle.stop()


def test_demo_scaler_rows_say_what_a_scaler_would_do() -> None:
    from inferwatch.demo.demo_cmd import scaler_rows

    rows = scaler_rows(
        {
            "replicas": {"a": 1.0, "b": 3.0, "c": 2.0, "d": 6.0},
            "desired": {"a": 4.0, "b": 2.0, "c": 2.0, "d": 21.0},
            "pressure": {"a": 3.5, "d": 3.5},
            "scale_out": {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0},
            "scale_in": {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0},
        }
    )
    out = "scale out: a queue over capacity for the last samples (queue pressure 3.50)"
    assert rows == [
        ("a", "1", "4", "4", out),
        ("b", "3", "2", "2", "scale in: GPUs below the waste line, nothing warming up"),
        ("c", "2", "2", "2", "hold"),
        # issue 39: the rule's wish beside what the shipped objects would run
        ("d", "6", "21", f"{autoscale.MAX_REPLICAS} (capped)", out),
    ]


def test_demo_scaler_view_shows_the_shipped_objects_cap() -> None:
    """Issue 39: 21 desired next to the cap of the shipped KEDA and HPA objects, read from
    the one definition that writes them (and the committed manifests say the same)."""
    from rich.console import Console

    from inferwatch.demo.demo_cmd import render, scaler_rows

    cap = autoscale.MAX_REPLICAS
    shipped = REPO / "deploy" / "kubernetes" / "autoscaling"
    keda = yaml.safe_load((shipped / "keda" / "scaledobject.yaml").read_text())
    hpa = yaml.safe_load((shipped / "hpa" / "hpa.yaml").read_text())
    assert keda["spec"]["maxReplicaCount"] == hpa["spec"]["maxReplicas"] == cap
    rows = scaler_rows({"replicas": {"m": 6.0}, "desired": {"m": 21.0}, "scale_out": {"m": 1.0}})
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render({}, [], None, "header", rows))
    view = console.export_text()
    assert f"runs (cap {cap})" in view
    row = next(line for line in view.splitlines() if "│ m " in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:4] == ["m", "6", "21", f"{cap} (capped)"], cells
    assert f"maxReplicaCount / maxReplicas {cap}" in view
