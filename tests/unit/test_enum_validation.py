"""Enumerated fields are enforced where upstream's validation (v1.27) enforces them.

A Service with ``type: Bogus``, an EndpointSlice with ``addressType: Bogus`` or an
events.orch.io Event with ``type: Bogus`` is a 422 Invalid with upstream's wording
(``Unsupported value: "Bogus": supported values: ...``, values Go-quoted in
upstream's order), through the generic store like any write. The rules are
declared once (api/enumvalidation.py) against the schemas' enumerations, and
every declared enumeration is either enforced or listed with the reason it is not.
"""

from __future__ import annotations

import copy

import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.api import enumvalidation as ev
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.schema import iter_structs
from apiserver_min.api.schemas import KIND_SCHEMAS
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix, object_key
from apiserver_min.storage.sqlite import SqliteBackend

NOT_SUPPORTED = "FieldValueNotSupported"
INVALID = "FieldValueInvalid"
REQUIRED = "FieldValueRequired"


def kind(group: str, resource: str):
    return REGISTRY.by_resource(group, "v1", resource)


SERVICES = kind("", "services")
PODS = kind("", "pods")


@pytest.fixture
async def store(tmp_path):
    backend = SqliteBackend(str(tmp_path / "state.db"), compaction_interval=0)
    await backend.start()
    yield Store(backend, REGISTRY, WatchCache(backend, list(REGISTRY.kinds), key_prefix), Chain([]))
    await backend.close()


async def create_error(store: Store, k, obj: dict, ns: str = "default") -> st.ApiError:
    with pytest.raises(st.ApiError) as info:
        await store.create(k, ns if k.namespaced else "", copy.deepcopy(obj), SYSTEM_USER)
    assert (info.value.code, info.value.reason) == (422, "Invalid"), info.value.message
    return info.value


def causes(exc: st.ApiError) -> list[tuple[str, str, str]]:
    return [(c["reason"], c["field"], c["message"]) for c in exc.details["causes"]]


# --- the three reported cases -------------------------------------------------------------------


async def test_a_service_type_must_be_one_upstream_supports(store):
    svc = {"metadata": {"name": "web"}, "spec": {"type": "Bogus", "ports": [{"port": 80}]}}
    exc = await create_error(store, SERVICES, svc)
    message = 'Unsupported value: "Bogus": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'
    assert causes(exc) == [(NOT_SUPPORTED, "spec.type", message)]
    assert exc.message == f'Service "web" is invalid: spec.type: {message}'
    with pytest.raises(st.ApiError) as missing:
        await store.get(SERVICES, "default", "web")
    assert missing.value.code == 404
    # The default type and the supported ones are fine.
    for name, spec in (
        ("plain", {}),
        ("np", {"type": "NodePort"}),
        ("ext", {"type": "ExternalName", "externalName": "db.example"}),
    ):
        created, _ = await store.create(
            SERVICES, "default", {"metadata": {"name": name}, "spec": {**spec, "ports": [{"port": 80}]}}, SYSTEM_USER
        )
        assert created["spec"]["type"] == spec.get("type", "ClusterIP")


async def test_an_endpointslice_address_type_must_be_one_upstream_supports(store):
    slices = kind(names.DISCOVERY_GROUP, "endpointslices")
    exc = await create_error(store, slices, {"metadata": {"name": "s"}, "addressType": "Bogus", "endpoints": []})
    assert causes(exc) == [
        (NOT_SUPPORTED, "addressType", 'Unsupported value: "Bogus": supported values: "FQDN", "IPv4", "IPv6"')
    ]
    exc = await create_error(store, slices, {"metadata": {"name": "s"}, "endpoints": []})
    assert causes(exc) == [(REQUIRED, "addressType", "Required value")]
    exc = await create_error(
        store,
        slices,
        {
            "metadata": {"name": "s"},
            "addressType": "IPv4",
            "endpoints": [],
            "ports": [{"port": 53, "protocol": "ICMP"}],
        },
    )
    assert causes(exc) == [
        (NOT_SUPPORTED, "ports[0].protocol", 'Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"')
    ]
    created, _ = await store.create(
        slices,
        "default",
        {"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": [], "ports": [{"port": 53}]},
        SYSTEM_USER,
    )
    assert created["ports"][0]["protocol"] == "TCP"


