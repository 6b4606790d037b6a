"""Schema declarations of every served kind, by group.

``KIND_SCHEMAS`` maps ``(group, version, kind)`` to the kind's top-level
:class:`~apiserver_min.api.schema.Struct`; ``schema_for``/``list_schema`` (at
the end of this module) are the look-ups to use. Group names are ours
(``rbac.orch.io``); the review kinds are also registered under the upstream
spellings kubectl hard-codes (``authorization.k8s.io``), and Status and
DeleteOptions under the core group and both meta group spellings.

Coverage: every kind is declared field by field with upstream (v1.27) numbers;
the only opaque values are upstream's own free-form ones (RawExtension in
ControllerRevision.data, FieldsV1 in managedFields).
"""

from __future__ import annotations

from .. import names
from ..schema import DELETE_OPTIONS, LIST_META, STATUS, Field, List, Struct
from . import (
    admissionregistration,
    apiextensions,
    apps,
    authentication,
    authorization,
    autoscaling,
    autoscaling_v2,
    batch,
    certificates,
    coordination,
    core,
    discovery,
    events,
    flowcontrol,
    metrics,
    networking,
    node,
    policy,
    rbac,
    scheduling,
    storage,
)

__all__ = ["KIND_SCHEMAS", "GROUP_MODULES", "schema_for", "list_schema"]

# (group, version) -> module declaring that group version's kinds in ``KINDS``.
GROUP_MODULES = {
    (names.CORE_GROUP, "v1"): core,
    (names.APPS_GROUP, "v1"): apps,
    (names.BATCH_GROUP, "v1"): batch,
    (names.POLICY_GROUP, "v1"): policy,
    (names.AUTOSCALING_GROUP, "v1"): autoscaling,
    (names.AUTOSCALING_GROUP, "v2"): autoscaling_v2,
    (names.COORDINATION_GROUP, "v1"): coordination,
    (names.EVENTS_GROUP, "v1"): events,
    (names.DISCOVERY_GROUP, "v1"): discovery,
    (names.NETWORKING_GROUP, "v1"): networking,
    (names.CERTIFICATES_GROUP, "v1"): certificates,
    (names.RBAC_GROUP, "v1"): rbac,
    (names.NODE_GROUP, "v1"): node,
    (names.SCHEDULING_GROUP, "v1"): scheduling,
    (names.STORAGE_GROUP, "v1"): storage,
    (names.ADMISSIONREGISTRATION_GROUP, "v1"): admissionregistration,
    (names.AUTHORIZATION_GROUP, "v1"): authorization,
    (names.METRICS_GROUP, "v1beta1"): metrics,
    (names.APIEXTENSIONS_GROUP, "v1"): apiextensions,
    (names.FLOWCONTROL_GROUP, names.FLOWCONTROL_VERSION): flowcontrol,
}


def _build() -> dict[tuple[str, str, str], Struct]:
    out: dict[tuple[str, str, str], Struct] = {}
    for (group, version), module in GROUP_MODULES.items():
        for kind, schema in module.KINDS.items():
            out[(group, version, kind)] = schema
    for version, kinds in authentication.KINDS_BY_VERSION.items():
        for group in (names.AUTHENTICATION_GROUP, names.UPSTREAM_AUTHENTICATION_GROUP):
            for kind, schema in kinds.items():
                out[(group, version, kind)] = schema
    for kind, schema in authorization.KINDS.items():
        out[(names.UPSTREAM_AUTHORIZATION_GROUP, "v1", kind)] = schema
    for group in (names.CORE_GROUP, names.META_GROUP, names.UPSTREAM_META_GROUP):
        out[(group, "v1", "Status")] = STATUS
        out[(group, "v1", "DeleteOptions")] = DELETE_OPTIONS
    return out


KIND_SCHEMAS: dict[tuple[str, str, str], Struct] = _build()

