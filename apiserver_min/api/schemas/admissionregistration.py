"""``admissionregistration.orch.io/v1`` (upstream ``admissionregistration.k8s.io``):
message package ``k8s.io.api.admissionregistration.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import LABEL_SELECTOR, OBJECT_META, List
from ._common import BYTES, I32, STR, STR_ATOMIC, STR_LIST, F, enum, inline, merge_list, ptr, req, struct

S = struct("k8s.io.api.admissionregistration.v1")

Rule = S(
    "Rule",
    [
        F("apiGroups", STR_ATOMIC, 1),
        F("apiVersions", STR_ATOMIC, 2),
        F("resources", STR_ATOMIC, 3),
        ptr("scope", enum("*", "Cluster", "Namespaced"), 4),
    ],
)

RuleWithOperations = S(
    "RuleWithOperations",
    [
        F("operations", List(enum("*", "CONNECT", "CREATE", "DELETE", "UPDATE"), "atomic"), 1),
        inline(Rule, 2),
    ],
)

ServiceReference = S(
    "ServiceReference",
    [
        req("namespace", STR, 1),
        req("name", STR, 2),
        ptr("path", STR, 3),
        ptr("port", I32, 4),
    ],
)

WebhookClientConfig = S(
    "WebhookClientConfig",
    [
        ptr("url", STR, 3),
        ptr("service", ServiceReference, 1),
        F("caBundle", BYTES, 2),
    ],
)

# v1.27 alpha (AdmissionWebhookMatchConditions).
MatchCondition = S(
    "MatchCondition",
    [
        req("name", STR, 1),
        req("expression", STR, 2),
    ],
)

FAILURE_POLICY = enum("Fail", "Ignore")
MATCH_POLICY = enum("Equivalent", "Exact")
SIDE_EFFECTS = enum("None", "NoneOnDryRun", "Some", "Unknown")
MATCH_CONDITIONS = merge_list(MatchCondition, "name", list_type="map", keys=("name",))


def _webhook_common() -> list:
    return [
        req("name", STR, 1),
        req("clientConfig", WebhookClientConfig, 2),
        F("rules", List(RuleWithOperations), 3),
        ptr("failurePolicy", FAILURE_POLICY, 4),
        ptr("matchPolicy", MATCH_POLICY, 9),
        ptr("namespaceSelector", LABEL_SELECTOR, 5),
        ptr("sideEffects", SIDE_EFFECTS, 6, required=True),
        ptr("timeoutSeconds", I32, 7),
        req("admissionReviewVersions", STR_LIST, 8),
    ]


ValidatingWebhook = S(
    "ValidatingWebhook",
    _webhook_common()
    + [
        ptr("objectSelector", LABEL_SELECTOR, 10),
        F("matchConditions", MATCH_CONDITIONS, 11),
    ],
)

MutatingWebhook = S(
    "MutatingWebhook",
    _webhook_common()
    + [
        ptr("objectSelector", LABEL_SELECTOR, 11),
        ptr("reinvocationPolicy", enum("IfNeeded", "Never"), 10),
        F("matchConditions", MATCH_CONDITIONS, 12),
    ],
)

ValidatingWebhookConfiguration = S(
    "ValidatingWebhookConfiguration",
    [
        F("metadata", OBJECT_META, 1),
        F("webhooks", merge_list(ValidatingWebhook, "name"), 2),
    ],
)

MutatingWebhookConfiguration = S(
    "MutatingWebhookConfiguration",
    [
        F("metadata", OBJECT_META, 1),
        F("webhooks", merge_list(MutatingWebhook, "name"), 2),
    ],
)

KINDS = {
    "ValidatingWebhookConfiguration": ValidatingWebhookConfiguration,
    "MutatingWebhookConfiguration": MutatingWebhookConfiguration,
}