async def test_an_events_api_event_type_must_be_normal_or_warning(store):
    events = kind(names.EVENTS_GROUP, "events")
    event = {
        "metadata": {"name": "e"},
        "eventTime": "2024-01-01T00:00:00.000000Z",
        "type": "Bogus",
        "reportingController": "example.com/c",
        "reportingInstance": "i",
        "action": "Act",
        "reason": "R",
    }
    exc = await create_error(store, events, event)
    # Upstream's strict (events.k8s.io/v1) validation, worded as it words it.
    assert causes(exc) == [(INVALID, "type", 'Invalid value: "": has invalid value: Bogus')]
    exc = await create_error(store, events, {**event, "type": ""})
    assert causes(exc) == [(INVALID, "type", 'Invalid value: "": has invalid value: ')]
    created, _ = await store.create(events, "default", {**event, "type": "Warning"}, SYSTEM_USER)
    assert created["type"] == "Warning"


async def test_core_v1_events_keep_any_type_as_upstream_legacy_validation_does(store):
    created, _ = await store.create(
        kind("", "events"),
        "default",
        {
            "metadata": {"name": "legacy"},
            "type": "Bogus",
            "reason": "R",
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
        },
        SYSTEM_USER,
    )
    assert created["type"] == "Bogus"


# --- more kinds -----------------------------------------------------------------------------------

TEMPLATE = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
# A job's pods may not restart Always (the Job strategy refuses the default).
JOB_TEMPLATE = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}


def with_template(spec: dict, template: dict | None = None) -> dict:
    return {"selector": {"matchLabels": {"app": "a"}}, "template": copy.deepcopy(template or TEMPLATE), **spec}


