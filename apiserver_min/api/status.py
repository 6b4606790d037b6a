"""API errors and the ``Status`` object that carries them to clients.

Clients (kubectl above all) print an error cleanly only from a body of
``kind: Status``, ``apiVersion: v1`` with ``status``, ``message``, ``reason`` and
``code``; for 422 they also read ``details.causes``. Every error the server
answers is an :class:`ApiError` turned into that shape in one place.
"""

from __future__ import annotations

from typing import Any, Iterable


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict | None = None,
        retry_after: int | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.headers = dict(headers or {})
        if retry_after is not None:
            self.headers.setdefault("Retry-After", str(retry_after))

    def to_status(self) -> dict[str, Any]:
        return status_object(self.code, self.reason, self.message, self.details, failure=True)

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def status_object(
    code: int, reason: str, message: str, details: dict | None = None, *, failure: bool
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if failure else "Success",
    }
    if message:
        obj["message"] = message
    if reason:
        obj["reason"] = reason
    if details:
        obj["details"] = details
    obj["code"] = code
    return obj


def success_status(details: dict | None = None) -> dict[str, Any]:
    obj = status_object(200, "", "", details, failure=False)
    return obj


def _details(
    name: str | None,
    group: str,
    kind: str,
    causes: list[dict] | None = None,
    uid: str | None = None,
    retry_after: int | None = None,
) -> dict:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    if kind:
        d["kind"] = kind
    if uid:
        d["uid"] = uid
    if causes:
        d["causes"] = causes
    if retry_after is not None:
        d["retryAfterSeconds"] = retry_after
    return d


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


# --- constructors, one per reason, with upstream's wording -------------------------------


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(resource, group)} "{name}" not found', details=_details(name, group, resource)
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        details=_details(name, group, resource),
    )


def conflict(resource: str, name: str, group: str = "", detail: str | None = None) -> ApiError:
    detail = detail or ("the object has been modified; please apply your changes to the latest version and try again")
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {detail}',
        details=_details(name, group, resource),
    )


def invalid(kind: str, name: str, causes: Iterable[dict], group: str = "") -> ApiError:
    """422 Invalid. ``causes`` are dicts with ``reason``, ``message``, ``field``."""
    causes = list(causes)
    summary = ", ".join(_cause_text(c) for c in causes) if causes else "invalid object"
    if len(causes) > 1:
        summary = "[" + summary + "]"
    return ApiError(
        422,
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {summary}' if group else f'{kind} "{name}" is invalid: {summary}',
        details=_details(name, group, kind, causes),
    )


def _cause_text(c: dict) -> str:
    field = c.get("field")
    return f"{field}: {c.get('message', '')}" if field else c.get("message", "")


def bad_request(message: str, causes: list[dict] | None = None) -> ApiError:
    return ApiError(400, "BadRequest", message, details={"causes": causes} if causes else None)


def unauthorized(message: str = "Unauthorized") -> ApiError:
    return ApiError(401, "Unauthorized", message)


def forbidden(resource: str, name: str, group: str, message: str) -> ApiError:
    what = f'{_qualified(resource, group)} "{name}"' if name else _qualified(resource, group)
    return ApiError(403, "Forbidden", f"{what} is forbidden: {message}", details=_details(name, group, resource))


def forbidden_plain(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def request_entity_too_large(message: str) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", message)


def too_large_resource_version(requested: int, current: int, retry_after: int = 1) -> ApiError:
    msg = f"Too large resource version: {requested}, current: {current}"
    return ApiError(
        504,
        "Timeout",
        msg,
        retry_after=retry_after,
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": retry_after,
        },
    )


def too_many_requests(message: str, retry_after: int = 1) -> ApiError:
    return ApiError(
        429, "TooManyRequests", message, retry_after=retry_after, details={"retryAfterSeconds": retry_after}
    )


def internal(message: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", details={"causes": [{"message": message}]}
    )


def service_unavailable(message: str, retry_after: int | None = None) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message, retry_after=retry_after)


def timeout(message: str) -> ApiError:
    return ApiError(504, "Timeout", message)
