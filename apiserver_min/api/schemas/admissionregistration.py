"""``admissionregistration.orch.io/v1`` (upstream ``admissionregistration.k8s.io``):
message package ``k8s.io.api.admissionregistration.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import CONDITION, LABEL_SELECTOR, OBJECT_META, List
from ._common import BYTES, I32, I64, STR, STR_ATOMIC, STR_LIST, F, enum, inline, merge_list, ptr, req, struct

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

# --- validating admission policies (upstream 1.27 v1alpha1 with the v1beta1 additions:
# variables, paramRef.selector and parameterNotFoundAction; the field numbers of
# upstream's later v1) -------------------------------------------------------------------

NamedRuleWithOperations = S(
    "NamedRuleWithOperations",
    [
        F("resourceNames", STR_ATOMIC, 1),
        inline(RuleWithOperations, 2),
    ],
    atomic=True,
)

MatchResources = S(
    "MatchResources",
    [
        ptr("namespaceSelector", LABEL_SELECTOR, 1),
        ptr("objectSelector", LABEL_SELECTOR, 2),
        F("resourceRules", List(NamedRuleWithOperations, "atomic"), 3),
        F("excludeResourceRules", List(NamedRuleWithOperations, "atomic"), 4),
        ptr("matchPolicy", MATCH_POLICY, 7),
    ],
    atomic=True,
)

ParamKind = S(
    "ParamKind",
    [
        F("apiVersion", STR, 1),
        F("kind", STR, 2),
    ],
    atomic=True,
)

Validation = S(
    "Validation",
    [
        req("expression", STR, 1),
        F("message", STR, 2),
        ptr("reason", STR, 3),
        F("messageExpression", STR, 4),
    ],
)

AuditAnnotation = S(
    "AuditAnnotation",
    [
        req("key", STR, 1),
        req("valueExpression", STR, 2),
    ],
)

Variable = S(
    "Variable",
    [
        req("name", STR, 1),
        req("expression", STR, 2),
    ],
)

ValidatingAdmissionPolicySpec = S(
    "ValidatingAdmissionPolicySpec",
    [
        ptr("paramKind", ParamKind, 1),
        ptr("matchConstraints", MatchResources, 2),
        F("validations", List(Validation, "atomic"), 3),
        ptr("failurePolicy", FAILURE_POLICY, 4),
        F("auditAnnotations", List(AuditAnnotation, "atomic"), 5),
        F("matchConditions", MATCH_CONDITIONS, 6),
        F("variables", List(Variable, "atomic"), 7),
    ],
)

ExpressionWarning = S(
    "ExpressionWarning",
    [
        req("fieldRef", STR, 2),
        req("warning", STR, 3),
    ],
)

TypeChecking = S(
    "TypeChecking",
    [F("expressionWarnings", List(ExpressionWarning, "atomic"), 1)],
)

ValidatingAdmissionPolicyStatus = S(
    "ValidatingAdmissionPolicyStatus",
    [
        F("observedGeneration", I64, 1),
        ptr("typeChecking", TypeChecking, 2),
        F("conditions", merge_list(CONDITION, "type", list_type="map", keys=("type",)), 3),
    ],
)

ValidatingAdmissionPolicy = S(
    "ValidatingAdmissionPolicy",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ValidatingAdmissionPolicySpec, 2),
        F("status", ValidatingAdmissionPolicyStatus, 3),
    ],
)

PARAMETER_NOT_FOUND_ACTION = enum("Allow", "Deny")
VALIDATION_ACTION = enum("Deny", "Warn", "Audit")

ParamRef = S(
    "ParamRef",
    [
        F("name", STR, 1),
        F("namespace", STR, 2),
        ptr("selector", LABEL_SELECTOR, 3),
        ptr("parameterNotFoundAction", PARAMETER_NOT_FOUND_ACTION, 4),
    ],
    atomic=True,
)

ValidatingAdmissionPolicyBindingSpec = S(
    "ValidatingAdmissionPolicyBindingSpec",
    [
        F("policyName", STR, 1),
        ptr("paramRef", ParamRef, 2),
        ptr("matchResources", MatchResources, 3),
        F("validationActions", List(VALIDATION_ACTION, "set"), 4),
    ],
)

ValidatingAdmissionPolicyBinding = S(
    "ValidatingAdmissionPolicyBinding",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", ValidatingAdmissionPolicyBindingSpec, 2),
    ],
)

KINDS = {
    "ValidatingWebhookConfiguration": ValidatingWebhookConfiguration,
    "MutatingWebhookConfiguration": MutatingWebhookConfiguration,
    "ValidatingAdmissionPolicy": ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": ValidatingAdmissionPolicyBinding,
}
