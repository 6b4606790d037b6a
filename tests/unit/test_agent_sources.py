"""Static pod sources (file, URL), manifest decoding, static identity, and the merge."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from agent import pods as podutil
from agent.pods import ManifestProblem, Op, PodUpdate
from agent.sources import file as file_mod
from agent.sources.decode import ManifestError, decode_manifest, make_static
from agent.sources.file import FileSource
from agent.sources.merge import PodConfig
from agent.sources.url import UrlSource
from apiserver_min.api import names

NODE = "node-a"
REPO = Path(__file__).resolve().parents[2]


def pod_yaml(name: str, image: str = "busybox:1", *, extra: str = "") -> str:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{extra}"
        f"spec:\n  containers:\n  - name: main\n    image: {image}\n"
    )


def pod_obj(name: str, image: str = "busybox:1") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": image}]},
    }


def static(
    name: str, *, location: str = "/etc/m/p.yaml", source: str = podutil.SOURCE_FILE, image: str = "busybox:1"
) -> dict:
    return make_static(pod_obj(name, image), node_name=NODE, source=source, location=location)


def drain(config: PodConfig) -> list[tuple[Op, str, list[str]]]:
    out = []
    while not config.updates.empty():
        u = config.updates.get_nowait()
        out.append((u.op, u.source, [podutil.name(p) for p in u.pods]))
    return out


async def next_update(config: PodConfig, timeout: float = 5.0) -> PodUpdate:
    return await asyncio.wait_for(config.updates.get(), timeout)


async def eventually(predicate, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


# --- decoding ---------------------------------------------------------------------------------


def test_decode_yaml_and_json_pod():
    [p] = decode_manifest(pod_yaml("web").encode(), "/m/web.yaml")
    assert p["metadata"]["name"] == "web" and p["kind"] == "Pod"
    [q] = decode_manifest(json.dumps(pod_obj("web")).encode(), "/m/web.json")
    assert q == p


def test_decode_pod_list_and_list():
    body = {
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [
            {"metadata": {"name": "a"}, "spec": {}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}},
        ],
    }
    pods = decode_manifest(json.dumps(body).encode(), "/m/l.json")
    assert [(p["kind"], p["apiVersion"], p["metadata"]["name"]) for p in pods] == [
        ("Pod", "v1", "a"),
        ("Pod", "v1", "b"),
    ]
    lst = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: c}\n"
    assert [p["metadata"]["name"] for p in decode_manifest(lst.encode(), "/m/x")] == ["c"]
    assert decode_manifest(b"apiVersion: v1\nkind: PodList\n", "/m/empty-list") == []


@pytest.mark.parametrize(
    "data, needle",
    [
        (b"apiVersion: v1\nkind: Pod\nkind: Pod\n", "duplicate field 'kind'"),
        (b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "name": "b"}}', "duplicate field 'name'"),
        (b"- apiVersion: v1\n", "got a list"),
        (b"just a string\n", "got a string"),
        (b"apiVersion: v1\nkind: Service\n", "kind: Unsupported value: 'Service'"),
        (b"apiVersion: apps/v1\nkind: Pod\n", "apiVersion: Unsupported value: 'apps/v1'"),
        (b"kind: Pod\n", "apiVersion: Required value"),
        (b"apiVersion: v1\n", "kind: Required value"),
        (
            b"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret}\n",
            "items[0].kind: Unsupported value: 'Secret'",
        ),
        (b"apiVersion: v1\nkind: PodList\nitems: 3\n", "items: expected a list"),
        (b"  \n", "manifest is empty"),
        (b"{not json", "error decoding JSON"),
        (b"a: [1\n", "error decoding YAML"),
        (pod_yaml("a").encode() + b"---\n" + pod_yaml("b").encode(), "as a PodList"),
    ],
)
def test_decode_rejects_with_location(data, needle):
    with pytest.raises(ManifestError) as info:
        decode_manifest(data, "/etc/m/bad.yaml")
    assert info.value.location == "/etc/m/bad.yaml"
    assert needle in info.value.message
    assert str(info.value).startswith("/etc/m/bad.yaml: ")
    assert "\n" not in info.value.message


def test_decode_refuses_alias_bombs():
    levels = ["a: &a [1,1,1,1,1,1,1,1,1,1]"]
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[i]
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    with pytest.raises(ManifestError, match="expands to more than"):
        decode_manifest("\n".join(levels).encode(), "/m/bomb.yaml")


# --- static identity ---------------------------------------------------------------------------


def test_static_identity_fields():
    p = static("web", location="/etc/m/web.yaml")
    meta = p["metadata"]
    assert meta["name"] == f"web-{NODE}"
    assert meta["namespace"] == "default"
    assert p["spec"]["nodeName"] == NODE
    assert len(meta["uid"]) == 32 and int(meta["uid"], 16) >= 0
    assert meta["annotations"][names.ANNOTATION_CONFIG_HASH] == meta["uid"]
    assert meta["annotations"][names.ANNOTATION_CONFIG_SOURCE] == "file"
    assert {"operator": "Exists", "effect": "NoExecute"} in p["spec"]["tolerations"]
    assert p["status"]["phase"] == "Pending"
    # defaults applied
    assert p["spec"]["restartPolicy"] == "Always"
    assert p["spec"]["containers"][0]["terminationMessagePath"] == "/dev/termination-log"


def test_static_identity_keeps_namespace_and_lowercases_node_suffix():
    obj = pod_obj("web")
    obj["metadata"]["namespace"] = "orch-system"
    obj["metadata"]["annotations"] = {"a": "b"}
    p = make_static(obj, node_name="node-b", source=podutil.SOURCE_HTTP, location="http://h/x")
    assert p["metadata"]["namespace"] == "orch-system"
    assert p["metadata"]["annotations"]["a"] == "b"
    assert p["metadata"]["annotations"][names.ANNOTATION_CONFIG_SOURCE] == "http"
    # as upstream, only pods from files tolerate every NoExecute taint
    assert not p["spec"].get("tolerations")
    assert obj["metadata"]["name"] == "web"  # the input is not changed


def test_static_toleration_not_duplicated():
    obj = pod_obj("web")
    obj["spec"]["tolerations"] = [{"operator": "Exists", "effect": "NoExecute"}, {"key": "k", "operator": "Exists"}]
    p = make_static(obj, node_name=NODE, source=podutil.SOURCE_FILE, location="/m/w")
    assert p["spec"]["tolerations"] == [
        {"operator": "Exists", "effect": "NoExecute"},
        {"key": "k", "operator": "Exists"},
    ]


def test_static_uid_depends_on_content_location_and_node():
    base = static("web", location="/m/web.yaml")["metadata"]["uid"]
    assert static("web", location="/m/web.yaml")["metadata"]["uid"] == base
    assert static("web", location="/m/other.yaml")["metadata"]["uid"] != base
    assert static("web", location="/m/web.yaml", image="busybox:2")["metadata"]["uid"] != base
    other_node = make_static(pod_obj("web"), node_name="node-z", source="file", location="/m/web.yaml")
    assert other_node["metadata"]["uid"] != base
    url = static("web", location="/m/web.yaml", source=podutil.SOURCE_HTTP)["metadata"]["uid"]
    assert url != base


def test_static_uid_ignores_key_order_and_format():
    [from_yaml] = decode_manifest(pod_yaml("web").encode(), "/m/w")
    obj = pod_obj("web")
    reordered = {"spec": obj["spec"], "metadata": obj["metadata"], "kind": "Pod", "apiVersion": "v1"}
    [from_json] = decode_manifest(json.dumps(reordered).encode(), "/m/w")
    a = make_static(from_yaml, node_name=NODE, source="file", location="/m/w")
    b = make_static(from_json, node_name=NODE, source="file", location="/m/w")
    assert a["metadata"]["uid"] == b["metadata"]["uid"]


def test_static_uid_stable_across_processes():
    """A restarted agent must find the same UID (no per-process hash seed in it)."""
    code = (
        "import json,sys; from agent.sources.decode import make_static; "
        "print(make_static(json.loads(sys.argv[1]), node_name='node-a', source='file', "
        "location='/m/web.yaml')['metadata']['uid'])"
    )
    uids = {
        subprocess.run(
            [sys.executable, "-c", code, json.dumps(pod_obj("web"))],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert uids == {static("web", location="/m/web.yaml")["metadata"]["uid"]}


def test_static_keeps_a_given_uid():
    obj = pod_obj("web")
    obj["metadata"]["uid"] = "fixed-uid"
    p = make_static(obj, node_name=NODE, source="file", location="/m/w")
    assert p["metadata"]["uid"] == "fixed-uid" == p["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH]


def test_static_validation_errors_name_fields_and_location():
    obj = pod_obj("web", image="")
    obj["spec"]["containers"][0]["name"] = "Bad_Name"
    with pytest.raises(ManifestError) as info:
        make_static(obj, node_name=NODE, source="file", location="/m/bad.yaml")
    assert info.value.location == "/m/bad.yaml"
    assert "spec.containers[0].image: Required value" in info.value.message
    assert "spec.containers[0].name: Invalid value" in info.value.message
    with pytest.raises(ManifestError, match="metadata.name: Required value"):
        make_static({"apiVersion": "v1", "kind": "Pod", "spec": {}}, node_name=NODE, source="file", location="/m/x")
    with pytest.raises(ManifestError, match="spec: Invalid value"):
        make_static(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": [1]},
            node_name=NODE,
            source="file",
            location="/m/x",
        )
    with pytest.raises(ValueError):
        make_static(pod_obj("web"), node_name=NODE, source="api", location="/m/x")


# --- merge ------------------------------------------------------------------------------------


def api_pod(name: str, uid: str, **meta) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": uid, **meta},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
        "status": {"phase": "Pending"},
    }


def test_merge_first_set_is_announced_even_when_empty():
    config = PodConfig(NODE)
    assert not config.seen_all(["file"])
    config.push(PodUpdate.make(Op.SET, "file", []))
    assert drain(config) == [(Op.ADD, "file", [])]
    assert config.seen_all(["file"]) and not config.seen_all(["file", "http"])
    config.push(PodUpdate.make(Op.SET, "file", []))
    assert drain(config) == []


def test_merge_add_update_reconcile_delete_remove():
    config = PodConfig(NODE)
    a = api_pod("a", "u1")
    config.push(PodUpdate.make(Op.SET, "api", [a]))
    [update] = [config.updates.get_nowait()]
    assert update.op == Op.ADD and update.source == "api"
    added = update.pods[0]
    seen = added["metadata"]["annotations"][names.ANNOTATION_CONFIG_SEEN]
    assert seen.endswith("Z") and "T" in seen
    assert added["metadata"]["annotations"][names.ANNOTATION_CONFIG_SOURCE] == "api"

    config.push(PodUpdate.make(Op.SET, "api", [a]))  # nothing changed
    assert drain(config) == []

    b = api_pod("a", "u1", labels={"x": "y"})
    config.push(PodUpdate.make(Op.SET, "api", [b]))
    u = config.updates.get_nowait()
    assert u.op == Op.UPDATE and u.pods[0]["metadata"]["labels"] == {"x": "y"}
    assert u.pods[0]["metadata"]["annotations"][names.ANNOTATION_CONFIG_SEEN] == seen  # first sight stays

    c = api_pod("a", "u1", labels={"x": "y"})
    c["status"] = {"phase": "Running"}
    config.push(PodUpdate.make(Op.SET, "api", [c]))
    u = config.updates.get_nowait()
    assert u.op == Op.RECONCILE and u.pods[0]["status"]["phase"] == "Running"

    d = api_pod("a", "u1", labels={"x": "y"}, deletionTimestamp="2024-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    config.push(PodUpdate.make(Op.SET, "api", [d]))
    u = config.updates.get_nowait()
    assert u.op == Op.DELETE and u.pods[0]["metadata"]["deletionTimestamp"] == "2024-01-01T00:00:00Z"

    config.push(PodUpdate.make(Op.SET, "api", []))
    assert drain(config) == [(Op.REMOVE, "api", ["a"])]
    assert config.pods() == []


def test_merge_local_annotations_do_not_make_updates():
    config = PodConfig(NODE)
    config.push(PodUpdate.make(Op.SET, "api", [api_pod("a", "u1")]))
    drain(config)
    p = api_pod("a", "u1", annotations={names.ANNOTATION_CONFIG_MIRROR: "x"})
    config.push(PodUpdate.make(Op.SET, "api", [p]))
    assert drain(config) == []
    p = api_pod("a", "u1", annotations={"team": "x"})
    config.push(PodUpdate.make(Op.SET, "api", [p]))
    assert drain(config) == [(Op.UPDATE, "api", ["a"])]


def test_merge_changed_static_content_is_remove_then_add():
    config = PodConfig(NODE)
    old = static("web", location="/m/web.yaml")
    config.push(PodUpdate.make(Op.SET, "file", [old]))
    drain(config)
    new = static("web", location="/m/web.yaml", image="busybox:2")
    config.push(PodUpdate.make(Op.SET, "file", [new]))
    updates = [config.updates.get_nowait() for _ in range(2)]
    assert [u.op for u in updates] == [Op.REMOVE, Op.ADD]
    assert updates[0].pods[0]["metadata"]["uid"] == old["metadata"]["uid"]
    assert updates[1].pods[0]["metadata"]["uid"] == new["metadata"]["uid"]
    assert [podutil.uid(p) for p in config.pods()] == [new["metadata"]["uid"]]


def test_merge_outputs_are_copies():
    config = PodConfig(NODE)
    src = api_pod("a", "u1")
    config.push(PodUpdate.make(Op.SET, "api", [src]))
    assert names.ANNOTATION_CONFIG_SEEN not in (src["metadata"].get("annotations") or {})
    u = config.updates.get_nowait()
    u.pods[0]["spec"]["containers"] = []
    config.pods()[0]["metadata"]["name"] = "changed"
    assert config.pods()[0]["metadata"]["name"] == "a"
    assert config.pods()[0]["spec"]["containers"]


def test_merge_neither_changes_nor_keeps_the_sources_pods():
    # The API source hands in its informer's cached objects, uncopied.
    config = PodConfig(NODE)
    versions = [
        api_pod("a", "u1"),
        api_pod("a", "u1", labels={"x": "y"}),  # UPDATE
        {**api_pod("a", "u1", labels={"x": "y"}), "status": {"phase": "Running"}},  # RECONCILE
        api_pod("a", "u1", labels={"x": "y"}, deletionTimestamp="2024-01-01T00:00:00Z"),  # DELETE
    ]
    frozen = [json.dumps(p, sort_keys=True) for p in versions]
    for pod in versions:
        config.push(PodUpdate.make(Op.SET, "api", [pod]))
    assert [json.dumps(p, sort_keys=True) for p in versions] == frozen
    ops = [u.op for u in (config.updates.get_nowait() for _ in range(4))]
    assert ops == [Op.ADD, Op.UPDATE, Op.RECONCILE, Op.DELETE]
    held = config.pods()[0]
    assert held["metadata"]["annotations"][names.ANNOTATION_CONFIG_SOURCE] == "api"
    # What the merge holds shares nothing with what it was given.
    versions[-1]["metadata"]["labels"]["x"] = "changed"
    versions[-1]["spec"]["containers"].clear()
    versions[2]["status"]["phase"] = "changed"
    held = config.pods()[0]
    assert held["metadata"]["labels"] == {"x": "y"} and held["spec"]["containers"]
    assert held["status"] == {"phase": "Pending"}


def test_merge_drops_duplicate_names_within_and_across_sources():
    config = PodConfig(NODE)
    config.push(PodUpdate.make(Op.SET, "http", [api_pod("a", "u1"), api_pod("a", "u2"), api_pod("b", "u3")]))
    assert drain(config) == [(Op.ADD, "http", ["a", "b"])]
    [p] = config.problems()
    assert p.source == "http" and "duplicate pod name" in p.message and "a_default" in p.message

    config.push(PodUpdate.make(Op.SET, "file", [api_pod("b", "u9"), api_pod("c", "u4")]))
    assert drain(config) == [(Op.ADD, "file", ["c"])]
    assert {(p.source, p.location) for p in config.problems()} == {("http", "a_default"), ("file", "b_default")}
    assert sorted(podutil.uid(p) for p in config.pods()) == ["u1", "u3", "u4"]

    # The clash resolved, the next snapshot of each source takes its pod.
    config.push(PodUpdate.make(Op.SET, "http", [api_pod("a", "u1")]))
    assert drain(config) == [(Op.REMOVE, "http", ["b"])]
    config.push(PodUpdate.make(Op.SET, "file", [api_pod("b", "u9"), api_pod("c", "u4")]))
    assert drain(config) == [(Op.ADD, "file", ["b"])]
    assert config.problems() == []


def test_merge_report_problems_keeps_since():
    config = PodConfig(NODE)
    first = ManifestProblem("file", "/m/a", "bad", since=100.0)
    config.report_problems("file", [first])
    config.report_problems(
        "file",
        [ManifestProblem("file", "/m/a", "bad", since=200.0), ManifestProblem("file", "/m/b", "worse", since=200.0)],
    )
    assert [(p.location, p.since) for p in config.problems()] == [("/m/a", 100.0), ("/m/b", 200.0)]
    config.report_problems("file", [])
    assert config.problems() == []


def test_merge_incremental_ops_and_unknown_op():
    config = PodConfig(NODE)
    config.push(PodUpdate.make(Op.ADD, "api", [api_pod("a", "u1")]))
    config.push(PodUpdate.make(Op.ADD, "api", [api_pod("b", "u2")]))
    config.push(PodUpdate.make(Op.REMOVE, "api", [api_pod("a", "u1")]))
    assert drain(config) == [(Op.ADD, "api", ["a"]), (Op.ADD, "api", ["b"]), (Op.REMOVE, "api", ["a"])]
    assert not config.seen_all(["api"])  # only a SET marks a source seen
    config.push(PodUpdate.make(Op.RECONCILE, "api", [api_pod("b", "u2")]))
    assert drain(config) == [] and [podutil.name(p) for p in config.pods()] == ["b"]


# --- file source -----------------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    """Write via a dot-file and a rename, as careful tools do."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_file_read_once_mixed_directory(tmp_path):
    (tmp_path / "a.yaml").write_text(pod_yaml("a"))
    (tmp_path / "b.json").write_text(json.dumps(pod_obj("b")))
    (tmp_path / ".hidden.yaml").write_text(pod_yaml("hidden"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text(pod_yaml("c"))
    (tmp_path / "broken.yaml").write_text("apiVersion: v1\nkind: Pod\nkind: Pod\n")
    (tmp_path / "invalid.yaml").write_text(pod_yaml("inv", image='""'))
    (tmp_path / "list.yaml").write_text(
        "apiVersion: v1\nkind: PodList\nitems:\n"
        "- metadata: {name: l1}\n  spec: {containers: [{name: c, image: x}]}\n"
        "- metadata: {name: l2}\n  spec: {containers: [{name: c}]}\n"
    )
    (tmp_path / "z-dup.yaml").write_text(pod_yaml("a", image="other"))
    src = FileSource(str(tmp_path), NODE, 20.0, PodConfig(NODE))
    pods, problems = src.read_once()
    assert [podutil.name(p) for p in pods] == [f"{n}-{NODE}" for n in ("a", "b", "l1")]
    by_file = {Path(p.location).name: p.message for p in problems}
    assert set(by_file) == {"broken.yaml", "invalid.yaml", "list.yaml", "z-dup.yaml"}
    assert "duplicate field 'kind'" in by_file["broken.yaml"]
    assert "spec.containers[0].image: Required value" in by_file["invalid.yaml"]
    assert by_file["list.yaml"].startswith("items[1]: invalid pod: spec.containers[0].image")
    assert "duplicate pod name" in by_file["z-dup.yaml"] and "a.yaml" in by_file["z-dup.yaml"]
    assert all(p.source == "file" for p in problems)
    # Stable: a second read gives the same pods (same UIDs) and the same problems.
    pods2, problems2 = src.read_once()
    assert pods2 == pods and [p.message for p in problems2] == [p.message for p in problems]


def test_file_read_once_single_file_and_missing_path(tmp_path):
    f = tmp_path / "only.yaml"
    f.write_text(pod_yaml("only"))
    pods, problems = FileSource(str(f), NODE, 20.0, PodConfig(NODE)).read_once()
    assert [podutil.name(p) for p in pods] == [f"only-{NODE}"] and problems == []
    assert FileSource(str(tmp_path / "nope"), NODE, 20.0, PodConfig(NODE)).read_once() == ([], [])


async def run_source(source) -> asyncio.Task:
    task = asyncio.create_task(source.run(), name="test-source")
    return task


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_file_source_notices_changes_via_inotify(tmp_path):
    config = PodConfig(NODE)
    write(tmp_path / "a.yaml", pod_yaml("a"))
    fds_before = len(os.listdir("/proc/self/fd"))
    task = await run_source(FileSource(str(tmp_path), NODE, 3600.0, config))
    try:
        u = await next_update(config)
        assert (u.op, [podutil.name(p) for p in u.pods]) == (Op.ADD, [f"a-{NODE}"])
        assert config.seen_all(["file"])

        write(tmp_path / "b.yaml", pod_yaml("b"))
        u = await next_update(config)
        assert (u.op, [podutil.name(p) for p in u.pods]) == (Op.ADD, [f"b-{NODE}"])

        # A dot-file changes nothing; the next update is the real change after it.
        (tmp_path / ".ignored.yaml").write_text(pod_yaml("ignored"))
        write(tmp_path / "a.yaml", pod_yaml("a", image="busybox:2"))
        u1, u2 = await next_update(config), await next_update(config)
        assert [(u.op, [podutil.name(p) for p in u.pods]) for u in (u1, u2)] == [
            (Op.REMOVE, [f"a-{NODE}"]),
            (Op.ADD, [f"a-{NODE}"]),
        ]
        assert u2.pods[0]["spec"]["containers"][0]["image"] == "busybox:2"

        # A malformed file is a problem, the good pods stay.
        (tmp_path / "c.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: [\n")
        await eventually(lambda: any(p.location.endswith("c.yaml") for p in config.problems()))
        assert sorted(podutil.name(p) for p in config.pods()) == [f"a-{NODE}", f"b-{NODE}"]
        assert config.updates.empty()

        (tmp_path / "c.yaml").unlink()
        (tmp_path / "b.yaml").unlink()
        u = await next_update(config)
        assert (u.op, [podutil.name(p) for p in u.pods]) == (Op.REMOVE, [f"b-{NODE}"])
        await eventually(lambda: config.problems() == [])
    finally:
        await stop(task)
    assert len(os.listdir("/proc/self/fd")) == fds_before  # the inotify descriptor is closed


async def test_file_source_single_file_and_late_directory(tmp_path):
    config = PodConfig(NODE)
    target = tmp_path / "manifests"
    task = await run_source(FileSource(str(target), NODE, 3600.0, config))
    try:
        u = await next_update(config)
        assert (u.op, u.pods) == (Op.ADD, ())  # missing path: seen, empty
        target.mkdir()  # noticed through the parent's watch
        write(target / "a.yaml", pod_yaml("a"))
        u = await next_update(config)
        assert [podutil.name(p) for p in u.pods] == [f"a-{NODE}"]
    finally:
        await stop(task)

    config = PodConfig(NODE)
    single = tmp_path / "one.yaml"
    single.write_text(pod_yaml("one"))
    (tmp_path / "other.yaml").write_text(pod_yaml("other"))
    task = await run_source(FileSource(str(single), NODE, 3600.0, config))
    try:
        u = await next_update(config)
        assert [podutil.name(p) for p in u.pods] == [f"one-{NODE}"]
        single.write_text(pod_yaml("one", extra="  labels: {x: y}\n"))  # rewritten in place
        u = await next_update(config)
        assert u.op == Op.REMOVE
        u = await next_update(config)
        assert u.op == Op.ADD and u.pods[0]["metadata"]["labels"] == {"x": "y"}
    finally:
        await stop(task)


async def test_file_source_polls_without_inotify(tmp_path, monkeypatch):
    def no_inotify():
        raise OSError(38, "inotify unavailable in this test")

    monkeypatch.setattr(file_mod, "_Inotify", no_inotify)
    config = PodConfig(NODE)
    task = await run_source(FileSource(str(tmp_path), NODE, 0.1, config))
    try:
        assert (await next_update(config)).pods == ()
        write(tmp_path / "a.yaml", pod_yaml("a"))
        u = await next_update(config)
        assert (u.op, [podutil.name(p) for p in u.pods]) == (Op.ADD, [f"a-{NODE}"])
    finally:
        await stop(task)


# --- URL source -------------------------------------------------------------------------------


class Endpoint:
    """A manifest URL whose answer the test sets."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b""
        self.requests: list = []
        app = web.Application()
        app.router.add_get("/pods", self.handle)
        app.router.add_get("/moved", self.moved)
        self.server = TestServer(app)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.headers.copy())
        return web.Response(status=self.status, body=self.body)

    async def moved(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/pods")

    def url(self, path: str = "/pods") -> str:
        return str(self.server.make_url(path))


@pytest.fixture
async def endpoint():
    ep = Endpoint()
    await ep.server.start_server()
    yield ep
    await ep.server.close()


async def test_url_source_good_bad_and_kept(endpoint):
    config = PodConfig(NODE)
    src = UrlSource(endpoint.url(), {"X-Token": ["a", "b"], "X-Other": ["c"]}, NODE, 20.0, config)

    endpoint.status = 500
    assert await src.fetch_once() is False
    assert not config.seen_all(["http"])  # an unreachable URL is not "no pods"
    [p] = config.problems()
    assert p.source == "http" and p.location == endpoint.url() and "500" in p.message

    endpoint.status = 200
    endpoint.body = json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [pod_obj("a"), pod_obj("b")]}).encode()
    assert await src.fetch_once() is True
    u = await next_update(config)
    assert (u.op, u.source, [podutil.name(p) for p in u.pods]) == (Op.ADD, "http", [f"a-{NODE}", f"b-{NODE}"])
    assert u.pods[0]["metadata"]["annotations"][names.ANNOTATION_CONFIG_SOURCE] == "http"
    assert config.seen_all(["http"]) and config.problems() == []
    headers = endpoint.requests[-1]
    assert headers.getall("X-Token") == ["a", "b"] and headers["X-Other"] == "c"

    before = config.pods()
    for status, body, needle in [
        (500, b"oops", "500"),
        (200, b"apiVersion: v1\nkind: Pod\nkind: Pod\n", "duplicate"),
        (
            200,
            json.dumps(
                {"apiVersion": "v1", "kind": "PodList", "items": [pod_obj("a"), pod_obj("c", image="")]}
            ).encode(),
            "items[1]: invalid pod",
        ),
    ]:
        endpoint.status, endpoint.body = status, body
        assert await src.fetch_once() is False
        [p] = config.problems()
        assert needle in p.message
        assert config.pods() == before and config.updates.empty()

    endpoint.status = 200
    endpoint.body = pod_yaml("a").encode()
    assert await src.fetch_once() is True
    assert drain(config) == [(Op.REMOVE, "http", [f"b-{NODE}"])]  # same UID for a: no change to it
    assert config.problems() == []

    endpoint.body = b""
    assert await src.fetch_once() is True
    assert drain(config) == [(Op.REMOVE, "http", [f"a-{NODE}"])]


async def test_url_source_follows_redirects_and_runs(endpoint):
    config = PodConfig(NODE)
    endpoint.body = pod_yaml("r").encode()
    src = UrlSource(endpoint.url("/moved"), {}, NODE, 0.05, config)
    task = await run_source(src)
    try:
        u = await next_update(config)
        assert [podutil.name(p) for p in u.pods] == [f"r-{NODE}"]
        endpoint.body = pod_yaml("s").encode()
        u1, u2 = await next_update(config), await next_update(config)
        assert (u1.op, u2.op) == (Op.REMOVE, Op.ADD)
        assert [podutil.name(p) for p in u2.pods] == [f"s-{NODE}"]
        assert len(endpoint.requests) >= 2
    finally:
        await stop(task)


async def test_url_source_unreachable(unused_tcp_port):
    config = PodConfig(NODE)
    src = UrlSource(f"http://127.0.0.1:{unused_tcp_port}/pods", {}, NODE, 20.0, config)
    assert await src.fetch_once() is False
    [p] = config.problems()
    assert "GET failed" in p.message and config.updates.empty()
