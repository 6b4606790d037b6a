"""The NodeRestriction admission plugin: a node agent may change only what is its own.

Applies to users ``system:node:<name>`` in group ``system:nodes`` (others pass).
Such a node may:

- create, update and patch only its own Node object, never delete it, never
  change its taints, and set only the agent labels (the fixed keys and the
  ``names.NODE_AGENT_LABEL_PREFIXES``) in our domain; never labels
  under ``node-restriction.orch.io/`` (those steer privileged workloads);
- create only mirror pods: annotated as mirrors, bound to itself, owned by its
  own Node object, and referencing no secret, config map, claim or service
  account; delete (and evict) only pods bound to itself; update the status of
  only pods bound to itself, without touching labels;
- create, update and delete only its own Lease in ``orch-node-lease``;
- create signing requests only for its own identity (CN ``system:node:<name>``,
  O ``system:nodes``) - a restriction upstream leaves to the approver;
- request service account tokens only bound to pods bound to itself;
- update only the status capacity and conditions of volume claims.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...api import names
from ...api import status as st
from ...api.podrefs import CONFIGMAP, PVC, SECRET, pod_references
from ...api.user import node_identity
from ..chain import Attributes
from .certificates import CsrParseError, parse_csr_request

if TYPE_CHECKING:
    from ...registry.store import Store


def _forbidden(attrs: Attributes, message: str) -> st.ApiError:
    k = attrs.kind
    name = attrs.name or ((attrs.obj or {}).get("metadata") or {}).get("name", "")
    return st.forbidden(k.resource, name, k.group, message)


def label_namespace(key: str) -> str:
    return key.split("/", 1)[0] if "/" in key else ""


def _in_domain(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def forbidden_labels(modified: set[str]) -> list[str]:
    """Labels a node may not set or change: the node-restriction namespace, and keys in
    our domain that are not agent labels (labels of other domains stay the operator's
    business, as upstream)."""
    out = []
    restriction = names.NODE_RESTRICTION_LABEL_PREFIX.rstrip("/")
    for key in modified:
        ns = label_namespace(key)
        if _in_domain(ns, restriction):
            out.append(key)
            continue
        if not _in_domain(ns, names.DOMAIN):
            continue
        if key in names.NODE_AGENT_ALLOWED_LABELS:
            continue
        if any(key.startswith(p) for p in names.NODE_AGENT_LABEL_PREFIXES):
            continue
        if any(_in_domain(ns, p.rstrip("/")) for p in names.NODE_AGENT_LABEL_PREFIXES):
            continue
        out.append(key)
    return sorted(out)


def modified_labels(new: dict | None, old: dict | None) -> set[str]:
    new, old = new or {}, old or {}
    return {k for k in set(new) | set(old) if new.get(k) != old.get(k)}


def _labels(obj: dict | None) -> dict:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


class NodeRestriction:
    name = "NodeRestriction"

    def __init__(self, store: "Store", registry):
        self.store = store
        self.registry = registry

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        node, is_node = node_identity(attrs.user)
        if not is_node:
            return
        if not node:
            raise _forbidden(attrs, f'could not determine node from user "{attrs.user.name}"')
        k = attrs.kind
        if k.group == "" and k.resource == "pods":
            if attrs.subresource == "":
                await self._pod(node, attrs)
            elif attrs.subresource == "status":
                self._pod_status(node, attrs)
            else:
                raise _forbidden(
                    attrs, f"unexpected subresource \"{attrs.subresource}\", only 'status' and 'eviction' are allowed"
                )
        elif k.group == "" and k.resource == "nodes":
            self._node(node, attrs)
        elif k.group == "" and k.resource == "persistentvolumeclaims":
            self._pvc(node, attrs)
        elif k.group == "" and k.resource == "serviceaccounts":
            await self._token(node, attrs)
        elif k.group == names.COORDINATION_GROUP and k.resource == "leases":
            self._lease(node, attrs)
        elif k.group == names.CERTIFICATES_GROUP and k.resource == "certificatesigningrequests":
            self._csr(node, attrs)

    # --- pods ---------------------------------------------------------------------------------
    async def _pod(self, node: str, attrs: Attributes) -> None:
        if attrs.operation == "CREATE":
            await self._mirror_pod(node, attrs)
            return
        if attrs.operation == "DELETE":
            # Deletes and evictions both arrive here with the current pod as ``old``.
            bound = ((attrs.old or {}).get("spec") or {}).get("nodeName")
            if bound != node:
                raise _forbidden(attrs, f'node "{node}" can only delete pods with spec.nodeName set to itself')
            return
        raise _forbidden(
            attrs, f'unexpected operation "{attrs.operation}", node "{node}" can only create and delete mirror pods'
        )

    async def _mirror_pod(self, node: str, attrs: Attributes) -> None:
        pod = attrs.obj or {}
        md, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if names.ANNOTATION_CONFIG_MIRROR not in (md.get("annotations") or {}):
            raise _forbidden(
                attrs,
                f'pod does not have "{names.ANNOTATION_CONFIG_MIRROR}" annotation, node '
                f'"{node}" can only create mirror pods',
            )
        if spec.get("nodeName") != node:
            raise _forbidden(attrs, f'node "{node}" can only create pods with spec.nodeName set to itself')
        owners = md.get("ownerReferences") or []
        if len(owners) != 1:
            raise _forbidden(attrs, f'node "{node}" can only create pods with a single owner reference set to itself')
        owner = owners[0] if isinstance(owners[0], dict) else {}
        if owner.get("apiVersion") != "v1" or owner.get("kind") != "Node" or owner.get("name") != node:
            raise _forbidden(attrs, f'node "{node}" can only create pods with an owner reference set to itself')
        if owner.get("controller") is not True:
            raise _forbidden(
                attrs, f'node "{node}" can only create pods with a controller owner reference set to itself'
            )
        if owner.get("blockOwnerDeletion") is True:
            raise _forbidden(attrs, f'node "{node}" must not set blockOwnerDeletion on an owner reference')
        nodes = self.registry.by_resource("", "v1", "nodes")
        current = await self.store.get_object(nodes, "", node)  # 404 when the node is not registered
        uid = (current.get("metadata") or {}).get("uid")
        if owner.get("uid") != uid:
            raise _forbidden(attrs, f"node {node} UID mismatch: expected {uid} got {owner.get('uid')}")
        refs = pod_references(pod)
        if spec.get("serviceAccountName") or spec.get("serviceAccount"):
            raise _forbidden(attrs, f'node "{node}" can not create pods that reference a service account')
        if refs[SECRET]:
            raise _forbidden(attrs, f'node "{node}" can not create pods that reference secrets')
        if refs[CONFIGMAP]:
            raise _forbidden(attrs, f'node "{node}" can not create pods that reference configmaps')
        for v in spec.get("volumes") or []:
            if not isinstance(v, dict):
                continue
            if v.get("persistentVolumeClaim") is not None:
                raise _forbidden(attrs, f'node "{node}" can not create pods that reference persistentvolumeclaims')
            if v.get("ephemeral") is not None:
                raise _forbidden(attrs, f'node "{node}" can not create pods that use generic ephemeral volumes')
            projected = v.get("projected")
            if isinstance(projected, dict) and any(
                isinstance(s, dict) and s.get("serviceAccountToken") is not None for s in projected.get("sources") or []
            ):
                raise _forbidden(attrs, f'node "{node}" can not create pods that use service account token volumes')
        if refs[PVC]:
            raise _forbidden(attrs, f'node "{node}" can not create pods that reference persistentvolumeclaims')

    def _pod_status(self, node: str, attrs: Attributes) -> None:
        if attrs.operation != "UPDATE":
            raise _forbidden(attrs, f'unexpected operation "{attrs.operation}"')
        if ((attrs.old or {}).get("spec") or {}).get("nodeName") != node:
            raise _forbidden(
                attrs, f'node "{node}" can only update pod status for pods with spec.nodeName set to itself'
            )
        if _labels(attrs.old) != _labels(attrs.obj):
            raise _forbidden(attrs, f'node "{node}" cannot update labels through pod status')

    # --- nodes --------------------------------------------------------------------------------
    def _node(self, node: str, attrs: Attributes) -> None:
        requested = attrs.name or ((attrs.obj or {}).get("metadata") or {}).get("name", "")
        if requested != node:
            raise _forbidden(attrs, f'node "{node}" is not allowed to modify node "{requested}"')
        if attrs.operation == "DELETE":
            raise _forbidden(attrs, f'node "{node}" is not allowed to delete its own Node object')
        if attrs.operation == "CREATE":
            bad = forbidden_labels(set(_labels(attrs.obj)))
            if bad:
                raise _forbidden(attrs, f'node "{node}" is not allowed to set the following labels: {", ".join(bad)}')
            return
        if attrs.operation == "UPDATE":
            new_taints = ((attrs.obj or {}).get("spec") or {}).get("taints") or []
            old_taints = ((attrs.old or {}).get("spec") or {}).get("taints") or []
            if new_taints != old_taints:
                raise _forbidden(attrs, f'node "{node}" is not allowed to modify taints')
            bad = forbidden_labels(modified_labels(_labels(attrs.obj), _labels(attrs.old)))
            if bad:
                raise _forbidden(attrs, f'node "{node}" is not allowed to modify labels: {", ".join(bad)}')

    # --- other kinds --------------------------------------------------------------------------
    def _pvc(self, node: str, attrs: Attributes) -> None:
        if attrs.subresource != "status" or attrs.operation != "UPDATE":
            raise _forbidden(attrs, "may only update PVC status")
        new, old = dict(attrs.obj or {}), dict(attrs.old or {})
        new_status, old_status = dict(new.pop("status", None) or {}), dict(old.pop("status", None) or {})
        for f in ("capacity", "conditions"):
            new_status.pop(f, None)
            old_status.pop(f, None)
        for o in (new, old):
            o["metadata"] = {k: v for k, v in (o.get("metadata") or {}).items() if k != "resourceVersion"}
        if new != old or new_status != old_status:
            raise _forbidden(
                attrs, f'node "{node}" is not allowed to update fields other than status.capacity and status.conditions'
            )

    async def _token(self, node: str, attrs: Attributes) -> None:
        if attrs.operation != "CREATE" or attrs.subresource != "token":
            return
        ref = ((attrs.obj or {}).get("spec") or {}).get("boundObjectRef")
        if (
            not isinstance(ref, dict)
            or ref.get("apiVersion") != "v1"
            or ref.get("kind") != "Pod"
            or not ref.get("name")
        ):
            raise _forbidden(attrs, "node requested token not bound to a pod")
        if not ref.get("uid"):
            raise _forbidden(attrs, "node requested token with a pod binding without a uid")
        pods = self.registry.by_resource("", "v1", "pods")
        pod = await self.store.get_object(pods, attrs.namespace, ref["name"])
        if (pod.get("metadata") or {}).get("uid") != ref["uid"]:
            raise _forbidden(
                attrs,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID "
                "in record. The object might have been deleted and then recreated",
            )
        if (pod.get("spec") or {}).get("nodeName") != node:
            raise _forbidden(attrs, "node requested token bound to a pod scheduled on a different node")

    def _lease(self, node: str, attrs: Attributes) -> None:
        if attrs.namespace != names.NS_NODE_LEASE:
            raise _forbidden(attrs, f'can only access leases in the "{names.NS_NODE_LEASE}" system namespace')
        name = ((attrs.obj or {}).get("metadata") or {}).get("name", "") if attrs.operation == "CREATE" else attrs.name
        if name != node:
            raise _forbidden(attrs, "can only access node lease with the same name as the requesting node")

    def _csr(self, node: str, attrs: Attributes) -> None:
        if attrs.operation != "CREATE":
            return
        try:
            subject = parse_csr_request(((attrs.obj or {}).get("spec") or {}).get("request"))
        except CsrParseError as exc:
            raise _forbidden(attrs, f"failed to parse CSR: {exc}") from None
        want = names.NODE_USER_PREFIX + node
        if subject.common_name != want or list(subject.organizations) != [names.GROUP_NODES]:
            raise _forbidden(
                attrs,
                f'node "{node}" can only request certificates for itself (CN "{want}", '
                f'O "{names.GROUP_NODES}"), not CN "{subject.common_name}" with O '
                f"{list(subject.organizations)}",
            )
