"""Per-webhook metrics with upstream's names: calls, rejections and latencies, and
the match conditions' evaluation errors and exclusions. The server renders them on
``/metrics`` (``render()`` gives the exposition lines)."""

from __future__ import annotations

import bisect
import collections

BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0)

# error_type values of the rejection counter, as upstream.
CALLING_WEBHOOK_ERROR = "calling_webhook_error"
NO_ERROR = "no_error"
APISERVER_INTERNAL_ERROR = "apiserver_internal_error"


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple) -> str:
    return ",".join(f'{n}="{_esc(str(v))}"' for n, v in zip(names, values))


class WebhookMetrics:
    DURATION_LABELS = ("name", "operation", "rejected", "type")
    REQUEST_LABELS = ("code", "name", "operation", "rejected", "type")
    REJECTION_LABELS = ("error_type", "name", "operation", "rejection_code", "type")
    CONDITION_LABELS = ("kind", "name", "operation", "type")

    def __init__(self) -> None:
        self.durations: dict[tuple, list] = {}
        self.requests: collections.Counter = collections.Counter()
        self.rejections: collections.Counter = collections.Counter()
        self.condition_errors: collections.Counter = collections.Counter()
        self.condition_exclusions: collections.Counter = collections.Counter()

    def observe(self, name: str, phase: str, operation: str, rejected: bool, code: int, seconds: float) -> None:
        """One call: PHASE is ``admit`` or ``validating``; CODE the HTTP status the
        webhook answered (0 when none)."""
        key = (name, operation, str(rejected).lower(), phase)
        h = self.durations.get(key)
        if h is None:
            h = self.durations[key] = [[0] * len(BUCKETS), 0, 0.0]
        i = bisect.bisect_left(BUCKETS, seconds)
        if i < len(BUCKETS):
            h[0][i] += 1
        h[1] += 1
        h[2] += seconds
        self.requests[(str(code), name, operation, str(rejected).lower(), phase)] += 1

    def rejected(self, name: str, phase: str, operation: str, error_type: str, code: int) -> None:
        self.rejections[(error_type, name, operation, str(code), phase)] += 1

    def condition_outcome(self, name: str, phase: str, operation: str, errors: int, excluded: bool) -> None:
        """One evaluation of a webhook's match conditions: how many conditions failed to
        evaluate, and whether the webhook was left out because of them."""
        key = ("webhook", name, operation, phase)
        if errors:
            self.condition_errors[key] += errors
        if excluded:
            self.condition_exclusions[key] += 1

    def render(self) -> list[str]:
        out = [
            "# HELP apiserver_admission_webhook_admission_duration_seconds Admission webhook latency histogram in "
            "seconds, identified by name and broken out for each operation and API resource and type "
            "(validate or admit).",
            "# TYPE apiserver_admission_webhook_admission_duration_seconds histogram",
        ]
        metric = "apiserver_admission_webhook_admission_duration_seconds"
        for key, (buckets, count, total) in sorted(self.durations.items()):
            lbl = _labels(self.DURATION_LABELS, key)
            acc = 0
            for b, n in zip(BUCKETS, buckets):
                acc += n
                out.append(f'{metric}_bucket{{{lbl},le="{b}"}} {acc}')
            out.append(f'{metric}_bucket{{{lbl},le="+Inf"}} {count}')
            out.append(f"{metric}_sum{{{lbl}}} {total}")
            out.append(f"{metric}_count{{{lbl}}} {count}")
        out += [
            "# HELP apiserver_admission_webhook_request_total Admission webhook request total, identified by name "
            "and broken out for each admission type (validating or mutating) and operation.",
            "# TYPE apiserver_admission_webhook_request_total counter",
        ]
        for key, n in sorted(self.requests.items()):
            out.append(f"apiserver_admission_webhook_request_total{{{_labels(self.REQUEST_LABELS, key)}}} {n}")
        out += [
            "# HELP apiserver_admission_webhook_rejection_count Admission webhook rejection count, identified by "
            "name and broken out for each admission type (validating or admit) and operation.",
            "# TYPE apiserver_admission_webhook_rejection_count counter",
        ]
        for key, n in sorted(self.rejections.items()):
            out.append(f"apiserver_admission_webhook_rejection_count{{{_labels(self.REJECTION_LABELS, key)}}} {n}")
        for metric, help_text, counts in (
            (
                "apiserver_admission_match_condition_evaluation_errors_total",
                "Match conditions that failed to evaluate, by webhook name, admission type and operation.",
                self.condition_errors,
            ),
            (
                "apiserver_admission_match_condition_exclusions_total",
                "Requests a webhook was left out of by its match conditions, by webhook name, admission type and "
                "operation.",
                self.condition_exclusions,
            ),
        ):
            out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
            for key, n in sorted(counts.items()):
                out.append(f"{metric}{{{_labels(self.CONDITION_LABELS, key)}}} {n}")
        return out
