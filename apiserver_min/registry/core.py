"""The core family: namespaces, pods, nodes, services and service accounts.

Strategies of the core kinds that differ from the base, and the REST objects of
their sub-resources: ``namespaces/finalize``, ``pods/binding`` and
``serviceaccounts/token`` (``pods/eviction`` is ``eviction.py``) (``status`` is the generic store's; ``pods/log``,
``exec``, ``attach`` and ``portforward`` proxy HTTP to the node agent and live in
the server).
"""

from __future__ import annotations

import copy
import datetime as _dt
import logging
from typing import Any, Callable, Protocol

from ..admission.chain import Attributes
from ..api import enumvalidation, names, podvalidation
from ..api import status as st
from ..api import validation as v
from ..api.kinds import KindInfo
from ..api.qos import pod_qos_class
from ..api.timeutil import format_rfc3339
from ..api.user import SYSTEM_USER
from . import services
from .binding import bind_pod
from .rest import DeleteOptions, ObjectStore, RequestContext
from .strategy import Strategy, WriteTransaction

log = logging.getLogger("orch-apiserver.registry")

# --- strategies -----------------------------------------------------------------------------


class NamespaceStrategy(Strategy):
    name_rule = "label"

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        if obj.get("spec") is None:  # null is absent
            obj["spec"] = {}
        spec = obj["spec"]
        fins = list(spec.get("finalizers") or [])
        if names.FINALIZER_NAMESPACE not in fins:
            fins.append(names.FINALIZER_NAMESPACE)
        spec["finalizers"] = fins
        self._label_name(obj["metadata"])

    @staticmethod
    def _label_name(md: dict) -> None:
        """The immutable name label. Only for a usable name and labels map: a
        missing or ill-typed one is left for validation to report (422), not a crash."""
        name = md.get("name")
        if not isinstance(name, str) or not name:
            return
        if md.get("labels") is None:
            md["labels"] = {}
        if isinstance(md["labels"], dict):
            md["labels"][names.LABEL_METADATA_NAME] = name

    def initial_status(self, obj: dict) -> dict:
        return {"phase": "Active"}

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        if not isinstance(new.get("spec"), dict):  # null is absent; the spec holds only finalizers
            new["spec"] = {}
        new["spec"]["finalizers"] = list((old.get("spec") or {}).get("finalizers") or [])
        self._label_name(new["metadata"])


class PodStrategy(Strategy):
    enum_rules = enumvalidation.POD_RULES  # podvalidation checks the rest itself
    own_subresources = frozenset({names.POD_SUBRESOURCE_EPHEMERAL_CONTAINERS})

    def initial_status(self, obj: dict) -> dict:
        return {"phase": "Pending", "qosClass": pod_qos_class(obj)}

    def validate(self, obj: dict) -> list[v.FieldError]:
        """Create: generic metadata rules plus upstream's ValidatePodCreate."""
        return super().validate(obj) + podvalidation.validate_pod(obj, include_metadata=False)

    def prepare_for_subresource_update(self, subresource: str, new: dict, old: dict) -> None:
        """pods/ephemeralcontainers: the stored pod with the request's
        ``spec.ephemeralContainers`` and nothing else of it (as upstream, other changes
        in the body are dropped, not refused)."""
        out = copy.deepcopy(old)
        spec = new.get("spec")
        ephemeral = spec.get("ephemeralContainers") if isinstance(spec, dict) else None
        out_spec = out.setdefault("spec", {})
        if ephemeral is None:
            out_spec.pop("ephemeralContainers", None)
        else:
            out_spec["ephemeralContainers"] = ephemeral
        out["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion", "")
        new.clear()
        new.update(out)

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[v.FieldError]:
        return (
            self.validate_metadata(new)
            + self._finalizer_update_errors(new, old)
            + podvalidation.validate_pod_ephemeral_containers_update(new, old)
        )

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        """Update: generic metadata rules plus upstream's ValidatePodUpdate.

        The base rules' ``self.validate(new)`` would carry the create-only pod
        rules (e.g. no ephemeral containers), so only the metadata and
        finalizer rules are taken from them. Writes that change status (the status sub-resource, and
        binding, which also sets spec.nodeName) are internal writes that
        upstream does not run through ValidatePodUpdate: ``prepare_for_update``
        copies the old status into every main-resource update, so a status
        difference marks exactly those writes.
        """
        errs = self.validate_metadata(new) + self._finalizer_update_errors(new, old)
        if new.get("status") != old.get("status"):
            return errs
        return errs + podvalidation.validate_pod_update(new, old, include_metadata=False)


class NodeStrategy(Strategy):
    keep_status_on_create = True


