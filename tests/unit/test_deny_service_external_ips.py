"""DenyServiceExternalIPs: new or added external IPs are forbidden; keeping or removing them is not."""

from __future__ import annotations

import pytest

from apiserver_min.admission.chain import Attributes
from apiserver_min.admission.plugins import DEFAULT_PLUGINS, KNOWN_PLUGINS, resolve_plugins
from apiserver_min.admission.plugins.denyserviceexternalips import DenyServiceExternalIPs
from apiserver_min.api import status as st
from apiserver_min.api.kinds import REGISTRY
from apiserver_min.api.user import SYSTEM_USER

SVC = REGISTRY.by_resource("", "v1", "services")


def attrs(op: str, new: list | None, old: list | None = None, sub: str = "") -> Attributes:
    def obj(ips):
        return None if ips is None else {"metadata": {"name": "s"}, "spec": {"externalIPs": ips}}

    return Attributes(op, SVC, "default", "s", sub, obj(new), obj(old), SYSTEM_USER, False)


def test_known_and_off_by_default():
    assert "DenyServiceExternalIPs" in KNOWN_PLUGINS and "DenyServiceExternalIPs" not in DEFAULT_PLUGINS
    assert "DenyServiceExternalIPs" in resolve_plugins(["DenyServiceExternalIPs"], [])


async def test_refuses_new_external_ips():
    plugin = DenyServiceExternalIPs()
    for a in (attrs("CREATE", ["192.0.2.1"]), attrs("UPDATE", ["192.0.2.1", "192.0.2.2"], ["192.0.2.1"])):
        with pytest.raises(st.ApiError) as e:
            await plugin.validate(a)
        assert e.value.code == 403
        assert e.value.message == 'services "s" is forbidden: Use of external IPs is denied by admission control'


async def test_allows_none_kept_or_removed():
    plugin = DenyServiceExternalIPs()
    await plugin.validate(attrs("CREATE", []))
    await plugin.validate(attrs("UPDATE", ["192.0.2.1"], ["192.0.2.1", "192.0.2.2"]))
    await plugin.validate(attrs("UPDATE", ["192.0.2.9"], [], sub="status"))
