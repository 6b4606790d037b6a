"""The MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins.

Mutating webhooks run one after another (configurations by name, webhooks in list
order); each JSONPatch answer is applied before the next call, and webhooks with
``reinvocationPolicy: IfNeeded`` are called once more when a later webhook changed
the object. Validating webhooks run concurrently on the final object; the first
(in order) that denies or fails closed decides the request's error.

A webhook whose rules and selectors match is called when all its ``matchConditions``
are true: one that is false leaves it out; an evaluation error leaves it out under
``failurePolicy: Ignore`` and refuses the request (403) under ``Fail``. Mutating
webhooks' conditions see the object as the webhooks before them left it.

A webhook whose rules match the request only as an equivalent resource (``matchPolicy:
Equivalent``: another version of the resource, an alias group) gets the objects
converted to that version, with ``kind`` and ``resource`` of it and ``requestKind``,
``requestResource`` and ``requestSubResource`` of the request; its patch is applied to
the converted object and converted back. A call takes at most the webhook's
``timeoutSeconds``, and no longer than what is left of the request's own deadline."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Callable

import orjson

from ... import cel
from ...api import names
from ...api import status as st
from ...api.helpers import new_uid
from ...api.schemas import schema_for
from ...registry.fieldvalidation import FieldTypeError, walk
from ...registry.patch import PatchApplyError, PatchError, json_patch
from ..celvars import authorizer_check, authorizer_value, request_value
from ..chain import Attributes, time_left
from ..equivalence import Equivalent, converts
from .client import CallError, WebhookClients
from .matching import (
    EXEMPT_RESOURCES,
    is_namespace_request,
    namespace_labels_from_request,
    object_selector_matches,
    request_shape,
)
from .metrics import APISERVER_INTERNAL_ERROR, CALLING_WEBHOOK_ERROR, NO_ERROR, WebhookMetrics
from .review import InvalidResponse, build_request, read_answer, review_body, review_version
from .source import ClusterLookup, Webhook, WebhookSource

log = logging.getLogger("orch-apiserver.admission.webhook")

DEFAULT_TIMEOUT_SECONDS = 10
MAX_TIMEOUT_SECONDS = 30
NO_SIDE_EFFECTS = ("None", "NoneOnDryRun")


class CallingError(Exception):
    """A webhook could not be called or answered unusably (failurePolicy applies)."""

    def __init__(self, hook: str, reason: str):
        super().__init__(f'failed calling webhook "{hook}": {reason}')


def denial(hook: str, status: dict | None) -> st.ApiError:
    """The webhook's refusal, its Status passed through (upstream's ToStatusErr)."""
    status = dict(status or {})
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) and code >= 400 else 400
    denied_by = f'admission webhook "{hook}" denied the request'
    message, reason = status.get("message"), status.get("reason")
    if isinstance(message, str) and message:
        text = f"{denied_by}: {message}"
    elif isinstance(reason, str) and reason:
        text = f"{denied_by}: {reason}"
    else:
        text = f"{denied_by} without explanation"
    details = status.get("details")
    return st.ApiError(
        code,
        reason if isinstance(reason, str) else "",
        text,
        details=details if isinstance(details, dict) else None,
    )


class _View:
    """The request as the webhooks matched through one resource see it: as it is
    (``target`` None) or as an equivalent resource serves it (``matchPolicy:
    Equivalent``), its objects converted to that version."""

    __slots__ = ("target", "obj", "old", "inputs", "_request")

    def __init__(self, target: Equivalent | None, obj: Any, old: Any):
        self.target = target
        self.obj = obj
        self.old = old
        self.inputs: dict[str, Any] = {}  # match conditions' variables, worked out once
        self._request: dict | None = None

    def request(self, attrs: Attributes) -> dict:
        """The review's ``request`` (built on first use)."""
        if self._request is None:
            self._request = build_request(attrs, self.target, self.obj, self.old)
        return self._request