CASES = [
    pytest.param(
        "",
        "services",
        {"spec": {"ports": [{"port": 80, "protocol": "HTTP"}]}},
        [
            (
                NOT_SUPPORTED,
                "spec.ports[0].protocol",
                'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"',
            )
        ],
        id="service-port-protocol",
    ),
    pytest.param(
        "",
        "services",
        {
            "spec": {
                "ports": [{"port": 80}],
                "sessionAffinity": "Sticky",
                "ipFamilyPolicy": "Dual",
                "ipFamilies": ["IPv4", "IPv5"],
            }
        },
        [
            (
                NOT_SUPPORTED,
                "spec.sessionAffinity",
                'Unsupported value: "Sticky": supported values: "ClientIP", "None"',
            ),
            (
                NOT_SUPPORTED,
                "spec.ipFamilyPolicy",
                'Unsupported value: "Dual": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"',
            ),
            (NOT_SUPPORTED, "spec.ipFamilies[1]", 'Unsupported value: "IPv5": supported values: "IPv4", "IPv6"'),
        ],
        id="service-affinity-families",
    ),
    pytest.param(
        "",
        "services",
        {"spec": {"type": "NodePort", "ports": [{"port": 80}], "externalTrafficPolicy": "Nearest"}},
        [
            (
                NOT_SUPPORTED,
                "spec.externalTrafficPolicy",
                'Unsupported value: "Nearest": supported values: "Cluster", "Local"',
            )
        ],
        id="service-etp",
    ),
    pytest.param(
        "",
        "nodes",
        {"spec": {"taints": [{"key": "a", "effect": "Sometimes"}, {"key": "b"}]}},
        [
            (
                NOT_SUPPORTED,
                "spec.taints[0].effect",
                'Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
            ),
            (REQUIRED, "spec.taints[1].effect", "Required value"),
        ],
        id="node-taint-effect",
    ),
    pytest.param(
        "",
        "persistentvolumeclaims",
        {
            "spec": {
                "accessModes": ["ReadWriteOnce", "WriteMany"],
                "volumeMode": "Raw",
                "resources": {"requests": {"storage": "1Gi"}},
            }
        },
        [
            (
                NOT_SUPPORTED,
                "spec.accessModes",
                'Unsupported value: "WriteMany": supported values: '
                '"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", '
                '"ReadWriteOncePod"',
            ),
            (NOT_SUPPORTED, "spec.volumeMode", 'Unsupported value: "Raw": supported values: "Block", "Filesystem"'),
        ],
        id="pvc-access-modes",
    ),
    pytest.param(
        "",
        "resourcequotas",
        {"spec": {"scopes": ["BestEffort", "Cheap"]}},
        [
            (
                INVALID,
                "spec.scopes",
                'Invalid value: []core.ResourceQuotaScope{"BestEffort", "Cheap"}: unsupported scope',
            )
        ],
        id="quota-scopes",
    ),
    pytest.param(
        "apps",
        "deployments",
        {"spec": with_template({"strategy": {"type": "Blue"}})},
        [
            (
                NOT_SUPPORTED,
                "spec.strategy",
                'Unsupported value: apps.DeploymentStrategy{Type:"Blue", '
                'RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}: supported values: "Recreate", '
                '"RollingUpdate"',
            )
        ],
        id="deployment-strategy",
    ),
    pytest.param(
        "apps",
        "deployments",
        {
            "spec": with_template(
                {},
                {
                    "metadata": {"labels": {"app": "a"}},
                    "spec": {
                        "restartPolicy": "Sometimes",
                        "containers": [{"name": "c", "image": "i", "imagePullPolicy": "Maybe"}],
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Like"}]}]
                                }
                            }
                        },
                    },
                },
            )
        },
        [
            (
                NOT_SUPPORTED,
                "spec.template.spec.restartPolicy",
                'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
            ),
            (
                # and again as a ReplicaSet's template, which restarts Always
                NOT_SUPPORTED,
                "spec.template.spec.restartPolicy",
                'Unsupported value: "Sometimes": supported values: "Always"',
            ),
            (
                NOT_SUPPORTED,
                "spec.template.spec.containers[0].imagePullPolicy",
                'Unsupported value: "Maybe": supported values: "Always", "IfNotPresent", "Never"',
            ),
            (
                INVALID,
                "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                ".nodeSelectorTerms[0].matchExpressions[0].operator",
                'Invalid value: "Like": not a valid selector operator',
            ),
        ],
        id="deployment-pod-template",
    ),
    pytest.param(
        "apps",
        "daemonsets",
        {"spec": with_template({"updateStrategy": {"type": "AllAtOnce"}})},
        [
            (
                NOT_SUPPORTED,
                "spec.updateStrategy",
                'Unsupported value: apps.DaemonSetUpdateStrategy{Type:"AllAtOnce", '
                'RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}: supported values: "RollingUpdate", '
                '"OnDelete"',
            )
        ],
        id="daemonset-strategy",
    ),
    pytest.param(
        "apps",
        "statefulsets",
        {"spec": with_template({"serviceName": "s", "podManagementPolicy": "Any"})},
        [(INVALID, "spec.podManagementPolicy", "Invalid value: \"Any\": must be 'OrderedReady' or 'Parallel'")],
        id="statefulset-policy",
    ),
    pytest.param(
        "batch",
        "cronjobs",
        {
            "spec": {
                "schedule": "* * * * *",
                "concurrencyPolicy": "Sometimes",
                "jobTemplate": {"spec": {"template": copy.deepcopy(JOB_TEMPLATE)}},
            }
        },
        [
            (
                NOT_SUPPORTED,
                "spec.concurrencyPolicy",
                'Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace"',
            )
        ],
        id="cronjob-concurrency",
    ),
    pytest.param(
        "batch",
        "jobs",
        {"spec": {"completionMode": "Partial", "template": copy.deepcopy(JOB_TEMPLATE)}},
        [
            (
                NOT_SUPPORTED,
                "spec.completionMode",
                'Unsupported value: "Partial": supported values: "NonIndexed", "Indexed"',
            )
        ],
        id="job-completion",
    ),
    pytest.param(
        names.NETWORKING_GROUP,
        "networkpolicies",
        {
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Sideways"],
                "ingress": [{"ports": [{"protocol": "ICMP", "port": 1}]}],
            }
        },
        [
            (
                NOT_SUPPORTED,
                "spec.policyTypes[1]",
                'Unsupported value: "Sideways": supported values: "Ingress", "Egress"',
            ),
            (
                NOT_SUPPORTED,
                "spec.ingress[0].ports[0].protocol",
                'Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"',
            ),
        ],
        id="networkpolicy",
    ),
    pytest.param(
        names.NETWORKING_GROUP,
        "ingresses",
        {
            "spec": {
                "rules": [
                    {
                        "http": {
                            "paths": [
                                {"path": "/", "backend": {"service": {"name": "s", "port": {"number": 80}}}},
                                {
                                    "path": "/",
                                    "pathType": "Regex",
                                    "backend": {"service": {"name": "s", "port": {"number": 80}}},
                                },
                            ]
                        }
                    }
                ]
            }
        },
        [
            (REQUIRED, "spec.rules[0].http.paths[0].pathType", "Required value: pathType must be specified"),
            (
                NOT_SUPPORTED,
                "spec.rules[0].http.paths[1].pathType",
                'Unsupported value: "Regex": supported values: "Exact", "ImplementationSpecific", "Prefix"',
            ),
        ],
        id="ingress-path-type",
    ),
    pytest.param(
        names.STORAGE_GROUP,
        "storageclasses",
        {"provisioner": "example.com/p", "reclaimPolicy": "Recycle"},
        [(NOT_SUPPORTED, "reclaimPolicy", 'Unsupported value: "Recycle": supported values: "Delete", "Retain"')],
        id="storageclass-reclaim",
    ),
    pytest.param(
        "policy",
        "poddisruptionbudgets",
        {"spec": {"unhealthyPodEvictionPolicy": "Never"}},
        [
            (
                NOT_SUPPORTED,
                "spec.unhealthyPodEvictionPolicy",
                'Unsupported value: "Never": supported values: "AlwaysAllow", "IfHealthyBudget"',
            )
        ],
        id="pdb",
    ),
    pytest.param(
        names.SCHEDULING_GROUP,
        "priorityclasses",
        {"value": 10, "preemptionPolicy": "Sometimes"},
        [
            (
                NOT_SUPPORTED,
                "preemptionPolicy",
                'Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never"',
            )
        ],
        id="priorityclass",
    ),
    pytest.param(
        names.ADMISSIONREGISTRATION_GROUP,
        "validatingwebhookconfigurations",
        {
            "webhooks": [
                {
                    "name": "a.example.com",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": "https://example.com"},
                    "sideEffects": "Some",
                    "failurePolicy": "Retry",
                    "rules": [
                        {
                            "operations": ["CREATE", "PATCH"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "scope": "All",
                        }
                    ],
                }
            ]
        },
        [
            (
                NOT_SUPPORTED,
                "webhooks[0].rules[0].operations[1]",
                'Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
            ),
            (
                NOT_SUPPORTED,
                "webhooks[0].rules[0].scope",
                'Unsupported value: "All": supported values: "*", "Cluster", "Namespaced"',
            ),
            (
                NOT_SUPPORTED,
                "webhooks[0].failurePolicy",
                'Unsupported value: "Retry": supported values: "Fail", "Ignore"',
            ),
            (
                NOT_SUPPORTED,
                "webhooks[0].sideEffects",
                'Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
            ),
        ],
        id="webhook",
    ),
]