# One line per kind for OpenAPI and ``kubectl explain`` (our words, not upstream's).
_DESCRIPTIONS = {
    "CustomResourceDefinition": "A resource type added at run time: its names, versions and schema.",
    "Pod": "A group of containers that share a node, network and storage, run together.",
    "Node": "A machine that runs pods, registered and kept up to date by its node agent.",
    "Namespace": "A scope for names; deleting it deletes everything inside it.",
    "Service": "A stable address and port set in front of the pods its selector picks.",
    "Endpoints": "The addresses and ports that implement a service (legacy form).",
    "EndpointSlice": "A slice of the addresses and ports that implement a service.",
    "ConfigMap": "Configuration data for pods, as string or binary values by key.",
    "Secret": "Sensitive data for pods, base64 encoded by key.",
    "ServiceAccount": "An identity for processes that run in pods.",
    "Event": "A report of something that happened to an object.",
    "LimitRange": "Per-object resource limits and defaults enforced in a namespace.",
    "ResourceQuota": "Aggregate resource limits enforced in a namespace.",
    "PersistentVolume": "A piece of storage provisioned for claims to bind to.",
    "PersistentVolumeClaim": "A request for storage that pods mount by name.",
    "PodTemplate": "A stored pod template.",
    "ReplicationController": "Keeps a number of pod replicas running (legacy form of ReplicaSet).",
    "Binding": "Binds a pod to a node; the scheduler's write.",
    "Deployment": "Declarative rolling updates of pods through replica sets.",
    "ReplicaSet": "Keeps a number of identical pods running.",
    "DaemonSet": "Runs one copy of a pod on each selected node.",
    "StatefulSet": "Runs pods with stable names and storage, in order.",
    "ControllerRevision": "An immutable snapshot of a controller's state.",
    "Job": "Runs pods until a number of them complete.",
    "CronJob": "Creates jobs on a schedule.",
    "Lease": "A time-bound claim held by one holder, for heartbeats and leader election.",
    "Ingress": "Rules routing outside HTTP traffic to services.",
    "IngressClass": "Names the controller that implements a class of ingresses.",
    "NetworkPolicy": "Allowed traffic to and from a set of pods.",
    "CertificateSigningRequest": "A request for a signed X.509 certificate from a named signer.",
    "Role": "Permissions within one namespace.",
    "RoleBinding": "Grants a role's permissions to subjects within one namespace.",
    "ClusterRole": "Permissions across the cluster or reusable in namespaces.",
    "ClusterRoleBinding": "Grants a cluster role's permissions to subjects cluster-wide.",
    "RuntimeClass": "Selects the container runtime configuration for pods.",
    "PriorityClass": "Maps a priority class name to a scheduling priority.",
    "PodDisruptionBudget": "Limits voluntary disruptions of a set of pods.",
    "Eviction": "A request to evict a pod, subject to disruption budgets.",
    "StorageClass": "A class of dynamically provisioned storage.",
    "ValidatingWebhookConfiguration": "Admission webhooks that may reject requests.",
    "MutatingWebhookConfiguration": "Admission webhooks that may change requested objects.",
    "Scale": "The desired and observed replica count of a scalable resource.",
    "HorizontalPodAutoscaler": "Scales a workload's replicas between bounds to keep its pods' metrics at targets.",
    "TokenReview": "Asks the server who a bearer token belongs to.",
    "TokenRequest": "Asks for a token for a service account.",
    "SelfSubjectReview": "Tells the caller who the server thinks it is.",
    "SubjectAccessReview": "Asks whether a user may perform an action.",
    "SelfSubjectAccessReview": "Asks whether the caller may perform an action.",
    "LocalSubjectAccessReview": "Asks whether a user may perform an action in one namespace.",
    "SelfSubjectRulesReview": "Lists what the caller may do in a namespace.",
    "FlowSchema": "Sorts requests into flows and names the priority level that serves them.",
    "PriorityLevelConfiguration": "A share of the server's concurrency, and what happens to requests beyond it.",
}
for (_g, _v, _kind), _schema in KIND_SCHEMAS.items():
    if _kind in _DESCRIPTIONS and not _schema.description:
        _schema.description = _DESCRIPTIONS[_kind]


# --- look-ups ---------------------------------------------------------------------------------


def schema_for(group: str, version: str, kind: str) -> Struct | None:
    """The schema of a kind (or of a ``<Kind>List``), or None if none is declared."""
    s = KIND_SCHEMAS.get((group, version, kind))
    if s is None:
        served = names.GROUP_ALIASES.get(group)
        if served is not None:  # an upstream spelling of an orch group (bodies on alias paths)
            return schema_for(served, version, kind)
        if kind.endswith("List"):
            return list_schema(group, version, kind[:-4])
    return s


_LISTS: dict[tuple[str, str, str], Struct] = {}


def list_schema(group: str, version: str, kind: str) -> Struct | None:
    """The ``<Kind>List`` schema: ``metadata`` (ListMeta, 1) and ``items`` (2)."""
    key = (group, version, kind)
    if key not in _LISTS:
        item = KIND_SCHEMAS.get(key)
        if item is None:
            return None
        _LISTS[key] = Struct(
            item.name + "List",
            [
                Field("metadata", LIST_META, 1),
                Field("items", List(item), 2, required=True),
            ],
        )
    return _LISTS[key]
