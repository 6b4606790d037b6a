"""The scheduler's volume binding (upstream's VolumeBinding plugin): pods and their claims.

Before any node is tried (pre-filter), every claim a pod uses must exist, not be
terminating, and be bound unless its class binds on first consumer
(``WaitForFirstConsumer``): otherwise the pod waits with upstream's message
(``persistentvolumeclaim "x" not found``, ``pod has unbound immediate
PersistentVolumeClaims``), which no node can change.

Per node (filter): a bound claim's volume must allow the node (its ``nodeAffinity``:
local volumes pin pods to their node); an unbound claim must find a fitting
``Available`` volume the node may use, or have a class whose provisioner can make
one there. A node that fails says so in upstream's words.

When a node is chosen (pre-bind), each unbound claim is settled before the pod's
Binding: the chosen static volume is bound to it (``spec.claimRef``, marked
``bound-by-controller``; the binder completes the claim's side), or the claim gets
``volume.orch.io/selected-node`` so its provisioner makes a volume on that node.
The scheduler then waits, holding the pod's place on the node, until those claims are
bound (:meth:`VolumeBinding.binding_problem`), and only then binds the pod, as upstream:
the node agent sees the pod once its volumes are there. A claim that disappears or is
given another node, or ten minutes without binding, sends the pod back to the queue.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Mapping

from ..api import names
from ..api import persistentvolumes as pvs
from ..api.helpers import dict_at
from ..client.informer import InformerFactory
from ..client.interface import Client

REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
REASON_PV_NOT_FOUND = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

# affinity(volume_node_affinity_required, node) -> whether the node satisfies it
AffinityCheck = Callable[[Mapping, Mapping], bool]


@dataclasses.dataclass
class PodClaims:
    """A pod's claims as the pre-filter found them."""

    bound: list[dict]
    to_bind: list[dict]  # unbound, of WaitForFirstConsumer classes


@dataclasses.dataclass
class Decision:
    """What pre-bind writes for one pod on one node."""

    static: list[tuple[dict, dict]]  # (volume, claim)
    provision: list[dict]  # claims to annotate with the node
    # The resource versions pre-bind wrote, by claim (namespace, name): an older copy in
    # the informer has not seen the write yet.
    written: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)


