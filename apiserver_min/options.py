"""Command-line options of ``orch-apiserver``: parsing, defaults and validation.

Every flag is declared once here; bad values fail at start with a message
naming the flag and what is wrong, before anything is created on disk.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import types
import urllib.parse
from typing import Mapping, Sequence

from .api import names
from .api.duration import DurationError, parse_duration
from .api.featuregates import FeatureGateError, FeatureGates, GateSpec, Stage, describe_known
from .version import __version__


class OptionsError(ValueError):
    pass


# Feature gates the API server knows, with their stage and default (the shared
# mechanism in api/featuregates.py applies the rules: unknown gates are an error,
# GA gates are locked on and warn when set).
FEATURE_GATES: Mapping[str, GateSpec] = types.MappingProxyType({
    "AllAlpha": GateSpec(Stage.ALPHA, False),
    "AllBeta": GateSpec(Stage.BETA, False),
    "APIListChunking": GateSpec(Stage.GA, True, locked=True),
    "WatchList": GateSpec(Stage.ALPHA, False),
    "WatchBookmark": GateSpec(Stage.GA, True, locked=True),
    "ServerSideApply": GateSpec(Stage.GA, True, locked=True),
    "ServerSideFieldValidation": GateSpec(Stage.GA, True, locked=True),
    "APIPriorityAndFairness": GateSpec(Stage.BETA, True),
    "ConsistentListFromCache": GateSpec(Stage.ALPHA, False),
    "ComponentSLIs": GateSpec(Stage.BETA, True),
})


@dataclasses.dataclass(frozen=True)
class Options:
    data_dir: str
    bind_address: str
    secure_port: int
    storage_backend: str
    etcd_servers: tuple[str, ...]
    etcd_prefix: str
    tls_cert_file: str
    tls_private_key_file: str
    client_ca_file: str
    runtime_config: dict[str, bool]
    livez_grace_period: float
    shutdown_delay_duration: float
    shutdown_watch_termination_grace_period: float
    feature_gates: FeatureGates
    advertise_address: str
    min_request_timeout: int
    watch_bookmark_interval: float
    max_request_body_bytes: int
    verbosity: int
    warnings: tuple[str, ...] = ()

    def feature(self, name: str) -> bool:
        return name in self.feature_gates and self.feature_gates.enabled(name)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=names.APISERVER_NAME,
        description="The orch API server: the control plane's HTTP API on SQLite (default) or etcd.",
        epilog="Sub-commands: 'orch-apiserver token create|list|delete' manage bootstrap tokens.",
    )
    p.add_argument("--version", action="version", version=f"{names.APISERVER_NAME} v{__version__}")
    g = p.add_argument_group("generic")
    g.add_argument("--data-dir", default=names.APISERVER_DATA_DIR,
                   help="Directory for the SQLite database, generated certificates and the admin "
                        "connection config (default %(default)s).")
    g.add_argument("--advertise-address", default="",
                   help="Address advertised to members of the cluster (default: the bind address, "
                        "or 127.0.0.1 when binding all addresses).")
    g.add_argument("--min-request-timeout", default="1800",
                   help="Minimum watch timeout in seconds; watches last between this and twice it "
                        "unless timeoutSeconds is given (default %(default)s).")
    g.add_argument("--max-request-body-bytes", default=str(3 * 1024 * 1024),
                   help="Largest accepted request body in bytes (default %(default)s).")
    g.add_argument("--feature-gates", default="",
                   help="Comma-separated key=true|false pairs. Known gates: "
                        + ", ".join(describe_known(FEATURE_GATES)))
    g.add_argument("--runtime-config", default="",
                   help="Comma-separated <group>/<version>[=true|false] (or api/all, api/alpha, "
                        "api/beta) enabling or disabling group versions.")
    g.add_argument("-v", "--v", dest="verbosity", default="0", help="Log verbosity (0-10).")
    s = p.add_argument_group("secure serving")
    s.add_argument("--bind-address", default="0.0.0.0",
                   help="Address to listen on for the secure port (default %(default)s).")
    s.add_argument("--secure-port", default="6443", help="HTTPS port (default %(default)s).")
    s.add_argument("--tls-cert-file", default="",
                   help="Serving certificate (PEM). Generated under DATA_DIR/pki when omitted.")
    s.add_argument("--tls-private-key-file", default="", help="Key of --tls-cert-file (PEM).")
    a = p.add_argument_group("authentication")
    a.add_argument("--client-ca-file", default="",
                   help="CA bundle whose client certificates authenticate (CN = user, O = groups). "
                        "Defaults to the generated cluster CA.")
    e = p.add_argument_group("storage")
    e.add_argument("--storage-backend", default="sqlite", help="sqlite (default) or etcd3.")
    e.add_argument("--etcd-servers", default="",
                   help="Comma-separated etcd client URLs (http://host:port), with --storage-backend=etcd3.")
    e.add_argument("--etcd-prefix", default="/registry", help="Key prefix in etcd (default %(default)s).")
    l = p.add_argument_group("lifecycle")
    l.add_argument("--livez-grace-period", default="0s",
                   help="Time after start during which /livez does not fail for post-start hooks.")
    l.add_argument("--shutdown-delay-duration", default="0s",
                   help="On SIGTERM, /readyz fails for this long before the server stops accepting.")
    l.add_argument("--shutdown-watch-termination-grace-period", default="0s",
                   help="How long in-flight watches get to drain on shutdown.")
    l.add_argument("--watch-bookmark-interval", default="60s", help=argparse.SUPPRESS)
    return p


def _duration_seconds(flag: str, value: str) -> float:
    try:
        seconds = parse_duration(value).total_seconds()
    except DurationError as exc:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: {exc}") from None
    if seconds < 0:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: must not be negative")
    return seconds


def _etcd_url_ok(url: str) -> bool:
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port
    except ValueError:  # a port that is not a number or out of range
        return False
    return u.scheme in ("http", "https") and bool(u.hostname) and port is not None and u.path in ("", "/")


def _int(flag: str, value: str, lo: int, hi: int) -> int:
    try:
        n = int(value, 10)
    except ValueError:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: not an integer") from None
    if not lo <= n <= hi:
        raise OptionsError(f"invalid value {value!r} for flag {flag}: must be between {lo} and {hi}")
    return n


def parse_bool(flag: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "t", "yes"):
        return True
    if v in ("false", "0", "f", "no"):
        return False
    raise OptionsError(f"invalid value {value!r} for flag {flag}: expected true or false")


def parse_runtime_config(value: str) -> dict[str, bool]:
    """``group/version[=bool]`` entries; ``api/all``, ``api/alpha``, ``api/beta`` toggle many."""
    out: dict[str, bool] = {}
    if not value.strip():
        return out
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, raw = part.partition("=")
        enabled = parse_bool(f"--runtime-config ({key})", raw) if sep else True
        segments = key.split("/")
        if key in ("api/all", "api/alpha", "api/beta", "api/ga"):
            out[key] = enabled
        elif key == "v1" or key == "api/v1":
            out["v1"] = enabled
        elif len(segments) in (2, 3) and all(segments):
            out[key] = enabled
        else:
            raise OptionsError(f"invalid value {value!r} for flag --runtime-config: {key!r} is not "
                               "<group>/<version>[/<resource>], api/all, api/alpha or api/beta")
    return out


def parse(argv: Sequence[str]) -> Options:
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    warnings: list[str] = []
    backend = ns.storage_backend.strip()
    if backend not in ("sqlite", "etcd3"):
        raise OptionsError(f"invalid value {backend!r} for flag --storage-backend: must be sqlite or etcd3")
    etcd_servers = tuple(s.strip().rstrip("/") for s in ns.etcd_servers.split(",") if s.strip())
    if backend == "etcd3" and not etcd_servers:
        raise OptionsError("--etcd-servers must be given with --storage-backend=etcd3")
    for url in etcd_servers:
        if not _etcd_url_ok(url):
            raise OptionsError(f"invalid value {url!r} for flag --etcd-servers: expected http://HOST:PORT")
    try:
        ipaddress.ip_address(ns.bind_address)
    except ValueError:
        raise OptionsError(f"invalid value {ns.bind_address!r} for flag --bind-address: not an IP address") from None
    if ns.advertise_address:
        try:
            ipaddress.ip_address(ns.advertise_address)
        except ValueError:
            raise OptionsError(f"invalid value {ns.advertise_address!r} for flag --advertise-address: "
                               "not an IP address") from None
    if bool(ns.tls_cert_file) != bool(ns.tls_private_key_file):
        raise OptionsError("--tls-cert-file and --tls-private-key-file must be given together")
    for flag, path in (("--tls-cert-file", ns.tls_cert_file), ("--tls-private-key-file", ns.tls_private_key_file),
                       ("--client-ca-file", ns.client_ca_file)):
        if path and not os.path.isfile(path):
            raise OptionsError(f"invalid value {path!r} for flag {flag}: no such file")
    if not ns.etcd_prefix.startswith("/"):
        raise OptionsError(f"invalid value {ns.etcd_prefix!r} for flag --etcd-prefix: must start with '/'")
    try:
        gates = FeatureGates.parse(ns.feature_gates, FEATURE_GATES)
    except FeatureGateError as exc:
        raise OptionsError(f"invalid value {ns.feature_gates!r} for flag --feature-gates: {exc}") from None
    warnings += gates.warnings
    return Options(
        data_dir=ns.data_dir,
        bind_address=ns.bind_address,
        secure_port=_int("--secure-port", ns.secure_port, 1, 65535),
        storage_backend=backend,
        etcd_servers=etcd_servers,
        etcd_prefix=ns.etcd_prefix.rstrip("/") or "/registry",
        tls_cert_file=ns.tls_cert_file,
        tls_private_key_file=ns.tls_private_key_file,
        client_ca_file=ns.client_ca_file,
        runtime_config=parse_runtime_config(ns.runtime_config),
        livez_grace_period=_duration_seconds("--livez-grace-period", ns.livez_grace_period),
        shutdown_delay_duration=_duration_seconds("--shutdown-delay-duration", ns.shutdown_delay_duration),
        shutdown_watch_termination_grace_period=_duration_seconds(
            "--shutdown-watch-termination-grace-period", ns.shutdown_watch_termination_grace_period),
        feature_gates=gates,
        advertise_address=ns.advertise_address,
        min_request_timeout=_int("--min-request-timeout", ns.min_request_timeout, 1, 86400),
        watch_bookmark_interval=_duration_seconds("--watch-bookmark-interval", ns.watch_bookmark_interval),
        max_request_body_bytes=_int("--max-request-body-bytes", ns.max_request_body_bytes, 1024, 1 << 30),
        verbosity=_int("-v", ns.verbosity, 0, 10),
        warnings=tuple(warnings),
    )
