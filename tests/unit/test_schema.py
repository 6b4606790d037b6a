"""Kind schemas: completeness, internal consistency, and upstream facts spot-checked."""

from __future__ import annotations

import pytest

from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schema import (
    LIST_META,
    MANAGED_FIELDS_ENTRY,
    OBJECT_META,
    OWNER_REFERENCE,
    Boolean,
    Field,
    Integer,
    IntOrString,
    List,
    Map,
    Opaque,
    Quantity,
    String,
    Struct,
    Time,
    is_scalar,
    iter_fields,
    iter_structs,
    proto_package,
    resolve_field,
    resolve_path,
    split_path,
)
from apiserver_min.api.schemas import KIND_SCHEMAS, core, list_schema, schema_for

ALL_STRUCTS = list(iter_structs(sorted(set(KIND_SCHEMAS.values()), key=lambda s: s.name)))
STRUCT_IDS = [s.name.replace("k8s.io.api.", "").replace("k8s.io.apimachinery.pkg.apis.", "") for s in ALL_STRUCTS]


def pod() -> Struct:
    s = schema_for("", "v1", "Pod")
    assert s is not None
    return s


def field(struct: Struct, name: str) -> Field:
    f = struct.field(name)
    assert f is not None, f"{struct.name} has no field {name}"
    return f


def struct_of(struct: Struct, path: str) -> Struct:
    t = resolve_path(struct, path)
    while isinstance(t, (List, Map)):
        t = t.item_type if isinstance(t, List) else t.value_type
    assert isinstance(t, Struct), path
    return t


# --- coverage --------------------------------------------------------------------------------


@pytest.mark.parametrize("info", REGISTRY.kinds, ids=lambda k: f"{k.group or 'core'}/{k.kind}")
def test_every_registered_kind_has_a_schema(info):
    s = schema_for(info.group, info.version, info.kind)
    assert isinstance(s, Struct)
    assert s.short_name == info.kind
    assert field(s, "metadata").type is OBJECT_META
    assert field(s, "metadata").number == 1


@pytest.mark.parametrize(
    "info", [k for k in REGISTRY.kinds if k.subresources], ids=lambda k: f"{k.group or 'core'}/{k.kind}"
)
def test_every_subresource_kind_has_a_schema(info):
    for sub in info.subresources:
        group, version = (sub.group, sub.version) if sub.version else (info.group, info.version)
        assert schema_for(group, version, sub.kind) is not None, (info.kind, sub.name)


@pytest.mark.parametrize(
    "group,version,kind",
    [
        ("", "v1", "Binding"),
        ("policy", "v1", "Eviction"),
        ("autoscaling", "v1", "Scale"),
        (names.AUTHENTICATION_GROUP, "v1", "TokenReview"),
        (names.AUTHENTICATION_GROUP, "v1", "TokenRequest"),
        (names.AUTHENTICATION_GROUP, "v1", "SelfSubjectReview"),
        (names.AUTHENTICATION_GROUP, "v1beta1", "SelfSubjectReview"),
        (names.UPSTREAM_AUTHENTICATION_GROUP, "v1beta1", "SelfSubjectReview"),
        (names.AUTHORIZATION_GROUP, "v1", "SubjectAccessReview"),
        (names.AUTHORIZATION_GROUP, "v1", "SelfSubjectAccessReview"),
        (names.AUTHORIZATION_GROUP, "v1", "LocalSubjectAccessReview"),
        (names.AUTHORIZATION_GROUP, "v1", "SelfSubjectRulesReview"),
        (names.UPSTREAM_AUTHORIZATION_GROUP, "v1", "SelfSubjectAccessReview"),
        ("", "v1", "Status"),
        (names.META_GROUP, "v1", "DeleteOptions"),
    ],
)
def test_virtual_kinds_are_declared(group, version, kind):
    s = schema_for(group, version, kind)
    assert s is not None and s.short_name == kind


def test_unknown_kinds_have_no_schema():
    assert schema_for("", "v1", "Nope") is None
    assert schema_for("nope.orch.io", "v1", "Pod") is None
    assert list_schema("", "v1", "Nope") is None


