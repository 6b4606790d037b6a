"""Image credential provider plugins: config, matching, the exec protocol, the cache, and the pull."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from agent.runtime.credentialprovider import (
    CredentialProviderError,
    CredentialProviders,
    Provider,
    image_matches,
    load_config,
)
from agent.runtime.images import ImageManager
from agent.runtime.keyring import Credential, DockerConfig
from apiserver_min.api import names
from cri.client import ImagePullError

CONFIG_VERSION = names.CREDENTIAL_PROVIDER_CONFIG_API_VERSIONS[0]
PLUGIN_VERSION = names.CREDENTIAL_PROVIDER_API_VERSIONS[0]

# The plugin logs each request to $LOG and answers with $RESPONSE (a JSON text), or fails with
# $FAIL, or hangs (its pid written to the file $HANG).
PLUGIN = f"""#!{sys.executable}
import json, os, sys
request = json.load(sys.stdin)
with open(os.environ["LOG"], "a") as f:
    f.write(json.dumps([request, sys.argv[1:]]) + "\\n")
if os.environ.get("HANG"):  # write the pid there, then never answer
    with open(os.environ["HANG"], "w") as f:
        f.write(str(os.getpid()))
    import time
    time.sleep(60)
if os.environ.get("FAIL"):
    sys.stderr.write("registry said no\\n")
    sys.exit(3)
