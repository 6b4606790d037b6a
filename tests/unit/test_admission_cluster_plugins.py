"""The admission plugins that read the cluster's objects or the authorizer, through
a real store and watch cache: DefaultIngressClass, RuntimeClass,
StorageObjectInUseProtection, PersistentVolumeClaimResize, TaintNodesByCondition,
EventRateLimit, OwnerReferencesPermissionEnforcement, PersistentVolumeLabel and
ClusterTrustBundleAttest; the chain's resolution and configuration of them."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from apiserver_min.admission.chain import Attributes, Chain
from apiserver_min.admission.config import AdmissionConfig, AdmissionConfigError, PluginConfig
from apiserver_min.admission.plugins import DEFAULT_PLUGINS, build_chain, resolve_plugins
from apiserver_min.admission.plugins.defaultingressclass import default_class
from apiserver_min.admission.plugins.eventratelimit import EventRateLimit, parse_configuration
from apiserver_min.admission.plugins.ownerreferences import OwnerReferencesPermissionEnforcement
from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER, UserInfo
from apiserver_min.authz.authorizer import AuthzAttributes, Decision, Union
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

NS = REGISTRY.by_resource("", "v1", "namespaces")
PODS = REGISTRY.by_resource("", "v1", "pods")
NODES = REGISTRY.by_resource("", "v1", "nodes")
PVCS = REGISTRY.by_resource("", "v1", "persistentvolumeclaims")
PVS = REGISTRY.by_resource("", "v1", "persistentvolumes")
EVENTS = REGISTRY.by_resource("", "v1", "events")
CONFIGMAPS = REGISTRY.by_resource("", "v1", "configmaps")
INGRESSES = REGISTRY.by_resource(names.NETWORKING_GROUP, "v1", "ingresses")
CLASSES = REGISTRY.by_resource(names.NETWORKING_GROUP, "v1", "ingressclasses")
LIMIT_RANGES = REGISTRY.by_resource("", "v1", "limitranges")
RUNTIME_CLASSES = REGISTRY.by_resource(names.NODE_GROUP, "v1", "runtimeclasses")
STORAGE_CLASSES = REGISTRY.by_resource(names.STORAGE_GROUP, "v1", "storageclasses")
ALICE = UserInfo("alice", groups=(names.GROUP_AUTHENTICATED,))


@pytest.fixture
async def cluster(tmp_path):
    """(store, server) on SQLite with a started watch cache and namespace "team"; the
    store's chain is set by each test (``store.admission.plugins``)."""
    backend = SqliteBackend(str(tmp_path / "state.db"), compaction_interval=0)
    await backend.start()
    cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
    await cache.start()
    store = Store(backend, REGISTRY, cache, Chain([]))
    server = SimpleNamespace(store=store, cache=cache, registry=REGISTRY, opts=SimpleNamespace(), authorizer=None)
    await store.create(NS, "", {"metadata": {"name": "team"}}, SYSTEM_USER)
    yield store, server
    await cache.stop()
    await backend.close()


def use(store: Store, server, *plugin_names: str, config: AdmissionConfig | None = None) -> None:
    if config is not None:
        server.opts.admission_config = config
    store.admission.plugins = build_chain(server, list(plugin_names)).plugins


async def synced(store: Store) -> None:
    assert await store.cache.sync() is not None


def test_default_on_set_includes_the_new_default_plugins():
    for name in (
        "DefaultIngressClass",
        "RuntimeClass",
        "StorageObjectInUseProtection",
        "PersistentVolumeClaimResize",
        "TaintNodesByCondition",
    ):
        assert name in DEFAULT_PLUGINS
    for name in ("EventRateLimit", "OwnerReferencesPermissionEnforcement", "PersistentVolumeLabel"):
        assert name not in DEFAULT_PLUGINS
        assert name in resolve_plugins([name], [])
    assert "ClusterTrustBundleAttest" in resolve_plugins(["ClusterTrustBundleAttest"], [])


# --- DefaultIngressClass ----------------------------------------------------------------------


def ingress_class(name: str, default: bool = False, created: str = "2024-01-01T00:00:00Z") -> dict:
    md: dict = {"name": name, "creationTimestamp": created}
    if default:
        md["annotations"] = {names.ANNOTATION_IS_DEFAULT_INGRESS_CLASS: "true"}
    return {"metadata": md, "spec": {"controller": "example.com/c"}}


