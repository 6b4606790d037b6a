"""The generic store runs a write in upstream's order: mutating admission, then the
strategy (prepare, defaults, validation), then validating admission, then storage.

So what a mutating plugin adds is defaulted and validated like the client's own
fields (an invalid addition is a 422, not a stored object), the strategy's
preparation applies to it (status reset, QoS class), and validating plugins see
the final object. The chain keeps its per-kind plans for both phases."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from apiserver_min.admission.chain import Attributes, Chain
from apiserver_min.admission.plugins import build_chain
from apiserver_min.admission.plugins.defaulttolerationseconds import DefaultTolerationSeconds
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.registry.store import Store
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

PODS = REGISTRY.by_resource("", "v1", "pods")
CONFIGMAPS = REGISTRY.by_resource("", "v1", "configmaps")


class Mutator:
    """A mutating plugin running ``change(obj, attrs)`` on the writes it handles."""

    name = "TestMutator"

    def __init__(self, change, resources=None, operations=None, complete=None):
        self.change = change
        self.resources = resources
        self.operations = operations
        self.complete = complete
        self.calls = 0

    async def admit(self, attrs: Attributes) -> None:
        self.calls += 1
        self.change(attrs.obj, attrs)

    async def validate(self, attrs: Attributes) -> None:
        return None


class Recorder:
    """A validating plugin that keeps a copy of each object it is shown."""

    name = "TestRecorder"

    def __init__(self):
        self.seen: list[dict] = []

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        self.seen.append(copy.deepcopy(attrs.obj))


@pytest.fixture
async def make_store(tmp_path):
    backends = []

    async def make(*plugins):
        backend = SqliteBackend(str(tmp_path / f"state{len(backends)}.db"), compaction_interval=0)
        await backend.start()
        backends.append(backend)
        cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
        return Store(backend, REGISTRY, cache, Chain(list(plugins)))

    yield make
    for b in backends:
        await b.close()


def pod(name: str = "p", **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def bad_label(obj: dict, attrs: Attributes) -> None:
    obj["metadata"].setdefault("labels", {})["team"] = "has spaces"


def causes_of(exc: st.ApiError) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in exc.details["causes"]]


async def test_a_mutating_plugins_invalid_label_is_a_422_on_create(make_store):
    store = await make_store(Mutator(bad_label))
    with pytest.raises(st.ApiError) as info:
        await store.create(CONFIGMAPS, "default", {"metadata": {"name": "cm"}, "data": {"a": "b"}}, SYSTEM_USER)
    exc = info.value
    assert (exc.code, exc.reason) == (422, "Invalid")
    assert causes_of(exc) == [("metadata.labels", "FieldValueInvalid")]
    assert 'metadata.labels: Invalid value: "has spaces"' in exc.message
    with pytest.raises(st.ApiError) as missing:
        await store.get(CONFIGMAPS, "default", "cm")
    assert missing.value.code == 404  # nothing was stored


async def test_a_mutating_plugins_invalid_toleration_is_a_422_for_pods(make_store):
    def bad_toleration(obj, attrs):
        obj["spec"].setdefault("tolerations", []).append({"key": "k", "operator": "Sometimes", "effect": "NoExecute"})

    store = await make_store(Mutator(bad_toleration, resources=frozenset({("", "pods")})))
    with pytest.raises(st.ApiError) as info:
        await store.create(PODS, "default", pod(), SYSTEM_USER)
    assert info.value.code == 422
    assert ("spec.tolerations[0].operator", "FieldValueNotSupported") in causes_of(info.value)


async def test_a_mutating_plugins_invalid_change_is_a_422_on_update(make_store):
    store = await make_store()
    await store.create(CONFIGMAPS, "default", {"metadata": {"name": "cm"}, "data": {"a": "b"}}, SYSTEM_USER)
    store.admission.plugins.append(Mutator(bad_label, operations=frozenset({"UPDATE"})))

    def change(obj):
        obj["data"] = {"a": "c"}
        return obj

    with pytest.raises(st.ApiError) as info:
        await store.update(CONFIGMAPS, "default", "cm", change, SYSTEM_USER)
    assert info.value.code == 422
    assert causes_of(info.value) == [("metadata.labels", "FieldValueInvalid")]
    stored = await store.get_object(CONFIGMAPS, "default", "cm")
    assert stored["data"] == {"a": "b"} and "labels" not in stored["metadata"]


async def test_what_a_mutating_plugin_adds_gets_its_defaults(make_store):
    def add_volume(obj, attrs):
        obj["spec"]["volumes"] = [{"name": "extra", "secret": {"secretName": "s"}}]
        obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]

    store = await make_store(Mutator(add_volume))
    created, _ = await store.create(PODS, "default", pod(), SYSTEM_USER)
    assert created["spec"]["volumes"] == [{"name": "extra", "secret": {"secretName": "s", "defaultMode": 0o644}}]
    assert created["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    stored = await store.get_object(PODS, "default", "p")
    assert stored["spec"]["volumes"][0]["secret"]["defaultMode"] == 0o644


async def test_the_strategy_prepares_what_mutating_plugins_produced(make_store):
    def mutate(obj, attrs):
        obj["status"] = {"phase": "Running"}  # plugins may not set a new object's status
        obj["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}

    store = await make_store(Mutator(mutate))
    created, _ = await store.create(PODS, "default", pod(), SYSTEM_USER)
    assert created["status"]["phase"] == "Pending"
    # The QoS class is worked out from the resources the plugin set (requests default to limits).
    assert created["status"]["qosClass"] == "Guaranteed"
    assert created["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]


async def test_status_updates_keep_the_spec_a_mutating_plugin_changed(make_store):
    store = await make_store()
    await store.create(PODS, "default", pod(), SYSTEM_USER)

    def touch_spec(obj, attrs):
        obj["spec"]["activeDeadlineSeconds"] = 5  # a status write may not change the spec

    store.admission.plugins.append(Mutator(touch_spec, operations=frozenset({"UPDATE"})))

    def set_status(obj):
        obj["status"]["phase"] = "Running"
        return obj

    updated, _, _ = await store.update(PODS, "default", "p", set_status, SYSTEM_USER, subresource="status")
    assert updated["status"]["phase"] == "Running"
    assert "activeDeadlineSeconds" not in updated["spec"]


async def test_validating_plugins_see_the_prepared_defaulted_mutated_object(make_store):
    recorder = Recorder()
    store = await make_store(
        Mutator(lambda obj, attrs: obj["metadata"].setdefault("labels", {}).update(by="plugin")), recorder
    )
    created, _ = await store.create(PODS, "default", pod(), SYSTEM_USER)
    (seen,) = recorder.seen
    assert seen["metadata"]["labels"] == {"by": "plugin"}
    assert seen["spec"]["restartPolicy"] == "Always" and seen["status"]["phase"] == "Pending"
    assert seen["metadata"]["uid"] == created["metadata"]["uid"]


async def test_validating_plugins_do_not_run_for_invalid_objects(make_store):
    recorder = Recorder()
    store = await make_store(Mutator(bad_label), recorder)
    with pytest.raises(st.ApiError):
        await store.create(CONFIGMAPS, "default", {"metadata": {"name": "cm"}}, SYSTEM_USER)
    assert recorder.seen == []


async def test_managed_fields_are_the_writers_not_the_plugins(make_store):
    def add_label(obj, attrs):
        obj["metadata"].setdefault("labels", {})["added"] = "by-plugin"

    store = await make_store(Mutator(add_label))
    created, _ = await store.create(
        CONFIGMAPS, "default", {"metadata": {"name": "cm"}, "data": {"a": "b"}}, SYSTEM_USER, field_manager="writer"
    )
    assert created["metadata"]["labels"] == {"added": "by-plugin"}
    (entry,) = created["metadata"]["managedFields"]
    assert entry["manager"] == "writer" and entry["fieldsV1"] == {"f:data": {".": {}, "f:a": {}}}


async def test_default_toleration_seconds_additions_are_stored_after_validation(make_store):
    recorder = Recorder()
    store = await make_store(DefaultTolerationSeconds(300, 60), recorder)
    created, _ = await store.create(PODS, "default", pod(), SYSTEM_USER)
    assert [(t["key"], t["tolerationSeconds"]) for t in created["spec"]["tolerations"]] == [
        ("node.orch.io/not-ready", 300),
        ("node.orch.io/unreachable", 60),
    ]
    assert recorder.seen[0]["spec"]["tolerations"] == created["spec"]["tolerations"]
    # A plugin declared complete (no second preparation) is validated all the same.
    store.admission.plugins[:] = [Mutator(bad_label, complete=True)]
    with pytest.raises(st.ApiError) as info:
        await store.create(PODS, "default", pod("q"), SYSTEM_USER)
    assert causes_of(info.value) == [("metadata.labels", "FieldValueInvalid")]


async def test_chain_runs_each_phase_alone_and_caches_plans_per_kind():
    calls = []

    class Both:
        name = "Both"
        resources = frozenset({("", "pods")})
        operations = frozenset({"CREATE"})

        async def admit(self, attrs):
            calls.append(("admit", attrs.operation))

        async def validate(self, attrs):
            calls.append(("validate", attrs.operation))

    chain = Chain([Both()])
    create = Attributes("CREATE", PODS, "default", "p", "", {}, None, SYSTEM_USER, False)
    update = Attributes("UPDATE", PODS, "default", "p", "", {}, {}, SYSTEM_USER, False)
    other = Attributes("CREATE", CONFIGMAPS, "default", "c", "", {}, None, SYSTEM_USER, False)
    assert await chain.admit(create) is True
    assert calls == [("admit", "CREATE")]
    assert await chain.admit(update) is False  # its mutating phase handles CREATE only
    assert await chain.admit(other) is False  # not its resource
    await chain.validate(update)
    assert calls == [("admit", "CREATE"), ("validate", "UPDATE")]
    await chain.run(create)
    assert calls[-2:] == [("admit", "CREATE"), ("validate", "CREATE")]
    plans = dict(chain._plans)
    await chain.admit(create)
    assert chain._plans == plans  # reused, not rebuilt
    chain.plugins.append(Mutator(lambda obj, attrs: None))
    assert await chain.admit(update) is True  # a changed plugin list is seen at once


async def test_configured_pod_mutators_leave_other_writes_alone():
    server = SimpleNamespace(opts=SimpleNamespace(), store=None, registry=REGISTRY, cache=None)
    chain = build_chain(server, ("ServiceAccount", "DefaultTolerationSeconds"))
    assert [p.name for p in chain.plugins] == ["ServiceAccount", "DefaultTolerationSeconds"]
    for plugin in chain.plugins:
        assert (plugin.resources, plugin.operations) == (frozenset({("", "pods")}), frozenset({"CREATE"}))
        assert plugin.complete is True  # what they add needs no second preparation
    # So a configmap create, or a pod update, has no mutating phase (and is prepared once).
    assert (
        await chain.admit(Attributes("CREATE", CONFIGMAPS, "default", "c", "", {}, None, SYSTEM_USER, False)) is False
    )
    assert await chain.admit(Attributes("UPDATE", PODS, "default", "p", "status", {}, {}, SYSTEM_USER, False)) is False


async def test_a_nameless_object_is_still_a_422(make_store):
    recorder = Recorder()
    store = await make_store(Mutator(lambda obj, attrs: None), recorder)
    for metadata in ({}, {"name": 5}):
        with pytest.raises(st.ApiError) as info:
            await store.create(CONFIGMAPS, "default", {"metadata": metadata}, SYSTEM_USER)
        assert info.value.code == 422 and causes_of(info.value)[0][0] == "metadata.name"
    assert recorder.seen == []


async def test_a_status_write_keeps_its_managed_fields_after_a_mutating_plugin(make_store):
    store = await make_store()
    await store.create(PODS, "default", pod(), SYSTEM_USER, field_manager="creator")
    store.admission.plugins.append(Mutator(lambda obj, attrs: None, operations=frozenset({"UPDATE"})))

    def set_phase(obj):
        obj["status"] = {"phase": "Running"}
        return obj

    new, _, _ = await store.update(
        PODS, "default", "p", set_phase, SYSTEM_USER, subresource="status", field_manager="agent"
    )
    entries = {(m["manager"], m.get("subresource", "")) for m in new["metadata"]["managedFields"]}
    assert ("agent", "status") in entries and ("creator", "") in entries
    assert new["status"]["phase"] == "Running"
