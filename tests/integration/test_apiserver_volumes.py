"""Persistent volumes in a real orch-apiserver: the binder, the bundled local-path
provisioner and the scheduler's volume binding.

No agent runs: Nodes are written as admin (Ready, with a long monitor grace period so
they stay schedulable), pods are bound by the scheduler, and the local-path helper pod
that removes a deleted volume's directory is marked Succeeded as its agent would."""

from __future__ import annotations

import datetime as _dt
import time
import urllib.parse

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import APISERVER_BIN, ApiServerProcess, create_namespace
from tests.components import free_port
from tests.helpers import uniq, wait_for

SC = f"/apis/{names.STORAGE_GROUP}/v1/storageclasses"
PVS = "/api/v1/persistentvolumes"


def pvcs(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/persistentvolumeclaims"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not APISERVER_BIN.exists():
        pytest.skip(f"{APISERVER_BIN} missing")
    data = tmp_path_factory.mktemp("volumes")
    s = ApiServerProcess(
        data,
        free_port(),
        extra_args=["--node-monitor-grace-period=600s", f"--local-path-dir={data}/storage"],
    )
    s.storage_dir = f"{data}/storage"
    with s:
        yield s


@pytest.fixture
def ns(server):
    name = uniq("vol")
    create_namespace(server, name)
    return name


def make_node(server, name: str) -> None:
    ts = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    node = {
        "metadata": {"name": name, "labels": {names.LABEL_HOSTNAME: name, "group": name}},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AgentReady",
                    "lastHeartbeatTime": ts,
                    "lastTransitionTime": ts,
                }  # fmt: skip
            ],
        },
    }
    server.json("POST", "/api/v1/nodes", node, expect=201)


def make_claim(server, ns: str, name: str, *, cls: str | None = None, size="1Gi", **spec) -> dict:
    body = {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec},
    }
    if cls is not None:
        body["spec"]["storageClassName"] = cls
    return server.json("POST", pvcs(ns), body, expect=201)[1]


def make_pod(server, ns: str, name: str, claim: str, node_group: str) -> None:
    pod = {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"group": node_group},
            "containers": [
                {"name": "c", "image": "orch.local/busybox:1", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}
            ],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)


def get(server, path: str) -> dict | None:
    status, doc = server.json("GET", path)
    return doc if status == 200 else None


def events(server, ns: str, name: str, reason: str) -> list[dict]:
    sel = urllib.parse.quote(f"involvedObject.name={name},reason={reason}")
    return server.json("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={sel}", expect=200)[1]["items"]