def test_newest_default_class_wins_and_ties_go_to_the_lower_name():
    assert default_class([ingress_class("a"), ingress_class("b")]) is None
    old, new = ingress_class("old", True, "2024-01-01T00:00:00Z"), ingress_class("new", True, "2024-02-01T00:00:00Z")
    assert default_class([old, new, ingress_class("x", False, "2025-01-01T00:00:00Z")])["metadata"]["name"] == "new"
    assert default_class([ingress_class("b", True), ingress_class("a", True)])["metadata"]["name"] == "a"
    other = ingress_class("off")
    other["metadata"]["annotations"] = {names.ANNOTATION_IS_DEFAULT_INGRESS_CLASS: "True"}
    assert default_class([other]) is None  # only the exact string "true" marks a default


async def test_ingress_without_class_gets_the_default_one(cluster):
    store, server = cluster
    use(store, server, "DefaultIngressClass")
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    # No default class: nothing set.
    obj, _ = await store.create(
        INGRESSES, "team", {"metadata": {"name": "i0"}, "spec": {"defaultBackend": backend}}, ALICE
    )
    assert "ingressClassName" not in obj["spec"]
    await store.create(CLASSES, "", ingress_class("plain"), SYSTEM_USER)
    await store.create(CLASSES, "", ingress_class("main", True), SYSTEM_USER)
    await synced(store)
    obj, _ = await store.create(
        INGRESSES, "team", {"metadata": {"name": "i1"}, "spec": {"defaultBackend": backend}}, ALICE
    )
    assert obj["spec"]["ingressClassName"] == "main"
    given = {"metadata": {"name": "i2"}, "spec": {"defaultBackend": backend, "ingressClassName": "plain"}}
    obj, _ = await store.create(INGRESSES, "team", given, ALICE)
    assert obj["spec"]["ingressClassName"] == "plain"
    legacy = {
        "metadata": {"name": "i3", "annotations": {names.ANNOTATION_INGRESS_CLASS: "plain"}},
        "spec": {"defaultBackend": backend},
    }
    obj, _ = await store.create(INGRESSES, "team", legacy, ALICE)
    assert "ingressClassName" not in obj["spec"]

    # Updates are left alone: removing the class keeps it removed.
    def drop(o):
        o["spec"].pop("ingressClassName", None)
        return o

    obj, _, _ = await store.update(INGRESSES, "team", "i1", drop, ALICE)
    assert "ingressClassName" not in obj["spec"]


# --- RuntimeClass -----------------------------------------------------------------------------


