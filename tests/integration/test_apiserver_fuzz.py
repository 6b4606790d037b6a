"""Fuzzing the write paths of a live orch-apiserver (issue 4 acceptance).

Random JSON, YAML and protobuf bodies and random patch documents (merge, JSON
patch, strategic merge, server-side apply) go to a real server process
(tests/apiserver_fixtures.py, SQLite) for several kinds. The properties:

* every answer is a 2xx, or a 4xx whose body is a ``Status`` with that code --
  never a 5xx, never a bare error page;
* every object the server stored passes its own validation: read back and
  PUT unchanged it is accepted (200), and a copy of it under a new name is
  accepted by a dry-run create;
* the server log shows no traceback.

Inputs come from the kinds' schemas (``apiserver_min.api.schemas``): mutations
of valid objects at random schema paths (dropped fields, values of the right
type with random content, values of the wrong type), plus unstructured JSON,
duplicate keys, YAML anchors/aliases/tags and flipped or truncated protobuf.
Hypothesis runs derandomized so that CI sees the same examples every time;
bugs found are pinned with ``@example``.
"""

from __future__ import annotations

import base64
import collections
import copy
import json
import os
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as hs

from apiserver_min.api import names, protobuf
from apiserver_min.api.schema import (
    Boolean,
    Bytes,
    Duration,
    Integer,
    IntOrString,
    List,
    Map,
    MicroTime,
    Number,
    Opaque,
    Quantity,
    String,
    Struct,
    Time,
    Type,
    resolve_path,
)
from apiserver_min.api.schemas import schema_for
from tests.apiserver_fixtures import create_namespace
from tests.helpers import uniq

NS = "fuzz"
MERGE = names.MEDIA_MERGE_PATCH
JSONPATCH = names.MEDIA_JSON_PATCH
SMP = names.MEDIA_STRATEGIC_MERGE_PATCH
APPLY = names.MEDIA_APPLY_PATCH

# ORCH_FUZZ_SCALE=N multiplies the example counts and draws fresh random examples
# (a longer bug hunt by hand); CI runs the derandomized default.
FUZZ_SCALE = int(os.environ.get("ORCH_FUZZ_SCALE", "1") or 1)
FUZZ_DEBUG = bool(os.environ.get("ORCH_FUZZ_DEBUG"))  # print each 4xx and a tally of answers (with -s)


def examples(n: int) -> int:
    return n * FUZZ_SCALE


FUZZ_SETTINGS = dict(
    deadline=None,
    derandomize=FUZZ_SCALE == 1,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


# --- the kinds under test -------------------------------------------------------------------


def _pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fuzz"}, "annotations": {"a": "b"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sleep", "1"],
                    "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                }
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def _configmap(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"a": "b"}},
        "data": {"k": "v", "other": "w"},
        "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()},
    }


def _secret(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "Opaque",
        "data": {"k": base64.b64encode(b"secret").decode()},
    }


def _deployment(name: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 8080}]}]},
            },
        },
    }


def _service(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": "x"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"}],
        },
    }


def _namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": "fuzz"}}}


def _role(name: str) -> dict:
    return {
        "apiVersion": f"{names.RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"], "resourceNames": ["d"]},
        ],
    }


def _lease(name: str) -> dict:
    return {
        "apiVersion": f"{names.COORDINATION_GROUP}/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": "me",
            "leaseDurationSeconds": 15,
            "acquireTime": "2024-01-02T03:04:05.123456Z",
            "renewTime": "2024-01-02T03:04:06.000000Z",
            "leaseTransitions": 1,
        },
    }


# kind -> (valid object factory, collection path)
KINDS: dict[str, tuple[Any, str]] = {
    "Pod": (_pod, f"/api/v1/namespaces/{NS}/pods"),
    "ConfigMap": (_configmap, f"/api/v1/namespaces/{NS}/configmaps"),
    "Secret": (_secret, f"/api/v1/namespaces/{NS}/secrets"),
    "Deployment": (_deployment, f"/apis/apps/v1/namespaces/{NS}/deployments"),
    "Service": (_service, f"/api/v1/namespaces/{NS}/services"),
    "Namespace": (_namespace, "/api/v1/namespaces"),
    "Role": (_role, f"/apis/{names.RBAC_GROUP}/v1/namespaces/{NS}/roles"),
    "Lease": (_lease, f"/apis/{names.COORDINATION_GROUP}/v1/namespaces/{NS}/leases"),
}
KIND_NAMES = sorted(KINDS)
WITH_STATUS = ("Pod", "Deployment", "Service", "Namespace")


def schema_of(obj: dict) -> Struct:
    group, _, version = obj["apiVersion"].rpartition("/")
    s = schema_for(group, version, obj["kind"])
    assert s is not None, obj["kind"]
    return s


# --- checking answers -----------------------------------------------------------------------