def phase(obj: dict | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


def delete_pod(server, ns: str, name: str) -> None:
    server.json("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0}, expect=(200, 202))
    wait_for(lambda: get(server, f"/api/v1/namespaces/{ns}/pods/{name}") is None, 10, "pod deletion")


def test_default_class_is_created(server):
    sc = wait_for(lambda: get(server, f"{SC}/local-path"), 10, "default class")
    assert sc["provisioner"] == names.LOCAL_PATH_PROVISIONER
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer" and sc["reclaimPolicy"] == "Delete"
    assert sc["metadata"]["annotations"][names.ANNOTATION_DEFAULT_STORAGE_CLASS] == "true"


def test_wait_for_consumer_then_provision_on_the_pods_node_then_delete(server, ns):
    node = uniq("node")
    make_node(server, node)
    claim = make_claim(server, ns, "data")
    assert claim["spec"]["storageClassName"] == "local-path"  # DefaultStorageClass admission
    wait_for(lambda: events(server, ns, "data", "WaitForFirstConsumer"), 10, "WaitForFirstConsumer event")
    assert phase(get(server, f"{pvcs(ns)}/data")) == "Pending"
    assert not [v for v in server.json("GET", PVS)[1]["items"] if v["spec"]["claimRef"]["namespace"] == ns]

    make_pod(server, ns, "web-0", "data", node)
    pod = wait_for(
        lambda: (p := get(server, f"/api/v1/namespaces/{ns}/pods/web-0")) and p["spec"].get("nodeName") and p,
        15,
        "pod scheduled",
    )
    assert pod["spec"]["nodeName"] == node
    # The scheduler binds the pod only once its claim is bound (the agent then mounts at once).
    assert phase(get(server, f"{pvcs(ns)}/data")) == "Bound"
    claim = wait_for(lambda: (c := get(server, f"{pvcs(ns)}/data")) and phase(c) == "Bound" and c, 15, "claim bound")
    uid = claim["metadata"]["uid"]
    ann = claim["metadata"]["annotations"]
    assert ann[names.ANNOTATION_SELECTED_NODE] == node
    assert ann[names.ANNOTATION_STORAGE_PROVISIONER] == names.LOCAL_PATH_PROVISIONER
    assert ann[names.ANNOTATION_BIND_COMPLETED] == "yes"
    assert claim["spec"]["volumeName"] == f"pvc-{uid}"
    assert claim["status"]["capacity"] == {"storage": "1Gi"} and claim["status"]["accessModes"] == ["ReadWriteOnce"]
    pv = wait_for(lambda: (v := get(server, f"{PVS}/pvc-{uid}")) and phase(v) == "Bound" and v, 10, "volume bound")
    assert pv["metadata"]["annotations"][names.ANNOTATION_PROVISIONED_BY] == names.LOCAL_PATH_PROVISIONER
    assert pv["spec"]["hostPath"]["path"] == f"{server.storage_dir}/pvc-{uid}_{ns}_data"
    assert pv["spec"]["claimRef"]["uid"] == uid and pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": names.LABEL_HOSTNAME, "operator": "In", "values": [node]}
    assert events(server, ns, "data", "ProvisioningSucceeded")

    # The claim goes: the volume is released and a helper pod removes its directory on the node.
    delete_pod(server, ns, "web-0")
    server.json("DELETE", f"{pvcs(ns)}/data", expect=200)
    helper_path = f"/api/v1/namespaces/{names.NS_SYSTEM}/pods/helper-pod-delete-pvc-{uid}"
    helper = wait_for(lambda: get(server, helper_path), 15, "helper pod")
    assert helper["spec"]["nodeName"] == node
    assert helper["spec"]["containers"][0]["command"] == ["rm", "-rf", f"/data/pvc-{uid}_{ns}_data"]
    assert phase(get(server, f"{PVS}/pvc-{uid}")) == "Released"
    helper["status"] = {"phase": "Succeeded"}
    server.json("PUT", f"{helper_path}/status", helper, expect=200)
    wait_for(lambda: get(server, f"{PVS}/pvc-{uid}") is None, 15, "volume deleted")
    wait_for(lambda: get(server, helper_path) is None, 15, "helper pod deleted")


def test_retain_policy_releases_the_volume(server, ns):
    node = uniq("node")
    make_node(server, node)
    cls = uniq("keep")
    server.json(
        "POST",
        SC,
        {
            "metadata": {"name": cls},
            "provisioner": names.LOCAL_PATH_PROVISIONER,
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
        expect=201,
    )
    make_claim(server, ns, "kept", cls=cls)
    make_pod(server, ns, "p", "kept", node)
    claim = wait_for(lambda: (c := get(server, f"{pvcs(ns)}/kept")) and phase(c) == "Bound" and c, 15, "claim bound")
    name = claim["spec"]["volumeName"]
    assert get(server, f"{PVS}/{name}")["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    # Growing the claim: refused, the class does not allow expansion; shrinking: invalid.
    merge = {"Content-Type": names.MEDIA_MERGE_PATCH}
    grow = {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    _, err = server.json("PATCH", f"{pvcs(ns)}/kept", grow, headers=merge, expect=403)
    assert err["message"] == (
        'persistentvolumeclaims "kept" is forbidden: only dynamically provisioned pvc can be resized and '
        "the storageclass that provisions the pvc must support resize"
    )
    shrink = {"spec": {"resources": {"requests": {"storage": "1Mi"}}}}
    _, err = server.json("PATCH", f"{pvcs(ns)}/kept", shrink, headers=merge, expect=422)
    assert "field can not be less than previous value" in err["message"]
    _, err = server.json("PATCH", f"{pvcs(ns)}/kept", {"spec": {"accessModes": ["ReadWriteMany"]}}, headers=merge)
    assert "spec is immutable after creation except resources.requests for bound claims" in err["message"]
    delete_pod(server, ns, "p")
    server.json("DELETE", f"{pvcs(ns)}/kept", expect=200)
    wait_for(lambda: phase(get(server, f"{PVS}/{name}")) == "Released", 10, "volume released")
    time.sleep(1.0)
    assert phase(get(server, f"{PVS}/{name}")) == "Released"
    uid = claim["metadata"]["uid"]
    assert get(server, f"/api/v1/namespaces/{names.NS_SYSTEM}/pods/helper-pod-delete-pvc-{uid}") is None


def test_static_volumes_bind_immediately_smallest_first_and_prebound(server, ns):
    small, big, reserved = uniq("pv-small"), uniq("pv-big"), uniq("pv-res")
    for name, size, ref in ((small, "2Gi", None), (big, "10Gi", None), (reserved, "5Gi", "mine")):
        spec = {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": f"/tmp/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [ns]}]}]
                }  # fmt: skip
            },
        }
        if ref:
            spec["claimRef"] = {"namespace": ns, "name": ref}
        server.json("POST", PVS, {"metadata": {"name": name}, "spec": spec}, expect=201)
    wait_for(lambda: phase(get(server, f"{PVS}/{small}")) == "Available", 10, "volume available")

    make_claim(server, ns, "any", cls="", size="1Gi")
    claim = wait_for(lambda: (c := get(server, f"{pvcs(ns)}/any")) and phase(c) == "Bound" and c, 10, "claim bound")
    assert claim["spec"]["volumeName"] == small
    assert claim["metadata"]["annotations"][names.ANNOTATION_BOUND_BY_CONTROLLER] == "yes"
    pv = wait_for(lambda: (v := get(server, f"{PVS}/{small}")) and phase(v) == "Bound" and v, 10, "volume bound")
    assert pv["metadata"]["annotations"][names.ANNOTATION_BOUND_BY_CONTROLLER] == "yes"
    assert pv["spec"]["claimRef"]["name"] == "any"

    make_claim(server, ns, "mine", cls="", size="1Gi")
    claim = wait_for(lambda: (c := get(server, f"{pvcs(ns)}/mine")) and phase(c) == "Bound" and c, 10, "prebound")
    assert claim["spec"]["volumeName"] == reserved
    pv = get(server, f"{PVS}/{reserved}")
    assert names.ANNOTATION_BOUND_BY_CONTROLLER not in (pv["metadata"].get("annotations") or {})

    # A claim naming a volume too small for it waits, with upstream's event.
    make_claim(server, ns, "named", cls="", size="50Gi", volumeName=big)
    wait_for(lambda: events(server, ns, "named", "VolumeMismatch"), 10, "VolumeMismatch event")
    assert phase(get(server, f"{pvcs(ns)}/named")) == "Pending"

    # Retain (the default for volumes made by hand): released when the claim goes.
    server.json("DELETE", f"{pvcs(ns)}/any", expect=200)
    wait_for(lambda: phase(get(server, f"{PVS}/{small}")) == "Released", 10, "volume released")
    for name in (small, big):
        server.json("DELETE", f"{PVS}/{name}", expect=200)

    # The pod of a bound claim goes only where its volume may be used.
    node = uniq("node")
    make_node(server, node)
    make_pod(server, ns, "pinned", "mine", node)
    wait_for(
        lambda: (
            "1 node(s) had volume node affinity conflict"
            in str((get(server, f"/api/v1/namespaces/{ns}/pods/pinned") or {}).get("status"))
        ),
        10,
        "node affinity conflict",
    )


