"""The admission configuration file (--admission-control-config-file): its loader,
per-plugin configuration inline or by path, and the start-up errors of the flag."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from apiserver_min.admission.config import AdmissionConfigError, load
from apiserver_min.admission.plugins import CONFIGURABLE_NAMES, build_chain
from apiserver_min.admission.plugins.podnodeselector import PodNodeSelector
from apiserver_min.admission.plugins.podsecurity import PodSecurity
from apiserver_min.api import names
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.options import OptionsError, parse

API_VERSION = f"apiserver.config.{names.DOMAIN}/v1"
PS_CONFIG = {
    "apiVersion": f"{names.POD_SECURITY_CONFIG_GROUP}/v1",
    "kind": "PodSecurityConfiguration",
    "defaults": {"enforce": "baseline"},
    "exemptions": {"namespaces": ["ops"]},
}


def write(path, doc, as_json=False):
    path.write_text(json.dumps(doc) if as_json else yaml.safe_dump(doc))
    return str(path)


def admission_file(tmp_path, plugins, as_json=False, api_version=API_VERSION):
    return write(
        tmp_path / ("admission.json" if as_json else "admission.yaml"),
        {"apiVersion": api_version, "kind": "AdmissionConfiguration", "plugins": plugins},
        as_json,
    )


@pytest.mark.parametrize("as_json", [False, True])
def test_inline_and_path_configuration_yaml_or_json(tmp_path, as_json):
    sub = tmp_path / "conf"
    sub.mkdir()
    write(sub / "selector.yaml", {"podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector": "a=b"}})
    path = admission_file(
        tmp_path,
        [
            {"name": "PodSecurity", "configuration": PS_CONFIG},
            {"name": "PodNodeSelector", "path": "conf/selector.yaml"},
        ],
        as_json,
    )
    config = load(path, CONFIGURABLE_NAMES)
    assert config.for_plugin("PodSecurity") == PS_CONFIG
    assert config.for_plugin("PodNodeSelector") == {
        "podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector": "a=b"}
    }
    assert config.source_of("PodNodeSelector") == str(sub / "selector.yaml")
    assert config.for_plugin("AlwaysPullImages") is None
    # Callers get a copy: changing it changes nothing for the next caller.
    config.for_plugin("PodSecurity")["kind"] = "changed"
    assert config.for_plugin("PodSecurity")["kind"] == "PodSecurityConfiguration"


@pytest.mark.parametrize(
    "api_version", [f"apiserver.config.{names.DOMAIN}/v1alpha1", f"apiserver.{names.DOMAIN}/v1alpha1"]
)
def test_older_api_versions_of_the_same_shape_are_accepted(tmp_path, api_version):
    path = admission_file(tmp_path, [{"name": "PodSecurity", "configuration": PS_CONFIG}], api_version=api_version)
    assert load(path, CONFIGURABLE_NAMES).for_plugin("PodSecurity") == PS_CONFIG


@pytest.mark.parametrize(
    "plugins, message",
    [
        ([{"name": "Nope", "configuration": {}}], "plugins[0].name: unknown admission plugin 'Nope'"),
        ([{"name": "PodSecurity"}], "plugins[0]: configuration or path is required"),
        ([{"name": "PodSecurity", "configuration": {}, "path": "x.yaml"}], "give either configuration or path"),
        ([{"name": "PodSecurity", "configuration": PS_CONFIG}] * 2, "plugin PodSecurity is configured twice"),
        ([{"name": "PodSecurity", "configuration": PS_CONFIG, "extra": 1}], "plugins[0]: unknown field(s) extra"),
        ([{"name": "PodSecurity", "path": "missing.yaml"}], "cannot read configuration file of admission plugin"),
        ([{"name": "PodSecurity", "configuration": [1]}], "the configuration of plugin PodSecurity must be an object"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path, plugins, message):
    path = admission_file(tmp_path, plugins)
    with pytest.raises(AdmissionConfigError) as exc:
        load(path, CONFIGURABLE_NAMES)
    assert path in str(exc.value)
    assert message in str(exc.value)


def test_wrong_kind_api_version_and_syntax(tmp_path):
    p = write(tmp_path / "a.yaml", {"apiVersion": API_VERSION, "kind": "Other", "plugins": []})
    with pytest.raises(AdmissionConfigError, match="kind must be AdmissionConfiguration"):
        load(p, CONFIGURABLE_NAMES)
    p = write(tmp_path / "b.yaml", {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration"})
    with pytest.raises(AdmissionConfigError, match="apiVersion 'apiserver.config.k8s.io/v1' is not supported"):
        load(p, CONFIGURABLE_NAMES)
    bad = tmp_path / "c.yaml"
    bad.write_text("plugins: [\n")
    with pytest.raises(AdmissionConfigError, match="is neither YAML nor JSON"):
        load(str(bad), CONFIGURABLE_NAMES)
    with pytest.raises(AdmissionConfigError, match="cannot read admission configuration file"):
        load(str(tmp_path / "absent.yaml"), CONFIGURABLE_NAMES)


def test_the_flag_checks_enabled_plugins_configuration_at_start(tmp_path):
    bad_selector = {"podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector": "a=b=c"}}
    path = admission_file(tmp_path, [{"name": "PodNodeSelector", "configuration": bad_selector}])
    # Not enabled: kept, unused, no error (as upstream).
    opts = parse(["--data-dir", str(tmp_path), "--admission-control-config-file", path])
    assert opts.admission_config.for_plugin("PodNodeSelector") == bad_selector
    with pytest.raises(OptionsError) as exc:
        parse(
            [
                "--data-dir",
                str(tmp_path),
                "--admission-control-config-file",
                path,
                "--enable-admission-plugins=PodNodeSelector",
            ]
        )
    assert str(exc.value).startswith(f"invalid value {path!r} for flag --admission-control-config-file:")
    assert "admission plugin PodNodeSelector" in str(exc.value)
    assert "invalid selector: [a b c]" in str(exc.value)


def test_plugins_get_their_configuration_through_the_chain(tmp_path):
    path = admission_file(
        tmp_path,
        [
            {"name": "PodSecurity", "configuration": PS_CONFIG},
            {"name": "PodNodeSelector", "configuration": {"podNodeSelectorPluginConfig": {"team-a": "env=prod"}}},
        ],
    )
    opts = parse(
        [
            "--data-dir",
            str(tmp_path),
            "--admission-control-config-file",
            path,
            "--enable-admission-plugins=PodNodeSelector",
        ]
    )

    server = SimpleNamespace(opts=opts, store=None, registry=REGISTRY, cache=None, authorizer=None)
    chain = build_chain(server, opts.admission_plugins)
    ps = next(p for p in chain.plugins if isinstance(p, PodSecurity))
    assert str(ps.config.defaults.enforce) == "baseline:latest"
    assert ps.config.exempt_namespaces == {"ops"}
    pns = next(p for p in chain.plugins if isinstance(p, PodNodeSelector))
    assert pns.selectors == {"team-a": {"env": "prod"}}
