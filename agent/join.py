"""``orch-agent join``: join a cluster with a bootstrap token.

    orch-agent join --server https://HOST:PORT --token ID.SECRET \\
        --discovery-token-ca-cert-hash sha256:HEX [--install] [agent flags]

Discovery, as upstream's token discovery:

1. read the ConfigMap ``cluster-info`` in ``orch-public`` anonymously over TLS
   *without* verifying the server (the CA is not known yet);
2. verify the detached JWS ``jws-kubeconfig-<token-id>`` of its ``kubeconfig``
   with the token (HS256 only): only a holder of the token can have signed it;
3. check the CA in that config against ``--discovery-token-ca-cert-hash``
   (``sha256:`` + hex SHA-256 of the CA certificate's DER SubjectPublicKeyInfo):
   the token alone could be known to an attacker, the pin cannot be forged;
4. read ``cluster-info`` again, now verifying TLS with that CA, and insist that
   it is the same document.

Then the bootstrap connection config (``--server``, the CA, the token) is
written to ``--bootstrap-orchconfig`` (default ``<root-dir>/bootstrap-agent.orchconfig``),
``--orchconfig`` defaults to ``<root-dir>/agent.orchconfig``, and the agent runs
in API-server mode with the remaining flags: its TLS bootstrap obtains the client
certificate. With ``--install`` the flags go to the systemd environment file
instead and ``systemctl enable --now orch-agent.service`` starts the agent.

Discovery is retried (every few seconds, up to ``--discovery-timeout``) while
the server is unreachable or ``cluster-info`` is not signed for the token yet;
a signature or pin that does not match stops at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import ssl
import subprocess
import sys
from typing import Callable, Sequence
from urllib.parse import urlsplit

import aiohttp
import orjson
from cryptography import x509

from apiserver_min.api import bootstraptoken as bt
from apiserver_min.api import names
from apiserver_min.api.duration import DurationError, parse_duration

from .client.config import write_orchconfig
from .config import ConfigError, build_config
from .options import FlagError, parse_args
from .validation import validate

__all__ = [
    "JoinError",
    "JoinOptions",
    "DiscoveryError",
    "parse_join_args",
    "discover",
    "cluster_info_path",
    "verify_cluster_info",
    "update_env_file",
    "main",
    "JOIN_HELP",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DISCOVERY_RETRY = 5.0
DEFAULT_DISCOVERY_TIMEOUT = 300.0

JOIN_HELP = f"""usage: {names.AGENT_NAME} join --server https://HOST:PORT --token ID.SECRET \\
           --discovery-token-ca-cert-hash sha256:HEX [--install] [agent flags]

Join this node to a cluster: verify the cluster's signed cluster-info with the
bootstrap token and the CA pin, write the bootstrap connection config, then run
the agent in API-server mode (its TLS bootstrap gets the node a client certificate).