class ServiceStrategy(Strategy):
    """Services: the clusterIP/clusterIPs pair kept in step, allocated values kept on
    updates that leave them out, type-dependent fields erased on a type change, and
    addresses and ports taken from the ranges (``allocators``, wired by the server;
    without them nothing is allocated)."""

    name_rule = "dns1035"
    allocators: services.ServiceAllocators | None = None

    def initial_status(self, obj: dict) -> dict:
        return {"loadBalancer": {}}

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        services.normalize_cluster_ips(obj, None)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        services.patch_allocated_values(new, old)
        services.normalize_cluster_ips(new, old)

    async def begin_create(self, obj: dict, dry_run: bool) -> WriteTransaction | None:
        if self.allocators is None:
            return None
        return await self.allocators.allocate_create(obj, dry_run)

    async def begin_update(self, new: dict, old: dict, dry_run: bool) -> WriteTransaction | None:
        txn = await self.allocators.allocate_update(new, old, dry_run) if self.allocators is not None else None
        services.drop_type_dependent_fields(new, old)
        return txn

    async def after_delete(self, obj: dict, store: Any) -> None:
        if self.allocators is not None:
            await self.allocators.release_all(obj)
        # The Endpoints of the same name go with it (as upstream), so a Service created
        # again under that name does not start with stale addresses.
        md = obj.get("metadata") or {}
        endpoints = store.registry.by_resource("", "v1", "endpoints")
        if endpoints is not None:
            try:
                await store.delete(endpoints, md.get("namespace", ""), md.get("name", ""), DeleteOptions(), SYSTEM_USER)
            except st.ApiError as exc:
                if exc.code != 404:
                    log.warning("deleting the endpoints of service %s/%s: %s", md.get("namespace"), md.get("name"), exc)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + services.validate_service(obj)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = self.validate_metadata(new) + self.validate_enums(new) + self._finalizer_update_errors(new, old)
        # A status or metadata write leaves the spec as stored (and checked) alone.
        if new.get("spec") != old.get("spec"):
            errs += services.validate_service_update(new, old)
        if new.get("status") != old.get("status"):
            errs += services.validate_load_balancer_status(new)
        return self.without_stored_enum_errors(errs, old)


# --- namespaces/finalize --------------------------------------------------------------------


