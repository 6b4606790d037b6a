"""A pod's status from its runtime state, as upstream generates it.

:func:`generate_pod_status` is pure: the pod spec, its :class:`RuntimePod`, the
waiting reasons of the last sync, readiness/startup answers from the prober and
the previous status (to keep transition times and start time) in; the
``status`` dict out: phase, conditions (PodScheduled, Initialized,
ContainersReady, Ready), container statuses with state, lastState,
restartCount, ready, started, image, imageID and containerID, pod IPs, host
IP, QoS class and start time. Ephemeral containers get statuses of their own
(never ready, no ``started``) and count for neither the phase nor readiness.
"""

from __future__ import annotations

import datetime as _dt
from typing import Callable, Mapping

from apiserver_min.api import names
from apiserver_min.api.timeutil import format_rfc3339
from apiserver_min.api.timeutil import now as _utcnow

from .. import pods as podutil
from ..cm import pod_qos_class
from ..runtime.manager import ContainerInfo, RuntimePod

__all__ = ["generate_pod_status", "container_id", "rejected_status", "pod_phase", "ephemeral_ran"]

RUNTIME_SCHEME = "containerd"


def container_id(cid: str) -> str:
    return f"{RUNTIME_SCHEME}://{cid}"


def _ts(ns: int) -> str | None:
    if not ns:
        return None
    return format_rfc3339(_dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc))


def _terminated(info: ContainerInfo) -> dict:
    reason = info.reason
    if not reason or reason == "Exited":
        reason = "Completed" if info.exit_code == 0 else "Error"
    out = {"exitCode": info.exit_code, "reason": reason, "containerID": container_id(info.id)}
    message = info.message or info.termination_message()
    if message:
        out["message"] = message
    started, finished = _ts(info.started_at), _ts(info.finished_at)
    if started:
        out["startedAt"] = started
    if finished:
        out["finishedAt"] = finished
    return out


def _container_status(
    spec: dict,
    rp: RuntimePod,
    waiting: Mapping[str, tuple[str, str]],
    ready: Callable[[str], bool],
    started: Callable[[str], bool],
    default_waiting: str,
) -> dict:
    name = spec.get("name", "")
    out: dict = {
        "name": name,
        "image": spec.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {},
        "lastState": {},
    }
    latest = rp.latest(name)
    wait = waiting.get(name)
    if latest is None:
        reason, message = wait if wait else (default_waiting, "")
        out["state"] = {"waiting": _waiting(reason, message)}
        return out
    out["containerID"] = container_id(latest.id)
    out["imageID"] = latest.image_ref
    out["restartCount"] = latest.restart_count
    if latest.running:
        out["state"] = {"running": {"startedAt": _ts(latest.started_at) or _ts(latest.created_at)}}
        out["ready"] = ready(name)
        out["started"] = started(name)
        previous = rp.previous(name)
        if previous is not None and previous.exited:
            out["lastState"] = {"terminated": _terminated(previous)}
    elif latest.exited:
        if wait:
            out["state"] = {"waiting": _waiting(*wait)}
            out["lastState"] = {"terminated": _terminated(latest)}
        else:
            out["state"] = {"terminated": _terminated(latest)}
            previous = rp.previous(name)
            if previous is not None and previous.exited:
                out["lastState"] = {"terminated": _terminated(previous)}
    else:
        reason, message = wait if wait else ("ContainerCreating", "")
        out["state"] = {"waiting": _waiting(reason, message)}
    return out


def _ephemeral_status(spec: dict, rp: RuntimePod, waiting: Mapping[str, tuple[str, str]]) -> dict:
    out = _container_status(spec, rp, waiting, lambda name: False, lambda name: False, "ContainerCreating")
    del out["started"]  # upstream's prober never sets it for them
    return out


def ephemeral_ran(status: Mapping | None) -> set[str]:
    """The ephemeral containers a reported status shows as having had a container: they
    never start again, even once the runtime has removed what is left of them."""
    out = set()
    for s in (status or {}).get("ephemeralContainerStatuses") or []:
        if isinstance(s, dict) and s.get("containerID"):
            out.add(str(s.get("name", "")))
    return out


def _waiting(reason: str, message: str) -> dict:
    out = {"reason": reason}
    if message:
        out["message"] = message
    return out


