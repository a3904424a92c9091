"""Kubernetes manifests: rendered by Kustomize, validated, and checked for what they promise.

Validation:
- built-in kinds: ``kubernetes-validate`` (strict: unknown fields fail) against
  the newest Kubernetes version it ships schemas for;
- Prometheus Operator kinds (PodMonitor, ServiceMonitor, PrometheusRule):
  kubernetes-validate has no CRD schemas, so they are checked against the
  partial schemas below (required fields, types, no unknown keys in the parts
  we use) and a PrometheusRule's groups go through ``promtool check rules``.

The monitoring pack (``deploy/kubernetes/kustomization.yaml``) includes the
GENERATED ``prometheusrule.yaml`` and ``dashboards/``: its tests skip, naming
what is missing, until ``inferwatch generate`` writes them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version
from tests.support.proc import PROMTOOL, REPO
from tests.support.stack import check_inferwatch_args, load_prometheus_config, scrape_job

from inferwatch import __version__
from inferwatch.agent.config import DEFAULT_PORT, load_config

K8S = REPO / "deploy" / "kubernetes"
OVERLAYS = ("sidecar", "daemonset", "servicemonitor", "sidecar-proxy")
IMAGE = "ghcr.io/inferwatch/inferwatch"
AGENT_LABEL = ("inferwatch.io/agent", "true")
PORT_NAME = "inferwatch"
K8S_VERSION = latest_version()

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) not installed")


def render(directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIR`` as a list of objects; fails the test with kustomize's error."""
    assert KUBECTL is not None
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"kustomize {directory} failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


# --------------------------------------------------------------------------- CRD schemas

