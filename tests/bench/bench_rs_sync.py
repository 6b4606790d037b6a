"""The ReplicaSet controller's CPU per pod over a scale-up (not a test; issue 19):

    .venv/bin/python tests/bench/bench_rs_sync.py [--replicas 1000] [--others 500]

Drives the real controller (its sync and pod handler) over real watch-cache entries
and informers, in-process: a ReplicaSet of ``--replicas`` is created beside
``--others`` unrelated pods of the same namespace; every pod the controller creates
reaches the informer a little later (as a watch event does), is then scheduled and
then turns ready, each change one more event; between two syncs at most ``BATCH``
events arrive (``--batch``). The run ends when the set's status reports every replica available.
Printed: the controller's CPU per pod created (the process's CPU over the run,
the cache's applying of events included, divided by the replicas), the syncs, and
the same figures in the same run for the full scan the controller did before
(every pod of the namespace looked at and decoded on each sync, by a plain
``Informer.claimable``/``Entry.view`` that scan and decode anew).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from apiserver_min.api.codec import encode_for_storage
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.selectors import LabelSelector
from apiserver_min.client.informer import Informer
from apiserver_min.controllers import podcontrol as pc
from apiserver_min.controllers import replicaset as rsc
from apiserver_min.storage.cacher import Entry, ResourceCache
from apiserver_min.storage.interface import Event, KeyValue
from apiserver_min.storage.keys import key_prefix, object_key

TARGET_MS = 2.0  # server CPU per pod (issue 19)
BATCH = 5  # events that arrive between two syncs (--batch)
MAX_SYNCS = 50_000  # bound of the load loop
MAX_SECONDS = 300.0

POD_KIND = REGISTRY.by_resource("", "v1", "pods")
RS_KIND = REGISTRY.by_resource("apps", "v1", "replicasets")
NS = "bench"

TEMPLATE = {
    "metadata": {"labels": {"app": "web", "tier": "front"}},
    "spec": {
        "containers": [
            {
                "name": "web",
                "image": "registry.local/web:1.2.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(8)],
            }
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
    },
}


class ScanInformer(Informer):
    """The controller's former read path: the whole namespace scanned per claim."""

    def claimable(self, namespace: str, owner_uid: str, selector: LabelSelector) -> list[Entry]:
        return [
            e for e in self.list(namespace) if selector.matches(e.labels) or any(o[0] == owner_uid for o in e.owners)
        ]


class Cluster:
    """Two watch caches, their informers, and a client writing into them."""

    def __init__(self, informer_cls: type[Informer]):
        self.pods_cache = ResourceCache(POD_KIND, key_prefix(POD_KIND))
        self.sets_cache = ResourceCache(RS_KIND, key_prefix(RS_KIND))
        self.pods = informer_cls(self.pods_cache)
        self.sets = informer_cls(self.sets_cache)
        self.rev = 0
        self.inbox: collections.deque = collections.deque()  # events not yet delivered
        self.created = 0

    def _put(self, cache: ResourceCache, inf: Informer, obj: dict, deliver: bool) -> None:
        self.rev += 1
        md = obj["metadata"]
        key = object_key(cache.kind, md["namespace"], md["name"])
        ev = Event("PUT", KeyValue(key, encode_for_storage(obj), self.rev, self.rev), None)
        if deliver:
            inf._deliver(cache.apply(ev, 0.0))
        else:
            self.inbox.append((cache, inf, ev))

    def put_pod(self, obj: dict, deliver: bool = False) -> None:
        self._put(self.pods_cache, self.pods, obj, deliver)

    def put_set(self, obj: dict) -> None:
        self._put(self.sets_cache, self.sets, obj, True)

    def deliver(self, n: int) -> int:
        done = 0
        while self.inbox and done < n:
            cache, inf, ev = self.inbox.popleft()
            cev = cache.apply(ev, 0.0)
            inf._deliver(cev)
            done += 1
            if cache is self.pods_cache and cev.type != "DELETED":
                self._advance(cev.entry.object())
        return done

    def _advance(self, pod: dict) -> None:
        """The next step of a pod's life: scheduled, then running and ready."""
        spec, status = pod.setdefault("spec", {}), pod.setdefault("status", {})
        if pod["metadata"].get("labels", {}).get("app") != "web" or status.get("phase") == pc.RUNNING:
            return
        if not spec.get("nodeName"):
            spec["nodeName"] = f"node-{self.rev % 100}"
            status["phase"] = pc.PENDING
        else:
            status.update(
                phase=pc.RUNNING,
                conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                containerStatuses=[{"name": "web", "ready": True, "restartCount": 0}],
            )
        self.put_pod(pod)

    # --- the client the controller writes through ---------------------------------------

    async def create(self, kind, namespace, obj, *, subresource=""):
        out = copy.deepcopy(obj)
        md = out["metadata"]
        self.created += 1
        md["name"] = md.get("name") or f"{md['generateName']}{self.created:05d}"
        md.update(namespace=namespace, uid=f"pod-{self.created}", creationTimestamp="2026-01-01T00:00:00Z")
        self.put_pod(out)
        return out

    async def update(self, kind, namespace, name, fn, *, subresource=""):
        cache = self.sets_cache if kind is RS_KIND else self.pods_cache
        entry = cache.items.get(object_key(kind, namespace, name))
        assert entry is not None
        out = fn(entry.object())
        if kind is RS_KIND:
            self.put_set(out)
        else:
            self.put_pod(out)
        return out

    async def get(self, kind, namespace, name):
        entry = self.sets_cache.items.get(object_key(RS_KIND, namespace, name))
        return entry.object() if entry is not None else None


