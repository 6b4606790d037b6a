#!/usr/bin/env python3
"""Build orch's test images as OCI layout tarballs and import them into containerd.

No registry is reachable from our machines, so the images the tests and the
quickstart run are made here from Debian's busybox-static (/bin/busybox):

  orch.local/busybox:1   busybox with a symlink for each of its applets in /bin
                         (sh, sleep, httpd, cat, echo, wget, nc, ls, env, ...),
                         /etc/passwd and /etc/group (root, nobody), /tmp; the
                         default command is `sh`.
  orch.local/pause:1     the sandbox ("pause") image: the same busybox running
                         a shell as PID 1 that stays alive, reaps every child
                         (busybox ash's `wait` collects any exited child, so
                         orphans re-parented to PID 1 do not linger as zombies),
                         and exits 0 on SIGTERM (a trap is a handler, which PID 1
                         of a namespace needs: the kernel drops default-action
                         signals sent to it). No compiler needed.

Each image is one gzip layer, an OCI image config and manifest, and an
index.json whose manifest descriptor carries `io.containerd.image.name`, which
`ctr images import` uses as the image name. Everything is deterministic (fixed
mtimes, owners, ordering, gzip header), so the same busybox binary always gives
the same digests; tarballs are cached under a directory keyed by those inputs.

Python API (this file is loaded by path; `packaging/` is not an import package):

    ensure_images(containerd_address) -> {"orch.local/busybox:1": "sha256:<config digest>", ...}

CLI:

    python3 packaging/images/build.py [--cache-dir DIR] [--busybox PATH]
        [--import SOCKET [--namespace k8s.io]] [--force]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

__all__ = [
    "BUSYBOX_IMAGE",
    "PAUSE_IMAGE",
    "ImageSpec",
    "BuiltImage",
    "ImageBuildError",
    "IMAGES",
    "default_cache_dir",
    "busybox_applets",
    "build_image",
    "build_images",
    "import_image",
    "image_digests_in_containerd",
    "ensure_images",
]

BUSYBOX_IMAGE = "orch.local/busybox:1"
PAUSE_IMAGE = "orch.local/pause:1"
DEFAULT_BUSYBOX = "/bin/busybox"
DEFAULT_NAMESPACE = "k8s.io"

# Bump when the layout of what we build changes, so cached tarballs are rebuilt.
BUILDER_VERSION = "1"

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# A shell as PID 1 that holds the sandbox: `wait` returns on SIGTERM, the trap
# exits 0; `sleep` in the background keeps ash in a blocking wait (which reaps
# any child) instead of a busy loop.
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"

_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


class ImageBuildError(RuntimeError):
    """Building or importing an image failed."""


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    name: str
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    labels: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    name: str
    path: Path  # the OCI layout tarball
    manifest_digest: str  # what containerd lists as the image's target digest
    config_digest: str  # the CRI image ID (ImageStatus .image.id)
    size: int  # bytes of config + layer, compressed


IMAGES: dict[str, ImageSpec] = {
    BUSYBOX_IMAGE: ImageSpec(BUSYBOX_IMAGE, entrypoint=None, cmd=("sh",)),
    PAUSE_IMAGE: ImageSpec(PAUSE_IMAGE, entrypoint=("/bin/sh", "-c", PAUSE_SCRIPT), cmd=None),
}


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "orch" / "images"


def _goarch() -> str:
    machine = platform.machine().lower()
    return _GOARCH.get(machine, machine)


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def busybox_applets(busybox: str | os.PathLike = DEFAULT_BUSYBOX) -> list[str]:
    """The applet names the binary itself reports (`busybox --list`)."""
    try:
        out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ImageBuildError(f"cannot run {busybox} --list ({exc}); install Debian's busybox-static") from exc
    names = sorted(
        {line.strip() for line in out.splitlines() if line.strip() and "/" not in line and line.strip() != "busybox"}
    )
    if "sh" not in names or "sleep" not in names:
        raise ImageBuildError(f"{busybox} lacks the sh/sleep applets; is it busybox-static?")
    return names


def _tar_info(
    name: str, *, type_: bytes = tarfile.REGTYPE, mode: int = 0o644, size: int = 0, linkname: str = ""
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _layer_tar(busybox: Path, applets: list[str]) -> bytes:
    """The root filesystem as an uncompressed, deterministic tar (PAX-free GNU format)."""
    binary = busybox.read_bytes()
    files = {
        "etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        "etc/group": b"root:x:0:\nnogroup:x:65534:\n",
        "etc/hostname": b"",
        "etc/hosts": b"127.0.0.1\tlocalhost\n",
        "etc/resolv.conf": b"",
        "var/www/index.html": b"orch busybox\n",
    }
    directories = {
        "bin": 0o755,
        "dev": 0o755,
        "etc": 0o755,
        "proc": 0o755,
        "root": 0o700,
        "sys": 0o755,
        "tmp": 0o1777,
        "usr": 0o755,
        "usr/bin": 0o755,
        "usr/sbin": 0o755,
        "sbin": 0o755,
        "var": 0o755,
        "var/www": 0o755,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(directories):
            tar.addfile(_tar_info(name + "/", type_=tarfile.DIRTYPE, mode=directories[name]))
        tar.addfile(_tar_info("bin/busybox", mode=0o755, size=len(binary)), io.BytesIO(binary))
        for applet in applets:
            tar.addfile(_tar_info(f"bin/{applet}", type_=tarfile.SYMTYPE, mode=0o777, linkname="busybox"))
        for name in sorted(files):
            data = files[name]
            tar.addfile(_tar_info(name, size=len(data)), io.BytesIO(data))
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    # mtime=0 and no file name: the gzip header carries nothing variable.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def _cache_key(spec: ImageSpec, busybox_digest: str, arch: str) -> str:
    material = _canonical_json(
        {
            "builder": BUILDER_VERSION,
            "spec": dataclasses.asdict(spec),
            "busybox": busybox_digest,
            "arch": arch,
        }
    )
    return hashlib.sha256(material).hexdigest()[:20]


def _safe_file_name(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def build_image(
    spec: ImageSpec,
    cache_dir: str | os.PathLike | None = None,
    *,
    busybox: str | os.PathLike = DEFAULT_BUSYBOX,
    force: bool = False,
) -> BuiltImage:
    """Build (or reuse from cache_dir) the OCI layout tarball for one image."""
    busybox = Path(busybox)
    if not busybox.is_file():
        raise ImageBuildError(f"{busybox} not found; install Debian's busybox-static")
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    arch = _goarch()
    busybox_digest = _sha256(busybox.read_bytes())
    key = _cache_key(spec, busybox_digest, arch)
    tar_path = cache_dir / f"{_safe_file_name(spec.name)}-{key}.tar"
    meta_path = tar_path.with_suffix(".json")
    if not force and tar_path.is_file() and meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            return BuiltImage(spec.name, tar_path, meta["manifest_digest"], meta["config_digest"], meta["size"])
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache entry: rebuild it

    layer = _layer_tar(busybox, busybox_applets(busybox))
    layer_gz = _gzip(layer)
    image_config: dict = {"Env": [PATH_ENV], "WorkingDir": "/"}
    if spec.entrypoint is not None:
        image_config["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd is not None:
        image_config["Cmd"] = list(spec.cmd)
    if spec.labels:
        image_config["Labels"] = dict(spec.labels)
    config = {
        "architecture": arch,
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [_sha256(layer)]},
        "history": [
            {"created": "1970-01-01T00:00:00Z", "created_by": f"orch packaging/images/build.py ({busybox.name})"}
        ],
    }
    config_blob = _canonical_json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": _sha256(config_blob), "size": len(config_blob)},
        "layers": [{"mediaType": MEDIA_LAYER_GZIP, "digest": _sha256(layer_gz), "size": len(layer_gz)}],
    }
    manifest_blob = _canonical_json(manifest)
    repository, _, tag = spec.name.rpartition(":")
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": _sha256(manifest_blob),
                "size": len(manifest_blob),
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": spec.name,
                    "org.opencontainers.image.ref.name": tag or "latest",
                },
            }
        ],
    }
    members = [("oci-layout", _canonical_json({"imageLayoutVersion": "1.0.0"})), ("index.json", _canonical_json(index))]
    blobs = sorted(
        {
            blob_digest: blob
            for blob_digest, blob in (
                (_sha256(config_blob), config_blob),
                (_sha256(manifest_blob), manifest_blob),
                (_sha256(layer_gz), layer_gz),
            )
        }.items()
    )
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in ("blobs/", "blobs/sha256/"):
            tar.addfile(_tar_info(directory, type_=tarfile.DIRTYPE, mode=0o755))
        for name, data in members + [(f"blobs/sha256/{d.split(':', 1)[1]}", b) for d, b in blobs]:
            tar.addfile(_tar_info(name, size=len(data)), io.BytesIO(data))

    # Write-then-rename: a concurrent builder never sees a half-written tarball.
    with tempfile.NamedTemporaryFile(dir=cache_dir, delete=False, suffix=".partial") as tmp:
        tmp.write(out.getvalue())
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, tar_path)
    built = BuiltImage(
        spec.name, tar_path, _sha256(manifest_blob), _sha256(config_blob), len(config_blob) + len(layer_gz)
    )
    meta_path.write_text(
        json.dumps(
            {
                "name": spec.name,
                "manifest_digest": built.manifest_digest,
                "config_digest": built.config_digest,
                "size": built.size,
            },
            indent=1,
        )
    )
    return built


def build_images(
    cache_dir: str | os.PathLike | None = None,
    *,
    names=None,
    busybox: str | os.PathLike = DEFAULT_BUSYBOX,
    force: bool = False,
) -> dict[str, BuiltImage]:
    names = list(names) if names is not None else list(IMAGES)
    unknown = [name for name in names if name not in IMAGES]
    if unknown:
        raise ImageBuildError(f"unknown image(s) {unknown}; known: {sorted(IMAGES)}")
    return {name: build_image(IMAGES[name], cache_dir, busybox=busybox, force=force) for name in names}


def _ctr(address: str, namespace: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    ctr = shutil.which("ctr")
    if ctr is None:
        raise ImageBuildError("ctr not found on PATH (Debian package containerd)")
    argv = [ctr, "--address", address, "--namespace", namespace, *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise ImageBuildError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
    return result


def image_digests_in_containerd(address: str, namespace: str = DEFAULT_NAMESPACE) -> dict[str, str]:
    """Image name -> target (manifest) digest, as `ctr images ls` reports them."""
    out = _ctr(address, namespace, "images", "ls").stdout
    found = {}
    for line in out.splitlines()[1:]:
        # REF TYPE DIGEST SIZE PLATFORMS LABELS; SIZE is two words ("1.2 MiB").
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            found[fields[0]] = fields[2]
    return found


def import_image(address: str, image: BuiltImage, namespace: str = DEFAULT_NAMESPACE) -> None:
    """`ctr images import` the tarball (which also unpacks it for the default snapshotter)."""
    _ctr(address, namespace, "images", "import", str(image.path))
    have = image_digests_in_containerd(address, namespace).get(image.name)
    if have != image.manifest_digest:
        raise ImageBuildError(f"after import, {image.name} is {have!r} in containerd, expected {image.manifest_digest}")


def ensure_images(
    containerd_address: str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    names=None,
    cache_dir: str | os.PathLike | None = None,
    busybox: str | os.PathLike = DEFAULT_BUSYBOX,
) -> dict[str, str]:
    """Build (cached) and import every image containerd lacks or holds in another
    version. containerd_address is the socket path (`ctr --address`); a
    `unix://` prefix is accepted. Returns image name -> CRI image ID."""
    address = containerd_address.removeprefix("unix://")
    built = build_images(cache_dir, names=names, busybox=busybox)
    present = image_digests_in_containerd(address, namespace)
    for image in built.values():
        if present.get(image.name) != image.manifest_digest:
            import_image(address, image, namespace)
    return {name: image.config_digest for name, image in built.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build orch's busybox and pause OCI images.")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help=f"where tarballs are kept (default {default_cache_dir()})"
    )
    parser.add_argument("--busybox", default=DEFAULT_BUSYBOX, help="the busybox-static binary")
    parser.add_argument(
        "--import",
        dest="address",
        metavar="SOCKET",
        default=None,
        help="import into the containerd at this socket (ctr --address)",
    )
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE)
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument("names", nargs="*", help=f"images (default: {' '.join(IMAGES)})")
    args = parser.parse_args(argv)
    try:
        built = build_images(args.cache_dir, names=args.names or None, busybox=args.busybox, force=args.force)
        for image in built.values():
            print(f"{image.name}\t{image.config_digest}\t{image.path}")
        if args.address:
            ids = ensure_images(
                args.address,
                namespace=args.namespace,
                names=args.names or None,
                cache_dir=args.cache_dir,
                busybox=args.busybox,
            )
            for name in ids:
                print(f"imported {name}")
    except ImageBuildError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
