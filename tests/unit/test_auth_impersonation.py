"""Impersonation without a server: which headers ask for what, what each part is
authorized as, the identity that results, and the request the rest of the path sees."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from apiserver_min.api import names
from apiserver_min.api import status as st
from apiserver_min.api.user import UserInfo
from apiserver_min.authz.authorizer import Decision
from apiserver_min.server import impersonation as imp

ADMIN = UserInfo("admin", groups=(names.GROUP_MASTERS, names.GROUP_AUTHENTICATED))


class Recorder:
    """Allows everything except the (resource, name) pairs in ``deny``; records what was asked."""

    def __init__(self, deny=()):
        self.deny = set(deny)
        self.asked = []

    def authorize(self, attrs):
        self.asked.append(attrs)
        if (attrs.resource, attrs.name) in self.deny:
            return Decision.NO_OPINION, ""
        return Decision.ALLOW, ""


def _request(*headers):
    return make_mocked_request("GET", "/api/v1/pods", headers=CIMultiDict([("Accept", "application/json"), *headers]))


async def test_no_headers_leave_the_request_alone():
    req = _request()
    out, user = await imp.impersonate(req, ADMIN, Recorder())
    assert out is req and user is ADMIN
    req = _request(("Impersonate-User", ""))
    assert (await imp.impersonate(req, None, Recorder())) == (req, None)


async def test_each_part_is_authorized_for_the_requestor():
    authz = Recorder()
    req = _request(
        ("Impersonate-User", "jane"),
        ("Impersonate-Group", "a"),
        ("Impersonate-Group", "b"),
        ("Impersonate-Extra-Acme.io%2FScopes", "r"),
        ("impersonate-extra-acme.io%2fscopes", "w"),
        ("Impersonate-Uid", "u-1"),
        ("X-Other", "kept"),
    )
    out, user = await imp.impersonate(req, ADMIN, authz)
    assert user == UserInfo("jane", "u-1", ("a", "b", names.GROUP_AUTHENTICATED), {"acme.io/scopes": ("r", "w")})
    asked = [(a.user.name, a.verb, a.api_group, a.resource, a.subresource, a.namespace, a.name) for a in authz.asked]
    auth = names.AUTHENTICATION_GROUP
    assert asked == [
        ("admin", "impersonate", "", "users", "", "", "jane"),
        ("admin", "impersonate", "", "groups", "", "", "a"),
        ("admin", "impersonate", "", "groups", "", "", "b"),
        ("admin", "impersonate", auth, "userextras", "acme.io/scopes", "", "r"),
        ("admin", "impersonate", auth, "userextras", "acme.io/scopes", "", "w"),
        ("admin", "impersonate", auth, "uids", "", "", "u-1"),
    ]
    # The rest of the path sees no Impersonate-* header, everything else as it was.
    assert [k for k in out.headers if k.lower().startswith("impersonate-")] == []
    assert out.headers["X-Other"] == "kept" and out.headers["Accept"] == "application/json"
    assert out[imp.IMPERSONATOR_KEY] is ADMIN


async def test_first_refusal_is_a_403_naming_the_impersonated_resource():
    req = _request(("Impersonate-User", "jane"), ("Impersonate-Group", "devs"))
    with pytest.raises(st.ApiError) as e:
        await imp.impersonate(
            req, UserInfo("alice", groups=(names.GROUP_AUTHENTICATED,)), Recorder(deny={("groups", "devs")})
        )
    assert e.value.code == 403
    assert e.value.message == (
        'groups "devs" is forbidden: User "alice" cannot impersonate resource "groups" '
        'in API group "" at the cluster scope'
    )
    # An anonymous requestor is asked about as system:anonymous.
    with pytest.raises(st.ApiError) as e:
        await imp.impersonate(_request(("Impersonate-User", "jane")), None, Recorder(deny={("users", "jane")}))
    assert e.value.message == (
        'users "jane" is forbidden: User "system:anonymous" cannot impersonate resource '
        '"users" in API group "" at the cluster scope'
    )


async def test_service_accounts():
    authz = Recorder()
    _, user = await imp.impersonate(_request(("Impersonate-User", "system:serviceaccount:ns1:robot")), ADMIN, authz)
    asked = authz.asked[0]
    assert (asked.resource, asked.namespace, asked.name) == ("serviceaccounts", "ns1", "robot")
    assert user.groups == (names.GROUP_SERVICEACCOUNTS, "system:serviceaccounts:ns1", names.GROUP_AUTHENTICATED)
    _, user = await imp.impersonate(
        _request(("Impersonate-User", "system:serviceaccount:ns1:robot"), ("Impersonate-Group", "g")), ADMIN, Recorder()
    )
    assert user.groups == ("g", names.GROUP_AUTHENTICATED)
    # Not a valid service-account name: an ordinary user of that name.
    for odd in ("system:serviceaccount:ns1:a:b", "system:serviceaccount:NS:robot", "system:serviceaccount::robot"):
        authz = Recorder()
        _, user = await imp.impersonate(_request(("Impersonate-User", odd)), ADMIN, authz)
        assert authz.asked[0].resource == "users" and user.name == odd


async def test_groups_completed_as_upstream():
    async def groups_of(*headers):
        return (await imp.impersonate(_request(*headers), ADMIN, Recorder()))[1].groups

    assert await groups_of(("Impersonate-User", "u"), ("Impersonate-Group", names.GROUP_UNAUTHENTICATED)) == (
        names.GROUP_UNAUTHENTICATED,
    )
    assert await groups_of(("Impersonate-User", "u"), ("Impersonate-Group", names.GROUP_AUTHENTICATED)) == (
        names.GROUP_AUTHENTICATED,
    )
    assert await groups_of(("Impersonate-User", names.USER_ANONYMOUS)) == (names.GROUP_UNAUTHENTICATED,)
    assert await groups_of(
        ("Impersonate-User", names.USER_ANONYMOUS), ("Impersonate-Group", names.GROUP_AUTHENTICATED)
    ) == (
        names.GROUP_AUTHENTICATED,
        names.GROUP_UNAUTHENTICATED,
    )


async def test_parts_without_a_user_are_a_400():
    with pytest.raises(st.ApiError) as e:
        await imp.impersonate(_request(("Impersonate-Group", "devs"), ("Impersonate-Uid", "u")), ADMIN, Recorder())
    assert e.value.code == 400
    assert e.value.message == (
        f"requested [{{Group  devs    }} {{UID  u  {names.AUTHENTICATION_GROUP}/v1  }}] without impersonating a user"
    )


def test_extra_keys():
    assert imp.extra_key("Acme.io%2FScopes") == "acme.io/scopes"
    assert imp.extra_key("Bad%zzKey%2f") == "bad%zzkey%2f"  # a malformed escape: the key as it is
