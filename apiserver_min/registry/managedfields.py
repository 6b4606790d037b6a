"""Field ownership (``metadata.managedFields``) and server-side apply.

Every write records who set which fields. Non-apply writes (create, update,
merge/JSON/strategic patch) go through :func:`record_update`, called once by the
generic store after defaulting: the writer's ``Update`` entry gains every field
the write added or changed, other managers lose those fields and every removed
one, and managers left owning nothing disappear; beyond ten Update entries the
oldest are merged into one named ``ancient-changes`` (:func:`cap_update_managers`,
upstream's capManagersManager). Server-side apply
(:func:`apply`, wired by :func:`apply_request`) merges the applier's partial
object into the live one by the kind schema, removes what the applier stopped
applying when nobody else owns it, and refuses to change fields other managers
own unless forced (409 ``Conflict`` naming each field and manager, in upstream's
wording).

Entry identity follows upstream: an ``Apply`` entry is one per (manager,
subresource); an ``Update`` entry one per (manager, apiVersion, subresource).
Fields every object has (name, uid, resourceVersion, ...) are never owned, nor
``status`` through the main resource of a kind with a status sub-resource, nor
``spec`` through that sub-resource (upstream's reset fields).

``managedFields`` sent with a non-apply write replace the stored ones when they
decode; ones that do not decode, an empty list, or an absent field keep the
stored ones (clients unaware of the field must not wipe it); a list holding one
empty object resets ownership, the writer then owning what it changed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from typing import Any, Awaitable, Callable

import orjson

from ..api import codec
from ..api import status as st
from ..api.jsonschema import kind_struct
from ..api.kinds import KindInfo
from ..api.schema import Struct
from ..api.schemas import schema_for
from ..api.timeutil import TimestampError, format_rfc3339, parse_rfc3339_ns
from . import fieldpath as fp

__all__ = [
    "APPLY",
    "UPDATE",
    "FIELDS_TYPE",
    "ManagerEntry",
    "decode_entries",
    "encode_entries",
    "record_update",
    "apply",
    "apply_request",
    "conflict_error",
    "manager_from_user_agent",
    "cap_update_managers",
    "manager_identifier",
    "MAX_UPDATE_MANAGERS",
    "ANCIENT_CHANGES",
]

APPLY = "Apply"
UPDATE = "Update"
FIELDS_TYPE = "FieldsV1"
FIELD_MANAGER_MAX_LENGTH = 128
# Upstream's cap on Update entries (DefaultMaxUpdateManagers) and the name of the
# entry the oldest ones are merged into (capmanagers.go).
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"

# Never owned: upstream's stripped metadata.
_STRIPPED_TOP = ("f:apiVersion", "f:kind")
_STRIPPED_META = frozenset(
    "f:" + n
    for n in (
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    )
)


@dataclasses.dataclass
class ManagerEntry:
    manager: str
    operation: str
    api_version: str
    time: str | None
    fields: dict
    subresource: str = ""

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.manager, self.operation, self.subresource, "" if self.operation == APPLY else self.api_version)

    def encode(self) -> dict:
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = FIELDS_TYPE
        out["fieldsV1"] = self.fields
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def describe(self) -> str:
        """How a conflict names this manager (upstream printManager)."""
        text = _go_quote(self.manager)
        if self.subresource:
            text += f" with subresource {_go_quote(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text


def _go_quote(s: str) -> str:
    return orjson.dumps(s).decode()


_MANAGERS_BY_AGENT: dict[str, str] = {}  # clients send the same few user agents on every write


def manager_from_user_agent(user_agent: str) -> str:
    """Upstream's default manager of a non-apply write: the user agent up to the first
    '/', printable characters only, at most 128 bytes."""
    manager = _MANAGERS_BY_AGENT.get(user_agent)
    if manager is None:
        manager = _manager_from_user_agent(user_agent)
        if len(_MANAGERS_BY_AGENT) >= 1024:
            _MANAGERS_BY_AGENT.clear()
        _MANAGERS_BY_AGENT[user_agent] = manager
    return manager


def _manager_from_user_agent(user_agent: str) -> str:
    out: list[str] = []
    size = 0
    for ch in user_agent.split("/", 1)[0]:
        if not ch.isprintable():
            continue
        n = len(ch.encode())
        if size + n > FIELD_MANAGER_MAX_LENGTH:
            break
        out.append(ch)
        size += n
    return "".join(out)


# --- entries ------------------------------------------------------------------------------


def decode_entries(raw: Any, *, strict: bool) -> list[ManagerEntry] | None:
    """``managedFields`` as entries. Stored ones (``strict=False``) are trusted: this
    server wrote or checked them. Sent ones are checked; None if they do not decode."""
    if not raw:
        return []
    if not isinstance(raw, list):
        return None
    out: list[ManagerEntry] = []
    seen: set[tuple] = set()
    for e in raw:
        if not isinstance(e, dict):
            return None
        fields = e.get("fieldsV1") or {}
        if strict:
            try:
                if e.get("operation") not in (APPLY, UPDATE):
                    raise ValueError("operation must be Apply or Update")
                if not isinstance(e.get("apiVersion"), str) or not e["apiVersion"]:
                    raise ValueError("apiVersion must not be empty")
                if e.get("fieldsType") != FIELDS_TYPE:
                    raise ValueError("fieldsType must be FieldsV1")
                for k in ("manager", "subresource", "time"):
                    if e.get(k) is not None and not isinstance(e[k], str):
                        raise ValueError(f"{k} must be a string")
                fp.validate_tree(fields)
            except ValueError:
                return None
        entry = ManagerEntry(
            e.get("manager") or "",
            e.get("operation") or UPDATE,
            e.get("apiVersion") or "",
            e.get("time"),
            fields,
            e.get("subresource") or "",
        )
        if strict:
            if entry.identity in seen:
                return None
            seen.add(entry.identity)
        out.append(entry)
    return out


def _sort_key(e: ManagerEntry) -> tuple:
    return (e.operation, e.time or "", e.manager, e.api_version, e.subresource)


def encode_entries(entries: list[ManagerEntry]) -> list[dict]:
    """Entries in upstream's order (operation, time, manager, apiVersion,
    subresource), managers owning nothing left out."""
    return [e.encode() for e in sorted(entries, key=_sort_key) if e.fields]


_GO_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _go_json(text: str) -> str:
    """TEXT as Go's encoding/json writes a string (HTML characters escaped)."""
    return '"' + "".join(_GO_JSON_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if c < " " else c) for c in text) + '"'


