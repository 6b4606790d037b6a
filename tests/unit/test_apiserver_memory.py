"""What the API server loads at start: libraries only some configurations use stay
unloaded until the feature that needs them is used (their resident size is in
tests/unit/test_house.py's OPTIONAL_IMPORTS)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson

from apiserver_min.api.kinds import REGISTRY
from apiserver_min.storage.cacher import ResourceCache

REPO = Path(__file__).resolve().parents[2]

# The expression engine (and RE2, protobuf descriptors) is for validating admission
# policies, webhooks' match conditions and custom resources' validation rules only;
# the etcd client for --storage-backend=etcd3 only.
NOT_AT_START = ("cel_expr_python", "re2", "google", "aetcd", "grpc")

_PROBE = """
import json, sys
import apiserver_min.cli, apiserver_min.server.app
at_start = sorted({m.split('.')[0] for m in sys.modules})
from apiserver_min import cel
program = cel.Compiler(("object",)).compile("object.spec.replicas <= 5")
typed = cel.Compiler(("self",), types={"self": ("list", ("int",))}).compile("self.all(x, x > 0)")
used = sorted({m.split('.')[0] for m in sys.modules})
print(json.dumps([at_start, used, program.run({"object": {"spec": {"replicas": 3}}}), typed.run({"self": [1, 2]})]))
"""


def test_the_server_loads_the_expression_engine_with_the_first_compiled_expression():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.strip()
    at_start, used, result, typed_result = json.loads(out)
    assert set(at_start).isdisjoint(NOT_AT_START), sorted(set(at_start) & set(NOT_AT_START))
    assert {"cel_expr_python", "google"} <= set(used)
    assert result is True and typed_result is True


def test_cached_objects_share_their_namespace_labels_and_field_values():
    cache = ResourceCache(REGISTRY.by_resource("", "v1", "pods"), "/pods/")

    def entry(name: str):
        # each object decoded on its own, as every write is
        raw = orjson.dumps(
            {
                "metadata": {"name": name, "namespace": "team-a", "labels": {"app": "web-frontend"}},
                "spec": {"nodeName": "node-0001", "schedulerName": "custom-scheduler"},
                "status": {"phase": "Running"},
            }
        )
        return cache.make_entry(f"/pods/team-a/{name}", raw, 1)

    a, b = entry("pod-a"), entry("pod-b")
    assert a.namespace == b.namespace == "team-a" and a.namespace is b.namespace
    assert a.labels["app"] is b.labels["app"]
    for path in ("metadata.namespace", "spec.nodeName", "spec.schedulerName", "status.phase"):
        assert a.fields[path] == b.fields[path] and a.fields[path] is b.fields[path], path
    assert a.fields["metadata.namespace"] is a.namespace
    assert (a.name, a.fields["metadata.name"], b.name) == ("pod-a", "pod-a", "pod-b")
