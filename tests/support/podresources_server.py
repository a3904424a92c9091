"""A kubelet pod-resources server for tests: the real v1 proto, on a Unix socket.

Serves ``v1.PodResourcesLister/List`` with the messages generated from
agent/inferwatch/agent/kubelet/api.proto (grpc's generic handler and the message
classes' (de)serializers, as the client calls it), with the answer the test sets;
the service's other methods answer UNIMPLEMENTED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from inferwatch.agent.collectors.podresources import LIST_METHOD
from inferwatch.agent.kubelet import api_pb2

#: (namespace, pod) -> container -> [(resource name, device IDs)]
Layout = Mapping[tuple[str, str], Mapping[str, Sequence[tuple[str, Sequence[str]]]]]


def response(layout: Layout) -> api_pb2.ListPodResourcesResponse:
    pods = []
    for (namespace, pod), containers in layout.items():
        pods.append(
            api_pb2.PodResources(
                name=pod,
                namespace=namespace,
                containers=[
                    api_pb2.ContainerResources(
                        name=name,
                        devices=[
                            api_pb2.ContainerDevices(
                                resource_name=resource,
                                device_ids=list(ids),
                                topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=0)]),
                            )
                            for resource, ids in devices
                        ],
                        cpu_ids=[2, 3],
                    )
                    for name, devices in containers.items()
                ],
            )
        )
    return api_pb2.ListPodResourcesResponse(pod_resources=pods)


class PodResourcesServer:
    def __init__(self, socket_path: Path, layout: Layout | None = None) -> None:
        self.socket_path = socket_path
        self.layout: Layout = layout or {}
        self.calls = 0
        self.fail: grpc.StatusCode | None = None
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        service, method = LIST_METHOD.strip("/").split("/")
        handler = grpc.unary_unary_rpc_method_handler(
            self.List,
            request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
            response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString,
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {method: handler}),)
        )
        self.server.add_insecure_port(f"unix://{socket_path}")
        self.server.start()

    def List(self, request: object, context: grpc.ServicerContext) -> object:
        self.calls += 1
        if self.fail is not None:
            context.abort(self.fail, "the test says no")
        return response(self.layout)

    def stop(self) -> None:
        self.server.stop(grace=None)