@pytest.mark.parametrize("group,resource,body,expected", CASES)
async def test_enumerations_of_other_kinds(store, group, resource, body, expected):
    k = kind(group, resource)
    exc = await create_error(store, k, {"metadata": {"name": "x"}, **body})
    assert sorted(causes(exc)) == sorted(expected)


async def test_pods_report_an_enumeration_once(store):
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "restartPolicy": "Sometimes",
            "containers": [{"name": "c", "image": "i"}],
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Maybe"}
            ],
        },
    }
    exc = await create_error(store, PODS, pod)
    assert sorted(causes(exc)) == [
        (
            NOT_SUPPORTED,
            "spec.restartPolicy",
            'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
        ),
        (
            NOT_SUPPORTED,
            "spec.topologySpreadConstraints[0].nodeTaintsPolicy",
            'Unsupported value: "Maybe": supported values: "Honor", "Ignore"',
        ),
    ]


async def test_updates_leave_a_value_stored_before_the_checks_alone_but_refuse_new_ones(store):
    # A Service stored before enumerations were enforced (written to storage directly).
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "old", "namespace": "default", "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {
            "type": "Bogus",
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "sessionAffinity": "None",
        },
        "status": {"loadBalancer": {}},
    }
    await store.backend.create(object_key(SERVICES, "default", "old"), encode_for_storage(bad))

    def set_status(obj):
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
        return obj

    updated, _, _ = await store.update(SERVICES, "default", "old", set_status, SYSTEM_USER, subresource="status")
    assert updated["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.1"}]

    def label(obj):
        obj["metadata"]["labels"] = {"a": "b"}
        return obj

    await store.update(SERVICES, "default", "old", label, SYSTEM_USER)

    def retype(obj):
        obj["spec"]["type"] = "Other"
        return obj

    with pytest.raises(st.ApiError) as info:
        await store.update(SERVICES, "default", "old", retype, SYSTEM_USER)
    assert causes(info.value) == [
        (
            NOT_SUPPORTED,
            "spec.type",
            'Unsupported value: "Other": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
        )
    ]


