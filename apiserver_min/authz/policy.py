"""The default RBAC policy, its reconciliation at start, and the ClusterRole
aggregation controller.

At every start the server makes sure the default roles and bindings exist.
Missing objects are created. An existing object whose ``rbac.orch.io/autoupdate``
annotation is ``"false"`` is never touched (an operator took it over); any other
existing object only gains what it lacks: missing rules (or aggregation
selectors), missing subjects, missing labels and annotations. Nothing an
operator added is removed. A binding whose roleRef differs is recreated, since
roleRef cannot change in place.

Aggregated ClusterRoles (``aggregationRule.clusterRoleSelectors``) carry the
union of the rules of every ClusterRole their selectors match; the aggregation
controller keeps that true as roles change, so ``admin``/``edit``/``view`` grow
when a role labelled ``rbac.orch.io/aggregate-to-*`` appears.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Iterable

from ..api import names
from ..api.helpers import list_at
from .authorizer import PolicyRule
from .rbac import rules_from, uncovered

if TYPE_CHECKING:
    pass

log = logging.getLogger("orch-apiserver.rbac-policy")
# managedFields managers of the writes here (upstream: the writers' user agents): the default
# policy is reconciled by the API server itself, roles are aggregated by the controller manager.
FIELD_MANAGER = names.APISERVER_FIELD_MANAGER
AGGREGATOR_FIELD_MANAGER = names.CONTROLLER_MANAGER_FIELD_MANAGER

READ = ("get", "list", "watch")
WRITE = ("create", "delete", "deletecollection", "patch", "update")
READ_WRITE = READ + WRITE

CORE = names.CORE_GROUP
APPS = names.APPS_GROUP
BATCH = names.BATCH_GROUP
POLICY = names.POLICY_GROUP
AUTOSCALING = names.AUTOSCALING_GROUP
NETWORKING = names.NETWORKING_GROUP
DISCOVERY = names.DISCOVERY_GROUP
COORDINATION = names.COORDINATION_GROUP
EVENTS = names.EVENTS_GROUP
CERTIFICATES = names.CERTIFICATES_GROUP
RBAC = names.RBAC_GROUP
AUTHORIZATION = names.AUTHORIZATION_GROUP
AUTHENTICATION = names.AUTHENTICATION_GROUP
STORAGE = names.STORAGE_GROUP
NODE = names.NODE_GROUP
SCHEDULING = names.SCHEDULING_GROUP


def rule(
    verbs: Iterable[str],
    groups: Iterable[str] = (),
    resources: Iterable[str] = (),
    resource_names: Iterable[str] = (),
    urls: Iterable[str] = (),
) -> dict:
    return PolicyRule(tuple(verbs), tuple(groups), tuple(resources), tuple(resource_names), tuple(urls)).to_dict()


def _events_rule() -> dict:
    return rule(("create", "update", "patch"), (CORE, EVENTS), ("events",))


def _meta(name: str, namespace: str = "", labels: dict | None = None) -> dict:
    md: dict = {
        "name": name,
        "labels": {names.LABEL_RBAC_BOOTSTRAPPING: names.LABEL_RBAC_BOOTSTRAPPING_VALUE, **(labels or {})},
        "annotations": {names.ANNOTATION_RBAC_AUTOUPDATE: "true"},
    }
    if namespace:
        md["namespace"] = namespace
    return md


def cluster_role(name: str, rules: list[dict], labels: dict | None = None) -> dict:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": _meta(name, labels=labels), "rules": rules}


def aggregated_role(name: str, select_label: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": _meta(name, labels=labels),
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {select_label: "true"}}]},
    }


def role(name: str, namespace: str, rules: list[dict]) -> dict:
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": _meta(name, namespace), "rules": rules}


def _subject(kind: str, name: str, namespace: str = "") -> dict:
    if kind == "ServiceAccount":
        return {"kind": kind, "name": name, "namespace": namespace}
    return {"kind": kind, "apiGroup": RBAC, "name": name}


def cluster_binding(name: str, role_name: str, subjects: list[dict]) -> dict:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _meta(name),
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role_name},
        "subjects": subjects,
    }


def binding(name: str, namespace: str, role_kind: str, role_name: str, subjects: list[dict]) -> dict:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, namespace),
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


# --- the rule sets ----------------------------------------------------------------------------


def node_rule_dicts() -> list[dict]:
    """What a node agent needs (upstream NodeRules), with our group names. Reads of
    secrets, config maps, claims and volumes are further limited by the Node
    authorizer's graph; writes to nodes, pods and leases by NodeRestriction."""
    return [
        rule(("create",), (AUTHENTICATION,), ("tokenreviews",)),
        rule(("create",), (AUTHORIZATION,), ("subjectaccessreviews", "localsubjectaccessreviews")),
        rule(READ, (CORE,), ("services",)),
        rule(("create", "get", "list", "watch"), (CORE,), ("nodes",)),
        rule(("update", "patch"), (CORE,), ("nodes/status",)),
        rule(("update", "patch"), (CORE,), ("nodes",)),
        rule(("create", "update", "patch"), (CORE, EVENTS), ("events",)),
        rule(READ, (CORE,), ("pods",)),
        rule(("create", "delete"), (CORE,), ("pods",)),
        rule(("update", "patch"), (CORE,), ("pods/status",)),
        rule(("create",), (CORE,), ("pods/eviction",)),
        rule(READ, (CORE,), ("secrets", "configmaps")),
        rule(("get",), (CORE,), ("persistentvolumeclaims", "persistentvolumes")),
        rule(READ, (CORE,), ("endpoints",)),
        # The node agent runs the service proxy (upstream grants it through the node-proxier role).
        rule(READ, (DISCOVERY,), ("endpointslices",)),
        rule(("create", "get", "list", "watch"), (CERTIFICATES,), ("certificatesigningrequests",)),
        rule(("get", "create", "update", "patch", "delete"), (COORDINATION,), ("leases",)),
        rule(("create",), (CORE,), ("serviceaccounts/token",)),
        rule(("update", "patch"), (CORE,), ("persistentvolumeclaims/status",)),
        rule(READ, (NODE,), ("runtimeclasses",)),
    ]


