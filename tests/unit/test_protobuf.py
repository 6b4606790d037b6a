"""The protobuf wire format (apiserver_min/api/protobuf.py) and its negotiation.

The fixtures for a Namespace, a Pod and a Node are written out byte by byte from
upstream's generated.proto field numbers (k8s.io/api core/v1, apimachinery
meta/v1) and the gogo marshaller's rules: fields in number order, non-pointer
scalars and structs always written (``12 00`` for an empty generateName), pointers
only when set, map entries sorted by key, metav1.Time as {seconds, nanos}.
"""

from __future__ import annotations

import asyncio

import pytest

from apiserver_min.api import names
from apiserver_min.api import protobuf as pb
from apiserver_min.api import protobuf_codegen as cg
from apiserver_min.api import status as st
from apiserver_min.api.kinds import KINDS
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
)
from apiserver_min.api.schemas import KIND_SCHEMAS, schema_for
from apiserver_min.server import negotiation

H = bytes.fromhex


def envelope(api_version: bytes, kind: bytes, raw: bytes) -> bytes:
    tm = b"\x0a" + bytes([len(api_version)]) + api_version + b"\x12" + bytes([len(kind)]) + kind
    return (
        b"k8s\x00" + b"\x0a" + bytes([len(tm)]) + tm + b"\x12" + pb.uvarint(len(raw)) + raw + b"\x1a\x00" + b"\x22\x00"
    )


# --- hand-checked upstream encodings ---------------------------------------------------------

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}}
NAMESPACE_BYTES = H(
    "6b387300"  # magic
    "0a0f"
    "0a027631"
    "12094e616d657370616365"  # typeMeta{apiVersion "v1", kind "Namespace"}
    "121b"  # raw: 27 bytes of Namespace
    "0a13"  #   metadata (ObjectMeta, 19 bytes)
    "0a036e7331"  #     name "ns1"
    "1200"
    "1a00"
    "2200"
    "2a00"
    "3200"  # generateName namespace selfLink uid resourceVersion: ""
    "3800"  #     generation 0
    "4200"  #     creationTimestamp: the zero time (empty message)
    "1200"  #   spec (NamespaceSpec, no finalizers)
    "1a020a00"  #   status{phase ""}
    "1a00"
    "2200"  # contentEncoding "", contentType ""
)

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "d"},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
}
POD_RAW = H(
    "0a12"  # metadata (18)
    "0a0170"
    "1200"
    "1a0164"
    "2200"
    "2a00"
    "3200"
    "3800"
    "4200"
    "1238"  # spec (PodSpec, 56)
    "121a"  #   containers[0] (Container, 26)
    "0a0163"
    "120169"  #     name "c", image "i"
    "2a00"  #     workingDir (5)
    "4200"  #     resources (8): ResourceRequirements{}
    "6a00"
    "7200"  #     terminationMessagePath (13), imagePullPolicy (14)
    "800100"
    "880100"
    "900100"  #     stdin (16), stdinOnce (17), tty (18): false
    "a20100"  #     terminationMessagePolicy (20)
    "1a00"  #   restartPolicy (3)
    "3200"  #   dnsPolicy (6)
    "4200"
    "4a00"
    "5200"  #   serviceAccountName (8), serviceAccount (9), nodeName (10)
    "5800"
    "6000"
    "6800"  #   hostNetwork (11), hostPID (12), hostIPC (13)
    "820100"
    "8a0100"  #   hostname (16), subdomain (17)
    "9a0100"  #   schedulerName (19)
    "c20100"  #   priorityClassName (24)
    "1a10"  # status (PodStatus, 16)
    "0a00"
    "1a00"
    "2200"
    "2a00"
    "3200"
    "4a00"
    "5a00"
    "7200"  # phase message reason hostIP podIP qosClass
    #   nominatedNodeName (11) resize (14)
)

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {"b": "2", "a": "1"}},
    "status": {
        "capacity": {"cpu": "2"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": "2024-01-02T03:04:05Z",
                "lastTransitionTime": "2024-01-02T03:04:05Z",
            }
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
    },
}
_TS = "08a5facdac061000"  # Timestamp{seconds 1704164645, nanos 0}
_COND = (
    "0a055265616479"
    "120454727565"  # type "Ready", status "True"
    "1a08"
    + _TS
    + "2208"
    + _TS  # lastHeartbeatTime (3), lastTransitionTime (4)
    + "2a00"
    "3200"
)  # reason, message
NODE_RAW = H(
    "0a22"  # metadata (34)
    "0a026e31"
    "1200"
    "1a00"
    "2200"
    "2a00"
    "3200"
    "3800"
    "4200"
    "5a06"
    "0a0161"
    "120131"  #   labels, sorted: a=1
    "5a06"
    "0a0162"
    "120132"  #   b=2
    "1208"
    "0a00"
    "1200"
    "1a00"
    "2000"  # spec: podCIDR, externalID, providerID, unschedulable false
    "1a69"  # status (NodeStatus, 105)
    "0a0a"
    "0a03637075"
    "1203"
    "0a0132"  # capacity{cpu: Quantity{"2"}}
    "1a00"  #   phase (3)
    "2225"
    + _COND  #   conditions[0] (4), 37 bytes
    + "2a160a0a496e7465726e616c495012083130 2e302e302e31".replace(" ", "")  # addresses[0] (5)
    + "3204"
    "0a020800"  #   daemonEndpoints{kubeletEndpoint{Port 0}} (6)
    "3a14" + "0a00"
    "1200"
    "1a00"
    "2200"
    "2a00"
    "3200"
    "3a00"
    "4200"
    "4a00"
    "5200"  # nodeInfo (7): 10 strings
)