def test_list_schema_wraps_items_after_list_meta():
    lst = list_schema("", "v1", "Pod")
    assert lst is schema_for("", "v1", "PodList")
    assert lst.name == "k8s.io.api.core.v1.PodList"
    assert field(lst, "metadata").number == 1 and field(lst, "metadata").type is LIST_META
    items = field(lst, "items")
    assert items.number == 2 and items.required
    assert isinstance(items.type, List) and items.type.item_type is pod()
    assert list_schema("", "v1", "Pod") is lst  # cached


def test_message_names_are_unique_and_in_upstream_packages():
    seen: dict[str, Struct] = {}
    for s in ALL_STRUCTS:
        assert s.name not in seen or seen[s.name] is s, f"two structs named {s.name}"
        seen[s.name] = s
        assert s.name.startswith(
            (
                "k8s.io.api.",
                "k8s.io.apimachinery.pkg.apis.meta.v1.",
                "k8s.io.metrics.pkg.apis.metrics.v1beta1.",
                "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.",
            )
        ), s.name


def test_openapi_names_follow_upstream():
    assert pod().openapi_name == "io.k8s.api.core.v1.Pod"
    assert OBJECT_META.openapi_name == "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def test_group_versions_map_to_upstream_proto_packages():
    assert proto_package("", "v1") == "k8s.io.api.core.v1"
    assert proto_package(names.RBAC_GROUP, "v1") == "k8s.io.api.rbac.v1"
    assert proto_package(names.COORDINATION_GROUP, "v1") == "k8s.io.api.coordination.v1"
    assert proto_package("apps", "v1") == "k8s.io.api.apps.v1"
    for (group, version, kind), s in KIND_SCHEMAS.items():
        if kind not in ("Status", "DeleteOptions"):
            assert s.package == proto_package(group, version), (group, kind)


# --- internal consistency of every struct ----------------------------------------------------


@pytest.mark.parametrize("struct", ALL_STRUCTS, ids=STRUCT_IDS)
def test_struct_numbers_and_json_names_are_unique(struct):
    numbers = [f.number for f in struct.fields]
    assert len(numbers) == len(set(numbers))
    assert all(0 < n < 1 << 29 for n in numbers)
    json_names = list(struct.json_fields())  # raises on a clash through inline fields
    assert len(json_names) == len(set(json_names))
    for f in struct.fields:
        if f.inline:
            assert f.json_name == "" and isinstance(f.type, Struct)
        else:
            assert f.json_name


def test_top_level_kinds_leave_type_meta_to_the_envelope():
    # apiVersion and kind are inline TypeMeta upstream, with no field number of their own.
    for s in set(KIND_SCHEMAS.values()):
        assert "apiVersion" not in s.json_fields() and "kind" not in s.json_fields(), s.name


@pytest.mark.parametrize("struct", ALL_STRUCTS, ids=STRUCT_IDS)
def test_list_markers_are_consistent(struct):
    for name, f in struct.json_fields().items():
        t = f.type
        while isinstance(t, Map):
            t = t.value_type
        if not isinstance(t, List):
            continue
        where = f"{struct.short_name}.{name}"
        item = t.item_type
        if t.list_type == "map":
            assert isinstance(item, Struct), f"{where}: map list of non-structs"
            assert t.map_keys, where
            for key in t.map_keys:
                kf = item.field(key)
                assert kf is not None, f"{where}: map key {key} is not a field of {item.short_name}"
                assert is_scalar(kf.type), f"{where}: map key {key} is not scalar"
        elif t.list_type == "set":
            assert is_scalar(item), f"{where}: set of non-scalars"
        if t.patch_merge_key:
            assert isinstance(item, Struct), where
            assert item.field(t.patch_merge_key) is not None, (
                f"{where}: merge key {t.patch_merge_key} missing in {item.short_name}"
            )
            assert t.merges