def node_rules() -> tuple[PolicyRule, ...]:
    return tuple(PolicyRule.from_dict(r) for r in node_rule_dicts())


def _aggregate_to_view() -> list[dict]:
    return [
        rule(
            READ,
            (CORE,),
            (
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ),
        ),
        rule(
            READ,
            (CORE,),
            (
                "limitranges",
                "resourcequotas",
                "bindings",
                "events",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log",
            ),
        ),
        rule(READ, (CORE,), ("namespaces",)),
        rule(READ, (DISCOVERY,), ("endpointslices",)),
        rule(
            READ,
            (APPS,),
            (
                "controllerrevisions",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
            ),
        ),
        rule(READ, (AUTOSCALING,), ("horizontalpodautoscalers", "horizontalpodautoscalers/status")),
        rule(READ, (BATCH,), ("jobs", "jobs/status", "cronjobs", "cronjobs/status")),
        rule(READ, (POLICY,), ("poddisruptionbudgets", "poddisruptionbudgets/status")),
        rule(READ, (NETWORKING,), ("networkpolicies", "ingresses", "ingresses/status")),
    ]


def _aggregate_to_edit() -> list[dict]:
    return [
        rule(("impersonate",), (CORE,), ("serviceaccounts",)),
        rule(WRITE, (CORE,), ("pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward")),
        rule(("create",), (CORE,), ("pods/eviction",)),
        rule(
            WRITE,
            (CORE,),
            (
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/proxy",
                "persistentvolumeclaims",
                "configmaps",
                "secrets",
                "events",
            ),
        ),
        rule(("create",), (CORE,), ("serviceaccounts/token",)),
        rule(
            WRITE,
            (APPS,),
            (
                "statefulsets",
                "statefulsets/scale",
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "replicasets",
                "replicasets/scale",
            ),
        ),
        rule(WRITE, (AUTOSCALING,), ("horizontalpodautoscalers",)),
        rule(WRITE, (BATCH,), ("jobs", "cronjobs")),
        rule(WRITE, (POLICY,), ("poddisruptionbudgets",)),
        rule(WRITE, (NETWORKING,), ("networkpolicies", "ingresses")),
        rule(WRITE, (DISCOVERY,), ("endpointslices",)),
        rule(
            READ, (CORE,), ("secrets", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "services/proxy")
        ),
    ]


def _aggregate_to_admin() -> list[dict]:
    return [
        rule(("create",), (AUTHORIZATION,), ("localsubjectaccessreviews",)),
        rule(READ_WRITE, (RBAC,), ("rolebindings", "roles")),
    ]


