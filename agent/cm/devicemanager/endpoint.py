"""One registered device plugin, seen from the agent: its gRPC client and its state.

``ListAndWatch`` is a stream the agent reads for as long as the plugin lives (over an
asyncio channel); ``Allocate`` and ``GetPreferredAllocation`` are answered while a pod
is admitted, which the agent decides synchronously, so they go over a blocking channel
with a deadline; ``PreStartContainer`` runs in a worker thread before a container starts.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import grpc

from cri.deviceplugin import api_pb2 as pb
from cri.deviceplugin import api_pb2_grpc as pb_grpc

__all__ = ["PluginEndpoint", "EndpointError", "RPC_TIMEOUT"]

log = logging.getLogger(__name__)

RPC_TIMEOUT = 10.0  # seconds for Allocate, GetPreferredAllocation, PreStartContainer


class EndpointError(Exception):
    pass


def _rpc_message(exc: grpc.RpcError) -> str:
    details = exc.details() if hasattr(exc, "details") else ""
    code = exc.code() if hasattr(exc, "code") else None
    return f"rpc error: code = {getattr(code, 'name', code)} desc = {details or exc}"


class PluginEndpoint:
    """A plugin's socket and options; ``stopped_at`` is set (monotonic seconds) once the
    plugin went away, or at once for an endpoint restored from the checkpoint."""

    def __init__(self, resource: str, socket_path: str | None, options: pb.DevicePluginOptions | None) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self.options = options or pb.DevicePluginOptions()
        self.stopped_at: float | None = None
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.DevicePluginStub | None = None
        if socket_path is not None:
            self._channel = grpc.insecure_channel(f"unix://{socket_path}")
            self._stub = pb_grpc.DevicePluginStub(self._channel)

    @classmethod
    def stopped(cls, resource: str, at: float) -> "PluginEndpoint":
        """A placeholder for a resource known from the checkpoint whose plugin has not registered yet."""
        ep = cls(resource, None, None)
        ep.stopped_at = at
        return ep

    @property
    def live(self) -> bool:
        return self.stopped_at is None and self._stub is not None

    def _live_stub(self) -> pb_grpc.DevicePluginStub:
        if self._stub is None or self.stopped_at is not None:
            raise EndpointError(f"endpoint {self.resource} has been stopped")
        return self._stub

    async def watch(self, on_devices: Callable[[list[pb.Device]], None]) -> None:
        """Read ListAndWatch until the stream ends; raises grpc.aio.AioRpcError when the plugin fails."""
        assert self.socket_path is not None
        async with grpc.aio.insecure_channel(f"unix://{self.socket_path}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            async for response in stub.ListAndWatch(pb.Empty()):
                on_devices(list(response.devices))

    def _call(self, method: str, request: Any) -> Any:
        """One unary call with the deadline; gRPC failures become EndpointError."""
        try:
            return getattr(self._live_stub(), method)(request, timeout=RPC_TIMEOUT)
        except grpc.RpcError as exc:
            raise EndpointError(_rpc_message(exc)) from None

    def _single(self, method: str, response: Any) -> Any:
        """The one container response a one-container request must get."""
        if len(response.container_responses) != 1:
            raise EndpointError(
                f"the device plugin of {self.resource} answered {method} with "
                f"{len(response.container_responses)} container responses for 1 request"
            )
        return response.container_responses[0]

    def allocate(self, device_ids: Sequence[str]) -> pb.ContainerAllocateResponse:
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(device_ids))])
        return self._single("Allocate", self._call("Allocate", request))

    def preferred_allocation(self, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
        one = pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=list(available), must_include_deviceIDs=list(must_include), allocation_size=size
        )
        request = pb.PreferredAllocationRequest(container_requests=[one])
        method = "GetPreferredAllocation"
        return list(self._single(method, self._call(method, request)).deviceIDs)

    def pre_start_container(self, device_ids: Sequence[str]) -> None:
        self._call("PreStartContainer", pb.PreStartContainerRequest(devices_ids=list(device_ids)))

    def stop(self, at: float) -> None:
        if self.stopped_at is None:
            self.stopped_at = at
        self.close()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None
