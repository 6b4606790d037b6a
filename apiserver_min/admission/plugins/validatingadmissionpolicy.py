"""ValidatingAdmissionPolicy: runs the policies bound to each request, as upstream.

For every binding whose policy exists and whose policy's ``matchConstraints`` (and the
binding's own ``matchResources``, when set) match the request, the policy is
evaluated (once per parameter object when it has a ``paramKind``). What a failure
does is the binding's ``validationActions``: ``Deny`` refuses the request with
``ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request:
<message>`` and the validation's reason (Invalid 422 unless it says Unauthorized 401,
Forbidden 403 or RequestEntityTooLarge 413), ``Warn`` sends a warning, ``Audit``
records the failure as the audit annotation
``validation.policy.admission.orch.io/validation_failure``. Audit annotations of the
policy are recorded as ``<policy>/<key>``."""

from __future__ import annotations

import json
from typing import Any, Callable

from ... import cel
from ...api import names
from ...api import status as st
from ...api.selectors import SelectorError, label_selector_from_dict
from ..celvars import authorizer_check, authorizer_value, request_value
from ..chain import Attributes
from ..equivalence import Equivalence, Equivalent, converts
from ..policy.source import PolicySource
from ..policy.validator import REASON_CODES, CompiledPolicy, Failure
from . import equivalentresources

VALIDATION_FAILURE_ANNOTATION = f"validation.policy.admission.{names.DOMAIN}/validation_failure"


