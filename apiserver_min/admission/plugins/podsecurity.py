"""PodSecurity: pods checked against their namespace's Pod Security Standard.

A namespace chooses a level (privileged, baseline, restricted) and a policy
version per mode with the ``pod-security.orch.io/<mode>[-version]`` labels:
``enforce`` refuses violating pods, ``warn`` answers a warning, ``audit`` records
an audit annotation. Pod controllers' templates get the warnings and audit
annotations but are never refused. Changing a namespace's enforce level warns
about its existing pods that would not be admitted any more. Defaults and
exemptions (users, namespaces, runtime classes) come from the plugin's
``PodSecurityConfiguration`` in the admission configuration file.
"""

from __future__ import annotations

import time
from typing import Any

from ...api import names
from ...api import status as st
from ...api.validation import FieldError, causes
from ...registry.lookup import ObjectLookup
from ...storage.keys import key_prefix
from ..chain import Attributes
from ..podsecurity import checks
from ..podsecurity.policy import (
    PRIVILEGED,
    Configuration,
    LevelVersion,
    Policy,
    compare_levels,
    parse_configuration,
    policy_from_labels,
)

# Upstream's audit annotation keys, under the label prefix.
ANNOTATION_ENFORCE_POLICY = names.POD_SECURITY_PREFIX + "enforce-policy"
ANNOTATION_AUDIT_VIOLATIONS = names.POD_SECURITY_PREFIX + "audit-violations"
ANNOTATION_EXEMPT = names.POD_SECURITY_PREFIX + "exempt"
ANNOTATION_ERROR = names.POD_SECURITY_PREFIX + "error"

# Pod sub-resources that cannot change what the checks look at.
IGNORED_POD_SUBRESOURCES = frozenset({"exec", "attach", "binding", "eviction", "log", "portforward", "proxy", "status"})
# Kinds whose objects hold a pod template: (group, resource) -> path to the template.
POD_CONTROLLERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "replicationcontrollers"): ("spec", "template"),
    ("", "podtemplates"): ("template",),
    ("apps", "replicasets"): ("spec", "template"),
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}
# Checking a namespace's existing pods against a new enforce level stops after this many
# pods or this long, as upstream.
NAMESPACE_MAX_PODS_TO_CHECK = 3000
NAMESPACE_POD_CHECK_SECONDS = 1.0


def _template(obj: dict, path: tuple[str, ...]) -> dict | None:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur if isinstance(cur, dict) else None


def _meta_spec(obj: dict | None) -> tuple[dict, dict]:
    obj = obj or {}
    meta, spec = obj.get("metadata"), obj.get("spec")
    return (meta if isinstance(meta, dict) else {}), (spec if isinstance(spec, dict) else {})


def is_significant_pod_update(new: dict, old: dict) -> bool:
    """Whether a pod update can change what the checks see. Pod updates may change
    little (images, activeDeadlineSeconds, tolerations, metadata); upstream looks
    again only when containers come, go or change image, or a seccomp annotation of
    a container changes."""
    new_meta, new_spec = _meta_spec(new)
    old_meta, old_spec = _meta_spec(old)
    new_ann, old_ann = new_meta.get("annotations") or {}, old_meta.get("annotations") or {}

    def significant(c: dict, o: dict) -> bool:
        if c.get("image") != o.get("image"):
            return True
        key = names.ANNOTATION_SECCOMP_CONTAINER_PREFIX + str(c.get("name", ""))
        return new_ann.get(key) != old_ann.get(key)

    for key in ("containers", "initContainers"):
        a, b = new_spec.get(key) or [], old_spec.get(key) or []
        if len(a) != len(b):
            return True
        if any(significant(c, o) for c, o in zip(a, b)):
            return True
    old_ephemeral = {str(c.get("name")): c for c in old_spec.get("ephemeralContainers") or []}
    for c in new_spec.get("ephemeralContainers") or []:
        o = old_ephemeral.get(str(c.get("name")))
        if o is None or significant(c, o):
            return True
    return False


