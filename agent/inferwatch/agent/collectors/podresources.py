"""The kubelet's pod-resources API: which device IDs each container was given.

``v1.PodResourcesLister/List`` on the kubelet's Unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``, Kubernetes docs "Device
Plugins", section "Monitoring device plugin resources") lists every pod of the
node with, per container, the IDs a device plugin allocated for each extended
resource. NVIDIA's device plugin names its resources ``nvidia.com/gpu`` and,
with a MIG strategy, ``nvidia.com/mig-<profile>``; its IDs are GPU or MIG UUIDs
(the default ``deviceIDStrategy: uuid``), or NVML indices (``index``), and a
time-sliced GPU's replicas carry a ``::<n>`` suffix (NVIDIA k8s-device-plugin
README, "Shared Access to GPUs"). Turning those IDs into devices is pure and
lives in :mod:`inferwatch.agent.collectors.attribution`.

grpcio and protobuf come with ``pip install 'inferwatch[kubernetes]'`` and are
imported only when this client is built (``kubernetes:`` in the configuration).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: the one method asked: ``/<package>.<service>/<method>`` of api.proto
LIST_METHOD = "/v1.PodResourcesLister/List"
#: resource names whose device IDs are GPUs (``nvidia.com/gpu.shared``: time-slicing with
#: renameByDefault; ``nvidia.com/mig-`` is a prefix for every MIG profile)
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-")


@dataclass(frozen=True)
class ContainerKey:
    namespace: str
    pod: str
    container: str


class PodResourcesError(Exception):
    """The kubelet could not be asked (socket missing, permission, time-out)."""


def is_gpu_resource(name: str, prefixes: tuple[str, ...] = GPU_RESOURCES) -> bool:
    return any(name == p or (p.endswith("-") and name.startswith(p)) for p in prefixes)


def allocations(
    response: Any, prefixes: tuple[str, ...] = GPU_RESOURCES
) -> dict[ContainerKey, tuple[str, ...]]:
    """Containers and their GPU device IDs from a ``ListPodResourcesResponse``."""
    out: dict[ContainerKey, tuple[str, ...]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            ids: list[str] = []
            for devices in container.devices:
                if is_gpu_resource(devices.resource_name, prefixes):
                    ids.extend(i for i in devices.device_ids if i not in ids)
            if ids:
                out[ContainerKey(pod.namespace, pod.name, container.name)] = tuple(ids)
    return out


class PodResourcesClient:
    """Asks the kubelet's pod-resources socket for the GPU allocations of its pods."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout: float = 5.0) -> None:
        import grpc

        from inferwatch.agent.kubelet import api_pb2

        self.socket_path = socket_path
        self.timeout = timeout
        self._grpc = grpc
        self._request = api_pb2.ListPodResourcesRequest  # type: ignore[attr-defined]
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        # the channel's own unary call with the message classes' (de)serializers: all a
        # generated service stub would add for the one method asked
        self._list = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=self._request.SerializeToString,
            response_deserializer=api_pb2.ListPodResourcesResponse.FromString,  # type: ignore[attr-defined]
        )

    def list_sync(self) -> dict[ContainerKey, tuple[str, ...]]:
        try:
            response = self._list(self._request(), timeout=self.timeout)
        except self._grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = code.name if code is not None else "error"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise PodResourcesError(
                f"pod-resources List on {self.socket_path} failed: {name}: {details}"
            ) from None
        return allocations(response)

    async def list(self) -> dict[ContainerKey, tuple[str, ...]]:
        """The allocations now; the blocking gRPC call runs in a thread."""
        return await asyncio.to_thread(self.list_sync)

    def close(self) -> None:
        self._channel.close()
