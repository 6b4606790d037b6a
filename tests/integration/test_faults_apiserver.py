"""Faults that lose nothing: the API server killed, its etcd restarted, under load.

Sixteen writer threads create and update ConfigMaps while the fault happens;
every write the server acknowledged (2xx) must be there afterwards, with
resourceVersions unique and increasing, and a watch from a resourceVersion
listed before the fault must replay exactly the later changes (or end in a
clean 410 Gone, as upstream does when the history is gone).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import sqlite3
import ssl
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest

from tests.apiserver_fixtures import ApiServerProcess, _require_binary, create_namespace
from tests.components import Etcd, free_port

WRITERS = 16
CM = "/api/v1/namespaces/{ns}/configmaps"
REQUEST_ERRORS = (OSError, http.client.HTTPException, ssl.SSLError)


@dataclass
class Writer:
    """One writer thread's acknowledged writes, in the order they were acknowledged."""

    index: int
    acked: list[tuple[str, int, int]] = field(default_factory=list)  # (name, resourceVersion, generation)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


class _Conn:
    """One kept-alive HTTPS connection of a writer, opened again after an error."""

    def __init__(self, server: ApiServerProcess):
        self.server = server
        self.conn: http.client.HTTPSConnection | None = None

    def json(self, method: str, path: str, body: dict) -> tuple[int, dict]:
        if self.conn is None:
            self.conn = self.server.connection(timeout=5)
        try:
            self.conn.request(method, path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        except BaseException:
            self.conn.close()
            self.conn = None
            raise


def _write_loop(server: ApiServerProcess, ns: str, writer: Writer, stop: threading.Event, limit: int = 5000) -> None:
    """Create w<i>-<j>, then update it once: bounded by `limit` and by `stop`."""
    path = CM.format(ns=ns)
    conn = _Conn(server)
    for j in range(limit):
        if stop.is_set():
            return
        name = f"w{writer.index}-{j}"
        try:
            status, body = conn.json("POST", path, {"metadata": {"name": name}, "data": {"gen": "0"}})
        except REQUEST_ERRORS + (ValueError,):
            writer.errors += 1
            time.sleep(0.05)
            continue
        writer.statuses[status] = writer.statuses.get(status, 0) + 1
        if status != 201:
            time.sleep(0.05)
            continue
        rv = int(body["metadata"]["resourceVersion"])
        writer.acked.append((name, rv, 0))
        body["data"] = {"gen": "1"}
        try:
            status, body = conn.json("PUT", f"{path}/{name}", body)
        except REQUEST_ERRORS + (ValueError,):
            writer.errors += 1
            continue
        writer.statuses[status] = writer.statuses.get(status, 0) + 1
        if status == 200:
            writer.acked.append((name, int(body["metadata"]["resourceVersion"]), 1))


class Load:
    def __init__(self, server: ApiServerProcess, ns: str):
        self.stop = threading.Event()
        self.writers = [Writer(i) for i in range(WRITERS)]
        self.threads = [
            threading.Thread(target=_write_loop, args=(server, ns, w, self.stop), daemon=True) for w in self.writers
        ]

    def __enter__(self) -> "Load":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(20)
        assert not any(t.is_alive() for t in self.threads), "a writer thread did not stop"

    def acked_count(self) -> int:
        return sum(len(w.acked) for w in self.writers)

    def wait_acked(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_count() < n:
            assert time.monotonic() < deadline, f"only {self.acked_count()} writes acknowledged in {timeout}s"
            time.sleep(0.05)


def _list(server: ApiServerProcess, ns: str, query: str = "") -> tuple[int, dict[str, tuple[int, str]]]:
    _, doc = server.json("GET", CM.format(ns=ns) + query, expect=200, timeout=30)
    items = {
        i["metadata"]["name"]: (int(i["metadata"]["resourceVersion"]), i["data"]["gen"])
        for i in doc["items"]
        if "gen" in (i.get("data") or {})  # not the namespace's root CA ConfigMap
    }
    return int(doc["metadata"]["resourceVersion"]), items


def _check_acked(load: Load, final: dict[str, tuple[int, str]]) -> None:
    """Every acknowledged write is there; resourceVersions unique and increasing."""
    all_rvs: list[int] = []
    for writer in load.writers:
        rvs = [rv for _, rv, _ in writer.acked]
        assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), f"writer {writer.index}: RVs not increasing: {rvs}"
        all_rvs += rvs
        for name, rv, gen in writer.acked:
            assert name in final, f"acknowledged write of {name} (rv {rv}) lost"
            have_rv, have_gen = final[name]
            assert have_rv >= rv and int(have_gen) >= gen, (
                f"{name}: acknowledged rv {rv}/gen {gen}, found {final[name]}"
            )
    assert len(set(all_rvs)) == len(all_rvs), "two acknowledged writes share a resourceVersion"


def _check_watch_resume(
    server: ApiServerProcess, ns: str, from_rv: int, snapshot: dict[str, tuple[int, str]], final_rv: int, final
) -> str:
    """A watch from `from_rv` replays exactly the changes between `snapshot` and
    `final` in increasing order, or ends in 410 Gone. Returns which happened."""
    path = CM.format(ns=ns) + f"?watch=1&resourceVersion={from_rv}"
    state = {name: rv for name, (rv, _) in snapshot.items()}
    want = {name: rv for name, (rv, _) in final.items()}
    last = from_rv
    with server.watch(path, timeout=15) as stream:
        if stream.status == 410:
            return "410"
        assert stream.status == 200, stream.status
        while state != want:
            event = stream.next()
            assert event is not None, f"watch ended before reaching rv {final_rv}"
            obj = event["object"]
            if event["type"] == "ERROR":
                assert obj.get("code") == 410, obj
                return "410"
            rv = int(obj["metadata"]["resourceVersion"])
            assert rv > last, f"watch event rv {rv} after {last}"
            assert rv <= final_rv, f"watch event rv {rv} beyond the final list's {final_rv}"
            last = rv
            if event["type"] == "DELETED":
                state.pop(obj["metadata"]["name"], None)
            else:
                state[obj["metadata"]["name"]] = rv
    return "replayed"


def _kill_under_load(server: ApiServerProcess, ns: str) -> None:
    create_namespace(server, ns)
    with Load(server, ns) as load:
        load.wait_acked(60)
        from_rv, snapshot = _list(server, ns)
        load.wait_acked(load.acked_count() + 60)
        server.kill()
        time.sleep(0.3)
        server.start(timeout=60)
        # Writes go on after the restart: their RVs must follow the earlier ones.
        load.wait_acked(load.acked_count() + 20)
        after_rv, after_snapshot = _list(server, ns)
        load.wait_acked(load.acked_count() + 20)
    final_rv, final = _list(server, ns)
    assert sum(w.errors for w in load.writers) or server.starts == 2
    _check_acked(load, final)
    # The server's own view after the restart agrees with the cache at that RV.
    assert _list(server, ns, f"?resourceVersion={final_rv}")[1] == final
    outcome = _check_watch_resume(server, ns, from_rv, snapshot, final_rv, final)
    # From a resourceVersion listed after the restart the history is the server's own: no 410.
    assert _check_watch_resume(server, ns, after_rv, after_snapshot, final_rv, final) == "replayed"
    print(f"kill -9: {load.acked_count()} acknowledged writes kept, watch from before the crash: {outcome}")


def test_kill9_sqlite_under_writers(tmp_path):
    _require_binary()
    with ApiServerProcess(tmp_path / "srv", free_port()) as server:
        _kill_under_load(server, "faults")
        # The file is sound after the crash.
        server.stop()
        integrity = _sqlite_integrity(tmp_path / "srv")
        assert integrity == "ok", integrity


def _sqlite_integrity(data_dir) -> str:
    paths = list(data_dir.glob("**/*.db"))
    assert paths, f"no database under {data_dir}"
    db = sqlite3.connect(str(paths[0]))
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def test_kill9_etcd_under_writers(etcd, tmp_path):
    _require_binary()
    prefix = f"/orch-test/{uuid.uuid4().hex}"
    server = ApiServerProcess(
        tmp_path / "srv", free_port(), backend="etcd", etcd_endpoint=etcd.endpoint, etcd_prefix=prefix
    )
    with server:
        _kill_under_load(server, "faults")


# --- etcd restarted under load -----------------------------------------------------


def _readyz(server: ApiServerProcess) -> tuple[int, str]:
    try:
        status, _, body = server.request("GET", "/readyz?verbose", timeout=5)
        return status, body.decode(errors="replace")
    except REQUEST_ERRORS as exc:
        return 0, repr(exc)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def _etcd_configmaps(etcd: Etcd, prefix: str, ns: str) -> dict[str, int]:
    key = f"{prefix}/configmaps/{ns}/"
    out = etcd.etcdctl("get", "--prefix", key, "--keys-only", "-w", "json", timeout=30).stdout
    doc = json.loads(out)
    found = {base64.b64decode(kv["key"]).decode()[len(key) :]: int(kv["mod_revision"]) for kv in doc.get("kvs", [])}
    return {name: rv for name, rv in found.items() if name.startswith("w")}  # the writers' objects


@pytest.fixture
def private_etcd(tmp_path):
    with Etcd(base_dir=tmp_path) as instance:
        yield instance


ETCD_PREFIX = "/registry"


def _on_etcd(etcd: Etcd, tmp_path) -> ApiServerProcess:
    return ApiServerProcess(
        tmp_path / "srv", free_port(), backend="etcd", etcd_endpoint=etcd.endpoint, etcd_prefix=ETCD_PREFIX
    )


def test_etcd_restart_under_load(private_etcd, tmp_path):
    _require_binary()
    etcd = private_etcd
    prefix = ETCD_PREFIX
    server = _on_etcd(etcd, tmp_path)
    with server:
        ns = "faults"
        create_namespace(server, ns)
        with Load(server, ns) as load:
            load.wait_acked(60)
            from_rv, snapshot = _list(server, ns)
            etcd.stop_daemon()
            status, body = _wait(lambda: (r := _readyz(server))[0] not in (0, 200) and r, 20, "/readyz to fail")
            assert status >= 500 and "[-]etcd" in body, (status, body)
            acked_while_down = load.acked_count()
            time.sleep(2)
            etcd.restart()
            _wait(lambda: _readyz(server)[0] == 200, 30, "/readyz to pass after etcd returned")
            load.wait_acked(load.acked_count() + 20)
            after_rv, after_snapshot = _list(server, ns)
            load.wait_acked(load.acked_count() + 40)
        assert server.running and server.starts == 1, "the server restarted"
        statuses: dict[int, int] = {}
        for writer in load.writers:
            for code, n in writer.statuses.items():
                statuses[code] = statuses.get(code, 0) + n
        print(f"etcd restart: statuses {statuses}")
        # While etcd is away writes get 503 (Retry-After), never a 500 or a hang.
        assert set(statuses) <= {200, 201, 503, 504}, statuses
        final_rv, final = _list(server, ns)
        _check_acked(load, final)
        direct = _etcd_configmaps(etcd, prefix, ns)
        assert {name: rv for name, (rv, _) in final.items()} == direct
        cached_rv, cached = _list(server, ns, f"?resourceVersion={final_rv}")
        assert cached == final
        # The watch cache resumed its storage watch after the outage instead of relisting:
        # its history spans it, so a watch from before the outage replays too.
        outcome = _check_watch_resume(server, ns, from_rv, snapshot, final_rv, final)
        assert outcome == "replayed"
        assert _check_watch_resume(server, ns, after_rv, after_snapshot, final_rv, final) == "replayed"
        print(
            f"etcd restart: {acked_while_down} acked before the outage, {load.acked_count()} in all, watch: {outcome}"
        )


def test_etcd_behind_the_cache_is_listed_again(private_etcd, tmp_path):
    """etcd back with less than the server saw (its data lost here; a restore from an
    older snapshot is the same): the watch cache lists again instead of waiting for
    revisions it has seen, and serves what etcd holds."""
    _require_binary()
    etcd = private_etcd
    prefix = ETCD_PREFIX
    server = _on_etcd(etcd, tmp_path)
    with server:
        ns = "behind"
        create_namespace(server, ns)
        for i in range(20):
            server.json("POST", CM.format(ns=ns), {"metadata": {"name": f"w{i}"}, "data": {"gen": "0"}}, expect=201)
        assert len(_list(server, ns)[1]) == 20
        etcd.stop_daemon()
        shutil.rmtree(etcd.data_dir)
        etcd.restart()
        _wait(lambda: not _list(server, ns)[1], 30, "the cache to show etcd's (empty) state")
        # (Not create_namespace: the lost data held the controllers' RBAC policy, so no
        # default ServiceAccount comes until the server starts again and puts it back.)
        server.json("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, expect=201)

        def created() -> bool:
            status, _ = server.json(
                "POST", CM.format(ns=ns), {"metadata": {"name": "w-new"}, "data": {"gen": "1"}}, expect=(201, 404)
            )
            return status == 201  # 404 until the cache has the namespace again

        _wait(created, 15, "a ConfigMap created in the namespace made again")
        listed = _wait(lambda: _list(server, ns)[1] or None, 15, "the new object in the cache")
        assert list(listed) == ["w-new"]
        assert set(_etcd_configmaps(etcd, prefix, ns)) == {"w-new"}
        assert server.running and server.starts == 1, "the server restarted"


# --- the SQLite data directory's filesystem full -----------------------------------


class _LogOutside(ApiServerProcess):
    """The server's log kept off the filesystem under test."""

    def __init__(self, data_dir, log_dir, **kw):
        super().__init__(data_dir, **kw)
        self._log_dir = log_dir

    @property
    def log_path(self):
        return self._log_dir / "apiserver.log"


def _fill(path, chunk: int = 1 << 20) -> int:
    """Write `path` until the filesystem refuses; returns the bytes written."""
    written = 0
    block = b"\0" * chunk
    with open(path, "wb", buffering=0) as fh:
        while chunk >= 4096:
            try:
                written += fh.write(block[:chunk])
            except OSError:
                chunk //= 4  # the last free blocks, in smaller pieces
    return written


@pytest.fixture
def small_fs(tmp_path):
    if not _root():
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _root() -> bool:
    return os.geteuid() == 0


def test_sqlite_filesystem_full(small_fs, tmp_path):
    _require_binary()
    data_dir = small_fs / "data"
    server = _LogOutside(data_dir, tmp_path, port=free_port())
    filler = small_fs / "filler"
    path = CM.format(ns="default")
    payload = "x" * 65536
    acked: dict[str, int] = {}
    with server:
        conn = _Conn(server)
        for i in range(5):
            status, body = conn.json("POST", path, {"metadata": {"name": f"before-{i}"}, "data": {"p": payload}})
            assert status == 201, body
            acked[f"before-{i}"] = int(body["metadata"]["resourceVersion"])
        _fill(filler)
        failure = None
        for i in range(200):  # bounded: the WAL's free room is a few pages at most
            status, body = conn.json("POST", path, {"metadata": {"name": f"full-{i}"}, "data": {"p": payload}})
            if status == 201:
                acked[f"full-{i}"] = int(body["metadata"]["resourceVersion"])
                continue
            failure = (status, body)
            break
        assert failure is not None, "writes kept succeeding on a full filesystem"
        status, body = failure
        print(f"filesystem full: {len(acked)} writes acknowledged, then {status} {body.get('message')!r}")
        # As upstream answers etcd's exceeded space quota: 500 InternalError naming the cause.
        assert status == 500 and body["kind"] == "Status" and body["reason"] == "InternalError", failure
        assert "storage is full" in body["message"] and "no space left" in body["message"], body
        # Reads still served while full.
        assert _list(server, "default")[1] is not None
        filler.unlink()
        # Service resumes when space returns (within a bounded number of tries).
        resumed = _wait(
            lambda: conn.json("POST", path, {"metadata": {"name": "after"}, "data": {"p": "1"}})[0] == 201,
            15,
            "writes to succeed after space returned",
        )
        assert resumed
    integrity = _sqlite_integrity(data_dir)
    assert integrity == "ok", integrity
    with server:
        _, doc = server.json("GET", path, expect=200)
        have = {i["metadata"]["name"]: int(i["metadata"]["resourceVersion"]) for i in doc["items"]}
        for name, rv in acked.items():
            assert have.get(name) == rv, f"acknowledged {name} (rv {rv}) lost after the filesystem was full"
        assert "after" in have