class PodSecurity:
    """Upstream's PodSecurity admission plugin (validating only)."""

    name = "PodSecurity"
    resources = frozenset({("", "pods"), ("", "namespaces")} | set(POD_CONTROLLERS))

    def __init__(self, server: Any, configuration: Configuration | None = None):
        self.server = server
        self.config = configuration or Configuration()
        self._lookup: ObjectLookup | None = None

    @classmethod
    def from_config(cls, server: Any, doc: dict | None) -> "PodSecurity":
        return cls(server, parse_configuration(doc))

    @property
    def lookup(self) -> ObjectLookup:
        if self._lookup is None:
            self._lookup = ObjectLookup(self.server.cache, self.server.registry, self.server.store)
        return self._lookup

    def policy(self, labels: Any) -> tuple[Policy, list[FieldError]]:
        return policy_from_labels(labels if isinstance(labels, dict) else None, self.config.defaults)

    async def admit(self, attrs: Attributes) -> None:
        return None

    async def validate(self, attrs: Attributes) -> None:
        if attrs.operation not in ("CREATE", "UPDATE"):
            return
        key = (attrs.kind.group, attrs.kind.resource)
        if key == ("", "namespaces"):
            await self._namespace(attrs)
        elif key == ("", "pods"):
            await self._pod(attrs)
        elif key in POD_CONTROLLERS:
            await self._controller(attrs, POD_CONTROLLERS[key])

    # --- namespaces ------------------------------------------------------------------
    async def _namespace(self, attrs: Attributes) -> None:
        if attrs.subresource:
            return
        new_meta, _ = _meta_spec(attrs.obj)
        labels = new_meta.get("labels") or {}
        name = attrs.name or str(new_meta.get("name") or "")
        new_policy, new_errs = self.policy(labels)
        if attrs.operation == "CREATE":
            if new_errs:
                raise st.invalid("Namespace", name, causes(new_errs))
            if name in self.config.exempt_namespaces:
                self._exempt_namespace_warning(attrs, name, new_policy, labels)
            return
        old_meta, _ = _meta_spec(attrs.old)
        old_policy, old_errs = self.policy(old_meta.get("labels") or {})
        if new_errs and (not old_errs or new_errs != old_errs):
            raise st.invalid("Namespace", name, causes(new_errs))
        new, old = new_policy.enforce, old_policy.enforce
        if new == old or new.level == PRIVILEGED:
            return
        if new.version == old.version and compare_levels(new.level, old.level) < 1:
            return
        if name in self.config.exempt_namespaces:
            self._exempt_namespace_warning(attrs, name, new_policy, labels)
            return
        for warning in self._existing_pods(name, new):
            attrs.warn(warning)

    def _exempt_namespace_warning(self, attrs: Attributes, name: str, policy: Policy, labels: dict) -> None:
        if policy.fully_privileged() or policy.equivalent(self.config.defaults):
            return
        parts = []
        for mode in ("enforce", "audit", "warn"):
            lv: LevelVersion = getattr(policy, mode)
            explicit = (
                names.POD_SECURITY_PREFIX + mode in labels or f"{names.POD_SECURITY_PREFIX}{mode}-version" in labels
            )
            if lv.level != PRIVILEGED and explicit:
                parts.append(f"{mode}={lv}")
        attrs.warn(
            f'namespace "{name}" is exempt from Pod Security, and the policy ({", ".join(parts)}) will be ignored'
        )

    def _existing_pods(self, namespace: str, enforce: LevelVersion) -> list[str]:
        pods_kind = self.server.registry.by_resource("", "v1", "pods")
        entries = self.server.cache.cache(key_prefix(pods_kind)).sorted_entries(namespace)
        pods = [e.object() for e in entries]
        # Exempt runtime classes are skipped; one pod per controller first, the rest after.
        first, rest, seen = [], [], set()
        for pod in pods:
            _, spec = _meta_spec(pod)
            if self._exempt_runtime_class(spec):
                continue
            owner = next(
                (
                    r.get("uid")
                    for r in (pod.get("metadata") or {}).get("ownerReferences") or []
                    if isinstance(r, dict) and r.get("controller")
                ),
                None,
            )
            if owner is None or owner not in seen:
                first.append(pod)
                if owner is not None:
                    seen.add(owner)
            else:
                rest.append(pod)
        ordered = first + rest
        total = len(ordered)
        ordered = ordered[:NAMESPACE_MAX_PODS_TO_CHECK]
        deadline = time.monotonic() + NAMESPACE_POD_CHECK_SECONDS
        counts: dict[str, list] = {}  # reasons -> [first pod name, count]
        order: list[str] = []
        checked = len(ordered)
        for i, pod in enumerate(ordered):
            meta, spec = _meta_spec(pod)
            violations = checks.evaluate(enforce.level, enforce.version, meta, spec)
            if violations:
                reason = checks.forbidden_reasons(violations)
                pod_name = str(meta.get("name", ""))
                if reason not in counts:
                    counts[reason] = [pod_name, 0]
                    order.append(reason)
                elif pod_name < counts[reason][0]:
                    counts[reason][0] = pod_name
                counts[reason][1] += 1
            if time.monotonic() > deadline:
                checked = i + 1
                break
        warnings = []
        if checked < total:
            warnings.append(
                f"new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            )
        if order:
            warnings.append(
                f'existing pods in namespace "{namespace}" violate the new PodSecurity enforce level "{enforce}"'
            )
        decorated = []
        for reason in order:
            pod_name, n = counts[reason]
            if n == 1:
                decorated.append(f"{pod_name}: {reason}")
            elif n == 2:
                decorated.append(f"{pod_name} (and 1 other pod): {reason}")
            else:
                decorated.append(f"{pod_name} (and {n - 1} other pods): {reason}")
        return warnings + sorted(decorated)

    # --- pods and pod controllers ------------------------------------------------------
    def _exempt_runtime_class(self, spec: dict) -> bool:
        rc = spec.get("runtimeClassName")
        return bool(rc) and rc in self.config.exempt_runtime_classes

    async def _namespace_policy(self, attrs: Attributes) -> tuple[Policy, list[FieldError]] | None:
        # The cache entry carries the namespace's labels: no decoding per request.
        entry = self.lookup.cached("namespaces", "", attrs.namespace)
        if entry is not None:
            return self.policy(entry.labels)
        ns = await self.lookup.live("namespaces", "", attrs.namespace)
        if ns is None:
            return None
        return self.policy((ns.get("metadata") or {}).get("labels"))

    async def _pod(self, attrs: Attributes) -> None:
        if attrs.subresource in IGNORED_POD_SUBRESOURCES:
            return
        if attrs.namespace in self.config.exempt_namespaces:
            attrs.annotate(ANNOTATION_EXEMPT, "namespace")
            return
        if attrs.user.name and attrs.user.name in self.config.exempt_usernames:
            attrs.annotate(ANNOTATION_EXEMPT, "user")
            return
        found = await self._namespace_policy(attrs)
        if found is None:
            raise st.internal(f'failed to lookup namespace "{attrs.namespace}"')
        policy, errs = found
        if not errs and policy.fully_privileged():
            attrs.annotate(ANNOTATION_ENFORCE_POLICY, str(policy.enforce))
            return
        if attrs.operation == "UPDATE" and not is_significant_pod_update(attrs.obj or {}, attrs.old or {}):
            return
        meta, spec = _meta_spec(attrs.obj)
        self._evaluate(attrs, policy, errs, meta, spec, enforce=True)

    async def _controller(self, attrs: Attributes, path: tuple[str, ...]) -> None:
        if attrs.subresource:
            return
        if attrs.namespace in self.config.exempt_namespaces:
            attrs.annotate(ANNOTATION_EXEMPT, "namespace")
            return
        if attrs.user.name and attrs.user.name in self.config.exempt_usernames:
            attrs.annotate(ANNOTATION_EXEMPT, "user")
            return
        found = await self._namespace_policy(attrs)
        if found is None:
            attrs.annotate(ANNOTATION_ERROR, f'failed to lookup namespace "{attrs.namespace}"')
            return
        policy, errs = found
        if not errs and policy.warn.level == PRIVILEGED and policy.audit.level == PRIVILEGED:
            return
        template = _template(attrs.obj or {}, path)
        if template is None:
            return
        meta, spec = _meta_spec(template)
        self._evaluate(attrs, policy, errs, meta, spec, enforce=False)

    def _evaluate(
        self, attrs: Attributes, policy: Policy, errs: list[FieldError], meta: dict, spec: dict, *, enforce: bool
    ) -> None:
        if self._exempt_runtime_class(spec):
            attrs.annotate(ANNOTATION_EXEMPT, "runtimeClass")
            return
        if errs:
            text = ", ".join(e.message() for e in errs)
            attrs.annotate(ANNOTATION_ERROR, f"Failed to parse policy: {f'[{text}]' if len(errs) > 1 else text}")
        results: dict[LevelVersion, list[checks.Violation]] = {}

        def result(lv: LevelVersion) -> list[checks.Violation]:
            if lv not in results:
                results[lv] = checks.evaluate(lv.level, lv.version, meta, spec)
            return results[lv]

        denied: st.ApiError | None = None
        if enforce:
            attrs.annotate(ANNOTATION_ENFORCE_POLICY, str(policy.enforce))
            violations = result(policy.enforce)
            if violations:
                denied = st.forbidden(
                    attrs.kind.resource,
                    attrs.name,
                    attrs.kind.group,
                    f'violates PodSecurity "{policy.enforce}": {checks.forbidden_detail(violations)}',
                )
        audit = result(policy.audit)
        if audit:
            attrs.annotate(
                ANNOTATION_AUDIT_VIOLATIONS,
                f'would violate PodSecurity "{policy.audit}": {checks.forbidden_detail(audit)}',
            )
        if denied is not None:
            raise denied  # no warnings on a request refused anyway
        warn = result(policy.warn)
        if warn:
            attrs.warn(f'would violate PodSecurity "{policy.warn}": {checks.forbidden_detail(warn)}')
