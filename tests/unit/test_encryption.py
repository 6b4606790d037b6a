"""Encryption at rest: the configuration file, the providers, the backend wrapper, the
watch cache's handling of values it cannot decrypt, and the rewrite used for rotation."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re

import orjson
import pytest

from apiserver_min.api.kinds import REGISTRY
from apiserver_min.options import OptionsError, parse
from apiserver_min.storage import encryption as enc
from apiserver_min.storage.cacher import WatchCache
from apiserver_min.storage.interface import TransformError
from apiserver_min.storage.keys import key_prefix
from apiserver_min.storage.sqlite import SqliteBackend

K16, K32, K32B = (base64.b64encode(os.urandom(n)).decode() for n in (16, 32, 32))


def config(*providers: dict, resources=("secrets",)) -> dict:
    return {
        "apiVersion": "apiserver.config.orch.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": list(resources), "providers": list(providers)}],
    }


def keyed(ptype: str, *keys: tuple[str, str]) -> dict:
    return {ptype: {"keys": [{"name": n, "secret": s} for n, s in keys]}}


def build(doc: dict) -> enc.Transformers:
    return enc.parse(doc, REGISTRY.kinds)


SECRET_KEY = "/secrets/default/s1"
SECRET = b'{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1"},"data":{"password":"aHVudGVyMg=="}}'


@pytest.mark.parametrize(
    "provider, header",
    [
        (keyed("aescbc", ("k1", K32)), b"k8s:enc:aescbc:v1:k1:"),
        (keyed("aescbc", ("k1", K16)), b"k8s:enc:aescbc:v1:k1:"),
        (keyed("aesgcm", ("k1", K32)), b"k8s:enc:aesgcm:v1:k1:"),
        (keyed("secretbox", ("k1", K32)), b"k8s:enc:secretbox:v1:k1:"),
    ],
)
def test_each_provider_round_trips_under_its_prefix(provider, header):
    t = build(config(provider))
    stored = t.to_storage(SECRET_KEY, SECRET)
    assert stored.startswith(header)
    assert b"aHVudGVyMg" not in stored and b"Secret" not in stored
    assert t.to_storage(SECRET_KEY, SECRET) != stored  # a fresh IV / nonce every write
    assert t.from_storage(SECRET_KEY, stored) == SECRET


def test_aescbc_layout_is_iv_then_pkcs7_blocks():
    t = build(config(keyed("aescbc", ("k1", K32))))
    body = t.to_storage(SECRET_KEY, SECRET)[len(b"k8s:enc:aescbc:v1:k1:") :]
    assert len(body) == 16 + (len(SECRET) // 16 + 1) * 16


def test_aesgcm_binds_the_value_to_its_key():
    t = build(config(keyed("aesgcm", ("k1", K32))))
    stored = t.to_storage(SECRET_KEY, SECRET)
    with pytest.raises(TransformError, match="aesgcm key 'k1' failed to decrypt"):
        t.from_storage("/secrets/default/other", stored)


def test_first_provider_writes_every_provider_reads():
    old = build(config(keyed("aescbc", ("old", K32))))
    stored_old = old.to_storage(SECRET_KEY, SECRET)
    both = build(config(keyed("aesgcm", ("new", K32B)), keyed("aescbc", ("old", K32))))
    assert both.to_storage(SECRET_KEY, SECRET).startswith(b"k8s:enc:aesgcm:v1:new:")
    assert both.from_storage(SECRET_KEY, stored_old) == SECRET


def test_identity_first_writes_plaintext_and_still_reads_encrypted_values():
    stored = build(config(keyed("aescbc", ("k1", K32)))).to_storage(SECRET_KEY, SECRET)
    t = build(config({"identity": {}}, keyed("aescbc", ("k1", K32))))
    assert t.to_storage(SECRET_KEY, SECRET) == SECRET
    assert t.from_storage(SECRET_KEY, stored) == SECRET
    assert t.from_storage(SECRET_KEY, SECRET) == SECRET


def test_a_missing_key_is_an_error_naming_it():
    stored = build(config(keyed("aescbc", ("gone", K32)))).to_storage(SECRET_KEY, SECRET)
    t = build(config(keyed("aescbc", ("k2", K32B))))
    with pytest.raises(TransformError, match="aescbc key 'gone'") as err:
        t.from_storage(SECRET_KEY, stored)
    assert SECRET_KEY in str(err.value)


def test_a_wrong_secret_under_the_same_name_is_an_error():
    stored = build(config(keyed("aescbc", ("k1", K32)))).to_storage(SECRET_KEY, SECRET)
    t = build(config(keyed("aescbc", ("k1", K32B))))
    with pytest.raises(TransformError, match="aescbc key 'k1' failed to decrypt"):
        t.from_storage(SECRET_KEY, stored)


def test_plaintext_without_identity_is_an_error():
    t = build(config(keyed("aesgcm", ("k1", K32))))
    with pytest.raises(TransformError, match="identity provider is not configured"):
        t.from_storage(SECRET_KEY, SECRET)


def test_resources_not_listed_are_untouched_and_wildcards_match_groups():
    t = build(config(keyed("aesgcm", ("k1", K32)), resources=("secrets", "*.apps")))
    cm = b'{"kind":"ConfigMap"}'
    assert t.to_storage("/configmaps/default/c", cm) == cm
    assert t.to_storage("/apps/deployments/default/d", cm).startswith(b"k8s:enc:aesgcm:")
    assert t.for_key("/batch/jobs/default/j") is None
    everything = build(config(keyed("aesgcm", ("k1", K32)), resources=("*.*",)))
    assert everything.for_key("/configmaps/default/c") is not None
    assert everything.for_key("/nodes/n1") is not None  # cluster-scoped, core
    rbac = build(config(keyed("aesgcm", ("k1", K32)), resources=("clusterroles.rbac.orch.io",)))
    assert rbac.for_key("/rbac.orch.io/clusterroles/admin") is not None
    assert rbac.for_key("/rbac.orch.io/roles/default/r") is None
    assert rbac.for_key("/clusterroles/admin") is None
    # Custom resources, defined after start: matched by their group and resource.
    cr = build(config(keyed("aesgcm", ("k1", K32)), resources=("widgets.example.com", "*.acme.io")))
    assert cr.for_key("/example.com/widgets/default/w") is not None
    assert cr.for_key("/example.com/gadgets/default/g") is None
    assert cr.for_key("/acme.io/anvils/a") is not None
    assert everything.for_key("/example.com/widgets/default/w") is not None
    core = build(config(keyed("aesgcm", ("k1", K32)), resources=("*.",)))
    assert core.for_key("/configmaps/default/c") is not None
    assert core.for_key("/apps/deployments/default/d") is None
    dotted = build(config(keyed("aesgcm", ("k1", K32)), resources=("configmaps.",)))
    assert dotted.for_key("/configmaps/default/c") is not None


@pytest.mark.parametrize(
    "doc, message",
    [
        (config(keyed("aescbc", ("k1", "not base64!"))), "keys[0].secret: not valid base64"),
        (config(keyed("aescbc", ("k1", base64.b64encode(b"x" * 20).decode()))), "16 or 24 or 32 bytes, got 20"),
        (config(keyed("secretbox", ("k1", K16))), "secretbox needs a key of 32 bytes, got 16"),
        (config({"rot13": {}}), "unknown provider 'rot13'"),
        (config({"kms": {"name": "x"}}), "the kms provider is not supported"),
        (config({"identity": {}, "aescbc": {}}), "exactly one provider type"),
        (config(keyed("aescbc", ("k1", K32), ("k1", K32B))), "duplicate key name 'k1'"),
        (config(keyed("aescbc", ("a:b", K32))), "must not contain ':'"),
        (config({"identity": {}}, resources=("*",)), "'*' is not allowed"),
        (config({"identity": {}}, resources=("*.*", "secrets")), "'secrets' is masked by the earlier entry '*.*'"),
        (config({"identity": {}}, resources=("secrets", "secrets.")), "listed more than once"),
        (config({"identity": {}}, resources=("Secrets",)), "not a lowercase resource"),
        ({**config({"identity": {}}), "kind": "Other"}, "kind: must be EncryptionConfiguration"),
        ({**config({"identity": {}}), "apiVersion": "v1"}, "apiVersion: must be apiserver.config.orch.io/v1"),
        ({**config({"identity": {}}), "extra": 1}, "unknown field 'extra'"),
    ],
)
def test_bad_configurations_name_the_field(doc, message):
    with pytest.raises(enc.EncryptionConfigError, match=re.escape(message)):
        build(doc)


def test_the_flag_reads_yaml_and_a_bad_file_is_a_start_up_error(tmp_path):
    good = tmp_path / "enc.yaml"
    good.write_text(
        "apiVersion: apiserver.config.orch.io/v1\nkind: EncryptionConfiguration\nresources:\n"
        f"- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - name: k1\n        secret: {K32}\n"
    )
    opts = parse(["--data-dir", str(tmp_path), "--encryption-provider-config", str(good)])
    assert opts.encryption is not None and opts.encryption.for_key(SECRET_KEY) is not None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(config(keyed("aesgcm", ("k1", K16[:-4])))))
    with pytest.raises(OptionsError, match=f"--encryption-provider-config: {bad}: .*keys\\[0\\].secret"):
        parse(["--data-dir", str(tmp_path), "--encryption-provider-config", str(bad)])
    with pytest.raises(OptionsError, match="cannot read"):
        parse(["--data-dir", str(tmp_path), "--encryption-provider-config", str(tmp_path / "missing")])


def _secret(name: str, value: str) -> bytes:
    return orjson.dumps(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"}, "data": {"k": value}}
    )


def test_wrapper_cache_and_rewrite_on_sqlite(tmp_path):
    """The wrapper encrypts what reaches the database; the cache serves what it can decrypt
    and remembers what it cannot; the rewrite moves every value to the first key."""

    async def go():
        raw = SqliteBackend(str(tmp_path / "state.db"))
        await raw.start()
        old = build(config(keyed("aescbc", ("old", K32))))
        b = enc.EncryptingBackend(raw, old)
        await b.create("/secrets/default/a", _secret("a", "QUFB"))
        await b.create("/configmaps/default/c", b'{"kind":"ConfigMap","metadata":{"name":"c"}}')
        stored = await raw.get("/secrets/default/a")
        assert stored is not None and stored.value.startswith(b"k8s:enc:aescbc:v1:old:")
        assert b"QUFB" not in stored.value
        assert (await raw.get("/configmaps/default/c")).value.startswith(b'{"kind"')
        got = await b.get("/secrets/default/a")
        assert got is not None and got.value == _secret("a", "QUFB")
        assert [kv.value for kv in (await b.list("/secrets/")).items] == [_secret("a", "QUFB")]

        # A server that lost the old key: 'a' fails alone, 'b' (its own key) works.
        new = build(config(keyed("aesgcm", ("new", K32B))))
        b2 = enc.EncryptingBackend(raw, new)
        await b2.create("/secrets/default/b", _secret("b", "QkJC"))
        with pytest.raises(TransformError, match="aescbc key 'old'"):
            await b2.get("/secrets/default/a")
        assert (await b2.get("/secrets/default/b")).value == _secret("b", "QkJC")
        with pytest.raises(TransformError):
            await b2.list("/secrets/")
        cache = WatchCache(raw, list(REGISTRY.kinds), key_prefix, new.from_storage)
        await cache.start()
        try:
            secrets = cache.cache("/secrets/")
            assert set(secrets.items) == {"/secrets/default/b"}
            assert "aescbc key 'old'" in secrets.undecryptable["/secrets/default/a"]
            assert secrets.undecryptable_in("default") and secrets.undecryptable_in("other") is None
            # Live events: an undecryptable write is skipped, the cache keeps running.
            await b.update("/secrets/default/b", _secret("b", "WFhY"), 0)
            await b2.create("/secrets/default/c", _secret("c", "Q0ND"))
            assert await cache.wait_for(await raw.current_revision(), 3.0)
            assert set(secrets.items) == {"/secrets/default/c"}
            assert set(secrets.undecryptable) == {"/secrets/default/a", "/secrets/default/b"}
            await b2.delete("/secrets/default/b")
            assert await cache.wait_for(await raw.current_revision(), 3.0)
            assert set(secrets.undecryptable) == {"/secrets/default/a"}
        finally:
            await cache.stop()

        # Rotation: both keys configured, the new one first; the rewrite re-encrypts.
        both = build(config(keyed("aesgcm", ("new", K32B)), keyed("aescbc", ("old", K32))))
        report = await enc.rewrite_all(raw, both)
        assert (report.rewritten, report.current, report.failed) == (1, 1, [])
        for name in ("a", "c"):
            kv = await raw.get(f"/secrets/default/{name}")
            assert kv.value.startswith(b"k8s:enc:aesgcm:v1:new:")
        assert (await enc.EncryptingBackend(raw, new).get("/secrets/default/a")).value == _secret("a", "QUFB")
        again = await enc.rewrite_all(raw, both)
        assert (again.rewritten, again.current) == (0, 2)
        # Back to plaintext: identity first, then rewrite.
        plain = build(config({"identity": {}}, keyed("aesgcm", ("new", K32B))))
        assert (await enc.rewrite_all(raw, plain)).rewritten == 2
        assert (await raw.get("/secrets/default/a")).value == _secret("a", "QUFB")
        await raw.close()

    asyncio.run(go())


def test_rewrite_reports_values_it_cannot_decrypt(tmp_path):
    async def go():
        raw = SqliteBackend(str(tmp_path / "state.db"))
        await raw.start()
        await enc.EncryptingBackend(raw, build(config(keyed("aescbc", ("old", K32))))).create(
            "/secrets/default/a", _secret("a", "QUFB")
        )
        report = await enc.rewrite_all(raw, build(config(keyed("aesgcm", ("new", K32B)))))
        assert report.rewritten == 0 and len(report.failed) == 1 and "'old'" in report.failed[0]
        await raw.close()

    asyncio.run(go())