def pod_phase(pod: dict, init_statuses: list[dict], statuses: list[dict]) -> str:
    """Upstream's getPhase over the generated container statuses."""
    policy = podutil.restart_policy(pod)
    pending_init = 0
    for s in init_statuses:
        state = s["state"]
        if "terminated" in state:
            if state["terminated"]["exitCode"] != 0:
                if policy == "Never":
                    return "Failed"
                pending_init += 1
        elif "running" in state:
            pending_init += 1
        elif "waiting" in state:
            last = s.get("lastState", {}).get("terminated")
            if last and last["exitCode"] != 0 and policy == "Never":
                return "Failed"
            pending_init += 1
    if pending_init:
        return "Pending"
    running = waiting = stopped = succeeded = 0
    for s in statuses:
        state = s["state"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            if state["terminated"]["exitCode"] == 0:
                succeeded += 1
        elif "waiting" in state:
            if s.get("lastState", {}).get("terminated"):
                stopped += 1
            else:
                waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _condition(type_: str, ok: bool, old: Mapping[str, dict], now: str, reason: str = "", message: str = "") -> dict:
    status = "True" if ok else "False"
    prev = old.get(type_)
    transition = prev.get("lastTransitionTime") if prev and prev.get("status") == status else None
    out = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": transition or now}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def generate_pod_status(
    pod: dict,
    rp: RuntimePod,
    *,
    waiting: Mapping[str, tuple[str, str]] = {},
    ready: Callable[[str], bool] = lambda name: True,
    started: Callable[[str], bool] = lambda name: True,
    old: dict | None = None,
    host_ip: str = "",
    now: str | None = None,
    pod_error: tuple[str, str] | None = None,
) -> dict:
    api = pod.get("status") or {}
    # What the agent reported last, or (after an agent restart) what the API server holds.
    old = old or api
    now = now or format_rfc3339(_utcnow())
    inits = podutil.init_containers(pod)
    init_statuses = [_container_status(c, rp, waiting, ready, started, "PodInitializing") for c in inits]
    init_done = all("terminated" in s["state"] and s["state"]["terminated"]["exitCode"] == 0 for s in init_statuses)
    app_default = "ContainerCreating" if init_done else "PodInitializing"
    statuses = [_container_status(c, rp, waiting, ready, started, app_default) for c in podutil.containers(pod)]
    phase = _merge_phase(pod_phase(pod, init_statuses, statuses), old, api)
    # Init containers never count as ready once completed; upstream reports ready=true then.
    for s in init_statuses:
        if "terminated" in s["state"] and s["state"]["terminated"]["exitCode"] == 0:
            s["ready"] = True

    old_conditions = {c.get("type"): c for c in old.get("conditions") or [] if isinstance(c, dict)}
    unready = [s["name"] for s in statuses if not s["ready"]]
    incomplete = [
        s["name"]
        for s in init_statuses
        if not ("terminated" in s["state"] and s["state"]["terminated"]["exitCode"] == 0)
    ]
    conditions = []
    if init_done:
        conditions.append(_condition("Initialized", True, old_conditions, now))
    else:
        conditions.append(
            _condition(
                "Initialized",
                False,
                old_conditions,
                now,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(incomplete)}]",
            )
        )
    if phase == "Succeeded" or phase == "Failed":
        containers_ready = False
        reason, message = "PodCompleted", ""
    elif unready:
        containers_ready = False
        reason, message = "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]"
    else:
        containers_ready = True
        reason, message = "", ""
    conditions.append(_condition("Ready", containers_ready, old_conditions, now, reason, message))
    conditions.append(_condition("ContainersReady", containers_ready, old_conditions, now, reason, message))
    conditions.append(_condition("PodScheduled", True, old_conditions, now))
    # Set once when the node stopped the pod (eviction, shutdown); never generated again.
    disruption = old_conditions.get(names.POD_CONDITION_DISRUPTION_TARGET)
    if disruption is not None:
        conditions.append(dict(disruption))

    status: dict = {"phase": phase, "conditions": conditions, "qosClass": pod_qos_class(pod)}
    if host_ip:
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
    sandbox = rp.sandboxes[0] if rp.sandboxes else None
    if sandbox is not None and sandbox.ip:
        status["podIP"] = sandbox.ip
        status["podIPs"] = [{"ip": ip} for ip in (sandbox.ips or (sandbox.ip,))]
    elif old.get("podIP") and phase in ("Succeeded", "Failed"):
        status["podIP"] = old["podIP"]
        status["podIPs"] = old.get("podIPs") or [{"ip": old["podIP"]}]
    if podutil.spec(pod).get("hostNetwork") and host_ip and "podIP" not in status:
        status["podIP"] = host_ip
        status["podIPs"] = [{"ip": host_ip}]
    status["startTime"] = old.get("startTime") or now
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    status["containerStatuses"] = statuses
    ephemeral = podutil.ephemeral_containers(pod)
    if ephemeral:
        status["ephemeralContainerStatuses"] = [_ephemeral_status(c, rp, waiting) for c in ephemeral]
    if pod_error and phase == "Pending":
        status["reason"], status["message"] = pod_error
    if phase in _TERMINAL and phase == old.get("phase"):
        # The reason and message that came with the terminal phase (Evicted, Terminated, ...) stay.
        for key in ("reason", "message"):
            value = old.get(key) or api.get(key)
            if value:
                status[key] = value
    return status


_TERMINAL = ("Succeeded", "Failed")


def _merge_phase(phase: str, old: Mapping, api: Mapping) -> str:
    """Upstream's three-way merge: a terminal phase, the agent's own or the API's, is never
    left again (the containers' state alone would make a restarted ``Always`` pod Running)."""
    if phase not in _TERMINAL:
        if old.get("phase") in _TERMINAL:
            phase = old["phase"]
        elif api.get("phase") in _TERMINAL:
            phase = api["phase"]
    if api.get("phase") in _TERMINAL and phase != api["phase"]:
        phase = api["phase"]
    return phase


def rejected_status(pod: dict, reason: str, message: str, *, now: str | None = None) -> dict:
    """A pod refused by the node's admission: Failed with the admitter's reason, and its
    message after upstream's "Pod was rejected: " prefix."""
    return {
        "phase": "Failed",
        "reason": reason,
        "message": names.POD_REJECTED_MESSAGE_PREFIX + message,
        "qosClass": pod_qos_class(pod),
        "startTime": now or format_rfc3339(_utcnow()),
    }
