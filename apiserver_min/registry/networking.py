"""The networking family: Ingress and IngressClass (``networking.orch.io/v1``).

The rules and their wording are upstream's (v1.27): paths by type, hosts as DNS
subdomains or ``*.``-wildcards (never IP addresses), a backend that is exactly one
of a service (with a port name or number) and a resource, a default backend when
there are no rules, TLS hosts and secret names, the class name, and on create the
legacy class annotation agreeing with ``ingressClassName``. An update keeps
accepting the kinds of invalid data upstream once stored (invalid TLS secret
names, invalid rules under wildcard hosts) when the old object already had them.
Status writes check only ``status.loadBalancer``.

IngressClass: ``controller`` a domain-prefixed path of at most 250 characters and
immutable; ``parameters`` a reference with ``kind`` and ``name``, ``scope``
``Cluster`` or ``Namespace`` and ``namespace`` set exactly for ``Namespace``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ..admission.chain import warn
from ..api import names, podvalidation
from ..api import validation as v
from ..api.validation import FieldError
from .strategy import Strategy

PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")
INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
INVALID_PATH_SUFFIXES = ("/..", "/.")
PARAMETERS_SCOPES = ("Cluster", "Namespace")
MAX_CONTROLLER_LENGTH = 250
DEPRECATED_CLASS_ANNOTATION_WARNING = (
    f"annotation {v.go_quote(names.ANNOTATION_INGRESS_CLASS)} is deprecated, please use 'spec.ingressClassName' instead"
)


_DOTTED_QUAD = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


def _is_ip(value: str) -> bool:
    """An IPv4 or IPv6 address, IPv4 parts with leading zeros included (upstream's
    sloppy parse reads ``010.0.0.1`` as an address, where Python refuses it)."""
    if _DOTTED_QUAD.fullmatch(value):
        return all(int(part) <= 255 for part in value.split("."))
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


# --- Ingress ------------------------------------------------------------------------------------


def host_errors(host: str, path: str) -> list[FieldError]:
    """A rule or TLS host: a DNS subdomain, or ``*.`` and a subdomain."""
    if "*" in host:
        return [FieldError.invalid(path, host, m) for m in v.is_wildcard_dns1123_subdomain(host)]
    return [FieldError.invalid(path, host, m) for m in v.is_dns1123_subdomain(host)]


def typed_reference_errors(ref: dict, path: str) -> list[FieldError]:
    """A TypedLocalObjectReference (a resource backend, and the first fields of a
    class's parameters)."""
    errs: list[FieldError] = []
    group = ref.get("apiGroup")
    if isinstance(group, str):
        errs += [FieldError.invalid(f"{path}.apiGroup", group, m) for m in v.is_dns1123_subdomain(group)]
    for field in ("kind", "name"):
        value = _str(ref.get(field))
        if not value:
            errs.append(FieldError.required(f"{path}.{field}", f"{field} is required"))
        else:
            errs += [FieldError.invalid(f"{path}.{field}", value, m) for m in v.is_valid_path_segment_name(value)]
    return errs


def backend_errors(backend: dict, path: str) -> list[FieldError]:
    """Exactly one of ``service`` (a name and a port name or number) and ``resource``."""
    service, resource = backend.get("service"), backend.get("resource")
    if service is not None and resource is not None:
        return [FieldError.invalid(path, "", "cannot set both resource and service backends")]
    if resource is not None:
        return typed_reference_errors(_dict(resource), f"{path}.resource")
    if service is None:
        return [FieldError.invalid(path, "", "resource or service backend is required")]
    service = _dict(service)
    errs: list[FieldError] = []
    name = _str(service.get("name"))
    if not name:
        errs.append(FieldError.required(f"{path}.service.name"))
    else:
        errs += [FieldError.invalid(f"{path}.service.name", name, m) for m in v.is_dns1035_label(name)]
    port = _dict(service.get("port"))
    port_name = _str(port.get("name"))
    number = port.get("number")
    has_number = isinstance(number, int) and not isinstance(number, bool) and number != 0
    if port_name and has_number:
        errs.append(FieldError.invalid(path, "", "cannot set both port name & port number"))
    elif port_name:
        errs += [
            FieldError.invalid(f"{path}.service.port.name", port_name, m)
            for m in podvalidation.is_valid_port_name(port_name)
        ]
    elif has_number:
        assert isinstance(number, int)
        if not 1 <= number <= 65535:
            errs.append(
                FieldError.invalid(f"{path}.service.port.number", number, "must be between 1 and 65535, inclusive")
            )
    else:
        errs.append(FieldError.required(path, "port name or number is required"))
    return errs


def http_path_errors(item: dict, path: str) -> list[FieldError]:
    """One HTTPIngressPath. A missing or unknown ``pathType`` is reported by the
    enumeration checks (``Required value: pathType must be specified``, ``Unsupported
    value``); as upstream, a path without a type is not checked further."""
    path_type = item.get("pathType")
    if path_type is None:
        return []
    errs: list[FieldError] = []
    value = _str(item.get("path"))
    if path_type in ("Exact", "Prefix"):
        if not value.startswith("/"):
            errs.append(FieldError.invalid(f"{path}.path", value, "must be an absolute path"))
        if value:
            for seq in INVALID_PATH_SEQUENCES:
                if seq in value:
                    errs.append(FieldError.invalid(f"{path}.path", value, f"must not contain '{seq}'"))
            for suffix in INVALID_PATH_SUFFIXES:
                if value.endswith(suffix):
                    errs.append(FieldError.invalid(f"{path}.path", value, f"cannot end with '{suffix}'"))
    elif path_type == "ImplementationSpecific":
        if value and not value.startswith("/"):
            errs.append(FieldError.invalid(f"{path}.path", value, "must be an absolute path"))
    return errs + backend_errors(_dict(item.get("backend")), f"{path}.backend")


def rule_value_errors(rule: dict, path: str) -> list[FieldError]:
    http = rule.get("http")
    if http is None:
        return []
    paths = _list(_dict(http).get("paths"))
    errs: list[FieldError] = []
    if not paths:
        errs.append(FieldError.required(f"{path}.http.paths"))
    for i, item in enumerate(paths):
        errs += http_path_errors(_dict(item), f"{path}.http.paths[{i}]")
    return errs


def rules_errors(rules: list, path: str, allow_invalid_wildcard_rules: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, rule in enumerate(rules):
        rule = _dict(rule)
        host = _str(rule.get("host"))
        wildcard = False
        if host:
            if _is_ip(host):
                errs.append(FieldError.invalid(f"{path}[{i}].host", host, "must be a DNS name, not an IP address"))
            wildcard = "*" in host
            errs += host_errors(host, f"{path}[{i}].host")
        if not (wildcard and allow_invalid_wildcard_rules):
            errs += rule_value_errors(rule, f"{path}[{i}]")
    return errs


def _secret_name_problems(name: str) -> list[str]:
    return v.is_dns1123_subdomain(name) if name else []


def tls_errors(tls: list, path: str, allow_invalid_secret_name: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, entry in enumerate(tls):
        entry = _dict(entry)
        for j, host in enumerate(_list(entry.get("hosts"))):
            if isinstance(host, str):
                errs += host_errors(host, f"{path}[{i}].hosts[{j}]")
        if not allow_invalid_secret_name:
            secret = _str(entry.get("secretName"))
            errs += [FieldError.invalid(f"{path}[{i}].secretName", secret, m) for m in _secret_name_problems(secret)]
    return errs


def ingress_spec_errors(
    spec: dict, allow_invalid_secret_name: bool = False, allow_invalid_wildcard_rules: bool = False
) -> list[FieldError]:
    errs: list[FieldError] = []
    rules = _list(spec.get("rules"))
    backend = spec.get("defaultBackend")
    if not rules and backend is None:
        # Upstream prints its typed Go value here.
        shown = v.GoValue(
            "[]networking.IngressRule{}" if isinstance(spec.get("rules"), list) else "[]networking.IngressRule(nil)"
        )
        errs.append(FieldError.invalid("spec", shown, "either `defaultBackend` or `rules` must be specified"))
    if backend is not None:
        errs += backend_errors(_dict(backend), "spec.defaultBackend")
    if rules:
        errs += rules_errors(rules, "spec.rules", allow_invalid_wildcard_rules)
    tls = _list(spec.get("tls"))
    if tls:
        errs += tls_errors(tls, "spec.tls", allow_invalid_secret_name)
    class_name = spec.get("ingressClassName")
    if isinstance(class_name, str):
        errs += [FieldError.invalid("spec.ingressClassName", class_name, m) for m in v.is_dns1123_subdomain(class_name)]
    return errs


def load_balancer_status_errors(obj: dict) -> list[FieldError]:
    """``status.loadBalancer.ingress``: IPs that parse, host names that are DNS names."""
    errs: list[FieldError] = []
    entries = _list(_dict(_dict(obj.get("status")).get("loadBalancer")).get("ingress"))
    for i, entry in enumerate(entries):
        entry = _dict(entry)
        path = f"status.loadBalancer.ingress[{i}]"
        ip, host = _str(entry.get("ip")), _str(entry.get("hostname"))
        if ip and not _is_ip(ip):
            errs.append(FieldError.invalid(f"{path}.ip", ip, "must be a valid IP address"))
        if host:
            errs += [FieldError.invalid(f"{path}.hostname", host, m) for m in v.is_dns1123_subdomain(host)]
            if _is_ip(host):
                errs.append(FieldError.invalid(f"{path}.hostname", host, "must be a DNS name, not an IP address"))
    return errs


def _allow_invalid_secret_name(old: dict) -> bool:
    tls = _list(_dict(old.get("spec")).get("tls"))
    return any(_secret_name_problems(_str(_dict(t).get("secretName"))) for t in tls)


def _allow_invalid_wildcard_rules(old: dict) -> bool:
    for rule in _list(_dict(old.get("spec")).get("rules")):
        rule = _dict(rule)
        if "*" in _str(rule.get("host")) and rule_value_errors(rule, ""):
            return True
    return False


class IngressStrategy(Strategy):
    def validate(self, obj: dict) -> list[FieldError]:
        """Create's checks (the store calls this once per create; updates have their own)."""
        errs = super().validate(obj) + ingress_spec_errors(_dict(obj.get("spec")))
        annotations = _dict(_dict(obj.get("metadata")).get("annotations"))
        if names.ANNOTATION_INGRESS_CLASS in annotations:
            warn(DEPRECATED_CLASS_ANNOTATION_WARNING)
        class_name = _dict(obj.get("spec")).get("ingressClassName")
        annotated = annotations.get(names.ANNOTATION_INGRESS_CLASS)
        if annotated is not None and isinstance(class_name, str) and annotated != class_name:
            errs.append(
                FieldError.invalid(
                    f"annotations.{names.ANNOTATION_INGRESS_CLASS}",
                    annotated,
                    "must match `ingressClassName` when both are specified",
                )
            )
        return errs

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        errs = self.validate_metadata(new) + self.validate_enums(new) + self._finalizer_update_errors(new, old)
        # A status write leaves the spec as stored alone (upstream checks only the status there).
        if new.get("spec") != old.get("spec") or new.get("status") == old.get("status"):
            errs += ingress_spec_errors(
                _dict(new.get("spec")), _allow_invalid_secret_name(old), _allow_invalid_wildcard_rules(old)
            )
        if new.get("status") != old.get("status"):
            errs += load_balancer_status_errors(new)
        return self.without_stored_enum_errors(errs, old)


# --- IngressClass -------------------------------------------------------------------------------


def parameters_errors(params: dict, path: str) -> list[FieldError]:
    errs = typed_reference_errors(params, path)
    scope = params.get("scope")
    if scope is None:
        errs.append(FieldError.required(f"{path}.scope"))
        return errs
    if scope not in PARAMETERS_SCOPES:
        errs.append(FieldError.not_supported(f"{path}.scope", scope, PARAMETERS_SCOPES))
        return errs
    namespace = params.get("namespace")
    if scope == "Namespace":
        if namespace is None:
            errs.append(FieldError.required(f"{path}.namespace", "`parameters.scope` is set to 'Namespace'"))
        else:
            ns = _str(namespace)
            errs += [FieldError.invalid(f"{path}.namespace", ns, m) for m in v.is_dns1123_label(ns)]
    elif namespace is not None:
        errs.append(FieldError.forbidden(f"{path}.namespace", "`parameters.scope` is set to 'Cluster'"))
    return errs


def ingress_class_spec_errors(spec: dict) -> list[FieldError]:
    errs: list[FieldError] = []
    controller = _str(spec.get("controller"))
    if len(controller) > MAX_CONTROLLER_LENGTH:
        errs.append(FieldError.too_long("spec.controller", controller, MAX_CONTROLLER_LENGTH))
    errs += v.validate_domain_prefixed_path("spec.controller", controller)
    params = spec.get("parameters")
    if params is not None:
        errs += parameters_errors(_dict(params), "spec.parameters")
    return errs


class IngressClassStrategy(Strategy):
    def validate(self, obj: dict) -> list[FieldError]:
        return super().validate(obj) + ingress_class_spec_errors(_dict(obj.get("spec")))

    def validate_update(self, new: dict, old: dict) -> list[FieldError]:
        errs: list[FieldError] = []
        controller, old_controller = _dict(new.get("spec")).get("controller"), _dict(old.get("spec")).get("controller")
        if controller != old_controller:
            errs.append(FieldError.invalid("spec.controller", controller, "field is immutable"))
        return errs + super().validate_update(new, old)