class Checker:
    """Sends requests and checks every answer, the stored objects and the log."""

    def __init__(self, server):
        self.server = server
        self.log_pos = server.log_path.stat().st_size if server.log_path.exists() else 0
        self.answers: collections.Counter = collections.Counter()  # (what, status), for -s runs

    def send(
        self, method: str, path: str, body: bytes | str | None, ctype: str | None, what: str = ""
    ) -> tuple[int, Any]:
        headers = {"Content-Type": ctype} if ctype else {}
        status, hdrs, data = self.server.request(method, path, body, headers)
        doc: Any
        try:
            doc = json.loads(data) if data else None
        except ValueError:
            doc = data
        log = self.new_log()
        self.answers[(what.split(" ")[0], status)] += 1
        if FUZZ_DEBUG and status >= 400 and isinstance(doc, dict):
            print("DBG", what, status, str(doc.get("message"))[:160])
        where = (
            f"{method} {path} ({ctype}) {what}\nbody sent: {(body or b'')[:2000]!r}\n"
            f"answer: {status} {data[:2000]!r}\nserver log:\n{log[-4000:]}"
        )
        assert status < 500, where
        assert 200 <= status < 300 or 400 <= status < 500, where
        if status >= 400:
            assert isinstance(doc, dict) and doc.get("kind") == "Status", where
            assert doc.get("code") == status and doc.get("status") == "Failure", where
        else:
            assert isinstance(doc, dict), where
        assert "Traceback" not in log and "internal error" not in log, where
        return status, doc

    def new_log(self) -> str:
        """What the server logged since the last look."""
        with open(self.server.log_path, "rb") as fh:
            fh.seek(self.log_pos)
            new = fh.read()
        self.log_pos += len(new)
        return new.decode(errors="replace")

    def check_log(self, where: str = "") -> None:
        text = self.new_log()
        assert "Traceback" not in text and "internal error" not in text, f"{where}\nserver log:\n{text[-4000:]}"

    def check_stored(self, obj: dict, collection: str) -> None:
        """The object the server answered with must be what it stored, and valid:
        PUT back unchanged (200) and created again under a new name (dry run)."""
        name = obj["metadata"]["name"]
        path = f"{collection}/{quote(name, safe='')}"  # some kinds allow any character but / and %
        for _ in range(5):
            status, cur = self.send("GET", path, None, None, "read back")
            assert status == 200, cur
            status, doc = self.send("PUT", path, json.dumps(cur), "application/json", "PUT unchanged")
            if status == 409 and doc.get("reason") == "Conflict":
                continue  # a controller wrote in between
            assert status == 200, f"stored object rejected on PUT unchanged: {doc}\nobject: {cur}"
            break
        copy_ = copy.deepcopy(cur)
        md = copy_["metadata"]
        for k in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ):
            md.pop(k, None)
        md["name"] = uniq("copy")
        if copy_.get("kind") == "Service" and isinstance(copy_.get("spec"), dict):
            # A Service's addresses and node ports are its own: a copy asks for new ones
            # (the same values would be refused as already allocated, as upstream).
            spec = copy_["spec"]
            for f in ("clusterIP", "clusterIPs", "healthCheckNodePort"):
                if spec.get("clusterIP") != "None" or f == "healthCheckNodePort":
                    spec.pop(f, None)
            for port in spec.get("ports") or []:
                if isinstance(port, dict):
                    port.pop("nodePort", None)
        status, doc = self.send(
            "POST", f"{collection}?dryRun=All", json.dumps(copy_), "application/json", "dry-run create of a copy"
        )
        assert status == 201, f"stored object rejected on create of a copy: {doc}\nobject: {copy_}"

    def after_write(self, status: int, doc: Any, collection: str) -> None:
        if 200 <= status < 300 and isinstance(doc, dict) and doc.get("kind") not in (None, "Status"):
            if (doc.get("metadata") or {}).get("name"):
                self.check_stored(doc, collection)


@pytest.fixture(scope="module")
def fuzz_ns(apiserver):
    create_namespace(apiserver, NS)
    return NS


@pytest.fixture
def checker(apiserver, fuzz_ns):
    c = Checker(apiserver)
    yield c
    c.check_log("end of test")
    if FUZZ_DEBUG:
        print("\nanswers:", sorted(c.answers.items()))


# --- value strategies -----------------------------------------------------------------------

