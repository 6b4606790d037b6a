"""orch-apiserver flags: defaults, and errors that name the flag at fault."""

from __future__ import annotations

import pytest

from apiserver_min.api import names
from apiserver_min.api.featuregates import Stage
from apiserver_min.options import FEATURE_GATES, OptionsError, parse, parse_runtime_config


def test_defaults():
    o = parse([])
    assert o.data_dir == names.APISERVER_DATA_DIR == "/var/lib/orch-apiserver"
    assert o.secure_port == 6443
    assert o.bind_address == "0.0.0.0"
    assert o.storage_backend == "sqlite"
    assert o.etcd_servers == ()
    assert o.etcd_prefix == "/registry"
    assert o.runtime_config == {}
    assert o.feature_gates.explicit == {}
    assert o.livez_grace_period == 0.0
    assert o.shutdown_delay_duration == 0.0
    assert o.min_request_timeout == 1800
    assert o.max_request_body_bytes == 3 * 1024 * 1024
    assert o.watch_bookmark_interval == 60.0
    assert o.verbosity == 0
    assert o.warnings == ()
    # Feature defaults come from the gate table when not set.
    assert o.feature("WatchBookmark") is True
    assert o.feature("WatchList") is False
    assert o.feature("NoSuchGate") is False


def test_good_values():
    o = parse(
        [
            "--data-dir",
            "/tmp/x",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "7443",
            "--storage-backend",
            "etcd3",
            "--etcd-servers",
            "http://127.0.0.1:2379, https://[::1]:2379",
            "--etcd-prefix",
            "/orch/",
            "--livez-grace-period",
            "1m30s",
            "--shutdown-delay-duration",
            "500ms",
            "--feature-gates",
            "WatchList=true,ComponentSLIs=false",
            "-v",
            "4",
        ]
    )
    assert o.data_dir == "/tmp/x"
    assert o.secure_port == 7443
    assert o.etcd_servers == ("http://127.0.0.1:2379", "https://[::1]:2379")
    assert o.etcd_prefix == "/orch"
    assert o.livez_grace_period == 90.0
    assert o.shutdown_delay_duration == 0.5
    assert o.feature_gates.explicit == {"WatchList": True, "ComponentSLIs": False}
    assert o.feature("WatchList") is True and o.feature("ComponentSLIs") is False
    assert o.verbosity == 4


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--secure-port", "0"], "--secure-port"),
        (["--secure-port", "65536"], "--secure-port"),
        (["--secure-port", "abc"], "--secure-port"),
        (["--secure-port", ""], "--secure-port"),
        (["--storage-backend", "foo"], "--storage-backend"),
        (["--storage-backend", "etcd3"], "--etcd-servers"),
        (["--storage-backend", "etcd3", "--etcd-servers", "localhost:2379"], "--etcd-servers"),
        (["--storage-backend", "etcd3", "--etcd-servers", "http://localhost"], "--etcd-servers"),
        (["--storage-backend", "etcd3", "--etcd-servers", "http://localhost:abc"], "--etcd-servers"),
        (["--storage-backend", "etcd3", "--etcd-servers", "ftp://localhost:2379"], "--etcd-servers"),
        (["--storage-backend", "etcd3", "--etcd-servers", "http://:2379"], "--etcd-servers"),
        (["--etcd-prefix", "registry"], "--etcd-prefix"),
        (["--bind-address", "localhost"], "--bind-address"),
        (["--advertise-address", "my-host"], "--advertise-address"),
        (["--advertise-address", "127.0.0.1"], "--advertise-address"),
        (["--advertise-address", "169.254.1.1"], "--advertise-address"),
        (["--advertise-address", "::"], "--advertise-address"),
        (["--livez-grace-period", "5"], "--livez-grace-period"),
        (["--livez-grace-period", "five seconds"], "--livez-grace-period"),
        (["--livez-grace-period=-5s"], "--livez-grace-period"),
        (["--shutdown-delay-duration", "1x"], "--shutdown-delay-duration"),
        (["--shutdown-delay-duration=-1s"], "--shutdown-delay-duration"),
        (["--shutdown-watch-termination-grace-period", "soon"], "--shutdown-watch-termination-grace-period"),
        (["--min-request-timeout", "0"], "--min-request-timeout"),
        (["--max-request-body-bytes", "ten"], "--max-request-body-bytes"),
        (["-v", "11"], "-v"),
        (["--feature-gates", "NoSuchGate=true"], "--feature-gates"),
        (["--feature-gates", "WatchList"], "--feature-gates"),
        (["--feature-gates", "WatchList=maybe"], "--feature-gates"),
        (["--feature-gates", "WatchBookmark=false"], "--feature-gates"),
        (["--runtime-config", "apps"], "--runtime-config"),
        (["--runtime-config", "apps/v1=sometimes"], "--runtime-config"),
        (["--runtime-config", "a/b/c/d"], "--runtime-config"),
        (["--tls-cert-file", "/nonexistent/cert.pem"], "--tls-cert-file"),
        (["--client-ca-file", "/nonexistent/ca.pem"], "--client-ca-file"),
    ],
)
def test_bad_values_name_the_flag(argv, flag):
    with pytest.raises(OptionsError) as info:
        parse(argv)
    assert flag in str(info.value)


