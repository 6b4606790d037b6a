"""Options this node accepts only at values it can honour.

An option the agent cannot act on is never accepted and ignored: each entry
below names the values the node does honour and why any other value is
refused. :func:`problems` turns the entries that a configuration trips into
start-up errors of the form ``--X=VALUE is not supported on this node: WHY``
(the config field's name for config-only fields). :mod:`agent.validation`
reports them beside its other checks, so an operator sees every problem in one
round.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from apiserver_min.api.duration import format_duration

from .options import BY_ATTR

__all__ = ["Refusal", "REFUSALS", "problems"]


@dataclasses.dataclass(frozen=True)
class Refusal:
    attr: str  # attribute on the effective configuration
    honoured: Callable[[Any], bool]  # the values this node acts on (or that mean "off")
    why: str


def _empty(value: Any) -> bool:
    return not value


def _false(value: Any) -> bool:
    return value is False


def _true(value: Any) -> bool:
    return value is True


def _equals(expected: Any) -> Callable[[Any], bool]:
    return lambda value: value == expected


REFUSALS: tuple[Refusal, ...] = (
    Refusal("contention_profiling", _false, "the agent has no lock-contention profiler (it is not a Go program)"),
    Refusal(
        "enable_profiling_handler",
        _false,
        "the agent serves no /debug/pprof profiling endpoints (it is not a Go program)",
    ),
    Refusal("cloud_provider", _empty, "there is no cloud controller manager for orch nodes to hand node setup to"),
    Refusal("cloud_config", _empty, "there is no cloud provider to read it"),
    Refusal(
        "azure_container_registry_config",
        _empty,
        "no cloud registry credential helper is built in",
    ),
    Refusal(
        "runtime_cgroups",
        _empty,
        "the agent does not move the container runtime's processes into a cgroup; "
        "configure that in the runtime's own service unit",
    ),
    Refusal(
        "system_cgroups",
        _empty,
        "the agent does not move the node's system processes into a cgroup",
    ),
    Refusal(
        "hairpin_mode",
        _equals("promiscuous-bridge"),
        "hairpin traffic is set by the CNI network configuration (the bridge plugin's hairpinMode), "
        "which the agent does not write",
    ),
    Refusal(
        "make_iptables_util_chains",
        _true,
        "the masquerade marking lives in the service proxy's nftables table and cannot be turned off alone "
        "(use --proxy-mode=none)",
    ),
    Refusal(
        "iptables_drop_bit",
        _equals(15),
        "no rule marks packets for dropping here: the service proxy's nftables rules reject directly",
    ),
    Refusal(
        "streaming_connection_idle_timeout",
        lambda value: value == BY_ATTR["streaming_connection_idle_timeout"].default,
        "exec, attach and port-forward streams are served by the container runtime's streaming server, "
        "whose own setting (containerd's stream_idle_timeout) closes idle ones",
    ),
    Refusal(
        "volume_plugin_dir",
        lambda value: value == BY_ATTR["volume_plugin_dir"].default,
        "third-party (flexVolume) volume plugins are not supported; the agent mounts its built-in volume types",
    ),
    Refusal(
        "experimental_mounter_path",
        _equals("mount"),
        "the agent mounts volumes with the mount system call, not through a mount binary",
    ),
)

_BY_ATTR = {r.attr: r for r in REFUSALS}
assert len(_BY_ATTR) == len(REFUSALS), "an option refused twice"


def _shown(value: Any) -> str:
    if hasattr(value, "total_seconds"):
        return format_duration(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def problems(cfg: Any) -> list[str]:
    """One message per option of ``cfg`` set to a value this node cannot honour."""
    out = []
    for refusal in REFUSALS:
        value = getattr(cfg, refusal.attr)
        if refusal.honoured(value):
            continue
        opt = BY_ATTR[refusal.attr]
        name = opt.dashed or opt.field
        out.append(f"{name}={_shown(value)} is not supported on this node: {refusal.why}")
    return out