UNICODE = hs.text(alphabet=hs.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
NAMEISH = hs.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
TEXT = hs.one_of(
    UNICODE,
    NAMEISH,
    hs.sampled_from(
        ["", " ", "-", "a/b", "0", "1Gi", "TCP", "Always", "\x00", "${x}", "$patch", 'k:{"a":1}', "é" * 70]
    ),
)
BIG_INTS = hs.one_of(
    hs.integers(-(1 << 70), 1 << 70),
    hs.sampled_from([1 << 31, -(1 << 31) - 1, 1 << 63, -(1 << 63) - 1, (1 << 64) + 1, 10**30]),
)
SCALARS = hs.one_of(
    hs.none(), hs.booleans(), hs.integers(-10, 100000), BIG_INTS, hs.floats(allow_nan=False, allow_infinity=False), TEXT
)
JSON_VALUES = hs.recursive(
    SCALARS,
    lambda inner: hs.one_of(hs.lists(inner, max_size=5), hs.dictionaries(TEXT, inner, max_size=5)),
    max_leaves=20,
)


def rarely(draw, n: int) -> bool:
    """True one time in N; False for Hypothesis' simplest choice (0), so that the
    first and the shrunk examples take the common path."""
    return draw(hs.integers(0, n - 1)) == n // 2


def draw_typed(draw, t: Type, depth: int = 0) -> Any:
    """A value of type T (random content, right shape) for a field."""
    if isinstance(t, String):
        if t.enum and draw(hs.booleans()):
            return draw(hs.sampled_from(t.enum))
        return draw(TEXT)
    if isinstance(t, Integer):
        return draw(
            hs.one_of(
                hs.integers(-5, 70000),
                hs.integers(t.minimum, t.maximum),
                hs.sampled_from([t.maximum + 1, t.minimum - 1]),
            )
        )
    if isinstance(t, Number):
        return draw(hs.one_of(hs.floats(allow_nan=False, allow_infinity=False), hs.integers(-5, 5)))
    if isinstance(t, Boolean):
        return draw(hs.booleans())
    if isinstance(t, Bytes):
        return draw(
            hs.one_of(
                hs.binary(max_size=16).map(lambda b: base64.b64encode(b).decode()),
                hs.sampled_from(["!!", "abc", "YQ", "YQ==="]),
            )
        )
    if isinstance(t, (Time, MicroTime)):
        return draw(
            hs.one_of(
                hs.datetimes().map(
                    lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if isinstance(t, MicroTime) else "%Y-%m-%dT%H:%M:%SZ")
                ),
                hs.sampled_from(
                    [
                        "",
                        "now",
                        "2024-13-01T00:00:00Z",
                        "2024-01-01T00:00:00+25:00",
                        "0000-01-01T00:00:00Z",
                        "9999-12-31T23:59:59.999999999Z",
                        "2024-01-01",
                    ]
                ),
            )
        )
    if isinstance(t, Duration):
        return draw(hs.sampled_from(["1h2m3s", "0s", "-5s", "10", "9999999999h", "1.5µs", "x"]))
    if isinstance(t, Quantity):
        return draw(
            hs.one_of(
                hs.sampled_from(
                    [
                        "100m",
                        "1Ki",
                        "1e3",
                        "0.5",
                        "-1",
                        "1e1000",
                        "9" * 40,
                        "1.2.3",
                        "Mi",
                        "",
                        " 1",
                        "1E",
                        "0x10",
                        "5e-10",
                        "12345678901234567890Ei",
                    ]
                ),
                hs.integers(-10, 1 << 66),
                hs.floats(allow_nan=False, allow_infinity=False),
            )
        )
    if isinstance(t, IntOrString):
        return draw(hs.one_of(hs.integers(-1, 70000), BIG_INTS, TEXT, hs.sampled_from(["25%", "http", "101%"])))
    if isinstance(t, Opaque):
        return draw(JSON_VALUES)
    if isinstance(t, Map):
        if depth > 3:
            return {}
        keys = draw(hs.lists(TEXT, max_size=3))
        return {k: draw_typed(draw, t.value_type, depth + 1) for k in keys}
    if isinstance(t, List):
        if depth > 3:
            return []
        n = draw(hs.integers(0, 3))
        return [draw_typed(draw, t.item_type, depth + 1) for _ in range(n)]
    if isinstance(t, Struct):
        if depth > 3:
            return {}
        fields = t.json_fields()
        chosen = draw(hs.lists(hs.sampled_from(sorted(fields)), max_size=4, unique=True))
        return {name: draw_typed(draw, fields[name].type, depth + 1) for name in chosen}
    return draw(JSON_VALUES)


def draw_wrong(draw, t: Type | None) -> Any:
    """A value of another JSON type than T expects."""
    if isinstance(t, (Struct, Map)):
        pool = [[], "x", 1, True, [{}]]
    elif isinstance(t, List):
        pool = [{}, "x", 1, {"a": []}, False]
    elif isinstance(t, (Integer, Number)):
        pool = ["1", 1.5, True, [], {}, "NaN", 1e308, -(1 << 80)]
    elif isinstance(t, Boolean):
        pool = ["true", 1, 0, [], {}, "yes"]
    elif isinstance(t, IntOrString):
        pool = [1.5, True, [], {}, 1 << 64]
    elif isinstance(t, Quantity):
        pool = [True, [], {}, "1..", "∞"]
    else:  # strings and the string-shaped scalars
        pool = [1, 1.5, True, [], {}, ["x"], {"a": "b"}]
    return draw(hs.sampled_from(pool))


def _child_type(t: Type | None, key: Any) -> Type | None:
    if isinstance(t, Struct) and isinstance(key, str):
        f = t.field(key)
        return f.type if f else None
    if isinstance(t, Map):
        return t.value_type
    if isinstance(t, List):
        return t.item_type
    if isinstance(t, Opaque):
        return t
    return None


def mutate(draw, obj: dict, schema: Struct, n_max: int = 4, protect_identity: bool = True) -> dict:
    """OBJ with 1..n_max random edits at random paths: fields dropped, set to a
    right-typed random value, to a wrong-typed value, or to random JSON."""
    obj = copy.deepcopy(obj)
    for _ in range(draw(hs.integers(1, n_max))):
        node, t = obj, schema
        # Walk down: stop at a random depth, stepping into existing children or new schema fields.
        while True:
            keys: list = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
            candidates = keys[:]
            if isinstance(t, Struct) and isinstance(node, dict):
                candidates += [k for k in t.json_fields() if k not in node]
            if not candidates:
                break
            if protect_identity and node is obj:
                candidates = [k for k in candidates if k not in ("apiVersion", "kind")]
            if not candidates:
                break
            key = draw(hs.sampled_from(candidates))
            child_t = _child_type(t, key)
            child = node[key] if (isinstance(node, dict) and key in node) or isinstance(node, list) else None
            if isinstance(child, (dict, list)) and child and draw(hs.integers(0, 2)) > 0:
                node, t = child, child_t
                continue
            op = draw(hs.sampled_from(["drop", "drop", "typed", "typed", "typed", "wrong", "json", "null"]))
            if op == "drop":
                if isinstance(node, dict):
                    node.pop(key, None)
                elif isinstance(key, int) and key < len(node):
                    del node[key]
            else:
                value = (
                    draw_typed(draw, child_t)
                    if op == "typed" and child_t is not None
                    else draw_wrong(draw, child_t)
                    if op == "wrong"
                    else None
                    if op == "null"
                    else draw(JSON_VALUES)
                )
                if isinstance(node, dict):
                    node[key] = value
                else:
                    node[key] = value
            break
    return obj