@pytest.mark.parametrize("struct", ALL_STRUCTS, ids=STRUCT_IDS)
def test_pointer_and_required_flags_fit_their_types(struct):
    for f in struct.fields:
        if isinstance(f.type, (List, Map)):
            assert not f.pointer, f"{struct.short_name}.{f.json_name}: pointer on list/map"
        if f.inline:
            assert not f.pointer and not f.required


def test_only_upstream_free_form_values_are_opaque():
    opaque = [
        (s.short_name, n, f.type.message)
        for s in ALL_STRUCTS
        for n, f in s.json_fields().items()
        if isinstance(f.type, Opaque)
    ]
    props = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"
    assert sorted(opaque) == [
        ("ControllerRevision", "data", "k8s.io.apimachinery.pkg.runtime.RawExtension"),
        ("CustomResourceValidation", "openAPIV3Schema", props),
        ("ManagedFieldsEntry", "fieldsV1", "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"),
    ]
    # A definition's schema (recursive JSONSchemaProps) is kept as given, checked by
    # apiextensions.structural; its protobuf form is not upstream's.
    assert all(
        f.type.upstream_wire or f.type.message == props
        for s in ALL_STRUCTS
        for f in s.fields
        if isinstance(f.type, Opaque)
    )


# --- DSL behaviour ---------------------------------------------------------------------------


def test_unmarked_merge_lists_read_as_map_or_set():
    keyed = List(OWNER_REFERENCE, patch_strategy="merge", patch_merge_key="uid")
    assert keyed.list_type == "map" and keyed.map_keys == ("uid",) and not keyed.marked
    scalars = List(String(), patch_strategy="merge")
    assert scalars.list_type == "set" and scalars.map_keys == () and not scalars.marked
    plain = List(String())
    assert plain.list_type == "atomic" and not plain.marked and not plain.merges
    explicit = List(OWNER_REFERENCE, "atomic", patch_strategy="merge", patch_merge_key="uid")
    assert explicit.list_type == "atomic" and explicit.marked and explicit.merges
    retain = List(core.Volume, patch_strategy="merge,retainKeys", patch_merge_key="name")
    assert retain.list_type == "map" and retain.merges


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError):
        List(String(), "map")
    with pytest.raises(ValueError):
        List(String(), "set", ("x",))
    with pytest.raises(ValueError):
        List(String(), "ordered")
    with pytest.raises(ValueError):
        List(String(), patch_strategy="bogus")
    with pytest.raises(ValueError):
        Integer(16)
    with pytest.raises(ValueError):
        Map(String(), "partial")
    with pytest.raises(ValueError):
        Struct("x.Y", [Field("a", String(), 1), Field("b", String(), 1)])
    with pytest.raises(ValueError):
        Field("", String(), 1, inline=True)
    with pytest.raises(ValueError):
        Field("a", String(), 0)
    clash = Struct("x.Z", [Field("name", String(), 1), Field("", core.LocalObjectReference, 2, inline=True)])
    with pytest.raises(ValueError):
        clash.json_fields()


def test_inline_structs_flatten_in_json_and_nest_on_the_wire():
    volume = core.Volume
    assert set(volume.json_fields()) == {"name"} | set(core.VolumeSource.json_fields())
    assert volume.field("emptyDir").number == 2  # number within VolumeSource
    chain = volume.inline_path("emptyDir")
    assert [f.number for f in chain] == [2, 2] and chain[0].inline
    assert volume.inline_path("name") == (volume.by_number(1),)
    assert volume.inline_path("nope") == ()
    assert volume.by_number(2).inline and volume.by_number(2).type is core.VolumeSource
    ephemeral = core.EphemeralContainer
    assert ephemeral.field("image").number == 2
    assert ephemeral.by_number(1).type is core.EphemeralContainerCommon
    assert ephemeral.field("targetContainerName").number == 2


