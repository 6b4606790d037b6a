"""``flowcontrol.orch.io/v1beta3`` (upstream ``flowcontrol.apiserver.k8s.io``): message
package ``k8s.io.api.flowcontrol.v1beta3`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import OBJECT_META
from ._common import BOOL, I32, STR, STR_SET, TIME, F, List, enum, merge_list, ptr, req, struct

S = struct("k8s.io.api.flowcontrol.v1beta3")


def _condition(name: str):
    return S(
        name,
        [
            F("type", STR, 1),
            F("status", enum("True", "False", "Unknown"), 2),
            F("lastTransitionTime", TIME, 3),
            F("reason", STR, 4),
            F("message", STR, 5),
        ],
    )


PriorityLevelConfigurationReference = S("PriorityLevelConfigurationReference", [req("name", STR, 1)])
FlowDistinguisherMethod = S("FlowDistinguisherMethod", [req("type", enum("ByUser", "ByNamespace"), 1)])
UserSubject = S("UserSubject", [req("name", STR, 1)])
GroupSubject = S("GroupSubject", [req("name", STR, 1)])
ServiceAccountSubject = S("ServiceAccountSubject", [req("namespace", STR, 1), req("name", STR, 2)])
Subject = S(
    "Subject",
    [
        req("kind", enum("Group", "ServiceAccount", "User"), 1),
        ptr("user", UserSubject, 2),
        ptr("group", GroupSubject, 3),
        ptr("serviceAccount", ServiceAccountSubject, 4),
    ],
)
ResourcePolicyRule = S(
    "ResourcePolicyRule",
    [
        req("verbs", STR_SET, 1),
        req("apiGroups", STR_SET, 2),
        req("resources", STR_SET, 3),
        F("clusterScope", BOOL, 4),
        F("namespaces", STR_SET, 5),
    ],
)
NonResourcePolicyRule = S(
    "NonResourcePolicyRule",
    [
        req("verbs", STR_SET, 1),
        req("nonResourceURLs", STR_SET, 6),
    ],
)
PolicyRulesWithSubjects = S(
    "PolicyRulesWithSubjects",
    [
        req("subjects", List(Subject, "atomic"), 1),
        F("resourceRules", List(ResourcePolicyRule, "atomic"), 2),
        F("nonResourceRules", List(NonResourcePolicyRule, "atomic"), 3),
    ],
)
FlowSchemaSpec = S(
    "FlowSchemaSpec",
    [
        req("priorityLevelConfiguration", PriorityLevelConfigurationReference, 1),
        F("matchingPrecedence", I32, 2),
        ptr("distinguisherMethod", FlowDistinguisherMethod, 3),
        F("rules", List(PolicyRulesWithSubjects, "atomic"), 4),
    ],
)
FlowSchemaCondition = _condition("FlowSchemaCondition")
FlowSchemaStatus = S(
    "FlowSchemaStatus",
    [F("conditions", merge_list(FlowSchemaCondition, "type", list_type="map", keys=("type",)), 1)],
)
FlowSchema = S(
    "FlowSchema",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", FlowSchemaSpec, 2),
        F("status", FlowSchemaStatus, 3),
    ],
)

QueuingConfiguration = S(
    "QueuingConfiguration",
    [F("queues", I32, 1), F("handSize", I32, 2), F("queueLengthLimit", I32, 3)],
)
LimitResponse = S(
    "LimitResponse",
    [req("type", enum("Queue", "Reject"), 1), ptr("queuing", QueuingConfiguration, 2)],
)
LimitedPriorityLevelConfiguration = S(
    "LimitedPriorityLevelConfiguration",
    [
        F("nominalConcurrencyShares", I32, 1),
        F("limitResponse", LimitResponse, 2),
        ptr("lendablePercent", I32, 3),
        ptr("borrowingLimitPercent", I32, 4),
    ],
)
PriorityLevelConfigurationSpec = S(
    "PriorityLevelConfigurationSpec",
    [
        req("type", enum("Exempt", "Limited"), 1),
        ptr("limited", LimitedPriorityLevelConfiguration, 2),
    ],
)
PriorityLevelConfigurationCondition = _condition("PriorityLevelConfigurationCondition")
PriorityLevelConfigurationStatus = S(
    "PriorityLevelConfigurationStatus",
    [F("conditions", merge_list(PriorityLevelConfigurationCondition, "type", list_type="map", keys=("type",)), 1)],
)
PriorityLevelConfiguration = S(
    "PriorityLevelConfiguration",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", PriorityLevelConfigurationSpec, 2),
        F("status", PriorityLevelConfigurationStatus, 3),
    ],
)

KINDS = {"FlowSchema": FlowSchema, "PriorityLevelConfiguration": PriorityLevelConfiguration}
