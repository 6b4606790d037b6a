"""The rules of the house, executable: the import graph of the product packages.

- no import circle anywhere (every import statement counts, also those inside
  functions and under ``TYPE_CHECKING``);
- no import inside a function, except of an optional dependency or of a heavy
  part only some features load;
- data flows one way: the contract (``api``), ``storage`` and ``registry`` never
  import the HTTP layer or anything above them; authentication, authorization and
  admission import neither the server nor each other's internals; only the
  server's ``app`` (and the CLI) wires everything together;
- the node agent shares only the contract code with the API server.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("apiserver_min", "agent", "cri")
# Imports that may stay inside a function: optional dependencies, tried and
# done without when missing, and heavy parts loaded only by the features that need them.
OPTIONAL_IMPORTS = {
    "uvloop",  # a faster event loop where installed
    "_ssl",  # CPython's TLS internals, used when the build exposes them
    "apiserver_min.api._pbfast",  # the C protobuf codec, built where a compiler exists
    # The etcd3 backend, loaded when --storage-backend=etcd3 chooses it: its client
    # (aetcd, grpc) would add about 11 MiB to every SQLite server.
    "apiserver_min.storage.etcd",
    # netlink, for detecting the node's address (the agent falls back without it);
    # about 6 MB an agent that never detects an address does not load.
    "pyroute2",
    # The D-Bus client of the node shutdown manager, loaded when a shutdown grace period
    # makes the agent connect to logind: about 4 MB an agent without one does not load.
    "dbus_fast",
    "dbus_fast.aio",
    # The node agent's code that needs the cryptography library (about 10 MB resident):
    # TLS bootstrap and certificate rotation (API-server mode) and `orch-agent join`.
    # A standalone node loads none of it (its self-signed serving certificate is made
    # by a helper process, agent/server/selfsigned.py).
    "agent.certificates.bootstrap",
    "agent.certificates.rotation",
    "agent.join",
    # The node agent's exec/attach/port-forward relay (WebSocket and SPDY framing),
    # loaded by the first such request, and its API client's protobuf codec (every
    # kind's wire schema), loaded by the first request to an API server: together about
    # 0.6 MB a node that is never asked for a shell, or runs static pods only, keeps.
    "agent.server.streaming",
    "apiserver_min.api.protobuf",
    # Cluster mode's parts (the API client, the API pod source, status and lease, mirror
    # pods and their status, the event sink, the cache of referenced objects and Services,
    # the service proxy) and the manifest URL source, loaded by the nodes that use them:
    # about 0.6 MB a standalone node (static pods from a directory) does not load.
    "agent.client",
    "agent.client.config",
    "agent.mirrorclient",
    "agent.eventsink",
    "agent.objectcache",
    "agent.services",
    "agent.sources.apiserver",
    "agent.sources.url",
    "agent.status.lease",
    "agent.status.manager",
    "agent.proxy.localnet",
    "agent.proxy.nft",
    "agent.proxy.proxier",
    # Static pods' YAML decoding, defaulting and validation (every kind's schema and the pod
    # rules, about 1.3 MB), loaded with the first manifest; a node without static pods does
    # not load them.
    "apiserver_min.api.codec",
    "apiserver_min.api.defaults",
    "apiserver_min.api.podvalidation",
    # The agent's flag suggestions (a mistyped flag) and its log rotation's compression.
    "difflib",
    "gzip",
    # The expression engine (validating admission policies, webhooks' match conditions,
    # custom resources' validation rules), loaded by the first compiler: the C++ engine
    # about 5 MiB resident, RE2 (the regex library functions) about 1 MiB more, and the
    # protobuf runtime of typed variables (descriptor pools, the schema types of rules)
    # about 2.4 MiB; a server declaring no expression loads none of them.
    "cel_expr_python",
    "re2",
    "google.protobuf.descriptor_pool",
    "google.protobuf.struct_pb2",
    "apiserver_min.apiextensions.celtypes",
    # The JOSE library of OIDC tokens (0.6 MB, with --oidc-issuer-url) and the secretbox
    # provider's NaCl binding (0.8 MB, with an encryption configuration naming it).
    "apiserver_min.authn.oidc",
    "nacl.secret",
    "nacl.exceptions",
    "grpc_tools",  # CRI stub generation (a test-time dependency)
    "grpc_tools.protoc",
}


@dataclasses.dataclass
class Imp:
    source: str  # importing module
    target: str  # imported module (resolved)
    line: int
    inline: bool


def _modules() -> dict[str, Path]:
    out = {}
    for top in PACKAGES:
        for path in (REPO / top).rglob("*.py"):
            rel = path.relative_to(REPO).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_pkg:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def _imports() -> list[Imp]:
    out = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        inline_lines: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        inline_lines.add(sub.lineno)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_pkg, node.level, node.module)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    out.append(Imp(module, full if full in MODULES else base, node.lineno, node.lineno in inline_lines))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Imp(module, alias.name, node.lineno, node.lineno in inline_lines))
    return out


IMPORTS = _imports()
INTERNAL = [i for i in IMPORTS if i.target in MODULES and i.target != i.source]


def _within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _cycles() -> list[list[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in INTERNAL:
        edges[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for m in sorted(MODULES):
        if m not in index:
            visit(m)
    return found


def _violations(sources: tuple[str, ...], forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(
        f"{i.source}:{i.line} imports {i.target}"
        for i in INTERNAL
        if _within(i.source, *sources) and _within(i.target, *forbidden) and not _within(i.target, *allowed)
    )


def test_no_import_circle():
    cycles = _cycles()
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_inside_a_function_but_optional_dependencies():
    bad = sorted(
        f"{i.source}:{i.line} imports {i.target}" for i in IMPORTS if i.inline and i.target not in OPTIONAL_IMPORTS
    )
    assert not bad, "imports inside functions:\n" + "\n".join(bad)


P = "apiserver_min"
ABOVE_REGISTRY = (
    f"{P}.server",
    f"{P}.controllers",
    f"{P}.scheduler",
    f"{P}.authn",
    f"{P}.authz",
    f"{P}.admission.plugins",
    f"{P}.options",
    f"{P}.cli",
    f"{P}.tokencli",
    f"{P}.client",
)


@pytest.mark.parametrize(
    "layer, forbidden",
    [
        (f"{P}.api", (f"{P}.storage", f"{P}.registry", f"{P}.admission") + ABOVE_REGISTRY),
        (f"{P}.storage", (f"{P}.registry", f"{P}.admission") + ABOVE_REGISTRY),
        (f"{P}.admission.chain", (f"{P}.registry",) + ABOVE_REGISTRY),
        # The expression language depends only on the contract: policies, custom resources'
        # validation rules and the registry's checks of both use it.
        (f"{P}.cel", (f"{P}.storage", f"{P}.registry", f"{P}.admission") + ABOVE_REGISTRY),
        (f"{P}.admission.policy", (f"{P}.registry",) + ABOVE_REGISTRY),
        (f"{P}.registry", ABOVE_REGISTRY + (f"{P}.apiextensions",)),
        # What every caller of a webhook shares (admission webhooks, custom resources'
        # conversion webhooks) depends on the contract and the storage only.
        (f"{P}.webhookclient", (f"{P}.registry", f"{P}.admission", f"{P}.apiextensions") + ABOVE_REGISTRY),
        # Custom resources sit on the store: api, storage, registry and the admission chain only.
        (f"{P}.apiextensions", ABOVE_REGISTRY + (f"{P}.admission.plugins", f"{P}.admission.config")),
    ],
)
def test_lower_layers_do_not_import_upper_ones(layer, forbidden):
    bad = _violations((layer,), forbidden)
    assert not bad, f"{layer} imports from above it:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "room, others",
    [
        (f"{P}.authn", (f"{P}.authz", f"{P}.admission.plugins")),
        (f"{P}.authz", (f"{P}.authn", f"{P}.admission.plugins")),
        (f"{P}.admission", (f"{P}.authn",)),
    ],
)
def test_security_rooms_stay_apart(room, others):
    bad = _violations((room,), (f"{P}.server", f"{P}.controllers", f"{P}.scheduler") + others)
    assert not bad, f"{room} imports the server or another room's internals:\n" + "\n".join(bad)


def test_admission_plugins_use_only_the_authorizer_interface():
    bad = _violations((f"{P}.admission",), (f"{P}.authz",), allowed=(f"{P}.authz.authorizer",))
    assert not bad, "admission reaches into authorization's internals:\n" + "\n".join(bad)


def test_only_app_and_the_cli_import_the_app():
    bad = sorted(
        f"{i.source}:{i.line}" for i in INTERNAL if i.target == f"{P}.server.app" and i.source not in (f"{P}.cli",)
    )
    assert not bad, "modules importing server.app:\n" + "\n".join(bad)


def test_agent_shares_only_the_contract():
    bad = _violations(("agent", "cri"), (P,), allowed=(f"{P}.api", f"{P}.version"))
    assert not bad, "the agent imports API-server code beyond the contract:\n" + "\n".join(bad)


def test_audit_depends_only_on_the_contract():
    """Audit logging (policy, events, backends) is used by the server and reads only ``api``."""
    bad = _violations((f"{P}.audit",), (P,), allowed=(f"{P}.api", f"{P}.audit"))
    assert not bad, "audit imports beyond the contract:\n" + "\n".join(bad)
