"""API priority and fairness (``flowcontrol.orch.io``) and the plain in-flight limits."""

from .controller import CURRENT, FlowControl, Queued, Ticket, is_long_running, response_starting
from .maxinflight import InflightLimits

__all__ = ["CURRENT", "FlowControl", "InflightLimits", "Queued", "Ticket", "is_long_running", "response_starting"]