def test_namespace_matches_upstream_bytes():
    assert pb.encode(NAMESPACE) == NAMESPACE_BYTES
    assert pb.decode(NAMESPACE_BYTES) == NAMESPACE  # empty spec/status are the same object as absent


def test_pod_matches_upstream_bytes():
    assert pb.encode(POD) == envelope(b"v1", b"Pod", POD_RAW)
    assert pb.decode(envelope(b"v1", b"Pod", POD_RAW)) == POD


def test_node_matches_upstream_bytes():
    assert pb.encode(NODE) == envelope(b"v1", b"Node", NODE_RAW)
    back = pb.decode(envelope(b"v1", b"Node", NODE_RAW))
    assert back["metadata"]["labels"] == {"a": "1", "b": "2"}
    # DaemonEndpoint.Port is required (no omitempty upstream): its zero stays, as upstream's JSON has it.
    assert back["status"].pop("daemonEndpoints") == {"kubeletEndpoint": {"Port": 0}}
    info = back["status"].pop("nodeInfo")  # all ten are required strings: kept empty
    assert len(info) == 10 and set(info.values()) == {""}
    assert back == NODE


# --- every declared kind -----------------------------------------------------------------------


def sample(t, name: str = "x", depth: int = 0):
    """A representative value: every field set, non-zero, so nothing is left out."""
    if isinstance(t, String):
        return t.enum[-1] if t.enum else f"v-{name}"
    if isinstance(t, Integer):
        return -(2**40) if t.bits == 64 else 70000
    if isinstance(t, Number):
        return 1.5
    if isinstance(t, Boolean):
        return True
    if isinstance(t, Bytes):
        return "AAEC/w=="
    if isinstance(t, Time):
        return "2024-05-06T07:08:09Z"
    if isinstance(t, MicroTime):
        return "2024-05-06T07:08:09.123456Z"
    if isinstance(t, Duration):
        return "1h2m3s"
    if isinstance(t, Quantity):
        return "250m"
    if isinstance(t, IntOrString):
        return 8080 if len(name) % 2 else "http"
    if isinstance(t, Opaque):
        return {"a": [1, "x", None], "b": {"c": True}}
    if isinstance(t, List):
        return [sample(t.item_type, name, depth), sample(t.item_type, name + "2", depth)]
    if isinstance(t, Map):
        return {"k2": sample(t.value_type, name, depth), "k1": sample(t.value_type, name + "1", depth)}
    assert isinstance(t, Struct)
    if depth > 14:
        return {}
    return {n: sample(f.type, n, depth + 1) for n, f in t.json_fields().items()}


