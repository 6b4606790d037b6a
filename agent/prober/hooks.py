"""Container lifecycle hooks (postStart, preStop): exec or httpGet, run once.

:func:`run_handler` answers None on success and otherwise upstream's message,
which the caller turns into an event and an action: a failed postStart makes
upstream kill the container (reason ``FailedPostStartHook``), a failed preStop
is only reported (``FailedPreStopHook``) and termination goes on.

Upstream (v1.27, ConsistentHTTPGetHandlers on) runs httpGet hooks like probes -
same URL, header and redirect rules, no certificate verification - but with the
``orch-lifecycle`` user agent, and judges only the transport: any HTTP response,
whatever its status, counts as success. An HTTPS hook that reaches a plain
HTTP server is retried once over HTTP without the Authorization header.
A tcpSocket handler is accepted by the API for compatibility but fails here,
as upstream's.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import multidict

from agent import logging as agent_logging
from agent.prober.probes import (
    HttpRequestError,
    build_headers,
    format_pod,
    http_error_message,
    http_get,
    http_target,
    is_ssl_to_plain_http,
    new_http_session,
    probe_user_agent,
)
from apiserver_min.api import names
from cri.client import CriClient, CriError, DeadlineExceededError

__all__ = ["run_handler", "LIFECYCLE_USER_AGENT_NAME"]

log = agent_logging.get_logger("prober")

# The user agent of lifecycle hook requests (upstream's, renamed by the naming rule).
LIFECYCLE_USER_AGENT_NAME = names.LIFECYCLE_USER_AGENT_NAME


def _go_list(items: list[str]) -> str:
    """A string slice as Go's %v prints it: ``[a b c]``."""
    return "[" + " ".join(items) + "]"


async def _run_exec(
    cri: CriClient, action: dict, pod: dict, container: dict, container_id: str, timeout: float
) -> str | None:
    command = [str(part) for part in action.get("command") or []]
    joined = " ".join(command)
    output = b""
    if not command:
        error = "exec handler has no command"
    else:
        try:
            # No runtime-side timeout (upstream passes 0); the call's deadline
            # bounds the wait.
            response = await cri.exec_sync(container_id, command, 0, timeout=timeout)
        except DeadlineExceededError:
            error = f"command {json.dumps(joined)} timed out"
        except CriError as exc:
            error = str(exc)
        else:
            if response.exit_code == 0:
                return None
            output = bytes(response.stdout) + bytes(response.stderr)
            error = (
                f"command '{joined}' exited with {response.exit_code}: "
                f"{bytes(response.stderr).decode('utf-8', errors='replace')}"
            )
    text = output.decode("utf-8", errors="replace")
    log.v(1).info(
        "Exec lifecycle hook for Container in Pod failed",
        execCommand=command,
        containerName=container.get("name"),
        pod=format_pod(pod),
        err=error,
        message=text,
    )
    return (
        f"Exec lifecycle hook ({_go_list(command)}) for Container "
        f"{json.dumps(container.get('name') or '')} in Pod {json.dumps(format_pod(pod))} "
        f"failed - error: {error}, message: {json.dumps(text, ensure_ascii=False)}"
    )


async def _run_http(
    session: aiohttp.ClientSession | None,
    action: dict,
    pod: dict,
    container: dict,
    pod_ip: str,
    timeout: float,
    user_agent: str,
) -> str | None:
    path = action.get("path") or ""
    prefix = (
        f"HTTP lifecycle hook ({path}) for Container "
        f"{json.dumps(container.get('name') or '')} in Pod {json.dumps(format_pod(pod))} "
        f"failed - error: "
    )
    try:
        url = http_target(action, container, pod_ip)
    except ValueError as exc:
        return prefix + str(exc)
    headers, skip = build_headers(action.get("httpHeaders"), user_agent)
    own = session is None
    if own:
        session = new_http_session()
    try:
        async with asyncio.timeout(timeout):
            try:
                await http_get(session, url, headers, skip)
                return None
            except (aiohttp.ClientError, OSError, HttpRequestError) as exc:
                if url.scheme != "https" or not is_ssl_to_plain_http(exc):
                    raise
                fallback = url.with_scheme("http")
                plain_headers = multidict.CIMultiDict(headers)
                plain_headers.popall("Authorization", None)
                try:
                    await http_get(session, fallback, plain_headers, skip)
                except (aiohttp.ClientError, OSError, HttpRequestError):
                    raise exc from None
                log.warning(
                    "HTTPS lifecycle hook got an HTTP response, retry with HTTP succeeded",
                    pod=format_pod(pod),
                    containerName=container.get("name"),
                    host=f"{url.host}:{url.port}",
                )
                return None
    except (aiohttp.ClientError, OSError, TimeoutError, HttpRequestError, ValueError) as exc:
        error = http_error_message(url, exc)
        log.v(1).info(
            "HTTP lifecycle hook for Container in Pod failed",
            path=path,
            containerName=container.get("name"),
            pod=format_pod(pod),
            err=error,
        )
        return prefix + error
    finally:
        if own:
            await session.close()


async def run_handler(
    cri: CriClient,
    handler: dict,
    pod: dict,
    container: dict,
    container_id: str,
    pod_ip: str,
    *,
    timeout: float,
    user_agent: str | None = None,
    session: aiohttp.ClientSession | None = None,
) -> str | None:
    """Run a LifecycleHandler (API JSON shape) in/against the container within
    `timeout` seconds. None on success, else the message for the event.

    user_agent defaults to ``orch-lifecycle/1.27``; session is an HTTP session
    to share (a private one is made and closed when omitted)."""
    if timeout <= 0:
        raise ValueError(f"lifecycle hook timeout must be positive, got {timeout}")
    if handler.get("exec") is not None:
        return await _run_exec(cri, handler["exec"], pod, container, container_id, timeout)
    if handler.get("httpGet") is not None:
        agent = user_agent or probe_user_agent(name=LIFECYCLE_USER_AGENT_NAME)
        return await _run_http(session, handler["httpGet"], pod, container, pod_ip, timeout, agent)
    error = f"invalid handler: {json.dumps(handler, sort_keys=True)}"
    log.error("Cannot run handler", err=error, pod=format_pod(pod), containerName=container.get("name"))
    return f"Cannot run handler: {error}"