async def test_webhooks_stored_with_side_effects_may_keep_them(store):
    k = kind(names.ADMISSIONREGISTRATION_GROUP, "mutatingwebhookconfigurations")
    hook = {
        "name": "a.example.com",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"url": "https://example.com"},
    }
    await store.create(k, "", {"metadata": {"name": "w"}, "webhooks": [hook]}, SYSTEM_USER)

    def with_effects(obj):
        obj["webhooks"][0]["sideEffects"] = "Unknown"
        return obj

    with pytest.raises(st.ApiError) as info:
        await store.update(k, "", "w", with_effects, SYSTEM_USER)
    assert causes(info.value)[0][:2] == (NOT_SUPPORTED, "webhooks[0].sideEffects")
    # One stored (by an older server) with side effects may keep and add them, as upstream.
    old = {
        "apiVersion": f"{names.ADMISSIONREGISTRATION_GROUP}/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "legacy", "uid": "u2", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "webhooks": [{**hook, "sideEffects": "Some"}],
    }
    await store.backend.create(object_key(k, "", "legacy"), encode_for_storage(old))

    def add_hook(obj):
        obj["webhooks"].append({**hook, "name": "b.example.com", "sideEffects": "Unknown"})
        return obj

    updated, _, _ = await store.update(k, "", "legacy", add_hook, SYSTEM_USER)
    assert [h["sideEffects"] for h in updated["webhooks"]] == ["Some", "Unknown"]


# --- the rule table ------------------------------------------------------------------------------


def test_every_declared_enumeration_is_enforced_or_explained():
    declared = ev.enum_field_keys(KIND_SCHEMAS.values())
    unclassified = sorted(k for k in declared if k not in ev.RULES and k not in ev.NOT_ENFORCED)
    assert unclassified == [], "classify these in api/enumvalidation.py (RULES or NOT_ENFORCED)"
    assert not set(ev.RULES) & set(ev.NOT_ENFORCED)
    fields = {(s.name, n) for s in iter_structs(list(KIND_SCHEMAS.values())) for n in s.json_fields()}
    assert sorted(k for k in [*ev.RULES, *ev.NOT_ENFORCED, *ev.NOT_DESCENDED] if k not in fields) == []
    # A rule's own value list names only values the schema declares (a subset where
    # upstream supports fewer, e.g. a StorageClass cannot Recycle).
    for key, rule in ev.RULES.items():
        if key in declared and rule.values is not None:
            assert set(rule.values) <= set(declared[key]), key


def test_the_walk_skips_what_pods_validate_themselves_and_what_upstream_does_not_enter():
    pod_schema = KIND_SCHEMAS[("", "v1", "Pod")]
    pod = {"spec": {"restartPolicy": "Sometimes", "containers": [{"name": "c", "imagePullPolicy": "Maybe"}]}}
    assert ev.validate(pod_schema, pod, ev.POD_RULES) == []
    assert sorted(e.field for e in ev.validate(pod_schema, pod)) == [
        "spec.containers[0].imagePullPolicy",
        "spec.restartPolicy",
    ]
    sts = KIND_SCHEMAS[("apps", "v1", "StatefulSet")]
    assert ev.validate(sts, {"spec": {"volumeClaimTemplates": [{"spec": {"accessModes": ["Bogus"]}}]}}) == []
    # Wrong shapes are left to the type checks.
    assert ev.validate(pod_schema, {"spec": {"containers": "nope", "affinity": []}}) == []