def _declared():
    return sorted(KIND_SCHEMAS.items(), key=lambda kv: kv[0])


@pytest.mark.parametrize("key", [k for k, _ in _declared()], ids=lambda k: f"{k[0] or 'core'}/{k[1]}/{k[2]}")
def test_every_declared_kind_round_trips(key):
    group, version, kind = key
    schema = KIND_SCHEMAS[key]
    obj = {"apiVersion": f"{group}/{version}" if group else version, "kind": kind, **sample(schema)}
    data = pb.encode(obj)
    assert data[:4] == names.PROTOBUF_MAGIC
    assert pb.decode(data) == obj
    # And as an item of its list.
    lst_schema = schema_for(group, version, kind + "List")
    if lst_schema is not None and kind not in ("Status", "DeleteOptions"):
        lst = {
            "apiVersion": obj["apiVersion"],
            "kind": kind + "List",
            "metadata": {"resourceVersion": "12", "continue": "c", "remainingItemCount": 3},
            "items": [{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}] * 2,
        }
        assert pb.decode(pb.encode(lst)) == lst


def test_every_registered_kind_has_a_protobuf_encoding():
    assert len(KINDS) > 40
    missing = [k.qualified_resource for k in KINDS if schema_for(k.group, k.version, k.kind) is None]
    assert missing == []


def test_encode_list_matches_a_list_object():
    schema = schema_for("", "v1", "ConfigMap")
    items = [{"metadata": {"name": f"c{i}"}, "data": {"i": str(i)}} for i in range(3)]
    md = {"resourceVersion": "7"}
    whole = pb.encode({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": md, "items": items})
    assert pb.encode_list("v1", "ConfigMapList", md, iter(items), schema) == whole


def test_zero_values_and_pointers():
    # A pointer keeps a zero value; a non-pointer zero is the same object as absent;
    # a required field keeps its zero.
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 0,
            "paused": False,
            "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 0}]}]}},
        },
    }
    back = pb.decode(pb.encode(dep))
    assert back["spec"]["replicas"] == 0
    assert "paused" not in back["spec"]
    assert back["spec"]["template"]["spec"]["containers"][0]["ports"] == [{"containerPort": 0}]
    status = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "status": {
            "containerStatuses": [{"name": "c", "ready": False, "restartCount": 0, "image": "i", "imageID": ""}]
        },
    }
    cs = pb.decode(pb.encode(status))["status"]["containerStatuses"][0]
    assert cs["ready"] is False and cs["restartCount"] == 0


def test_scalar_shapes():
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 8081}]},
    }
    back = pb.decode(pb.encode(svc))
    assert [p["targetPort"] for p in back["spec"]["ports"]] == ["http", 8081]
    lease = {
        "apiVersion": f"{names.COORDINATION_GROUP}/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "n", "leaseDurationSeconds": 40, "renewTime": "2024-05-06T07:08:09.000001Z"},
    }
    assert pb.decode(pb.encode(lease)) == lease
    # Negative integers are sign-extended to ten bytes, as upstream writes them.
    ev = pb.encode_message({"metadata": {"name": "x", "generation": -1}}, schema_for("", "v1", "ConfigMap"))
    assert H("38ffffffffffffffffff01") in ev
    assert pb.decode_message(ev, schema_for("", "v1", "ConfigMap"))["metadata"]["generation"] == -1


# --- malformed input ---------------------------------------------------------------------------


def test_wrong_prefix_is_rejected():
    with pytest.raises(pb.ProtobufError, match="prefix"):
        pb.decode(b'{"kind":"Namespace"}')
    with pytest.raises(pb.ProtobufError, match="prefix"):
        pb.decode(b"")


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_truncated_messages_are_errors(cut):
    data = pb.encode(POD)
    with pytest.raises(pb.ProtobufError):
        pb.decode(data[:-cut] if cut < 10 else data[: cut + 20])