def manager_identifier(e: ManagerEntry) -> str:
    """Upstream's BuildManagerIdentifier: the entry without time and fields, as Go
    encodes it to JSON (an Apply entry without its apiVersion). Ties in the age
    order of the Update cap are broken by it."""
    parts = []
    for key, value in (
        ("manager", e.manager),
        ("operation", e.operation),
        ("apiVersion", "" if e.operation == APPLY else e.api_version),
        ("subresource", e.subresource),
    ):
        if value:  # omitempty
            parts.append(f'"{key}":{_go_json(value)}')
    return "{" + ",".join(parts) + "}"


def _unix_seconds(stamp: str | None) -> int:
    if not stamp:
        return 0
    try:
        return parse_rfc3339_ns(stamp) // 1_000_000_000
    except (TimestampError, ValueError):
        return 0


def cap_update_managers(entries: list[ManagerEntry], limit: int = MAX_UPDATE_MANAGERS) -> list[ManagerEntry]:
    """Upstream's capManagersManager after every Update: while more than ``limit``
    Update entries own something, the oldest (by the second of their time, then by
    identifier) are merged, per apiVersion, into one Update entry named
    ``ancient-changes`` without a subresource. The first (oldest) entry of a version
    is kept as it is until a second one of that version is merged: then it becomes
    the bucket, unless an ``ancient-changes`` entry of that version exists already.
    The bucket takes the time of the last entry merged into it. Apply entries are
    never merged or counted. Returns the entries left (the bucket is modified in place).

    One deliberate difference: where upstream meets an existing bucket later in the
    age order than another entry of its version, it merges the bucket into itself
    and then deletes it, losing its fields; here the bucket is left as it is."""
    updaters = [e for e in entries if e.operation == UPDATE and e.fields]
    if len(updaters) <= limit:
        return entries
    updaters.sort(key=lambda e: (_unix_seconds(e.time), manager_identifier(e)))
    buckets = {e.api_version: e for e in updaters if e.manager == ANCIENT_CHANGES and not e.subresource}
    first_of_version: dict[str, ManagerEntry] = {}
    merged: set[int] = set()
    length = len(updaters)
    for e in updaters:
        if length <= limit:
            break
        version = e.api_version
        first = first_of_version.get(version)
        if first is None:
            first_of_version[version] = e
            continue
        bucket = buckets.get(version)
        if bucket is None:  # the version's first entry becomes its bucket
            first.manager, first.subresource = ANCIENT_CHANGES, ""
            bucket = buckets[version] = first
        if e is bucket:
            continue
        bucket.fields = fp.union(e.fields, bucket.fields)
        bucket.time = e.time
        merged.add(id(e))
        length -= 1
    return [e for e in entries if id(e) not in merged]


