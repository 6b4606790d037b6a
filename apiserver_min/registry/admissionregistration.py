"""The admissionregistration family: webhook configurations, validated as upstream's
v1 validation does (names, rules, client configuration, review versions, timeouts), and
validating admission policies and their bindings."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from .. import cel
from ..api import names
from ..api import validation as v
from ..api.kinds import REGISTRY, KindInfo
from ..api.schema import Struct
from ..api.schemas import schema_for
from ..api.selectors import validate_label_selector
from ..cel import environments
from .strategy import Strategy

ACCEPTED_REVIEW_VERSIONS = ("v1", "v1beta1")
NO_SIDE_EFFECTS = ("None", "NoneOnDryRun")


def _strings(value: Any) -> list:
    return value if isinstance(value, list) else []


def _star_alone(values: list, path: str, what: str) -> list[v.FieldError]:
    if "*" in values and len(values) > 1:
        return [v.FieldError.invalid(path, v.GoValue(_go_slice(values)), f"if '*' is present, must not specify {what}")]
    return []


def _go_slice(values: list) -> str:
    return "[]string{" + ", ".join(v.go_quote(str(x)) for x in values) + "}"


def _resources(resources: list, path: str) -> list[v.FieldError]:
    errs: list[v.FieldError] = []
    if not resources:
        return [v.FieldError.required(path, "")]
    all_resources = "*/*" in resources
    with_star_sub: set[str] = set()
    for i, r in enumerate(resources):
        if not isinstance(r, str) or not r:
            errs.append(v.FieldError.required(f"{path}[{i}]", ""))
            continue
        if all_resources and r != "*/*":
            errs.append(
                v.FieldError.invalid(f"{path}[{i}]", r, "if '*/*' is present, must not specify other resources")
            )
        res, _, sub = r.partition("/")
        if sub == "*":
            with_star_sub.add(res)
    for i, r in enumerate(resources):
        if not isinstance(r, str) or all_resources:
            continue
        res, sep, sub = r.partition("/")
        if sep and sub != "*" and res in with_star_sub:
            errs.append(v.FieldError.invalid(f"{path}[{i}]", r, f"if '{res}/*' is present, must not specify {r}"))
    return errs


def _rule(rule: Any, path: str) -> list[v.FieldError]:
    if not isinstance(rule, dict):
        return [v.FieldError.type_invalid(path, rule, "must be an object")]
    errs: list[v.FieldError] = []
    ops = _strings(rule.get("operations"))
    if not ops:
        errs.append(v.FieldError.required(f"{path}.operations", ""))
    errs += _star_alone(ops, f"{path}.operations", "other operations")
    groups = _strings(rule.get("apiGroups"))
    if not groups:
        errs.append(v.FieldError.required(f"{path}.apiGroups", ""))
    errs += _star_alone(groups, f"{path}.apiGroups", "other API groups")
    versions = _strings(rule.get("apiVersions"))
    if not versions:
        errs.append(v.FieldError.required(f"{path}.apiVersions", ""))
    errs += _star_alone(versions, f"{path}.apiVersions", "other API versions")
    for i, ver in enumerate(versions):
        if not ver:
            errs.append(v.FieldError.required(f"{path}.apiVersions[{i}]", ""))
    errs += _resources(_strings(rule.get("resources")), f"{path}.resources")
    return errs


def _url(url: str, path: str) -> list[v.FieldError]:
    try:
        u = urllib.parse.urlsplit(url)
    except ValueError as exc:
        return [v.FieldError.invalid(path, url, f"url must be a valid URL: {exc}")]
    errs: list[v.FieldError] = []
    if u.scheme != "https":
        errs.append(v.FieldError.invalid(path, u.scheme, "'https' is the only allowed URL scheme"))
    if not u.hostname:
        errs.append(v.FieldError.invalid(path, u.netloc, "host must be specified"))
    if "@" in u.netloc:
        errs.append(
            v.FieldError.invalid(path, u.netloc.rpartition("@")[0], "user information is not permitted in the URL")
        )
    if u.fragment or url.endswith("#"):
        errs.append(v.FieldError.invalid(path, u.fragment, "fragments are not permitted in the URL"))
    if u.query or url.endswith("?"):
        errs.append(v.FieldError.invalid(path, u.query, "query parameters are not permitted in the URL"))
    return errs


def _service(svc: Any, path: str) -> list[v.FieldError]:
    if not isinstance(svc, dict):
        return [v.FieldError.type_invalid(path, svc, "must be an object")]
    errs: list[v.FieldError] = []
    if not svc.get("name"):
        errs.append(v.FieldError.required(f"{path}.name", "service name is required"))
    if not svc.get("namespace"):
        errs.append(v.FieldError.required(f"{path}.namespace", "service namespace is required"))
    p = svc.get("path")
    if isinstance(p, str) and p:
        if not p.startswith("/"):
            errs.append(v.FieldError.invalid(f"{path}.path", p, "must start with a '/'"))
        elif p != "/" and "" in p[1:].split("/"):
            errs.append(v.FieldError.invalid(f"{path}.path", p, "segment[...]: may not be empty"))
    port = svc.get("port")
    if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
        errs.append(
            v.FieldError.invalid(f"{path}.port", port, "port is not valid: must be between 1 and 65535, inclusive")
        )
    return errs


# The client configuration checks, shared with a CustomResourceDefinition's conversion webhook.
validate_url = _url
validate_service = _service


def _review_versions(versions: Any, path: str, require_known: bool) -> list[v.FieldError]:
    versions = _strings(versions)
    if not versions:
        return [v.FieldError.required(path, f"must specify one of {', '.join(ACCEPTED_REVIEW_VERSIONS)}")]
    errs: list[v.FieldError] = []
    seen: set[str] = set()
    for i, ver in enumerate(versions):
        if ver in seen:
            errs.append(v.FieldError.invalid(f"{path}[{i}]", ver, "duplicate version"))
            continue
        seen.add(ver)
        problems = v.is_dns1035_label(str(ver))
        if problems:
            errs.append(v.FieldError.invalid(f"{path}[{i}]", ver, ",".join(problems)))
    if require_known and not any(ver in ACCEPTED_REVIEW_VERSIONS for ver in versions):
        errs.append(
            v.FieldError.invalid(
                path,
                v.GoValue(_go_slice(versions)),
                f"must include at least one of {', '.join(ACCEPTED_REVIEW_VERSIONS)}",
            )
        )
    return errs


def _webhook(hook: Any, path: str, require_known_versions: bool) -> list[v.FieldError]:
    if not isinstance(hook, dict):
        return [v.FieldError.type_invalid(path, hook, "must be an object")]
    errs: list[v.FieldError] = []
    name = hook.get("name")
    if not name:
        errs.append(v.FieldError.required(f"{path}.name", ""))
    else:
        problems = v.is_dns1123_subdomain(str(name))
        if problems:
            errs.append(v.FieldError.invalid(f"{path}.name", name, ",".join(problems)))
        elif len(str(name).split(".")) < 3:
            errs.append(
                v.FieldError.invalid(
                    f"{path}.name", name, "should be a domain with at least three segments separated by dots"
                )
            )
    for i, rule in enumerate(_strings(hook.get("rules"))):
        errs += _rule(rule, f"{path}.rules[{i}]")
    if hook.get("sideEffects") in (None, ""):
        errs.append(v.FieldError.required(f"{path}.sideEffects", f"must specify one of {', '.join(NO_SIDE_EFFECTS)}"))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= 30):
        errs.append(
            v.FieldError.invalid(
                f"{path}.timeoutSeconds", timeout, "the timeout value must be between 1 and 30 seconds"
            )
        )
    for sel in ("namespaceSelector", "objectSelector"):
        if hook.get(sel) is not None:
            errs += validate_label_selector(hook.get(sel), f"{path}.{sel}")
    errs += _review_versions(
        hook.get("admissionReviewVersions"), f"{path}.admissionReviewVersions", require_known_versions
    )
    cc = hook.get("clientConfig")
    cc = cc if isinstance(cc, dict) else {}
    has_url, has_service = cc.get("url") not in (None, ""), cc.get("service") is not None
    if has_url == has_service:
        errs.append(v.FieldError.required(f"{path}.clientConfig", "exactly one of url or service is required"))
    elif has_url:
        errs += _url(str(cc["url"]), f"{path}.clientConfig.url")
    else:
        errs += _service(cc["service"], f"{path}.clientConfig.service")
    errs += _validate_match_conditions(
        hook.get("matchConditions"), f"{path}.matchConditions", environments.webhook_match_compiler()
    )
    return errs


def validate_webhooks(obj: dict, old: dict | None = None) -> list[v.FieldError]:
    hooks = _strings(obj.get("webhooks"))
    old_hooks = _strings((old or {}).get("webhooks"))
    # On update, what the stored object already did wrong may stay (as upstream).
    require_known = not any(
        isinstance(h, dict)
        and not any(x in ACCEPTED_REVIEW_VERSIONS for x in _strings(h.get("admissionReviewVersions")))
        for h in old_hooks
    )
    old_names = [h.get("name") for h in old_hooks if isinstance(h, dict)]
    require_unique = len(old_names) == len(set(old_names))
    errs: list[v.FieldError] = []
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        errs += _webhook(hook, f"webhooks[{i}]", require_known)
        name = hook.get("name") if isinstance(hook, dict) else None
        if isinstance(name, str) and name:
            if name in seen and require_unique:
                errs.append(v.FieldError.duplicate(f"webhooks[{i}].name", name))
            seen.add(name)
    return errs


class WebhookConfigurationStrategy(Strategy):
    """Validating and mutating webhook configurations. A new webhook must declare no
    side effects (``None`` or ``NoneOnDryRun``); a configuration stored with a
    webhook that has side effects may keep them on update, as upstream allows."""

    SIDE_EFFECTS = ("None", "NoneOnDryRun", "Some", "Unknown")

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + validate_webhooks(obj)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = self.without_stored_enum_errors(
            Strategy.validate(self, new) + validate_webhooks(new, old) + self._finalizer_update_errors(new, old), old
        )
        hooks = old.get("webhooks")
        if not isinstance(hooks, list):
            hooks = []
        if any(isinstance(h, dict) and h.get("sideEffects") not in (None, "None", "NoneOnDryRun") for h in hooks):
            errs = [
                e
                for e in errs
                if not (
                    e.type == v.FIELD_VALUE_NOT_SUPPORTED
                    and e.field.endswith(".sideEffects")
                    and e.value in self.SIDE_EFFECTS
                )
            ]
        return errs


# --- validating admission policies and their bindings -------------------------------------

_REASONS = ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
_CEL_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def _compile_errors(
    compiler: cel.Compiler, expression: Any, path: str, *, want: str | None = None
) -> tuple[list[v.FieldError], cel.Program | None]:
    """Compile ``expression`` for the field ``path``: a required/invalid/forbidden
    error as upstream words them, or the program."""
    if not isinstance(expression, str) or not expression.strip():
        return [v.FieldError.required(path, "")], None
    try:
        program = compiler.compile(expression)
    except cel.CompileError as exc:
        if exc.cost_exceeded:
            return [v.FieldError.forbidden(path, exc.detail)], None
        return [v.FieldError.invalid(path, expression, f"compilation failed: {exc.detail}")], None
    if want is not None:
        result = program.result_type
        if result not in (want, "dyn"):
            detail = {"bool": "must evaluate to bool", "string": "must evaluate to string"}[want]
            return [v.FieldError.invalid(path, expression, f"compilation failed: {detail}")], None
    return [], program


def _validate_rules(rules: Any, path: str) -> list[v.FieldError]:
    errs: list[v.FieldError] = []
    if not isinstance(rules, list):
        return errs
    for i, rule in enumerate(rules):
        p = f"{path}[{i}]"
        if not isinstance(rule, dict):
            continue
        for name in ("operations", "apiGroups", "apiVersions", "resources"):
            values = rule.get(name)
            if not values:
                errs.append(v.FieldError.required(f"{p}.{name}", ""))
            elif isinstance(values, list) and "*" in values and len(values) > 1:
                errs.append(
                    v.FieldError.invalid(f"{p}.{name}", values, "if '*' is present, must not specify other values")
                )
        for j, res in enumerate(rule.get("resources") or []):
            if not isinstance(res, str) or not res:
                errs.append(v.FieldError.required(f"{p}.resources[{j}]", ""))
            elif "/" in res and res.split("/", 1)[0] != "*" and "*" in res.split("/", 1)[0]:
                errs.append(
                    v.FieldError.invalid(f"{p}.resources[{j}]", res, "resource must not contain '*' unless it is '*'")
                )
        names = rule.get("resourceNames") or []
        if len(set(names)) != len(names):
            errs.append(v.FieldError.duplicate(f"{p}.resourceNames", names))
    return errs


def _validate_match_resources(match: Any, path: str, *, required: bool) -> list[v.FieldError]:
    errs: list[v.FieldError] = []
    if not isinstance(match, dict):
        if required:
            errs.append(v.FieldError.required(f"{path}.resourceRules", ""))
        return errs
    if required and not match.get("resourceRules"):
        errs.append(v.FieldError.required(f"{path}.resourceRules", ""))
    errs += _validate_rules(match.get("resourceRules"), f"{path}.resourceRules")
    errs += _validate_rules(match.get("excludeResourceRules"), f"{path}.excludeResourceRules")
    for name in ("namespaceSelector", "objectSelector"):
        sel = match.get(name)
        if isinstance(sel, dict):
            errs += validate_label_selector(sel, f"{path}.{name}")
    return errs


MAX_MATCH_CONDITIONS = 64


def _validate_match_conditions(conditions: Any, path: str, compiler: cel.Compiler) -> list[v.FieldError]:
    """A policy's or a webhook's ``matchConditions``: at most 64, each named by a
    qualified name unique in the list, each expression compiled for ``compiler``'s
    variables to a boolean within the cost limit."""
    errs: list[v.FieldError] = []
    seen: set[str] = set()
    if isinstance(conditions, list) and len(conditions) > MAX_MATCH_CONDITIONS:
        errs.append(
            v.FieldError(
                v.FIELD_VALUE_TOO_MANY, path, len(conditions), f"must have at most {MAX_MATCH_CONDITIONS} items"
            )
        )
    for i, cond in enumerate(conditions if isinstance(conditions, list) else []):
        p = f"{path}[{i}]"
        if not isinstance(cond, dict):
            continue
        name = cond.get("name")
        if not name:
            errs.append(v.FieldError.required(f"{p}.name", ""))
        else:
            for msg in v.is_qualified_name(name):
                errs.append(v.FieldError.invalid(f"{p}.name", name, msg))
            if name in seen:
                errs.append(v.FieldError.duplicate(f"{p}.name", name))
            seen.add(name)
        errs += _compile_errors(compiler, cond.get("expression"), f"{p}.expression", want="bool")[0]
    return errs


class ValidatingAdmissionPolicyStrategy(Strategy):
    """Policies: every expression is compiled when the policy is written (a syntax
    error, an undeclared name or a cost over the limit refuses the write); the status
    (``observedGeneration`` and ``typeChecking``) is written with each new generation."""

    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return errs + [v.FieldError.required("spec.matchConstraints.resourceRules", "")]
        param_kind = spec.get("paramKind")
        if isinstance(param_kind, dict):
            api_version = param_kind.get("apiVersion")
            if not api_version:
                errs.append(v.FieldError.required("spec.paramKind.apiVersion", ""))
            elif api_version.count("/") > 1:
                errs.append(
                    v.FieldError.invalid(
                        "spec.paramKind.apiVersion", api_version, "apiVersion must be in the format of group/version"
                    )
                )
            if not param_kind.get("kind"):
                errs.append(v.FieldError.required("spec.paramKind.kind", ""))
        compiler = environments.policy_compiler(isinstance(param_kind, dict))
        errs += _validate_match_resources(spec.get("matchConstraints"), "spec.matchConstraints", required=True)
        validations = spec.get("validations") or []
        audits = spec.get("auditAnnotations") or []
        if not validations and not audits:
            errs.append(
                v.FieldError.required(
                    "spec.validations", "validations or auditAnnotations must contain at least one item"
                )
            )
        errs += _validate_match_conditions(spec.get("matchConditions"), "spec.matchConditions", compiler)
        seen_vars: set[str] = set()
        for i, var in enumerate(spec.get("variables") or []):
            p = f"spec.variables[{i}]"
            if not isinstance(var, dict):
                continue
            name = var.get("name")
            if not name:
                errs.append(v.FieldError.required(f"{p}.name", ""))
            elif not isinstance(name, str) or not _CEL_IDENT.fullmatch(name):
                errs.append(v.FieldError.invalid(f"{p}.name", name, "name is not a valid CEL identifier"))
            elif name in seen_vars:
                errs.append(v.FieldError.duplicate(f"{p}.name", name))
            else:
                seen_vars.add(name)
            errs += _compile_errors(compiler, var.get("expression"), f"{p}.expression")[0]
        for i, val in enumerate(validations):
            p = f"spec.validations[{i}]"
            if not isinstance(val, dict):
                continue
            errs += _compile_errors(compiler, val.get("expression"), f"{p}.expression", want="bool")[0]
            message = val.get("message")
            if isinstance(message, str):
                if "\n" in message:
                    errs.append(v.FieldError.invalid(f"{p}.message", message, "message must not contain line breaks"))
                elif message and not message.strip():
                    errs.append(v.FieldError.invalid(f"{p}.message", message, "message must be non-empty if specified"))
            reason = val.get("reason")
            if reason is not None and reason not in _REASONS:
                errs.append(v.FieldError.not_supported(f"{p}.reason", reason, _REASONS))
            if val.get("messageExpression"):
                errs += _compile_errors(compiler, val["messageExpression"], f"{p}.messageExpression", want="string")[0]
        seen_keys: set[str] = set()
        policy_name = (obj.get("metadata") or {}).get("name") or ""
        for i, audit in enumerate(audits):
            p = f"spec.auditAnnotations[{i}]"
            if not isinstance(audit, dict):
                continue
            key = audit.get("key")
            if not key:
                errs.append(v.FieldError.required(f"{p}.key", ""))
            else:
                for msg in v.is_qualified_name(f"{policy_name}/{key}"):
                    errs.append(v.FieldError.invalid(f"{p}.key", key, msg))
                if key in seen_keys:
                    errs.append(v.FieldError.duplicate(f"{p}.key", key))
                seen_keys.add(key)
            errs += _compile_errors(compiler, audit.get("valueExpression"), f"{p}.valueExpression")[0]
        return errs

    def initial_status(self, obj: dict) -> dict | None:
        return type_check_status(obj)

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        if new["metadata"].get("generation") != old["metadata"].get("generation"):
            # As upstream: the type check of the new generation replaces ``observedGeneration``
            # and ``typeChecking``; what else the status holds (``conditions``, which the
            # server itself never writes) is kept.
            kept = new.get("status")
            new["status"] = {**(kept if isinstance(kept, dict) else {}), **type_check_status(new)}


def type_check_status(policy: dict) -> dict:
    """The status of a policy at its generation: ``typeChecking.expressionWarnings``
    for fields of ``object``/``oldObject`` the expressions read that the matched
    kinds do not declare (the kinds named exactly in ``matchConstraints``), and for
    fields of ``request`` an admission request does not have."""
    spec = policy.get("spec") or {}
    kinds = _matched_kinds(spec.get("matchConstraints"))
    warnings: list[dict] = []
    entries = [
        (f"spec.validations[{i}].expression", x.get("expression"))
        for i, x in enumerate(spec.get("validations") or [])
        if isinstance(x, dict)
    ]
    entries += [
        (f"spec.validations[{i}].messageExpression", x.get("messageExpression"))
        for i, x in enumerate(spec.get("validations") or [])
        if isinstance(x, dict) and x.get("messageExpression")
    ]
    entries += [
        (f"spec.auditAnnotations[{i}].valueExpression", x.get("valueExpression"))
        for i, x in enumerate(spec.get("auditAnnotations") or [])
        if isinstance(x, dict)
    ]
    for field_ref, expression in entries:
        if not isinstance(expression, str):
            continue
        paths = cel.read_paths(expression, ("object", "oldObject", "request"))
        problems = [
            f"ERROR: undefined field '{missing}' in request.{'.'.join(path)}"
            for path in sorted(paths.get("request", ()))
            if (missing := _undefined_request_field(path))
        ]
        for kind in kinds:
            schema = schema_for(kind.group, kind.version, kind.kind)
            for var in ("object", "oldObject"):
                for path in sorted(paths.get(var, ())):
                    missing = _undefined_field(schema, path)
                    if missing:
                        problems.append(
                            f"{kind.api_version}, Kind={kind.kind}: undefined field '{missing}' in {var}.{'.'.join(path)}"
                        )
        if problems:
            warnings.append({"fieldRef": field_ref, "warning": "\n".join(problems)})
    status: dict[str, Any] = {"observedGeneration": (policy.get("metadata") or {}).get("generation", 1)}
    status["typeChecking"] = {"expressionWarnings": warnings} if warnings else {}
    return status


# The ``request`` variable is typed (an admission request): its fields and theirs.
_GVK = frozenset({"group", "version", "kind"})
_GVR = frozenset({"group", "version", "resource"})
_REQUEST_FIELDS: dict[str, frozenset[str] | None] = {
    "kind": _GVK,
    "resource": _GVR,
    "subResource": None,
    "requestKind": _GVK,
    "requestResource": _GVR,
    "requestSubResource": None,
    "name": None,
    "namespace": None,
    "operation": None,
    "userInfo": frozenset({"username", "uid", "groups", "extra"}),
    "dryRun": None,
    "options": None,
}


def _undefined_request_field(path: tuple[str, ...]) -> str | None:
    if not path:
        return None
    if path[0] not in _REQUEST_FIELDS:
        return path[0]
    inner = _REQUEST_FIELDS[path[0]]
    if inner is not None and len(path) > 1 and path[1] not in inner:
        return path[1]
    return None


def _matched_kinds(match: Any) -> list[KindInfo]:
    out: list[KindInfo] = []
    if not isinstance(match, dict):
        return out
    for rule in match.get("resourceRules") or []:
        if not isinstance(rule, dict):
            continue
        groups, versions, resources = (
            rule.get("apiGroups") or [],
            rule.get("apiVersions") or [],
            rule.get("resources") or [],
        )
        if "*" in groups or "*" in versions or "*" in resources:
            continue  # wildcards: upstream does not type-check these either
        for g in groups:
            for ver in versions:
                for r in resources:
                    kind = REGISTRY.by_resource(g, ver, r) or REGISTRY.by_resource(
                        names.GROUP_ALIASES.get(g, g), ver, r
                    )
                    if kind is not None and kind not in out:
                        out.append(kind)
    return out


def _undefined_field(schema: Any, path: tuple[str, ...]) -> str | None:
    """The first name of ``path`` the schema does not declare (None: all declared, or
    the path leaves the typed part)."""
    node = schema
    for name in path:
        if isinstance(node, Struct):
            field = node.field(name)
            if field is None:
                if name in ("apiVersion", "kind") and node is schema:
                    return None
                return name
            node = field.type
        else:
            return None  # a map, list or scalar: keys are not declared
    return None


class ValidatingAdmissionPolicyBindingStrategy(Strategy):
    ACTIONS = ("Deny", "Warn", "Audit")

    def validate(self, obj: dict) -> list[v.FieldError]:
        errs = super().validate(obj)
        spec = obj.get("spec")
        spec = spec if isinstance(spec, dict) else {}
        if not spec.get("policyName"):
            errs.append(v.FieldError.required("spec.policyName", ""))
        else:
            for msg in v.is_dns1123_subdomain(spec["policyName"]):
                errs.append(v.FieldError.invalid("spec.policyName", spec["policyName"], msg))
        ref = spec.get("paramRef")
        if isinstance(ref, dict):
            has_name, has_selector = bool(ref.get("name")), ref.get("selector") is not None
            if has_name and has_selector:
                errs.append(v.FieldError.forbidden("spec.paramRef.name", "name and selector are mutually exclusive"))
            elif not has_name and not has_selector:
                errs.append(v.FieldError.required("spec.paramRef", "one of name or selector must be specified"))
            if has_name:
                for msg in v.is_dns1123_subdomain(ref["name"]):
                    errs.append(v.FieldError.invalid("spec.paramRef.name", ref["name"], msg))
            if ref.get("namespace"):
                for msg in v.is_dns1123_label(ref["namespace"]):
                    errs.append(v.FieldError.invalid("spec.paramRef.namespace", ref["namespace"], msg))
            if isinstance(ref.get("selector"), dict):
                errs += validate_label_selector(ref["selector"], "spec.paramRef.selector")
            if ref.get("parameterNotFoundAction") is None:
                errs.append(v.FieldError.required("spec.paramRef.parameterNotFoundAction", ""))
        errs += _validate_match_resources(spec.get("matchResources"), "spec.matchResources", required=False)
        actions = spec.get("validationActions") or []
        if not actions:
            errs.append(v.FieldError.required("spec.validationActions", "at least one validation action is required"))
        seen: set[str] = set()
        for i, action in enumerate(actions):
            if action in seen:
                errs.append(v.FieldError.duplicate(f"spec.validationActions[{i}]", action))
            seen.add(action)
        if {"Deny", "Warn"} <= seen:
            errs.append(
                v.FieldError.invalid(
                    "spec.validationActions",
                    actions,
                    'must not contain both "Deny" and "Warn" (repeating the same validation failure information in the API response and headers serves no purpose)',
                )
            )
        return errs
