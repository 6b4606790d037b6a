"""The component fixtures run the real daemons."""

from __future__ import annotations

import re
import shutil

import aetcd
import pytest


def test_containerd_reports_server_version(containerd):
    out = containerd.ctr("version").stdout
    assert "Server:" in out, out
    server = out.split("Server:", 1)[1]
    match = re.search(r"Version:\s+(\S+)", server)
    assert match, out
    assert match.group(1)


def test_containerd_lists_cri_images(containerd):
    result = containerd.ctr("images", "ls", namespace="k8s.io")
    assert result.stdout.startswith("REF"), result.stdout


def test_containerd_is_private(containerd):
    assert containerd.running
    assert containerd.socket.is_socket()
    assert str(containerd.socket).startswith(str(containerd.dir))
    config = containerd.config_path.read_text()
    assert "restrict_oom_score_adj = true" in config
    assert f'conf_dir = "{containerd.cni_conf_dir}"' in config
    assert (containerd.cni_conf_dir / "10-orch-bridge.conflist").is_file()


def test_etcdctl_put_get(etcd, etcd_prefix):
    if shutil.which("etcdctl") is None:
        pytest.skip("etcdctl not on PATH (Debian package etcd-client)")
    key = etcd_prefix + "etcdctl"
    assert etcd.etcdctl("put", key, "hello").stdout.strip() == "OK"
    out = etcd.etcdctl("get", key, "--print-value-only").stdout
    assert out.strip() == "hello"


async def test_aetcd_put_get(etcd, etcd_prefix):
    key = (etcd_prefix + "aetcd").encode()
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        await client.put(key, b"world")
        got = await client.get(key)
    assert got is not None
    assert got.value == b"world"