sys.stdout.write(os.environ["RESPONSE"])
"""


@pytest.mark.parametrize(
    "pattern, image, matches",
    [
        ("*.example.com", "reg.example.com/app:1", True),
        ("*.example.com", "a.reg.example.com/app:1", False),
        ("reg.example.com", "reg.example.com:5000/app", False),
        ("reg.example.com:5000", "reg.example.com:5000/app", True),
        ("reg.example.com/team", "reg.example.com/team/app:1", True),
        ("reg.example.com/team", "reg.example.com/other/app", False),
        ("*.*.example.com", "a.b.example.com/x", True),
        ("reg-?.example.com", "reg-1.example.com/x", True),
    ],
)
def test_match_images_as_upstream(pattern, image, matches):
    assert image_matches(pattern, image) is matches


def _bin(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir(parents=True)
    plugin = bindir / "plugin"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    return bindir


def _config(tmp_path, providers: str):
    path = tmp_path / "creds.yaml"
    path.write_text(f"kind: CredentialProviderConfig\napiVersion: {CONFIG_VERSION}\nproviders:\n{providers}")
    return str(path)


def test_config_is_read_and_every_problem_named(tmp_path):
    bindir = _bin(tmp_path)
    good = _config(
        tmp_path,
        f"- name: plugin\n  matchImages: ['*.example.com']\n  defaultCacheDuration: 10m\n"
        f"  apiVersion: {PLUGIN_VERSION}\n  args: [--x]\n  env: [{{name: A, value: b}}]\n",
    )
    [p] = load_config(good, str(bindir))
    assert p == Provider("plugin", ("*.example.com",), 600.0, PLUGIN_VERSION, ("--x",), (("A", "b"),))
    bad = _config(
        tmp_path,
        "- name: missing\n  matchImages: []\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    with pytest.raises(CredentialProviderError) as err:
        load_config(bad, str(bindir))
    text = str(err.value)
    assert "providers[0].name: Invalid value: 'missing': no executable" in text
    assert "providers[0].matchImages: Required value" in text
    assert "providers[0].defaultCacheDuration: Required value" in text
    assert "providers[0].apiVersion: Unsupported value: 'credentialprovider.kubelet.k8s.io/v1'" in text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _providers(tmp_path, monkeypatch, response: dict, default_cache: float = 300.0):
    log = tmp_path / "requests.log"
    monkeypatch.setenv("LOG", str(log))
    monkeypatch.setenv("RESPONSE", json.dumps(response))
    clock = Clock()
    provider = Provider("plugin", ("*.example.com",), default_cache, PLUGIN_VERSION, ("--flag",))
    return CredentialProviders([provider], str(_bin(tmp_path)), clock=clock), log, clock


def _requests(log) -> list:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _response(key_type: str, auth: dict, duration: str | None = None) -> dict:
    doc = {"apiVersion": PLUGIN_VERSION, "kind": "CredentialProviderResponse", "cacheKeyType": key_type, "auth": auth}
    if duration is not None:
        doc["cacheDuration"] = duration
    return doc


async def test_plugin_credentials_the_most_specific_first_and_cached_per_registry(tmp_path, monkeypatch):
    auth = {"reg.example.com": {"username": "u1", "password": "p1"}, "reg.example.com/team": {"username": "u2"}}
    creds, log, clock = _providers(tmp_path, monkeypatch, _response("Registry", auth, "1m"))
    got = await creds.auth_configs("reg.example.com/team/app:1")
    # As upstream's keyring: no server address, so the runtime uses them for the host it pulls from.
    assert [(a.username, a.password, a.server_address) for a in got] == [("u2", "", ""), ("u1", "p1", "")]
    [[request, args]] = _requests(log)
    assert request == {
        "apiVersion": PLUGIN_VERSION,
        "kind": "CredentialProviderRequest",
        "image": "reg.example.com/team/app:1",
    }
    assert args == ["--flag"]
    # Same registry within the minute: from the cache; another image gets only the patterns it matches.
    other = await creds.auth_configs("reg.example.com/solo:2")
    assert [a.username for a in other] == ["u1"]
    assert len(_requests(log)) == 1
    clock.now += 61
    await creds.auth_configs("reg.example.com/solo:2")
    assert len(_requests(log)) == 2
    # An image no provider matches runs no plugin.
    assert await creds.auth_configs("docker.io/library/busybox") == []
    assert len(_requests(log)) == 2


async def test_image_keyed_and_uncached_responses(tmp_path, monkeypatch):
    auth = {"*.example.com": {"username": "u", "password": "p"}}
    creds, log, clock = _providers(tmp_path, monkeypatch, _response("Image", auth))
    await creds.auth_configs("reg.example.com/a:1")
    await creds.auth_configs("reg.example.com/a:1")
    await creds.auth_configs("reg.example.com/b:1")  # another image: not the cached key
    assert len(_requests(log)) == 2
    creds, log, clock = _providers(tmp_path / "z", monkeypatch, _response("Global", auth, "0s"))
    await creds.auth_configs("reg.example.com/a:1")
    await creds.auth_configs("reg.example.com/a:1")
    assert len(_requests(log)) == 2  # cacheDuration 0: never cached


async def test_a_failing_or_wrong_plugin_gives_no_credentials(tmp_path, monkeypatch):
    creds, log, _ = _providers(tmp_path, monkeypatch, _response("Image", {}))
    monkeypatch.setenv("FAIL", "1")
    assert await creds.auth_configs("reg.example.com/a:1") == []
    monkeypatch.delenv("FAIL")
    wrong = _response("Image", {"reg.example.com": {"username": "u"}})
    wrong["apiVersion"] = "credentialprovider.kubelet.k8s.io/v1"
    monkeypatch.setenv("RESPONSE", json.dumps(wrong))
    assert await creds.auth_configs("reg.example.com/a:1") == []
    assert len(_requests(log)) == 2  # failures are not cached


async def test_a_cancelled_request_kills_its_plugin(tmp_path, monkeypatch):
    creds, _, _ = _providers(tmp_path, monkeypatch, _response("Image", {}))
    pidfile = tmp_path / "plugin.pid"
    monkeypatch.setenv("HANG", str(pidfile))
    task = asyncio.create_task(creds.auth_configs("reg.example.com/a:1"))
    for _ in range(200):  # bounded: 10 s
        if pidfile.exists() and pidfile.read_text():
            break
        await asyncio.sleep(0.05)
    pid = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    def state() -> str:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    for _ in range(100):  # bounded: 5 s
        if state() in ("gone", "Z"):
            break
        await asyncio.sleep(0.05)
    assert state() in ("gone", "Z")


class RecordingImages:
    """A CRI image service whose registry accepts only user "good"."""

    def __init__(self) -> None:
        self.pulls: list[str | None] = []

    async def image_status(self, image, verbose=False, *, timeout=None):
        return None

    async def pull_image(self, image, auth=None, sandbox_config=None, *, timeout=None):
        self.pulls.append(auth.username if auth is not None else None)
        if auth is None or auth.username != "good":
            raise ImagePullError("PullImage", "401 Unauthorized")
        return "sha256:abc"


class StaticCredentials(CredentialProviders):
    def __init__(self, users: list[str]) -> None:
        super().__init__([], "/nonexistent")
        self.users = users

    async def docker_configs(self, image: str) -> list[DockerConfig]:
        return [{"reg.example.com": Credential(u, "pw")} for u in self.users]


async def test_the_pull_tries_each_credential_in_turn():
    cri = RecordingImages()
    images = ImageManager(cri, credentials=StaticCredentials(["bad", "good"]))
    assert await images.ensure("reg.example.com/a:1", "Always", pod_uid="u", container="c") == "sha256:abc"
    assert cri.pulls == ["bad", "good"]
    cri = RecordingImages()
    images = ImageManager(cri, credentials=StaticCredentials([]))
    with pytest.raises(Exception, match="401 Unauthorized"):
        await images.ensure("reg.example.com/a:1", "Always", pod_uid="u", container="c")
    assert cri.pulls == [None]  # no credentials: anonymous
