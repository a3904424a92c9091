"""Discovery end to end: no worker list, the real agent, a real Prometheus.

The agent runs as `inferwatch run` with a `kubernetes:` section and nothing
else about its workers. Around it: the Kubernetes API stand-in (list/watch JSON,
tests/support/kubeapi.py), the kubelet's pod-resources API over the real proto
on a Unix socket (tests/support/podresources_server.py), two vLLM expositions
on loopback standing in for the pods' containers, two fake GPUs whose process
list names a host PID, and a /proc tree whose cgroup file puts that PID in a
pod. Prometheus scrapes the agent.

- chat-0 (recognised by its vLLM image) holds GPU 1 per pod-resources;
- embed-0 (opted in by annotations) has a process on GPU 0, found through
  its cgroup (time-slicing: pod-resources would not tell);
- a pod that is not an engine, and one that opts out, are not scraped;
- pods that leave take their series with them; a new one is picked up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.support.agentrun import AgentRun
from tests.support.kubeapi import KubeApi, make_pod
from tests.support.podresources_server import PodResourcesServer
from tests.support.proc import (
    Prometheus,
    http_get,
    running,
    wait_until,
)
from tests.support.stubworker import StubWorker
from tests.support.vllm_text import EngineValues, render

from inferwatch.sim.fakegpu import default_uuid
from inferwatch.sim.gpustate import GIB, SimGpuProcess, SimGpuState, write_state

NODE = "gpu-node-1"
#: above any pid_max Linux allows by default (4194304 at most): no real process has it
HOST_PID = 4_194_000 + 17
UIDS = {
    "chat-0": "0b7f6c2e-1d3a-4c5b-8e9f-0a1b2c3d4e5f",
    "embed-0": "5e4d3c2b-1a09-4f8e-9d7c-6b5a49382716",
    "chat-1": "9a8b7c6d-5e4f-4a3b-9c2d-1e0f2a3b4c5d",
    "batch-0": "11111111-2222-4333-8444-555555555555",
    "quiet-0": "66666666-7777-4888-9999-000000000000",
    "elsewhere": "77777777-8888-4999-8aaa-bbbbbbbbbbbb",
}
CIDS = {name: f"{i:x}" * 64 for i, name in enumerate(UIDS, start=1)}


def vllm_pod(name: str, port: int) -> dict:
    return make_pod(
        name,
        uid=UIDS[name],
        node=NODE,
        containers=[
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.33.0",
                "command": ["vllm", "serve"],
                "args": ["Qwen/Qwen2.5-7B-Instruct", f"--port={port}"],
            },
            {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"},
        ],
        container_ids={"vllm": CIDS[name]},
        labels={"app.kubernetes.io/name": "chat"},
    )


def embed_pod(port: int) -> dict:
    return make_pod(
        "embed-0",
        uid=UIDS["embed-0"],
        node=NODE,
        containers=[
            {"name": "server", "image": "registry.example/embedder:4", "ports": [{"name": "api", "containerPort": port}]}
        ],
        container_ids={"server": CIDS["embed-0"]},
        annotations={"inferwatch.io/scrape": "true", "inferwatch.io/port": "api", "inferwatch.io/engine": "vllm"},
    )  # fmt: skip


def exposition(model: str) -> str:
    return render("v1", [EngineValues(running=2, waiting=1, kv=0.3)], model=model)


def agent_series(url: str) -> str:
    status, body, _ = http_get(f"{url}/metrics")
    assert status == 200
    return body.decode()


@pytest.mark.slow
def test_a_daemonset_agent_finds_and_attributes_its_nodes_pods(tmp_path: Path) -> None:
    chat, embed, chat1 = (StubWorker(lambda m=m: exposition(m)) for m in ("qwen", "bge", "qwen"))  # type: ignore[misc]
    api = KubeApi()
    token = tmp_path / "token"
    token.write_text(api.token)
    kubelet = PodResourcesServer(
        tmp_path / "kubelet.sock",
        {
            ("inference", "chat-0"): {"vllm": [("nvidia.com/gpu", [default_uuid(1)])]},
            ("inference", "embed-0"): {"server": [("nvidia.com/gpu", [f"{default_uuid(0)}::2"])]},
        },
    )
    state = tmp_path / "gpus"
    write_state(state, 0, SimGpuState(processes=[SimGpuProcess(pid=HOST_PID, used_bytes=2 * GIB)]))
    write_state(state, 1, SimGpuState())
    proc = tmp_path / "proc" / str(HOST_PID)
    proc.mkdir(parents=True)
    slice_uid = UIDS["embed-0"].replace("-", "_")
    (proc / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{slice_uid}.slice"
        f"/cri-containerd-{CIDS['embed-0']}.scope\n"
    )
    api.add(vllm_pod("chat-0", chat.port))
    api.add(embed_pod(embed.port))
    api.add(
        make_pod(
            "batch-0",
            uid=UIDS["batch-0"],
            node=NODE,
            containers=[{"name": "job", "image": "busybox"}],
        )
    )
    quiet = vllm_pod("quiet-0", chat.port)
    quiet["metadata"]["annotations"]["inferwatch.io/scrape"] = "false"
    api.add(quiet)
    api.add(
        vllm_pod("elsewhere", chat.port) | {"spec": {"nodeName": "gpu-node-2", "containers": []}}
    )

    config = {
        "collect_interval": "0.5s",
        "stats_window": "10s",
        "gpu": {"backend": "fake", "fake_count": 2, "fake_state_dir": str(state)},
        "kubernetes": {
            "api_url": api.url,
            "node_name": NODE,
            "token_file": str(token),
            "ca_file": None,
            "pod_resources_socket": str(kubelet.socket_path),
            "proc_root": str(tmp_path / "proc"),
            "pod_labels": ["app.kubernetes.io/name"],
            "interval": "0.5s",
        },
    }
    agent = AgentRun(tmp_path, config=config, ready=None)
    port, url = agent.port, agent.url
    prom_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "inferwatch", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        ],
    }
    try:
        agent.wait_for("/readyz", 60)
        prom = Prometheus(tmp_path, yaml.safe_dump(prom_config))
        with running(prom):
            chat_sel = '{namespace="inference",pod="chat-0",container="vllm",worker="inference/chat-0/vllm"}'
            embed_sel = '{namespace="inference",pod="embed-0",container="server"}'
            wait_until(
                lambda: prom.scalar(f"inferwatch_target_up{chat_sel}") == 1,
                60,
                message="chat-0 scraped",
            )
            wait_until(
                lambda: prom.scalar(f"inferwatch_target_up{embed_sel}") == 1,
                60,
                message="embed-0 scraped",
            )
            assert prom.scalar(f'inferwatch_queue_depth{chat_sel[:-1]},model="qwen"}}') == 1
            # an allow-listed pod label rides along; the rest stay off
            assert prom.query(
                'inferwatch_target_up{pod="chat-0",label_app_kubernetes_io_name="chat"}'
            )
            # only the engines of this node, not the job, not the opted-out pod
            pods = {r["metric"]["pod"] for r in prom.query("inferwatch_target_up")}
            assert pods == {"chat-0", "embed-0"}
            assert prom.scalar(f'inferwatch_kubernetes_workers{{node="{NODE}"}}') == 2
            assert prom.query(f'inferwatch_agent_info{{node="{NODE}"}}')

            def gpu_of(pod: str) -> set[str]:
                return {
                    r["metric"]["uuid"]
                    for r in prom.query(f'inferwatch_worker_gpu_info{{pod="{pod}"}}')
                }

            wait_until(
                lambda: gpu_of("chat-0") == {default_uuid(1)},
                60,
                message="chat-0 on GPU 1 (pod-resources)",
            )
            wait_until(
                lambda: gpu_of("embed-0") == {default_uuid(0)},
                60,
                message="embed-0 on GPU 0 (cgroups)",
            )
            info = prom.query('inferwatch_worker_gpu_info{pod="embed-0"}')[0]["metric"]
            assert (info["namespace"], info["container"], info["worker"]) == (
                "inference",
                "server",
                "inference/embed-0/server",
            )
            # the GPU process series names the pod's worker too
            assert prom.query(
                f'inferwatch_gpu_process_memory_used_bytes{{pid="{HOST_PID}",worker="inference/embed-0/server"}}'
            )
            log = agent.log()
            assert "from the kubelet's pod-resources allocation" in log
            assert "joined to pods through cgroups" in log

            # churn: chat-0 goes, chat-1 comes
            api.delete(UIDS["chat-0"])
            wait_until(
                lambda: 'pod="chat-0"' not in agent_series(url), 30, message="chat-0's series gone"
            )
            api.add(vllm_pod("chat-1", chat1.port))
            wait_until(
                lambda: prom.scalar('inferwatch_target_up{pod="chat-1"}') == 1,
                60,
                message="chat-1 scraped",
            )
            wait_until(
                lambda: not prom.query('inferwatch_target_up{pod="chat-0"}'),
                30,
                message="chat-0 stale in prometheus",
            )
            assert prom.scalar(f'inferwatch_kubernetes_workers{{node="{NODE}"}}') == 2
        assert api.token not in agent.log()
    finally:
        agent.stop()
        kubelet.stop()
        api.stop()
        for stub in (chat, embed, chat1):
            stub.stop()
