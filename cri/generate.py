"""Regenerate the gRPC stubs of the node agent's protocols with grpcio-tools.

    python -m cri.generate            # rewrite the api_pb2.py, api_pb2_grpc.py, api_pb2.pyi of each proto
    python -m cri.generate --check    # exit 1 if the committed stubs are stale
    python -m cri.generate --out DIR  # write into DIR instead (used by the tests)

The protocols: the CRI (`cri/api.proto`), the device plugin API
(`cri/deviceplugin/api.proto`) and the pod resources API (`cri/podresources/api.proto`,
and its older `v1alpha1/api.proto`).
protoc runs with the repository root as its only include path, so a generated
gRPC module imports `from cri import api_pb2` (`from cri.deviceplugin import
api_pb2`, ...) and the descriptor is registered under its repository path. The
output depends only on the .proto and the grpcio-tools release (pinned beside
grpcio in pyproject.toml, since the stubs check both runtimes at import).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
PROTO = PACKAGE_DIR / "api.proto"
# Every proto of the package, as its directory relative to the package ("" for the CRI).
PROTO_DIRS = ("", "deviceplugin", "podresources", "podresources/v1alpha1")
OUTPUTS = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi")


class GenerateError(RuntimeError):
    pass


def generate(out_dir: str | Path, proto: Path = PROTO) -> list[Path]:
    """Run protoc on one proto of the package into out_dir (which gets a `cri/`
    subdirectory); return the generated files."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError as exc:  # pragma: no cover - grpcio-tools is a test extra
        raise GenerateError("grpcio-tools is not installed (pip install -e '.[test]')") from exc
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    argv = [
        "grpc_tools.protoc",
        f"--proto_path={REPO_ROOT}",
        f"--proto_path={well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        # An absolute path inside the first include path: protoc names it
        # "cri/api.proto" whatever the working directory is.
        str(proto),
    ]
    code = protoc.main(argv)
    if code != 0:
        raise GenerateError(f"protoc failed with exit code {code}")
    produced = [out_dir / proto.parent.relative_to(REPO_ROOT) / name for name in OUTPUTS]
    missing = [str(path) for path in produced if not path.is_file()]
    if missing:
        raise GenerateError(f"protoc did not write {', '.join(missing)}")
    return produced


def _fresh(tmp: str) -> list[tuple[str, Path]]:
    """(path relative to the package, generated file) for every proto."""
    out = []
    for sub in PROTO_DIRS:
        for fresh in generate(Path(tmp) / (sub or "cri"), PACKAGE_DIR / sub / "api.proto"):
            out.append((str(Path(sub) / fresh.name) if sub else fresh.name, fresh))
    return out


def stale_files(target_dir: str | Path = PACKAGE_DIR) -> dict[str, str]:
    """Files under target_dir that differ from a fresh generation: relative name -> unified diff."""
    target_dir = Path(target_dir)
    stale: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="orch-cri-gen-") as tmp:
        for name, fresh in _fresh(tmp):
            committed = target_dir / name
            want = fresh.read_text()
            have = committed.read_text() if committed.is_file() else ""
            if want != have:
                diff = difflib.unified_diff(
                    have.splitlines(keepends=True),
                    want.splitlines(keepends=True),
                    fromfile=f"committed/{name}",
                    tofile=f"generated/{name}",
                    n=1,
                )
                stale[name] = "".join(list(diff)[:60])
    return stale


def write(target_dir: str | Path = PACKAGE_DIR) -> list[Path]:
    target_dir = Path(target_dir)
    written = []
    with tempfile.TemporaryDirectory(prefix="orch-cri-gen-") as tmp:
        for name, fresh in _fresh(tmp):
            dest = target_dir / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(fresh.read_text())
            written.append(dest)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cri.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when stale")
    parser.add_argument(
        "--out", type=Path, default=PACKAGE_DIR, help="directory for the stubs (default: the cri package)"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out)
        for name, diff in stale.items():
            print(f"stale: {name}\n{diff}", file=sys.stderr)
        return 1 if stale else 0
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
