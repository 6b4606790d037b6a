"""Field descriptions are declared with the fields, once.

``kubectl explain`` shows a field's description from the OpenAPI v3 component
schemas. Those words are declared on the ``Field`` of the struct they belong to
(``schema.py`` for the meta structs, ``schemas/*.py`` for the kinds), and the
OpenAPI generator holds no per-field table of its own any more.

``EXPLAINED`` is what ``kubectl explain`` showed before the descriptions moved
(the generator's former ``"<Struct>.<field>"`` table, by definition name): every
one must still be produced, word for word, for the same property.
"""

from __future__ import annotations

import ast
import inspect

import orjson
import pytest

from apiserver_min.api import schema as S
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schemas import KIND_SCHEMAS
from apiserver_min.server import openapi as oa

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
CORE = "io.k8s.api.core.v1"
APPS = "io.k8s.api.apps.v1"
RBAC = "io.k8s.api.rbac.v1"
COORDINATION = "io.k8s.api.coordination.v1"

# definition name -> JSON field name -> description
EXPLAINED: dict[str, dict[str, str]] = {
    f"{META}.ObjectMeta": {
        "name": "Name unique within a namespace (or within the cluster for cluster-scoped kinds). Required "
        "when creating, unless generateName is used. Cannot be updated.",
        "generateName": "A prefix the server uses to generate a unique name when name is empty; a random "
        "suffix is appended.",
        "namespace": "The namespace the object lives in; empty means the default namespace for namespaced "
        "kinds. Cannot be updated.",
        "selfLink": "Deprecated and always empty.",
        "uid": "A value unique in time and space for this object, set by the server on create. Read-only.",
        "resourceVersion": "An opaque value identifying the stored version of the object, used for "
        "optimistic concurrency and for watches. Clients must not parse it.",
        "generation": "A sequence number for the desired state, set by the server. Read-only.",
        "creationTimestamp": "When the server created the object (RFC 3339, UTC). Read-only.",
        "deletionTimestamp": "When the object will be deleted, set by the server when deletion is requested "
        "and finalizers or a grace period hold it. Read-only.",
        "deletionGracePeriodSeconds": "Seconds the object is given to terminate gracefully before it is "
        "removed. Read-only.",
        "labels": "String keys and values used to organise and select objects.",
        "annotations": "String keys and values for arbitrary non-identifying data, kept by tools and controllers.",
        "ownerReferences": "Objects this object depends on; when all owners are gone the garbage collector deletes it.",
        "finalizers": "Names that must each be removed before the object is deleted from storage.",
        "managedFields": "Which manager owns which fields (server-side apply); maintained by the server.",
    },
    f"{META}.ListMeta": {
        "resourceVersion": "The version of the list, for a following watch.",
        "continue": "Set when more items are available: pass it as the continue parameter to get the next page.",
        "remainingItemCount": "How many items follow this page, when known.",
    },
    f"{CORE}.PodSpec": {
        "volumes": "Volumes the pod's containers may mount.",
        "initContainers": "Containers run one after another, each to completion, before the main containers start.",
        "containers": "The containers of the pod. At least one is required; the list cannot change after creation.",
        "ephemeralContainers": "Debugging containers added to a running pod.",
        "restartPolicy": "When containers of the pod are restarted. Defaults to Always.",
        "terminationGracePeriodSeconds": "Seconds given to the pod to stop after a termination signal before"
        " it is killed. Defaults to 30.",
        "activeDeadlineSeconds": "Seconds the pod may be active, counted from its start, before the system fails it.",
        "dnsPolicy": "How the pod's DNS is set up. Defaults to ClusterFirst.",
        "nodeSelector": "Labels a node must carry for the pod to be scheduled to it.",
        "serviceAccountName": "The service account the pod runs as.",
        "serviceAccount": "Deprecated alias of serviceAccountName.",
        "automountServiceAccountToken": "Whether a service account token is mounted into the pod.",
        "nodeName": "The node the pod is bound to; set by the scheduler, or by the user to bypass it.",
        "hostNetwork": "Use the node's network namespace.",
        "hostPID": "Use the node's process namespace.",
        "hostIPC": "Use the node's IPC namespace.",
        "securityContext": "Security attributes applied to every container of the pod.",
        "imagePullSecrets": "Secrets used to pull the pod's images.",
        "hostname": "The pod's host name; defaults to the pod name.",
        "subdomain": "Sub-domain of the pod's fully qualified host name.",
        "affinity": "Scheduling constraints relative to nodes and other pods.",
        "schedulerName": "The scheduler that places the pod.",
        "tolerations": "Taints of nodes the pod tolerates.",
        "priorityClassName": "The priority class giving the pod its priority.",
        "priority": "The pod's priority, resolved from priorityClassName by admission.",
        "runtimeClassName": "The runtime class selecting the container runtime configuration.",
        "overhead": "Resources consumed by the pod sandbox, on top of the containers' requests.",
        "topologySpreadConstraints": "How the pods of a group spread over topology domains.",
        "os": "The operating system the pod's containers need.",
    },
    f"{CORE}.Pod": {
        "spec": "The desired behaviour of the pod.",
        "status": "The most recently observed state of the pod, written by its node agent. Read-only.",
    },
    f"{CORE}.Container": {
        "name": "Name of the container, unique within the pod (a DNS label). Cannot be updated.",
        "image": "Container image name.",
        "command": "Entrypoint array, run without a shell. Replaces the image's ENTRYPOINT; $(VAR) "
        "references to the container's environment are expanded.",
        "args": "Arguments to the entrypoint. Replace the image's CMD; $(VAR) references are expanded.",
        "workingDir": "The container's working directory; defaults to the image's.",
        "ports": "Ports the container exposes. Informational: any port the container listens on is "
        "reachable. Cannot be updated.",
        "envFrom": "Sources whose keys become environment variables.",
        "env": "Environment variables set in the container.",
        "resources": "Compute resources the container requests and is limited to.",
        "resizePolicy": "How each resource is resized in place.",
        "volumeMounts": "Pod volumes mounted into the container's filesystem.",
        "volumeDevices": "Block devices the container uses.",
        "livenessProbe": "Periodic check of container liveness; the container restarts when it fails.",
        "readinessProbe": "Periodic check of container readiness; the pod leaves service endpoints while it fails.",
        "startupProbe": "Check that must succeed once before the other probes start.",
        "lifecycle": "Actions the system takes on container start and stop.",
        "terminationMessagePath": "File the container writes its termination message to. Defaults to "
        "/dev/termination-log.",
        "terminationMessagePolicy": "How the termination message is filled in. Defaults to File.",
        "imagePullPolicy": "When the image is pulled. Defaults to Always for the :latest tag or no tag, "
        "IfNotPresent otherwise.",
        "securityContext": "Security options the container runs with.",
        "stdin": "Allocate a buffer for stdin in the container runtime.",
        "stdinOnce": "Close stdin after the first attach disconnects.",
        "tty": "Allocate a TTY for the container.",
    },
    f"{CORE}.ContainerPort": {
        "name": "A name for the port, unique within the pod (IANA service name), that services can refer to.",
        "hostPort": "Port number to expose on the host; most containers do not need it.",
        "containerPort": "Port number on the pod's IP address (1-65535).",
        "protocol": "Protocol of the port. Defaults to TCP.",
        "hostIP": "Host IP to bind the host port to.",
    },
    f"{CORE}.EnvVar": {
        "name": "Name of the environment variable.",
        "value": "The value; $(VAR) references to earlier variables are expanded.",
        "valueFrom": "Source of the value when value is empty.",
    },
    f"{CORE}.VolumeMount": {
        "name": "Name of the pod volume to mount.",
        "mountPath": "Path inside the container to mount the volume at.",
        "readOnly": "Mount read-only.",
        "subPath": "Path inside the volume to mount instead of its root.",
    },
    f"{CORE}.ResourceRequirements": {
        "limits": "The most of each resource the container may use.",
        "requests": "The amount of each resource the container is guaranteed; defaults to the limits.",
    },
    f"{CORE}.Volume": {
        "name": "Name of the volume, unique within the pod.",
    },
    f"{APPS}.Deployment": {
        "spec": "The desired behaviour of the deployment.",
        "status": "The most recently observed state of the deployment. Read-only.",
    },
    f"{APPS}.DeploymentSpec": {
        "replicas": "Number of desired pods. Defaults to 1.",
        "selector": "Label selector for the pods the deployment manages; must match the template's labels. "
        "Cannot be changed.",
        "template": "The pod template new pods are created from.",
        "strategy": "How existing pods are replaced by new ones.",
        "minReadySeconds": "Seconds a new pod must be ready, without crashing, to count as available.",
        "revisionHistoryLimit": "Number of old replica sets kept for rollback. Defaults to 10.",
        "paused": "Pause the deployment's rollouts.",
        "progressDeadlineSeconds": "Seconds a rollout may make no progress before it is reported failed. "
        "Defaults to 600.",
    },
    f"{APPS}.DeploymentStrategy": {
        "type": "The kind of rollout: Recreate or RollingUpdate (the default).",
        "rollingUpdate": "Parameters of a rolling update.",
    },
    f"{APPS}.RollingUpdateDeployment": {
        "maxUnavailable": "Pods that may be unavailable during the update, as a number or a percentage of "
        "desired pods. Defaults to 25%.",
        "maxSurge": "Pods that may be created above the desired number, as a number or a percentage. Defaults to 25%.",
    },
    f"{CORE}.PodTemplateSpec": {
        "metadata": "Metadata of the pods created from the template.",
        "spec": "Specification of the pods created from the template.",
    },
    f"{CORE}.ServiceSpec": {
        "ports": "The ports the service exposes.",
        "selector": "Labels of the pods traffic is routed to.",
        "clusterIP": "The service's virtual IP, allocated by the server unless given; None makes a headless service.",
        "type": "How the service is exposed: ClusterIP (the default), NodePort, LoadBalancer or ExternalName.",
        "sessionAffinity": "ClientIP keeps a client on one endpoint. Defaults to None.",
    },
    f"{CORE}.ServicePort": {
        "name": "Name of the port, required when the service has several.",
        "protocol": "Protocol of the port. Defaults to TCP.",
        "port": "The port the service listens on.",
        "targetPort": "Number or name of the port on the pods. Defaults to port.",
        "nodePort": "The port on every node for NodePort and LoadBalancer services.",
    },
    f"{CORE}.ConfigMap": {
        "data": "Configuration values by key (UTF-8 text).",
        "binaryData": "Binary configuration values by key, base64 encoded.",
        "immutable": "When true, data cannot be updated; the object can only be deleted.",
    },
    f"{CORE}.Secret": {
        "data": "Secret values by key, base64 encoded.",
        "stringData": "Write-only convenience: plain string values merged into data on write.",
        "type": "Type of the secret, for programmatic handling.",
        "immutable": "When true, data cannot be updated; the object can only be deleted.",
    },
    f"{RBAC}.Role": {
        "rules": "The permissions the role grants.",
    },
    f"{RBAC}.ClusterRole": {
        "rules": "The permissions the cluster role grants.",
        "aggregationRule": "Selects cluster roles whose rules are aggregated into this one.",
    },
    f"{RBAC}.PolicyRule": {
        "verbs": "Verbs the rule allows; '*' allows all.",
        "apiGroups": "API groups of the resources; '' is the core group, '*' all groups.",
        "resources": "Resources the rule applies to; '*' all of them.",
        "resourceNames": "Names of the objects the rule is limited to.",
        "nonResourceURLs": "Non-resource URL paths the rule allows (cluster roles only).",
    },
    f"{RBAC}.RoleRef": {
        "apiGroup": "API group of the referenced role.",
        "kind": "Kind of the referenced role: Role or ClusterRole.",
        "name": "Name of the referenced role.",
    },
    f"{RBAC}.Subject": {
        "kind": "Kind of subject: User, Group or ServiceAccount.",
        "name": "Name of the subject.",
        "namespace": "Namespace of a service account subject.",
        "apiGroup": "API group of the subject; empty for service accounts.",
    },
    f"{RBAC}.RoleBinding": {
        "subjects": "The subjects the role is granted to.",
        "roleRef": "The role granted; cannot be changed.",
    },
    f"{RBAC}.ClusterRoleBinding": {
        "subjects": "The subjects the cluster role is granted to.",
        "roleRef": "The cluster role granted; cannot be changed.",
    },
    f"{META}.LabelSelector": {
        "matchLabels": "Labels an object must carry, ANDed with matchExpressions.",
        "matchExpressions": "Requirements on labels, ANDed together.",
    },
    f"{META}.LabelSelectorRequirement": {
        "key": "The label key the requirement applies to.",
        "operator": "In, NotIn, Exists or DoesNotExist.",
        "values": "Values for In and NotIn; empty for Exists and DoesNotExist.",
    },
    f"{COORDINATION}.LeaseSpec": {
        "holderIdentity": "Identity of the current holder of the lease.",
        "leaseDurationSeconds": "Seconds candidates wait before they may take the lease over.",
        "acquireTime": "When the current holder acquired the lease.",
        "renewTime": "When the current holder last renewed the lease.",
        "leaseTransitions": "How many times the lease changed holders.",
    },
}


