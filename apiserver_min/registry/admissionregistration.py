"""The admissionregistration family: webhook configurations, validated as upstream's
v1 validation does (names, rules, client configuration, review versions, timeouts)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from ..api import validation as v
from ..api.selectors import validate_label_selector
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
    if hook.get("matchConditions"):
        errs.append(
            v.FieldError.forbidden(
                f"{path}.matchConditions",
                "not supported by this server yet (match conditions need the rule expression engine); "
                "remove the field or use namespaceSelector, objectSelector and rules",
            )
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
