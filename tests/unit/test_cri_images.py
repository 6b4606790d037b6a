"""packaging/images/build.py: deterministic OCI layout tarballs (no containerd needed)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.components import image_builder

builder = image_builder()

pytestmark = pytest.mark.skipif(
    not Path(builder.DEFAULT_BUSYBOX).is_file(), reason="needs Debian busybox-static (/bin/busybox)"
)


def read_layout(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_builds_are_byte_identical(tmp_path):
    first = builder.build_images(tmp_path / "a")
    second = builder.build_images(tmp_path / "b")
    for name in (builder.BUSYBOX_IMAGE, builder.PAUSE_IMAGE):
        assert first[name].path.read_bytes() == second[name].path.read_bytes()
        assert first[name].config_digest == second[name].config_digest
    # The two images share their one layer.
    assert first[builder.BUSYBOX_IMAGE].config_digest != first[builder.PAUSE_IMAGE].config_digest


def test_cache_is_reused(tmp_path):
    built = builder.build_image(builder.IMAGES[builder.BUSYBOX_IMAGE], tmp_path)
    mtime = built.path.stat().st_mtime_ns
    again = builder.build_image(builder.IMAGES[builder.BUSYBOX_IMAGE], tmp_path)
    assert again == built and again.path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("name", [builder.BUSYBOX_IMAGE, builder.PAUSE_IMAGE])
def test_oci_layout(tmp_path, name):
    built = builder.build_image(builder.IMAGES[name], tmp_path)
    files = read_layout(built.path)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    [descriptor] = index["manifests"]
    assert descriptor["annotations"]["io.containerd.image.name"] == name
    assert descriptor["digest"] == built.manifest_digest
    manifest = json.loads(blob(files, descriptor["digest"]))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = json.loads(blob(files, manifest["config"]["digest"]))
    assert manifest["config"]["digest"] == built.config_digest
    [layer_descriptor] = manifest["layers"]
    assert layer_descriptor["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    layer = gzip.decompress(blob(files, layer_descriptor["digest"]))
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]

    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].isfile() and members["bin/busybox"].mode == 0o755
    for applet in ("sh", "sleep", "httpd", "cat", "echo", "wget", "nc", "ls", "env", "true", "false", "hostname", "ps"):
        assert members[f"bin/{applet}"].issym() and members[f"bin/{applet}"].linkname == "busybox"
    assert members["tmp"].mode == 0o1777
    assert "etc/passwd" in members and "var/www/index.html" in members
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in members.values())

    if name == builder.PAUSE_IMAGE:
        assert config["config"]["Entrypoint"][:2] == ["/bin/sh", "-c"]
        assert "trap 'exit 0' TERM" in config["config"]["Entrypoint"][2]
    else:
        assert config["config"]["Cmd"] == ["sh"]


def test_unknown_image_name(tmp_path):
    with pytest.raises(builder.ImageBuildError, match="unknown image"):
        builder.build_images(tmp_path, names=["orch.local/nope:1"])
