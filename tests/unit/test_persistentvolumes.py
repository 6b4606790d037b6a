"""Which volume a claim binds to; the local-path provisioner's volumes, paths and helper
pods; the scheduler's volume binding messages; the default storage class."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from apiserver_min.admission.chain import Attributes
from apiserver_min.admission.plugins.storageobjectinuseprotection import StorageObjectInUseProtection
from apiserver_min.api import names
from apiserver_min.api import persistentvolumes as pvs
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.controllers import localpath
from apiserver_min.controllers.protection import pod_uses_claim
from apiserver_min.options import OptionsError, parse
from apiserver_min.registry.storage import PersistentVolumeClaimStrategy, PersistentVolumeStrategy
from apiserver_min.scheduler.scheduler import NodeState, Scheduler, pre_filter_message, volume_affinity_matches
from apiserver_min.scheduler.volumebinding import VolumeBinding
from apiserver_min.storage.cacher import CacheEvent, Entry


def claim(name="data", ns="default", uid="u-1", size="1Gi", modes=("ReadWriteOnce",), cls="", **spec) -> dict:
    out = {
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, **spec},
    }
    if cls is not None:
        out["spec"]["storageClassName"] = cls
    return out


def volume(name, size="1Gi", modes=("ReadWriteOnce",), cls="", phase="Available", labels=None, **spec) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls, **spec},
        "status": {"phase": phase},
    }


def name_of(v) -> str | None:
    return v["metadata"]["name"] if v is not None else None


def test_smallest_fitting_volume_wins():
    vols = [volume("big", "10Gi"), volume("small", "500Mi"), volume("fit", "2Gi"), volume("exact", "1Gi")]
    assert name_of(pvs.find_matching_volume(claim(), vols)) == "exact"
    assert name_of(pvs.find_matching_volume(claim(size="1500Mi"), vols)) == "fit"
    assert pvs.find_matching_volume(claim(size="20Gi"), vols) is None


def test_class_must_match_including_legacy_annotation():
    vols = [volume("fast", cls="fast"), volume("none")]
    assert name_of(pvs.find_matching_volume(claim(cls="fast"), vols)) == "fast"
    assert name_of(pvs.find_matching_volume(claim(cls=""), vols)) == "none"
    legacy = claim(cls="")
    legacy["metadata"]["annotations"] = {names.ANNOTATION_STORAGE_CLASS_BETA: "fast"}
    assert pvs.claim_class(legacy) == "fast"
    assert name_of(pvs.find_matching_volume(legacy, vols)) == "fast"
    assert pvs.find_matching_volume(claim(cls="slow"), vols) is None


def test_access_modes_superset_and_fewest_modes_first():
    rwo = volume("rwo", "5Gi")
    rwx = volume("rwx", "1Gi", modes=("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"))
    # The group with fewer modes is tried first, even though its volume is bigger.
    assert name_of(pvs.find_matching_volume(claim(), [rwx, rwo])) == "rwo"
    assert name_of(pvs.find_matching_volume(claim(modes=("ReadWriteMany",)), [rwx, rwo])) == "rwx"
    assert pvs.find_matching_volume(claim(modes=("ReadWriteOncePod",)), [rwx, rwo]) is None


def test_volume_mode_phase_and_deletion_filter():
    block = volume("block", volumeMode="Block")
    bound = volume("bound", phase="Bound", claimRef={"namespace": "default", "name": "other", "uid": "x"})
    released = volume("released", phase="Released")
    deleting = volume("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    vols = [block, bound, released, deleting]
    assert pvs.find_matching_volume(claim(), vols) is None
    assert name_of(pvs.find_matching_volume(claim(volumeMode="Block"), vols)) == "block"


def test_selector():
    vols = [volume("a", labels={"tier": "gold"}), volume("b", "500Gi", labels={"tier": "silver"})]
    assert name_of(pvs.find_matching_volume(claim(selector={"matchLabels": {"tier": "silver"}}), vols)) == "b"
    expr = {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}
    assert name_of(pvs.find_matching_volume(claim(selector=expr), vols)) == "b"
    assert pvs.find_matching_volume(claim(selector={"matchLabels": {"tier": "bronze"}}), vols) is None
    # A malformed selector selects nothing rather than everything.
    bad = {"matchExpressions": [{"key": "tier", "operator": "Near"}]}
    assert pvs.find_matching_volume(claim(selector=bad), vols) is None


def test_claim_ref_prebinding_wins_and_excludes_others():
    prebound = volume("mine", "100Gi", claimRef={"namespace": "default", "name": "data"})
    other = volume("theirs", claimRef={"namespace": "default", "name": "other"})
    assert name_of(pvs.find_matching_volume(claim(), [volume("free"), prebound, other])) == "mine"
    # A claimRef with another uid (an older claim of that name) does not bind the new claim.
    stale = volume("stale", claimRef={"namespace": "default", "name": "data", "uid": "old"})
    assert pvs.find_matching_volume(claim(), [stale]) is None
    assert pvs.bound_to_claim(prebound, claim()) and not pvs.bound_to_claim(stale, claim())


def test_delay_binding_only_prebound_without_node():
    free, prebound = volume("free"), volume("pre", claimRef={"namespace": "default", "name": "data"})
    assert pvs.find_matching_volume(claim(), [free], delay_binding=True) is None
    assert name_of(pvs.find_matching_volume(claim(), [free, prebound], delay_binding=True)) == "pre"
    # With a node (the scheduler): node affinity decides.
    assert name_of(pvs.find_matching_volume(claim(), [free], delay_binding=True, node_ok=lambda v: True)) == "free"
    assert pvs.find_matching_volume(claim(), [free], node_ok=lambda v: False) is None
    assert pvs.find_matching_volume(claim(), [free], node_ok=lambda v: True, excluded=frozenset({"free"})) is None


def test_volume_name_mismatch_reasons():
    assert pvs.volume_mismatch(volume("v"), claim()) == ""
    assert pvs.volume_mismatch(volume("v", "1Mi"), claim()) == "requested PV is too small"
    assert pvs.volume_mismatch(volume("v", cls="x"), claim()) == "storageClassName does not match"
    assert pvs.volume_mismatch(volume("v", volumeMode="Block"), claim()) == "incompatible volumeMode"
    assert pvs.volume_mismatch(volume("v"), claim(modes=("ReadWriteMany",))) == "incompatible accessMode"


def test_default_class_newest_then_name():
    def sc(name, ts, default=True, beta=False):
        key = names.ANNOTATION_DEFAULT_STORAGE_CLASS_BETA if beta else names.ANNOTATION_DEFAULT_STORAGE_CLASS
        return {"metadata": {"name": name, "creationTimestamp": ts, "annotations": {key: str(default).lower()}}}

    assert pvs.default_storage_class([sc("a", "2026-01-01T00:00:00Z", default=False)]) is None
    classes = [sc("old", "2026-01-01T00:00:00Z"), sc("zz", "2026-02-01T00:00:00Z"), sc("aa", "2026-02-01T00:00:00Z")]
    assert pvs.default_storage_class(classes)["metadata"]["name"] == "aa"
    assert pvs.default_storage_class([sc("beta", "2026-01-01T00:00:00Z", beta=True)])["metadata"]["name"] == "beta"
    unset, empty = claim(cls=None), claim(cls="")
    assert pvs.claim_class_unset(unset) and not pvs.claim_class_unset(empty)


def test_pod_claim_names():
    pod = {
        "metadata": {"name": "web-0"},
        "spec": {
            "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "e", "emptyDir": {}},
            ]
        },
    }
    assert pvs.pod_claim_names(pod) == ["data-web-0", "web-0-scratch"]


# --- the local-path provisioner -------------------------------------------------------------


def local_class(**extra) -> dict:
    return dict(localpath.default_storage_class(), **extra)


def test_default_class_shape():
    sc = localpath.default_storage_class()
    assert sc["metadata"]["name"] == "local-path"
    assert sc["metadata"]["annotations"] == {names.ANNOTATION_DEFAULT_STORAGE_CLASS: "true"}
    assert sc["provisioner"] == "orch.io/local-path"
    assert (sc["volumeBindingMode"], sc["reclaimPolicy"]) == ("WaitForFirstConsumer", "Delete")


def test_provisioned_volume_names_path_and_affinity():
    c = claim(name="data-web-0", ns="shop", uid="abc", size="2Gi", cls="local-path")
    c["metadata"]["resourceVersion"] = "42"
    node = {"metadata": {"name": "n1", "labels": {names.LABEL_HOSTNAME: "host-1"}}}
    pv = localpath.build_volume(c, local_class(reclaimPolicy="Retain"), node, "/var/lib/orch/storage")
    assert pv["metadata"]["name"] == "pvc-abc"
    assert pv["metadata"]["annotations"] == {names.ANNOTATION_PROVISIONED_BY: "orch.io/local-path"}
    spec = pv["spec"]
    assert spec["hostPath"] == {"path": "/var/lib/orch/storage/pvc-abc_shop_data-web-0", "type": "DirectoryOrCreate"}
    assert spec["capacity"] == {"storage": "2Gi"} and spec["accessModes"] == ["ReadWriteOnce"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain" and spec["storageClassName"] == "local-path"
    assert "finalizers" not in pv["metadata"]  # nothing to delete: no provisioner finalizer
    assert spec["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "namespace": "shop",
        "name": "data-web-0",
        "uid": "abc",
        "apiVersion": "v1",
        "resourceVersion": "42",
    }
    term = spec["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
    assert term == {"matchExpressions": [{"key": names.LABEL_HOSTNAME, "operator": "In", "values": ["host-1"]}]}
    assert localpath.volume_node(pv) == "host-1"
    assert volume_affinity_matches(spec["nodeAffinity"]["required"], node)
    assert not volume_affinity_matches(
        spec["nodeAffinity"]["required"], {"metadata": {"name": "n2", "labels": {names.LABEL_HOSTNAME: "host-2"}}}
    )
    # A node without the hostname label is pinned by name.
    bare = localpath.build_volume(c, local_class(), {"metadata": {"name": "n9"}}, "/srv/vols")
    assert bare["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert bare["metadata"]["finalizers"] == [names.FINALIZER_PROVISIONER]
    assert localpath.volume_node(bare) == "n9"
    assert volume_affinity_matches(bare["spec"]["nodeAffinity"]["required"], {"metadata": {"name": "n9"}})


@pytest.mark.parametrize(
    "claim_extra, class_extra, words",
    [
        ({}, {"parameters": {"nodePath": "/x"}}, r"takes no class parameters \(given: nodePath\)"),
        ({}, {"mountOptions": ["ro"]}, "mountOptions"),
        ({}, {"volumeBindingMode": "Immediate"}, "no node was specified"),
        ({}, {"allowedTopologies": [{}]}, "allowedTopologies"),
        ({"selector": {"matchLabels": {"a": "b"}}}, {}, "claim Selector is not supported"),
        ({"dataSource": {"kind": "PersistentVolumeClaim", "name": "x"}}, {}, "dataSource"),
        ({"volumeMode": "Block"}, {}, "only Filesystem"),
    ],
)
def test_provisioner_refuses_what_it_cannot_do(claim_extra, class_extra, words):
    with pytest.raises(localpath.ProvisioningRefused, match=words):
        localpath.check_provisionable(claim(cls="local-path", **claim_extra), local_class(**class_extra))
    localpath.check_provisionable(claim(cls="local-path"), local_class())


def test_helper_pod_removes_only_the_volume_directory():
    c = claim(uid="abc", cls="local-path")
    pv = localpath.build_volume(c, local_class(), {"metadata": {"name": "n1"}}, "/var/lib/orch/storage")
    assert localpath.path_is_ours(pv, "/var/lib/orch/storage")
    assert localpath.path_is_ours(pv, "/var/lib/orch/storage/")
    assert not localpath.path_is_ours(pv, "/srv")
    pod = localpath.helper_pod(pv, "n1", "/var/lib/orch/storage", "orch.local/busybox:1")
    assert pod["metadata"]["name"] == "helper-pod-delete-pvc-abc" and pod["metadata"]["namespace"] == "orch-system"
    assert pod["spec"]["nodeName"] == "n1" and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["containers"][0]["command"] == ["rm", "-rf", "/data/pvc-abc_default_data"]
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/var/lib/orch/storage"
    for evil in ("/", "/var/lib/orch/storage", "/var/lib/orch/storage/../../etc", "/etc/pvc-x"):
        pv["spec"]["hostPath"]["path"] = evil
        assert not localpath.path_is_ours(pv, "/var/lib/orch/storage"), evil


def test_pre_filter_message_upstream_shape():
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    states = {"n1": NodeState({"metadata": {"name": "n1"}})}
    assert pre_filter_message(pod, states, "pod has unbound immediate PersistentVolumeClaims") == (
        "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.."
    )
    assert pre_filter_message(pod, {}, 'persistentvolumeclaim "x" not found') == "no nodes available to schedule pods"


def test_pod_uses_claim_only_once_scheduled():
    pod = {
        "metadata": {"name": "web-0"},
        "spec": {
            "volumes": [
                {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {}}},
            ]
        },
        "status": {"phase": "Pending"},
    }
    assert not pod_uses_claim(pod, "data")  # not scheduled: the agent will refuse a terminating claim
    pod["spec"]["nodeName"] = "n1"
    assert pod_uses_claim(pod, "data") and pod_uses_claim(pod, "web-0-tmp") and not pod_uses_claim(pod, "other")
    pod["status"]["phase"] = "Succeeded"
    assert pod_uses_claim(pod, "data") and not pod_uses_claim(pod, "web-0-tmp")


async def test_protection_finalizers_on_create():
    plugin = StorageObjectInUseProtection()
    for resource, finalizer in (
        ("persistentvolumeclaims", names.FINALIZER_PVC_PROTECTION),
        ("persistentvolumes", names.FINALIZER_PV_PROTECTION),
    ):
        kind = REGISTRY.by_resource("", "v1", resource)
        obj: dict = {"metadata": {"name": "x", "finalizers": ["keep"]}}
        await plugin.admit(Attributes("CREATE", kind, "", "x", "", obj, None, SYSTEM_USER, False))
        await plugin.admit(Attributes("CREATE", kind, "", "x", "", obj, None, SYSTEM_USER, False))
        assert obj["metadata"]["finalizers"] == ["keep", finalizer]
        updated: dict = {"metadata": {"name": "x"}}
        await plugin.admit(Attributes("UPDATE", kind, "", "x", "", updated, {}, SYSTEM_USER, False))
        assert "finalizers" not in updated["metadata"]


# --- validation --------------------------------------------------------------------------------


def _errors(errs) -> list[str]:
    return sorted(f"{e.field}: {e.type}" for e in errs)


def test_claim_validation_and_immutability():
    strategy = PersistentVolumeClaimStrategy(REGISTRY.by_resource("", "v1", "persistentvolumeclaims"))
    good = claim(cls="local-path")
    assert strategy.validate(good) == []
    bad = claim(modes=(), size="0", cls="Not_A_Name")
    assert _errors(strategy.validate(bad)) == [
        "spec.accessModes: FieldValueRequired",
        "spec.resources[storage]: FieldValueInvalid",
        "spec.storageClassName: FieldValueInvalid",
    ]
    del bad["spec"]["resources"]
    assert "spec.resources[storage]: FieldValueRequired" in _errors(strategy.validate(bad))
    rwop = claim(modes=("ReadWriteOncePod", "ReadWriteOnce"))
    assert _errors(strategy.validate(rwop)) == ["spec.accessModes: FieldValueForbidden"]

    old = claim(cls=None)
    old["metadata"]["resourceVersion"] = "1"
    # What binding writes: the volume name once, the default class once.
    bound = claim(cls="local-path", volumeName="pv-1")
    assert strategy.validate_update(bound, old) == []
    changed = claim(cls=None, modes=("ReadWriteMany",))
    errs = strategy.validate_update(changed, old)
    assert [e.field for e in errs] == ["spec"] and "changed: accessModes" in errs[0].detail
    # A bound claim may grow, never shrink; an unbound one may not change its request.
    old_bound = claim(volumeName="pv-1")
    old_bound["status"] = {"phase": "Bound"}
    assert strategy.validate_update(claim(size="2Gi", volumeName="pv-1"), old_bound) == []
    assert _errors(strategy.validate_update(claim(size="1Mi", volumeName="pv-1"), old_bound)) == [
        "spec.resources.requests.storage: FieldValueForbidden"
    ]
    assert _errors(strategy.validate_update(claim(size="2Gi"), claim())) == ["spec: FieldValueForbidden"]
    assert _errors(strategy.validate_update(claim(volumeName="b"), claim(volumeName="a"))) == [
        "spec: FieldValueForbidden"
    ]


def test_volume_validation_and_immutability():
    strategy = PersistentVolumeStrategy(REGISTRY.by_resource("", "v1", "persistentvolumes"))
    good = volume("v", hostPath={"path": "/srv/v"})
    assert strategy.validate(good) == []
    none = volume("v", modes=())
    none["spec"]["capacity"] = {"storage": "1Gi", "cpu": "1"}
    assert _errors(strategy.validate(none)) == [
        "spec.accessModes: FieldValueRequired",
        "spec.capacity: FieldValueNotSupported",
        "spec: FieldValueRequired",
    ]
    two = volume("v", hostPath={"path": "/a"}, local={"path": "/b"})
    assert _errors(strategy.validate(two)) == [
        "spec.local: FieldValueForbidden",
        "spec.nodeAffinity: FieldValueRequired",
    ]
    assert _errors(strategy.validate(volume("v", hostPath={}))) == ["spec.hostPath.path: FieldValueRequired"]
    moved = volume("v", hostPath={"path": "/elsewhere"})
    assert _errors(strategy.validate_update(moved, good)) == ["spec.persistentvolumesource: FieldValueForbidden"]
    claimed = volume("v", hostPath={"path": "/srv/v"}, claimRef={"namespace": "a", "name": "b"})
    assert strategy.validate_update(claimed, good) == []


# --- the scheduler's volume binding over fake informers --------------------------------------------


class FakeInformer:
    def __init__(self, objs):
        self.entries = {}
        for o in objs:
            md = o["metadata"]
            self.entries[(md.get("namespace", ""), md["name"])] = Entry(
                f"{md.get('namespace', '')}/{md['name']}",
                orjson.dumps(o),
                1,
                md.get("namespace", ""),
                md["name"],
                md.get("labels") or {},
                {},
                md.get("uid", ""),
            )

    def get(self, namespace, name):
        return self.entries.get((namespace, name))

    def get_by_key(self, key):
        return next((e for e in self.entries.values() if e.key == key), None)

    def list(self, namespace=None):
        return [e for (ns, _), e in self.entries.items() if namespace is None or ns == namespace]

    def add_handler(self, fn):
        fn(None)


class FakeInformers:
    def __init__(self, claims=(), volumes=(), classes=()):
        self.by_resource = {
            "persistentvolumeclaims": FakeInformer(claims),
            "persistentvolumes": FakeInformer(volumes),
            "storageclasses": FakeInformer(classes),
        }

    def kind(self, group, version, resource):
        return REGISTRY.by_resource(group, version, resource)

    def for_kind(self, kind):
        return self.by_resource.setdefault(kind.resource, FakeInformer([]))

    def for_resource(self, group, version, resource):
        return self.by_resource[resource]


def binder(**objs) -> VolumeBinding:
    return VolumeBinding(FakeInformers(**objs), volume_affinity_matches)  # type: ignore[arg-type]


def test_volume_binding_filter_and_binding_progress():
    wffc = dict(localpath.default_storage_class(), metadata={"name": "local-path"})
    pinned = volume(
        "pinned",
        cls="local-path",
        nodeAffinity={
            "required": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
            }
        },  # fmt: skip
    )
    unbound = claim(cls="local-path")
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"volumes": [
        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}  # fmt: skip
    vb = binder(claims=[unbound], volumes=[pinned], classes=[wffc])
    claims, why = vb.pre_filter(pod)
    assert why == "" and claims is not None and claims.to_bind and not claims.bound
    # n1 takes the static volume; n2 gets a provisioned one (the class has a provisioner).
    reasons, decision = vb.filter(claims, {"metadata": {"name": "n1"}})
    assert reasons == () and decision is not None and [v["metadata"]["name"] for v, _ in decision.static] == ["pinned"]
    reasons, decision = vb.filter(claims, {"metadata": {"name": "n2"}})
    assert decision is not None and decision.provision and not decision.static
    # Pre-bind's write not seen yet: wait; seen, annotated and not bound yet: wait.
    decision.written[("default", "data")] = 5
    assert vb.binding_problem(decision, "n2") == ""
    decision.written.clear()
    assert vb.binding_problem(decision, "n2") == 'selectedNode annotation reset for PVC "data"'
    annotated = claim(cls="local-path")
    annotated["metadata"]["annotations"] = {names.ANNOTATION_SELECTED_NODE: "n2"}
    assert binder(claims=[annotated], volumes=[pinned], classes=[wffc]).binding_problem(decision, "n2") == ""
    # A class without a provisioner cannot help n2.
    static_only = dict(wffc, provisioner=names.NO_PROVISIONER)
    vb2 = binder(claims=[unbound], volumes=[pinned], classes=[static_only])
    assert vb2.filter(claims, {"metadata": {"name": "n2"}}) == (
        ("node(s) didn't find available persistent volumes to bind",),
        None,
    )
    # Bound (volume name, bind-completed, status) on the node chosen: done.
    done = claim(cls="local-path", volumeName="pinned")
    done["metadata"]["annotations"] = {names.ANNOTATION_BIND_COMPLETED: "yes", names.ANNOTATION_SELECTED_NODE: "n2"}
    done["status"] = {"phase": "Bound"}
    bound_pv = dict(pinned, spec=dict(pinned["spec"], claimRef={"namespace": "default", "name": "data", "uid": "u-1"}))
    assert binder(claims=[done], volumes=[bound_pv], classes=[wffc]).binding_problem(decision, "n2") is None
    # The claim gone (or another of that name): give up.
    assert binder(volumes=[pinned], classes=[wffc]).binding_problem(decision, "n2") == (
        'persistentvolumeclaim "data" not found'
    )
    # A bound claim's volume pins the pod to its node.
    claims2, _ = binder(claims=[done], volumes=[bound_pv], classes=[wffc]).pre_filter(pod)
    assert claims2 is not None and claims2.bound
    vb3 = binder(claims=[done], volumes=[bound_pv], classes=[wffc])
    assert vb3.filter(claims2, {"metadata": {"name": "n2"}})[0] == ("node(s) had volume node affinity conflict",)
    assert vb3.filter(claims2, {"metadata": {"name": "n1"}})[0] == ()


def test_local_path_flags():
    o = parse([])
    assert (o.local_path_provisioner, o.local_path_dir, o.local_path_helper_image) == (
        True,
        "/var/lib/orch/storage",
        "orch.local/busybox:1",
    )
    o = parse(["--local-path-provisioner=false", "--local-path-dir=/srv/vols/", "--local-path-helper-image=x/bb:2"])
    assert (o.local_path_provisioner, o.local_path_dir, o.local_path_helper_image) == (False, "/srv/vols", "x/bb:2")
    for argv, words in (
        (["--local-path-dir=relative"], "--local-path-dir: must be an absolute path other than /"),
        (["--local-path-dir=/"], "--local-path-dir"),
        (["--local-path-provisioner=maybe"], "--local-path-provisioner"),
        (["--local-path-helper-image="], "--local-path-helper-image"),
    ):
        with pytest.raises(OptionsError, match=words):
            parse(argv)


# --- the scheduler waiting for a pod's claims ----------------------------------------------------


class FakeClient:
    """Writes recorded; updates answered with a newer resource version."""

    def __init__(self, objects: dict):
        self.objects = objects  # (resource, namespace, name) -> object
        self.bindings: list[dict] = []
        self.updates: list[tuple[str, str, str]] = []

    async def create(self, kind, namespace, obj, *, subresource=""):
        if subresource == "binding":
            self.bindings.append(obj)
        return obj

    async def update(self, kind, namespace, name, obj_or_mutate, *, subresource=""):
        self.updates.append((kind.resource, name, subresource))
        if callable(obj_or_mutate):
            current = self.objects.get((kind.resource, namespace, name), {"metadata": {"name": name}})
            out = obj_or_mutate(current)
        else:
            out = dict(obj_or_mutate)
        self.objects[(kind.resource, namespace, name)] = out
        out.setdefault("metadata", {})["resourceVersion"] = "5"
        return out


def ready_node(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


async def test_scheduler_gives_up_when_claims_are_not_bound_in_time():
    wffc = dict(localpath.default_storage_class(), metadata={"name": "local-path"})
    pod_obj = {
        "metadata": {"name": "p", "namespace": "default", "uid": "pod-1"},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        },
        "status": {"phase": "Pending"},
    }
    informers = FakeInformers(claims=[claim(cls="local-path")], classes=[wffc])
    informers.by_resource["pods"] = FakeInformer([pod_obj])
    informers.by_resource["nodes"] = FakeInformer([ready_node("n1")])
    informers.by_resource["events"] = FakeInformer([])
    informers.registry = REGISTRY
    client = FakeClient({("pods", "default", "p"): pod_obj})
    sched = Scheduler(client, informers, volume_bind_timeout=0.3)  # type: ignore[arg-type]
    sched.start()
    key = informers.by_resource["pods"].get("default", "p").key
    assert await sched.schedule_one(key) == "n1"
    # The claim got its node; the pod holds its place but is not bound yet.
    assert ("persistentvolumeclaims", "data", "") in client.updates and not client.bindings
    assert sched.bound[key] == "n1" and key in sched._waiting
    await asyncio.wait_for(sched._waiting[key], 5)
    assert not client.bindings and key not in sched.bound and key in sched.unschedulable
    cond = client.objects[("pods", "default", "p")]["status"]["conditions"][0]
    assert cond["reason"] == "SchedulerError"
    assert (
        cond["message"]
        == 'running PreBind plugin "VolumeBinding": binding volumes: timed out waiting for the condition'
    )

    # Tried again: a pod deleted while it waits is let go.
    assert await sched.schedule_one(key) == "n1"
    entry = informers.by_resource["pods"].get("default", "p")
    task = sched._waiting[key]
    sched.on_pod(CacheEvent("DELETED", 2, entry, None, 0.0))
    await asyncio.sleep(0)
    assert task.cancelled() and key not in sched.bound and key not in sched._waiting
