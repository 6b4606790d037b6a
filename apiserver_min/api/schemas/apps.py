"""``apps/v1``: message package ``k8s.io.api.apps.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import LABEL_SELECTOR, OBJECT_META, List
from . import core
from ._common import BOOL, I32, I64, IOS, OPAQUE, STR, TIME, F, enum, merge_list, ptr, req, struct

S = struct("k8s.io.api.apps.v1")
CONDITION_STATUS = core.CONDITION_STATUS


def _condition(name: str, with_update_time: bool = False):
    fields = [
        req("type", STR, 1),
        req("status", CONDITION_STATUS, 2),
    ]
    if with_update_time:  # DeploymentCondition numbers its times 6 and 7
        fields += [F("lastUpdateTime", TIME, 6), F("lastTransitionTime", TIME, 7)]
    else:
        fields += [F("lastTransitionTime", TIME, 3)]
    fields += [F("reason", STR, 4), F("message", STR, 5)]
    return S(name, fields)


# --- StatefulSet -----------------------------------------------------------------------------

RollingUpdateStatefulSetStrategy = S(
    "RollingUpdateStatefulSetStrategy",
    [
        ptr("partition", I32, 1),
        ptr("maxUnavailable", IOS, 2),
    ],
)

StatefulSetUpdateStrategy = S(
    "StatefulSetUpdateStrategy",
    [
        F("type", enum("OnDelete", "RollingUpdate"), 1),
        ptr("rollingUpdate", RollingUpdateStatefulSetStrategy, 2),
    ],
)

_RETENTION = enum("Delete", "Retain")
StatefulSetPersistentVolumeClaimRetentionPolicy = S(
    "StatefulSetPersistentVolumeClaimRetentionPolicy",
    [
        F("whenDeleted", _RETENTION, 1),
        F("whenScaled", _RETENTION, 2),
    ],
)

StatefulSetOrdinals = S(
    "StatefulSetOrdinals",
    [
        F("start", I32, 1),
    ],
)

StatefulSetSpec = S(
    "StatefulSetSpec",
    [
        ptr("replicas", I32, 1),
        ptr("selector", LABEL_SELECTOR, 2, required=True),
        req("template", core.PodTemplateSpec, 3),
        F("volumeClaimTemplates", List(core.PersistentVolumeClaim), 4),
        req("serviceName", STR, 5),
        F("podManagementPolicy", enum("OrderedReady", "Parallel"), 6),
        F("updateStrategy", StatefulSetUpdateStrategy, 7),
        ptr("revisionHistoryLimit", I32, 8),
        F("minReadySeconds", I32, 9),
        ptr("persistentVolumeClaimRetentionPolicy", StatefulSetPersistentVolumeClaimRetentionPolicy, 10),
        ptr("ordinals", StatefulSetOrdinals, 11),
    ],
)

StatefulSetCondition = _condition("StatefulSetCondition")

StatefulSetStatus = S(
    "StatefulSetStatus",
    [
        F("observedGeneration", I64, 1),
        req("replicas", I32, 2),
        F("readyReplicas", I32, 3),
        F("currentReplicas", I32, 4),
        F("updatedReplicas", I32, 5),
        F("currentRevision", STR, 6),
        F("updateRevision", STR, 7),
        ptr("collisionCount", I32, 9),
        F("conditions", merge_list(StatefulSetCondition, "type"), 10),
        F("availableReplicas", I32, 11),
    ],
)

StatefulSet = S(
    "StatefulSet",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", StatefulSetSpec, 2),
        F("status", StatefulSetStatus, 3),
    ],
)

# --- Deployment ------------------------------------------------------------------------------

RollingUpdateDeployment = S(
    "RollingUpdateDeployment",
    [
        ptr(
            "maxUnavailable",
            IOS,
            1,
            description="Pods that may be unavailable during the update, as a "
            "number or a percentage of desired pods. Defaults to 25%.",
        ),
        ptr(
            "maxSurge",
            IOS,
            2,
            description="Pods that may be created above the desired number, "
            "as a number or a percentage. Defaults to 25%.",
        ),
    ],
)

DeploymentStrategy = S(
    "DeploymentStrategy",
    [
        F(
            "type",
            enum("Recreate", "RollingUpdate"),
            1,
            description="The kind of rollout: Recreate or RollingUpdate (the default).",
        ),
        ptr("rollingUpdate", RollingUpdateDeployment, 2, description="Parameters of a rolling update."),
    ],
)

DeploymentSpec = S(
    "DeploymentSpec",
    [
        ptr("replicas", I32, 1, description="Number of desired pods. Defaults to 1."),
        ptr(
            "selector",
            LABEL_SELECTOR,
            2,
            required=True,
            description="Label selector for the pods the deployment manages; "
            "must match the template's labels. Cannot be changed.",
        ),
        req("template", core.PodTemplateSpec, 3, description="The pod template new pods are created from."),
        F(
            "strategy",
            DeploymentStrategy,
            4,
            patch_strategy="retainKeys",
            description="How existing pods are replaced by new ones.",
        ),
        F(
            "minReadySeconds",
            I32,
            5,
            description="Seconds a new pod must be ready, without crashing, to count as available.",
        ),
        ptr(
            "revisionHistoryLimit", I32, 6, description="Number of old replica sets kept for rollback. Defaults to 10."
        ),
        F("paused", BOOL, 7, description="Pause the deployment's rollouts."),
        ptr(
            "progressDeadlineSeconds",
            I32,
            9,
            description="Seconds a rollout may make no progress before it is reported failed. Defaults to 600.",
        ),
    ],
)

DeploymentCondition = _condition("DeploymentCondition", with_update_time=True)

DeploymentStatus = S(
    "DeploymentStatus",
    [
        F("observedGeneration", I64, 1),
        F("replicas", I32, 2),
        F("updatedReplicas", I32, 3),
        F("readyReplicas", I32, 7),
        F("availableReplicas", I32, 4),
        F("unavailableReplicas", I32, 5),
        F("conditions", merge_list(DeploymentCondition, "type"), 6),
        ptr("collisionCount", I32, 8),
    ],
)

Deployment = S(
    "Deployment",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", DeploymentSpec, 2, description="The desired behaviour of the deployment."),
        F("status", DeploymentStatus, 3, description="The most recently observed state of the deployment. Read-only."),
    ],
)

# --- DaemonSet -------------------------------------------------------------------------------

RollingUpdateDaemonSet = S(
    "RollingUpdateDaemonSet",
    [
        ptr("maxUnavailable", IOS, 1),
        ptr("maxSurge", IOS, 2),
    ],
)

DaemonSetUpdateStrategy = S(
    "DaemonSetUpdateStrategy",
    [
        F("type", enum("OnDelete", "RollingUpdate"), 1),
        ptr("rollingUpdate", RollingUpdateDaemonSet, 2),
    ],
)

DaemonSetSpec = S(
    "DaemonSetSpec",
    [
        ptr("selector", LABEL_SELECTOR, 1, required=True),
        req("template", core.PodTemplateSpec, 2),
        F("updateStrategy", DaemonSetUpdateStrategy, 3),
        F("minReadySeconds", I32, 4),
        ptr("revisionHistoryLimit", I32, 6),
    ],
)

DaemonSetCondition = _condition("DaemonSetCondition")

DaemonSetStatus = S(
    "DaemonSetStatus",
    [
        req("currentNumberScheduled", I32, 1),
        req("numberMisscheduled", I32, 2),
        req("desiredNumberScheduled", I32, 3),
        req("numberReady", I32, 4),
        F("observedGeneration", I64, 5),
        F("updatedNumberScheduled", I32, 6),
        F("numberAvailable", I32, 7),
        F("numberUnavailable", I32, 8),
        ptr("collisionCount", I32, 9),
        F("conditions", merge_list(DaemonSetCondition, "type"), 10),
    ],
)

DaemonSet = S(
    "DaemonSet",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", DaemonSetSpec, 2),
        F("status", DaemonSetStatus, 3),
    ],
)

# --- ReplicaSet ------------------------------------------------------------------------------

ReplicaSetSpec = S(
    "ReplicaSetSpec",
    [
        ptr("replicas", I32, 1),
        F("minReadySeconds", I32, 4),
        ptr("selector", LABEL_SELECTOR, 2, required=True),
        F("template", core.PodTemplateSpec, 3),
    ],
)

ReplicaSetCondition = _condition("ReplicaSetCondition")

ReplicaSetStatus = S(
    "ReplicaSetStatus",
    [
        req("replicas", I32, 1),
        F("fullyLabeledReplicas", I32, 2),
        F("readyReplicas", I32, 4),
        F("availableReplicas", I32, 5),
        F("observedGeneration", I64, 3),
        F("conditions", merge_list(ReplicaSetCondition, "type"), 6),
    ],
)

ReplicaSet = S(
    "ReplicaSet",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ReplicaSetSpec, 2),
        F("status", ReplicaSetStatus, 3),
    ],
)

# --- ControllerRevision ----------------------------------------------------------------------

ControllerRevision = S(
    "ControllerRevision",
    [
        F("metadata", OBJECT_META, 1),
        F("data", OPAQUE, 2),  # runtime.RawExtension: any object, kept as is
        req("revision", I64, 3),
    ],
)

KINDS = {
    "Deployment": Deployment,
    "ReplicaSet": ReplicaSet,
    "DaemonSet": DaemonSet,
    "StatefulSet": StatefulSet,
    "ControllerRevision": ControllerRevision,
}
