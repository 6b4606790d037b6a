"""The CustomResourceDefinition kind: defaults, validation with upstream's messages
and field paths, and the strategy the generic store uses for it.

A definition is created with the cleanup finalizer (its objects are deleted before
it goes) and with ``status.storedVersions`` naming its storage version; an update
that changes the storage version adds the new one there.
"""

from __future__ import annotations

from typing import Any

from ..api import names
from ..api import validation as v
from ..registry import admissionregistration
from ..registry.strategy import Strategy
from . import rules, structural

SCOPES = ("Cluster", "Namespaced")
CONVERSION_STRATEGIES = ("None", "Webhook")
# The ConversionReview versions this server sends, in its order of preference.
CONVERSION_REVIEW_VERSIONS = ("v1", "v1beta1")
COLUMN_TYPES = ("integer", "number", "string", "boolean", "date")
COLUMN_FORMATS = ("int32", "int64", "float", "double", "byte", "date", "date-time", "password")


def storage_version(crd: dict) -> str:
    for ver in (crd.get("spec") or {}).get("versions") or ():
        if isinstance(ver, dict) and ver.get("storage"):
            return str(ver.get("name", ""))
    return ""


def set_defaults(crd: dict) -> None:
    """Upstream's defaults for v1: singular and list kind from the kind, conversion None."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    nm = spec.get("names")
    if isinstance(nm, dict):
        kind = nm.get("kind")
        if isinstance(kind, str) and kind:
            nm.setdefault("singular", kind.lower())
            nm.setdefault("listKind", kind + "List")
    conv = spec.get("conversion")
    if conv is None:
        spec["conversion"] = {"strategy": "None"}
    elif isinstance(conv, dict) and not conv.get("strategy"):
        conv["strategy"] = "None"


def _dns1035(value: Any, path: str) -> list[v.FieldError]:
    if not isinstance(value, str):
        return [v.FieldError.type_invalid(path, value, "must be a string")]
    return [v.FieldError.invalid(path, value, p) for p in v.is_dns1035_label(value)]


def validate_names(nm: Any, path: str) -> list[v.FieldError]:
    if not isinstance(nm, dict):
        return [v.FieldError.required(path)]
    errs: list[v.FieldError] = []
    plural = nm.get("plural")
    if not plural:
        errs.append(v.FieldError.required(f"{path}.plural"))
    else:
        errs += _dns1035(plural, f"{path}.plural")
    singular = nm.get("singular")
    if singular:
        errs += _dns1035(singular, f"{path}.singular")
    kind = nm.get("kind")
    if not kind:
        errs.append(v.FieldError.required(f"{path}.kind"))
    elif isinstance(kind, str):
        errs += [v.FieldError.invalid(f"{path}.kind", kind, p) for p in v.is_dns1035_label(kind.lower())]
    list_kind = nm.get("listKind")
    if list_kind is not None:
        if not list_kind:
            errs.append(v.FieldError.required(f"{path}.listKind"))
        elif isinstance(list_kind, str):
            errs += [
                v.FieldError.invalid(f"{path}.listKind", list_kind, p) for p in v.is_dns1035_label(list_kind.lower())
            ]
        if list_kind == kind and kind:
            errs.append(v.FieldError.invalid(f"{path}.listKind", list_kind, "kind and listKind may not be the same"))
    for field in ("shortNames", "categories"):
        items = nm.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            errs.append(v.FieldError.type_invalid(f"{path}.{field}", items, "must be a list of strings"))
            continue
        seen: set[str] = set()
        for i, item in enumerate(items):
            p = f"{path}.{field}[{i}]"
            if field == "shortNames":
                errs += _dns1035(item, p)
            elif not isinstance(item, str) or not item:
                errs.append(v.FieldError.invalid(p, item, "must be a non-empty string"))
            if isinstance(item, str):
                if item in seen:
                    errs.append(v.FieldError.duplicate(p, item))
                seen.add(item)
    return errs


def _validate_columns(columns: Any, path: str) -> list[v.FieldError]:
    errs: list[v.FieldError] = []
    if not isinstance(columns, list):
        return [v.FieldError.type_invalid(path, columns, "must be a list")]
    seen: set[str] = set()
    for i, col in enumerate(columns):
        p = f"{path}[{i}]"
        if not isinstance(col, dict):
            errs.append(v.FieldError.type_invalid(p, col, "must be an object"))
            continue
        name = col.get("name")
        if not name:
            errs.append(v.FieldError.required(f"{p}.name"))
        elif name in seen:
            errs.append(v.FieldError.duplicate(f"{p}.name", name))
        else:
            seen.add(name)
        typ = col.get("type")
        if not typ:
            errs.append(v.FieldError.required(f"{p}.type"))
        elif typ not in COLUMN_TYPES:
            errs.append(v.FieldError.not_supported(f"{p}.type", typ, COLUMN_TYPES))
        fmt = col.get("format")
        if fmt and fmt not in COLUMN_FORMATS:
            errs.append(v.FieldError.not_supported(f"{p}.format", fmt, COLUMN_FORMATS))
        prio = col.get("priority", 0)
        if not isinstance(prio, int) or isinstance(prio, bool) or prio < 0:
            errs.append(v.FieldError.invalid(f"{p}.priority", prio, "must be greater than or equal to 0"))
        jp = col.get("jsonPath")
        if not jp:
            errs.append(v.FieldError.required(f"{p}.jsonPath"))
        elif not isinstance(jp, str) or not _simple_path(jp):
            errs.append(v.FieldError.invalid(f"{p}.jsonPath", jp, "must be a simple json path starting with ."))
    return errs


def _simple_path(jp: str) -> bool:
    inner = jp[1:-1] if jp.startswith("{") and jp.endswith("}") else jp
    return inner.startswith(".") and all(c not in inner for c in "*?()@$") and ".." not in inner


def _validate_subresources(subs: Any, path: str, schema: Any) -> list[v.FieldError]:
    if subs is None:
        return []
    if not isinstance(subs, dict):
        return [v.FieldError.type_invalid(path, subs, "must be an object")]
    errs: list[v.FieldError] = []
    for key in subs:
        if key not in ("status", "scale"):
            errs.append(v.FieldError.forbidden(f"{path}.{key}", f"unknown sub-resource {key!r}"))
    scale = subs.get("scale")
    if scale is not None:
        if not isinstance(scale, dict):
            errs.append(v.FieldError.type_invalid(f"{path}.scale", scale, "must be an object"))
        else:
            for field, prefix in (
                ("specReplicasPath", ".spec."),
                ("statusReplicasPath", ".status."),
                ("labelSelectorPath", ".status."),
            ):
                value = scale.get(field)
                if value is None:
                    if field != "labelSelectorPath":
                        errs.append(v.FieldError.required(f"{path}.scale.{field}"))
                    continue
                if not isinstance(value, str) or not value.startswith(prefix[:-1]) or not _simple_path(value):
                    errs.append(
                        v.FieldError.invalid(
                            f"{path}.scale.{field}", value, f"should be a json path under {prefix[:-1]}"
                        )
                    )
                elif field == "specReplicasPath" and not value.startswith(".spec."):
                    errs.append(
                        v.FieldError.invalid(f"{path}.scale.{field}", value, "should be a json path under .spec")
                    )
    return errs


def validate_spec(crd: dict, old: dict | None = None) -> list[v.FieldError]:
    """Every reason the definition ``crd`` cannot be served (``old``: the stored
    definition, on an update)."""
    errs: list[v.FieldError] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [v.FieldError.required("spec")]
    group = spec.get("group")
    if not group:
        errs.append(v.FieldError.required("spec.group"))
    elif isinstance(group, str):
        errs += [v.FieldError.invalid("spec.group", group, p) for p in v.is_dns1123_subdomain(group)]
        if "." not in group:
            errs.append(v.FieldError.invalid("spec.group", group, "should be a domain with at least one dot"))
    nm = spec.get("names")
    errs += validate_names(nm, "spec.names")
    md = crd.get("metadata") or {}
    if isinstance(nm, dict) and nm.get("plural") and group:
        want = f"{nm.get('plural')}.{group}"
        if md.get("name") != want:
            errs.append(
                v.FieldError.invalid("metadata.name", md.get("name", ""), 'must be spec.names.plural+"."+spec.group')
            )
    scope = spec.get("scope")
    if not scope:
        errs.append(v.FieldError.required("spec.scope"))
    elif scope not in SCOPES:
        errs.append(v.FieldError.not_supported("spec.scope", scope, SCOPES))
    if spec.get("preserveUnknownFields") is True:
        errs.append(
            v.FieldError.invalid(
                "spec.preserveUnknownFields",
                True,
                "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
            )
        )
    conv = spec.get("conversion")
    if isinstance(conv, dict):
        strategy = conv.get("strategy")
        if strategy not in CONVERSION_STRATEGIES:
            errs.append(v.FieldError.not_supported("spec.conversion.strategy", strategy, CONVERSION_STRATEGIES))
        elif strategy == "Webhook":
            errs += _validate_conversion_webhook(conv.get("webhook"))
        elif isinstance(conv.get("webhook"), dict):
            # Upstream checks its internal form, whose paths these are.
            if conv["webhook"].get("clientConfig") is not None:
                errs.append(
                    v.FieldError.forbidden(_CLIENT_CONFIG, "should not be set when strategy is not set to Webhook")
                )
            if conv["webhook"].get("conversionReviewVersions"):
                errs.append(
                    v.FieldError.forbidden(_REVIEW_VERSIONS, "should not be set when strategy is not set to Webhook")
                )
    errs += _validate_versions(spec.get("versions"), rules.stored_rules(old) if old is not None else frozenset())
    return errs


# Where upstream reports a conversion webhook's errors: the paths of its internal form.
_CLIENT_CONFIG = "spec.conversion.webhookClientConfig"
_REVIEW_VERSIONS = "spec.conversion.conversionReviewVersions"


def _validate_conversion_webhook(webhook: Any) -> list[v.FieldError]:
    """``spec.conversion.webhook`` of a definition converting with a webhook: where to call
    (exactly one of url and service) and which ConversionReview versions it understands."""
    webhook = webhook if isinstance(webhook, dict) else {}
    errs: list[v.FieldError] = []
    cc = webhook.get("clientConfig")
    cc_path = _CLIENT_CONFIG
    if not isinstance(cc, dict):
        errs.append(v.FieldError.required(cc_path, "required when strategy is set to Webhook"))
    elif (cc.get("url") is None) == (cc.get("service") is None):
        errs.append(v.FieldError.required(cc_path, "exactly one of url or service is required"))
    elif cc.get("url") is not None:
        errs += admissionregistration.validate_url(str(cc["url"]), f"{cc_path}.url")
    else:
        errs += admissionregistration.validate_service(cc["service"], f"{cc_path}.service")
    versions = webhook.get("conversionReviewVersions")
    vpath = _REVIEW_VERSIONS
    if not isinstance(versions, list) or not versions:
        errs.append(v.FieldError.required(vpath, ""))
        return errs
    seen: set[str] = set()
    for i, ver in enumerate(versions):
        if ver in seen:
            errs.append(v.FieldError.invalid(f"{vpath}[{i}]", ver, "duplicate version"))
            continue
        seen.add(ver)
        errs += [v.FieldError.invalid(f"{vpath}[{i}]", ver, msg) for msg in v.is_dns1035_label(str(ver))]
    if not seen & set(CONVERSION_REVIEW_VERSIONS):
        errs.append(
            v.FieldError.invalid(
                vpath,
                ",".join(str(x) for x in versions),
                f"must include at least one of {', '.join(CONVERSION_REVIEW_VERSIONS)}",
            )
        )
    return errs


def _validate_versions(versions: Any, stored_rules: frozenset[str]) -> list[v.FieldError]:
    errs: list[v.FieldError] = []
    if not versions:
        return [
            v.FieldError.invalid(
                "spec.versions",
                versions if versions is not None else [],
                "must have exactly one version marked as storage version",
            )
        ]
    if not isinstance(versions, list):
        return [v.FieldError.type_invalid("spec.versions", versions, "must be a list")]
    storage = served = 0
    seen: set[str] = set()
    for i, ver in enumerate(versions):
        p = f"spec.versions[{i}]"
        if not isinstance(ver, dict):
            errs.append(v.FieldError.type_invalid(p, ver, "must be an object"))
            continue
        name = ver.get("name")
        if not name:
            errs.append(v.FieldError.required(f"{p}.name"))
        else:
            errs += _dns1035(name, f"{p}.name")
            if name in seen:
                errs.append(v.FieldError.duplicate(f"{p}.name", name))
            seen.add(name)
        storage += 1 if ver.get("storage") is True else 0
        served += 1 if ver.get("served") is True else 0
        for flag in ("served", "storage"):
            if not isinstance(ver.get(flag), bool):
                errs.append(v.FieldError.required(f"{p}.{flag}"))
        schema = (ver.get("schema") or {}).get("openAPIV3Schema") if isinstance(ver.get("schema"), dict) else None
        if schema is None:
            errs.append(v.FieldError.required(f"{p}.schema.openAPIV3Schema", "schemas are required"))
        else:
            errs += structural.validate_schema(schema, f"{p}.schema.openAPIV3Schema", stored_rules)
        errs += _validate_subresources(ver.get("subresources"), f"{p}.subresources", schema)
        if ver.get("additionalPrinterColumns") is not None:
            errs += _validate_columns(ver["additionalPrinterColumns"], f"{p}.additionalPrinterColumns")
        warning = ver.get("deprecationWarning")
        if warning is not None and not ver.get("deprecated"):
            errs.append(
                v.FieldError.invalid(f"{p}.deprecationWarning", warning, "can only be set for deprecated versions")
            )
    if storage != 1:
        errs.append(
            v.FieldError.invalid("spec.versions", versions, "must have exactly one version marked as storage version")
        )
    if served == 0:
        errs.append(v.FieldError.invalid("spec.versions", versions, "must have at least one version marked as served"))
    return errs


def validate_status(crd: dict) -> list[v.FieldError]:
    errs: list[v.FieldError] = []
    status = crd.get("status") or {}
    stored = status.get("storedVersions") or []
    spec_versions = {ver.get("name") for ver in (crd.get("spec") or {}).get("versions") or () if isinstance(ver, dict)}
    for i, name in enumerate(stored):
        if name not in spec_versions:
            errs.append(v.FieldError.invalid(f"status.storedVersions[{i}]", name, "must appear in spec.versions"))
    sv = storage_version(crd)
    if stored and sv and sv not in stored:
        errs.append(v.FieldError.invalid("status.storedVersions", stored, "must have the storage version " + sv))
    return errs


class DefinitionStrategy(Strategy):
    """The generic store's strategy for CustomResourceDefinitions."""

    # A write through the status sub-resource is validated as upstream does: its
    # metadata and status only (the spec is the stored one).
    own_subresources = frozenset({"status"})

    def prepare_for_create(self, obj: dict) -> None:
        super().prepare_for_create(obj)
        set_defaults(obj)
        md = obj["metadata"]
        finalizers = list(md.get("finalizers") or [])
        if names.CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(names.CRD_CLEANUP_FINALIZER)
        md["finalizers"] = finalizers
        sv = storage_version(obj)
        obj["status"] = {
            "conditions": [],
            "acceptedNames": {"plural": "", "kind": ""},
            "storedVersions": [sv] if sv else [],
        }

    def prepare_for_update(self, new: dict, old: dict) -> None:
        super().prepare_for_update(new, old)
        set_defaults(new)
        sv = storage_version(new)
        status = new.setdefault("status", {})
        stored = list(status.get("storedVersions") or [])
        if sv and sv not in stored:
            status["storedVersions"] = stored + [sv]

    def prepare_for_status_update(self, new: dict, old: dict) -> None:
        super().prepare_for_status_update(new, old)
        set_defaults(new)

    def validate(self, obj: dict) -> list[v.FieldError]:
        return super().validate(obj) + validate_spec(obj) + validate_status(obj)

    def validate_update(self, new: dict, old: dict) -> list[v.FieldError]:
        errs = Strategy.validate(self, new) + validate_spec(new, old) + validate_status(new)
        errs = self.without_stored_enum_errors(errs + self._finalizer_update_errors(new, old), old)
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if old_spec.get("scope") and new_spec.get("scope") != old_spec.get("scope"):
            errs.append(v.FieldError.invalid("spec.scope", new_spec.get("scope"), "field is immutable"))
        if old_spec.get("group") and new_spec.get("group") != old_spec.get("group"):
            errs.append(v.FieldError.invalid("spec.group", new_spec.get("group"), "field is immutable"))
        return errs

    def validate_subresource_update(self, subresource: str, new: dict, old: dict) -> list[v.FieldError]:
        return Strategy.validate(self, new) + validate_status(new) + self._finalizer_update_errors(new, old)
