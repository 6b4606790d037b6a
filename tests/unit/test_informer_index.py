"""The informer's claim indexes (by owner uid, orphans by namespace) and the cache
entry's shared decoded view: what the workload controllers' syncs read instead of
decoding every object of a namespace."""

import random

from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.selectors import LabelSelector, parse_label_selector
from apiserver_min.client.informer import Informer
from apiserver_min.storage.cacher import ResourceCache
from apiserver_min.storage.interface import Event, KeyValue

PODS = REGISTRY.by_resource("", "v1", "pods")
PREFIX = "/pods/"


def pod_bytes(ns: str, name: str, labels: dict, refs: list[dict]) -> bytes:
    md: dict = {"name": name, "namespace": ns, "uid": f"u-{ns}-{name}", "labels": labels}
    if refs:
        md["ownerReferences"] = refs
    return encode_for_storage({"apiVersion": "v1", "kind": "Pod", "metadata": md})


def ref(uid: str, controller: bool) -> dict:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": uid, "uid": uid, "controller": controller}


class World:
    def __init__(self) -> None:
        self.cache = ResourceCache(PODS, PREFIX)
        self.inf = Informer(self.cache)
        self.rev = 0

    def put(self, ns: str, name: str, labels: dict, refs: list[dict]) -> None:
        self.rev += 1
        key = f"{PREFIX}{ns}/{name}"
        ev = Event("PUT", KeyValue(key, pod_bytes(ns, name, labels, refs), self.rev, self.rev), None)
        self.inf._deliver(self.cache.apply(ev, 0.0))

    def delete(self, ns: str, name: str) -> None:
        self.rev += 1
        ev = Event("DELETE", KeyValue(f"{PREFIX}{ns}/{name}", b"", self.rev, 0), None)
        self.inf._deliver(self.cache.apply(ev, 0.0))

    def naive(self, ns: str, uid: str, sel: LabelSelector) -> list[str]:
        """What a claim can concern, by scanning and decoding the whole namespace."""
        out = []
        for e in self.cache.sorted_entries(ns):
            refs = e.object()["metadata"].get("ownerReferences", [])
            controlled = any(r.get("controller") is True for r in refs)
            if any(r["uid"] == uid for r in refs) or (not controlled and sel.matches(e.labels)):
                out.append(e.name)
        return out

    def indexed(self, ns: str, uid: str, sel: LabelSelector) -> list[str]:
        return [e.name for e in self.inf.claimable(ns, uid, sel)]


def test_claimable_follows_owners_orphans_and_deletes():
    w = World()
    web = parse_label_selector("app=web")
    w.put("a", "p1", {"app": "web"}, [ref("rs1", True)])
    w.put("a", "p2", {"app": "web"}, [ref("rs2", True)])  # another's: not ours to claim
    w.put("a", "p3", {"app": "web"}, [ref("gc", False)])  # an owner but no controller: an orphan
    w.put("a", "p4", {"app": "db"}, [ref("rs1", True)])  # ours, no longer matching: to release
    w.put("b", "p5", {"app": "web"}, [])  # another namespace
    assert w.indexed("a", "rs1", web) == ["p1", "p3", "p4"]
    w.put("a", "p2", {"app": "web"}, [])  # released by rs2: adoptable now
    w.put("a", "p3", {"app": "web"}, [ref("rs2", True)])  # adopted by rs2
    w.delete("a", "p1")
    assert w.indexed("a", "rs1", web) == ["p2", "p4"]
    assert w.indexed("a", "rs1", LabelSelector.nothing()) == ["p4"]
    w.inf._deliver(None)  # a relist: rebuilt from the cache
    assert w.indexed("b", "rs9", web) == ["p5"]


def test_claimable_agrees_with_a_full_scan_through_random_changes():
    rnd = random.Random(7)
    w = World()
    sels = [parse_label_selector("app=web"), parse_label_selector("app in (web,db)"), LabelSelector.nothing()]
    uids = ["rs1", "rs2", "rs3"]
    w.indexed("a", "rs1", sels[0])  # indexes built now, kept up to date by the events below
    for _ in range(300):
        ns, name = rnd.choice("ab"), f"p{rnd.randrange(12)}"
        if rnd.random() < 0.2:
            if w.cache.items.get(f"{PREFIX}{ns}/{name}") is not None:
                w.delete(ns, name)
            continue
        refs = [ref(u, rnd.random() < 0.5) for u in rnd.sample(uids, rnd.randrange(3))]
        w.put(ns, name, {"app": rnd.choice(["web", "db", "x"])}, refs)
    for ns in "ab":
        for uid in uids:
            for sel in sels:
                assert w.indexed(ns, uid, sel) == w.naive(ns, uid, sel)


def test_a_view_is_decoded_once_per_version_and_object_is_a_copy():
    w = World()
    w.put("a", "p", {"app": "web"}, [])
    e = w.cache.items[f"{PREFIX}a/p"]
    v = e.view()
    assert v is e.view() and v["metadata"]["resourceVersion"] == "1"
    assert e.object() == v and e.object() is not v
    w.put("a", "p", {"app": "db"}, [])
    assert w.cache.items[f"{PREFIX}a/p"].view()["metadata"]["labels"] == {"app": "db"}