def test_resolve_path_steps_through_lists_maps_and_inline_structs():
    p = pod()
    ports = resolve_path(p, "spec.containers.ports")
    assert isinstance(ports, List) and ports.item_type is core.ContainerPort
    assert resolve_path(p, "spec.containers[0].ports[1].containerPort") == Integer(32)
    assert resolve_path(p, ["spec", "containers", 0, "name"]) == String()
    assert resolve_path(p, "spec.volumes.emptyDir") is core.EmptyDirVolumeSource
    assert resolve_path(p, "spec.volumes[0].configMap.name") == String()
    assert isinstance(resolve_path(p, "metadata.labels"), Map)
    assert resolve_path(p, "metadata.labels.app") == String()
    assert isinstance(resolve_path(p, "spec.overhead.cpu"), Quantity)
    assert resolve_path(p, "spec.nope") is None
    assert resolve_path(p, "spec.containers.name.deeper") is None
    assert resolve_path(p, "") is p
    cr = schema_for("apps", "v1", "ControllerRevision")
    assert isinstance(resolve_path(cr, "data.anything.at.all"), Opaque)


def test_resolve_field_and_split_path():
    p = pod()
    assert resolve_field(p, "spec.containers[0].ports").number == 6
    assert resolve_field(p, "spec.containers.ports[2]").number == 6
    assert resolve_field(p, "spec.nodeName").number == 10
    assert resolve_field(p, "spec.nope") is None
    assert resolve_field(p, "") is None
    assert split_path("spec.containers[0].ports[1].name") == ["spec", "containers", 0, "ports", 1, "name"]
    assert split_path("a[*].b") == ["a", "*", "b"]
    assert split_path(["a", 1]) == ["a", 1]


def test_iter_fields_uses_explain_style_paths():
    paths = {".".join(path): f for path, f, _ in iter_fields(pod())}
    assert paths["spec.containers.ports.containerPort"].number == 3
    assert paths["spec.volumes.emptyDir.sizeLimit"].number == 2
    assert paths["metadata.managedFields.fieldsV1"].number == 7
    assert "spec.containers" in paths and "status.containerStatuses.state.running.startedAt" in paths
    owners = {path: owner for path, _, owner in iter_fields(pod())}
    assert owners[("spec", "containers", "image")] is core.Container


def test_iter_structs_visits_each_struct_once():
    structs = list(iter_structs(pod()))
    assert structs[0] is pod()
    assert len(structs) == len({id(s) for s in structs})
    assert core.Container in structs and OBJECT_META in structs
    assert core.PersistentVolumeClaimSpec in structs  # through ephemeral volumes


def test_field_atomicity():
    assert field(core.PodSpec, "nodeSelector").atomic  # +mapType=atomic
    assert not field(OBJECT_META, "labels").atomic
    assert field(core.Container, "command").atomic  # unmarked list
    assert not field(core.PodSpec, "containers").atomic
    assert field(core.PodSpec, "imagePullSecrets").type.item_type.atomic  # LocalObjectReference
    claim_ref = field(core.PersistentVolumeSpec, "claimRef")
    assert claim_ref.type.atomic and not claim_ref.atomic  # field-level +structType=granular
    assert field(core.Container, "image").atomic  # scalars are one value


# --- upstream facts: numbers -----------------------------------------------------------------


def test_object_meta_numbers():
    numbers = {n: f.number for n, f in OBJECT_META.json_fields().items()}
    assert numbers == {
        "name": 1,
        "generateName": 2,
        "namespace": 3,
        "selfLink": 4,
        "uid": 5,
        "resourceVersion": 6,
        "generation": 7,
        "creationTimestamp": 8,
        "deletionTimestamp": 9,
        "deletionGracePeriodSeconds": 10,
        "labels": 11,
        "annotations": 12,
        "ownerReferences": 13,
        "finalizers": 14,
        "managedFields": 17,
    }
    assert OBJECT_META.name == "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert {n: f.number for n, f in MANAGED_FIELDS_ENTRY.json_fields().items()} == {
        "manager": 1,
        "operation": 2,
        "apiVersion": 3,
        "time": 4,
        "fieldsType": 6,
        "fieldsV1": 7,
        "subresource": 8,
    }
    assert {n: f.number for n, f in OWNER_REFERENCE.json_fields().items()} == {
        "apiVersion": 5,
        "kind": 1,
        "name": 3,
        "uid": 4,
        "controller": 6,
        "blockOwnerDeletion": 7,
    }
    assert {n: f.number for n, f in LIST_META.json_fields().items()} == {
        "selfLink": 1,
        "resourceVersion": 2,
        "continue": 3,
        "remainingItemCount": 4,
    }


