"""A sample device plugin for the tests: real gRPC over unix sockets, API v1beta1.

It advertises ``example.com/widget`` devices (``widget-0``, ``widget-1`` by default),
answers ``Allocate`` with the variable ``WIDGET_IDS=<ids, comma separated>``, prefers
the highest ids in ``GetPreferredAllocation`` and records every call. As a process
(``python -m tests.deviceplugin_sample --dir <root>/device-plugins``) it registers once
the agent's socket is there and registers again whenever the agent recreates it (an
agent restart), as plugins do.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from concurrent import futures
from typing import Sequence

import grpc

from apiserver_min.api import names
from cri.deviceplugin import api_pb2 as pb
from cri.deviceplugin import api_pb2_grpc as pb_grpc

RESOURCE = "example.com/widget"
ENV_NAME = "WIDGET_IDS"


class SamplePlugin(pb_grpc.DevicePluginServicer):
    def __init__(
        self,
        socket_dir: str,
        *,
        resource: str = RESOURCE,
        ids: Sequence[str] = ("widget-0", "widget-1"),
        numa: dict[str, int] | None = None,
        endpoint: str = "widget.sock",
        preferred: bool = True,
        pre_start: bool = False,
        version: str = "v1beta1",
    ) -> None:
        self.socket_dir = socket_dir
        self.resource = resource
        self.endpoint = endpoint
        self.version = version
        self.options = pb.DevicePluginOptions(
            pre_start_required=pre_start, get_preferred_allocation_available=preferred
        )
        self.health = {i: "Healthy" for i in ids}
        self.numa = dict(numa or {})
        self.calls: list[tuple[str, list[str]]] = []
        self._cond = threading.Condition()
        self._generation = 0
        self._stopped = False
        self._server: grpc.Server | None = None

    @property
    def socket_path(self) -> str:
        return os.path.join(self.socket_dir, self.endpoint)

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._stopped = False
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def register(self, timeout: float = 5.0) -> None:
        agent = os.path.join(self.socket_dir, names.DEVICE_PLUGIN_AGENT_SOCKET)
        with grpc.insecure_channel(f"unix://{agent}") as channel:
            pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=self.version, endpoint=self.endpoint, resource_name=self.resource, options=self.options
                ),
                timeout=timeout,
            )

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass

    def set_health(self, device_id: str, health: str) -> None:
        with self._cond:
            self.health[device_id] = health
            self._generation += 1
            self._cond.notify_all()

    # --- the DevicePlugin service -----------------------------------------------------------

    def _devices(self) -> list[pb.Device]:
        out = []
        for i, h in sorted(self.health.items()):
            d = pb.Device(ID=i, health=h)
            if i in self.numa:
                d.topology.nodes.add(ID=self.numa[i])
            out.append(d)
        return out

    def GetDevicePluginOptions(self, request, context):
        return self.options

    def ListAndWatch(self, request, context):
        seen = -1
        while context.is_active():
            with self._cond:
                if self._stopped:
                    return
                if seen == self._generation:
                    self._cond.wait(0.5)
                    continue
                seen = self._generation
                devices = self._devices()
            yield pb.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        responses = []
        for req in request.container_requests:
            chosen = list(req.must_include_deviceIDs)
            for i in sorted(req.available_deviceIDs, reverse=True):
                if len(chosen) >= req.allocation_size:
                    break
                if i not in chosen:
                    chosen.append(i)
            self.calls.append(("GetPreferredAllocation", chosen))
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            self.calls.append(("Allocate", ids))
            unknown = [i for i in ids if i not in self.health]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown devices {unknown}")
            responses.append(
                pb.ContainerAllocateResponse(
                    envs={ENV_NAME: ",".join(ids)},
                    annotations={"example.com/widgets": ",".join(ids)},
                )
            )
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        self.calls.append(("PreStartContainer", list(request.devices_ids)))
        return pb.PreStartContainerResponse()


def _identity(path: str) -> tuple[int, int] | None:
    """Inode and change time: a recreated socket differs even when its inode number is reused."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.deviceplugin_sample")
    parser.add_argument("--dir", required=True, help="the agent's device plugin directory")
    parser.add_argument("--resource", default=RESOURCE)
    parser.add_argument("--count", type=int, default=2)
    args = parser.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    plugin = SamplePlugin(args.dir, resource=args.resource, ids=[f"widget-{i}" for i in range(args.count)])
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    agent_socket = os.path.join(args.dir, names.DEVICE_PLUGIN_AGENT_SOCKET)
    registered_with: tuple[int, int] | None = None
    deadline = time.monotonic() + 3600  # a test helper never outlives an hour
    while not done.is_set() and time.monotonic() < deadline:
        inode = _identity(agent_socket)
        if inode is not None and inode != registered_with:
            # A new agent (or its first start) removed our socket: serve again and register.
            plugin.stop()
            plugin.start()
            try:
                plugin.register()
            except grpc.RpcError as exc:
                print(f"registration failed: {exc.details()}", file=sys.stderr, flush=True)
            else:
                registered_with = inode
                print(f"registered {args.resource} with the agent", flush=True)
        done.wait(0.2)
    plugin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