class _Dispatcher:
    """What both plugins share: matching and calling."""

    phase = ""  # the metric's type label

    def __init__(
        self,
        source: WebhookSource,
        lookup: ClusterLookup,
        clients: WebhookClients,
        metrics: WebhookMetrics,
        authorizer: Callable[[], Any] | None = None,
    ):
        self.source = source
        self.lookup = lookup
        self.clients = clients
        self.metrics = metrics
        # The server's authorizer, for match conditions' ``authorizer`` checks.
        self.authorizer: Callable[[], Any] = authorizer or (lambda: None)
        source.on_change.append(self._configuration_changed)

    def _configuration_changed(self) -> None:
        # Pools of webhooks that are gone are closed when the new list is built.
        self._stale_clients = True

    _stale_clients = False

    def _hooks(self) -> list[Webhook]:
        hooks = self.source.hooks()
        if self._stale_clients:
            self._stale_clients = False
            self.clients.forget_except({h.client_key for h in hooks})
        return hooks

    async def _matches(self, hook: Webhook, attrs: Attributes) -> bool:
        """Selectors (rules are matched by the source, per request shape)."""
        if not hook.namespace_selector.empty and (attrs.namespace or is_namespace_request(attrs)):
            labels = namespace_labels_from_request(attrs)
            if labels is None:
                name = attrs.namespace or attrs.name
                labels = self.lookup.cached_namespace_labels(name)
                if labels is None:  # not in the cache yet: storage (or 404)
                    labels = await self.lookup.namespace_labels(name)
            if not hook.namespace_selector.matches(labels):
                return False
        return object_selector_matches(hook.object_selector, attrs)

    async def _matching(self, attrs: Attributes) -> list[tuple[Webhook, Equivalent | None]]:
        """The webhooks to consider, each with the equivalent resource its rules matched
        the request as (None: as it is)."""
        k = attrs.kind
        if (k.group, k.resource) in EXEMPT_RESOURCES:
            return []
        hooks = self._hooks()
        if not hooks:
            return []
        return [(h, t) for h, t in self.source.matching_rules(request_shape(attrs)) if await self._matches(h, attrs)]

    async def _view(self, views: dict, attrs: Attributes, target: Equivalent | None) -> _View:
        """The request as TARGET serves it, converted once per request (``views``) and
        object; a conversion that fails is an internal error, as upstream."""
        key = None if target is None else (target.group, target.version)
        view = views.get(key)
        if view is None:
            eq = self.source.equivalence
            if target is None or eq is None or not converts(attrs):
                view = _View(target, attrs.obj, attrs.old)
            else:
                view = _View(
                    target,
                    await eq.convert(attrs.obj, attrs.kind, target),
                    await eq.convert(attrs.old, attrs.kind, target),
                )
            views[key] = view
        return view

    @staticmethod
    def _refuse_dry_run(hooks: list[Webhook], attrs: Attributes) -> None:
        """A dry-run request is refused by the first webhook to call that may have side
        effects."""
        if attrs.dry_run:
            for h in hooks:
                if h.spec.get("sideEffects") not in NO_SIDE_EFFECTS:
                    raise st.bad_request(f'admission webhook "{h.name}" does not support dry run')

    def _conditions_match(self, hook: Webhook, attrs: Attributes, view: _View) -> bool:
        """Whether the webhook's match conditions let it be called (always without any).
        They read the request as the webhook would receive it (VIEW)."""
        conditions = hook.conditions
        if not conditions:
            return True
        inputs = view.inputs
        if "request" in conditions.reads and "request" not in inputs:
            inputs["request"] = request_value(attrs, view.target)
        if "authorizer" in conditions.reads and "authorizer" not in inputs:
            inputs["authorizer"] = authorizer_value(attrs)
        token = cel.CURRENT_AUTHORIZER.set(authorizer_check(self.authorizer, attrs.user))
        try:
            result = conditions.evaluate(dict(inputs, object=view.obj, oldObject=view.old))
        finally:
            cel.CURRENT_AUTHORIZER.reset(token)
        self.metrics.condition_outcome(hook.name, self.phase, attrs.operation, len(result.errors), not result.matches)
        if result.matches:
            return True
        if not result.errors:
            log.debug("webhook %s left out: match condition %r is false", hook.name, result.failed)
            return False
        if hook.spec.get("failurePolicy") == "Ignore":
            log.warning(
                "webhook %s: match conditions failed to evaluate, failure policy is Ignore, the webhook is "
                "left out: %s",
                hook.name,
                result.error,
            )
            return False
        log.warning("webhook %s: match conditions failed to evaluate, failing closed: %s", hook.name, result.error)
        raise st.forbidden(attrs.kind.resource, attrs.name, attrs.kind.group, str(result.error))

    async def _call(self, hook: Webhook, attrs: Attributes, request: dict, mutating: bool) -> Any:
        """One call; the Answer, or CallingError."""
        spec = hook.spec
        api_version = review_version(spec)
        if api_version is None:
            raise CallingError(
                hook.name,
                f"webhook does not accept known AdmissionReview versions: {spec.get('admissionReviewVersions')}",
            )
        timeout = spec.get("timeoutSeconds")
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
            timeout = DEFAULT_TIMEOUT_SECONDS
        timeout = wait = min(timeout, MAX_TIMEOUT_SECONDS)
        left = time_left()
        if left is not None and left < timeout:
            # The request's own deadline comes first: the webhook is told what is left of it
            # (in whole seconds, rounded up, as upstream), and the deadline's expiry ends the
            # call (the request is answered 504 Timeout by the server); the webhook's own
            # timeout stays the call's limit should that not come.
            timeout = max(1, math.ceil(left))
        uid = new_uid()
        body = orjson.dumps(review_body(api_version, request, uid))
        client_config = spec.get("clientConfig")
        if not isinstance(client_config, dict):
            client_config = {}
        started = time.monotonic()
        code = 0
        try:
            try:
                doc = await self.clients.post(hook.client_key, client_config, body, timeout, wait)
                code = 200
            except CallError as exc:
                raise CallingError(hook.name, f"failed to call webhook: {exc}") from None
            try:
                answer = read_answer(doc, api_version, uid, mutating)
            except InvalidResponse as exc:
                raise CallingError(hook.name, f"received invalid webhook response: {exc}") from None
        except CallingError:
            self.metrics.observe(hook.name, self.phase, attrs.operation, True, code, time.monotonic() - started)
            raise
        self.metrics.observe(
            hook.name, self.phase, attrs.operation, not answer.allowed, code, time.monotonic() - started
        )
        for w in answer.warnings:
            attrs.warn(w)
        for key, value in answer.audit_annotations.items():
            attrs.annotate(f"{hook.name}/{key}", value)
        return answer

    def _failed(self, hook: Webhook, attrs: Attributes, exc: CallingError) -> st.ApiError | None:
        """The failure policy: None (admit) for Ignore, the error for Fail."""
        if hook.spec.get("failurePolicy") == "Ignore":
            log.warning("%s; failure policy is Ignore, the request goes on", exc)
            return None
        log.warning("%s; failing closed", exc)
        self.metrics.rejected(hook.name, self.phase, attrs.operation, CALLING_WEBHOOK_ERROR, 0)
        return st.internal(str(exc))

    def _denied(self, hook: Webhook, attrs: Attributes, status: dict | None) -> st.ApiError:
        err = denial(hook.name, status)
        self.metrics.rejected(hook.name, self.phase, attrs.operation, NO_ERROR, err.code)
        return err