class VolumeBinding:
    def __init__(self, informers: InformerFactory, affinity: AffinityCheck):
        self.pv_kind = informers.kind("", "v1", "persistentvolumes")
        self.pvc_kind = informers.kind("", "v1", "persistentvolumeclaims")
        self.volumes = informers.for_kind(self.pv_kind)
        self.claims = informers.for_kind(self.pvc_kind)
        self.classes = informers.for_resource(names.STORAGE_GROUP, "v1", "storageclasses")
        self.affinity = affinity

    def handlers(self, on_change: Callable) -> None:
        """Call ``on_change`` (with the informer's event) when claims, volumes or classes change."""
        for inf in (self.volumes, self.claims, self.classes):
            inf.add_handler(on_change)

    def _class(self, name: str) -> dict | None:
        e = self.classes.get("", name) if name else None
        return e.object() if e is not None else None

    def pre_filter(self, pod: Mapping) -> tuple[PodClaims | None, str]:
        """(the pod's claims, "") or (None, why no node can take the pod)."""
        ns = str(dict_at(pod, "metadata").get("namespace") or "")
        bound: list[dict] = []
        to_bind: list[dict] = []
        immediate_unbound = False
        ephemeral = pvs.ephemeral_claim_names(pod)
        pod_uid = str(dict_at(pod, "metadata").get("uid") or "")
        for name in pvs.pod_claim_names(pod):
            e = self.claims.get(ns, name)
            if e is None:
                return None, f'persistentvolumeclaim "{name}" not found'
            claim = e.object()
            if name in ephemeral and not pvs.claim_controlled_by(claim, pod_uid):
                pod_name = dict_at(pod, "metadata").get("name") or ""
                return (
                    None,
                    f'persistentvolumeclaim "{name}" was not created for pod "{ns}/{pod_name}" (pod is not owner)',
                )

            if pvs.being_deleted(claim):
                return None, f'persistentvolumeclaim "{name}" is being deleted'
            if dict_at(claim, "spec").get("volumeName"):
                bound.append(claim)
            elif pvs.class_binding_mode(self._class(pvs.claim_class(claim))) == pvs.VOLUME_BINDING_WAIT:
                to_bind.append(claim)
            else:
                immediate_unbound = True
        if immediate_unbound:
            return None, UNBOUND_IMMEDIATE
        return PodClaims(bound, to_bind), ""

    def _volume_allows(self, volume: Mapping, node: Mapping) -> bool:
        required = dict_at(dict_at(dict_at(volume, "spec"), "nodeAffinity"), "required")
        if not required:
            return True
        return self.affinity(required, node)

    def filter(self, claims: PodClaims, node: Mapping) -> tuple[tuple[str, ...], Decision | None]:
        """(reasons the node fails, None) or ((), what pre-bind would write there)."""
        reasons: list[str] = []
        for claim in claims.bound:
            e = self.volumes.get("", str(dict_at(claim, "spec").get("volumeName")))
            if e is None:
                return (REASON_PV_NOT_FOUND,), None
            if not self._volume_allows(e.object(), node) and REASON_NODE_CONFLICT not in reasons:
                reasons.append(REASON_NODE_CONFLICT)
        decision = Decision([], [])
        if claims.to_bind:
            all_volumes = [e.object() for e in self.volumes.list()]
            chosen: set[str] = set()
            for claim in claims.to_bind:
                volume = pvs.find_matching_volume(
                    claim,
                    all_volumes,
                    node_ok=lambda v: self._volume_allows(v, node),
                    excluded=frozenset(chosen),
                )
                if volume is not None:
                    chosen.add(str(dict_at(volume, "metadata").get("name")))
                    decision.static.append((volume, claim))
                    continue
                storage_class = self._class(pvs.claim_class(claim))
                provisioner = str((storage_class or {}).get("provisioner") or "")
                if not provisioner or provisioner == names.NO_PROVISIONER:
                    if REASON_BIND_CONFLICT not in reasons:
                        reasons.append(REASON_BIND_CONFLICT)
                    continue
                allowed = (storage_class or {}).get("allowedTopologies")
                if allowed and not self.affinity({"nodeSelectorTerms": _topology_terms(allowed)}, node):
                    if REASON_NODE_CONFLICT not in reasons:
                        reasons.append(REASON_NODE_CONFLICT)
                    continue
                decision.provision.append(claim)
        if reasons:
            return tuple(sorted(reasons)), None
        return (), decision

    async def pre_bind(self, client: Client, decision: Decision, node_name: str) -> None:
        """Write the decision: static volumes bound to their claims, the node on claims to provision."""
        for volume, claim in decision.static:
            new = copy.deepcopy(volume)
            new.setdefault("metadata", {}).setdefault("annotations", {})[names.ANNOTATION_BOUND_BY_CONTROLLER] = (
                pvs.ANNOTATION_YES
            )
            new.setdefault("spec", {})["claimRef"] = pvs.claim_ref(claim)
            await client.update(self.pv_kind, "", str(dict_at(volume, "metadata").get("name")), new)
        for claim in decision.provision:
            new = copy.deepcopy(claim)
            new.setdefault("metadata", {}).setdefault("annotations", {})[names.ANNOTATION_SELECTED_NODE] = node_name
            md = dict_at(claim, "metadata")
            ns, name = str(md.get("namespace") or ""), str(md.get("name") or "")
            out = await client.update(self.pvc_kind, ns, name, new)
            decision.written[(ns, name)] = int(dict_at(out, "metadata").get("resourceVersion") or 0)

    def binding_problem(self, decision: Decision, node_name: str) -> str | None:
        """None when every claim of the decision is bound; "" while binding goes on;
        otherwise why it cannot succeed."""
        claims = [claim for _volume, claim in decision.static] + list(decision.provision)
        for claim in claims:
            md = dict_at(claim, "metadata")
            ns, name = str(md.get("namespace") or ""), str(md.get("name") or "")
            e = self.claims.get(ns, name)
            if e is None or e.uid != md.get("uid"):
                return f'persistentvolumeclaim "{name}" not found'
            if e.rv < decision.written.get((ns, name), 0):
                return ""  # the informer has not seen the node written on it yet
            current = e.object()
            if claim in decision.provision and pvs.annotations_of(current).get(names.ANNOTATION_SELECTED_NODE) != (
                node_name
            ):
                if not dict_at(current, "spec").get("volumeName"):
                    return f'selectedNode annotation reset for PVC "{name}"'
            volume_name = dict_at(current, "spec").get("volumeName")
            # Fully bound, status too: the node agent mounts only claims whose phase is Bound.
            if (
                not volume_name
                or not pvs.annotations_of(current).get(names.ANNOTATION_BIND_COMPLETED)
                or dict_at(current, "status").get("phase") != pvs.CLAIM_BOUND
            ):
                return ""
            volume = self.volumes.get("", str(volume_name))
            if volume is None or not pvs.bound_to_claim(volume.object(), current):
                return ""
        return None


def _topology_terms(allowed: list) -> list[dict]:
    """A class's ``allowedTopologies`` (label requirements) as node selector terms."""
    terms = []
    for term in allowed:
        exprs = [
            {"key": e.get("key", ""), "operator": "In", "values": list(e.get("values") or [])}
            for e in (term or {}).get("matchLabelExpressions") or []
            if isinstance(e, dict)
        ]
        terms.append({"matchExpressions": exprs})
    return terms
