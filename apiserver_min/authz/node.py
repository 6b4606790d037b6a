"""The Node authorizer: what a node agent may read and write, by its pods.

A node agent authenticates as user ``system:node:<name>`` in group
``system:nodes``. It may read the secrets, config maps, volume claims (and their
volumes) and service accounts that pods bound to it reference, and nothing of
the same kinds beyond that; this keeps a compromised node from reading every
secret of the cluster. Everything else a node needs is a fixed rule set
(upstream's NodeRules, our ``system:node`` ClusterRole); writes that must be
limited to the node's own objects are checked again by the NodeRestriction
admission plugin, which sees the objects.

The reference graph is kept from the pod cache: each pod with ``spec.nodeName``
contributes counted edges node -> (kind, namespace, name). Requests the
authorizer has no rule for get no opinion, so RBAC may still allow them.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

import orjson

from ..api import names
from ..api.podrefs import CONFIGMAP, PVC, SECRET, SERVICEACCOUNT, pod_references
from ..api.user import UserInfo, node_identity
from ..storage.keys import key_prefix
from .authorizer import AuthzAttributes, Decision, PolicyRule, RulesResult
from .policy import node_rules
from .rbac import rules_allow

if TYPE_CHECKING:
    from ..storage.cacher import CacheEvent, Entry, ResourceCache, WatchCache

log = logging.getLogger("orch-apiserver.node-authorizer")


class NodeGraph:
    """Counted edges node -> (kind, namespace, name), from pods bound to nodes."""

    def __init__(self, pods_prefix: str, pvcs_prefix: str):
        self.pods_prefix = pods_prefix
        self.pvcs_prefix = pvcs_prefix
        self.edges: dict[str, collections.Counter] = {}
        self.pods: dict[str, tuple[str, tuple]] = {}  # pod cache key -> (node, edges it added)
        self.cache: WatchCache | None = None

    @classmethod
    def attach(cls, cache: WatchCache, registry) -> "NodeGraph":
        g = cls(
            key_prefix(registry.by_resource("", "v1", "pods")),
            key_prefix(registry.by_resource("", "v1", "persistentvolumeclaims")),
        )
        g.cache = cache
        cache.listeners.append(g.on_event)
        return g

    def on_event(self, cache: ResourceCache | None, ev: CacheEvent | None) -> None:
        if cache is None:  # the watch cache was (re)filled: rebuild from the pods in it
            self.edges.clear()
            self.pods.clear()
            c = self.cache.caches.get(self.pods_prefix) if self.cache is not None else None
            for e in c.items.values() if c is not None else ():
                self._add(e)
            return
        if ev is None or cache.prefix != self.pods_prefix:
            return
        self._remove(ev.entry.key)
        if ev.type != "DELETED":
            self._add(ev.entry)

    def _add(self, e: Entry) -> None:
        node = e.fields.get("spec.nodeName", "")
        if not node:
            return
        try:
            pod = orjson.loads(e.raw)
        except orjson.JSONDecodeError:
            return
        refs = pod_references(pod)
        edges = tuple((kind, e.namespace, n) for kind, ns_names in refs.items() for n in ns_names)
        counter = self.edges.setdefault(node, collections.Counter())
        counter.update(edges)
        self.pods[e.key] = (node, edges)

    def _remove(self, key: str) -> None:
        found = self.pods.pop(key, None)
        if found is None:
            return
        node, edges = found
        counter = self.edges.get(node)
        if counter is None:
            return
        counter.subtract(edges)
        for edge in edges:
            if counter[edge] <= 0:
                del counter[edge]
        if not counter:
            del self.edges[node]

    def has(self, node: str, kind: str, namespace: str, name: str) -> bool:
        c = self.edges.get(node)
        return c is not None and c.get((kind, namespace, name), 0) > 0

    def pv_reachable(self, node: str, pv_name: str) -> bool:
        """A persistent volume is reachable when a claim a pod of the node uses is bound to it."""
        c = self.edges.get(node)
        if not c or self.cache is None:
            return False
        pvcs = self.cache.caches.get(self.pvcs_prefix)
        if pvcs is None:
            return False
        for (kind, ns, name), n in c.items():
            if kind != PVC or n <= 0:
                continue
            e = pvcs.items.get(f"{self.pvcs_prefix}{ns}/{name}")
            if e is None:
                continue
            try:
                if (orjson.loads(e.raw).get("spec") or {}).get("volumeName") == pv_name:
                    return True
            except orjson.JSONDecodeError:
                continue
        return False


class NodeAuthorizer:
    name = "Node"

    def __init__(self, graph: NodeGraph, rules: tuple[PolicyRule, ...] | None = None):
        self.graph = graph
        self.rules = rules if rules is not None else node_rules()

    @classmethod
    def from_cache(cls, cache, registry) -> "NodeAuthorizer":
        return cls(NodeGraph.attach(cache, registry))

    def authorize(self, attrs: AuthzAttributes) -> tuple[Decision, str]:
        node, is_node = node_identity(attrs.user)
        if not is_node:
            return Decision.NO_OPINION, ""
        if not node:
            return Decision.NO_OPINION, f'unknown node for user "{attrs.user.name}"'
        if attrs.resource_request:
            g, r = attrs.api_group, attrs.resource
            if g == "" and r in ("secrets", "configmaps"):
                return self._read_referenced(node, SECRET if r == "secrets" else CONFIGMAP, attrs)
            if g == "" and r == "persistentvolumeclaims":
                return self._pvc(node, attrs)
            if g == "" and r == "persistentvolumes":
                if attrs.verb != "get" or attrs.subresource:
                    return Decision.NO_OPINION, "can only get individual resources of this type"
                if attrs.name and self.graph.pv_reachable(node, attrs.name):
                    return Decision.ALLOW, ""
                return Decision.NO_OPINION, self._no_relationship(node)
            if g == "" and r == "serviceaccounts":
                return self._create_token(node, attrs)
            if g == names.COORDINATION_GROUP and r == "leases":
                return self._lease(node, attrs)
            if g == "" and r == "nodes":
                return self._node_object(node, attrs)
        if rules_allow(attrs, self.rules):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, ""

    @staticmethod
    def _no_relationship(node: str) -> str:
        return f"no relationship found between node '{node}' and this object"

    def _read_referenced(self, node: str, kind: str, attrs: AuthzAttributes) -> tuple[Decision, str]:
        if attrs.verb not in ("get", "list", "watch"):
            return Decision.NO_OPINION, "can only read resources of this type"
        if attrs.subresource:
            return Decision.NO_OPINION, "cannot read subresource"
        if not attrs.namespace:
            return Decision.NO_OPINION, "can only read namespaced object of this type"
        if not attrs.name:
            return Decision.NO_OPINION, "No Object name found"
        if self.graph.has(node, kind, attrs.namespace, attrs.name):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, self._no_relationship(node)

    def _pvc(self, node: str, attrs: AuthzAttributes) -> tuple[Decision, str]:
        if attrs.subresource == "status":
            if attrs.verb not in ("update", "patch"):
                return Decision.NO_OPINION, "can only get or update persistentvolumeclaim status"
        elif attrs.subresource or attrs.verb != "get":
            return Decision.NO_OPINION, "can only get individual resources of this type"
        if attrs.name and attrs.namespace and self.graph.has(node, PVC, attrs.namespace, attrs.name):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, self._no_relationship(node)

    def _create_token(self, node: str, attrs: AuthzAttributes) -> tuple[Decision, str]:
        if attrs.verb != "create" or not attrs.name:
            return Decision.NO_OPINION, "can only create tokens for individual service accounts"
        if attrs.subresource != "token":
            return Decision.NO_OPINION, "can only create token subresource of serviceaccount"
        if self.graph.has(node, SERVICEACCOUNT, attrs.namespace, attrs.name):
            return Decision.ALLOW, ""
        return Decision.NO_OPINION, self._no_relationship(node)

    @staticmethod
    def _lease(node: str, attrs: AuthzAttributes) -> tuple[Decision, str]:
        if attrs.verb not in ("get", "create", "update", "patch", "delete"):
            return Decision.NO_OPINION, "can only get, create, update, patch, or delete a node lease"
        if attrs.namespace != names.NS_NODE_LEASE:
            return Decision.NO_OPINION, f'can only access leases in the "{names.NS_NODE_LEASE}" system namespace'
        # The name is unknown on create; NodeRestriction checks the object then.
        if attrs.verb != "create" and attrs.name != node:
            return Decision.NO_OPINION, "can only access node lease with the same name as the requesting node"
        return Decision.ALLOW, ""

    @staticmethod
    def _node_object(node: str, attrs: AuthzAttributes) -> tuple[Decision, str]:
        verb, sub = attrs.verb, attrs.subresource
        if verb in ("get", "list", "watch") and sub in ("", "status"):
            return Decision.ALLOW, ""
        if verb == "create" and not sub:
            return Decision.ALLOW, ""  # the name is in the body: NodeRestriction checks it
        if verb in ("update", "patch") and sub in ("", "status"):
            if attrs.name == node:
                return Decision.ALLOW, ""
            return Decision.NO_OPINION, f"node '{node}' can only modify its own Node object"
        return Decision.NO_OPINION, ""

    def rules_for(self, user: UserInfo, namespace: str) -> RulesResult:
        if node_identity(user)[1]:
            return RulesResult(incomplete=True, errors=["node authorizer does not support user rule resolution"])
        return RulesResult()
