"""Container probes (liveness, readiness, startup) and lifecycle hooks.

* :mod:`agent.prober.probes` - one probe run: exec, httpGet, tcpSocket, grpc.
* :mod:`agent.prober.manager` - workers per (pod, container, probe type) and the
  results the pod worker reads (:class:`ProbeManager`).
* :mod:`agent.prober.hooks` - postStart / preStop handlers.
"""

from agent.prober.hooks import run_handler
from agent.prober.manager import ContainerRef, ProbeFailure, ProbeManager
from agent.prober.probes import Result, run_probe

__all__ = ["Result", "ContainerRef", "ProbeFailure", "ProbeManager", "run_probe", "run_handler"]