def _store_entries(obj: dict, entries: list[ManagerEntry]) -> None:
    md = obj.setdefault("metadata", {})
    encoded = encode_entries(entries)
    if encoded:
        md["managedFields"] = encoded
    else:
        md.pop("managedFields", None)


def _strip(tree: dict, ignored: tuple[str, ...]) -> dict:
    """Drop what nobody owns: apiVersion/kind, system metadata, the reset fields."""
    drop = _STRIPPED_TOP + ignored
    if any(k in tree for k in drop):
        tree = {k: v for k, v in tree.items() if k not in drop}
    meta = tree.get("f:metadata")
    if meta is not None:
        kept = {k: v for k, v in meta.items() if k != fp.DOT and k not in _STRIPPED_META}
        tree = dict(tree)
        if kept:
            tree["f:metadata"] = kept
        else:
            del tree["f:metadata"]
    return tree


def _ignored(kind: KindInfo, subresource: str) -> tuple[str, ...]:
    if kind.subresource("status") is None:
        return ()
    if subresource == "status":
        return ("f:spec",)
    if not subresource:
        return ("f:status",)
    return ()


def _schema(kind: KindInfo) -> Struct | None:
    if kind.custom:  # a custom resource: its definition's schema, with its list and map types
        return kind_struct(kind.custom_schema, f"{kind.group}.{kind.version}.{kind.kind}")
    return schema_for(kind.group, kind.version, kind.kind)


def _without_managed(obj: dict) -> dict:
    md = obj.get("metadata")
    if isinstance(md, dict) and "managedFields" in md:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in md.items() if k != "managedFields"}
    return obj


_STAMP: list = [0, ""]  # (whole second, its RFC 3339 text): one format per second, not per write


def _timestamp() -> str:
    second = int(time.time())
    if second != _STAMP[0]:
        _STAMP[1] = format_rfc3339(_dt.datetime.fromtimestamp(second, _dt.timezone.utc))
        _STAMP[0] = second
    return _STAMP[1]


# --- Update operations ------------------------------------------------------------------