_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array"},
    },
}
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_RELABEL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": {"type": "string"}},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer"},
        "replacement": {"type": "string"},
        "action": {
            "enum": [
                "replace",
                "Replace",
                "keep",
                "Keep",
                "drop",
                "Drop",
                "hashmod",
                "HashMod",
                "labelmap",
                "LabelMap",
                "labeldrop",
                "LabelDrop",
                "labelkeep",
                "LabelKeep",
                "lowercase",
                "Lowercase",
                "uppercase",
                "Uppercase",
                "keepequal",
                "KeepEqual",
                "dropequal",
                "DropEqual",
            ]
        },
    },
}
_ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["port"],
    "properties": {
        "port": {"type": "string"},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https"]},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "honorLabels": {"type": "boolean"},
        "relabelings": {"type": "array", "items": _RELABEL},
        "metricRelabelings": {"type": "array", "items": _RELABEL},
    },
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def _crd(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


def _monitor_spec(endpoints: str) -> dict[str, Any]:
    """A PodMonitor's or ServiceMonitor's spec: a selector and its list of endpoints
    (``podMetricsEndpoints`` or ``endpoints``)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["selector", endpoints],
        "properties": {
            "selector": _LABEL_SELECTOR,
            "jobLabel": {"type": "string"},
            "namespaceSelector": {"type": "object"},
            endpoints: {"type": "array", "minItems": 1, "items": _ENDPOINT},
        },
    }


CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "PodMonitor": _crd("PodMonitor", _monitor_spec("podMetricsEndpoints")),
    "ServiceMonitor": _crd("ServiceMonitor", _monitor_spec("endpoints")),
    "PrometheusRule": _crd(
        "PrometheusRule",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "oneOf": [
                                        {"required": ["alert"]},
                                        {"required": ["record"]},
                                    ],
                                    "properties": {
                                        "expr": {"type": ["string", "integer"]},
                                        "for": _DURATION,
                                        "labels": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    ),
}


def validate(obj: dict[str, Any], tmp_path: Path) -> None:
    """Validate one rendered object (see the module docstring for how)."""
    kind = obj["kind"]
    where = f"{kind}/{obj.get('metadata', {}).get('name')}"
    if obj["apiVersion"].startswith("monitoring.coreos.com/"):
        assert kind in CRD_SCHEMAS, f"{where}: no schema for this Prometheus Operator kind"
        errors = sorted(
            jsonschema.Draft202012Validator(CRD_SCHEMAS[kind]).iter_errors(obj), key=str
        )
        assert not errors, f"{where}: " + "; ".join(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]
        )
        if kind == "PrometheusRule" and PROMTOOL:
            rules = tmp_path / f"{obj['metadata']['name']}.rules.yaml"
            rules.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}))
            check = subprocess.run(
                [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True
            )
            assert check.returncode == 0, f"{where}: promtool:\n{check.stdout}{check.stderr}"
        return
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = "/".join(map(str, exc.path))
        raise AssertionError(f"{where} (Kubernetes {K8S_VERSION}): {path}: {exc.message}") from None


def objects(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = objects(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec = workload["spec"]
    if workload["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return dict(spec["template"]["spec"])


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    for c in pod["containers"]:
        if c["name"] == name:
            return dict(c)
    raise AssertionError(f"no container {name!r} in {[c['name'] for c in pod['containers']]}")


def all_containers(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet", "CronJob", "StatefulSet", "Job"):
            yield from pod_spec(d).get("containers", [])


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


# --------------------------------------------------------------------------- rendering + validity


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    if KUBECTL is None:
        pytest.skip("kubectl (with kustomize) not installed")
    return {name: render(K8S / "overlays" / name) for name in OVERLAYS} | {
        "report": render(K8S / "report")
    }


@needs_kubectl
@pytest.mark.parametrize("name", [*OVERLAYS, "report"])
def test_every_rendered_object_validates(
    name: str, rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    docs = rendered[name]
    assert docs, f"{name} rendered no objects"
    for obj in docs:
        validate(obj, tmp_path)


def test_validation_rejects_a_broken_object(tmp_path: Path) -> None:
    """The validators above are live: a typo and a wrong type are caught."""
    bad_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": "not-a-number"}], "selectr": {}},
    }
    with pytest.raises(AssertionError):
        validate(bad_service, tmp_path)
    bad_monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "podMetricsEndpoints": [{"port": "a", "intervall": "15s"}]},
    }
    with pytest.raises(AssertionError):
        validate(bad_monitor, tmp_path)


@needs_kubectl
def test_images_are_pinned_to_the_package_version(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    seen = 0
    for docs in rendered.values():
        for c in all_containers(docs):
            if c["image"].startswith(IMAGE):
                # the report runs the image built with the report extra (Dockerfile)
                tag = f"{__version__}-report" if c["args"][0] == "report" else __version__
                assert c["image"] == f"{IMAGE}:{tag}", c["image"]
                seen += 1
            else:
                assert ":" in c["image"] and not c["image"].endswith(":latest"), c["image"]
    assert seen >= 4


@needs_kubectl
def test_inferwatch_container_args_parse(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The args every inferwatch container passes are accepted by the real CLI."""
    checked = 0
    for docs in rendered.values():
        for c in all_containers(docs):
            if not c["image"].startswith(IMAGE):
                continue
            if not check_inferwatch_args(c["args"]):
                pytest.skip(f"`inferwatch {c['args'][0]}` is not registered yet")
            checked += 1
    assert checked >= 4


# --------------------------------------------------------------------------- the sidecar


def restricted_violations(pod: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """What keeps a container from the "restricted" Pod Security Standard."""
    pod_sc = pod.get("securityContext", {})
    sc = c.get("securityContext", {})
    problems = []
    if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
        problems.append("runAsNonRoot is not true")
    if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
        problems.append("runAsUser is 0")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    if sc.get("privileged"):
        problems.append("privileged")
    caps = sc.get("capabilities", {})
    if "ALL" not in caps.get("drop", []):
        problems.append("capabilities do not drop ALL")
    if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
        problems.append(f"adds capabilities {caps.get('add')}")
    seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        problems.append(f"seccompProfile is {seccomp}")
    if any(p.get("hostPort") for p in c.get("ports", [])):
        problems.append("hostPort")
    if not sc.get("readOnlyRootFilesystem"):
        problems.append("root filesystem is writable")
    mounts = {m["name"] for m in c.get("volumeMounts", [])}
    allowed = {
        "configMap",
        "emptyDir",
        "secret",
        "projected",
        "downwardAPI",
        "persistentVolumeClaim",
    }
    for v in pod.get("volumes", []):
        if v["name"] in mounts and not set(v) - {"name"} <= allowed:
            problems.append(f"volume {v['name']} is of a type restricted pods may not use")
    return problems


@pytest.fixture(scope="module")
def sidecar(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["sidecar"]


@needs_kubectl
def test_sidecar_shares_the_pod_with_the_worker(sidecar: list[dict[str, Any]]) -> None:
    deploy = one(sidecar, "Deployment")
    pod = pod_spec(deploy)
    assert pod["shareProcessNamespace"] is True
    assert pod.get("enableServiceLinks") is False, "a Service named vllm would inject VLLM_PORT"
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert labels.get(AGENT_LABEL[0]) == AGENT_LABEL[1]
    agent = container(pod, "inferwatch")
    assert {p["name"]: p["containerPort"] for p in agent["ports"]} == {PORT_NAME: DEFAULT_PORT}


@needs_kubectl
def test_sidecar_sees_the_gpu_without_requesting_one(sidecar: list[dict[str, Any]]) -> None:
    pod = pod_spec(one(sidecar, "Deployment"))
    vllm = container(pod, "vllm")
    agent = container(pod, "inferwatch")
    assert str(vllm["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    for section in ("requests", "limits"):
        assert "nvidia.com/gpu" not in agent["resources"].get(section, {}), (
            "the sidecar must not request a GPU of its own"
        )
    env = env_of(agent)
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "all"
    assert env.get("NVIDIA_DRIVER_CAPABILITIES") == "utility"
    assert pod.get("runtimeClassName") == "nvidia"
    assert agent["resources"]["requests"] and agent["resources"]["limits"]["memory"]


@needs_kubectl
def test_sidecar_is_restricted(sidecar: list[dict[str, Any]]) -> None:
    pod = pod_spec(one(sidecar, "Deployment"))
    agent = container(pod, "inferwatch")
    assert restricted_violations(pod, agent) == []
    assert agent["securityContext"]["runAsUser"] == 10001
    from tests.support.attack import RSS_LIMIT_MB

    assert agent["resources"]["limits"]["memory"] == f"{RSS_LIMIT_MB}Mi"


def test_restricted_check_catches_a_root_container() -> None:
    pod = {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
    c = {"name": "x", "securityContext": {"runAsUser": 0}, "volumeMounts": [{"name": "h"}]}
    problems = restricted_violations(pod, c)
    assert "runAsNonRoot is not true" in problems
    assert any("volume h" in p for p in problems)


@needs_kubectl
def test_sidecar_probes_gate_readiness_on_warmup(sidecar: list[dict[str, Any]]) -> None:
    pod = pod_spec(one(sidecar, "Deployment"))
    agent = container(pod, "inferwatch")
    ready = agent["readinessProbe"]["httpGet"]
    live = agent["livenessProbe"]["httpGet"]
    assert (ready["path"], ready["port"]) == ("/readyz", PORT_NAME)
    assert (live["path"], live["port"]) == ("/healthz", PORT_NAME)
    # The worker's Service selects this pod: its readiness (all containers) gates traffic.
    svc = next(s for s in objects(sidecar, "Service") if s["metadata"]["name"] == "vllm")
    labels = one(sidecar, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert not svc["spec"].get("publishNotReadyAddresses"), "the worker Service must gate"
    vllm = container(pod, "vllm")
    assert vllm["startupProbe"]["failureThreshold"] * vllm["startupProbe"]["periodSeconds"] >= 600


@needs_kubectl
def test_sidecar_agent_config_comes_from_the_configmap(sidecar: list[dict[str, Any]]) -> None:
    pod = pod_spec(one(sidecar, "Deployment"))
    agent = container(pod, "inferwatch")
    cm = one(sidecar, "ConfigMap")
    assert agent["args"] == ["run", "--config", "/etc/inferwatch/config.yaml"]
    mount = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/etc/inferwatch")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == cm["metadata"]["name"], "hash suffix not propagated"
    config = yaml.safe_load(cm["data"]["config.yaml"])
    vllm_port = container(pod, "vllm")["ports"][0]["containerPort"]
    assert config["workers"][0]["url"] == f"http://127.0.0.1:{vllm_port}"


def test_agent_configs_load(tmp_path: Path) -> None:
    for name in ("sidecar", "daemonset"):
        path = K8S / "overlays" / name / "inferwatch.yaml"
        cfg = load_config(str(path), env={})
        assert cfg.listen_port == DEFAULT_PORT, path
        assert cfg.gpu.backend == "nvml", path
    sidecar_cfg = load_config(str(K8S / "overlays" / "sidecar" / "inferwatch.yaml"), env={})
    assert [w.engine for w in sidecar_cfg.workers] == ["vllm"]
    assert sidecar_cfg.workers[0].cmd_match


@needs_kubectl
def test_sidecar_proxy_puts_the_service_on_the_proxy_and_keeps_the_engine_port(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Issue 30: clients reach the worker through the agent's measuring proxy; the
    engine's own port stays reachable through the same Service."""
    docs = rendered["sidecar-proxy"]
    pod = pod_spec(one(docs, "Deployment"))
    agent = container(pod, "inferwatch")
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {PORT_NAME: DEFAULT_PORT, "proxy": 8001}
    engine = container(pod, "vllm")
    engine_port = {p["name"]: p["containerPort"] for p in engine["ports"]}["http"]
    (service,) = [d for d in objects(docs, "Service") if d["metadata"]["name"] == "vllm"]
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert (by_name["http"]["port"], by_name["http"]["targetPort"]) == (8000, "proxy")
    assert by_name["engine"]["targetPort"] == "http" and engine_port == 8000
    # the agent's configuration listens where the container port says, in front of vLLM
    (config_map,) = [
        d for d in objects(docs, "ConfigMap") if "inferwatch-agent" in d["metadata"]["name"]
    ]
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    (worker,) = load_config(str(path), env={}).workers
    assert worker.proxy is not None and worker.proxy.listen_port == ports["proxy"]
    assert worker.url == f"http://127.0.0.1:{engine_port}"
    # the agent's own pieces are the sidecar's
    assert (
        one(docs, "PodMonitor")["metadata"]["name"]
        == one(rendered["sidecar"], "PodMonitor")["metadata"]["name"]
    )


# --------------------------------------------------------------------------- scraping


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


@needs_kubectl
@pytest.mark.parametrize("name", ["sidecar", "daemonset"])
def test_podmonitor_and_service_select_the_agent_port(
    name: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    docs = rendered[name]
    workload = one(docs, "Deployment" if name == "sidecar" else "DaemonSet")
    labels = workload["spec"]["template"]["metadata"]["labels"]
    pm = one(docs, "PodMonitor")
    assert _matches(pm["spec"]["selector"]["matchLabels"], labels)
    endpoint = pm["spec"]["podMetricsEndpoints"][0]
    agent = container(pod_spec(workload), "inferwatch")
    assert endpoint["port"] in {p["name"] for p in agent["ports"]}
    assert {"targetLabel": "job", "replacement": "inferwatch"} in endpoint["relabelings"]
    svc = next(s for s in objects(docs, "Service") if s["metadata"]["name"] == "inferwatch")
    assert _matches(svc["spec"]["selector"], labels)
    assert svc["spec"]["publishNotReadyAddresses"] is True, "warming pods must stay scraped"


@needs_kubectl
def test_servicemonitor_variant_replaces_the_podmonitor(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["servicemonitor"]
    assert not objects(docs, "PodMonitor")
    sm = one(docs, "ServiceMonitor")
    svc = next(s for s in objects(docs, "Service") if s["metadata"]["name"] == "inferwatch")
    assert _matches(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}
    assert {"targetLabel": "job", "replacement": "inferwatch"} in sm["spec"]["endpoints"][0][
        "relabelings"
    ]


# --------------------------------------------------------------------------- the DaemonSet


#: what the node agent needs beyond the "restricted" standard, and nothing else
DAEMONSET_NEEDS = [
    "runAsNonRoot is not true",
    "runAsUser is 0",
    "volume pod-resources is of a type restricted pods may not use",
]


@needs_kubectl
def test_daemonset_discovers_its_node_without_a_worker_list(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["daemonset"]
    ds = one(docs, "DaemonSet")
    pod = pod_spec(ds)
    assert pod["hostPID"] is True, "NVML's PIDs are node PIDs; cgroups tie them to pods"
    assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
    agent = container(pod, "inferwatch")
    env = env_of(agent)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in agent["resources"].get("limits", {})
    assert "INFERWATCH_WORKERS" not in env, "no hand-written worker list"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # the configuration turns discovery on, and nothing lists workers
    cm = next(
        d
        for d in objects(docs, "ConfigMap")
        if d["metadata"]["name"].startswith("inferwatch-agent")
    )
    cfg_path = Path(pytest.importorskip("tempfile").mkdtemp()) / "config.yaml"
    cfg_path.write_text(cm["data"]["config.yaml"])
    cfg = load_config(str(cfg_path), env={})
    assert cfg.kubernetes is not None and cfg.workers == ()
    assert cfg.kubernetes.pod_labels == (), "no pod labels by default: bounded series"
    # the kubelet's pod-resources socket, read-only, and no other host path
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    sockets = mounts["pod-resources"]
    assert sockets["readOnly"] is True
    assert sockets["mountPath"] + "/kubelet.sock" == cfg.kubernetes.pod_resources_socket
    host_paths = [v for v in pod["volumes"] if "hostPath" in v]
    assert [v["hostPath"]["path"] for v in host_paths] == ["/var/lib/kubelet/pod-resources"]
    assert restricted_violations(pod, agent) == DAEMONSET_NEEDS
    assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # RBAC: its service account may read pods, nothing else
    assert pod["serviceAccountName"] == "inferwatch-node"
    assert pod["automountServiceAccountToken"] is True
    role = one(docs, "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    sa = one(docs, "ServiceAccount")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": sa["metadata"]["name"],
            "namespace": sa["metadata"]["namespace"],
        }
    ]
    assert ds["metadata"]["namespace"] == sa["metadata"]["namespace"]
    ns = one(docs, "Namespace")
    assert ns["metadata"]["name"] == ds["metadata"]["namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@needs_kubectl
def test_daemonset_podmonitor_keeps_the_workers_pod_labels(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    """Worker series carry the worker pod's namespace/pod/container: honorLabels keeps them
    over the agent pod's target labels, and the agent's pod and container are dropped."""
    endpoint = one(rendered["daemonset"], "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert endpoint["honorLabels"] is True
    labels = {
        "__meta_kubernetes_pod_node_name": "gpu-node-1",
        "__meta_kubernetes_pod_container_name": "inferwatch",
        "pod": "inferwatch-node-x7k2p",
        "container": "inferwatch",
        "namespace": "inferwatch",
    }
    out = relabel(labels, [_to_prometheus(r) for r in endpoint["relabelings"]])
    assert out is not None
    assert out["job"] == "inferwatch" and out["node"] == "gpu-node-1"
    assert "pod" not in out and "container" not in out


def _to_prometheus(r: dict[str, Any]) -> dict[str, Any]:
    """A PodMonitor relabeling in Prometheus' own spelling."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(k, k): (v.lower() if k == "action" else v) for k, v in r.items()}


@needs_kubectl
@pytest.mark.parametrize("name", ["monitoring pack", *OVERLAYS])
def test_operator_objects_carry_the_release_label_set_in_one_place(
    name: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    if name == "monitoring pack":
        missing = _pack_missing()
        if missing:
            pytest.skip(f"`inferwatch generate` has not written {', '.join(missing)} yet")
        docs = render(K8S)
    else:
        docs = rendered[name]
    component = yaml.safe_load((K8S / "components" / "release" / "kustomization.yaml").read_text())
    value = yaml.safe_load(component["patches"][0]["patch"])[0]["value"]
    kinds = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
    selected = [d for d in docs if d["kind"] in kinds]
    assert selected, f"{name} renders no Prometheus Operator object"
    for d in selected:
        assert d["metadata"]["labels"].get("release") == value, (d["kind"], name)
    others = [d for d in docs if d["kind"] not in kinds]
    assert all("release" not in d["metadata"].get("labels", {}) for d in others)


# --------------------------------------------------------------------------- the report


@needs_kubectl
def test_report_cronjob_runs_weekly_with_the_secret_as_a_file(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["report"]
    cron = one(docs, "CronJob")
    assert cron["spec"]["schedule"] == "0 8 * * 1", "Mondays 08:00"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = pod_spec(cron)
    c = container(pod, "report")
    assert c["args"][0] == "report" and "--send" in c["args"]
    assert any(a.startswith("--prometheus-url=") for a in c["args"])
    assert not objects(docs, "Secret"), "a default apply must not overwrite the real Secret"
    secret = yaml.safe_load((K8S / "report" / "smtp-secret.example.yaml").read_text())
    password = secret["stringData"]["password"]
    assert password.startswith("CHANGE-ME"), "the example Secret holds a placeholder"
    assert all(password not in str(v) for v in c["args"])
    env = env_of(c)
    assert "INFERWATCH_SMTP_PASSWORD" not in env, "the password goes in a file, not the env"
    pw_file = env["INFERWATCH_SMTP_PASSWORD_FILE"]
    mount = next(m for m in c["volumeMounts"] if pw_file.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    # A file only group-readable by fsGroup: the non-root user must still read it.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
    cm_name = c["envFrom"][0]["configMapRef"]["name"]
    cm = next(d for d in objects(docs, "ConfigMap") if d["metadata"]["name"] == cm_name)
    assert {"INFERWATCH_SMTP_HOST", "INFERWATCH_SMTP_TO"} <= set(cm["data"])
    assert restricted_violations(pod, c) == []


@needs_kubectl
def test_report_mail_settings_are_complete_for_the_report(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The CronJob's environment, as the report itself reads it, is enough for --send."""
    from inferwatch.report.settings import load_settings

    docs = rendered["report"]
    c = container(pod_spec(one(docs, "CronJob")), "report")
    cm = next(
        d
        for d in objects(docs, "ConfigMap")
        if d["metadata"]["name"] == c["envFrom"][0]["configMapRef"]["name"]
    )
    secret = yaml.safe_load((K8S / "report" / "smtp-secret.example.yaml").read_text())
    validate(secret, tmp_path)
    secret = secret["stringData"]
    password = tmp_path / "password"
    password.write_text(secret["password"])
    env = dict(cm["data"])
    env["INFERWATCH_SMTP_USERNAME"] = secret["username"]
    env["INFERWATCH_SMTP_PASSWORD_FILE"] = str(password)
    settings = load_settings(None, env)
    settings.smtp.check_complete()
    assert settings.smtp.password == secret["password"]
    assert settings.smtp.security == "starttls" and settings.smtp.effective_port == 587


# --------------------------------------------------------------------------- Prometheus' own k8s job


def relabel(labels: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus relabelling (replace, keep, drop, labeldrop, labelmap); None when the target
    is dropped."""
    out = dict(labels)
    for cfg in configs:
        action = cfg.get("action", "replace")
        sep = cfg.get("separator", ";")
        value = sep.join(out.get(s, "") for s in cfg.get("source_labels", []))
        regex = re.compile(cfg.get("regex", "(.*)"))
        m = regex.fullmatch(value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            target = m.expand(cfg.get("replacement", "$1").replace("$", "\\"))
            out[cfg["target_label"]] = target
        if action == "labeldrop":
            out = {k: v for k, v in out.items() if not regex.fullmatch(k)}
        if action == "labelmap":
            for k, v in list(out.items()):
                lm = regex.fullmatch(k)
                if lm:
                    out[lm.expand(cfg.get("replacement", "$1").replace("$", "\\"))] = v
    return out


def _meta_targets(docs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The targets Kubernetes pod discovery would produce for a rendered workload."""
    targets = []
    for d in docs:
        if d["kind"] not in ("Deployment", "DaemonSet"):
            continue
        pod_labels = d["spec"]["template"]["metadata"]["labels"]
        for c in pod_spec(d)["containers"]:
            for p in c.get("ports", []):
                meta = {
                    "__address__": f"10.0.0.7:{p['containerPort']}",
                    "__meta_kubernetes_namespace": "inference",
                    "__meta_kubernetes_pod_name": f"{d['metadata']['name']}-abc12",
                    "__meta_kubernetes_pod_phase": "Running",
                    "__meta_kubernetes_pod_node_name": "gpu-node-1",
                    "__meta_kubernetes_pod_container_name": c["name"],
                    "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                    "job": "inferwatch-kubernetes",
                }
                for k, v in pod_labels.items():
                    meta["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
                targets.append(meta)
    return targets


@needs_kubectl
@pytest.mark.parametrize("name", ["sidecar", "daemonset"])
def test_prometheus_kubernetes_job_keeps_only_agent_ports(
    name: str, rendered: dict[str, list[dict[str, Any]]]
) -> None:
    job = scrape_job(load_prometheus_config(), "inferwatch-kubernetes")
    kept = [
        r
        for t in _meta_targets(rendered[name])
        if (r := relabel(t, job["relabel_configs"])) is not None
    ]
    assert len(kept) == 1, kept
    target = kept[0]
    assert target["__address__"].endswith(f":{DEFAULT_PORT}")
    assert target["job"] == "inferwatch"
    assert target["container"] == "inferwatch" and target["namespace"] == "inference"
    selector = job["kubernetes_sd_configs"][0]["selectors"][0]["label"]
    assert selector == "=".join(AGENT_LABEL)


def test_kubernetes_job_drops_unlabelled_and_pending_pods() -> None:
    job = scrape_job(load_prometheus_config(), "inferwatch-kubernetes")
    base = {
        "__address__": "10.0.0.8:10127",
        "__meta_kubernetes_pod_container_port_name": "inferwatch",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_label_inferwatch_io_agent": "true",
    }
    assert relabel(base, job["relabel_configs"]) is not None
    assert (
        relabel(
            {**base, "__meta_kubernetes_pod_label_inferwatch_io_agent": ""}, job["relabel_configs"]
        )
        is None
    )
    assert (
        relabel({**base, "__meta_kubernetes_pod_phase": "Pending"}, job["relabel_configs"]) is None
    )
    assert (
        relabel(
            {**base, "__meta_kubernetes_pod_container_port_name": "http"}, job["relabel_configs"]
        )
        is None
    )


# --------------------------------------------------------------------------- the monitoring pack


def _pack_missing() -> list[str]:
    missing = []
    if not (K8S / "prometheusrule.yaml").is_file():
        missing.append("deploy/kubernetes/prometheusrule.yaml")
    if not list((K8S / "dashboards").glob("*.yaml")):
        missing.append("deploy/kubernetes/dashboards/*.yaml")
    return missing


def test_monitoring_pack_lists_every_generated_file() -> None:
    """Kustomize has no globs: the pack lists the generated files, and this keeps the list whole."""
    missing = _pack_missing()
    if missing:
        pytest.skip(f"`inferwatch generate` has not written {', '.join(missing)} yet")
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    boards = sorted(f"dashboards/{p.name}" for p in (K8S / "dashboards").glob("*.yaml"))
    generated = ["prometheusrule.yaml", *boards]
    unlisted = [g for g in generated if g not in listed]
    assert not unlisted, f"add to deploy/kubernetes/kustomization.yaml resources: {unlisted}"
    stale = [r for r in listed if r.endswith(".yaml") and not (K8S / r).is_file()]
    assert not stale, f"deploy/kubernetes/kustomization.yaml lists missing files: {stale}"


@needs_kubectl
def test_monitoring_pack_renders_and_validates(tmp_path: Path) -> None:
    missing = _pack_missing()
    if missing:
        pytest.skip(
            "the monitoring pack includes generated files that `inferwatch generate` has not "
            f"written yet: {', '.join(missing)}"
        )
    docs = render(K8S)
    for obj in docs:
        validate(obj, tmp_path)
        assert obj["metadata"].get("namespace") == "monitoring", obj["metadata"]
    rules = objects(docs, "PrometheusRule")
    assert rules, "the pack renders no PrometheusRule"
    dashboards = [
        d
        for d in objects(docs, "ConfigMap")
        if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    assert dashboards, 'no ConfigMap labelled grafana_dashboard: "1"'
    for cm in dashboards:
        for key, text in cm["data"].items():
            assert key.endswith(".json"), key
            board = json.loads(text)
            assert board.get("title") and board.get("uid"), key
    assert one(docs, "CronJob")["metadata"]["name"] == "inferwatch-report"