def _structs() -> dict[str, S.Struct]:
    """Every declared struct reachable from a kind, by OpenAPI definition name."""
    out: dict[str, S.Struct] = {}

    def visit(t: S.Type) -> None:
        if isinstance(t, S.Struct):
            if t.openapi_name in out:
                return
            out[t.openapi_name] = t
            for f in t.fields:
                visit(f.type)
        elif isinstance(t, S.List):
            visit(t.item_type)
        elif isinstance(t, S.Map):
            visit(t.value_type)

    for s in KIND_SCHEMAS.values():
        visit(s)
    return out


STRUCTS = _structs()
TRIPLES = [(d, f, text) for d, fields in EXPLAINED.items() for f, text in fields.items()]
IDS = [f"{d.rsplit('.', 1)[1]}.{f}" for d, f, _ in TRIPLES]


@pytest.fixture(scope="module")
def components() -> dict[str, list[dict]]:
    """Definition name -> its component schema in every v3 document that carries it."""
    api = oa.OpenAPI(REGISTRY, lambda g, v, r: True, REGISTRY.group_versions())
    out: dict[str, list[dict]] = {}
    for body in api.docs.values():
        for name, schema in orjson.loads(body)["components"]["schemas"].items():
            out.setdefault(name, []).append(schema)
    return out


