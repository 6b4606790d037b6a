"""The committed CRI stubs are what cri/api.proto generates, and the proto keeps
upstream's wire facts."""

from __future__ import annotations

import pytest

from cri import api_pb2 as pb
from cri import generate

pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) regenerates the stubs")


def test_committed_stubs_are_fresh():
    stale = generate.stale_files()
    assert not stale, "cri/ stubs are stale; run `python -m cri.generate` and commit the result:\n" + "\n".join(
        f"--- {name}\n{diff}" for name, diff in stale.items()
    )


def test_generation_is_reproducible(tmp_path):
    first = {p.name: p.read_bytes() for p in generate.generate(tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in generate.generate(tmp_path / "b")}
    assert first == second
    assert set(first) == {"api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi"}


def test_grpc_module_imports_the_package_module():
    text = (generate.PACKAGE_DIR / "api_pb2_grpc.py").read_text()
    assert "from cri import api_pb2" in text
    assert "\nimport api_pb2" not in text


def test_package_and_services():
    assert pb.DESCRIPTOR.package == "runtime.v1"
    runtime = pb.DESCRIPTOR.services_by_name["RuntimeService"].methods_by_name
    images = pb.DESCRIPTOR.services_by_name["ImageService"].methods_by_name
    for method in (
        "Version",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "PodSandboxStatus",
        "ListPodSandbox",
        "CreateContainer",
        "StartContainer",
        "StopContainer",
        "RemoveContainer",
        "ListContainers",
        "ContainerStatus",
        "UpdateContainerResources",
        "ReopenContainerLog",
        "ExecSync",
        "Exec",
        "Attach",
        "PortForward",
        "ContainerStats",
        "ListContainerStats",
        "PodSandboxStats",
        "ListPodSandboxStats",
        "UpdateRuntimeConfig",
        "Status",
        "CheckpointContainer",
        "GetContainerEvents",
        "ListMetricDescriptors",
        "ListPodSandboxMetrics",
        "RuntimeConfig",
        "UpdatePodSandboxResources",
    ):
        assert method in runtime, method
    assert set(images) >= {"ListImages", "ImageStatus", "PullImage", "RemoveImage", "ImageFsInfo"}
    assert runtime["GetContainerEvents"].server_streaming


@pytest.mark.parametrize(
    "message, field, number",
    [
        # Spot checks of upstream numbers, especially the out-of-order ones.
        ("LinuxSandboxSecurityContext", "run_as_group", 8),
        ("LinuxSandboxSecurityContext", "supplemental_groups_policy", 11),
        ("LinuxSandboxSecurityContext", "seccomp", 9),
        ("LinuxContainerSecurityContext", "run_as_group", 12),
        ("LinuxContainerSecurityContext", "supplemental_groups_policy", 17),
        ("LinuxContainerSecurityContext", "seccomp", 15),
        ("ImageSpec", "user_specified_image", 18),
        ("ImageSpec", "runtime_handler", 19),
        ("ImageSpec", "image_ref", 20),
        ("ContainerConfig", "CDI_devices", 17),
        ("ContainerConfig", "stop_signal", 18),
        ("ContainerStatus", "image_id", 17),
        ("ContainerStatus", "stop_signal", 19),
        ("Namespace", "options", 2),
        ("PodSandboxStatusResponse", "timestamp", 4),
        ("LinuxContainerResources", "memory_swap_limit_in_bytes", 10),
        ("Mount", "image_sub_path", 10),
        ("ExecSyncRequest", "timeout", 3),
        ("StopContainerRequest", "timeout", 2),
        ("ImageFsInfoResponse", "container_filesystems", 2),
        ("MemoryUsage", "psi", 8),
    ],
)
def test_field_numbers(message, field, number):
    assert pb.DESCRIPTOR.message_types_by_name[message].fields_by_name[field].number == number


def test_enum_values():
    assert pb.CONTAINER_CREATED == 0 and pb.CONTAINER_EXITED == 2 and pb.CONTAINER_UNKNOWN == 3
    assert pb.SANDBOX_READY == 0 and pb.SANDBOX_NOTREADY == 1
    assert pb.POD == 0 and pb.CONTAINER == 1 and pb.NODE == 2 and pb.TARGET == 3
    assert pb.SIGTERM == 23 and pb.SIGKILL == 13 and pb.SIGRTMAX == 65
    assert pb.SecurityProfile.RuntimeDefault == 0 and pb.SecurityProfile.Localhost == 2


def test_wire_bytes_of_a_known_message():
    # StopPodSandboxRequest{pod_sandbox_id: "ab"}: field 1, length-delimited.
    assert pb.StopPodSandboxRequest(pod_sandbox_id="ab").SerializeToString() == b"\x0a\x02ab"
    # PodSandboxMetadata.attempt is field 4, varint.
    assert pb.PodSandboxMetadata(attempt=3).SerializeToString() == b"\x20\x03"