@pytest.mark.parametrize(
    "path,number",
    [
        ("metadata", 1),
        ("spec", 2),
        ("status", 3),
        ("spec.volumes", 1),
        ("spec.containers", 2),
        ("spec.restartPolicy", 3),
        ("spec.terminationGracePeriodSeconds", 4),
        ("spec.dnsPolicy", 6),
        ("spec.nodeSelector", 7),
        ("spec.serviceAccountName", 8),
        ("spec.nodeName", 10),
        ("spec.hostNetwork", 11),
        ("spec.securityContext", 14),
        ("spec.initContainers", 20),
        ("spec.tolerations", 22),
        ("spec.priority", 25),
        ("spec.enableServiceLinks", 30),
        ("spec.topologySpreadConstraints", 33),
        ("spec.ephemeralContainers", 34),
        ("spec.os", 36),
        ("spec.hostUsers", 37),
        ("spec.schedulingGates", 38),
        ("spec.resourceClaims", 39),
        ("spec.containers.name", 1),
        ("spec.containers.image", 2),
        ("spec.containers.command", 3),
        ("spec.containers.args", 4),
        ("spec.containers.ports", 6),
        ("spec.containers.env", 7),
        ("spec.containers.resources", 8),
        ("spec.containers.volumeMounts", 9),
        ("spec.containers.livenessProbe", 10),
        ("spec.containers.imagePullPolicy", 14),
        ("spec.containers.envFrom", 19),
        ("spec.containers.terminationMessagePolicy", 20),
        ("spec.containers.startupProbe", 22),
        ("spec.containers.resizePolicy", 23),
        ("spec.containers.ports.name", 1),
        ("spec.containers.ports.hostPort", 2),
        ("spec.containers.ports.containerPort", 3),
        ("spec.containers.ports.protocol", 4),
        ("spec.containers.livenessProbe.httpGet", 2),
        ("spec.containers.livenessProbe.periodSeconds", 4),
        ("spec.volumes.name", 1),
        ("spec.volumes.hostPath", 1),
        ("spec.volumes.emptyDir", 2),
        ("spec.volumes.secret", 6),
        ("spec.volumes.configMap", 19),
        ("spec.volumes.projected", 26),
        ("spec.volumes.csi", 28),
        ("spec.volumes.ephemeral", 29),
        ("status.phase", 1),
        ("status.conditions", 2),
        ("status.hostIP", 5),
        ("status.podIP", 6),
        ("status.containerStatuses", 8),
        ("status.qosClass", 9),
        ("status.podIPs", 12),
        ("status.containerStatuses.restartCount", 5),
        ("status.containerStatuses.started", 9),
    ],
)
def test_pod_numbers(path, number):
    assert resolve_field(pod(), path).number == number


