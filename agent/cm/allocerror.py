"""Why a resource manager could not allocate for a pod: the pod's rejection reason and message."""

from __future__ import annotations

__all__ = ["AllocationFailure"]


class AllocationFailure(RuntimeError):
    """A refusal the pod's status shows as ``reason``/``message`` (e.g. ``SMTAlignmentError``).

    Any other exception from a provider's ``allocate`` is reported as upstream reports
    an unexpected one (``UnexpectedAdmissionError``).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