class NamespaceFinalizeREST:
    """PUT namespaces/<name>/finalize: sets spec.finalizers only, recorded in
    managedFields as the writer's Update of the finalize sub-resource (as upstream).
    It bypasses the namespace strategy, which otherwise keeps spec.finalizers."""

    def __init__(self, store: ObjectStore, kind: KindInfo):
        self.store = store
        self.kind = kind

    async def update(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        fins = (obj.get("spec") or {}).get("finalizers") or []
        if not isinstance(fins, list) or not all(isinstance(f, str) for f in fins):
            raise st.bad_request("spec.finalizers must be a list of strings")

        def compute(old: dict) -> dict:
            old.setdefault("spec", {})["finalizers"] = list(fins)
            return old

        out, _, _ = await self.store.update(
            self.kind,
            "",
            ctx.name,
            compute,
            ctx.user,
            subresource="finalize",
            dry_run=ctx.dry_run,
            field_manager=ctx.field_manager,
        )
        return 200, out


# --- pods/binding, pods/eviction ------------------------------------------------------------


def _created() -> dict:
    return st.status_object(201, "", "", None, failure=False)


class PodBindingREST:
    """POST pods/<name>/binding: the one binding write, shared with the bundled scheduler."""

    def __init__(self, store: ObjectStore, kind: KindInfo):
        self.store = store

    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        target_ref = obj.get("target") or {}
        node = target_ref.get("name") if isinstance(target_ref, dict) else None
        if not node:
            raise st.invalid(
                "Binding",
                ctx.name,
                [{"reason": "FieldValueRequired", "field": "target.name", "message": "Required value"}],
            )
        await bind_pod(
            self.store,
            ctx.namespace,
            ctx.name,
            node,
            ctx.user,
            uid=(obj.get("metadata") or {}).get("uid") or None,
            dry_run=ctx.dry_run,
        )
        return 201, _created()


# --- serviceaccounts/token ------------------------------------------------------------------

# TokenRequest limits and defaults (upstream's).
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32


class TokenIssuer(Protocol):
    """What the token sub-resource uses of the service-account token signer
    (``authn.serviceaccount.TokenIssuer``)."""

    clock: Callable[[], float]

    def issue(
        self,
        namespace: str,
        name: str,
        uid: str,
        audiences: tuple[str, ...] | list[str],
        expiration_seconds: int,
        pod: tuple[str, str] | None = None,
        secret: tuple[str, str] | None = None,
    ) -> tuple[str, int]: ...


def _token_invalid(name: str, field: str, value: Any, detail: str) -> st.ApiError:
    return st.invalid(
        "TokenRequest", name, v.causes([v.FieldError.invalid(field, value, detail)]), names.AUTHENTICATION_GROUP
    )


class ServiceAccountTokenREST:
    """POST serviceaccounts/<name>/token (TokenRequest, ``authentication.orch.io/v1``):
    a bound token for the service account, signed by ``issuer``."""

    # The body is checked here: an empty spec is valid (audiences default to the API's),
    # which the schema's required markers would refuse.
    validates_body_fields = False

    def __init__(
        self,
        store: ObjectStore,
        kind: KindInfo,
        issuer: TokenIssuer | None,
        api_audiences: tuple[str, ...],
        max_expiration_seconds: float = 0.0,
    ):
        self.store = store
        self.kind = kind
        self.issuer = issuer
        self.api_audiences = tuple(api_audiences)
        self.max_expiration_seconds = int(max_expiration_seconds)

    def check_available(self) -> None:
        if self.issuer is None:
            raise st.ApiError(
                404,
                "NotFound",
                "serviceaccounts/token is not available: this server has no "
                "service-account signing key (--service-account-signing-key-file)",
            )

    async def create(self, ctx: RequestContext, obj: dict) -> tuple[int, dict]:
        self.check_available()
        assert self.issuer is not None
        ns, name = ctx.namespace, ctx.name
        md = obj.get("metadata") or {}
        if md.get("name") not in (None, "") and md["name"] != name:
            raise st.bad_request(
                f"the name of the TokenRequest ({md['name']}) does not match the service "
                f"account name on the URL ({name})"
            )
        if md.get("namespace") not in (None, "") and md["namespace"] != ns:
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        spec = obj.get("spec")
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise _token_invalid(name, "spec", spec, "must be an object")
        audiences = spec.get("audiences")
        if audiences in (None, []):
            audiences = list(self.api_audiences)
        if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
            raise _token_invalid(name, "spec.audiences", audiences, "must be a list of non-empty strings")
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = DEFAULT_EXPIRATION_SECONDS
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise _token_invalid(name, "spec.expirationSeconds", seconds, "must be an integer")
        if seconds < MIN_EXPIRATION_SECONDS:
            raise _token_invalid(
                name, "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes"
            )
        if seconds > MAX_EXPIRATION_SECONDS:
            raise _token_invalid(
                name, "spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds"
            )
        sa = await self.store.get_object(self.kind, ns, name)
        sa_uid = (sa.get("metadata") or {}).get("uid", "")
        pod, secret = await self._bound_object(spec.get("boundObjectRef"), ns, name)
        # Admission sees the request as a create of serviceaccounts/token (NodeRestriction
        # lets a node ask only for tokens bound to its own pods).
        await self.store.admission.run(
            Attributes("CREATE", self.kind, ns, name, "token", obj, None, ctx.user, ctx.dry_run)
        )
        if self.max_expiration_seconds and seconds > self.max_expiration_seconds:
            seconds = self.max_expiration_seconds
        out_spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": seconds}
        if spec.get("boundObjectRef") is not None:
            out_spec["boundObjectRef"] = spec["boundObjectRef"]
        now = self.issuer.clock()
        out: dict[str, Any] = {
            "kind": "TokenRequest",
            "apiVersion": f"{names.AUTHENTICATION_GROUP}/v1",
            "metadata": {
                "name": name,
                "namespace": ns,
                "creationTimestamp": format_rfc3339(_dt.datetime.fromtimestamp(int(now), _dt.timezone.utc)),
            },
            "spec": out_spec,
        }
        if not ctx.dry_run:
            token, exp = self.issuer.issue(ns, name, sa_uid, audiences, seconds, pod, secret)
            out["status"] = {
                "token": token,
                "expirationTimestamp": format_rfc3339(_dt.datetime.fromtimestamp(exp, _dt.timezone.utc)),
            }
        return 201, out

    async def _bound_object(
        self, ref: Any, ns: str, sa_name: str
    ) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
        if ref is None:
            return None, None
        if not isinstance(ref, dict):
            raise _token_invalid(sa_name, "spec.boundObjectRef", ref, "must be an object")
        kind, api_version, ref_name, ref_uid = (
            ref.get("kind"),
            ref.get("apiVersion") or "",
            ref.get("name"),
            ref.get("uid") or "",
        )
        if kind not in ("Pod", "Secret") or api_version != "v1":
            raise st.bad_request(f"cannot bind token to object of type {api_version}, Kind={kind}")
        if not isinstance(ref_name, str) or not ref_name:
            raise _token_invalid(sa_name, "spec.boundObjectRef.name", ref_name, "the bound object must be named")
        bound_kind = self.store.registry.by_resource("", "v1", "pods" if kind == "Pod" else "secrets")
        assert bound_kind is not None
        obj = await self.store.get_object(bound_kind, ns, ref_name)
        uid = (obj.get("metadata") or {}).get("uid", "")
        if kind == "Pod" and (obj.get("spec") or {}).get("serviceAccountName") != sa_name:
            raise st.bad_request(
                f'cannot bind token for serviceaccount "{sa_name}" to pod running with different serviceaccount name.'
            )
        if ref_uid and ref_uid != uid:
            raise st.conflict(
                kind,
                ref_name,
                "",
                f"the UID in the bound object reference ({ref_uid}) does not match "
                "the UID in record. The object might have been deleted and then "
                "recreated",
            )
        return ((ref_name, uid), None) if kind == "Pod" else (None, (ref_name, uid))