@pytest.mark.parametrize(
    "group,kind,path,number",
    [
        ("", "Node", "spec", 2),
        ("", "Node", "spec.podCIDR", 1),
        ("", "Node", "spec.taints", 5),
        ("", "Node", "spec.podCIDRs", 7),
        ("", "Node", "status.capacity", 1),
        ("", "Node", "status.conditions", 4),
        ("", "Node", "status.addresses", 5),
        ("", "Node", "status.daemonEndpoints.kubeletEndpoint.Port", 1),
        ("", "Node", "status.nodeInfo", 7),
        ("", "Node", "status.nodeInfo.architecture", 10),
        ("", "Node", "status.images", 8),
        ("", "Node", "status.config", 11),
        ("", "Service", "spec", 2),
        ("", "Service", "spec.ports", 1),
        ("", "Service", "spec.ports.port", 3),
        ("", "Service", "spec.ports.targetPort", 4),
        ("", "Service", "spec.ports.appProtocol", 6),
        ("", "Service", "spec.clusterIPs", 18),
        ("", "Service", "spec.ipFamilyPolicy", 17),
        ("", "Service", "spec.internalTrafficPolicy", 22),
        ("", "Service", "status.loadBalancer.ingress.ports", 4),
        ("", "Endpoints", "subsets", 2),
        ("", "Endpoints", "subsets.addresses.nodeName", 4),
        ("", "ConfigMap", "immutable", 4),
        ("", "ConfigMap", "binaryData", 3),
        ("", "Secret", "stringData", 4),
        ("", "Secret", "type", 3),
        ("", "Secret", "immutable", 5),
        ("", "Event", "involvedObject", 2),
        ("", "Event", "eventTime", 10),
        ("", "Event", "reportingComponent", 14),
        ("", "Namespace", "status.phase", 1),
        (names.EVENTS_GROUP, "Event", "eventTime", 2),
        (names.EVENTS_GROUP, "Event", "regarding", 8),
        (names.EVENTS_GROUP, "Event", "deprecatedCount", 15),
        (names.DISCOVERY_GROUP, "EndpointSlice", "addressType", 4),
        (names.DISCOVERY_GROUP, "EndpointSlice", "endpoints", 2),
        (names.DISCOVERY_GROUP, "EndpointSlice", "endpoints.hints", 8),
        (names.NETWORKING_GROUP, "Ingress", "spec.ingressClassName", 4),
        (names.NETWORKING_GROUP, "Ingress", "spec.rules.http.paths.pathType", 3),
        (names.NETWORKING_GROUP, "Ingress", "spec.defaultBackend.service", 4),
        (names.CERTIFICATES_GROUP, "CertificateSigningRequest", "spec.signerName", 7),
        (names.CERTIFICATES_GROUP, "CertificateSigningRequest", "spec.expirationSeconds", 8),
        (names.CERTIFICATES_GROUP, "CertificateSigningRequest", "status.conditions.status", 6),
        (names.COORDINATION_GROUP, "Lease", "spec.renewTime", 4),
        (names.RBAC_GROUP, "ClusterRole", "aggregationRule", 3),
        (names.RBAC_GROUP, "RoleBinding", "roleRef", 3),
        ("apps", "Deployment", "spec.template", 3),
        ("apps", "Deployment", "spec.progressDeadlineSeconds", 9),
        ("apps", "Deployment", "status.conditions.lastUpdateTime", 6),
        ("apps", "StatefulSet", "spec.ordinals", 11),
        ("apps", "DaemonSet", "spec.revisionHistoryLimit", 6),
        ("batch", "Job", "spec.podFailurePolicy", 11),
        ("batch", "CronJob", "spec.timeZone", 8),
        (names.ADMISSIONREGISTRATION_GROUP, "MutatingWebhookConfiguration", "webhooks.reinvocationPolicy", 10),
        (names.ADMISSIONREGISTRATION_GROUP, "MutatingWebhookConfiguration", "webhooks.objectSelector", 11),
        (names.ADMISSIONREGISTRATION_GROUP, "ValidatingWebhookConfiguration", "webhooks.objectSelector", 10),
    ],
)
def test_other_kind_numbers(group, kind, path, number):
    s = schema_for(group, "v1", kind)
    assert resolve_field(s, path).number == number


# --- upstream facts: markers, pointers, types ------------------------------------------------


def test_pod_spec_list_markers():
    containers = field(core.PodSpec, "containers")
    assert containers.required
    t = containers.type
    assert (t.patch_strategy, t.patch_merge_key, t.list_type, t.map_keys) == ("merge", "name", "map", ("name",))
    volumes = field(core.PodSpec, "volumes").type
    assert volumes.patch_strategy == "merge,retainKeys" and volumes.map_keys == ("name",)
    tsc = field(core.PodSpec, "topologySpreadConstraints").type
    assert tsc.map_keys == ("topologyKey", "whenUnsatisfiable") and tsc.patch_merge_key == "topologyKey"
    assert tsc.marked
    assert field(core.PodSpec, "tolerations").type.list_type == "atomic"
    assert field(core.PodSpec, "nodeSelector").type.map_type == "atomic"