def test_unknown_fields_are_skipped_and_wrong_wire_types_refused():
    schema = schema_for("", "v1", "ConfigMap")
    raw = pb.encode_message({"metadata": {"name": "c"}, "data": {"a": "b"}}, schema)
    extra = (
        H("f80605")  # field 111 varint
        + H("a206")
        + b"\x03xyz"  # field 100 bytes
        + H("ad06")
        + b"\x00" * 4  # field 101 fixed32
        + H("b106")
        + b"\x00" * 8
    )  # field 102 fixed64
    obj = pb.decode(pb.encode_unknown("v1", "ConfigMap", raw + extra))
    assert obj == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    # data (2) sent as a varint: a known field with the wrong wire type.
    with pytest.raises(pb.ProtobufError, match="data: wrong wire type"):
        pb.decode(pb.encode_unknown("v1", "ConfigMap", raw + H("1001")))
    # A group (wire type 3) is refused, not mis-skipped.
    with pytest.raises(pb.ProtobufError, match="groups"):
        pb.decode(pb.encode_unknown("v1", "ConfigMap", raw + H("a306")))
    # Invalid UTF-8 in a string names the field.
    bad = pb.encode_message({"metadata": {"name": "c"}}, schema).replace(b"\x0a\x01c", b"\x0a\x01\xff")
    with pytest.raises(pb.ProtobufError, match=r"metadata\.name: invalid UTF-8"):
        pb.decode(pb.encode_unknown("v1", "ConfigMap", bad))


def test_packed_repeated_integers_are_read():
    # HostPort ranges are not repeated; use a list of int32: a container's... the
    # PodSecurityContext supplementalGroups (int64, field 4).
    schema = schema_for("", "v1", "Pod")
    psc = H("2203") + bytes([1, 2, 3])  # supplementalGroups packed: 1, 2, 3
    spec = H("7205") + psc  # PodSpec.securityContext (14)
    obj = pb.decode_message(H("1207") + spec, schema)
    assert obj["spec"]["securityContext"]["supplementalGroups"] == [1, 2, 3]


