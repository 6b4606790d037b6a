"""Issue 22's cheaper requests: the watch cache taking its own writes' summaries from the
write path, the cheap tests before decoding a cached object, the uid generator, and
``--workers`` (its flag checks and the supervisor, with stand-in worker processes)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import orjson
import pytest

from apiserver_min.admission.chain import Chain
from apiserver_min.api.helpers import new_uid
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER
from apiserver_min.options import OptionsError, parse
from apiserver_min.registry.store import Store
from apiserver_min.server.timeouts import Deadlines
from apiserver_min.storage.cacher import Entry, WatchCache
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend


def test_new_uid_is_a_random_version_4_uuid():
    seen = {new_uid() for _ in range(200)}
    assert len(seen) == 200
    for text in seen:
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 4 and u.variant == uuid.RFC_4122


def test_entry_mentions_member_names_only_as_whole_names():
    raw = orjson.dumps({"spec": {"ephemeralContainers": [], "volumes": [{"name": "v", "emptyDir": {}}]}})
    e = Entry("/k", raw, 1, "ns", "n", {}, {})
    assert e.mentions("volumes") and e.mentions("emptyDir")
    assert not e.mentions("ephemeral")  # only ephemeralContainers
    assert not e.mentions("persistentVolumeClaim")


def _pod(name: str, labels: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "schedulerName": "elsewhere"},
    }


def test_own_writes_reach_the_cache_as_stored_without_later_changes(tmp_path):
    async def go() -> None:
        backend = SqliteBackend(str(tmp_path / "db.sqlite"))
        await backend.start()
        cache = WatchCache(backend, list(REGISTRY.kinds), key_prefix)
        await cache.start()
        store = Store(backend, REGISTRY, cache, Chain([]))
        kind = REGISTRY.by_resource("", "v1", "pods")
        try:
            obj, _raw = await store.create(kind, "default", _pod("a", {"app": "x"}), SYSTEM_USER)
            rev = int(obj["metadata"]["resourceVersion"])
            obj["metadata"]["labels"]["app"] = "changed-after-the-write"
            obj["spec"]["nodeName"] = "changed"
            assert await cache.wait_for(rev, 5.0)
            c = cache.cache(key_prefix(kind))
            entry = c.items["/pods/default/a"]
            stored = await backend.get("/pods/default/a")
            assert stored is not None and entry.raw == stored.value and entry.rv == rev
            # The entry equals one made by decoding the stored bytes.
            assert entry == c.make_entry(entry.key, stored.value, rev)
            assert entry.labels == {"app": "x"} and entry.fields["spec.nodeName"] == ""
            assert not cache._written  # the note was used up

            # A note of another revision is not used: the event's bytes are decoded.
            key = "/pods/default/b"
            created, _ = await store.create(kind, "default", _pod("b", {"app": "y"}), SYSTEM_USER)
            rev_b = int(created["metadata"]["resourceVersion"])
            assert await cache.wait_for(rev_b, 5.0)
            cache._written[key] = (rev_b + 1, c.summarize(_pod("b", {"app": "wrong"})))

            def relabel(cur: dict) -> dict:
                cur["metadata"]["labels"] = {"app": "z"}
                return cur

            updated, _, _ = await store.update(kind, "default", "b", relabel, SYSTEM_USER)
            assert await cache.wait_for(int(updated["metadata"]["resourceVersion"]), 5.0)
            assert c.items[key].labels == {"app": "z"}
        finally:
            await cache.stop()
            await backend.close()

    asyncio.run(go())


# --- --workers ------------------------------------------------------------------------------


def test_workers_flag_needs_etcd_and_leader_election(tmp_path):
    base = ["--data-dir", str(tmp_path)]
    assert parse(base).workers == 1
    with pytest.raises(OptionsError, match=r"--workers=2 needs --storage-backend=etcd3"):
        parse([*base, "--workers", "2"])
    etcd = [*base, "--storage-backend", "etcd3", "--etcd-servers", "http://127.0.0.1:2379"]
    assert parse([*etcd, "--workers", "3"]).workers == 3
    with pytest.raises(OptionsError, match=r"--workers=2 needs --leader-elect=true"):
        parse([*etcd, "--workers", "2", "--leader-elect=false"])
    with pytest.raises(OptionsError, match="--workers"):
        parse([*etcd, "--workers", "0"])


# A stand-in worker: reports that it serves (or, as worker 1 on its first start, exits 3
# first), writes its pid to a file, and exits 0 on SIGTERM.
_WORKER = textwrap.dedent(
    """
    import os, signal, sys, time
    from apiserver_min.server.workers import report_serving, worker_role
    index, fd = worker_role()
    out = sys.argv[1]
    crashed = os.path.join(out, f"crashed-{index}")
    if index == 1 and not os.path.exists(crashed):
        open(crashed, "w").close()
        sys.exit(3)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    report_serving(fd)
    with open(os.path.join(out, f"pid-{index}-{os.getpid()}"), "w"):
        pass
    while True:
        time.sleep(1)
    """
)

_SUPERVISOR = textwrap.dedent(
    """
    import logging, sys
    from apiserver_min.server import workers
    workers.RESTART_BACKOFF_MIN = 0.2
    logging.basicConfig(level=logging.INFO)
    sys.exit(workers.Supervisor([sys.executable, "-c", sys.argv[1], sys.argv[2]], 2, 1234).run())
    """
)


def test_supervisor_starts_restarts_and_stops_its_workers(tmp_path):
    env = dict(os.environ)
    env.pop("ORCH_APISERVER_WORKER", None)
    sup = subprocess.Popen(
        [sys.executable, "-c", _SUPERVISOR, _WORKER, str(tmp_path)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = sorted(p.name for p in tmp_path.glob("pid-*"))
            if len(pids) == 2:
                break
            time.sleep(0.1)
        assert [p.split("-")[1] for p in pids] == ["0", "1"], pids
        workers = [int(p.split("-")[2]) for p in pids]
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        for pid in workers:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait(10)
    log = sup.stderr.read() if sup.stderr else ""
    assert re.search(r"worker 1 \(pid \d+\) exited with 3; starting it again", log), log
    assert "all 2 workers serve on port 1234" not in log  # worker 1 failed its first start
    assert "1 of 2 workers serve" in log


def test_a_key_finds_the_cache_of_its_longest_prefix():
    """cache_for_key looks prefixes up per '/' of the key: the same answer as the longest
    prefix that matches, also where one kind's prefix lies under another's."""
    cache = WatchCache(None, list(REGISTRY.kinds), key_prefix)  # type: ignore[arg-type]
    pods = cache.caches["/pods/"]
    nested = cache.caches["/pods/special/"] = cache.caches["/services/"]  # stands for a kind under /pods/

    def longest(key: str):
        found = [p for p in cache.caches if key.startswith(p)]
        return cache.caches[max(found, key=len)] if found else None

    for prefix in list(cache.caches):
        for key in (f"{prefix}ns/name", f"{prefix}name"):
            assert cache.cache_for_key(key) is longest(key)
    assert cache.cache_for_key("/pods/team/web") is pods
    assert cache.cache_for_key("/pods/special/web") is nested
    assert cache.cache_for_key("/nothing/team/web") is None and cache.cache_for_key("pods") is None


async def test_deadlines_cancel_what_outlives_them_and_forget_what_finished():
    """One timer for the default length (oldest first), one of its own for a shorter one;
    a finished deadline never fires."""
    deadlines = Deadlines(0.05)
    fired: list[str] = []

    async def guarded(name: str, seconds: float, work: float) -> None:
        d = deadlines.start(seconds)
        try:
            await asyncio.sleep(work)
            deadlines.finish(d)
        except asyncio.CancelledError:
            assert d.expired
            fired.append(name)

    await asyncio.gather(
        guarded("slow", 0.05, 1.0), guarded("quick", 0.05, 0.0), guarded("short", 0.01, 1.0), guarded("done", 0.01, 0.0)
    )
    assert sorted(fired) == ["short", "slow"]
    assert not deadlines._fifo
