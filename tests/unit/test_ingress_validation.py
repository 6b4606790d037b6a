"""Ingress and IngressClass rules (registry/networking.py), with upstream's messages
and field paths."""

from __future__ import annotations

import copy

import pytest

from apiserver_min.admission.chain import begin_request, end_request
from apiserver_min.api import names
from apiserver_min.api.defaults import apply_defaults
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.registry.families import strategy_for

INGRESS = REGISTRY.by_resource(names.NETWORKING_GROUP, "v1", "ingresses")
CLASSES = REGISTRY.by_resource(names.NETWORKING_GROUP, "v1", "ingressclasses")
SVC = {"service": {"name": "web", "port": {"number": 80}}}


def ingress(spec: dict, annotations: dict | None = None) -> dict:
    md: dict = {"name": "ing", "namespace": "team"}
    if annotations:
        md["annotations"] = annotations
    return {"apiVersion": "networking.orch.io/v1", "kind": "Ingress", "metadata": md, "spec": spec}


def rule(path: str | None = "/", path_type: str | None = "Prefix", backend: dict | None = None, host=None) -> dict:
    item: dict = {"backend": SVC if backend is None else backend}
    if path is not None:
        item["path"] = path
    if path_type is not None:
        item["pathType"] = path_type
    r: dict = {"http": {"paths": [item]}}
    if host is not None:
        r["host"] = host
    return r


def errors(obj: dict, old: dict | None = None, kind=INGRESS) -> list[str]:
    strategy = strategy_for(kind)
    apply_defaults(kind.group, kind.version, kind.kind, obj)
    if old is None:
        return [e.message() for e in strategy.validate(obj)]
    apply_defaults(kind.group, kind.version, kind.kind, old)
    return [e.message() for e in strategy.validate_update(obj, old)]


P = "spec.rules[0].http.paths[0]"


