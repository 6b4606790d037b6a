"""The node facts that building sandbox and container configs depends on.

One frozen :class:`NodeContext` is made from the agent's configuration at start
(:meth:`NodeContext.from_config`) and handed to the config builders, so that they
stay pure functions of (pod, context) and can be tested without an agent.
"""

from __future__ import annotations

import dataclasses
import os
import socket

from apiserver_min.api import names

__all__ = ["NodeContext", "DEFAULT_RUNTIME_ENDPOINT"]

DEFAULT_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"


@dataclasses.dataclass(frozen=True)
class NodeContext:
    node_name: str
    root_dir: str = names.AGENT_ROOT_DIR  # pods' volumes live under <root>/pods/<uid>/
    pod_logs_dir: str = "/var/log/pods"  # /var/log/pods/<ns>_<name>_<uid>/<container>/<n>.log
    cluster_dns: tuple[str, ...] = ()
    cluster_domain: str = ""
    resolv_conf: str = "/etc/resolv.conf"
    allowed_unsafe_sysctls: tuple[str, ...] = ()
    host_ip: str = ""  # status.hostIP and the downward API
    pod_infra_image: str = names.AGENT_PAUSE_IMAGE  # kept from image GC; the runtime picks the sandbox image
    seccomp_default: bool = False  # RuntimeDefault when the pod says nothing
    cpu_cfs_quota: bool = True
    cpu_cfs_quota_period_us: int = 100_000
    node_allocatable_cpu_millis: int = 0  # resourceFieldRef limits default to allocatable
    node_allocatable_memory: int = 0

    def pod_dir(self, pod_uid: str) -> str:
        return os.path.join(self.root_dir, "pods", pod_uid)

    def pod_log_dir(self, namespace: str, name: str, pod_uid: str) -> str:
        return os.path.join(self.pod_logs_dir, f"{namespace}_{name}_{pod_uid}")

    @classmethod
    def from_config(
        cls,
        cfg,
        *,
        node_name: str | None = None,
        host_ip: str = "",
        allocatable_cpu_millis: int = 0,
        allocatable_memory: int = 0,
    ) -> "NodeContext":
        return cls(
            node_name=node_name or node_name_from(cfg),
            root_dir=cfg.root_dir,
            cluster_dns=tuple(cfg.cluster_dns),
            cluster_domain=cfg.cluster_domain,
            resolv_conf=cfg.resolv_conf,
            allowed_unsafe_sysctls=tuple(cfg.allowed_unsafe_sysctls),
            host_ip=host_ip,
            pod_infra_image=cfg.pod_infra_container_image,
            seccomp_default=bool(cfg.seccomp_default),
            cpu_cfs_quota=bool(cfg.cpu_cfs_quota),
            cpu_cfs_quota_period_us=int(cfg.cpu_cfs_quota_period.total_seconds() * 1_000_000),
            node_allocatable_cpu_millis=allocatable_cpu_millis,
            node_allocatable_memory=allocatable_memory,
        )


def node_name_from(cfg) -> str:
    """``--hostname-override`` or the lower-cased host name, as upstream."""
    return (cfg.hostname_override or socket.gethostname()).strip().lower()
