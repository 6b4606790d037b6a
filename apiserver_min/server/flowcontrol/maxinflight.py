"""The plain in-flight limits, used when API priority and fairness is off
(``--enable-priority-and-fairness=false``), as upstream: read-only requests count
against ``--max-requests-inflight``, the others against
``--max-mutating-requests-inflight``; a request beyond its limit is answered 429 at
once. Long-running requests and ``system:masters`` are not counted; 0 means no limit."""

from __future__ import annotations

from ...api import names
from ...api import status as st
from ...api.user import UserInfo

READ_ONLY_VERBS = frozenset({"get", "list", "watch"})
RETRY_AFTER_SECONDS = 1
TOO_MANY_MESSAGE = "Too many requests, please try again later."


class InflightLimits:
    def __init__(self, read_only: int, mutating: int):
        self.limits = {"readOnly": read_only, "mutating": mutating}
        self.current = {"readOnly": 0, "mutating": 0}
        self.rejected = {"readOnly": 0, "mutating": 0}

    def enter(self, user: UserInfo | None, verb: str) -> str | None:
        """The request kind it was counted under (give it to :meth:`leave`), None when
        not counted; raises a 429 ApiError beyond the limit."""
        if user is not None and names.GROUP_MASTERS in user.groups:
            return None
        kind = "readOnly" if verb in READ_ONLY_VERBS else "mutating"
        limit = self.limits[kind]
        if limit <= 0:
            return None
        n = self.current[kind]
        if n >= limit:
            self.rejected[kind] += 1
            raise st.too_many_requests(TOO_MANY_MESSAGE, RETRY_AFTER_SECONDS)
        self.current[kind] = n + 1
        return kind

    def leave(self, kind: str) -> None:
        self.current[kind] -= 1

    def render_metrics(self) -> list[str]:
        out = [
            "# HELP apiserver_current_inflight_requests Maximal number of currently used inflight request limit "
            "of this apiserver per request kind in last second.",
            "# TYPE apiserver_current_inflight_requests gauge",
        ]
        for kind in ("mutating", "readOnly"):
            out.append(f'apiserver_current_inflight_requests{{request_kind="{kind}"}} {self.current[kind]}')
        return out
