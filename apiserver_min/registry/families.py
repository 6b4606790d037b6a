"""The kind families: which strategy serves each kind, and the REST objects the
families provide for the sub-resources the kinds declare (``Subresource.rest``).

The server adds the implementations that need more than the store (the token
signer, the node agent proxy) and builds its :class:`~.rest.RestTable` from both.
"""

from __future__ import annotations

from typing import Any

from ..api import names
from ..api.kinds import KindInfo, Subresource
from .admissionregistration import (
    ValidatingAdmissionPolicyBindingStrategy,
    ValidatingAdmissionPolicyStrategy,
    WebhookConfigurationStrategy,
)
from .apps import DeploymentStrategy, ReplicaSetStrategy, ReplicationControllerStrategy
from .apps_controllerrevision import ControllerRevisionStrategy
from .apps_daemonset import DaemonSetStrategy
from .apps_statefulset import StatefulSetStrategy
from .autoscaling import HorizontalPodAutoscalerStrategy
from .batch import CronJobStrategy, JobStrategy
from .certificates import CsrStrategy
from .configdata import ConfigMapStrategy, SecretStrategy
from .core import (
    NamespaceFinalizeREST,
    NamespaceStrategy,
    NodeStrategy,
    PodBindingREST,
    PodStrategy,
    ServiceStrategy,
)
from .endpoints import EndpointSliceStrategy, EndpointsStrategy
from .eviction import PodEvictionREST
from .flowcontrol import FlowSchemaStrategy, PriorityLevelConfigurationStrategy
from .networking import IngressClassStrategy, IngressStrategy
from .policy import PodDisruptionBudgetStrategy
from .resourcepolicy import LimitRangeStrategy, PriorityClassStrategy, ResourceQuotaStrategy
from .rest import ObjectStore, RestFactory, StoreSubresource
from .scale import ScaleREST
from .storage import PersistentVolumeClaimStrategy, PersistentVolumeStrategy
from .strategy import PathNameStrategy, Strategy

STRATEGIES: dict[tuple[str, str], type[Strategy]] = {
    ("", "namespaces"): NamespaceStrategy,
    ("", "pods"): PodStrategy,
    ("", "nodes"): NodeStrategy,
    ("", "services"): ServiceStrategy,
    ("", "secrets"): SecretStrategy,
    ("", "configmaps"): ConfigMapStrategy,
    ("", "replicationcontrollers"): ReplicationControllerStrategy,
    (names.APPS_GROUP, "deployments"): DeploymentStrategy,
    (names.APPS_GROUP, "replicasets"): ReplicaSetStrategy,
    ("", "endpoints"): EndpointsStrategy,
    (names.DISCOVERY_GROUP, "endpointslices"): EndpointSliceStrategy,
    ("", "limitranges"): LimitRangeStrategy,
    ("", "resourcequotas"): ResourceQuotaStrategy,
    (names.SCHEDULING_GROUP, "priorityclasses"): PriorityClassStrategy,
    ("", "persistentvolumes"): PersistentVolumeStrategy,
    ("", "persistentvolumeclaims"): PersistentVolumeClaimStrategy,
    (names.RBAC_GROUP, "roles"): PathNameStrategy,
    (names.RBAC_GROUP, "rolebindings"): PathNameStrategy,
    (names.RBAC_GROUP, "clusterroles"): PathNameStrategy,
    (names.RBAC_GROUP, "clusterrolebindings"): PathNameStrategy,
    (names.CERTIFICATES_GROUP, "certificatesigningrequests"): CsrStrategy,
    (names.BATCH_GROUP, "jobs"): JobStrategy,
    (names.AUTOSCALING_GROUP, "horizontalpodautoscalers"): HorizontalPodAutoscalerStrategy,
    (names.BATCH_GROUP, "cronjobs"): CronJobStrategy,
    (names.APPS_GROUP, "daemonsets"): DaemonSetStrategy,
    (names.APPS_GROUP, "statefulsets"): StatefulSetStrategy,
    (names.APPS_GROUP, "controllerrevisions"): ControllerRevisionStrategy,
    (names.POLICY_GROUP, "poddisruptionbudgets"): PodDisruptionBudgetStrategy,
    (names.NETWORKING_GROUP, "ingresses"): IngressStrategy,
    (names.NETWORKING_GROUP, "ingressclasses"): IngressClassStrategy,
    (names.ADMISSIONREGISTRATION_GROUP, "validatingwebhookconfigurations"): WebhookConfigurationStrategy,
    (names.ADMISSIONREGISTRATION_GROUP, "mutatingwebhookconfigurations"): WebhookConfigurationStrategy,
    (names.ADMISSIONREGISTRATION_GROUP, "validatingadmissionpolicies"): ValidatingAdmissionPolicyStrategy,
    (names.ADMISSIONREGISTRATION_GROUP, "validatingadmissionpolicybindings"): ValidatingAdmissionPolicyBindingStrategy,
    (names.FLOWCONTROL_GROUP, "flowschemas"): FlowSchemaStrategy,
    (names.FLOWCONTROL_GROUP, "prioritylevelconfigurations"): PriorityLevelConfigurationStrategy,
}

STORE_SUBRESOURCE = StoreSubresource()


def strategy_for(kind: KindInfo) -> Strategy:
    return STRATEGIES.get((kind.group, kind.resource), Strategy)(kind)


def rest_implementations(store: ObjectStore) -> dict[str, RestFactory]:
    """The sub-resource implementations the families provide, by the name a
    declaration gives (``Subresource.rest``)."""

    def store_sub(kind: KindInfo, sub: Subresource | None) -> Any:
        return STORE_SUBRESOURCE

    return {
        "store": store_sub,
        "scale": lambda kind, sub: ScaleREST(store, kind),
        "namespaces/finalize": lambda kind, sub: NamespaceFinalizeREST(store, kind),
        "pods/binding": lambda kind, sub: PodBindingREST(store, kind),
        "pods/eviction": lambda kind, sub: PodEvictionREST(store, kind),
    }