@hs.composite
def mutated_object(draw, kinds=KIND_NAMES) -> tuple[str, dict]:
    kind = draw(hs.sampled_from(kinds))
    factory, _ = KINDS[kind]
    base = factory(uniq("fz"))
    return kind, mutate(draw, base, schema_of(base))


def to_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, allow_unicode=True, sort_keys=False)


def json_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


# --- tests: create ----------------------------------------------------------------------------


@settings(max_examples=examples(120), **FUZZ_SETTINGS)
@given(
    case=mutated_object(),
    fmt=hs.sampled_from(["json", "yaml"]),
    level=hs.sampled_from(["", "Ignore", "Warn", "Strict"]),
)
# A Namespace without a name crashed the namespace strategy (KeyError: 'name').
@example(case=("Namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}), fmt="json", level="")
@example(
    case=("Namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fz-nolabels", "labels": None}}),
    fmt="yaml",
    level="Strict",
)
# metadata: null crashed the namespace check of create and update (AttributeError).
@example(case=("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": None}), fmt="json", level="")
@example(
    case=("Namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fz-nullspec"}, "spec": None}),
    fmt="json",
    level="Ignore",
)
def test_fuzz_create_mutated_objects(checker, case, fmt, level):
    """Valid objects mutated at random schema paths, sent as JSON or YAML under a
    random fieldValidation level: a 201 is a valid stored object; anything else a 4xx Status."""
    kind, obj = case
    collection = KINDS[kind][1]
    body, ctype = (json_text(obj), "application/json") if fmt == "json" else (to_yaml(obj), "application/yaml")
    path = collection + (f"?fieldValidation={level}" if level else "")
    status, doc = checker.send("POST", path, body, ctype, f"create {kind}")
    checker.after_write(status, doc, collection)


@settings(max_examples=examples(60), **FUZZ_SETTINGS)
@given(
    kind=hs.sampled_from(KIND_NAMES),
    value=JSON_VALUES,
    top=hs.dictionaries(TEXT, JSON_VALUES, max_size=4),
    fmt=hs.sampled_from(["json", "yaml"]),
)
# An unknown field named with control characters broke the Warning header (no response at all).
@example(kind="ConfigMap", value=[1], top={"\x01\r\nX-Injected: 1": {}, "\u2028": 1}, fmt="json")
def test_fuzz_create_random_json(checker, kind, value, top, fmt):
    """Unstructured JSON: as the whole body, and as extra top-level fields and
    metadata of an otherwise valid object."""
    factory, collection = KINDS[kind]
    obj = factory(uniq("fz"))
    obj.update({k: v for k, v in top.items() if k not in ("apiVersion", "kind")})
    obj["metadata"] = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    obj["metadata"]["name"] = uniq("fz")
    for doc in (value, obj):
        body, ctype = (json_text(doc), "application/json") if fmt == "json" else (to_yaml(doc), "application/yaml")
        status, answer = checker.send("POST", collection, body, ctype, f"create {kind}")
        checker.after_write(status, answer, collection)


def _dup_json(obj: Any, draw, depth: int = 0) -> str:
    """JSON text for OBJ with some keys written twice (different values)."""
    if isinstance(obj, dict):
        parts = []
        for k, v in obj.items():
            parts.append(f"{json.dumps(k)}:{_dup_json(v, draw, depth + 1)}")
            if rarely(draw, 5):
                parts.append(f"{json.dumps(k)}:{json.dumps(draw(JSON_VALUES))}")
        return "{" + ",".join(parts) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(_dup_json(v, draw, depth + 1) for v in obj) + "]"
    return json.dumps(obj)


@settings(max_examples=examples(40), **FUZZ_SETTINGS)
@given(data=hs.data())
@example(data=None)  # the hand-written cases below, once
def test_fuzz_duplicate_keys(checker, data):
    """Duplicate keys anywhere in JSON and YAML bodies: under Strict a 400, under
    Warn/Ignore the last value wins and the result is a valid stored object or a 4xx."""
    if data is None:
        cases = [
            (
                "ConfigMap",
                '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s","name":"%s"},'
                '"data":{"a":"1","a":2}}' % (uniq("fz"), uniq("fz")),
                "application/json",
            ),
            # metadata: null with a duplicate key crashed create (the slow re-decode kept the null)
            (
                "Secret",
                '{"apiVersion":"v1","kind":"Secret","metadata":null,"data":{"k":"eA=="},"data":null}',
                "application/json",
            ),
            (
                "ConfigMap",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  name: %s\n"
                "data:\n  a: '1'\n  a: {}\n" % (uniq("fz"), uniq("fz")),
                "application/yaml",
            ),
        ]
        level_list = ["Strict", "Warn", "Ignore"]
    else:
        kind, obj = data.draw(mutated_object())
        fmt = data.draw(hs.sampled_from(["json", "yaml"]))
        if fmt == "json":
            text = _dup_json(obj, data.draw)
        else:
            text = to_yaml(obj)
            lines = text.splitlines()
            i = data.draw(hs.integers(0, max(0, len(lines) - 1)))
            if lines:
                lines.insert(i, lines[i])  # a repeated line: a repeated key (or list item)
            text = "\n".join(lines) + "\n"
        cases = [(kind, text, "application/json" if fmt == "json" else "application/yaml")]
        level_list = [data.draw(hs.sampled_from(["", "Strict", "Warn", "Ignore"]))]
    for kind, text, ctype in cases:
        for level in level_list:
            collection = KINDS[kind][1]
            path = collection + (f"?fieldValidation={level}" if level else "")
            status, doc = checker.send("POST", path, text, ctype, f"create {kind}")
            checker.after_write(status, doc, collection)