def test_scheduler_waits_for_claims(server, ns):
    node = uniq("node")
    make_node(server, node)
    make_pod(server, ns, "nope", "missing", node)

    def scheduled_message(pod: str) -> str:
        doc = get(server, f"/api/v1/namespaces/{ns}/pods/{pod}") or {}
        cond = next((c for c in (doc.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})
        return cond.get("message", "")

    msg = wait_for(lambda: scheduled_message("nope"), 10, "unschedulable")
    assert 'persistentvolumeclaim "missing" not found' in msg and msg.startswith("0/")
    make_claim(server, ns, "unbound", cls="", size="1Ti")
    make_pod(server, ns, "waits", "unbound", node)
    msg = wait_for(lambda: scheduled_message("waits"), 10, "unschedulable")
    assert "pod has unbound immediate PersistentVolumeClaims" in msg
    assert events(server, ns, "unbound", "FailedBinding")
    # The claim appears: the pod is scheduled.
    make_claim(server, ns, "missing")
    wait_for(
        lambda: (get(server, f"/api/v1/namespaces/{ns}/pods/nope") or {}).get("spec", {}).get("nodeName"),
        20,
        "scheduled once the claim exists",
    )


def test_claim_in_use_is_kept_until_its_pod_goes(server, ns):
    node = uniq("node")
    make_node(server, node)
    make_claim(server, ns, "busy")
    make_pod(server, ns, "user", "busy", node)
    claim = wait_for(lambda: (c := get(server, f"{pvcs(ns)}/busy")) and phase(c) == "Bound" and c, 15, "claim bound")
    assert names.FINALIZER_PVC_PROTECTION in claim["metadata"]["finalizers"]
    volume = claim["spec"]["volumeName"]
    assert names.FINALIZER_PV_PROTECTION in get(server, f"{PVS}/{volume}")["metadata"]["finalizers"]
    wait_for(
        lambda: (get(server, f"/api/v1/namespaces/{ns}/pods/user") or {}).get("spec", {}).get("nodeName"),
        10,
        "pod scheduled",
    )

    # The volume cannot go while bound; the claim not while a pod uses it.
    server.json("DELETE", f"{PVS}/{volume}", expect=200)
    server.json("DELETE", f"{pvcs(ns)}/busy", expect=200)
    time.sleep(1.5)
    claim = get(server, f"{pvcs(ns)}/busy")
    assert claim is not None and claim["metadata"].get("deletionTimestamp")
    assert phase(get(server, f"{PVS}/{volume}")) == "Bound"

    delete_pod(server, ns, "user")
    wait_for(lambda: get(server, f"{pvcs(ns)}/busy") is None, 10, "claim gone with its pod")
    helper_path = f"/api/v1/namespaces/{names.NS_SYSTEM}/pods/helper-pod-delete-{volume}"
    helper = wait_for(lambda: get(server, helper_path), 15, "helper pod")
    helper["status"] = {"phase": "Succeeded"}
    server.json("PUT", f"{helper_path}/status", helper, expect=200)
    wait_for(lambda: get(server, f"{PVS}/{volume}") is None, 15, "volume gone")


def test_delete_policy_without_provisioner_fails_the_volume(server, ns):
    name = uniq("pv-del")
    spec = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Delete",
        "hostPath": {"path": f"/tmp/{name}"},
        "claimRef": {"namespace": ns, "name": "once"},
    }
    server.json("POST", PVS, {"metadata": {"name": name}, "spec": spec}, expect=201)
    make_claim(server, ns, "once", cls="")
    wait_for(lambda: phase(get(server, f"{pvcs(ns)}/once")) == "Bound", 10, "claim bound")
    server.json("DELETE", f"{pvcs(ns)}/once", expect=200)
    pv = wait_for(lambda: (v := get(server, f"{PVS}/{name}")) and phase(v) == "Failed" and v, 10, "volume failed")
    assert "no deletable volume plugin matched" in pv["status"]["message"]
    assert events(server, "default", name, "VolumeFailedDelete")
    server.json("DELETE", f"{PVS}/{name}", expect=200)
    wait_for(lambda: get(server, f"{PVS}/{name}") is None, 10, "failed volume deleted by hand")


