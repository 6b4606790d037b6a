"""Pods' persistentVolumeClaim volumes on the node agent: the claim's bound volume as a
host path (local-path directories created mode 0777), waiting while the claim is not
ready, refusing what the agent does not mount, and readOnly claims."""

from __future__ import annotations

import os
import re
import stat

import pytest

from agent.client.rest import ApiError
from agent.objectcache import ObjectCache
from agent.runtime.container import build_container_config
from agent.runtime.context import NodeContext
from agent.runtime.errors import PodConfigError
from agent.runtime.volumes import VolumeManager
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults


@pytest.fixture
def ctx(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.0.0.2\n")
    return NodeContext(
        node_name="node-1",
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "logs"),
        cluster_dns=(),
        cluster_domain="cluster.local",
        resolv_conf=str(resolv),
        host_ip="192.168.1.5",
        node_allocatable_cpu_millis=4000,
        node_allocatable_memory=1 << 33,
    )


def pod(read_only: bool = False) -> dict:
    p = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "shop", "uid": "pod-uid"},
        "spec": {
            "containers": [
                {"name": "c", "image": "orch.local/busybox:1", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}
            ],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data", "readOnly": read_only}}],
        },
    }
    apply_defaults("", "v1", "Pod", p)
    return p


def claim(phase="Bound", volume="pv-1", uid="claim-uid", **md) -> dict:
    return {
        "metadata": {"name": "data", "namespace": "shop", "uid": uid, **md},
        "spec": {"volumeName": volume},
        "status": {"phase": phase},
    }


def volume(source: dict, *, local_path=False, claim_uid="claim-uid", **spec) -> dict:
    md: dict = {"name": "pv-1"}
    if local_path:
        md["annotations"] = {names.ANNOTATION_PROVISIONED_BY: names.LOCAL_PATH_PROVISIONER}
    return {
        "metadata": md,
        "spec": {"claimRef": {"namespace": "shop", "name": "data", "uid": claim_uid}, **source, **spec},
    }


def manager(ctx, objs: dict) -> VolumeManager:
    return VolumeManager(ctx, objects=lambda kind, ns, name: objs.get((kind, ns, name)))


async def test_local_path_directory_is_created_world_writable(ctx, tmp_path):
    target = str(tmp_path / "storage" / "pvc-claim-uid_shop_data")
    vm = manager(
        ctx,
        {
            ("PersistentVolumeClaim", "shop", "data"): claim(),
            ("PersistentVolume", "", "pv-1"): volume(
                {"hostPath": {"path": target, "type": "DirectoryOrCreate"}}, local_path=True
            ),
        },
    )
    old = os.umask(0o022)
    try:
        paths = await vm.setup(pod())
    finally:
        os.umask(old)
    assert paths == {"d": target}
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o777
    with open(os.path.join(target, "f"), "w") as fh:
        fh.write("kept")
    # Teardown leaves the volume's data where it is.
    await vm.teardown("pod-uid")
    assert open(os.path.join(target, "f")).read() == "kept"
    assert await vm.setup(pod()) == {"d": target}


async def test_local_volume_path_must_exist(ctx, tmp_path):
    objs = {
        ("PersistentVolumeClaim", "shop", "data"): claim(),
        ("PersistentVolume", "", "pv-1"): volume({"local": {"path": str(tmp_path / "disk")}}),
    }
    vm = manager(ctx, objs)
    with pytest.raises(PodConfigError, match=r'MountVolume.SetUp failed for volume "d" : path ".*disk" does not exist'):
        await vm.setup(pod())
    os.mkdir(tmp_path / "disk")
    assert await vm.setup(pod()) == {"d": str(tmp_path / "disk")}


@pytest.mark.parametrize(
    "objs, words",
    [
        ({}, r'persistentvolumeclaims "data" not found'),
        ({("PersistentVolumeClaim", "shop", "data"): claim(phase="Pending", volume="")}, "PVC is not bound"),
        (
            {("PersistentVolumeClaim", "shop", "data"): claim(deletionTimestamp="2026-01-01T00:00:00Z")},
            "is being deleted",
        ),
        ({("PersistentVolumeClaim", "shop", "data"): claim()}, r'persistentvolumes "pv-1" not found'),
        (
            {
                ("PersistentVolumeClaim", "shop", "data"): claim(),
                ("PersistentVolume", "", "pv-1"): volume({"hostPath": {"path": "/tmp"}}, claim_uid="other"),
            },
            "claimRef names UID",
        ),
    ],
)
async def test_pod_waits_for_its_claim(ctx, objs, words):
    with pytest.raises(PodConfigError) as info:
        await manager(ctx, objs).setup(pod())
    assert info.value.reason == "FailedMount"
    assert info.value.message.startswith("Unable to attach or mount volumes: unmounted volumes=[d]")
    assert "error processing PVC shop/data" in info.value.message
    assert re.search(words, info.value.message)