YAML_SNIPPETS = [
    # anchors and aliases, merge keys
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: &n {name}\n  labels: &l {{a: b}}\n"
    "  annotations: *l\ndata:\n  x: *n\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    <<: {{a: b}}\n    c: d\ndata: {{}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: &m\n  name: {name}\ndata:\n  <<: *m\n",
    "base: &b {{containers: [{{name: c, image: i}}]}}\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\n"
    "spec: *b\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n"
    "  - &c {{name: c, image: i}}\n  - *c\n",
    # tags
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: !!binary aGVsbG8=}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: !!set {{a, b}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: !!python/object:os.system x}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: !!float 1e3, b: !!int '0x1F'}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: !!omap [{{a: b}}]\nx: !!pairs [{{1: 2}}]\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, annotations: {{a: !!timestamp 2024-01-01}}}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: 1_000, b: 0o17, c: 1:30, "
    "d: 99999999999999999999999, e: 1e999}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: !custom x}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: 2024-01-01, b: 2024-01-01T00:00:00Z}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{? [a, b] : c}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{1: a, true: b, null: c, 1.5: d}}\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: .inf, b: .nan, c: -.inf}}\n",
    "apiVersion: v1\nkind: Lease\n",
    "--- \napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n---\napiVersion: v1\nkind: ConfigMap\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: *undefined\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{a: 'x'\n",
    "%YAML 1.1\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n",
    "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{a: !!null ''}}}}\n",
    # a small alias fan-out (a real "billion laughs" is a separate concern: the expansion is bounded here)
    "a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\napiVersion: v1\nkind: ConfigMap\n"
    "metadata: {{name: {name}, annotations: {{k: v}}}}\nbinaryData: {{}}\ndata: {{}}\nextra: [*c, *c]\n",
]


@settings(max_examples=examples(40), **FUZZ_SETTINGS)
@given(
    template=hs.sampled_from(YAML_SNIPPETS),
    level=hs.sampled_from(["", "Strict", "Ignore"]),
    where=hs.sampled_from(["create", "apply"]),
)
# !!binary gave bytes and !!set a Python set: neither could be stored (TypeError from the JSON encoder).
@example(template=YAML_SNIPPETS[5], level="", where="apply")
@example(template=YAML_SNIPPETS[6], level="Ignore", where="create")
@example(template=YAML_SNIPPETS[6], level="Ignore", where="apply")
# Non-string keys and non-scalar keys: string keys, or a 400.
@example(template=YAML_SNIPPETS[15], level="Ignore", where="apply")
@example(template=YAML_SNIPPETS[14], level="", where="create")
def test_fuzz_yaml_anchors_aliases_tags(checker, template, level, where):
    """YAML features beyond JSON: anchors, aliases, merge keys, tags, odd keys."""
    name = uniq("fz")
    text = template.format(name=name)
    try:
        kind = (yaml.safe_load(text) or {}).get("kind", "ConfigMap")
    except yaml.YAMLError:
        kind = "ConfigMap"
    kind = kind if kind in KINDS else "ConfigMap"
    collection = KINDS[kind][1]
    q = f"fieldValidation={level}&" if level else ""
    if where == "create":
        status, doc = checker.send("POST", f"{collection}?{q}", text, "application/yaml", "create")
    else:
        status, doc = checker.send("PATCH", f"{collection}/{name}?{q}fieldManager=fuzz", text, APPLY, "apply")
    checker.after_write(status, doc, collection)


# --- tests: protobuf ----------------------------------------------------------------------------


@hs.composite
def protobuf_body(draw) -> tuple[str, str, bytes]:
    """(kind, name, body): an object of KIND named NAME, encoded and damaged."""
    kind = draw(hs.sampled_from(KIND_NAMES))
    name = uniq("fz")
    obj = KINDS[kind][0](name)
    if draw(hs.booleans()):
        mutated = mutate(draw, obj, schema_of(obj))
        try:
            data = protobuf.encode(mutated)
        except Exception:  # noqa: BLE001 - a value the encoder cannot write: fall back to the valid object
            data = protobuf.encode(obj)
    else:
        data = protobuf.encode(obj)
    how = draw(hs.sampled_from(["flip", "truncate", "insert", "random", "intact", "magic-only", "wrong-magic"]))
    buf = bytearray(data)
    if how == "flip":
        for _ in range(draw(hs.integers(1, 4))):
            i = draw(hs.integers(0, len(buf) - 1))
            buf[i] ^= draw(hs.integers(1, 255))
    elif how == "truncate":
        buf = buf[: draw(hs.integers(0, len(buf) - 1))]
    elif how == "insert":
        i = draw(hs.integers(4, len(buf)))
        buf[i:i] = draw(hs.binary(min_size=1, max_size=8))
    elif how == "random":
        buf = bytearray(protobuf.MAGIC) + bytearray(draw(hs.binary(max_size=64)))
    elif how == "magic-only":
        buf = bytearray(protobuf.MAGIC)
    elif how == "wrong-magic":
        buf[0:4] = b"k8s\x01"
    return kind, name, bytes(buf)