def test_claim_for_a_missing_node_goes_back_to_the_scheduler(server, ns):
    body = {
        "metadata": {"name": "lost", "annotations": {names.ANNOTATION_SELECTED_NODE: "ghost-node"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    server.json("POST", pvcs(ns), body, expect=201)
    event = wait_for(lambda: events(server, ns, "lost", "ProvisioningFailed"), 10, "ProvisioningFailed")
    assert event[0]["message"] == 'node "ghost-node" not found'
    wait_for(
        lambda: names.ANNOTATION_SELECTED_NODE not in (get(server, f"{pvcs(ns)}/lost")["metadata"]["annotations"]),
        10,
        "selected node removed",
    )
    assert phase(get(server, f"{pvcs(ns)}/lost")) == "Pending"


def test_ephemeral_volume_claim_lives_and_dies_with_its_pod(server, ns):
    node = uniq("node")
    make_node(server, node)
    pod = {
        "metadata": {"name": "eph"},
        "spec": {
            "nodeSelector": {"group": node},
            "containers": [{"name": "c", "image": "orch.local/busybox:1"}],
            "volumes": [
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "metadata": {"labels": {"kind": "scratch"}},
                            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                        }
                    },
                }
            ],
        },
    }
    _, created = server.json("POST", f"/api/v1/namespaces/{ns}/pods", pod, expect=201)
    claim = wait_for(lambda: (c := get(server, f"{pvcs(ns)}/eph-scratch")) and phase(c) == "Bound" and c, 15, "bound")
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "eph",
        created["metadata"]["uid"],
        True,
    )
    assert claim["metadata"]["labels"] == {"kind": "scratch"} and claim["spec"]["storageClassName"] == "local-path"
    wait_for(lambda: get(server, f"/api/v1/namespaces/{ns}/pods/eph")["spec"].get("nodeName") == node, 10, "pod bound")
    delete_pod(server, ns, "eph")
    wait_for(lambda: get(server, f"{pvcs(ns)}/eph-scratch") is None, 15, "claim collected with its pod")

    # A claim of that name the pod does not own is not used.
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", dict(pod, metadata={"name": "eph2"}), expect=201)
    wait_for(lambda: get(server, f"{pvcs(ns)}/eph2-scratch"), 10, "claim made")
    make_claim(server, ns, "eph3-scratch")
    server.json("POST", f"/api/v1/namespaces/{ns}/pods", dict(pod, metadata={"name": "eph3"}), expect=201)
    wait_for(lambda: events(server, ns, "eph3", "FailedBinding"), 10, "not-owner event")
    msg = wait_for(
        lambda: next(
            (
                c.get("message")
                for c in (get(server, f"/api/v1/namespaces/{ns}/pods/eph3").get("status") or {}).get("conditions") or []
                if c["type"] == "PodScheduled"
            ),  # fmt: skip
            "",
        ),
        10,
        "unschedulable",
    )
    assert f'persistentvolumeclaim "eph3-scratch" was not created for pod "{ns}/eph3" (pod is not owner)' in msg