@pytest.mark.parametrize(
    "spec, expected",
    [
        pytest.param({"rules": [rule()]}, [], id="valid-prefix"),
        pytest.param({"defaultBackend": SVC}, [], id="default-backend-only"),
        pytest.param(
            {},
            [
                "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
            ],
            id="empty",
        ),
        pytest.param(
            {"rules": [rule("foo")]},
            [f'{P}.path: Invalid value: "foo": must be an absolute path'],
            id="prefix-relative",
        ),
        pytest.param(
            {"rules": [rule("", "Exact")]}, [f'{P}.path: Invalid value: "": must be an absolute path'], id="exact-empty"
        ),
        pytest.param(
            {"rules": [rule("/a//b")]},
            [f"{P}.path: Invalid value: \"/a//b\": must not contain '//'"],
            id="double-slash",
        ),
        pytest.param(
            {"rules": [rule("/a/./b", "Exact")]},
            [f"{P}.path: Invalid value: \"/a/./b\": must not contain '/./'"],
            id="dot-segment",
        ),
        pytest.param(
            {"rules": [rule("/a/../b")]},
            [f"{P}.path: Invalid value: \"/a/../b\": must not contain '/../'"],
            id="dotdot-segment",
        ),
        pytest.param(
            {"rules": [rule("/a%2fb")]},
            [f"{P}.path: Invalid value: \"/a%2fb\": must not contain '%2f'"],
            id="encoded-slash",
        ),
        pytest.param(
            {"rules": [rule("/a/..")]},
            [f"{P}.path: Invalid value: \"/a/..\": cannot end with '/..'"],
            id="dotdot-suffix",
        ),
        pytest.param(
            {"rules": [rule("/a/.")]}, [f"{P}.path: Invalid value: \"/a/.\": cannot end with '/.'"], id="dot-suffix"
        ),
        pytest.param({"rules": [rule(None, "ImplementationSpecific")]}, [], id="impl-specific-no-path"),
        pytest.param({"rules": [rule("/a//(.*)", "ImplementationSpecific")]}, [], id="impl-specific-anything"),
        pytest.param(
            {"rules": [rule("x", "ImplementationSpecific")]},
            [f'{P}.path: Invalid value: "x": must be an absolute path'],
            id="impl-specific-relative",
        ),
        pytest.param(
            {"rules": [rule("/", None)]}, [f"{P}.pathType: Required value: pathType must be specified"], id="no-type"
        ),
        pytest.param(
            {"rules": [rule("/", "Regex")]},
            [
                f'{P}.pathType: Unsupported value: "Regex": supported values: '
                '"Exact", "ImplementationSpecific", "Prefix"'
            ],
            id="bad-type",
        ),
        pytest.param({"rules": [rule(host="foo.example.com")]}, [], id="host"),
        pytest.param({"rules": [rule(host="*.example.com")]}, [], id="wildcard-host"),
        pytest.param(
            {"rules": [rule(host="1.2.3.4")]},
            ['spec.rules[0].host: Invalid value: "1.2.3.4": must be a DNS name, not an IP address'],
            id="ip-host",
        ),
        pytest.param(
            {"rules": [rule(host="010.0.0.1")]},
            ['spec.rules[0].host: Invalid value: "010.0.0.1": must be a DNS name, not an IP address'],
            id="ip-host-leading-zeros",
        ),
        pytest.param(
            {"rules": [rule(host="::1")]},
            [
                'spec.rules[0].host: Invalid value: "::1": must be a DNS name, not an IP address',
                'spec.rules[0].host: Invalid value: "::1": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                "(e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
            id="ipv6-host",
        ),
        pytest.param(
            {"rules": [rule(host="Foo.com")]},
            [
                'spec.rules[0].host: Invalid value: "Foo.com": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                "(e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
            id="bad-host",
        ),
        pytest.param(
            {"rules": [rule(host="foo.*.com")]},
            [
                'spec.rules[0].host: Invalid value: "foo.*.com": a wildcard DNS-1123 subdomain must start with '
                "'*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, "
                "'-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation "
                "is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
            id="bad-wildcard",
        ),
        pytest.param(
            {"rules": [{"host": "a.com", "http": {"paths": []}}]},
            ["spec.rules[0].http.paths: Required value"],
            id="no-paths",
        ),
        pytest.param(
            {"rules": [rule(backend={})]},
            [f'{P}.backend: Invalid value: "": resource or service backend is required'],
            id="no-backend",
        ),
        pytest.param(
            {"rules": [rule(backend={**SVC, "resource": {"kind": "Bucket", "name": "b"}})]},
            [f'{P}.backend: Invalid value: "": cannot set both resource and service backends'],
            id="both-backends",
        ),
        pytest.param(
            {"rules": [rule(backend={"service": {"name": "web", "port": {}}})]},
            [f"{P}.backend: Required value: port name or number is required"],
            id="no-port",
        ),
        pytest.param(
            {"rules": [rule(backend={"service": {"name": "web", "port": {"name": "http", "number": 80}}})]},
            [f'{P}.backend: Invalid value: "": cannot set both port name & port number'],
            id="port-name-and-number",
        ),
        pytest.param(
            {"rules": [rule(backend={"service": {"name": "web", "port": {"number": 70000}}})]},
            [f"{P}.backend.service.port.number: Invalid value: 70000: must be between 1 and 65535, inclusive"],
            id="port-range",
        ),
        pytest.param(
            {"rules": [rule(backend={"service": {"name": "web", "port": {"name": "http--x"}}})]},
            [f'{P}.backend.service.port.name: Invalid value: "http--x": must not contain consecutive hyphens'],
            id="port-name",
        ),
        pytest.param(
            {"rules": [rule(backend={"service": {"name": "9web", "port": {"number": 80}}})]},
            [
                f'{P}.backend.service.name: Invalid value: "9web": a DNS-1035 label must consist of lower case '
                "alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric "
                "character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            ],
            id="service-name",
        ),
        pytest.param(
            {"defaultBackend": {"resource": {"apiGroup": "storage.example.com", "kind": "Bucket", "name": "b"}}},
            [],
            id="resource-backend",
        ),
        pytest.param(
            {"defaultBackend": {"resource": {"kind": "", "name": "a/b"}}},
            [
                "spec.defaultBackend.resource.kind: Required value: kind is required",
                "spec.defaultBackend.resource.name: Invalid value: \"a/b\": may not contain '/'",
            ],
            id="resource-backend-bad",
        ),
        pytest.param(
            {"defaultBackend": SVC, "tls": [{"hosts": ["*.example.com", "a.example.com"], "secretName": "tls"}]},
            [],
            id="tls",
        ),
        pytest.param(
            {"defaultBackend": SVC, "tls": [{"hosts": ["**.com"], "secretName": "Bad_Name"}]},
            [
                'spec.tls[0].hosts[0]: Invalid value: "**.com": a wildcard DNS-1123 subdomain must start with '
                "'*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, "
                "'-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation "
                "is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                'spec.tls[0].secretName: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            ],
            id="tls-bad",
        ),
        pytest.param(
            {"defaultBackend": SVC, "ingressClassName": "Nginx"},
            [
                'spec.ingressClassName: Invalid value: "Nginx": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
            id="class-name",
        ),
    ],
)
def test_ingress_spec_rules(spec, expected):
    assert errors(ingress(spec)) == expected


def test_class_annotation_must_match_the_class_name_on_create_only_and_draws_a_warning():
    obj = ingress({"defaultBackend": SVC, "ingressClassName": "a"}, {names.ANNOTATION_INGRESS_CLASS: "b"})
    record, token = begin_request()
    try:
        assert errors(copy.deepcopy(obj)) == [
            f'annotations.{names.ANNOTATION_INGRESS_CLASS}: Invalid value: "b": '
            "must match `ingressClassName` when both are specified"
        ]
    finally:
        end_request(token)
    assert record.warnings == [
        f"annotation \"{names.ANNOTATION_INGRESS_CLASS}\" is deprecated, please use 'spec.ingressClassName' instead"
    ]
    same = ingress({"defaultBackend": SVC, "ingressClassName": "b"}, {names.ANNOTATION_INGRESS_CLASS: "b"})
    assert errors(same) == []
    # On update upstream does not compare them.
    old = ingress({"defaultBackend": SVC}, {names.ANNOTATION_INGRESS_CLASS: "b"})
    assert errors(obj, old) == []


def test_update_keeps_accepting_invalid_data_stored_before():
    bad_secret = {"defaultBackend": SVC, "tls": [{"secretName": "Bad_Name"}]}
    assert errors(ingress(copy.deepcopy(bad_secret)), ingress(copy.deepcopy(bad_secret))) == []
    fresh = errors(ingress(copy.deepcopy(bad_secret)), ingress({"defaultBackend": SVC}))
    assert [e.split(":")[0] for e in fresh] == ["spec.tls[0].secretName"]
    bad_wild = {"rules": [rule("rel", host="*.example.com")]}
    assert errors(ingress(copy.deepcopy(bad_wild)), ingress(copy.deepcopy(bad_wild))) == []
    assert errors(ingress(copy.deepcopy(bad_wild)), ingress({"defaultBackend": SVC})) == [
        f'{P}.path: Invalid value: "rel": must be an absolute path'
    ]


def test_status_update_checks_load_balancer_entries_only():
    old = ingress({"defaultBackend": SVC})
    new = copy.deepcopy(old)
    new["status"] = {"loadBalancer": {"ingress": [{"ip": "10.0.0.300"}, {"hostname": "10.0.0.1"}, {"ip": "10.0.0.3"}]}}
    assert errors(new, old) == [
        'status.loadBalancer.ingress[0].ip: Invalid value: "10.0.0.300": must be a valid IP address',
        'status.loadBalancer.ingress[1].hostname: Invalid value: "10.0.0.1": must be a DNS name, not an IP address',
    ]


def ingress_class(spec: dict, name: str = "nginx") -> dict:
    return {"apiVersion": "networking.orch.io/v1", "kind": "IngressClass", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    "spec, expected",
    [
        pytest.param({"controller": "example.com/ingress"}, [], id="valid"),
        pytest.param({}, ["spec.controller: Required value"], id="no-controller"),
        pytest.param(
            {"controller": "ingress"},
            ['spec.controller: Invalid value: "ingress": must be a domain-prefixed path (such as "acme.io/foo")'],
            id="no-domain",
        ),
        pytest.param(
            {"controller": "Example.com/x"},
            [
                'spec.controller: Invalid value: "Example.com": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character "
                "(e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
            id="bad-domain",
        ),
        pytest.param(
            {"controller": "example.com/a b"},
            [
                'spec.controller: Invalid value: "a b": Invalid path (regex used for validation is '
                "'[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"
            ],
            id="bad-path",
        ),
        pytest.param(
            {"controller": "example.com/" + "x" * 250},
            ["spec.controller: Too long: must have at most 250 bytes"],
            id="too-long",
        ),
        pytest.param(
            {"controller": "example.com/x", "parameters": {"kind": "Params", "name": "p"}},
            [],
            id="parameters-default-cluster",
        ),
        pytest.param(
            {"controller": "example.com/x", "parameters": {"apiGroup": "Bad", "kind": "", "name": ""}},
            [
                'spec.parameters.apiGroup: Invalid value: "Bad": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.parameters.kind: Required value: kind is required",
                "spec.parameters.name: Required value: name is required",
            ],
            id="parameters-required",
        ),
        pytest.param(
            {"controller": "example.com/x", "parameters": {"kind": "P", "name": "p", "scope": "Namespace"}},
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"],
            id="namespace-scope-needs-namespace",
        ),
        pytest.param(
            {
                "controller": "example.com/x",
                "parameters": {"kind": "P", "name": "p", "scope": "Namespace", "namespace": "team"},
            },
            [],
            id="namespace-scope",
        ),
        pytest.param(
            {"controller": "example.com/x", "parameters": {"kind": "P", "name": "p", "namespace": "team"}},
            ["spec.parameters.namespace: Forbidden: `parameters.scope` is set to 'Cluster'"],
            id="cluster-scope-forbids-namespace",
        ),
        pytest.param(
            {"controller": "example.com/x", "parameters": {"kind": "P", "name": "p", "scope": "World"}},
            ['spec.parameters.scope: Unsupported value: "World": supported values: "Cluster", "Namespace"'],
            id="bad-scope",
        ),
    ],
)
def test_ingress_class_rules(spec, expected):
    assert errors(ingress_class(spec), kind=CLASSES) == expected


def test_ingress_class_controller_is_immutable():
    old = ingress_class({"controller": "example.com/a"})
    new = ingress_class({"controller": "example.com/b"})
    assert errors(new, old, kind=CLASSES) == ['spec.controller: Invalid value: "example.com/b": field is immutable']
    same = ingress_class({"controller": "example.com/a", "parameters": {"kind": "P", "name": "q"}})
    assert errors(same, old, kind=CLASSES) == []


def _cells(kind, obj: dict) -> dict:
    return {c.name: c.cell(obj) for c in kind.table_columns()}


def test_printer_columns_as_kubectl_shows_them():
    hosts = [{"host": h} for h in ("", "a.com", "b.com", "c.com")]
    obj = ingress({"rules": hosts, "tls": [{"hosts": ["a.com"]}], "ingressClassName": "main"})
    obj["status"] = {
        "loadBalancer": {"ingress": [{"ip": "10.0.0.2"}, {"hostname": "lb.example.com"}, {"ip": "10.0.0.2"}]}
    }
    cells = _cells(INGRESS, obj)
    assert [c.name for c in INGRESS.table_columns()] == ["Name", "Class", "Hosts", "Address", "Ports", "Age"]
    assert (cells["Class"], cells["Hosts"], cells["Address"], cells["Ports"]) == (
        "main",
        "a.com,b.com,c.com",
        "10.0.0.2,lb.example.com",
        "80, 443",
    )
    many = ingress({"rules": [{"host": f"h{i}.com"} for i in range(5)]})
    assert _cells(INGRESS, many)["Hosts"] == "h0.com,h1.com,h2.com + 2 more..."
    assert _cells(INGRESS, ingress({"defaultBackend": SVC}))["Hosts"] == "*"
    assert [c.name for c in CLASSES.table_columns()] == ["Name", "Controller", "Parameters", "Age"]
    params = {"controller": "example.com/c", "parameters": {"apiGroup": "k8s.example.com", "kind": "P", "name": "p"}}
    assert _cells(CLASSES, ingress_class(params))["Parameters"] == "P.k8s.example.com/p"
    assert _cells(CLASSES, ingress_class({"controller": "example.com/c"}))["Parameters"] == "<none>"
