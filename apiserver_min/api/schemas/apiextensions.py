"""``apiextensions.orch.io/v1`` (upstream ``apiextensions.k8s.io``): message package
``k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1`` (upstream v1.27).

A definition's ``openAPIV3Schema`` (JSONSchemaProps) is recursive and free-form in
its ``default``/``enum``/``example`` values: it is declared opaque (kept as given,
never pruned) and checked by ``apiserver_min.apiextensions.structural`` instead.
"""

from __future__ import annotations

from ..schema import OBJECT_META, TIME, Opaque
from ._common import BOOL, BYTES, I32, STR, STR_ATOMIC, F, List, enum, ptr, req, struct

PACKAGE = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1"
S = struct(PACKAGE)

JSON_SCHEMA_PROPS = Opaque(f"{PACKAGE}.JSONSchemaProps", upstream_wire=False)

ServiceReference = S(
    "ServiceReference",
    [req("namespace", STR, 1), req("name", STR, 2), ptr("path", STR, 3), ptr("port", I32, 4)],
)

WebhookClientConfig = S(
    "WebhookClientConfig",
    [ptr("url", STR, 3), ptr("service", ServiceReference, 1), F("caBundle", BYTES, 2)],
)

WebhookConversion = S(
    "WebhookConversion",
    [ptr("clientConfig", WebhookClientConfig, 2), F("conversionReviewVersions", STR_ATOMIC, 3)],
)

CustomResourceConversion = S(
    "CustomResourceConversion",
    [req("strategy", enum("None", "Webhook"), 1), ptr("webhook", WebhookConversion, 2)],
)

CustomResourceDefinitionNames = S(
    "CustomResourceDefinitionNames",
    [
        req("plural", STR, 1, description="The plural name of the resource served at /apis/<group>/<version>/."),
        F("singular", STR, 2, description="The singular name of the resource (lower case)."),
        F("shortNames", STR_ATOMIC, 3, description="Short names kubectl accepts for the resource."),
        req("kind", STR, 4, description="The kind of the resource's objects (CamelCase)."),
        F("listKind", STR, 5, description="The kind of lists of the resource; defaults to <kind>List."),
        F("categories", STR_ATOMIC, 6, description="Groups of resources this one belongs to (e.g. 'all')."),
    ],
)

CustomResourceValidation = S(
    "CustomResourceValidation",
    [ptr("openAPIV3Schema", JSON_SCHEMA_PROPS, 1, description="The OpenAPI v3 schema of the objects.")],
)

CustomResourceSubresourceStatus = S("CustomResourceSubresourceStatus", [])

CustomResourceSubresourceScale = S(
    "CustomResourceSubresourceScale",
    [req("specReplicasPath", STR, 1), req("statusReplicasPath", STR, 2), ptr("labelSelectorPath", STR, 3)],
)

CustomResourceSubresources = S(
    "CustomResourceSubresources",
    [ptr("status", CustomResourceSubresourceStatus, 1), ptr("scale", CustomResourceSubresourceScale, 2)],
)

CustomResourceColumnDefinition = S(
    "CustomResourceColumnDefinition",
    [
        req("name", STR, 1),
        req("type", STR, 2),
        F("format", STR, 3),
        F("description", STR, 4),
        F("priority", I32, 5),
        req("jsonPath", STR, 6),
    ],
)

CustomResourceDefinitionVersion = S(
    "CustomResourceDefinitionVersion",
    [
        req("name", STR, 1, description="The version's name, served at /apis/<group>/<name>/..."),
        req("served", BOOL, 2, description="Whether the version is served by the REST API."),
        req("storage", BOOL, 3, description="Whether objects are stored in this version (exactly one is)."),
        F("deprecated", BOOL, 7),
        ptr("deprecationWarning", STR, 8),
        ptr("schema", CustomResourceValidation, 4),
        ptr("subresources", CustomResourceSubresources, 5),
        F("additionalPrinterColumns", List(CustomResourceColumnDefinition, "atomic"), 6),
    ],
)

CustomResourceDefinitionSpec = S(
    "CustomResourceDefinitionSpec",
    [
        req("group", STR, 1, description="The API group of the defined resources."),
        req("names", CustomResourceDefinitionNames, 3),
        req("scope", enum("Cluster", "Namespaced"), 4, description="Cluster or Namespaced."),
        req("versions", List(CustomResourceDefinitionVersion, "atomic"), 7),
        ptr("conversion", CustomResourceConversion, 9),
        F("preserveUnknownFields", BOOL, 10),
    ],
)

CustomResourceDefinitionCondition = S(
    "CustomResourceDefinitionCondition",
    [
        req("type", STR, 1),
        req("status", enum("True", "False", "Unknown"), 2),
        F("lastTransitionTime", TIME, 3),
        F("reason", STR, 4),
        F("message", STR, 5),
    ],
)

CustomResourceDefinitionStatus = S(
    "CustomResourceDefinitionStatus",
    [
        F("conditions", List(CustomResourceDefinitionCondition, "map", ("type",)), 1),
        F("acceptedNames", CustomResourceDefinitionNames, 2),
        F("storedVersions", STR_ATOMIC, 3),
    ],
)

CustomResourceDefinition = S(
    "CustomResourceDefinition",
    [
        F("metadata", OBJECT_META, 1),
        req("spec", CustomResourceDefinitionSpec, 2),
        F("status", CustomResourceDefinitionStatus, 3),
    ],
)

KINDS = {"CustomResourceDefinition": CustomResourceDefinition}