class ValidatingAdmissionPolicy:
    name = "ValidatingAdmissionPolicy"

    def __init__(self, source: PolicySource, authorizer: Callable[[], Any], equivalence: Equivalence | None = None):
        self.source = source
        self._authorizer = authorizer
        # ``matchPolicy: Equivalent``: what else a request's resource is served as.
        self.equivalence = equivalence

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if not self.source.has_bindings():
            return
        denied: tuple[CompiledPolicy, dict, Failure] | None = None
        annotations: dict[str, str] = {}
        audit_failures: list[dict] = []
        token = cel.CURRENT_AUTHORIZER.set(authorizer_check(self._authorizer, attrs.user))
        try:
            # The variables by the resource the request was matched as (None: its own).
            bases: dict[tuple[str, str] | None, dict[str, Any]] = {}
            for policy, binding, binding_matcher in self.source.pairs():
                spec = binding.get("spec") or {}
                matched, target = policy.matcher.match_as(attrs, self.source.namespace_labels, self.equivalence)
                if not matched:
                    continue
                if not binding_matcher.matches(attrs, self.source.namespace_labels, self.equivalence):
                    continue
                base = await self._base(bases, attrs, target)
                self._complete(base, policy.reads, attrs, target)
                failures = self._evaluate(policy, binding, attrs, base, annotations)
                actions = spec.get("validationActions") or []
                for failure in failures:
                    binding_name = (binding.get("metadata") or {}).get("name") or ""
                    if "Deny" in actions and denied is None:
                        denied = (policy, binding, failure)
                    if "Warn" in actions:
                        attrs.warn(
                            f"Validation failed for ValidatingAdmissionPolicy '{policy.name}' with binding "
                            f"'{binding_name}': {failure.message}"
                        )
                    if "Audit" in actions:
                        audit_failures.append(
                            {
                                "message": failure.message,
                                "policy": policy.name,
                                "binding": binding_name,
                                "expressionIndex": failure.index if failure.index is not None else 0,
                                "validationActions": list(actions),
                            }
                        )
        finally:
            cel.CURRENT_AUTHORIZER.reset(token)
        for key, value in annotations.items():
            attrs.annotate(key, value)
        if audit_failures:
            attrs.annotate(VALIDATION_FAILURE_ANNOTATION, json.dumps(audit_failures, separators=(",", ":")))
        if denied is not None:
            raise self._denial(attrs, *denied)

    # --- evaluation ----------------------------------------------------------------------

    async def _base(
        self, bases: dict[tuple[str, str] | None, dict[str, Any]], attrs: Attributes, target: Equivalent | None
    ) -> dict[str, Any]:
        """The variables of the request as TARGET serves it: its objects converted to that
        version once per request (a conversion that fails is an internal error)."""
        key = None if target is None else (target.group, target.version)
        base = bases.get(key)
        if base is None:
            eq = self.equivalence
            if target is None or eq is None or not converts(attrs):
                base = {"object": attrs.obj, "oldObject": attrs.old}
            else:
                base = {
                    "object": await eq.convert(attrs.obj, attrs.kind, target),
                    "oldObject": await eq.convert(attrs.old, attrs.kind, target),
                }
            bases[key] = base
        return base

    def _complete(
        self, base: dict[str, Any], reads: frozenset[str], attrs: Attributes, target: Equivalent | None = None
    ) -> None:
        """Add to ``base`` the variables ``reads`` names that it lacks (computed once per
        request, and only when an expression reads them)."""
        kind = attrs.kind
        if "namespaceObject" in reads and "namespaceObject" not in base:
            namespaced = kind.namespaced and attrs.namespace
            base["namespaceObject"] = self.source.namespace(attrs.namespace) if namespaced else None
        if "request" in reads and "request" not in base:
            base["request"] = request_value(attrs, target)
        if "authorizer" in reads and "authorizer" not in base:
            base["authorizer"] = authorizer_value(attrs)

    def _evaluate(
        self, policy: CompiledPolicy, binding: dict, attrs: Attributes, base: dict, annotations: dict[str, str]
    ) -> list[Failure]:
        fail = policy.failure_policy == "Fail"
        if policy.param_kind is None:
            outcome = policy.evaluate(base)
            annotations.update(outcome.annotations)
            return outcome.failures
        ref = (binding.get("spec") or {}).get("paramRef")
        api_version, kind_name = policy.param_kind
        kind = self.source.param_kind(api_version, kind_name)
        if kind is None:
            message = f"failed to configure policy: failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}'"
            return [Failure(message)] if fail else []
        if not isinstance(ref, dict):
            message = f"failed to configure binding: paramRef is required when the policy has a paramKind ('{api_version}, Kind={kind_name}')"
            return [Failure(message)] if fail else []
        namespace = ref.get("namespace") or ""
        if kind.namespaced and not namespace:
            if not attrs.namespace:
                message = "failed to configure binding: cannot use a namespaced paramRef to match a cluster-scoped resource without a paramRef namespace"
                return [Failure(message)] if fail else []
            namespace = attrs.namespace
        selector_matches: Callable[[dict], bool] = lambda labels: True  # noqa: E731 - the selector's test, set below
        if ref.get("selector") is not None:
            try:
                selector = label_selector_from_dict(ref["selector"])
            except SelectorError as exc:
                return [Failure(f"failed to configure binding: {exc}")] if fail else []
            selector_matches = selector.matches
        params = self.source.params(kind, namespace if kind.namespaced else "", ref.get("name"), selector_matches)
        if not params:
            if (ref.get("parameterNotFoundAction") or "Deny") == "Deny":
                return [
                    Failure(
                        "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
                    )
                ]
            return []
        failures: list[Failure] = []
        for param in params:
            outcome = policy.evaluate(dict(base, params=param))
            annotations.update(outcome.annotations)
            failures += outcome.failures
        return failures

    @staticmethod
    def _denial(attrs: Attributes, policy: CompiledPolicy, binding: dict, failure: Failure) -> st.ApiError:
        binding_name = (binding.get("metadata") or {}).get("name") or ""
        message = (
            f"ValidatingAdmissionPolicy '{policy.name}' with binding '{binding_name}' denied request: {failure.message}"
        )
        name = attrs.name or ((attrs.obj or {}).get("metadata") or {}).get("name") or ""
        err = st.forbidden(attrs.kind.resource, name, attrs.kind.group, message)
        err.reason = failure.reason if failure.reason in REASON_CODES else "Invalid"
        err.code = REASON_CODES[err.reason]
        details = dict(err.details or {})
        details["causes"] = list(details.get("causes") or []) + [{"message": message}]
        err.details = details
        return err


def plugin(server: Any) -> ValidatingAdmissionPolicy:
    return ValidatingAdmissionPolicy(
        PolicySource(server.cache, server.registry),
        lambda: getattr(server, "authorizer", None),
        equivalentresources.for_server(server),
    )