Join flags:
      --server string                         API server URL (https://HOST:PORT).
      --token string                          Bootstrap token <id>.<secret>.
      --discovery-token-ca-cert-hash strings  sha256:<hex> pin of the cluster CA's public key
                                              (repeatable; any match is accepted).
      --discovery-timeout duration            How long to retry discovery (default 5m0s).
      --install                               Write the flags to {names.AGENT_ENV_FILE} and start
                                              {names.AGENT_SERVICE_UNIT} with systemctl instead of
                                              running the agent here.
      --env-file string                       The environment file --install writes
                                              (default {names.AGENT_ENV_FILE}).
  -h, --help                                  Show this help.

Every other flag is an agent flag ({names.AGENT_NAME} --help); --bootstrap-orchconfig
defaults to <root-dir>/{names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME} and --orchconfig to
<root-dir>/{names.AGENT_ORCHCONFIG_NAME}.
"""


class JoinError(Exception):
    """Joining cannot go on; the message says why."""


class DiscoveryError(JoinError):
    """cluster-info cannot be trusted (bad signature, wrong CA): retrying cannot help."""


class _NotYet(JoinError):
    """cluster-info is not there or not signed for the token yet: retry."""


@dataclasses.dataclass
class JoinOptions:
    server: str = ""
    token: bt.Token | None = None
    ca_hashes: list[str] = dataclasses.field(default_factory=list)
    discovery_timeout: float = DEFAULT_DISCOVERY_TIMEOUT
    install: bool = False
    env_file: str = names.AGENT_ENV_FILE
    agent_args: list[str] = dataclasses.field(default_factory=list)
    help: bool = False


_VALUE_FLAGS = ("server", "token", "discovery-token-ca-cert-hash", "discovery-timeout", "env-file")
_BOOL_FLAGS = ("install",)


def parse_join_args(argv: Sequence[str]) -> JoinOptions:
    """Split join's own flags from the agent's; JoinError for a bad or missing join flag."""
    opts = JoinOptions()
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in ("-h", "--help"):
            opts.help = True
            continue
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in _BOOL_FLAGS:
            if eq and value.lower() not in ("true", "false", "1", "0"):
                raise JoinError(f'invalid value "{value}" for flag --{name}: want true or false')
            opts.install = not eq or value.lower() in ("true", "1")
            continue
        if name not in _VALUE_FLAGS:
            opts.agent_args.append(arg)
            continue
        if not eq:
            if i >= len(args):
                raise JoinError(f"flag needs an argument: --{name}")
            value = args[i]
            i += 1
        if name == "server":
            parts = urlsplit(value)
            if parts.scheme != "https" or not parts.hostname:
                raise JoinError(f"--server must be an https:// URL with a host, got {value!r}")
            opts.server = value.rstrip("/")
        elif name == "token":
            try:
                opts.token = bt.parse_token(value)
            except bt.TokenError as exc:
                raise JoinError(f"--token: {exc}") from None
        elif name == "discovery-token-ca-cert-hash":
            for v in value.split(","):
                try:
                    opts.ca_hashes.append(bt.parse_ca_hash(v))
                except bt.TokenError as exc:
                    raise JoinError(f"--discovery-token-ca-cert-hash: {exc}") from None
        elif name == "discovery-timeout":
            try:
                opts.discovery_timeout = parse_duration(value).total_seconds()
            except (DurationError, ValueError) as exc:
                raise JoinError(f"--discovery-timeout: {exc}") from None
        elif name == "env-file":
            opts.env_file = value
    if opts.help:
        return opts
    missing = [
        f
        for f, v in (
            ("--server", opts.server),
            ("--token", opts.token),
            ("--discovery-token-ca-cert-hash", opts.ca_hashes),
        )
        if not v
    ]
    if missing:
        raise JoinError(f"missing required flag{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
    return opts


# --- discovery ----------------------------------------------------------------------------


def cluster_info_path() -> str:
    return f"/api/v1/namespaces/{names.NS_PUBLIC}/configmaps/{names.CLUSTER_INFO_CONFIGMAP}"


async def _fetch_cluster_info(server: str, ca_pem: bytes | None, timeout: float = 10.0) -> dict:
    """GET cluster-info anonymously; without ``ca_pem`` the server is not verified."""
    if ca_pem is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cadata=ca_pem.decode("ascii", "replace"))
    url = server + cluster_info_path()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            async with session.get(
                url,
                headers={"Accept": names.MEDIA_JSON, "User-Agent": f"{names.AGENT_NAME}/join"},
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                body = await resp.read()
                status = resp.status
    except aiohttp.ClientConnectorCertificateError as exc:
        raise DiscoveryError(
            f"the API server at {server} does not present a certificate signed by the "
            f"cluster CA: {exc.certificate_error}"
        ) from None
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise _NotYet(f"cannot reach {url}: {exc or type(exc).__name__}") from None
    try:
        doc = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        doc = {}
    if status == 404:
        raise _NotYet(f"{url}: not found (the bootstrap signer has not published cluster-info yet)")
    if status in (401, 403):
        raise JoinError(
            f"{url}: {status} {doc.get('message', '')}: the API server does not let anonymous "
            "clients read cluster-info (anonymous authentication must be on)"
        )
    if status != 200:
        raise _NotYet(f"{url}: {status} {doc.get('message', '') if isinstance(doc, dict) else ''}")
    if not isinstance(doc, dict):
        raise _NotYet(f"{url}: the reply is not a ConfigMap")
    return doc


def verify_cluster_info(cm: dict, token: bt.Token, ca_hashes: Sequence[str]) -> tuple[str, bytes, str]:
    """Check the signature and the CA pin of a cluster-info ConfigMap; (server, CA PEM, kubeconfig)."""
    data = cm.get("data") or {}
    content = data.get(bt.CLUSTER_INFO_KUBECONFIG_KEY)
    if not isinstance(content, str) or not content:
        raise _NotYet(f"cluster-info has no {bt.CLUSTER_INFO_KUBECONFIG_KEY} entry yet")
    signature = data.get(bt.JWS_KEY_PREFIX + token.id)
    if not signature:
        raise _NotYet(
            f"cluster-info has no signature {bt.JWS_KEY_PREFIX}{token.id}: the token id is unknown to "
            "this cluster, expired, not allowed to sign (usage-bootstrap-signing), or not signed yet"
        )
    try:
        bt.verify_detached(signature, content, token)
    except bt.JwsError as exc:
        raise DiscoveryError(f"cluster-info JWS signature does not verify with the given token ({exc})") from None
    try:
        server, ca_pem = bt.kubeconfig_cluster(content)
        cas = x509.load_pem_x509_certificates(ca_pem)
    except (bt.TokenError, ValueError) as exc:
        raise DiscoveryError(f"the signed cluster-info does not carry a usable cluster CA: {exc}") from None
    got = [bt.ca_cert_hash(c) for c in cas]
    if not any(bt.ca_matches(c, ca_hashes) for c in cas):
        raise DiscoveryError(f"the cluster CA does not match --discovery-token-ca-cert-hash: got {', '.join(got)}")
    return server, ca_pem, content


async def discover(opts: JoinOptions, *, say=lambda msg: None) -> bytes:
    """The verified cluster CA (PEM); see the module docstring."""
    assert opts.token is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + opts.discovery_timeout
    while True:
        try:
            cm = await _fetch_cluster_info(opts.server, None)
            _, ca_pem, content = verify_cluster_info(cm, opts.token, opts.ca_hashes)
            say(f"cluster-info is signed with the token and its CA matches the pin ({bt.ca_cert_hash(ca_pem)})")
            secure = await _fetch_cluster_info(opts.server, ca_pem)
            if (secure.get("data") or {}).get(bt.CLUSTER_INFO_KUBECONFIG_KEY) != content:
                raise DiscoveryError(
                    "cluster-info read with TLS verified by the cluster CA differs from the "
                    "signed copy: refusing to trust it"
                )
            say(f"cluster-info verified over TLS with the cluster CA at {opts.server}")
            return ca_pem
        except _NotYet as exc:
            if loop.time() + DISCOVERY_RETRY > deadline:
                raise JoinError(f"discovery timed out after {opts.discovery_timeout:g}s: {exc}") from None
            say(f"waiting for cluster-info: {exc}")
            await asyncio.sleep(DISCOVERY_RETRY)


# --- install ------------------------------------------------------------------------------


def update_env_file(path: str, flags: Sequence[str]) -> None:
    """Set the agent's flags in the systemd environment file: the flags already
    there are kept unless given again (by name), the new ones are appended."""
    lines: list[str] = []
    current: list[str] = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        pass
    prefix = f"{names.AGENT_ENV_ARGS_VAR}="
    index = None
    for i, line in enumerate(lines):
        if line.startswith(prefix):
            index = i
            try:
                current = shlex.split(line[len(prefix) :])
                current = shlex.split(current[0]) if len(current) == 1 else current
            except ValueError as exc:
                raise JoinError(f"{path}: line {i + 1}: cannot parse {names.AGENT_ENV_ARGS_VAR}: {exc}") from None

    def flag_name(arg: str) -> str:
        return arg[2:].split("=", 1)[0] if arg.startswith("--") else ""

    given = {flag_name(a) for a in flags if flag_name(a)}
    kept = [a for a in current if flag_name(a) not in given]
    # The unit expands $ORCH_AGENT_ARGS unquoted: systemd splits it on white space
    # and nothing else, so an argument cannot contain any.
    for a in [*kept, *flags]:
        if not a or any(c.isspace() or c in '"\\' for c in a):
            raise JoinError(
                f"the agent argument {a!r} cannot be written to {path}: "
                "arguments there cannot be empty or contain white space, quotes or backslashes"
            )
    new_line = f'{prefix}"{" ".join([*kept, *flags])}"'
    if index is None:
        lines.append(new_line)
    else:
        lines[index] = new_line
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def systemd_running() -> bool:
    """sd_booted(): systemd is PID 1 when /run/systemd/system exists."""
    return os.path.isdir("/run/systemd/system")


# --- the command ----------------------------------------------------------------------------


def _say(msg: str) -> None:
    print(f"[join] {msg}", file=sys.stderr, flush=True)


def _with_flag(args: list[str], flag: str, value: str) -> list[str]:
    return [*args, f"--{flag}={value}"]


def main(argv: Sequence[str], run_agent: Callable[[list[str]], int]) -> int:
    """``orch-agent join ...``; the process exit code. ``run_agent`` runs the agent
    with the flags join worked out (the CLI's own entry point)."""
    try:
        opts = parse_join_args(argv)
    except JoinError as exc:
        print(
            f"{names.AGENT_NAME} join: error: {exc}\nRun '{names.AGENT_NAME} join --help' for usage.", file=sys.stderr
        )
        return EXIT_USAGE
    if opts.help:
        sys.stdout.write(JOIN_HELP)
        return EXIT_OK

    # The agent flags are checked before anything is written: a typo must not leave
    # a half-joined node behind.
    try:
        parsed = parse_args(opts.agent_args)
        cfg = build_config(parsed)
    except (FlagError, ConfigError) as exc:
        print(f"{names.AGENT_NAME} join: error in the agent flags: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = list(opts.agent_args)
    bootstrap_path = cfg.bootstrap_orchconfig or os.path.join(cfg.root_dir, names.AGENT_BOOTSTRAP_ORCHCONFIG_NAME)
    orchconfig_path = cfg.orchconfig or os.path.join(cfg.root_dir, names.AGENT_ORCHCONFIG_NAME)
    if not cfg.bootstrap_orchconfig:
        args = _with_flag(args, "bootstrap-orchconfig", bootstrap_path)
    if not cfg.orchconfig:
        args = _with_flag(args, "orchconfig", orchconfig_path)
    try:
        cfg = build_config(parse_args(args))
    except (FlagError, ConfigError) as exc:
        print(f"{names.AGENT_NAME} join: error in the agent flags: {exc}", file=sys.stderr)
        return EXIT_USAGE
    errors = validate(cfg)
    if errors:
        print(f"{names.AGENT_NAME} join: invalid agent configuration:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return EXIT_USAGE

    try:
        ca_pem = asyncio.run(discover(opts, say=_say))
    except JoinError as exc:
        print(f"{names.AGENT_NAME} join: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    write_orchconfig(
        bootstrap_path,
        server=opts.server,
        ca_data=ca_pem,
        token=str(opts.token),
        user=f"{names.BOOTSTRAP_USER_PREFIX}{opts.token.id}" if opts.token else "default-auth",
    )
    _say(f"wrote the bootstrap connection config {bootstrap_path}")
    if os.path.exists(orchconfig_path):
        _say(
            f"{orchconfig_path} exists: the agent uses it while its credentials are valid, and the "
            "bootstrap config only when they are not"
        )

    if opts.install:
        try:
            update_env_file(opts.env_file, args)
        except (JoinError, OSError) as exc:
            print(f"{names.AGENT_NAME} join: error: cannot write {opts.env_file}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        _say(f"wrote the agent's flags to {opts.env_file}")
        if not systemd_running():
            _say(
                f"systemd is not running as PID 1 here: not starting {names.AGENT_SERVICE_UNIT}; start the "
                f"agent with: {names.AGENT_NAME} {shlex.join(args)}"
            )
            return EXIT_OK
        result = subprocess.run(
            ["systemctl", "enable", "--now", names.AGENT_SERVICE_UNIT],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            print(
                f"{names.AGENT_NAME} join: error: systemctl enable --now {names.AGENT_SERVICE_UNIT} exited "
                f"{result.returncode}: {result.stderr.strip()}",
                file=sys.stderr,
            )
            return EXIT_FAILED
        _say(
            f"enabled and started {names.AGENT_SERVICE_UNIT}; the node appears once its certificate "
            "request is approved and signed"
        )
        return EXIT_OK

    _say("starting the agent in API-server mode")
    return run_agent(args)
