"""``networking.orch.io/v1`` (upstream ``networking.k8s.io``): message package
``k8s.io.api.networking.v1`` (upstream v1.27)."""

from __future__ import annotations

from ..schema import CONDITION, LABEL_SELECTOR, OBJECT_META, List
from . import core
from ._common import I32, IOS, STR, STR_ATOMIC, STR_LIST, F, enum, inline, merge_list, ptr, req, struct

S = struct("k8s.io.api.networking.v1")

# --- NetworkPolicy ---------------------------------------------------------------------------

NetworkPolicyPort = S(
    "NetworkPolicyPort",
    [
        ptr("protocol", core.PROTOCOL, 1),
        ptr("port", IOS, 2),
        ptr("endPort", I32, 3),
    ],
)

IPBlock = S(
    "IPBlock",
    [
        req("cidr", STR, 1),
        F("except", STR_LIST, 2),
    ],
)

NetworkPolicyPeer = S(
    "NetworkPolicyPeer",
    [
        ptr("podSelector", LABEL_SELECTOR, 1),
        ptr("namespaceSelector", LABEL_SELECTOR, 2),
        ptr("ipBlock", IPBlock, 3),
    ],
)

NetworkPolicyIngressRule = S(
    "NetworkPolicyIngressRule",
    [
        F("ports", List(NetworkPolicyPort), 1),
        F("from", List(NetworkPolicyPeer), 2),
    ],
)

NetworkPolicyEgressRule = S(
    "NetworkPolicyEgressRule",
    [
        F("ports", List(NetworkPolicyPort), 1),
        F("to", List(NetworkPolicyPeer), 2),
    ],
)

NetworkPolicySpec = S(
    "NetworkPolicySpec",
    [
        req("podSelector", LABEL_SELECTOR, 1),
        F("ingress", List(NetworkPolicyIngressRule), 2),
        F("egress", List(NetworkPolicyEgressRule), 3),
        F("policyTypes", List(enum("Egress", "Ingress")), 4),
    ],
)

NetworkPolicyStatus = S(
    "NetworkPolicyStatus",
    [  # alpha in v1.27 (NetworkPolicyStatus gate)
        F("conditions", merge_list(CONDITION, "type", list_type="map", keys=("type",)), 1),
    ],
)

NetworkPolicy = S(
    "NetworkPolicy",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", NetworkPolicySpec, 2),
        F("status", NetworkPolicyStatus, 3),
    ],
)

# --- Ingress ---------------------------------------------------------------------------------

ServiceBackendPort = S(
    "ServiceBackendPort",
    [
        F("name", STR, 1),
        F("number", I32, 2),
    ],
)

IngressServiceBackend = S(
    "IngressServiceBackend",
    [
        req("name", STR, 1),
        F("port", ServiceBackendPort, 2),
    ],
)

IngressBackend = S(
    "IngressBackend",
    [
        ptr("service", IngressServiceBackend, 4),
        ptr("resource", core.TypedLocalObjectReference, 3),
    ],
)

HTTPIngressPath = S(
    "HTTPIngressPath",
    [
        F("path", STR, 1),
        ptr("pathType", enum("Exact", "ImplementationSpecific", "Prefix"), 3, required=True),
        req("backend", IngressBackend, 2),
    ],
)

HTTPIngressRuleValue = S(
    "HTTPIngressRuleValue",
    [
        req("paths", List(HTTPIngressPath, "atomic"), 1),
    ],
)

IngressRuleValue = S(
    "IngressRuleValue",
    [
        ptr("http", HTTPIngressRuleValue, 1),
    ],
)

IngressRule = S(
    "IngressRule",
    [
        F("host", STR, 1),
        inline(IngressRuleValue, 2),
    ],
)

IngressTLS = S(
    "IngressTLS",
    [
        F("hosts", STR_ATOMIC, 1),
        F("secretName", STR, 2),
    ],
)

IngressSpec = S(
    "IngressSpec",
    [
        ptr("ingressClassName", STR, 4),
        ptr("defaultBackend", IngressBackend, 1),
        F("tls", List(IngressTLS, "atomic"), 2),
        F("rules", List(IngressRule, "atomic"), 3),
    ],
)

IngressPortStatus = S(
    "IngressPortStatus",
    [
        req("port", I32, 1),
        req("protocol", core.PROTOCOL, 2),
        ptr("error", STR, 3),
    ],
)

IngressLoadBalancerIngress = S(
    "IngressLoadBalancerIngress",
    [
        F("ip", STR, 1),
        F("hostname", STR, 2),
        F("ports", List(IngressPortStatus, "atomic"), 4),
    ],
)

IngressLoadBalancerStatus = S(
    "IngressLoadBalancerStatus",
    [
        F("ingress", List(IngressLoadBalancerIngress), 1),
    ],
)

IngressStatus = S(
    "IngressStatus",
    [
        F("loadBalancer", IngressLoadBalancerStatus, 1),
    ],
)

Ingress = S(
    "Ingress",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", IngressSpec, 2),
        F("status", IngressStatus, 3),
    ],
)

# --- IngressClass ----------------------------------------------------------------------------

IngressClassParametersReference = S(
    "IngressClassParametersReference",
    [
        ptr("apiGroup", STR, 1),
        req("kind", STR, 2),
        req("name", STR, 3),
        ptr("scope", STR, 4),  # "Cluster" (default) | "Namespace"
        ptr("namespace", STR, 5),
    ],
)

IngressClassSpec = S(
    "IngressClassSpec",
    [
        F("controller", STR, 1),
        ptr("parameters", IngressClassParametersReference, 2),
    ],
)

IngressClass = S(
    "IngressClass",
    [
        F("metadata", OBJECT_META, 1),
        F("spec", IngressClassSpec, 2),
    ],
)

KINDS = {"Ingress": Ingress, "IngressClass": IngressClass, "NetworkPolicy": NetworkPolicy}
