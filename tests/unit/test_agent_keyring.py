"""Image pull credentials: the keyring (locations, matching, order), pull secrets, the
node's Docker config file, the pull order, and a pod's imagePullSecrets reaching the
CRI PullImage request (pipeline on the fake runtime)."""

from __future__ import annotations

import base64
import json

import pytest

from agent.client.rest import ApiError
from agent.objectcache import ObjectCache
from agent.runtime.images import ImageError, ImageManager
from agent.runtime.keyring import (
    Credential,
    DockerConfigError,
    Keyring,
    NodeDockerConfig,
    pull_secret_configs,
    repository,
)
from apiserver_min.api import names
from cri import api_pb2 as pb
from cri.client import ImagePullError
from tests.unit import test_agent_workers as workers_tests
from tests.unit.test_agent_workers import calls, make_pod, running, until

fake = workers_tests.fake
ctx = workers_tests.ctx
make_agent = workers_tests.make_agent
fast_periods = workers_tests.fast_periods


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, auths: dict, *, type_: str = "kubernetes.io/dockerconfigjson") -> dict:
    if type_.endswith("dockercfg"):
        key, doc = names.SECRET_KEY_DOCKERCFG, auths
    else:
        key, doc = names.SECRET_KEY_DOCKER_CONFIG_JSON, {"auths": auths}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "type": type_,
        "data": {key: b64(json.dumps(doc))},
    }


@pytest.mark.parametrize(
    "image, repo",
    [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("team/app:1", "docker.io/team/app"),
        ("index.docker.io/app", "docker.io/library/app"),
        ("localhost/app:1", "localhost/app"),
        ("reg.example.com:5000/team/app@sha256:" + "a" * 64, "reg.example.com:5000/team/app"),
    ],
)
def test_the_repository_an_image_pulls_from(image, repo):
    assert repository(image) == repo


def test_lookup_matches_globs_ports_and_paths_most_specific_first():
    def cred(user: str) -> Credential:
        return Credential(user, "pw")

    ring = Keyring(
        [
            {
                "https://reg.example.com/v2/": cred("host"),
                "reg.example.com/team": cred("team"),
                "*.example.com": cred("glob"),
                "reg.example.com:5000": cred("port"),
                "other.io": cred("other"),
            },
            {"reg.example.com": cred("host-2")},  # a second source, same location: after the first
        ]
    )
    users = lambda image: [c.username for c in ring.lookup(image)]  # noqa: E731
    assert users("reg.example.com/team/app") == ["team", "host", "host-2", "glob"]
    assert users("reg.example.com/solo") == ["host", "host-2", "glob"]
    assert users("reg.example.com:5000/app") == ["port"]
    assert users("a.b.example.com/app") == []  # one label more than the glob
    assert users("docker.io/library/busybox") == []
    hub = Keyring([{"https://index.docker.io/v1/": cred("hub")}])
    assert [c.username for c in hub.lookup(repository("busybox"))] == ["hub"]
    assert hub.lookup("quay.io/app") == []


def test_pull_secrets_both_forms_both_spellings_and_their_errors():
    auth = {"reg.example.com": {"auth": b64("alice:s3cr:t"), "username": "ignored"}}
    (cfg,) = pull_secret_configs([secret("a", auth)])
    assert cfg == {"reg.example.com": Credential("alice", "s3cr:t")}
    token = {"reg.example.com": {"identitytoken": "tok", "registrytoken": "reg"}}
    (cfg,) = pull_secret_configs([secret("b", token, type_=names.SECRET_TYPE_DOCKERCFG)])
    assert cfg["reg.example.com"].auth_config() == pb.AuthConfig(identity_token="tok", registry_token="reg")
    opaque = dict(secret("c", auth), type="Opaque")
    assert pull_secret_configs([opaque]) == []  # another type gives nothing, as upstream
    with pytest.raises(DockerConfigError, match=r"secret default/d \.dockerconfigjson: 'r.io'.auth: unable"):
        pull_secret_configs([secret("d", {"r.io": {"auth": b64("no-colon")}})])
    bad = secret("e", {})
    bad["data"][names.SECRET_KEY_DOCKER_CONFIG_JSON] = b64("{not json")
    with pytest.raises(DockerConfigError, match="secret default/e .dockerconfigjson: not JSON"):
        pull_secret_configs([bad])


def test_node_docker_config_search_order_and_reread(tmp_path):
    root, home = tmp_path / "root", tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    root.mkdir()
    now = [0.0]
    node = NodeDockerConfig(str(root), home=str(home), clock=lambda: now[0])
    assert node.get() == {}
    (home / ".dockercfg").write_text(json.dumps({"old.io": {"username": "legacy"}}))
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"home.io": {"username": "h"}}}))
    assert node.get() == {}  # read again only after five minutes
    now[0] += 301
    assert node.get() == {"home.io": Credential("h")}  # config.json before any .dockercfg
    (root / "config.json").write_text("{broken")  # skipped, with a warning
    now[0] += 301
    assert node.get() == {"home.io": Credential("h")}
    (root / "config.json").write_text(json.dumps({"auths": {"root.io": {"username": "r"}}}))
    now[0] += 301
    assert node.get() == {"root.io": Credential("r")}  # the agent's root directory first