@pytest.mark.parametrize(
    "pv, words",
    [
        (volume({"nfs": {"server": "x", "path": "/"}}), r'has a "nfs" source.*\(supported: local, hostPath\)'),
        (volume({"hostPath": {"path": "/tmp"}}, volumeMode="Block"), 'volumeMode "Block" is not supported'),
        (volume({"hostPath": {"path": "/tmp"}}, mountOptions=["ro"]), "mountOptions are not supported"),
    ],
)
async def test_unsupported_volumes_are_refused(ctx, pv, words):
    objs = {("PersistentVolumeClaim", "shop", "data"): claim(), ("PersistentVolume", "", "pv-1"): pv}
    with pytest.raises(PodConfigError, match=words):
        await manager(ctx, objs).setup(pod())


async def test_standalone_agent_refuses_claims(ctx):
    with pytest.raises(PodConfigError, match="need an API server connection"):
        await VolumeManager(ctx).setup(pod())


def test_read_only_claim_mounts_read_only(ctx):
    for read_only in (False, True):
        p = pod(read_only)
        config = build_container_config(
            p, p["spec"]["containers"][0], ctx, restart_count=0, pod_ip="10.88.0.7", volume_paths={"d": "/srv/x"}
        )
        mount = next(m for m in config.config.mounts if m.container_path == "/d")
        assert mount.host_path == "/srv/x" and mount.readonly is read_only


class FakeClient:
    """GETs answered from a dict of paths, counted."""

    def __init__(self, objects: dict):
        self.objects = objects
        self.gets: list[str] = []

    async def get(self, path: str) -> dict:
        self.gets.append(path)
        if path not in self.objects:
            raise ApiError(404, "NotFound", f"{path} not found")
        return self.objects[path]


async def test_object_cache_reads_claims_until_bound_then_keeps_them():
    pvc_path = "/api/v1/namespaces/shop/persistentvolumeclaims/data"
    client = FakeClient({pvc_path: claim(phase="Pending", volume="")})
    cache = ObjectCache(client, watch=False)  # type: ignore[arg-type]
    await cache.prefetch(pod())
    assert cache.get("PersistentVolumeClaim", "shop", "data")["status"]["phase"] == "Pending"
    # Bound now: the claim is read again, then its volume; after that nothing more is read.
    client.objects[pvc_path] = claim()
    client.objects["/api/v1/persistentvolumes/pv-1"] = volume({"hostPath": {"path": "/srv"}})
    await cache.prefetch(pod())
    assert cache.get("PersistentVolume", "", "pv-1")["spec"]["hostPath"] == {"path": "/srv"}
    reads = len(client.gets)
    await cache.prefetch(pod())
    assert len(client.gets) == reads == 3
    # The pod gone: nothing kept.
    cache.forget("pod-uid")
    assert cache.get("PersistentVolumeClaim", "shop", "data") is None
    assert cache.get("PersistentVolume", "", "pv-1") is None


async def test_ephemeral_volume_uses_the_claim_the_pod_owns(ctx, tmp_path):
    p = pod()
    p["spec"]["volumes"] = [{"name": "d", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    target = str(tmp_path / "eph")
    owned = claim(ownerReferences=[{"kind": "Pod", "name": "web-0", "uid": "pod-uid", "controller": True}])
    owned["metadata"]["name"] = "web-0-d"
    objs = {
        ("PersistentVolumeClaim", "shop", "web-0-d"): owned,
        ("PersistentVolume", "", "pv-1"): volume({"hostPath": {"path": target, "type": "DirectoryOrCreate"}}),
    }
    assert await manager(ctx, objs).setup(p) == {"d": target}
    foreign = claim(ownerReferences=[{"kind": "Pod", "name": "web-0", "uid": "old-pod", "controller": True}])
    objs[("PersistentVolumeClaim", "shop", "web-0-d")] = foreign
    with pytest.raises(
        PodConfigError, match=r"PVC shop/web-0-d was not created for pod shop/web-0 \(pod is not owner\)"
    ):
        await manager(ctx, objs).setup(p)
