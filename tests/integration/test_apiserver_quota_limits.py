"""ResourceQuota, LimitRanger and Priority admission (and the quota controller) on a real
orch-apiserver: quota refusals with upstream's messages, exactly-N under concurrent
creates, usage given back on delete, LimitRange defaults and bounds, priority classes."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from apiserver_min.api import names
from tests.apiserver_fixtures import ApiServerProcess, create_namespace
from tests.components import free_port
from tests.helpers import uniq, wait_for

PC = f"/apis/{names.SCHEDULING_GROUP}/v1/priorityclasses"


def _pod(name: str, resources: dict | None = None, **spec) -> dict:
    container: dict = {"name": "c", "image": "orch.local/busybox:1"}
    if resources is not None:
        container["resources"] = resources
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def _quota(apiserver, ns: str, name: str, hard: dict, **spec) -> dict:
    apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": name}, "spec": {"hard": hard, **spec}},
        expect=201,
    )

    def synced():
        _, q = apiserver.json("GET", f"/api/v1/namespaces/{ns}/resourcequotas/{name}", expect=200)
        status = q.get("status") or {}
        return q if status.get("hard") == hard and set(status.get("used") or {}) == set(hard) else None

    return wait_for(synced, timeout=10, what=f"quota {name} status")


def _used(apiserver, ns: str, name: str) -> dict:
    _, q = apiserver.json("GET", f"/api/v1/namespaces/{ns}/resourcequotas/{name}", expect=200)
    return (q.get("status") or {}).get("used") or {}


@pytest.fixture()
def ns(apiserver):
    name = uniq("quota")
    create_namespace(apiserver, name)
    return name


def test_pod_quota_refuses_the_second_pod_with_upstreams_message(apiserver, kubectl, ns):
    kubectl("-n", ns, "create", "quota", "pods-one", "--hard=pods=1", check=True)
    wait_for(lambda: _used(apiserver, ns, "pods-one") == {"pods": "0"}, what="quota status")
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("first"), expect=201)
    wait_for(lambda: _used(apiserver, ns, "pods-one").get("pods") == "1", what="pods used 1")
    status, doc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("second"))
    assert status == 403, doc
    assert doc["reason"] == "Forbidden"
    assert doc["message"] == (
        'pods "second" is forbidden: exceeded quota: pods-one, requested: pods=1, used: pods=1, limited: pods=1'
    )
    # kubectl shows the same message.
    out = kubectl("-n", ns, "run", "third", "--image=orch.local/busybox:1", "--restart=Never")
    assert out.returncode != 0
    assert "exceeded quota: pods-one, requested: pods=1, used: pods=1, limited: pods=1" in out.stderr
    described = kubectl("-n", ns, "describe", "quota", "pods-one", check=True).stdout
    assert [line.split() for line in described.splitlines()][-1] == ["pods", "1", "1"], described
    # Dry run is checked too, and charges nothing.
    status, doc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", _pod("dry"))
    assert status == 403 and "exceeded quota" in doc["message"]


def test_dry_run_charges_nothing(apiserver, ns):
    _quota(apiserver, ns, "pods-two", {"pods": "2"})
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", _pod("dry"), expect=201)
    assert _used(apiserver, ns, "pods-two") == {"pods": "0"}


def test_fifty_concurrent_creates_against_ten_end_with_ten(apiserver, kubectl, ns):
    _quota(apiserver, ns, "ten", {"pods": "10"})

    def create(i: int) -> int:
        return apiserver.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(f"p{i}"))[0]

    with ThreadPoolExecutor(max_workers=50) as pool:
        codes = list(pool.map(create, range(50)))
    assert codes.count(201) == 10, codes
    assert codes.count(403) == 40, codes
    _, pods = apiserver.json("GET", f"/api/v1/namespaces/{ns}/pods", expect=200)
    assert len(pods["items"]) == 10
    assert _used(apiserver, ns, "ten") == {"pods": "10"}
    out = kubectl("-n", ns, "get", "quota", "ten", "--no-headers", "-o", "custom-columns=X:.status.used.pods")
    assert out.stdout.strip() == "10"
    table = kubectl("-n", ns, "get", "quota", "ten", check=True).stdout.splitlines()
    assert table[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert "pods: 10/10" in table[1]


def test_deleting_a_pod_gives_its_usage_back(apiserver, ns):
    _quota(apiserver, ns, "compute", {"pods": "5", "requests.cpu": "2", "limits.memory": "1Gi"})
    res = {"requests": {"cpu": "500m", "memory": "100Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
    for name in ("a", "b"):
        apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod(name, res), expect=201)
    assert _used(apiserver, ns, "compute") == {"pods": "2", "requests.cpu": "1", "limits.memory": "512Mi"}
    apiserver.json("DELETE", f"/api/v1/namespaces/{ns}/pods/a", {"gracePeriodSeconds": 0}, expect=200)
    wait_for(
        lambda: _used(apiserver, ns, "compute") == {"pods": "1", "requests.cpu": "500m", "limits.memory": "256Mi"},
        timeout=3,
        what="usage lowered after the delete",
    )


def test_quota_on_cpu_requires_every_container_to_state_it(apiserver, ns):
    _quota(apiserver, ns, "cpu", {"limits.cpu": "4"})
    status, doc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("x"))
    assert status == 403
    assert doc["message"] == 'pods "x" is forbidden: failed quota: cpu: must specify limits.cpu for: c'
    status, doc = apiserver.json(
        "POST", f"/api/v1/namespaces/{ns}/pods", _pod("big", {"limits": {"cpu": "5"}}), expect=403
    )
    assert "exceeded quota: cpu, requested: limits.cpu=5, used: limits.cpu=0, limited: limits.cpu=4" in doc["message"]


def test_object_counts_and_scopes(apiserver, ns):
    _quota(apiserver, ns, "counts", {"configmaps": "2", "count/secrets": "0"})
    # Every namespace holds the root CA ConfigMap: one used already.
    assert _used(apiserver, ns, "counts") == {"configmaps": "1", "count/secrets": "0"}
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "one"}}, expect=201)
    _, doc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "two"}}, expect=403)
    assert (
        "exceeded quota: counts, requested: configmaps=1, used: configmaps=2, limited: configmaps=2" in doc["message"]
    )
    _, doc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s"}}, expect=403)
    assert "requested: count/secrets=1, used: count/secrets=0, limited: count/secrets=0" in doc["message"]
    # A BestEffort-scoped quota counts only best-effort pods.
    _quota(apiserver, ns, "besteffort", {"pods": "1"}, scopes=["BestEffort"])
    guaranteed = {"limits": {"cpu": "100m", "memory": "64Mi"}}
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("g1", guaranteed), expect=201)
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("g2", guaranteed), expect=201)
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("be1"), expect=201)
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("be2"), expect=403)
    assert _used(apiserver, ns, "besteffort") == {"pods": "1"}


def test_limitrange_defaults_and_bounds(apiserver, kubectl, ns):
    lr = {
        "metadata": {"name": "limits"},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "max": {"cpu": "1"},
                    "default": {"cpu": "500m", "memory": "128Mi"},
                    "defaultRequest": {"cpu": "100m", "memory": "64Mi"},
                    "maxLimitRequestRatio": {"cpu": "10"},
                }
            ]
        },
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/limitranges", lr, expect=201)
    # The limit range reaches the watch cache the plugin reads within moments.
    wait_for(
        lambda: apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", _pod("probe"))[1]["spec"][
            "containers"
        ][0].get("resources"),
        what="the LimitRange in effect",
    )
    _, pod = apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("plain"), expect=201)
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m", "memory": "128Mi"},
        "requests": {"cpu": "100m", "memory": "64Mi"},
    }
    assert pod["metadata"]["annotations"][names.DOMAIN + "/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    )
    assert pod["status"]["qosClass"] == "Burstable"
    status, doc = apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("big", {"limits": {"cpu": "2"}}))
    assert status == 403
    assert doc["message"] == 'pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    manifest = _pod("ratio", {"requests": {"cpu": "50m"}, "limits": {"cpu": "1"}})
    manifest.update(apiVersion="v1", kind="Pod")
    out = kubectl("-n", ns, "create", "-f", "-", input=json.dumps(manifest))
    assert out.returncode != 0
    assert "cpu max limit to request ratio per Container is 10, but provided ratio is 20.000000" in out.stderr


def test_priority_classes(apiserver, ns):
    _, system = apiserver.json("GET", f"{PC}/{names.SYSTEM_CLUSTER_CRITICAL}", expect=200)
    assert system["value"] == 2000000000
    _, node = apiserver.json("GET", f"{PC}/{names.SYSTEM_NODE_CRITICAL}", expect=200)
    assert node["value"] == 2000001000
    _, pod = apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        _pod("critical", priorityClassName=names.SYSTEM_CLUSTER_CRITICAL),
        expect=201,
    )
    assert pod["spec"]["priority"] == 2000000000
    assert pod["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    _, doc = apiserver.json(
        "POST", f"/api/v1/namespaces/{ns}/pods", _pod("unknown", priorityClassName="nope"), expect=403
    )
    assert doc["message"] == 'pods "unknown" is forbidden: no PriorityClass with name nope was found'
    _, plain = apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("plain"), expect=201)
    assert plain["spec"]["priority"] == 0
    _, doc = apiserver.json(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        _pod("mismatch", priorityClassName=names.SYSTEM_NODE_CRITICAL, priority=5),
        expect=403,
    )
    assert "the integer value of priority (5) must not be provided in pod spec; priority admission " in doc["message"]


def test_usage_recounted_on_restart_and_by_the_periodic_resync(tmp_path):
    """Pods created while the ResourceQuota plugin is off are not charged; the controller
    recounts them when the server starts again, and its periodic resync catches later drift."""
    data = tmp_path / "srv"
    ns = "counted"
    with ApiServerProcess(data, free_port(), extra_args=["--disable-admission-plugins=ResourceQuota"]) as off:
        create_namespace(off, ns)
        _quota(off, ns, "pods", {"pods": "5"})
        for i in range(3):
            off.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod(f"p{i}"), expect=201)
        assert _used(off, ns, "pods") == {"pods": "0"}  # nothing charged, nothing deleted
    with ApiServerProcess(data, free_port(), extra_args=["--resource-quota-sync-period=1s"]) as on:
        wait_for(lambda: _used(on, ns, "pods") == {"pods": "3"}, timeout=10, what="usage recounted at start")
        # Drift: an admission charge whose create then failed (a name already taken) is given
        # back by the next resync.
        status, _ = on.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("p0"))
        assert status == 409
        wait_for(
            lambda: _used(on, ns, "pods") == {"pods": "3"}, timeout=5, what="the failed create's charge given back"
        )
        _, doc = on.json("POST", f"/api/v1/namespaces/{ns}/pods", _pod("p3"), expect=201)
        wait_for(lambda: _used(on, ns, "pods") == {"pods": "4"}, timeout=5, what="the new pod counted")


def test_priority_class_rules(apiserver, ns):
    name = uniq("default")
    _, doc = apiserver.json("POST", PC, {"metadata": {"name": "system-mine"}, "value": 5}, expect=422)
    assert doc["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "field": "metadata.name",
            "message": "Forbidden: priority class names with 'system-' prefix are reserved for system use only. "
            "error: system-mine is not a known system priority class",
        }
    ]
    _, doc = apiserver.json("POST", PC, {"metadata": {"name": uniq("big")}, "value": 1000000001}, expect=422)
    assert "value: Forbidden: maximum allowed value of a user defined priority is 1000000000" in doc["message"]
    apiserver.json(
        "POST",
        PC,
        {"metadata": {"name": name}, "value": 1000, "globalDefault": True, "preemptionPolicy": "Never"},
        expect=201,
    )
    try:
        _, doc = apiserver.json(
            "POST", PC, {"metadata": {"name": uniq("second")}, "value": 1, "globalDefault": True}, expect=403
        )
        assert doc["message"].endswith(f"PriorityClass {name} is already marked as default. Only one default can exist")
        _, doc = apiserver.json(
            "PATCH",
            f"{PC}/{name}",
            {"value": 7},
            headers={"Content-Type": "application/merge-patch+json"},
            expect=422,
        )
        assert "value: Forbidden: may not be changed in an update." in doc["message"]
        # The global default class is given to pods naming none (the cache learns of it at once).
        _, pod = wait_for(
            lambda: (
                (r := apiserver.json("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", _pod("d")))[1]["spec"].get(
                    "priorityClassName"
                )
                and r
            ),
            what="the default class in effect",
        )
        assert pod["spec"]["priorityClassName"] == name
        assert pod["spec"]["priority"] == 1000 and pod["spec"]["preemptionPolicy"] == "Never"
    finally:
        apiserver.json("DELETE", f"{PC}/{name}", expect=200)


@pytest.mark.slow
def test_two_servers_on_one_etcd_admit_exactly_the_quota(etcd, etcd_prefix, tmp_path):
    """The charge is a compare-and-swap in storage: creates split over two API servers
    (each serializing only its own) still end with exactly the quota's worth of pods."""
    a = ApiServerProcess(
        tmp_path / "a", free_port(), backend="etcd3", etcd_endpoint=etcd.endpoint, etcd_prefix=etcd_prefix
    )
    b = ApiServerProcess(
        tmp_path / "b", free_port(), backend="etcd3", etcd_endpoint=etcd.endpoint, etcd_prefix=etcd_prefix
    )
    try:
        a.start()
        (tmp_path / "b").mkdir()
        shutil.copytree(a.data_dir / "pki", b.data_dir / "pki")
        shutil.copy(a.kubeconfig, b.kubeconfig)
        b.start()
        ns = "shared"
        create_namespace(a, ns)
        _quota(a, ns, "ten", {"pods": "10"})
        # Both servers' caches know the quota before the race starts.
        wait_for(lambda: _used(b, ns, "ten") == {"pods": "0"}, what="the quota on the second server")

        def create(i: int) -> int:
            server = a if i % 2 else b
            return server.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(f"p{i}"))[0]

        with ThreadPoolExecutor(max_workers=40) as pool:
            codes = list(pool.map(create, range(40)))
        assert codes.count(201) == 10, codes
        _, pods = b.json("GET", f"/api/v1/namespaces/{ns}/pods", expect=200)
        assert len(pods["items"]) == 10
        assert _used(a, ns, "ten") == {"pods": "10"}
    finally:
        b.stop()
        a.stop()