def _signer_approver(signer: str, verb: str = "approve") -> list[dict]:
    return [rule((verb,), (CERTIFICATES,), (names.SIGNERS_RESOURCE,), (signer,))]


# The bundled controllers, as upstream's system:controller:* roles: each controller runs in
# this process as the service account orch-system/<name> (controllers/manager.py), bound to
# system:controller:<name>, and is authorized by exactly these rules.
def _controller_roles() -> dict[str, list[dict]]:
    return {
        "clusterrole-aggregation-controller": [
            # escalate: an aggregated role may hold rules its writer does not.
            rule(("escalate", "get", "list", "watch", "update", "patch"), (RBAC,), ("clusterroles",)),
        ],
        "service-account-controller": [
            rule(("create",), (CORE,), ("serviceaccounts",)),
            _events_rule(),
        ],
        "root-ca-cert-publisher": [
            rule(("create", "update"), (CORE,), ("configmaps",)),
            _events_rule(),
        ],
        "namespace-controller": [
            rule(("get", "list", "watch", "delete"), (CORE,), ("namespaces",)),
            rule(("update",), (CORE,), ("namespaces/finalize", "namespaces/status")),
            rule(("get", "list", "delete", "deletecollection"), ("*",), ("*",)),
        ],
        "generic-garbage-collector": [
            rule(("get", "list", "watch", "patch", "update", "delete"), ("*",), ("*",)),
            _events_rule(),
        ],
        "certificate-controller": [
            rule(("delete", "get", "list", "watch"), (CERTIFICATES,), ("certificatesigningrequests",)),
            rule(
                ("update",),
                (CERTIFICATES,),
                ("certificatesigningrequests/approval", "certificatesigningrequests/status"),
            ),
            # (upstream: the node client signer; the serving signer for --auto-approve-node-serving-certificates)
            rule(
                ("approve",),
                (CERTIFICATES,),
                (names.SIGNERS_RESOURCE,),
                (names.SIGNER_NODE_AGENT_CLIENT, names.SIGNER_NODE_AGENT_SERVING),
            ),
            rule(
                ("sign",),
                (CERTIFICATES,),
                (names.SIGNERS_RESOURCE,),
                (
                    names.SIGNER_LEGACY_UNKNOWN,
                    names.SIGNER_NODE_AGENT_CLIENT,
                    names.SIGNER_NODE_AGENT_SERVING,
                    names.SIGNER_APISERVER_CLIENT,
                ),
            ),
            rule(("create",), (AUTHORIZATION,), ("subjectaccessreviews",)),
            _events_rule(),
        ],
        "resourcequota-controller": [
            rule(("list", "watch"), ("*",), ("*",)),
            rule(("update",), (CORE,), ("resourcequotas/status",)),
            _events_rule(),
        ],
        "node-controller": [
            rule(("get", "list", "update", "delete", "patch"), (CORE,), ("nodes",)),
            rule(("patch", "update"), (CORE,), ("nodes/status",)),
            rule(("update",), (CORE,), ("pods/status",)),
            rule(("list", "delete"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "replicaset-controller": [
            rule(("get", "list", "watch", "update"), (APPS,), ("replicasets",)),
            rule(("update",), (APPS,), ("replicasets/status",)),
            rule(("update",), (APPS,), ("replicasets/finalizers",)),
            # (upstream adopts and releases with patch; claims here are updates)
            rule(("list", "watch", "patch", "update", "create", "delete"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "replication-controller": [
            rule(("get", "list", "watch", "update"), (CORE,), ("replicationcontrollers",)),
            rule(("update",), (CORE,), ("replicationcontrollers/status",)),
            rule(("update",), (CORE,), ("replicationcontrollers/finalizers",)),
            rule(("list", "watch", "patch", "update", "create", "delete"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "deployment-controller": [
            rule(("get", "list", "watch", "update"), (APPS,), ("deployments",)),
            rule(("update",), (APPS,), ("deployments/status",)),
            rule(("update",), (APPS,), ("deployments/finalizers",)),
            rule(("get", "list", "watch", "create", "update", "patch", "delete"), (APPS,), ("replicasets",)),
            # (upstream reads pods to wait for Recreate rollouts)
            rule(("get", "list", "watch", "update"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "job-controller": [
            rule(("get", "list", "watch", "update", "patch"), (BATCH,), ("jobs",)),
            rule(("update",), (BATCH,), ("jobs/status", "jobs/finalizers")),
            # (upstream: no update; adoption and release here write the owner references
            # with an update, podcontrol.claim)
            rule(("list", "watch", "create", "delete", "patch", "update"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "cronjob-controller": [
            rule(("get", "list", "watch", "update"), (BATCH,), ("cronjobs",)),
            rule(("get", "list", "watch", "create", "update", "delete", "patch"), (BATCH,), ("jobs",)),
            rule(("update",), (BATCH,), ("cronjobs/status", "cronjobs/finalizers")),
            rule(("list", "delete"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "ttl-after-finished-controller": [
            rule(("get", "list", "watch", "delete"), (BATCH,), ("jobs",)),
            _events_rule(),
        ],
        "disruption-controller": [
            rule(READ, (APPS,), ("deployments", "replicasets", "statefulsets")),
            rule(READ, (CORE,), ("replicationcontrollers", "pods")),
            rule(READ, (POLICY,), ("poddisruptionbudgets",)),
            rule(("update",), (POLICY,), ("poddisruptionbudgets/status",)),
            rule(("get",), ("*",), ("*/scale",)),
            _events_rule(),
        ],
        "horizontal-pod-autoscaler": [
            rule(("get", "list", "watch"), (AUTOSCALING,), ("horizontalpodautoscalers",)),
            rule(("update",), (AUTOSCALING,), ("horizontalpodautoscalers/status",)),
            rule(("get", "update"), ("*",), ("*/scale",)),
            rule(("list",), (CORE,), ("pods",)),
            # the metrics APIs it reads (here: the resource metrics, given to it in process)
            rule(("list",), (names.METRICS_GROUP,), ("pods",)),
            rule(("get", "list"), (names.CUSTOM_METRICS_GROUP,), ("*",)),
            rule(("get", "list"), (names.EXTERNAL_METRICS_GROUP,), ("*",)),
            _events_rule(),
        ],
        "endpoint-controller": [
            rule(READ, (CORE,), ("services", "pods")),
            rule(("get", "list", "create", "update", "delete"), (CORE,), ("endpoints",)),
            rule(("create",), (CORE,), ("endpoints/restricted",)),
            _events_rule(),
        ],
        "endpointslice-controller": [
            rule(READ, (CORE,), ("services", "pods", "nodes")),
            # (upstream: to own slices with blockOwnerDeletion, a Service's finalizers must be settable)
            rule(("update",), (CORE,), ("services/finalizers",)),
            rule(("get", "list", "create", "update", "delete"), (DISCOVERY,), ("endpointslices",)),
            _events_rule(),
        ],
        "endpointslicemirroring-controller": [
            rule(READ, (CORE,), ("services", "endpoints")),
            rule(("update",), (CORE,), ("services/finalizers",)),
            rule(("update",), (CORE,), ("endpoints/finalizers",)),
            rule(("get", "list", "create", "update", "delete"), (DISCOVERY,), ("endpointslices",)),
            _events_rule(),
        ],
        "daemon-set-controller": [
            rule(("get", "list", "watch"), (APPS,), ("daemonsets",)),
            rule(("update",), (APPS,), ("daemonsets/status", "daemonsets/finalizers")),
            rule(("list", "watch"), (CORE,), ("nodes",)),
            # update: adoption and release of pods write their owner references (podcontrol.claim)
            rule(("list", "watch", "create", "delete", "patch", "update"), (CORE,), ("pods",)),
            rule(("create",), (CORE,), ("pods/binding",)),
            rule(("get", "list", "watch", "create", "delete", "update", "patch"), (APPS,), ("controllerrevisions",)),
            _events_rule(),
        ],
        "statefulset-controller": [
            rule(("list", "watch"), (CORE,), ("pods",)),
            rule(("get", "list", "watch"), (APPS,), ("statefulsets",)),
            rule(("update",), (APPS,), ("statefulsets/status", "statefulsets/finalizers")),
            rule(("get", "create", "delete", "update", "patch"), (CORE,), ("pods",)),
            rule(("get", "create", "delete", "update", "patch", "list", "watch"), (APPS,), ("controllerrevisions",)),
            rule(("get", "create"), (CORE,), ("persistentvolumeclaims",)),
            # the claims' owner references of persistentVolumeClaimRetentionPolicy
            rule(("update", "delete"), (CORE,), ("persistentvolumeclaims",)),
            _events_rule(),
        ],
        # Upstream's system:controller:persistent-volume-binder.
        "persistent-volume-binder": [
            rule(("create", "delete", "get", "list", "update", "watch"), (CORE,), ("persistentvolumes",)),
            rule(("update",), (CORE,), ("persistentvolumes/status",)),
            rule(("get", "list", "update", "watch"), (CORE,), ("persistentvolumeclaims",)),
            rule(("update",), (CORE,), ("persistentvolumeclaims/status",)),
            rule(READ, (CORE,), ("pods", "nodes")),
            rule(READ, (STORAGE,), ("storageclasses",)),
            _events_rule(),
        ],
        "ephemeral-volume-controller": [
            rule(READ, (CORE,), ("pods",)),
            rule(("update",), (CORE,), ("pods/finalizers",)),
            rule(("get", "list", "watch", "create"), (CORE,), ("persistentvolumeclaims",)),
            _events_rule(),
        ],
        "pvc-protection-controller": [
            rule(("get", "list", "watch", "update"), (CORE,), ("persistentvolumeclaims",)),
            rule(("get", "list", "watch"), (CORE,), ("pods",)),
            _events_rule(),
        ],
        "pv-protection-controller": [
            rule(("get", "list", "watch", "update"), (CORE,), ("persistentvolumes",)),
            _events_rule(),
        ],
        # k3s's local-path-provisioner ClusterRole, plus the default class it makes.
        "local-path-provisioner": [
            rule(READ, (CORE,), ("nodes",)),
            rule(READ + ("update",), (CORE,), ("persistentvolumeclaims",)),
            rule(("create", "delete", "get", "list", "watch", "update"), (CORE,), ("persistentvolumes",)),
            rule(("update",), (CORE,), ("persistentvolumes/status",)),
            rule(("create", "delete", "get", "list", "watch"), (CORE,), ("pods",)),
            rule(READ + ("create",), (STORAGE,), ("storageclasses",)),
            _events_rule(),
        ],
        "scheduler": [
            _events_rule(),
            rule(("create",), (COORDINATION,), ("leases",)),
            rule(("get", "update"), (COORDINATION,), ("leases",), (names.APISERVER_NAME + "-scheduler",)),
            rule(
                READ,
                (CORE,),
                (
                    "nodes",
                    "namespaces",
                    "services",
                    "replicationcontrollers",
                    "persistentvolumeclaims",
                    "persistentvolumes",
                ),
            ),
            rule(READ + ("delete",), (CORE,), ("pods",)),
            rule(("create",), (CORE,), ("pods/binding", "bindings")),
            rule(("patch", "update"), (CORE,), ("pods/status",)),
            rule(READ, (APPS,), ("replicasets", "statefulsets")),
            rule(READ, (POLICY,), ("poddisruptionbudgets",)),
            rule(READ, (STORAGE,), ("storageclasses",)),
            # Upstream's system:volume-scheduler: static volumes bound and claims given their node.
            rule(READ + ("patch", "update"), (CORE,), ("persistentvolumes", "persistentvolumeclaims")),
        ],
    }


def default_cluster_roles() -> list[dict]:
    bootstrap_urls = ("/healthz", "/livez", "/readyz", "/version", "/version/")
    roles = [
        cluster_role(names.ROLE_CLUSTER_ADMIN, [rule(("*",), ("*",), ("*",)), rule(("*",), urls=("*",))]),
        aggregated_role("admin", names.LABEL_AGGREGATE_TO_ADMIN),
        aggregated_role("edit", names.LABEL_AGGREGATE_TO_EDIT, {names.LABEL_AGGREGATE_TO_ADMIN: "true"}),
        aggregated_role("view", names.LABEL_AGGREGATE_TO_VIEW, {names.LABEL_AGGREGATE_TO_EDIT: "true"}),
        cluster_role("system:aggregate-to-admin", _aggregate_to_admin(), {names.LABEL_AGGREGATE_TO_ADMIN: "true"}),
        cluster_role("system:aggregate-to-edit", _aggregate_to_edit(), {names.LABEL_AGGREGATE_TO_EDIT: "true"}),
        cluster_role("system:aggregate-to-view", _aggregate_to_view(), {names.LABEL_AGGREGATE_TO_VIEW: "true"}),
        cluster_role(
            "system:discovery",
            [
                rule(
                    ("get",),
                    urls=(
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ),
                )
            ],
        ),
        cluster_role(
            "system:basic-user",
            [
                rule(("create",), (AUTHORIZATION,), ("selfsubjectaccessreviews", "selfsubjectrulesreviews")),
                rule(("create",), (AUTHENTICATION,), ("selfsubjectreviews",)),
            ],
        ),
        cluster_role("system:public-info-viewer", [rule(("get",), urls=bootstrap_urls)]),
        cluster_role(
            "system:monitoring",
            [rule(("get",), urls=("/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*", "/metrics"))],
        ),
        cluster_role(names.ROLE_NODE, node_rule_dicts()),
        cluster_role(
            names.ROLE_NODE_BOOTSTRAPPER,
            [rule(("create", "get", "list", "watch"), (CERTIFICATES,), ("certificatesigningrequests",))],
        ),
        cluster_role(
            names.ROLE_CSR_NODECLIENT,
            [rule(("create",), (CERTIFICATES,), (f"certificatesigningrequests/{names.CSR_SUBRESOURCE_NODECLIENT}",))],
        ),
        cluster_role(
            names.ROLE_CSR_SELFNODECLIENT,
            [
                rule(
                    ("create",),
                    (CERTIFICATES,),
                    (f"certificatesigningrequests/{names.CSR_SUBRESOURCE_SELFNODECLIENT}",),
                )
            ],
        ),
        cluster_role(
            f"system:certificates.{names.DOMAIN}:apiserver-client-approver",
            _signer_approver(names.SIGNER_APISERVER_CLIENT),
        ),
        cluster_role(
            f"system:certificates.{names.DOMAIN}:apiserver-client-node-agent-approver",
            _signer_approver(names.SIGNER_NODE_AGENT_CLIENT),
        ),
        cluster_role(
            f"system:certificates.{names.DOMAIN}:node-agent-serving-approver",
            _signer_approver(names.SIGNER_NODE_AGENT_SERVING),
        ),
        cluster_role(
            f"system:certificates.{names.DOMAIN}:legacy-unknown-approver", _signer_approver(names.SIGNER_LEGACY_UNKNOWN)
        ),
    ]
    for suffix, rules in _controller_roles().items():
        roles.append(cluster_role(names.CONTROLLER_ROLE_PREFIX + suffix, rules))
    roles.append(cluster_role(names.CONTROLLER_MANAGER_USER, _controller_manager_rules()))
    return roles


def _controller_manager_rules() -> list[dict]:
    """The controller manager's own user holds the controllers' Lease (upstream's
    system:kube-controller-manager grants the same for its Lease)."""
    return [
        rule(("create",), (COORDINATION,), ("leases",)),
        rule(("get", "update"), (COORDINATION,), ("leases",), (names.CONTROLLERS_LEASE_NAME,)),
    ]


def _controller_sa(suffix: str) -> dict:
    return _subject("ServiceAccount", suffix, names.NS_SYSTEM)


def default_cluster_role_bindings() -> list[dict]:
    def group(name: str) -> dict:
        return _subject("Group", name)

    out = [
        cluster_binding(names.ROLE_CLUSTER_ADMIN, names.ROLE_CLUSTER_ADMIN, [group(names.GROUP_MASTERS)]),
        cluster_binding("system:discovery", "system:discovery", [group(names.GROUP_AUTHENTICATED)]),
        cluster_binding("system:basic-user", "system:basic-user", [group(names.GROUP_AUTHENTICATED)]),
        cluster_binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            [group(names.GROUP_AUTHENTICATED), group(names.GROUP_UNAUTHENTICATED)],
        ),
        cluster_binding("system:monitoring", "system:monitoring", [group(names.GROUP_MONITORING)]),
        cluster_binding(names.ROLE_NODE_BOOTSTRAPPER, names.ROLE_NODE_BOOTSTRAPPER, [group(names.GROUP_BOOTSTRAPPERS)]),
        cluster_binding(names.ROLE_CSR_NODECLIENT, names.ROLE_CSR_NODECLIENT, [group(names.GROUP_BOOTSTRAPPERS)]),
        cluster_binding(names.ROLE_CSR_SELFNODECLIENT, names.ROLE_CSR_SELFNODECLIENT, [group(names.GROUP_NODES)]),
    ]
    for suffix in _controller_roles():
        name = names.CONTROLLER_ROLE_PREFIX + suffix
        out.append(cluster_binding(name, name, [_controller_sa(suffix)]))
    out.append(
        cluster_binding(
            names.CONTROLLER_MANAGER_USER,
            names.CONTROLLER_MANAGER_USER,
            [_subject("User", names.CONTROLLER_MANAGER_USER)],
        )
    )
    return out


def default_roles() -> list[dict]:
    return [
        role(
            names.ROLE_CLUSTER_INFO_READER,
            names.NS_PUBLIC,
            [rule(("get",), (CORE,), ("configmaps",), (names.CLUSTER_INFO_CONFIGMAP,))],
        ),
        role(
            names.CONTROLLER_ROLE_PREFIX + "bootstrap-signer",
            names.NS_PUBLIC,
            [
                rule(READ, (CORE,), ("configmaps",)),
                # create: cluster-info is made here when missing (upstream: by kubeadm).
                rule(("create",), (CORE,), ("configmaps",)),
                rule(("update",), (CORE,), ("configmaps",), (names.CLUSTER_INFO_CONFIGMAP,)),
                _events_rule(),
            ],
        ),
        role(names.CONTROLLER_ROLE_PREFIX + "bootstrap-signer", names.NS_SYSTEM, [rule(READ, (CORE,), ("secrets",))]),
        role(
            names.CONTROLLER_ROLE_PREFIX + "token-cleaner",
            names.NS_SYSTEM,
            [
                rule(("delete",) + READ, (CORE,), ("secrets",)),
                _events_rule(),
            ],
        ),
    ]


def default_role_bindings() -> list[dict]:
    signer = names.CONTROLLER_ROLE_PREFIX + "bootstrap-signer"
    cleaner = names.CONTROLLER_ROLE_PREFIX + "token-cleaner"
    return [
        binding(
            names.ROLE_CLUSTER_INFO_READER,
            names.NS_PUBLIC,
            "Role",
            names.ROLE_CLUSTER_INFO_READER,
            [_subject("Group", names.GROUP_UNAUTHENTICATED)],
        ),
        binding(signer, names.NS_PUBLIC, "Role", signer, [_controller_sa("bootstrap-signer")]),
        binding(signer, names.NS_SYSTEM, "Role", signer, [_controller_sa("bootstrap-signer")]),
        binding(cleaner, names.NS_SYSTEM, "Role", cleaner, [_controller_sa("token-cleaner")]),
    ]


# --- reconciliation -----------------------------------------------------------------------


def _merge_meta(current: dict, expected: dict) -> bool:
    """Add missing labels and annotations; existing values win. True if changed."""
    changed = False
    cmd, emd = current.setdefault("metadata", {}), expected.get("metadata") or {}
    for field in ("labels", "annotations"):
        want = emd.get(field) or {}
        have = cmd.get(field) or {}
        merged = {**want, **have}
        if merged != have:
            cmd[field] = merged
            changed = True
    return changed


def reconcile_role(current: dict, expected: dict) -> bool:
    """Bring ``current`` (in place) up to ``expected``; True if it changed."""
    changed = _merge_meta(current, expected)
    if expected.get("aggregationRule") is not None:
        agg = current.get("aggregationRule")
        if not isinstance(agg, dict):
            agg = current["aggregationRule"] = {"clusterRoleSelectors": []}
            changed = True
        sels = agg.setdefault("clusterRoleSelectors", [])
        for sel in expected["aggregationRule"]["clusterRoleSelectors"]:
            if sel not in sels:
                sels.append(copy.deepcopy(sel))
                changed = True
        return changed
    have = list(rules_from(current))
    rules = list_at(current, "rules")
    for raw in expected.get("rules") or []:
        want = PolicyRule.from_dict(raw)
        if uncovered(have, [want]):
            rules.append(copy.deepcopy(raw))
            have.append(want)
            changed = True
    current["rules"] = rules
    return changed


def _subject_id(s: dict) -> tuple:
    return (s.get("kind"), s.get("name"), s.get("namespace") or "")


def reconcile_binding(current: dict, expected: dict) -> bool:
    changed = _merge_meta(current, expected)
    subjects = list_at(current, "subjects")
    have = {_subject_id(s) for s in subjects if isinstance(s, dict)}
    for s in expected.get("subjects") or []:
        if _subject_id(s) not in have:
            subjects.append(copy.deepcopy(s))
            have.add(_subject_id(s))
            changed = True
    current["subjects"] = subjects
    return changed


def protected(obj: dict) -> bool:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(names.ANNOTATION_RBAC_AUTOUPDATE) == "false"


# --- aggregation ----------------------------------------------------------------------------