def test_container_list_markers():
    ports = field(core.Container, "ports").type
    assert (ports.list_type, ports.map_keys) == ("map", ("containerPort", "protocol"))
    assert (ports.patch_strategy, ports.patch_merge_key) == ("merge", "containerPort")
    env = field(core.Container, "env").type
    assert (env.list_type, env.map_keys, env.patch_merge_key) == ("map", ("name",), "name")
    mounts = field(core.Container, "volumeMounts").type
    assert mounts.map_keys == ("mountPath",)
    assert field(core.ContainerPort, "protocol").default == "TCP"


def test_object_meta_markers():
    finalizers = field(OBJECT_META, "finalizers").type
    assert finalizers.list_type == "set" and finalizers.patch_strategy == "merge"
    assert not finalizers.marked  # v1.27 carries only the patch marker
    owners = field(OBJECT_META, "ownerReferences").type
    assert (owners.list_type, owners.map_keys, owners.patch_merge_key) == ("map", ("uid",), "uid")
    assert OWNER_REFERENCE.atomic
    assert field(OBJECT_META, "managedFields").type.list_type == "atomic"


def test_other_markers():
    svc_ports = resolve_path(schema_for("", "v1", "Service"), "spec.ports")
    assert svc_ports.map_keys == ("port", "protocol") and svc_ports.patch_merge_key == "port"
    node_conditions = resolve_path(schema_for("", "v1", "Node"), "status.conditions")
    assert node_conditions.map_keys == ("type",) and not node_conditions.marked
    assert resolve_path(schema_for("", "v1", "Node"), "spec.podCIDRs").list_type == "set"
    addresses = resolve_path(schema_for(names.DISCOVERY_GROUP, "v1", "EndpointSlice"), "endpoints.addresses")
    assert addresses.list_type == "set" and addresses.marked
    csr_conditions = resolve_path(
        schema_for(names.CERTIFICATES_GROUP, "v1", "CertificateSigningRequest"), "status.conditions"
    )
    assert csr_conditions.list_type == "map" and csr_conditions.patch_strategy is None
    job_conditions = resolve_path(schema_for("batch", "v1", "Job"), "status.conditions")
    assert job_conditions.list_type == "atomic" and job_conditions.patch_merge_key == "type"
    strategy = resolve_field(schema_for("apps", "v1", "Deployment"), "spec.strategy")
    assert strategy.patch_strategy == "retainKeys"
    assert resolve_field(schema_for("policy", "v1", "PodDisruptionBudget"), "spec.selector").patch_strategy == "replace"
    rules = resolve_path(schema_for(names.NETWORKING_GROUP, "v1", "Ingress"), "spec.rules")
    assert rules.list_type == "atomic" and rules.marked
    assert struct_of(schema_for(names.RBAC_GROUP, "v1", "RoleBinding"), "subjects").atomic


@pytest.mark.parametrize(
    "struct,name,pointer",
    [
        (core.PodSpec, "terminationGracePeriodSeconds", True),
        (core.PodSpec, "activeDeadlineSeconds", True),
        (core.PodSpec, "securityContext", True),
        (core.PodSpec, "affinity", True),
        (core.PodSpec, "priority", True),
        (core.PodSpec, "enableServiceLinks", True),
        (core.PodSpec, "runtimeClassName", True),
        (core.PodSpec, "hostNetwork", False),
        (core.PodSpec, "restartPolicy", False),
        (core.PodSpec, "nodeName", False),
        (core.Container, "resources", False),
        (core.Container, "securityContext", True),
        (core.Container, "livenessProbe", True),
        (core.Container, "stdin", False),
        (core.ContainerPort, "hostPort", False),
        (core.ContainerStatus, "state", False),
        (core.ContainerStatus, "started", True),
        (core.PodStatus, "startTime", True),
        (core.HostPathVolumeSource, "type", True),
        (core.SecretVolumeSource, "defaultMode", True),
        (core.ServiceSpec, "ipFamilyPolicy", True),
        (core.ServiceSpec, "healthCheckNodePort", False),
        (core.ServicePort, "targetPort", False),
        (core.NodeStatus, "nodeInfo", False),
        (core.NodeStatus, "config", True),
        (OBJECT_META, "creationTimestamp", False),
        (OBJECT_META, "deletionTimestamp", True),
        (OBJECT_META, "deletionGracePeriodSeconds", True),
        (OBJECT_META, "generation", False),
    ],
)
def test_pointer_facts(struct, name, pointer):
    assert field(struct, name).pointer is pointer