def _is_reset(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 1 and value[0] == {}


def record_update(kind: KindInfo, old: dict | None, new: dict, manager: str, subresource: str = "") -> None:
    """Record a non-apply write by ``manager`` in ``new``'s managedFields (in place).

    ``old`` is the stored object (None for a create). Never fails the write: a
    value that cannot be placed in a field set (a list-map item without its key,
    which validation rejects next) leaves the stored ownership as it was."""
    schema = _schema(kind)
    md = new.get("metadata")
    if not isinstance(md, dict):
        return
    live_raw = (old.get("metadata") or {}).get("managedFields") if old else None
    sent = md.get("managedFields", fp.MISSING)
    entries: list[ManagerEntry] | None = None
    if subresource or sent is fp.MISSING or sent == [] or sent is None:
        entries = None
    elif _is_reset(sent):
        entries = []
    elif sent is not live_raw and sent != live_raw:
        entries = decode_entries(sent, strict=True)
    if entries is None:
        entries = decode_entries(live_raw, strict=False) or []
    if old is None and not entries:
        _record_create(kind, md, new, schema, manager, subresource)
        return
    before = old if old is not None else (fp.zero_object(schema) if schema is not None else {})
    try:
        changed, removed = fp.compare(_without_managed(before), _without_managed(new), schema)
    except fp.FieldPathError:
        if live_raw:
            md["managedFields"] = live_raw
        else:
            md.pop("managedFields", None)
        return
    ignored = _ignored(kind, subresource)
    changed = _strip(changed, ignored)
    removed = _strip(removed, ignored)
    ident = (manager, UPDATE, subresource, kind.api_version)
    mine: ManagerEntry | None = None
    for e in entries:
        if e.identity == ident:
            mine = e
            continue
        if changed:
            e.fields = fp.difference(e.fields, changed)
        if removed:
            e.fields = fp.difference(e.fields, removed)
    if mine is None:
        mine = ManagerEntry(manager, UPDATE, kind.api_version, None, {}, subresource)
        entries.append(mine)
    if removed:
        mine.fields = fp.difference(mine.fields, removed)
    if changed:
        mine.fields = fp.union(mine.fields, changed)
        mine.time = _timestamp()
    _store_entries(new, cap_update_managers(entries))


def _record_create(kind: KindInfo, md: dict, new: dict, schema: Struct | None, manager: str, subresource: str) -> None:
    """:func:`record_update` of a new object with no prior ownership: the writer's
    Update entry is every field the object sets (its compare against the zero
    object), and nothing else needs adjusting."""
    try:
        changed, _ = fp.compare(fp.zero_object(schema) if schema is not None else {}, _without_managed(new), schema)
    except fp.FieldPathError:
        md.pop("managedFields", None)
        return
    changed = _strip(changed, _ignored(kind, subresource))
    if changed:
        md["managedFields"] = [
            ManagerEntry(manager, UPDATE, kind.api_version, _timestamp(), changed, subresource).encode()
        ]
    else:
        md.pop("managedFields", None)


# --- Apply operations ---------------------------------------------------------------------


def conflict_error(conflicts: list[tuple[ManagerEntry, tuple[str, ...]]]) -> st.ApiError:
    """409 Conflict in upstream's wording, one cause per field."""
    causes = [
        {
            "reason": "FieldManagerConflict",
            "type": "FieldManagerConflict",
            "message": f"conflict with {e.describe()}",
            "field": fp.format_path(p),
        }
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {fp.format_path(p)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for e, p in conflicts:
            by_manager.setdefault(e.describe(), []).append(fp.format_path(p))
        lines: list[str] = []
        for who in sorted(by_manager):
            lines.append(f"conflicts with {who}:")
            lines.extend(f"- {p}" for p in by_manager[who])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return st.ApiError(409, "Conflict", message, details={"causes": causes})


def _invalid(kind: KindInfo, name: str, exc: fp.FieldPathError) -> st.ApiError:
    return st.invalid(
        kind.kind,
        name,
        [{"reason": "FieldValueInvalid", "field": exc.path.lstrip("."), "message": exc.message}],
        kind.group,
    )


def apply(
    kind: KindInfo, live: dict | None, config: dict, manager: str, *, force: bool = False, subresource: str = ""
) -> dict:
    """The object after ``manager`` applies ``config`` to ``live`` (None: absent).

    Neither input is modified. Raises the 409 conflict error unless ``force``."""
    schema = _schema(kind)
    name = str((config.get("metadata") or {}).get("name") or "")
    base = live if live is not None else {}
    entries = decode_entries((base.get("metadata") or {}).get("managedFields"), strict=False) or []
    base = _without_managed(base)
    ignored = _ignored(kind, subresource)
    try:
        applied = _strip(fp.field_set(config, schema), ignored)
        merged = fp.merge(base, config, schema)
        ident = (manager, APPLY, subresource, "")
        mine = next((e for e in entries if e.identity == ident), None)
        last = mine.fields if mine is not None else {}
        others = [e for e in entries if e is not mine]
        # Only what the applier stopped applying can go; re-applying the same fields
        # (the common case) prunes nothing.
        dropped = fp.difference(last, applied) if last and last != applied else {}
        if dropped:
            owned: dict = applied
            for e in others:
                owned = fp.union(owned, e.fields)
            merged = fp.prune(merged, dropped, owned, schema)
        before = base if live is not None else (fp.zero_object(schema) if schema is not None else {})
        changed, removed = fp.compare(before, merged, schema)
    except fp.FieldPathError as exc:
        raise _invalid(kind, name, exc) from None
    changed = _strip(changed, ignored)
    removed = _strip(removed, ignored)
    conflicts: list[tuple[ManagerEntry, tuple[str, ...]]] = []
    for e in others:
        clash = fp.intersection(e.fields, changed)
        if clash:
            conflicts.extend((e, p) for p in fp.iter_paths(clash))
            if force:
                e.fields = fp.difference(e.fields, clash)
        if removed:
            e.fields = fp.difference(e.fields, removed)
    if conflicts and not force:
        raise conflict_error(conflicts)
    stamp = _timestamp()
    if mine is None:
        mine = ManagerEntry(manager, APPLY, kind.api_version, stamp, applied, subresource)
    else:
        if changed or removed or mine.fields != applied:
            mine.time = stamp
        mine.fields, mine.api_version = applied, kind.api_version
    merged = dict(merged)
    merged["metadata"] = dict(merged.get("metadata") or {})  # never the live object's own dict
    _store_entries(merged, others + [mine])
    return merged


def _decode_config(body: bytes) -> Any:
    """An apply body: YAML, of which JSON (what most clients send) is the fast case."""
    if body.lstrip()[:1] == b"{":
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    # Repeated keys: the last wins here; field validation reports them (Warn/Strict).
    return codec.decode_object_body(body, "application/yaml").obj


def parse_config(kind: KindInfo, body: bytes, namespace: str, name: str) -> dict:
    """Decode and check an apply body: an object of this kind and version, naming this
    object, without managedFields (400 otherwise)."""
    config = _decode_config(body)
    if not isinstance(config, dict):
        raise st.bad_request("the apply body must be an object (YAML or JSON)")
    if config.get("kind") in (None, ""):
        raise st.bad_request("Object 'Kind' is missing in the apply body")
    if config.get("apiVersion") in (None, ""):
        raise st.bad_request("Object 'apiVersion' is missing in the apply body")
    if config["apiVersion"] != kind.api_version or config["kind"] != kind.kind:
        raise st.bad_request(
            f"Incorrect version specified in apply patch. Specified patch version: "
            f"{config['apiVersion']} {config['kind']}, expected: {kind.api_version} {kind.kind}"
        )
    md = config.get("metadata")
    if md is None:
        md = config["metadata"] = {}
    if not isinstance(md, dict):
        raise st.bad_request("metadata must be an object")
    if md.get("managedFields") is not None:
        raise st.bad_request("metadata.managedFields must be nil")
    if md.get("name") not in (None, "") and md["name"] != name:
        raise st.bad_request(f"the name of the object ({md['name']}) does not match the name on the URL ({name})")
    if kind.namespaced and md.get("namespace") not in (None, "") and md["namespace"] != namespace:
        raise st.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    return config


async def apply_request(
    store: Any,
    kind: KindInfo,
    namespace: str,
    name: str,
    body: bytes,
    user: Any,
    *,
    manager: str,
    force: bool,
    dry_run: bool,
    subresource: str = "",
    validate: Callable[[dict], dict] | None = None,
    authorize_create: Callable[[], Awaitable[None]] | None = None,
    convert_old: Callable[[dict], Awaitable[dict]] | None = None,
) -> tuple[dict, bytes, bool]:
    """Serve one apply PATCH through the generic store (create when absent).
    ``validate`` is the request's field validation of the merged object (it may
    drop unknown fields or raise). ``authorize_create`` runs before an absent
    object is created (it raises when the requester may not create one: upstream
    authorizes a create-through-apply as ``create``). ``convert_old`` brings the
    stored object to the requested version before the merge (a custom resource with a
    conversion webhook). Returns (object, response bytes, created)."""
    config = parse_config(kind, body, namespace, name)
    raw_config = orjson.dumps(config)

    def fresh_config() -> dict:
        # Each attempt gets its own copy: the store mutates what compute returns.
        return orjson.loads(raw_config)

    async def converted_compute(old: dict) -> dict:
        assert convert_old is not None
        return compute(await convert_old(old))

    def compute(old: dict) -> dict:
        # A private copy: the store defaults and prepares what compute returns in place,
        # and the merge shares untouched subtrees with ``old``, which the store still reads.
        new = orjson.loads(
            orjson.dumps(apply(kind, old, fresh_config(), manager, force=force, subresource=subresource))
        )
        nmd = new.get("metadata") or {}
        if nmd.get("resourceVersion") == old["metadata"].get("resourceVersion") and not (
            config.get("metadata") or {}
        ).get("resourceVersion"):
            nmd.pop("resourceVersion", None)
        return validate(new) if validate is not None else new

    async def on_missing() -> dict:
        if authorize_create is not None:
            await authorize_create()
        cfg = fresh_config()
        cmd = cfg.setdefault("metadata", {})
        cmd["name"] = name
        if kind.namespaced:
            cmd["namespace"] = namespace
        new = apply(kind, None, cfg, manager, force=force, subresource=subresource)
        return validate(new) if validate is not None else new

    update: Callable[..., Awaitable[tuple[dict, bytes, bool]]] = store.update
    return await update(
        kind,
        namespace,
        name,
        compute if convert_old is None else converted_compute,
        user,
        subresource=subresource,
        dry_run=dry_run,
        create_on_missing=not subresource,
        on_missing=on_missing,
        operation="UPDATE",
    )
