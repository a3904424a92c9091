"""Kubernetes discovery, the pure parts: pods -> workers, cgroups -> pods, device IDs -> GPUs.

Pods are v1.Pod JSON as the API returns it (tests/support/kubeapi.make_pod);
cgroup paths have the shapes the kubelet's two cgroup drivers create (docs in
inferwatch.agent.collectors.cgroups); device IDs are those NVIDIA's device plugin
reports (UUIDs, indices, ``::<replica>`` for time-slicing).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.support.devices import gpu, host, mig, uuid_of
from tests.support.kubeapi import make_pod

from inferwatch.agent.collectors import cgroups
from inferwatch.agent.collectors.attribution import WorkerGpuInputs, attribute
from inferwatch.agent.collectors.kubernetes import api_settings
from inferwatch.agent.collectors.podworkers import label_name, pod_workers
from inferwatch.agent.config import KubernetesConfig, load_config
from inferwatch.errors import ConfigError

UID = "3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
CID = "a" * 64
VLLM = {
    "name": "vllm",
    "image": "vllm/vllm-openai:v0.33.0",
    "command": ["vllm", "serve"],
    "args": ["Qwen/Qwen2.5-7B-Instruct", "--port=8001"],
    "ports": [{"name": "http", "containerPort": 8001}],
}
SIDECAR = {
    "name": "log-shipper",
    "image": "fluent/fluent-bit:3.0",
    "ports": [{"containerPort": 2020}],
}


def test_a_recognised_engine_is_scraped_with_pod_labels() -> None:
    pod = make_pod(
        "chat-0", uid=UID, ip="10.1.2.3", containers=[VLLM, SIDECAR], container_ids={"vllm": CID}
    )
    workers, skipped = pod_workers(pod)
    assert skipped is None
    assert len(workers) == 1
    w = workers[0]
    assert w.spec.name == "inference/chat-0/vllm"
    assert w.spec.url == "http://10.1.2.3:8001"
    assert w.spec.engine == "vllm"
    assert dict(w.spec.labels) == {"namespace": "inference", "pod": "chat-0", "container": "vllm"}
    assert (w.pod_uid, w.container_id) == (UID, CID)


@pytest.mark.parametrize(
    ("container", "engine", "port"),
    [
        (
            {
                "name": "s",
                "image": "lmsysorg/sglang:v0.5.0",
                "args": ["python3", "-m", "sglang.launch_server"],
            },
            "sglang",
            30000,
        ),
        ({"name": "t", "image": "ghcr.io/huggingface/text-generation-inference:3.0"}, "tgi", 80),
        (
            {"name": "l", "image": "ghcr.io/ggml-org/llama.cpp:server", "args": ["--port", "9090"]},
            "llamacpp",
            9090,
        ),
        (
            {
                "name": "n",
                "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3",
                "ports": [{"containerPort": 8000}],
            },
            "nim",
            8000,
        ),
        (
            {
                "name": "x",
                "image": "example.com/custom:1",
                "command": ["tritonserver", "--model-repository=/m"],
            },
            "triton",
            8000,
        ),
    ],
)
def test_each_engine_is_recognised_with_its_port(container: dict, engine: str, port: int) -> None:
    workers, _ = pod_workers(make_pod("p", uid=UID, containers=[container]))
    assert [(w.spec.engine, w.spec.url) for w in workers] == [(engine, f"http://127.0.0.1:{port}")]


def test_auto_detect_off_needs_the_annotation() -> None:
    pod = make_pod("p", uid=UID, containers=[VLLM])
    assert pod_workers(pod, auto_detect=False)[0] == []
    pod["metadata"]["annotations"]["inferwatch.io/scrape"] = "true"
    assert [w.spec.url for w in pod_workers(pod, auto_detect=False)[0]] == ["http://127.0.0.1:8001"]


def test_annotations_choose_port_by_name_path_and_engine() -> None:
    app = {
        "name": "server",
        "image": "example.com/my-llm:2",
        "ports": [{"name": "api", "containerPort": 7000}],
    }
    pod = make_pod(
        "custom",
        uid=UID,
        containers=[SIDECAR, app],
        annotations={
            "inferwatch.io/scrape": "true",
            "inferwatch.io/port": "api",
            "inferwatch.io/path": "/v1/metrics",
            "inferwatch.io/engine": "vllm",
        },
    )
    (w,), skipped = pod_workers(pod)
    assert skipped is None
    assert (w.container, w.spec.url, w.spec.metrics_path, w.spec.engine) == (
        "server",
        "http://127.0.0.1:7000",
        "/v1/metrics",
        "vllm",
    )


def test_opt_out_wins_over_recognition() -> None:
    pod = make_pod("p", uid=UID, containers=[VLLM], annotations={"inferwatch.io/scrape": "false"})
    assert pod_workers(pod) == ([], None)


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        ({"inferwatch.io/engine": "ollama"}, "is not one of"),
        ({"inferwatch.io/port": "no-such-port"}, "no port number or container port name"),
        ({"inferwatch.io/path": "metrics"}, "does not start with /"),
        ({"inferwatch.io/container": "gone"}, "names no container"),
    ],
)
def test_a_bad_annotation_skips_the_pod_with_a_reason(annotations: dict, says: str) -> None:
    pod = make_pod(
        "p", uid=UID, containers=[VLLM], annotations={"inferwatch.io/scrape": "true", **annotations}
    )
    workers, skipped = pod_workers(pod)
    assert workers == []
    assert skipped is not None and says in skipped.reason


@pytest.mark.parametrize("phase", ["Pending", "Succeeded", "Failed"])
def test_only_running_pods_are_scraped(phase: str) -> None:
    assert pod_workers(make_pod("p", uid=UID, containers=[VLLM], phase=phase))[0] == []


def test_a_terminating_pod_is_dropped() -> None:
    pod = make_pod("p", uid=UID, containers=[VLLM])
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    assert pod_workers(pod)[0] == []


def test_pod_labels_only_from_the_allowlist() -> None:
    pod = make_pod(
        "p",
        uid=UID,
        containers=[VLLM],
        labels={"app.kubernetes.io/name": "chat", "team": "x", "pod-template-hash": "abc"},
    )
    assert "label_team" not in dict(pod_workers(pod)[0][0].spec.labels)
    (w,), _ = pod_workers(pod, pod_labels=("app.kubernetes.io/name",))
    assert dict(w.spec.labels)["label_app_kubernetes_io_name"] == "chat"
    assert label_name("app.kubernetes.io/name") == "label_app_kubernetes_io_name"


# ---------------------------------------------------------------------- cgroups

SYSTEMD_UID = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("text", "cid"),
    [
        # cgroup v2, systemd driver, containerd
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n",
            CID,
        ),
        # cgroup v2 seen from inside another cgroup namespace
        (f"0::/../../kubepods-besteffort-pod{SYSTEMD_UID}.slice/crio-{CID}.scope\n", CID),
        # cgroup v1, cgroupfs driver, Guaranteed pod
        (f"12:pids:/kubepods/pod{UID}/{CID}\n11:memory:/kubepods/pod{UID}/{CID}\n", CID),
        # cgroup v1, systemd driver, docker
        (
            f"1:name=systemd:/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/docker-{CID}.scope\n",
            CID,
        ),
        # the pod's own cgroup (no container)
        (f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice\n", None),
    ],
)
def test_cgroup_paths_name_pod_and_container(text: str, cid: str | None) -> None:
    assert cgroups.parse_cgroup(text) == cgroups.PodProcess(UID, cid)


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/containerd.service\n",
        "0::/user.slice/user-1000.slice/session-2.scope\n",
        "",
    ],
)
def test_processes_outside_pods_have_no_pod(text: str) -> None:
    assert cgroups.parse_cgroup(text) is None


def _proc(root: Path, pid: int, ppid: int, cgroup: str) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "cgroup").write_text(cgroup)
    (d / "stat").write_text(f"{pid} (python3 (x) y) S {ppid} {pid} {pid} 0 -1\n")


def test_scan_finds_pods_and_container_roots(tmp_path: Path) -> None:
    line = f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n"
    _proc(tmp_path, 900, 1, line)  # the container's first process; its parent is the shim
    _proc(tmp_path, 901, 900, line)
    _proc(tmp_path, 950, 1, "0::/system.slice/kubelet.service\n")
    (tmp_path / "self").mkdir()
    found = cgroups.scan(str(tmp_path))
    assert sorted(found) == [900, 901]
    assert cgroups.container_roots(found, str(tmp_path)) == {(UID, CID): 900}
    assert cgroups.pid_workers(found, {(UID, CID): "w"}, {}) == {900: "w", 901: "w"}
    assert cgroups.container_id("containerd://" + CID.upper()) == CID


# ---------------------------------------------------------------------- device IDs


def _alloc(ids: tuple[str, ...], devices: list, **kw: object) -> list[str]:
    answer = attribute(
        [WorkerGpuInputs("w", allocated=ids), WorkerGpuInputs("other")],
        devices,
        pid_workers={},
        own_env={},
        **kw,  # type: ignore[arg-type]
    )["w"]
    assert answer.source == "pod_resources", answer
    return [d.uuid for d in answer.devices]


def test_pod_resources_uuids_indices_and_time_slicing_replicas() -> None:
    devices = host(4)
    assert _alloc((uuid_of(2),), devices) == [uuid_of(2)]
    assert _alloc(("1", "3"), devices) == [uuid_of(1), uuid_of(3)]
    # time-slicing: each replica is the GPU, named once
    assert _alloc((f"{uuid_of(0)}::0", f"{uuid_of(0)}::3"), devices) == [uuid_of(0)]


def test_pod_resources_mig_devices() -> None:
    devices = [gpu(0, mig_mode="enabled"), mig(0, 1, "1g.18gb"), mig(0, 2, "3g.71gb")]
    assert _alloc((devices[2].uuid,), devices) == [devices[2].uuid]


def test_pod_processes_come_before_pod_resources() -> None:
    devices = [gpu(0, pids=[4242]), gpu(1)]
    answer = attribute(
        [WorkerGpuInputs("w", allocated=(uuid_of(1),)), WorkerGpuInputs("other")],
        devices,
        pid_workers={},
        own_env={},
        pod_pid_workers={4242: "w"},
    )["w"]
    assert (answer.source, [d.uuid for d in answer.devices]) == ("pod_processes", [uuid_of(0)])


def test_an_unknown_device_id_is_a_note_not_a_guess() -> None:
    answer = attribute(
        [WorkerGpuInputs("w", allocated=("GPU-nope",)), WorkerGpuInputs("o")],
        host(1),
        pid_workers={},
        own_env={},
    )["w"]
    assert answer.source is None
    assert any("names no device" in n for n in answer.notes)


# ---------------------------------------------------------------------- configuration


def test_kubernetes_section_parses(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "kubernetes:\n  node_name: n1\n  pod_labels: [app]\n  pod_resources_socket: null\n  interval: 10s\n"
    )
    k = load_config(str(cfg), env={}).kubernetes
    assert k == KubernetesConfig(
        node_name="n1", pod_labels=("app",), pod_resources_socket=None, interval=10.0
    )
    cfg.write_text("kubernetes: {}\n")
    assert load_config(str(cfg), env={}).kubernetes == KubernetesConfig()
    assert load_config(None, env={}).kubernetes is None


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('kubernetes:\n  pod_labels: ["Bad Label"]\n', "kubernetes.pod_labels[0]"),
        ("kubernetes:\n  nodes: x\n", "kubernetes.nodes"),
        ("kubernetes:\n  api_url: ftp://x\n", "kubernetes.api_url"),
        ("kubernetes:\n  auto_detect: sometimes\n", "kubernetes.auto_detect"),
    ],
)
def test_bad_kubernetes_values_name_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg), env={})
    assert str(cfg) in str(err.value) and key in str(err.value)


def test_in_cluster_settings_from_the_environment(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret-token-value")
    cfg = KubernetesConfig(token_file=str(token), ca_file=None)
    env = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "NODE_NAME": "gpu-7",
    }
    s = api_settings(cfg, env, "f.yaml")
    assert (s.url, s.node) == ("https://10.96.0.1:443", "gpu-7")
    assert (
        api_settings(cfg, {**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, "f").url
        == "https://[fd00::1]:443"
    )
    with pytest.raises(ConfigError, match=r"kubernetes\.node_name"):
        api_settings(cfg, {k: v for k, v in env.items() if k != "NODE_NAME"}, "f.yaml")
    with pytest.raises(ConfigError, match=r"kubernetes\.api_url"):
        api_settings(cfg, {"NODE_NAME": "n"}, "f.yaml")
    with pytest.raises(ConfigError, match=r"kubernetes\.token_file") as err:
        api_settings(
            KubernetesConfig(token_file=str(tmp_path / "none"), ca_file=None), env, "f.yaml"
        )
    assert "secret-token-value" not in str(err.value)


def test_skipped_pods_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from inferwatch.agent.collectors.kubernetes import ApiSettings, KubernetesSource

    source = KubernetesSource(
        KubernetesConfig(pod_resources_socket=None, proc_root=None),
        ApiSettings("http://127.0.0.1:1", "n", None, None),
        on_workers=lambda ws: None,
    )
    pod = make_pod(
        "p",
        uid=UID,
        containers=[VLLM],
        annotations={"inferwatch.io/scrape": "true", "inferwatch.io/engine": "ollama"},
    )
    with caplog.at_level(logging.WARNING):
        source.workers_of([pod])
        source.workers_of([pod])
    assert len([r for r in caplog.records if "inference/p not scraped" in r.getMessage()]) == 1


# ---------------------------------------------------------------------- the process source


async def test_process_series_of_a_discovered_worker_carry_its_pod_labels() -> None:
    import os

    from inferwatch.agent.collectors.process import ProcessSource
    from inferwatch.agent.config import WorkerSpec

    pod_labels = (("namespace", "inference"), ("pod", "chat-0"), ("container", "vllm"))
    spec = WorkerSpec(
        "inference/chat-0/vllm", "http://10.0.0.9:8000", pid=os.getpid(), labels=pod_labels
    )
    source = ProcessSource([spec], interval=1)
    await source.refresh()
    families = {f.name: f for f in source.families()}
    for name in (
        "inferwatch_worker_info",
        "inferwatch_worker_cpu_seconds",
        "inferwatch_worker_resident_memory_bytes",
    ):
        (sample,) = families[name].samples
        assert sample.labels["worker"] == spec.name
        assert {k: sample.labels[k] for k, _ in pod_labels} == dict(pod_labels), name
    assert (
        families["inferwatch_worker_cpu_seconds"].samples[0].name
        == "inferwatch_worker_cpu_seconds_total"
    )
    # the pod goes: its series go at once, before the next pass
    source.set_workers([])
    assert all(not f.samples for f in source.families())
    assert source.pid_workers() == {}


def test_the_scanner_reads_only_new_processes(tmp_path: Path) -> None:
    import shutil

    line = f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope\n"
    _proc(tmp_path, 900, 1, line)
    _proc(tmp_path, 950, 1, "0::/system.slice/kubelet.service\n")
    scanner = cgroups.Scanner(str(tmp_path))
    assert sorted(scanner.scan()) == [900]
    assert scanner.reads == 2
    assert sorted(scanner.scan()) == [900] and scanner.reads == 2, "nothing new: nothing read"
    _proc(tmp_path, 901, 900, line)
    assert sorted(scanner.scan()) == [900, 901] and scanner.reads == 3
    # PID 950 ends and is reused by a process of the pod: another /proc entry, read again
    shutil.rmtree(tmp_path / "950")
    _proc(tmp_path, 950, 900, line)
    assert sorted(scanner.scan()) == [900, 901, 950] and scanner.reads == 4
    # a known root is kept without reading; a root that is gone is found again
    found = scanner.scan()
    assert cgroups.container_roots(found, str(tmp_path), {(UID, CID)}, {(UID, CID): 901}) == {
        (UID, CID): 901
    }
    shutil.rmtree(tmp_path / "900")
    found = scanner.scan()
    assert cgroups.container_roots(found, str(tmp_path), {(UID, CID)}, {(UID, CID): 900}) == {
        (UID, CID): 901
    }