class Registry:
    """A CRI image service: what each pull sent, and the user it accepts."""

    def __init__(self, accept: str | None) -> None:
        self.accept = accept
        self.pulls: list[str | None] = []

    async def image_status(self, image, verbose=False, *, timeout=None):
        return None

    async def pull_image(self, image, auth=None, sandbox_config=None, *, timeout=None):
        self.pulls.append(auth.username if auth is not None else None)
        if (auth.username if auth is not None else None) != self.accept:
            raise ImagePullError("PullImage", "401 Unauthorized")
        return "sha256:abc"


async def test_pull_order_pod_secrets_then_the_node_and_anonymous_only_without_any(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"auths": {"reg.example.com": {"username": "node"}}}))
    node = NodeDockerConfig(str(root), home=str(tmp_path))
    pod_secret = secret("s", {"reg.example.com/team": {"username": "pod"}})
    cri = Registry(accept="node")
    images = ImageManager(cri, node_config=node)
    await images.ensure("reg.example.com/team/app:1", "Always", pod_uid="u", container="c", pull_secrets=[pod_secret])
    assert cri.pulls == ["pod", "node"]
    cri = Registry(accept=None)
    images = ImageManager(cri, node_config=node)
    await images.ensure("elsewhere.io/app:1", "Always", pod_uid="u", container="c", pull_secrets=[pod_secret])
    assert cri.pulls == [None]
    # Credentials that all fail: no anonymous attempt after them (as upstream).
    cri = Registry(accept=None)
    images = ImageManager(cri, node_config=node)
    with pytest.raises(ImageError, match="401 Unauthorized"):
        await images.ensure("reg.example.com/x:1", "Always", pod_uid="u", container="c")
    assert cri.pulls == ["node"]
    # A pull secret that cannot be read fails the pull, naming it.
    bad = secret("bad", {"r.io": {"auth": "???"}})
    with pytest.raises(ImageError, match=r"secret default/bad .dockerconfigjson: 'r.io'.auth is not base64") as err:
        await images.ensure("r.io/app:1", "Always", pod_uid="u", container="c", pull_secrets=[bad])
    assert err.value.reason == "ErrImagePull"


async def test_a_pods_pull_secret_reaches_the_runtime_and_a_missing_one_is_an_event(fake, make_agent):
    image = "reg.example.test/private:1"
    fake.allow_pull(image, credentials=("robot", "hunter2"))
    objects = {
        ("Secret", "default", "regcred"): secret(
            "regcred", {"reg.example.test": {"auth": b64("robot:hunter2")}, "other.test": {"username": "x"}}
        )
    }
    agent = make_agent()
    agent.runtime.volumes.objects = lambda kind, ns, name: objects.get((kind, ns, name))
    pod = make_pod("private", [{"name": "app", "image": image, "command": ["sleep", "1"]}])
    pod["spec"]["imagePullSecrets"] = [{"name": "gone"}, {"name": "regcred"}]
    agent.start()
    agent.push(pod)
    await until(lambda: running(fake, pod, "app"), "the private image's container to run")
    (pull,) = [r for r in calls(fake, "PullImage") if r.image.image == image]
    assert (pull.auth.username, pull.auth.password) == ("robot", "hunter2")
    events = [(e.type, e.reason, e.message) for e in agent.events.for_object(pod["metadata"]["uid"])]
    assert (
        "Warning",
        names.EVENT_FAILED_TO_RETRIEVE_PULL_SECRET,
        "Unable to retrieve some image pull secrets (gone); attempting to pull the image may not succeed.",
    ) in events


class Forbidding:
    """An API client that answers 403 for one path, 404 for the rest."""

    def __init__(self, forbidden: str) -> None:
        self.forbidden = forbidden

    async def get(self, path: str) -> dict:
        if path == self.forbidden:
            raise ApiError(403, "Forbidden", "no")
        raise ApiError(404, "NotFound", f"{path} not found")


async def test_a_pull_secret_the_node_may_not_read_never_holds_the_pod_back():
    pod = make_pod("p", [{"name": "c", "image": "i"}])
    pod["spec"]["imagePullSecrets"] = [{"name": "pull"}]
    cache = ObjectCache(Forbidding("/api/v1/namespaces/default/secrets/pull"), watch=False)  # type: ignore[arg-type]
    await cache.prefetch(pod)
    assert cache.get("Secret", "default", "pull") is None
    # The same secret in a volume: its refusal is the pod's error, as before.
    pod["spec"]["volumes"] = [{"name": "v", "secret": {"secretName": "pull"}}]
    with pytest.raises(ApiError):
        await cache.prefetch(pod)
