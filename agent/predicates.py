"""The node's own check that a pod bound to it fits the node beyond its resources.

A pod reaches the node through the scheduler, or bound by hand (``spec.nodeName``),
or from a manifest. Upstream's node agent checks every new pod against the same
general predicates the scheduler applies, and so does this one (the resources are
the container manager's part of the admission):

* the pod's ``orch.io/os`` label and ``spec.os.name`` name this node's OS (linux);
* ``spec.nodeSelector`` and the required node affinity match the node's labels;
* ``spec.nodeName`` is this node;
* its host ports are free among the node's other active pods;
* it tolerates the node's ``NoExecute`` taints (not checked for static pods, whose
  files the node runs whatever its taints).

A refusal carries upstream's reason (``PodOSSelectorNodeLabelDoesNotMatch``,
``PodOSNotSupported``, ``NodeAffinity``, ``NodeName``, ``NodePorts``,
``TaintToleration``) and message; the pod ends Failed with it.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from apiserver_min.api import names
from apiserver_min.api.helpers import taints_of, tolerations_of
from apiserver_min.api.nodefit import first_untolerated_taint, host_ports, node_matches_pod, ports_conflict

from . import pods as podutil

__all__ = ["NODE_OS", "admit"]

NODE_OS = "linux"

REASON_OS_LABEL = "PodOSSelectorNodeLabelDoesNotMatch"
MESSAGE_OS_LABEL = f"Failed to admit pod as the `{names.LABEL_OS}` label doesn't match node label"
REASON_OS_FIELD = "PodOSNotSupported"
MESSAGE_OS_FIELD = "Failed to admit pod as the OS field doesn't match node OS"
# Upstream's predicate (scheduler plugin) names; the message is "Predicate <name> failed".
PREDICATE_NODE_AFFINITY = "NodeAffinity"
PREDICATE_NODE_NAME = "NodeName"
PREDICATE_NODE_PORTS = "NodePorts"
PREDICATE_TAINT_TOLERATION = "TaintToleration"


def _failed(predicate: str) -> tuple[str, str]:
    return predicate, f"Predicate {predicate} failed"


def admit(pod: dict, node: Mapping, others: Iterable[Mapping]) -> tuple[str, str]:
    """("", "") when ``pod`` fits ``node`` next to the ``others`` (the node's active pods,
    the pod itself not among them); else upstream's (reason, message)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    pod_os_label = ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_OS)
    if pod_os_label is not None and pod_os_label != (labels.get(names.LABEL_OS) or NODE_OS):
        return REASON_OS_LABEL, MESSAGE_OS_LABEL
    os_name = (podutil.spec(pod).get("os") or {}).get("name")
    if os_name and os_name != NODE_OS:
        return REASON_OS_FIELD, MESSAGE_OS_FIELD
    if not node_matches_pod(pod, node):
        return _failed(PREDICATE_NODE_AFFINITY)
    bound = podutil.spec(pod).get("nodeName")
    if bound and bound != (node.get("metadata") or {}).get("name"):
        return _failed(PREDICATE_NODE_NAME)
    wanted = host_ports(pod)
    if wanted and ports_conflict(wanted, [port for other in others for port in host_ports(other)]):
        return _failed(PREDICATE_NODE_PORTS)
    if not podutil.is_static(pod) and first_untolerated_taint(taints_of(node), tolerations_of(pod), ("NoExecute",)):
        return _failed(PREDICATE_TAINT_TOLERATION)
    return "", ""