class Events:
    async def record(self, *args, **kwargs) -> None:
        pass


class Queue:
    def __init__(self) -> None:
        self.dirty: set = set()

    def add(self, item) -> None:
        self.dirty.add(item)

    def add_after(self, item, delay: float) -> None:
        self.dirty.add(item)


def run(replicas: int, others: int, batch: int, informer_cls: type[Informer], view_shared: bool) -> tuple[float, int]:
    """CPU seconds and syncs until every replica is available."""
    cluster = Cluster(informer_cls)
    for i in range(others):
        cluster.put_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"other-{i:05d}", "namespace": NS, "uid": f"o-{i}", "labels": {"app": "db"}},
                "spec": copy.deepcopy(TEMPLATE["spec"]),
                "status": {"phase": pc.RUNNING},
            },
            deliver=True,
        )
    c = rsc.ReplicaSetController.__new__(rsc.ReplicaSetController)
    c.client, c.kind, c.pod_kind = cluster, RS_KIND, POD_KIND  # type: ignore[assignment]
    c.sets, c.pods = cluster.sets, cluster.pods
    c.events, c.expectations, c.queue = Events(), pc.Expectations(), Queue()  # type: ignore[assignment]
    c.component, c._ready_memo = "bench", {}
    cluster.sets.add_handler(c.on_set)
    cluster.pods.add_handler(c.on_pod)
    cluster.put_set(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": NS, "uid": "rs-web", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": TEMPLATE},
        }
    )
    saved_view = getattr(Entry, "view", None)  # absent in a tree from before the views
    if not view_shared and saved_view is not None:
        Entry.view = Entry.object  # type: ignore[method-assign]
    syncs, wall0, cpu0 = 0, time.monotonic(), time.process_time()
    try:
        loop = asyncio.new_event_loop()
        while syncs < MAX_SYNCS and time.monotonic() - wall0 < MAX_SECONDS:
            queue: Queue = c.queue  # type: ignore[assignment]
            if queue.dirty:
                key = queue.dirty.pop()
                loop.run_until_complete(c.sync(key))
                syncs += 1
            status: dict = {}
            if not cluster.inbox:  # all delivered: done when the status says so
                status = cluster.sets.get(NS, "web").object().get("status", {})  # type: ignore[union-attr]
                if status.get("availableReplicas") == replicas:
                    break
            if not cluster.deliver(batch) and not queue.dirty:
                raise RuntimeError(f"stalled at {status}")
        loop.close()
    finally:
        if saved_view is not None:
            Entry.view = saved_view  # type: ignore[method-assign]
    return time.process_time() - cpu0, syncs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicas", type=int, default=1000)
    ap.add_argument("--others", type=int, default=500)
    ap.add_argument("--batch", type=int, default=BATCH)
    ap.add_argument("--no-baseline", action="store_true")
    args = ap.parse_args()
    cpu, syncs = run(args.replicas, args.others, args.batch, Informer, True)
    print(f"replicas {args.replicas}, other pods in the namespace {args.others}, {args.batch} events between syncs")
    print(
        f"indexed claims, shared views: {1000 * cpu / args.replicas:7.2f} ms CPU per pod "
        f"(target <= {TARGET_MS} ms), {syncs} syncs, {cpu:.2f} s"
    )
    if not args.no_baseline:
        bcpu, bsyncs = run(args.replicas, args.others, args.batch, ScanInformer, False)
        print(
            f"baseline full scan, decoded per sync: {1000 * bcpu / args.replicas:7.2f} ms CPU per pod, "
            f"{bsyncs} syncs, {bcpu:.2f} s"
        )


if __name__ == "__main__":
    main()