def test_claims_bounded_by_limit_range_and_charged_to_storage_quota(apiserver, ns):
    lr = {
        "metadata": {"name": "storage"},
        "spec": {"limits": [{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "5Gi"}}]},
    }
    apiserver.json("POST", f"/api/v1/namespaces/{ns}/limitranges", lr, expect=201)
    _quota(apiserver, ns, "storage", {"requests.storage": "6Gi", "persistentvolumeclaims": "5"})

    def claim(name: str, size: str) -> dict:
        return {
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        }

    claims = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    _, doc = wait_for(
        lambda: (r := apiserver.json("POST", claims, claim("huge", "10Gi")))[0] == 403 and r,
        what="the LimitRange in effect",
    )
    assert doc["message"] == (
        'persistentvolumeclaims "huge" is forbidden: '
        "maximum storage usage per PersistentVolumeClaim is 5Gi, but request is 10Gi"
    )
    apiserver.json("POST", claims, claim("a", "4Gi"), expect=201)
    _, doc = apiserver.json("POST", claims, claim("b", "4Gi"), expect=403)
    assert doc["message"].endswith(
        "exceeded quota: storage, requested: requests.storage=4Gi, used: requests.storage=4Gi, "
        "limited: requests.storage=6Gi"
    )
    assert _used(apiserver, ns, "storage") == {"persistentvolumeclaims": "1", "requests.storage": "4Gi"}