def test_bad_value_message_quotes_the_value():
    with pytest.raises(OptionsError, match=r"invalid value 'abc' for flag --secure-port: not an integer"):
        parse(["--secure-port", "abc"])
    with pytest.raises(OptionsError, match=r"'foo' for flag --storage-backend: must be sqlite or etcd3"):
        parse(["--storage-backend", "foo"])
    with pytest.raises(OptionsError, match="unrecognized feature gate: NoSuchGate"):
        parse(["--feature-gates", "NoSuchGate=true"])
    with pytest.raises(OptionsError, match="cannot set feature gate WatchBookmark to false"):
        parse(["--feature-gates", "WatchBookmark=false"])


def test_tls_files_go_together(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(OptionsError, match="--tls-cert-file and --tls-private-key-file"):
        parse(["--tls-cert-file", str(cert)])
    o = parse(["--tls-cert-file", str(cert), "--tls-private-key-file", str(cert)])
    assert o.tls_cert_file == str(cert)


def test_ga_gate_true_is_a_warning():
    o = parse(["--feature-gates", "WatchBookmark=true"])
    assert o.feature_gates.explicit == {"WatchBookmark": True}
    assert len(o.warnings) == 1 and "GA feature gate WatchBookmark=true" in o.warnings[0]


def test_all_alpha_sets_every_alpha_gate_without_overriding_explicit_ones():
    alpha = {k for k, spec in FEATURE_GATES.items() if spec.stage is Stage.ALPHA and k != "AllAlpha"}
    o = parse(["--feature-gates", "AllAlpha=true"])
    assert {k: o.feature(k) for k in alpha} == {k: True for k in alpha}
    o = parse(["--feature-gates", "WatchList=false,AllAlpha=true"])
    assert o.feature("WatchList") is False


@pytest.mark.parametrize(
    "value, parsed",
    [
        ("", {}),
        ("api/all=false", {"api/all": False}),
        ("api/all=false,api/v1=true", {"api/all": False, "v1": True}),
        ("v1", {"v1": True}),
        ("api/alpha=true,api/beta=false", {"api/alpha": True, "api/beta": False}),
        ("apps/v1=false", {"apps/v1": False}),
        ("batch/v1", {"batch/v1": True}),
        ("apps/v1/deployments=false", {"apps/v1/deployments": False}),
        (" apps/v1=true , ,batch/v1=0", {"apps/v1": True, "batch/v1": False}),
    ],
)
def test_runtime_config_shapes(value, parsed):
    assert parse_runtime_config(value) == parsed
    assert parse(["--runtime-config", value]).runtime_config == parsed


def test_version_flag_prints_the_version(capsys):
    with pytest.raises(SystemExit) as info:
        parse(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == "orch-apiserver v0.1.0"


def test_unknown_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        parse(["--no-such-flag"])
    assert info.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


# --- authentication flags ----------------------------------------------------------------------


def test_authentication_defaults():
    o = parse([])
    assert o.anonymous_auth is True
    assert o.token_auth_file == ""
    assert o.enable_bootstrap_token_auth is False
    assert o.service_account_key_files == ()
    assert o.service_account_signing_key_file == ""
    assert o.service_account_issuers == ("https://orch.default.svc.cluster.local",)
    assert o.api_audiences == o.service_account_issuers[:1]
    assert o.service_account_lookup is True
    assert o.service_account_max_token_expiration == 0.0


def test_authentication_values(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    o = parse(
        [
            "--anonymous-auth=false",
            "--enable-bootstrap-token-auth",
            "--token-auth-file",
            str(f),
            "--service-account-key-file",
            str(f),
            "--service-account-key-file",
            str(f),
            "--service-account-signing-key-file",
            str(f),
            "--service-account-issuer",
            "https://a.example",
            "--service-account-issuer",
            "b",
            "--service-account-lookup=false",
            "--service-account-max-token-expiration",
            "24h",
            "--api-audiences",
            "x, y",
            "--api-audiences=z,x",
        ]
    )
    assert o.anonymous_auth is False and o.enable_bootstrap_token_auth is True
    assert o.token_auth_file == o.service_account_signing_key_file == str(f)
    assert o.service_account_key_files == (str(f), str(f))
    assert o.service_account_issuers == ("https://a.example", "b")
    assert o.service_account_lookup is False
    assert o.service_account_max_token_expiration == 86400.0
    assert o.api_audiences == ("x", "y", "z")
    # Without --api-audiences, the first issuer is the audience.
    assert parse(["--service-account-issuer", "https://a.example", "--service-account-issuer", "b"]).api_audiences == (
        "https://a.example",
    )
    assert parse(["--enable-bootstrap-token-auth=false"]).enable_bootstrap_token_auth is False


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--anonymous-auth=maybe"], "--anonymous-auth: expected true or false"),
        (["--service-account-lookup", "sometimes"], "--service-account-lookup"),
        (["--token-auth-file", "/nonexistent/tokens.csv"], "--token-auth-file: no such file"),
        (["--service-account-key-file", "/nonexistent/sa.pub"], "--service-account-key-file: no such file"),
        (["--service-account-key-file", ""], "--service-account-key-file: no such file"),
        (["--service-account-signing-key-file", "/nonexistent/sa.key"], "--service-account-signing-key-file"),
        (["--service-account-issuer", "https://a", "--service-account-issuer", "https://a"], "given more than once"),
        (["--service-account-issuer", ""], "--service-account-issuer: must not be empty"),
        (["--service-account-issuer", "http:"], "contains ':' but is not a valid URL"),
        (["--service-account-max-token-expiration", "5m"], "at least 10m"),
        (["--service-account-max-token-expiration", "forever"], "--service-account-max-token-expiration"),
    ],
)
def test_authentication_bad_values(argv, message):
    with pytest.raises(OptionsError) as info:
        parse(argv)
    assert message in str(info.value)


def test_endpoint_slice_limits():
    opts = parse([])
    assert (opts.max_endpoints_per_slice, opts.mirroring_max_endpoints_per_subset) == (100, 1000)
    opts = parse(["--max-endpoints-per-slice", "5", "--mirroring-max-endpoints-per-subset", "7"])
    assert (opts.max_endpoints_per_slice, opts.mirroring_max_endpoints_per_subset) == (5, 7)
    with pytest.raises(
        OptionsError, match="endpoint slice max endpoints per slice must not be more than 1000, but got 1001"
    ):
        parse(["--max-endpoints-per-slice", "1001"])
    with pytest.raises(OptionsError, match="mirroring max endpoints per subset must not be less than 1, but got 0"):
        parse(["--mirroring-max-endpoints-per-subset", "0"])
    with pytest.raises(OptionsError, match="invalid value 'x' for flag --max-endpoints-per-slice"):
        parse(["--max-endpoints-per-slice", "x"])


def test_service_ranges_defaults_and_values():
    opts = parse([])
    assert opts.service_cluster_ip_ranges == ("10.96.0.0/12",)
    assert opts.service_node_port_range == (30000, 2768)
    opts = parse(["--service-cluster-ip-range=10.0.0.0/24,fd00::/112", "--service-node-port-range=20000-20099"])
    assert opts.service_cluster_ip_ranges == ("10.0.0.0/24", "fd00::/112")
    assert opts.service_node_port_range == (20000, 100)
    assert parse(["--service-node-port-range=31000+9"]).service_node_port_range == (31000, 10)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--service-cluster-ip-range=bogus"], "'bogus' is not a CIDR"),
        (["--service-cluster-ip-range=10.0.0.0/24,10.1.0.0/24"], "must be of different IP families"),
        (["--service-cluster-ip-range=10.0.0.0/24,fd00::/112,10.1.0.0/24"], "at most two CIDRs"),
        (["--service-cluster-ip-range=10.0.0.0/8"], "too large"),
        (["--service-cluster-ip-range=10.0.0.1/32"], "holds no usable address"),
        (["--service-node-port-range=32767-30000"], "non-empty range"),
        (["--service-node-port-range=abc"], "expected FIRST-LAST"),
    ],
)
def test_service_ranges_bad_values(argv, message):
    flag = argv[0].split("=")[0]
    with pytest.raises(OptionsError) as e:
        parse(argv)
    assert flag in str(e.value) and message in str(e.value)
