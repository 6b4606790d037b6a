"""What a device plugin's registration must satisfy, as upstream checks it."""

from __future__ import annotations

from apiserver_min.api import names
from apiserver_min.api.validation import is_qualified_name

__all__ = ["SUPPORTED_VERSIONS", "is_extended_resource_name", "registration_error"]

SUPPORTED_VERSIONS = ("v1beta1",)
_REQUESTS_PREFIX = "requests."


def is_extended_resource_name(name: str) -> bool:
    """Upstream's IsExtendedResourceName: ``domain/name`` outside the project's own domain,
    not a quota key, and a qualified name once prefixed with ``requests.``."""
    if "/" not in name or f"{names.DOMAIN}/" in name:
        return False  # a native resource
    if name.startswith(_REQUESTS_PREFIX):
        return False
    return not is_qualified_name(_REQUESTS_PREFIX + name)


def _go_quote_list(values: tuple[str, ...]) -> str:
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


def registration_error(version: str, resource_name: str, endpoint: str) -> str:
    """The reason a registration is refused, or "" when it is acceptable."""
    if version not in SUPPORTED_VERSIONS:
        return (
            f'requested API version "{version}" is not supported by {names.AGENT_NAME}. '
            f"Supported versions are {_go_quote_list(SUPPORTED_VERSIONS)}"
        )
    if not is_extended_resource_name(resource_name):
        return f'the ResourceName "{resource_name}" is invalid'
    if not endpoint or "/" in endpoint or endpoint in (".", ".."):
        return (
            f'the endpoint "{endpoint}" is invalid: it must be the file name of the plugin\'s socket '
            f"in the device plugin directory"
        )
    if endpoint in (names.DEVICE_PLUGIN_AGENT_SOCKET, names.DEVICE_PLUGIN_CHECKPOINT):
        return f'the endpoint "{endpoint}" is invalid: the name belongs to {names.AGENT_NAME}'
    return ""