def _group_version(obj: dict) -> tuple[str, str]:
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    return group, version


class MutatingWebhookPlugin(_Dispatcher):
    name = "MutatingAdmissionWebhook"
    phase = "admit"
    # What a webhook writes is prepared and defaulted again: ``admit`` says True when a
    # webhook changed the object, so writes no webhook touched skip that work.
    complete = True

    async def admit(self, attrs: Attributes) -> bool:
        hooks = await self._matching(attrs)
        if not hooks:
            return False
        # Those without conditions are known to be called: refused before any call.
        self._refuse_dry_run([h for h, _ in hooks if not h.conditions], attrs)
        views: dict = {}  # the request as each matched resource sees it, until it changes
        changed_any = False
        reinvocable: list[str] = []  # IfNeeded webhooks called since the last change
        reinvoke: set[str] = set()
        for rnd in (0, 1):
            for hook, target in hooks:
                if rnd == 1 and (hook.client_key not in reinvoke or not await self._matches(hook, attrs)):
                    continue
                view = await self._view(views, attrs, target)
                if hook.conditions:
                    if not self._conditions_match(hook, attrs, view):
                        continue
                    self._refuse_dry_run([hook], attrs)
                changed = await self._call_one(hook, attrs, view)
                attrs.annotate(
                    f"{names.WEBHOOK_MUTATION_ANNOTATION_PREFIX}round_{rnd}_index_{hook.index}",
                    orjson.dumps(
                        {"configuration": hook.configuration, "webhook": hook.name, "mutated": changed}
                    ).decode(),
                )
                if changed:
                    changed_any = True
                    views = {}
                    if rnd == 0:
                        reinvoke.update(reinvocable)
                        reinvocable = []
                if rnd == 0 and hook.spec.get("reinvocationPolicy") == "IfNeeded":
                    reinvocable.append(hook.client_key)
            if not reinvoke:
                break
        return changed_any

    async def _call_one(self, hook: Webhook, attrs: Attributes, view: _View) -> bool:
        try:
            answer = await self._call(hook, attrs, view.request(attrs), True)
        except CallingError as exc:
            err = self._failed(hook, attrs, exc)
            if err is not None:
                raise err from None
            return False
        if not answer.allowed:
            raise self._denied(hook, attrs, answer.status)
        if not answer.patch or not isinstance(attrs.obj, dict) or not isinstance(view.obj, dict):
            return False
        try:
            patched = json_patch(view.obj, answer.patch)
        except (PatchError, PatchApplyError) as exc:
            self.metrics.rejected(hook.name, self.phase, attrs.operation, APISERVER_INTERNAL_ERROR, 500)
            raise st.internal(str(exc)) from None
        if not isinstance(patched, dict):
            self.metrics.rejected(hook.name, self.phase, attrs.operation, APISERVER_INTERNAL_ERROR, 500)
            raise st.internal(f'the patch of webhook "{hook.name}" did not leave an object')
        if view.obj is not attrs.obj:
            # Patched as the equivalent resource the webhook named: back in the request's
            # version (when it changed anything).
            patched["apiVersion"], patched["kind"] = view.obj.get("apiVersion"), view.obj.get("kind")
            if patched == view.obj:
                return False
            eq = self.source.equivalence
            assert eq is not None and view.target is not None
            try:
                patched = await eq.convert_back(patched, attrs.kind, view.target)
            except st.ApiError:
                self.metrics.rejected(hook.name, self.phase, attrs.operation, APISERVER_INTERNAL_ERROR, 500)
                raise
        # The kind stays what was requested; what the schema does not know is dropped and
        # a value of the wrong type refused, as decoding the patched object does upstream.
        patched["apiVersion"], patched["kind"] = attrs.obj.get("apiVersion"), attrs.obj.get("kind")
        schema = schema_for(*_group_version(patched), str(patched.get("kind") or ""))
        if schema is not None:
            try:
                walk(patched, schema)
            except FieldTypeError as exc:
                self.metrics.rejected(hook.name, self.phase, attrs.operation, APISERVER_INTERNAL_ERROR, 500)
                raise st.internal(str(exc)) from None
        if patched == attrs.obj:
            return False
        attrs.obj.clear()
        attrs.obj.update(patched)
        return True

    async def validate(self, attrs: Attributes) -> None:
        return None


class ValidatingWebhookPlugin(_Dispatcher):
    name = "ValidatingAdmissionWebhook"
    phase = "validating"
    complete = True  # it never changes the object

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        matched = await self._matching(attrs)
        if not matched:
            return
        views: dict = {}
        hooks: list[tuple[Webhook, _View]] = []
        for hook, target in matched:
            view = await self._view(views, attrs, target)
            if self._conditions_match(hook, attrs, view):
                hooks.append((hook, view))
        if not hooks:
            return
        self._refuse_dry_run([h for h, _ in hooks], attrs)
        if len(hooks) == 1:
            hook, view = hooks[0]
            results: list[Any] = [await self._outcome(hook, attrs, view.request(attrs))]
        else:
            results = await asyncio.gather(*(self._outcome(h, attrs, v.request(attrs)) for h, v in hooks))
        for err in results:
            if err is not None:
                raise err

    async def _outcome(self, hook: Webhook, attrs: Attributes, request: dict) -> st.ApiError | None:
        try:
            answer = await self._call(hook, attrs, request, False)
        except CallingError as exc:
            return self._failed(hook, attrs, exc)
        if not answer.allowed:
            return self._denied(hook, attrs, answer.status)
        return None
