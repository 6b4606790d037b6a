"""Pure rules of the proxy sub-resources: names, target paths, request info."""

from __future__ import annotations

from apiserver_min.api.kinds import REGISTRY
from apiserver_min.server.proxy import split_scheme_name_port, target_path
from apiserver_min.server.routing import parse


def test_split_scheme_name_port():
    assert split_scheme_name_port("web") == ("", "web", "")
    assert split_scheme_name_port("web:80") == ("", "web", "80")
    assert split_scheme_name_port("https:web:443") == ("https", "web", "443")
    assert split_scheme_name_port("https:web:") == ("https", "web", "")
    for bad in ("", ":80", "ftp:web:21", "a:b:c:d"):
        assert split_scheme_name_port(bad) is None, bad


def test_target_path():
    p = "/api/v1/namespaces/ns/services/web:80/proxy"
    assert target_path(p, "services", "web:80") is None  # redirected to the slash form
    assert target_path(p + "/", "services", "web:80") == "/"
    assert target_path(p + "/a/b/", "services", "web:80") == "/a/b/"
    assert target_path(p + "/a//b/./c", "services", "web:80") == "/a/b/c"
    assert target_path(p + "/a/../../../etc", "services", "web:80") == "/etc"
    assert target_path(p + "/a%2Fb/c%20d", "services", "web:80") == "/a%2Fb/c%20d"  # escapes kept
    # A path segment named proxy further on is part of the target path.
    assert target_path(p + "/x/proxy/y", "services", "web:80") == "/x/proxy/y"
    assert target_path("/api/v1/nodes/n1/proxy/stats/summary", "nodes", "n1") == "/stats/summary"


def test_request_info_of_proxy_paths():
    def info(method, path, query=None):
        return parse(method, path, query or {}, REGISTRY, lambda *a: True)

    i = info("GET", "/api/v1/namespaces/ns/services/https:web:443/proxy/a/b", {"watch": "true"})
    assert (i.resource, i.name, i.subresource, i.verb) == ("services", "https:web:443", "proxy", "get")
    for method, verb in (
        ("POST", "create"),
        ("PUT", "update"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
        ("HEAD", "get"),
    ):
        assert info(method, "/api/v1/nodes/n1/proxy/").verb == verb
    assert info("OPTIONS", "/api/v1/nodes/n1/proxy/").verb == "options"
    # Other sub-resources are unchanged.
    assert info("GET", "/api/v1/namespaces/ns/pods/p/log").subresource == "log"
