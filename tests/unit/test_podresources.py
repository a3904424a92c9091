"""The kubelet pod-resources client against a server of the real v1 proto on a Unix socket.

The server (tests/support/podresources_server.py) is built from the messages module
generated from agent/inferwatch/agent/kubelet/api.proto, and the first test holds that
committed module to the .proto: grpc_tools compiles it again and the file
descriptors must be the same.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from tests.support.podresources_server import PodResourcesServer
from tests.support.proc import REPO

from inferwatch.agent.collectors.podresources import (
    LIST_METHOD,
    ContainerKey,
    PodResourcesClient,
    PodResourcesError,
    is_gpu_resource,
)
from inferwatch.agent.kubelet import api_pb2

ROOT = REPO
GPU0 = "GPU-8a1b2c3d-0000-4000-8000-000000000000"
MIG1 = "MIG-5d6e7f80-1111-5222-8333-444455556666"


def test_committed_modules_are_the_proto_compiled(tmp_path: Path) -> None:
    out = tmp_path / "set.pb"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'agent'}", f"--descriptor_set_out={out}",
         str(ROOT / "agent/inferwatch/agent/kubelet/api.proto")],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in fresh.message_type:  # protoc fills json_name; the Python modules leave it out
        for f in message.field:
            f.ClearField("json_name")
    committed = descriptor_pb2.FileDescriptorProto.FromString(api_pb2.DESCRIPTOR.serialized_pb)
    assert committed == fresh, "regenerate the modules: see the comment in api.proto"
    assert fresh.package == "v1"
    assert [m.name for m in fresh.service[0].method] == ["List", "GetAllocatableResources", "Get"]
    # the client names the method itself (no generated stub): the proto's path for it
    assert f"/{fresh.package}.{fresh.service[0].name}/List" == LIST_METHOD


@pytest.fixture
def server(tmp_path: Path):  # type: ignore[no-untyped-def]
    srv = PodResourcesServer(tmp_path / "kubelet.sock")
    yield srv
    srv.stop()


def test_list_gives_each_containers_gpu_ids(server: PodResourcesServer) -> None:
    server.layout = {
        ("inference", "chat-0"): {
            "vllm": [("nvidia.com/gpu", [GPU0, "GPU-99999999-0000-4000-8000-000000000001"])],
            "sidecar": [],
        },
        ("inference", "embed-0"): {"server": [("nvidia.com/mig-1g.18gb", [MIG1])]},
        ("shared", "ts-0"): {"app": [("nvidia.com/gpu", [f"{GPU0}::3"])]},
        ("other", "fpga"): {"app": [("example.com/fpga", ["fpga-0"])]},
    }
    client = PodResourcesClient(str(server.socket_path))
    try:
        got = client.list_sync()
    finally:
        client.close()
    assert got == {
        ContainerKey("inference", "chat-0", "vllm"): (
            GPU0,
            "GPU-99999999-0000-4000-8000-000000000001",
        ),
        ContainerKey("inference", "embed-0", "server"): (MIG1,),
        ContainerKey("shared", "ts-0", "app"): (f"{GPU0}::3",),
    }
    assert server.calls == 1


async def test_list_runs_off_the_event_loop(server: PodResourcesServer) -> None:
    server.layout = {("a", "p"): {"c": [("nvidia.com/gpu", ["0"])]}}
    client = PodResourcesClient(str(server.socket_path))
    try:
        assert await client.list() == {ContainerKey("a", "p", "c"): ("0",)}
    finally:
        client.close()


def test_a_failing_kubelet_is_one_error_naming_the_socket(server: PodResourcesServer) -> None:
    server.fail = grpc.StatusCode.PERMISSION_DENIED
    client = PodResourcesClient(str(server.socket_path), timeout=5)
    try:
        with pytest.raises(PodResourcesError) as err:
            client.list_sync()
    finally:
        client.close()
    assert str(server.socket_path) in str(err.value) and "PERMISSION_DENIED" in str(err.value)


def test_a_missing_socket_is_an_error_not_a_hang(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "absent.sock"), timeout=2)
    try:
        with pytest.raises(PodResourcesError, match=r"UNAVAILABLE|DEADLINE_EXCEEDED"):
            client.list_sync()
    finally:
        client.close()


def test_gpu_resource_names() -> None:
    assert is_gpu_resource("nvidia.com/gpu")
    assert is_gpu_resource("nvidia.com/mig-3g.71gb")
    assert is_gpu_resource("nvidia.com/gpu.shared")
    assert not is_gpu_resource("example.com/fpga")
    assert not is_gpu_resource("nvidia.com/gpux")