def test_unencodable_objects_name_the_field():
    with pytest.raises(pb.ProtobufError, match=r"spec\.containers\[0\]\.name: expected a string"):
        pb.encode({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": 5}]}})
    with pytest.raises(pb.ProtobufError, match="no protobuf encoding"):
        pb.encode({"apiVersion": "example.com/v1", "kind": "Widget"})
    with pytest.raises(pb.ProtobufError, match="out of range"):
        pb.encode({"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 2**40}]}})


def test_envelope_content_encoding_refused():
    raw = pb.encode_message({"metadata": {"name": "c"}}, schema_for("", "v1", "ConfigMap"))
    with pytest.raises(pb.ProtobufError, match="content encoding"):
        pb.decode(pb.encode_unknown("v1", "ConfigMap", raw, content_encoding="gzip"))


# --- watch frames ------------------------------------------------------------------------------


def test_watch_frames_split_across_chunks():
    objs = [dict(POD, metadata={"name": f"p{i}", "namespace": "d", "resourceVersion": str(i)}) for i in range(3)]
    stream = b"".join(pb.watch_frame(t, pb.encode(o)) for t, o in zip(("ADDED", "MODIFIED", "DELETED"), objs))
    # Frame = 4-byte big-endian length + WatchEvent{type=1, object=2{raw=1}}.
    first = pb.watch_frame("ADDED", pb.encode(objs[0]))
    assert int.from_bytes(first[:4], "big") == len(first) - 4
    assert first[4:12] == H("0a05") + b"ADDED" + H("12")

    async def chunks():
        for i in range(0, len(stream), 7):
            yield stream[i : i + 7]

    async def collect():
        return [ev async for ev in pb.iter_frames(chunks())]

    events = asyncio.run(collect())
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "p0"), ("MODIFIED", "p1"), ("DELETED", "p2")]
    assert events[1][1] == objs[1]

    async def cut():
        yield stream[:-3]

    with pytest.raises(pb.ProtobufError, match="inside a frame"):
        asyncio.run(_drain(pb.iter_frames(cut())))


async def _drain(it):
    async for _ in it:
        pass


def test_frame_limit():
    with pytest.raises(pb.ProtobufError, match="exceeds"):
        pb.FrameReader(max_frame=10).feed(b"\x00\x00\x01\x00")


# --- negotiation -------------------------------------------------------------------------------


def test_negotiation_of_protobuf():
    t = negotiation.negotiate(f"{names.MEDIA_PROTOBUF_UPSTREAM}, */*")
    assert t.form == "protobuf" and t.content_type == names.MEDIA_PROTOBUF_UPSTREAM
    assert negotiation.negotiate(names.MEDIA_PROTOBUF).content_type == names.MEDIA_PROTOBUF
    # No protobuf Table: skipped, then 406 with nothing else to offer.
    table_pb = f"{names.MEDIA_PROTOBUF_UPSTREAM};as=Table;v=v1;g=meta.k8s.io"
    assert negotiation.negotiate(f"{table_pb}, application/json").form == "json"
    with pytest.raises(st.ApiError) as exc:
        negotiation.negotiate(table_pb)
    assert exc.value.code == 406
    with pytest.raises(st.ApiError):
        negotiation.negotiate(names.MEDIA_PROTOBUF, protobuf_ok=False)


def test_error_body_follows_accept():
    status = st.not_found("pods", "x").to_status()
    body, ctype = negotiation.error_body(names.MEDIA_PROTOBUF_UPSTREAM, status)
    assert ctype == names.MEDIA_PROTOBUF_UPSTREAM
    assert pb.decode(body) == {k: v for k, v in status.items() if k != "metadata"}  # empty ListMeta: absent
    body, ctype = negotiation.error_body("text/html", status)
    assert ctype == names.MEDIA_JSON


# --- generated codecs against the table-driven reference ---------------------------------------


def _generated_decode(data: bytes, schema) -> dict:
    """The generated decoder alone (no fallback to the reference)."""
    out: dict = {}
    cg.decoder(pb._plan(schema))(data, 0, len(data), out)
    return out


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001 - the kind of failure is compared, not its class
        return ("error", str(exc))


@pytest.mark.parametrize("key", [k for k, _ in _declared()], ids=lambda k: f"{k[0] or 'core'}/{k[1]}/{k[2]}")
def test_generated_codecs_match_the_reference(key):
    schema = KIND_SCHEMAS[key]
    obj = sample(schema)
    raw = pb.reference_encode_message(obj, schema)
    assert cg.encoder(pb._plan(schema))(obj) == raw
    assert _generated_decode(raw, schema) == pb.reference_decode_message(raw, schema) == obj
    # Merged messages (a field repeated later on the wire) and the empty message.
    assert _generated_decode(raw + raw, schema) == pb.reference_decode_message(raw + raw, schema)
    assert _generated_decode(b"", schema) == pb.reference_decode_message(b"", schema)
    empty = {}
    assert cg.encoder(pb._plan(schema))(empty) == pb.reference_encode_message(empty, schema)


def _bench_pod() -> dict:
    from tests.bench.bench_protobuf import pod

    return pod()


def mutations(raw: bytes, rnd, count: int):
    """``count`` variants of ``raw``: flipped bytes, cuts, splices and deletions."""
    for i in range(count):
        b = bytearray(raw)
        how = i % 4
        if how == 0:
            for _ in range(rnd.randint(1, 3)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
        elif how == 1:
            del b[rnd.randrange(len(b)) :]
        elif how == 2:
            a, c = sorted(rnd.randrange(len(b)) for _ in range(2))
            b[a:a] = raw[c : c + rnd.randint(1, 40)]
        else:
            a = rnd.randrange(len(b))
            del b[a : a + rnd.randint(1, 8)]
        yield bytes(b)


def agreement_on_mutations(decoder, schema, raw: bytes, rnd, count: int) -> int:
    """Runs ``decoder`` (a fast decoder with no fallback) and the reference on mutated
    ``raw``: wherever the reference decodes, the fast one decodes the same object or
    raises (and the public decode falls back to the reference); wherever the reference
    fails, the fast one fails too, and the public error is the reference's. Returns how
    many accepted inputs the two decoded alike."""
    agree = 0
    for data in mutations(raw, rnd, count):
        ref = _outcome(pb.reference_decode_message, data, schema)
        got = _outcome(decoder, data, schema)
        if ref[0] == "error":
            assert got[0] == "error", data.hex()
        elif got[0] == "ok":
            assert got == ref, data.hex()
            agree += 1
        assert _outcome(pb.decode_message, data, schema) == ref
    return agree


def test_generated_decoder_on_mutated_bytes_agrees_with_the_reference():
    import random

    schema = schema_for("", "v1", "Pod")
    raw = pb.reference_encode_message(_bench_pod(), schema)
    assert agreement_on_mutations(_generated_decode, schema, raw, random.Random(4), 2500) > 100


def test_generated_encoder_rejects_what_the_reference_rejects():
    schema = schema_for("", "v1", "Pod")
    bad = [
        {"spec": {"containers": [{"name": 5}]}},
        {"spec": {"containers": [{"name": "c", "stdin": 1}]}},
        {"spec": {"containers": "c"}},
        {"spec": {"containers": [None]}},
        {"spec": {"priority": 2**40}},
        {"spec": {"priority": True}},
        {"metadata": {"labels": {"a": 1}}},
        {"spec": {"nodeSelector": ["x"]}},
        {"status": {"startTime": "yesterday"}},
        {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": []}}}]}},
    ]
    for obj in bad:
        with pytest.raises((cg._Reject, pb.ProtobufError)):
            cg.encoder(pb._plan(schema))(obj)
        ref = _outcome(pb.reference_encode_message, obj, schema)
        assert ref[0] == "error"
        assert _outcome(pb.encode_message, obj, schema) == ref
    # Integral floats and large integers take the slow path but encode the same.
    ok = {
        "spec": {
            "priority": 7.0,
            "terminationGracePeriodSeconds": 2**40,
            "containers": [{"name": "c", "ports": [{"containerPort": -3}]}],
        }
    }
    assert cg.encoder(pb._plan(schema))(ok) == pb.reference_encode_message(ok, schema)


def test_list_encoding_of_many_items_uses_the_generated_encoder():
    schema = schema_for("", "v1", "Pod")
    pods = []
    for i in range(50):
        p = _bench_pod()
        p.pop("apiVersion"), p.pop("kind")
        p["metadata"]["name"] = f"web-{i}"
        pods.append(p)
    md = {"resourceVersion": "99"}
    lst = {"apiVersion": "v1", "kind": "PodList", "metadata": md, "items": pods}
    whole = pb.encode(lst)
    assert pb.encode_list("v1", "PodList", md, iter(pods), schema) == whole
    expected = pb.encode_unknown("v1", "PodList", pb.reference_encode_message(lst, schema_for("", "v1", "PodList")))
    assert whole == expected
    assert pb.decode(whole) == lst
    # A bad item still names its index.
    with pytest.raises(pb.ProtobufError, match=r"items\[1\]\.metadata\.name: expected a string"):
        pb.encode_list("v1", "PodList", md, [pods[0], {"metadata": {"name": 1}}], schema)


# --- objects embedded in objects ----------------------------------------------------------------


def _nested_revisions(depth: int) -> bytes:
    """A ControllerRevision whose data (a RawExtension) holds an enveloped
    ControllerRevision, ``depth`` times over."""
    raw = pb.encode({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "x"}, "revision": 1})
    for _ in range(depth):
        ext = b"\x0a" + pb.uvarint(len(raw)) + raw  # RawExtension.raw
        msg = b"\x12" + pb.uvarint(len(ext)) + ext  # ControllerRevision.data
        raw = pb.encode_unknown("apps/v1", "ControllerRevision", msg)
    return raw


def test_embedded_objects_decode_to_a_bounded_depth_quickly():
    import time

    obj = pb.decode(_nested_revisions(pb.MAX_EMBEDDED_DEPTH))
    for _ in range(pb.MAX_EMBEDDED_DEPTH):
        obj = obj["data"]
    assert obj["metadata"] == {"name": "x"} and obj["revision"] == 1
    for depth in (pb.MAX_EMBEDDED_DEPTH + 1, 3000):
        data = _nested_revisions(depth)
        t0 = time.perf_counter()
        with pytest.raises(pb.ProtobufError, match="embedded in protobuf more than"):
            pb.decode(data)
        # Linear, not one retry per level (that was 2^depth decodes).
        assert time.perf_counter() - t0 < 1.0