@settings(max_examples=examples(120), **FUZZ_SETTINGS)
@given(
    case=protobuf_body(),
    ctype=hs.sampled_from([names.MEDIA_PROTOBUF, names.MEDIA_PROTOBUF_UPSTREAM]),
    verb=hs.sampled_from(["create", "update"]),
)
def test_fuzz_protobuf_bodies(checker, case, ctype, verb):
    """Protobuf bodies: encoded valid and mutated objects, with bytes flipped,
    cut, inserted, or replaced: a 2xx stores a valid object, else a 4xx Status."""
    kind, name, data = case
    factory, collection = KINDS[kind]
    if verb == "create":
        status, doc = checker.send("POST", collection, data, ctype, f"create {kind}")
    else:
        s, created = checker.send("POST", collection, json_text(factory(name)), "application/json", "create")
        assert s == 201, created
        status, doc = checker.send("PUT", f"{collection}/{name}", data, ctype, f"update {kind}")
    checker.after_write(status, doc, collection)


# --- tests: patches ----------------------------------------------------------------------------


def _unescape(token: str) -> str | int:
    token = token.replace("~1", "/").replace("~0", "~")
    return int(token) if token.isdigit() else token


@hs.composite
def json_patch_ops(draw, obj: dict, schema: Struct) -> list:
    paths = [
        "/metadata/labels/x",
        "/metadata/labels",
        "/metadata/name",
        "/metadata/resourceVersion",
        "/metadata/uid",
        "/metadata/managedFields",
        "/metadata/finalizers/-",
        "/kind",
        "/apiVersion",
        "",
        "/spec",
        "/spec/containers/0",
        "/spec/containers/-",
        "/spec/containers/0/ports/0/containerPort",
        "/spec/replicas",
        "/spec/ports/1",
        "/data/k",
        "/data",
        "/rules/0/verbs/5",
        "/spec/x~1y",
        "/a~2",
        "/spec/containers/01",
        "/spec/containers/-1",
        "/metadata/annotations/a~1b",
    ]

    # existing paths of the object itself
    def walk(v, p):
        yield p
        if isinstance(v, dict):
            for k, c in v.items():
                yield from walk(c, f"{p}/{k.replace('~', '~0').replace('/', '~1')}")
        elif isinstance(v, list):
            for i, c in enumerate(v):
                yield from walk(c, f"{p}/{i}")

    own = [p for p in walk(obj, "") if p and not p.startswith(("/metadata/managedFields/", "/status"))][:200]
    # and absent fields the schema declares, one level below existing objects
    for p in own[:60]:
        t = resolve_path(schema, [_unescape(x) for x in p.split("/")[1:]])
        if isinstance(t, Struct):
            own += [f"{p}/{k}" for k in list(t.json_fields())[:8]]
    ops = []
    for _ in range(draw(hs.integers(1, 4))):
        op = draw(
            hs.sampled_from(["add", "remove", "replace", "replace", "add", "move", "copy", "test", "bogus", None])
        )
        entry: dict[str, Any] = {}
        if op is not None:
            entry["op"] = op
        if not rarely(draw, 20):
            entry["path"] = (
                draw(hs.sampled_from(own))
                if not rarely(draw, 4)
                else draw(hs.sampled_from(paths))
                if not rarely(draw, 6)
                else draw(JSON_VALUES)
            )
        if op in ("move", "copy") or rarely(draw, 20):
            entry["from"] = draw(hs.sampled_from(own + paths))
        if op in ("add", "replace", "test") or rarely(draw, 20):
            where = entry.get("path")
            t = (
                resolve_path(schema, [_unescape(x) for x in where.split("/")[1:] if x != "-"])
                if isinstance(where, str)
                else None
            )
            how = draw(hs.integers(0, 3))
            entry["value"] = (
                draw_typed(draw, t)
                if t is not None and how < 2
                else draw_wrong(draw, t)
                if how == 2
                else draw(JSON_VALUES)
            )
        ops.append(entry if not rarely(draw, 16) else draw(JSON_VALUES))
    return ops


SMP_DIRECTIVES = [
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/ports",
    "$deleteFromPrimitiveList/finalizers",
    "$deleteFromPrimitiveList/verbs",
    "$setElementOrder/rules",
    "$setElementOrder/env",
    "$unknown",
]