def test_value_types():
    assert isinstance(field(OBJECT_META, "creationTimestamp").type, Time)
    assert field(OBJECT_META, "generation").type == Integer(64)
    assert isinstance(field(core.ServicePort, "targetPort").type, IntOrString)
    assert isinstance(field(core.ResourceRequirements, "limits").type.value_type, Quantity)
    assert isinstance(field(core.PodSpec, "hostNetwork").type, Boolean)
    lease = schema_for(names.COORDINATION_GROUP, "v1", "Lease")
    assert resolve_path(lease, "spec.renewTime").kind == "microtime"
    secret = schema_for("", "v1", "Secret")
    assert resolve_path(secret, "data").value_type.kind == "bytes"
    csr = schema_for(names.CERTIFICATES_GROUP, "v1", "CertificateSigningRequest")
    extra = resolve_path(csr, "spec.extra")
    assert isinstance(extra, Map) and extra.value_type.wrapper == "k8s.io.api.certificates.v1.ExtraValue"
    assert resolve_path(pod(), "spec.restartPolicy").enum == ("Always", "Never", "OnFailure")
    assert resolve_path(schema_for("", "v1", "Service"), "spec.type").enum == (
        "ClusterIP",
        "ExternalName",
        "LoadBalancer",
        "NodePort",
    )


@pytest.mark.parametrize(
    "group,kind,path",
    [
        ("", "Pod", "spec.containers"),
        ("", "Pod", "spec.containers.name"),
        ("", "Pod", "spec.volumes.name"),
        ("", "Pod", "spec.containers.ports.containerPort"),
        ("", "Pod", "status.containerStatuses.ready"),
        ("", "Service", "spec.ports.port"),
        ("", "Node", "status.nodeInfo.machineID"),
        (names.DISCOVERY_GROUP, "EndpointSlice", "addressType"),
        (names.DISCOVERY_GROUP, "EndpointSlice", "endpoints"),
        (names.NETWORKING_GROUP, "Ingress", "spec.rules.http.paths.pathType"),
        (names.CERTIFICATES_GROUP, "CertificateSigningRequest", "spec.signerName"),
        (names.CERTIFICATES_GROUP, "CertificateSigningRequest", "spec.request"),
        (names.RBAC_GROUP, "RoleBinding", "roleRef"),
        (names.EVENTS_GROUP, "Event", "eventTime"),
        ("apps", "Deployment", "spec.selector"),
        ("apps", "Deployment", "spec.template"),
    ],
)
def test_required_fields(group, kind, path):
    assert resolve_field(schema_for(group, "v1", kind), path).required


@pytest.mark.parametrize(
    "group,kind,path",
    [
        ("", "Pod", "spec"),
        ("", "Pod", "metadata"),
        ("", "Pod", "spec.containers.image"),
        ("", "Service", "spec.ports.targetPort"),
        (names.RBAC_GROUP, "Role", "rules"),
        (names.EVENTS_GROUP, "Event", "metadata"),
        (names.DISCOVERY_GROUP, "EndpointSlice", "ports"),
    ],
)
def test_optional_fields(group, kind, path):
    assert not resolve_field(schema_for(group, "v1", kind), path).required