def test_expected_data_is_the_former_table():
    assert len(TRIPLES) == 149
    assert len({(d, f) for d, f, _ in TRIPLES}) == 149


@pytest.mark.parametrize("definition,field,text", TRIPLES, ids=IDS)
def test_explain_description_still_generated(components, definition, field, text):
    schemas = components.get(definition)
    assert schemas, f"{definition} is in no OpenAPI v3 document"
    for schema in schemas:
        prop = schema["properties"].get(field)
        assert prop is not None, f"{definition} has no property {field!r}"
        assert prop.get("description") == text, f"{definition}.{field}: {prop.get('description')!r}"


@pytest.mark.parametrize("definition,field,text", TRIPLES, ids=IDS)
def test_description_declared_on_the_field(definition, field, text):
    struct = STRUCTS[definition]
    declared = struct.field(field)
    assert declared is not None, f"{definition} declares no {field!r}"
    assert declared.description == text
    # declared on this struct itself, not reached through an inline struct shared elsewhere
    assert declared in struct.fields


def _struct_field_keys() -> set[str]:
    """Every "<Struct>.<json name>" a per-field table could be keyed by (short or definition name)."""
    keys = set()
    for s in STRUCTS.values():
        for json_name in s.json_fields():
            keys.add(f"{s.short_name}.{json_name}")
            keys.add(f"{s.openapi_name}.{json_name}")
    return keys


def test_openapi_holds_no_per_field_description_table():
    assert not hasattr(oa, "_FIELDS")
    keys = _struct_field_keys()
    # no dict anywhere in the generator's source is keyed by a struct's field
    tree = ast.parse(inspect.getsource(oa))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k in node.keys:
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    assert k.value not in keys, f"openapi.py line {k.lineno}: per-field key {k.value!r}"
    # nor, once built, a module-level mapping
    for name, value in vars(oa).items():
        if isinstance(value, dict):
            hits = [k for k in value if isinstance(k, str) and k in keys]
            assert not hits, f"openapi.{name} is keyed by struct fields: {hits[:3]}"
    # the generic words remain, keyed by bare JSON name
    assert set(oa._COMMON_FIELDS) == {"apiVersion", "kind", "spec", "status", "items"}


def test_describe_uses_the_field_then_the_generic_words():
    described = S.Field("spec", S.String(), 1, description="Own words.")
    assert oa._describe("spec", described) == "Own words."
    assert oa._describe("spec", S.Field("spec", S.String(), 1)) == oa._COMMON_FIELDS["spec"]
    assert oa._describe("other", S.Field("other", S.String(), 1)) == ""