@hs.composite
def strategic_patch(draw, obj: dict, schema: Struct) -> dict:
    """A merge-shaped patch from a mutation of OBJ (changed fields, nulls for
    deletions), sprinkled with strategic-merge directives at random places."""
    mutated = mutate(draw, obj, schema, protect_identity=not rarely(draw, 8))

    def diff(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            out = {k: None for k in a if k not in b}
            for k, v in b.items():
                if k not in a:
                    out[k] = v
                elif a[k] != v:
                    out[k] = diff(a[k], v)
            return out
        return b

    patch = diff(obj, mutated)
    if not isinstance(patch, dict):
        patch = {}
    # directives at random dict nodes of the patch
    nodes = [patch]
    stack = [patch]
    while stack:
        n = stack.pop()
        for v in n.values() if isinstance(n, dict) else n:
            if isinstance(v, (dict, list)):
                stack.append(v)
                if isinstance(v, dict):
                    nodes.append(v)
    for _ in range(draw(hs.integers(0, 3))):
        node = draw(hs.sampled_from(nodes))
        key = draw(hs.sampled_from(SMP_DIRECTIVES))
        value = draw(
            hs.one_of(
                hs.sampled_from(["replace", "delete", "merge", "bogus"]),
                hs.lists(hs.one_of(TEXT, hs.fixed_dictionaries({"name": TEXT})), max_size=3),
                JSON_VALUES,
            )
        )
        node[key] = value
    if rarely(draw, 6):  # a list item with a directive
        patch.setdefault("spec", {})
        if isinstance(patch["spec"], dict):
            patch["spec"]["containers"] = [
                draw(
                    hs.fixed_dictionaries(
                        {
                            "name": hs.sampled_from(["c", "d", ""]),
                            "$patch": hs.sampled_from(["delete", "replace", "merge", "x"]),
                        }
                    )
                )
            ]
    return patch


def _created(checker, kind: str) -> tuple[dict, str]:
    factory, collection = KINDS[kind]
    status, obj = checker.send("POST", collection, json_text(factory(uniq("fz"))), "application/json", "create base")
    assert status == 201, obj
    return obj, collection


@settings(max_examples=examples(120), **FUZZ_SETTINGS)
@given(
    data=hs.data(),
    kind=hs.sampled_from(KIND_NAMES),
    ptype=hs.sampled_from(["merge", "json", "strategic", "apply"]),
    level=hs.sampled_from(["", "Strict", "Ignore"]),
    fixed=hs.none(),
)
# An integer beyond 64 bits in a YAML body could not be stored (TypeError from the JSON encoder).
@example(
    data=None,
    kind="ConfigMap",
    ptype="apply",
    level="",
    fixed="apiVersion: v1\nkind: ConfigMap\ndata: -9223372036854775809\n",
)
@example(
    data=None,
    kind="ConfigMap",
    ptype="apply",
    level="Ignore",
    fixed="apiVersion: v1\nkind: ConfigMap\nmetadata: {annotations: {a: 1}}\nx: 18446744073709551616\n",
)
def test_fuzz_patches(checker, data, kind, ptype, level, fixed):
    """Random merge, JSON, strategic merge and apply patches on a stored object:
    a 2xx leaves a valid stored object; anything else is a 4xx Status. FIXED,
    when given, is the patch body (pinned regressions)."""
    obj, collection = _created(checker, kind)
    name = quote(obj["metadata"]["name"], safe="")
    schema = schema_of(obj)
    q = f"fieldValidation={level}&" if level else ""
    path = f"{collection}/{name}?{q}fieldManager=fuzz"
    clean = copy.deepcopy(obj)
    for k in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        clean["metadata"].pop(k, None)
    clean.pop("status", None)
    if fixed is not None:
        body, ctype = fixed, {"merge": MERGE, "json": JSONPATCH, "strategic": SMP, "apply": APPLY}[ptype]
    elif ptype == "merge":
        # strategic-merge directives in a plain merge patch are just unknown fields
        patch = data.draw(strategic_patch(clean, schema))
        body, ctype = json_text(patch if not rarely(data.draw, 10) else data.draw(JSON_VALUES)), MERGE
    elif ptype == "json":
        body, ctype = json_text(data.draw(json_patch_ops(obj, schema))), JSONPATCH
    elif ptype == "strategic":
        patch = data.draw(strategic_patch(clean, schema))
        body, ctype = json_text(patch if not rarely(data.draw, 10) else data.draw(JSON_VALUES)), SMP
    else:
        applied = mutate(data.draw, clean, schema)
        if data.draw(hs.booleans()):
            applied["metadata"] = {"name": name}
        body = to_yaml(applied) if data.draw(hs.booleans()) else json_text(applied)
        ctype = APPLY
        if data.draw(hs.booleans()):
            path += "&force=true"
        if rarely(data.draw, 4):  # a second manager, for conflicts
            path = path.replace("fieldManager=fuzz", "fieldManager=other")
    if fixed is not None and ptype == "apply":
        path = path.replace("fieldManager=fuzz", "fieldManager=other")
    if fixed is None and kind in WITH_STATUS and rarely(data.draw, 4):
        path = path.replace(f"/{name}?", f"/{name}/status?")  # the same patch through the status sub-resource
    status, doc = checker.send("PATCH", path, body, ctype, f"{ptype} patch on {kind}")
    checker.after_write(status, doc, collection)


@settings(max_examples=examples(40), **FUZZ_SETTINGS)
@given(data=hs.data(), kind=hs.sampled_from(KIND_NAMES))
def test_fuzz_apply_creates(checker, data, kind):
    """Server-side apply of a mutated object that does not exist yet (create
    through apply), twice with different managers."""
    factory, collection = KINDS[kind]
    name = uniq("fz")
    obj = mutate(data.draw, factory(name), schema_of(factory(name)))
    md = obj.get("metadata")
    if isinstance(md, dict):
        md["name"] = name
    for manager in ("a", "b"):
        status, doc = checker.send(
            "PATCH", f"{collection}/{name}?fieldManager={manager}", to_yaml(obj), APPLY, f"apply {kind}"
        )
        checker.after_write(status, doc, collection)
        obj = mutate(data.draw, obj, schema_of(factory(name))) if isinstance(obj, dict) else obj
        if isinstance(obj.get("metadata"), dict):
            obj["metadata"]["name"] = name


# --- tests: delete options --------------------------------------------------------------------

DELETE_OPTION_VALUES = hs.fixed_dictionaries(
    {},
    optional={
        "kind": hs.sampled_from(["DeleteOptions", "Pod", "", 1]),
        "apiVersion": hs.sampled_from(["v1", "meta/v1", 2]),
        "gracePeriodSeconds": hs.one_of(
            hs.integers(-5, 100),
            BIG_INTS,
            hs.booleans(),
            hs.floats(allow_nan=False, allow_infinity=False),
            TEXT,
            hs.none(),
        ),
        "propagationPolicy": hs.one_of(hs.sampled_from(["Orphan", "Background", "Foreground", "x", ""]), JSON_VALUES),
        "orphanDependents": hs.one_of(hs.booleans(), JSON_VALUES),
        "preconditions": hs.one_of(
            hs.fixed_dictionaries({}, optional={"uid": JSON_VALUES, "resourceVersion": JSON_VALUES}), JSON_VALUES
        ),
        "dryRun": hs.one_of(hs.just(["All"]), JSON_VALUES),
    },
)


@settings(max_examples=examples(50), **FUZZ_SETTINGS)
@given(
    kind=hs.sampled_from(["ConfigMap", "Pod", "Secret", "Role"]),
    opts=hs.one_of(DELETE_OPTION_VALUES, JSON_VALUES),
    fmt=hs.sampled_from(["json", "yaml"]),
    collection_delete=hs.booleans(),
)
def test_fuzz_delete_options(checker, kind, opts, fmt, collection_delete):
    """DeleteOptions bodies with random values (JSON and YAML), on one object and
    on a collection (narrowed by a label no other object has)."""
    factory, collection = KINDS[kind]
    obj = factory(uniq("fz"))
    label = uniq("del")
    obj["metadata"]["labels"] = {"fuzz-delete": label}
    status, created = checker.send("POST", collection, json_text(obj), "application/json", "create base")
    assert status == 201, created
    body, ctype = (json_text(opts), "application/json") if fmt == "json" else (to_yaml(opts), "application/yaml")
    path = (
        f"{collection}?labelSelector=fuzz-delete%3D{label}"
        if collection_delete
        else f"{collection}/{quote(created['metadata']['name'], safe='')}"
    )
    checker.send("DELETE", path, body, ctype, f"delete {kind}")


@settings(max_examples=examples(40), **FUZZ_SETTINGS)
@given(data=hs.data(), how=hs.sampled_from(["put", "merge", "json", "put-status"]), fixed=hs.none())
# A Scale whose metadata or spec is not an object crashed the scale handler (AttributeError).
@example(data=None, how="merge", fixed='{"spec": {"replicas": 0}, "metadata": true}')
@example(data=None, how="merge", fixed='{"spec": [1]}')
@example(data=None, how="put", fixed='{"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": "x"}')
def test_fuzz_scale_and_status_updates(checker, data, how, fixed):
    """The scale sub-resource (PUT of a Scale, merge and JSON patches) and PUT
    of a mutated object through the status sub-resource."""
    obj, collection = _created(checker, "Deployment")
    name = obj["metadata"]["name"]
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name}, "spec": {"replicas": 3}}
    scale_type = Struct("Scale", [])  # no declared schema: random values at random places
    if fixed is not None:
        status, doc = checker.send(
            "PUT" if how == "put" else "PATCH",
            f"{collection}/{name}/scale",
            fixed,
            "application/json" if how == "put" else MERGE,
            "scale (pinned)",
        )
    elif how == "put":
        body = mutate(data.draw, scale, scale_type) if data.draw(hs.booleans()) else data.draw(JSON_VALUES)
        status, doc = checker.send(
            "PUT", f"{collection}/{name}/scale", json_text(body), "application/json", "scale PUT"
        )
    elif how == "merge":
        body = {"spec": {"replicas": data.draw(hs.one_of(JSON_VALUES, hs.integers(-3, 10)))}}
        if data.draw(hs.booleans()):
            body["metadata"] = data.draw(JSON_VALUES)
        status, doc = checker.send("PATCH", f"{collection}/{name}/scale", json_text(body), MERGE, "scale merge")
    elif how == "json":
        ops = [
            {
                "op": data.draw(hs.sampled_from(["replace", "add", "remove", "test"])),
                "path": data.draw(
                    hs.sampled_from(["/spec/replicas", "/spec", "/status/replicas", "/metadata/name", "/kind", ""])
                ),
                "value": data.draw(hs.one_of(JSON_VALUES, hs.integers(-3, 10))),
            }
        ]
        status, doc = checker.send("PATCH", f"{collection}/{name}/scale", json_text(ops), JSONPATCH, "scale json")
    else:
        mutated = mutate(data.draw, obj, schema_of(obj))
        status, doc = checker.send(
            "PUT", f"{collection}/{name}/status", json_text(mutated), "application/json", "status PUT"
        )
    checker.check_stored(obj, collection)
