"""REST objects registered by the kinds' declarations (registry/rest.py, families.py)."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY, KindInfo, Registry, Subresource
from apiserver_min.api.user import UserInfo
from apiserver_min.registry.core import PodStrategy
from apiserver_min.registry.families import rest_implementations, strategy_for
from apiserver_min.registry.rest import (
    Connecter,
    Creater,
    Getter,
    Patcher,
    RequestContext,
    RestTable,
    StoreSubresource,
    Updater,
)
from apiserver_min.registry.scale import ScaleREST

USER = UserInfo("alice")
SERVER_SIDE = ("serviceaccounts/token", "pods/log", "pods/stream", "proxy")  # provided by the server


class Stub:
    async def create(self, ctx, obj):
        return 201, obj

    async def connect(self, ctx, request):
        return None


def table() -> RestTable:
    impls = dict(rest_implementations(store=None))  # type: ignore[arg-type]
    for name in SERVER_SIDE:
        impls[name] = lambda kind, sub: Stub()
    return RestTable.from_declarations(REGISTRY, impls)


def test_every_declared_subresource_has_a_rest_object_serving_its_verbs():
    t = table()
    for kind in REGISTRY.kinds:
        for sub in kind.subresources:
            rest = t.subresource(kind, sub.name)
            assert rest is not None, f"{kind.resource}/{sub.name}"
            if isinstance(rest, (StoreSubresource, Connecter)):
                continue
            wants = {"create": Creater, "get": Getter, "update": Updater, "patch": Patcher}
            for verb in sub.verbs:
                assert isinstance(rest, wants[verb]), f"{kind.resource}/{sub.name} does not serve {verb}"


def test_a_declaration_naming_no_implementation_fails_at_start():
    kind = KindInfo(
        "", "v1", "widgets", "Widget", True, subresources=(Subresource("spin", "Widget", ("get",), rest="x"),)
    )
    with pytest.raises(LookupError, match="widgets/spin names the REST implementation 'x'"):
        RestTable.from_declarations(Registry([kind]), {})


def test_strategies_come_from_their_family():
    assert isinstance(strategy_for(REGISTRY.by_resource("", "v1", "pods")), PodStrategy)


class OneObjectStore:
    def __init__(self, obj: dict):
        self.obj = obj
        self.writes: list[dict] = []

    async def get_object(self, kind, namespace, name):
        return copy.deepcopy(self.obj)

    async def update(self, kind, namespace, name, compute, user, **kw):
        new = compute(copy.deepcopy(self.obj))
        self.writes.append(kw)
        self.obj = new
        return new, b"", False


async def test_scale_reads_and_writes_only_replicas():
    deploy = REGISTRY.by_resource("apps", "v1", "deployments")
    store = OneObjectStore(
        {
            "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}}},
            "status": {"replicas": 1},
        }
    )
    rest = ScaleREST(store, deploy)  # type: ignore[arg-type]
    ctx = RequestContext(USER, deploy, "get", "ns", "d", "scale", field_manager="m")
    scale = await rest.get(ctx)
    assert scale["spec"] == {"replicas": 1} and scale["status"] == {"replicas": 1, "selector": "app=d"}
    code, out = await rest.patch(dataclasses.replace(ctx, verb="patch"), lambda cur: {**cur, "spec": {"replicas": 3}})
    assert code == 200 and out["spec"] == {"replicas": 3}
    assert store.obj["spec"]["replicas"] == 3 and store.writes == [{"dry_run": False, "field_manager": "m"}]
    with pytest.raises(st.ApiError) as err:
        await rest.update(dataclasses.replace(ctx, verb="update"), {"spec": {"replicas": -1}})
    assert err.value.code == 422
