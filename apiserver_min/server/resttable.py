"""This server's REST objects: the kind families' (``registry.families``) plus those
that need more than the store: the token signer, the node agent proxies, the
authorizer and the authenticator (the reviews)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..api import names
from ..authz.authorizer import Union
from ..registry.autoscaling_v1 import HorizontalPodAutoscalerV1REST
from ..registry.core import ServiceAccountTokenREST
from ..registry.families import rest_implementations
from ..registry.rest import RestTable
from . import reviews
from .podexec import PodStreamREST
from .podlogs import PodLogREST
from .proxy import ProxyREST
from .resourcemetrics import NodeMetricsREST, PodMetricsREST, ResourceMetrics

if TYPE_CHECKING:
    from .context import ServerContext


def build_rest_table(
    server: "ServerContext",
    authorizer: Callable[[], Union],
    resource_metrics: ResourceMetrics,
) -> RestTable:
    opts = server.opts
    impls = dict(rest_implementations(server.store))
    impls["serviceaccounts/token"] = lambda kind, sub: ServiceAccountTokenREST(
        server.store, kind, server.authn.issuer, opts.api_audiences, opts.service_account_max_token_expiration
    )
    impls["pods/log"] = lambda kind, sub: PodLogREST(server, kind)
    impls["pods/stream"] = lambda kind, sub: PodStreamREST(server, kind)
    impls["proxy"] = lambda kind, sub: ProxyREST(server, kind)
    table = RestTable.from_declarations(server.registry, impls)
    reviews.install(table, authorizer, server.authn)
    # The resource metrics API: read-only collections answered from the agents' scrapes.
    table.add_collection(names.METRICS_GROUP, "nodes", NodeMetricsREST(resource_metrics))
    table.add_collection(names.METRICS_GROUP, "pods", PodMetricsREST(resource_metrics))
    # autoscaling/v1 autoscalers: create, get and list converted from the stored v2 objects.
    stored_hpa = server.registry.by_resource(names.AUTOSCALING_GROUP, "v2", "horizontalpodautoscalers")
    assert stored_hpa is not None
    table.add_collection(
        names.AUTOSCALING_GROUP,
        "horizontalpodautoscalers",
        HorizontalPodAutoscalerV1REST(server.store, stored_hpa),
        version="v1",
    )
    return table