def pod(name: str = "p", **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


async def test_runtime_class_overhead_selector_and_tolerations(cluster):
    store, server = cluster
    use(store, server, "RuntimeClass")
    await store.create(
        RUNTIME_CLASSES,
        "",
        {
            "metadata": {"name": "gvisor"},
            "handler": "runsc",
            "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
            "scheduling": {
                "nodeSelector": {"sandbox": "gvisor"},
                "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        SYSTEM_USER,
    )
    await store.create(RUNTIME_CLASSES, "", {"metadata": {"name": "plain"}, "handler": "runc"}, SYSTEM_USER)
    obj, _ = await store.create(PODS, "team", pod(runtimeClassName="gvisor", nodeSelector={"disk": "ssd"}), ALICE)
    assert obj["spec"]["overhead"] == {"cpu": "250m", "memory": "64Mi"}
    assert obj["spec"]["nodeSelector"] == {"disk": "ssd", "sandbox": "gvisor"}
    assert {"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"} in obj["spec"]["tolerations"]
    # The same overhead written differently is the same overhead.
    same = pod("p2", runtimeClassName="gvisor", overhead={"cpu": "0.25", "memory": "64Mi"})
    await store.create(PODS, "team", same, ALICE)
    for bad, message in (
        (
            pod("p3", runtimeClassName="gvisor", overhead={"cpu": "1"}),
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
        (
            pod("p4", runtimeClassName="plain", overhead={"cpu": "1"}),
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        ),
        (
            pod("p5", overhead={"cpu": "1"}),
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        ),
        (pod("p6", runtimeClassName="missing"), 'pod rejected: RuntimeClass "missing" not found'),
        (
            pod("p7", runtimeClassName="gvisor", nodeSelector={"sandbox": "kata"}),
            "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = gvisor; pod.spec.nodeSelector[sandbox] = kata",
        ),
    ):
        with pytest.raises(st.ApiError) as exc:
            await store.create(PODS, "team", bad, ALICE)
        assert exc.value.code == 403
        assert exc.value.message == f'pods "{bad["metadata"]["name"]}" is forbidden: {message}'
    obj, _ = await store.create(PODS, "team", pod("p8", runtimeClassName="plain"), ALICE)
    assert "overhead" not in obj["spec"]


async def test_a_pod_is_prepared_again_only_after_a_plugin_changed_it(cluster, monkeypatch):
    """LimitRanger and RuntimeClass say when they changed a pod; only then does the store
    prepare and default it again (its QoS class follows the filled-in resources)."""
    store, server = cluster
    use(store, server, "LimitRanger", "RuntimeClass", "DefaultTolerationSeconds")
    again: list[str] = []
    real = Store._prepare_create_again

    def counted(kind, strategy, obj, user, subresource):
        again.append(obj["metadata"]["name"])
        real(kind, strategy, obj, user, subresource)

    monkeypatch.setattr(Store, "_prepare_create_again", staticmethod(counted))
    await store.create(RUNTIME_CLASSES, "", {"metadata": {"name": "plain"}, "handler": "runc"}, SYSTEM_USER)
    obj, _ = await store.create(PODS, "team", pod("untouched"), ALICE)
    assert again == [] and obj["status"]["qosClass"] == "BestEffort"
    await store.create(PODS, "team", pod("classed", runtimeClassName="plain"), ALICE)
    assert again == ["classed"]
    limits = {"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}}
    await store.create(LIMIT_RANGES, "team", {"metadata": {"name": "lr"}, "spec": {"limits": [limits]}}, ALICE)
    await synced(store)
    obj, _ = await store.create(PODS, "team", pod("defaulted"), ALICE)
    assert again == ["classed", "defaulted"]
    assert obj["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m"}
    assert obj["status"]["qosClass"] == "Burstable"


# --- StorageObjectInUseProtection ---------------------------------------------------------------


def claim(name: str = "data", size: str = "1Gi", sc: str | None = "fast") -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if sc is not None:
        spec["storageClassName"] = sc
    return {"metadata": {"name": name}, "spec": spec}


async def test_claims_and_volumes_get_their_protection_finalizer_once(cluster):
    store, server = cluster
    use(store, server, "StorageObjectInUseProtection")
    obj, _ = await store.create(PVCS, "team", claim(), ALICE)
    assert obj["metadata"]["finalizers"] == [names.FINALIZER_PVC_PROTECTION]
    again = claim("two")
    again["metadata"]["finalizers"] = ["example.com/keep", names.FINALIZER_PVC_PROTECTION]
    obj, _ = await store.create(PVCS, "team", again, ALICE)
    assert obj["metadata"]["finalizers"] == ["example.com/keep", names.FINALIZER_PVC_PROTECTION]
    pv = {
        "metadata": {"name": "pv1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/pv1"}},
    }
    obj, _ = await store.create(PVS, "", pv, SYSTEM_USER)
    assert obj["metadata"]["finalizers"] == [names.FINALIZER_PV_PROTECTION]
    # A config map is not a volume.
    obj, _ = await store.create(CONFIGMAPS, "team", {"metadata": {"name": "cm"}}, ALICE)
    assert "finalizers" not in obj["metadata"]


# --- PersistentVolumeClaimResize ----------------------------------------------------------------


async def test_new_nodes_get_the_not_ready_taint_once(cluster):
    store, server = cluster
    use(store, server, "TaintNodesByCondition")
    obj, _ = await store.create(NODES, "", {"metadata": {"name": "n1"}}, SYSTEM_USER)
    assert obj["spec"]["taints"] == [{"key": names.TAINT_NOT_READY, "effect": "NoSchedule"}]
    given = {
        "metadata": {"name": "n2"},
        "spec": {
            "taints": [
                {"key": names.TAINT_NOT_READY, "effect": "NoSchedule", "value": "x"},
                {"key": "a", "effect": "NoExecute"},
            ]
        },
    }
    obj, _ = await store.create(NODES, "", given, SYSTEM_USER)
    assert len(obj["spec"]["taints"]) == 2

    # Updates are not touched: the node lifecycle controller owns the taint from then on.
    def untaint(o):
        o["spec"]["taints"] = []
        return o

    obj, _, _ = await store.update(NODES, "", "n1", untaint, SYSTEM_USER)
    assert not obj["spec"].get("taints")


# --- EventRateLimit ---------------------------------------------------------------------------


def event(name: str, component: str = "kubelet", obj_name: str = "p") -> dict:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "namespace": "team", "name": obj_name, "apiVersion": "v1"},
        "source": {"component": component},
        "reason": "Started",
        "message": "m",
        "type": "Normal",
    }


def erl_config(limits: list) -> dict:
    return {"apiVersion": f"{names.EVENT_RATE_LIMIT_CONFIG_GROUP}/v1alpha1", "kind": "Configuration", "limits": limits}


def test_event_rate_limit_configuration():
    assert parse_configuration(erl_config([{"type": "Namespace", "qps": 1, "burst": 2}])) == [("Namespace", 1, 2, 4096)]
    assert parse_configuration(erl_config([{"type": "Server", "qps": 5, "burst": 10}])) == [("Server", 5, 10, 0)]
    for doc, message in (
        (None, "EventRateLimit needs a configuration"),
        (erl_config([]), "limits: Invalid value: []: must not be empty"),
        (
            erl_config([{"type": "Pod", "qps": 1, "burst": 1}]),
            'limits[0].type: Unsupported value: "Pod": supported values: "Server", "Namespace", "User", '
            '"SourceAndObject"',
        ),
        (
            erl_config([{"type": "User", "qps": 0, "burst": -1}]),
            "[limits[0].burst: Invalid value: -1: must be positive, limits[0].qps: Invalid value: 0: must be positive]",
        ),
        (
            erl_config([{"type": "User", "qps": 1, "burst": 1, "cacheSize": -3}]),
            "limits[0].cacheSize: Invalid value: -3: must not be negative",
        ),
        (erl_config([{"type": "User", "qps": 1, "burst": 1, "window": 3}]), "unknown field(s) window"),
        ({**erl_config([{"type": "User", "qps": 1, "burst": 1}]), "kind": "Other"}, "expected kind Configuration"),
    ):
        with pytest.raises(ValueError) as exc:
            parse_configuration(doc)
        assert message in str(exc.value)


async def test_event_rate_limit_refuses_bursts_with_429(cluster):
    store, server = cluster
    config = AdmissionConfig(
        "/etc/admission.yaml",
        {
            "EventRateLimit": PluginConfig(
                "EventRateLimit",
                erl_config([{"type": "Namespace", "qps": 1, "burst": 3}, {"type": "User", "qps": 1, "burst": 100}]),
                "/etc/admission.yaml",
            )
        },
    )
    use(store, server, "EventRateLimit", config=config)
    for i in range(3):
        await store.create(EVENTS, "team", event(f"e{i}"), ALICE)
    # A dry run neither counts nor is refused.
    await store.create(EVENTS, "team", event("dry"), ALICE, dry_run=True)
    with pytest.raises(st.ApiError) as exc:
        await store.create(EVENTS, "team", event("e3"), ALICE)
    assert exc.value.code == 429
    assert exc.value.reason == "TooManyRequests"
    assert exc.value.message == "Too many requests: limit reached on type Namespace for key team"
    assert "Retry-After" not in exc.value.headers
    # Other kinds are not limited.
    await store.create(CONFIGMAPS, "team", {"metadata": {"name": "cm"}}, ALICE)


async def test_event_rate_limit_buckets_refill_and_are_kept_per_key():
    now = [100.0]
    plugin = EventRateLimit([("SourceAndObject", 2, 1, 2), ("Server", 10, 100, 0)], clock=lambda: now[0])

    def attrs(obj: dict) -> Attributes:
        return Attributes("CREATE", EVENTS, "team", obj["metadata"]["name"], "", obj, None, ALICE, False)

    await plugin.validate(attrs(event("a", obj_name="x")))
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs(event("b", obj_name="x")))
    assert exc.value.message == "Too many requests: limit reached on type SourceAndObject for key kubeletPodteamxv1"
    await plugin.validate(attrs(event("c", obj_name="y")))  # another object: its own bucket
    now[0] += 0.5  # qps 2: one token back
    await plugin.validate(attrs(event("d", obj_name="x")))
    # cacheSize 2: a third key pushes out the least recently used one, which starts full again.
    await plugin.validate(attrs(event("e", obj_name="z")))
    await plugin.validate(attrs(event("f", obj_name="y")))


def test_event_rate_limit_without_configuration_is_a_start_up_error():
    server = SimpleNamespace(opts=SimpleNamespace(admission_config=AdmissionConfig()))
    with pytest.raises(AdmissionConfigError, match="EventRateLimit needs a configuration"):
        build_chain(server, ["EventRateLimit"])


# --- OwnerReferencesPermissionEnforcement -----------------------------------------------------


class Rules:
    """Allows exactly the (verb, group, resource, subresource, name) tuples given."""

    def __init__(self, *allowed):
        self.allowed = set(allowed)
        self.asked: list[AuthzAttributes] = []

    def authorize(self, a: AuthzAttributes):
        self.asked.append(a)
        key = (a.verb, a.api_group, a.resource, a.subresource, a.name)
        return (Decision.ALLOW, "") if key in self.allowed else (Decision.NO_OPINION, "")

    def rules_for(self, user, namespace):
        raise NotImplementedError


def owned(refs: list[dict]) -> dict:
    return {"metadata": {"name": "cm", "ownerReferences": refs}}


REF = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1"}


async def test_owner_reference_changes_need_delete_and_blocking_needs_finalizers():
    rules = Rules()
    plugin = OwnerReferencesPermissionEnforcement(lambda: Union([rules]), REGISTRY)

    def attrs(op, new, old=None):
        return Attributes(op, CONFIGMAPS, "team", "cm", "", new, old, ALICE, False)

    await plugin.validate(attrs("CREATE", owned([REF])))  # create: no delete needed
    await plugin.validate(attrs("UPDATE", owned([REF]), owned([REF])))  # unchanged
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs("UPDATE", owned([REF]), owned([])))
    assert exc.value.code == 403
    assert exc.value.message == (
        'configmaps "cm" is forbidden: cannot set an ownerRef on a resource you can\'t delete: , <nil>'
    )
    rules.allowed.add(("delete", "", "configmaps", "", "cm"))
    await plugin.validate(attrs("UPDATE", owned([REF]), owned([])))
    blocking = {**REF, "blockOwnerDeletion": True}
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs("CREATE", owned([blocking])))
    assert exc.value.message == (
        'configmaps "cm" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource '
        "you can't set finalizers on: , <nil>"
    )
    asked = rules.asked[-1]
    assert (asked.verb, asked.api_group, asked.resource, asked.subresource, asked.name, asked.namespace) == (
        "update",
        "apps",
        "deployments",
        "finalizers",
        "web",
        "team",
    )
    rules.allowed.add(("update", "apps", "deployments", "finalizers", "web"))
    await plugin.validate(attrs("CREATE", owned([blocking])))
    # Already blocking before: nothing new to check.
    rules.allowed.discard(("update", "apps", "deployments", "finalizers", "web"))
    await plugin.validate(attrs("UPDATE", owned([blocking, {**REF, "uid": "u2"}]), owned([blocking])))
    # Who may update every finalizer may block anything; unknown kinds cannot block.
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u3", "blockOwnerDeletion": True}
    with pytest.raises(st.ApiError) as exc:
        await plugin.validate(attrs("CREATE", owned([unknown])))
    assert "cannot find RESTMapping for APIVersion example.com/v1 Kind Widget" in exc.value.message
    rules.allowed.add(("update", "*", "*", "finalizers", "*"))
    await plugin.validate(attrs("CREATE", owned([unknown])))
    # pods/status writes are exempt.
    status_attrs = Attributes("UPDATE", PODS, "team", "p", "status", owned([REF]), owned([]), ALICE, False)
    await OwnerReferencesPermissionEnforcement(lambda: Union([Rules()]), REGISTRY).validate(status_attrs)


# --- PersistentVolumeLabel, ClusterTrustBundleAttest ------------------------------------------


def test_deprecated_and_unserved_plugins_are_accepted_and_say_so(caplog):
    server = SimpleNamespace(opts=SimpleNamespace())
    with caplog.at_level(logging.INFO, logger="orch-apiserver.admission"):
        chain = build_chain(server, ["PersistentVolumeLabel", "ClusterTrustBundleAttest"])
    assert [p.name for p in chain.plugins] == ["PersistentVolumeLabel", "ClusterTrustBundleAttest"]
    text = caplog.text
    assert "PersistentVolumeLabel is deprecated and does nothing" in text
    assert "does not serve ClusterTrustBundles" in text
    assert all(p.resources == frozenset() for p in chain.plugins)
