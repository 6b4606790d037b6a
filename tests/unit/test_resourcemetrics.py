"""The resource metrics API's parsing of the agents' /metrics/resource and its rates."""

from __future__ import annotations

import pytest

from apiserver_min.server.resourcemetrics import (
    UsageStore,
    cpu_quantity,
    memory_quantity,
    parse_resource_metrics,
)


def scrape_text(node_cpu: float, ctr_cpu: float, at_ms: int, start: float = 1700000000.0) -> str:
    return f"""# HELP node_cpu_usage_seconds_total Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total {node_cpu} {at_ms}
node_memory_working_set_bytes 1073741824 {at_ms}
container_cpu_usage_seconds_total{{container="c",namespace="ns",pod="p"}} {ctr_cpu} {at_ms}
container_memory_working_set_bytes{{container="c",namespace="ns",pod="p"}} 2097152 {at_ms}
container_start_time_seconds{{container="c",namespace="ns",pod="p"}} {start}
scrape_error 0
"""


def test_parse_families_labels_and_timestamps():
    s = parse_resource_metrics(scrape_text(10.0, 1.5, 1_000_000), now=5.0)
    assert s.node_cpu.value == 10.0 and s.node_cpu.at == 1000.0
    assert s.node_memory.value == 1073741824
    c = s.containers[("ns", "p", "c")]
    assert c.cpu.value == 1.5 and c.memory.value == 2097152 and c.start == 1700000000.0
    escaped = parse_resource_metrics(
        'container_memory_working_set_bytes{container="a\\"b",namespace="n",pod="p"} 5', 7.0
    )
    assert escaped.containers[("n", "p", 'a"b')].memory.at == 7.0
    with pytest.raises(ValueError):
        parse_resource_metrics("node_cpu_usage_seconds_total{oops 1", 0.0)


def test_rates_need_two_scrapes_and_restart_starts_over():
    store = UsageStore()
    store.record("n1", parse_resource_metrics(scrape_text(10.0, 1.0, 1_000_000), 0))
    assert store.node("n1") is None and list(store.pods()) == []
    store.record("n1", parse_resource_metrics(scrape_text(12.0, 1.5, 1_002_000), 0))
    usage = store.node("n1")
    assert usage.cpu_nanocores == 1_000_000_000 and usage.window == 2.0 and usage.memory_bytes == 1 << 30
    [(ns, pod, containers)] = list(store.pods())
    assert (ns, pod) == ("ns", "p") and containers["c"].cpu_nanocores == 250_000_000
    # The container restarted: no rate until it has two samples again.
    store.record("n1", parse_resource_metrics(scrape_text(14.0, 0.1, 1_004_000, start=1700000100.0), 0))
    assert list(store.pods()) == []
    store.forget([])
    assert store.node("n1") is None


def test_quantities():
    assert cpu_quantity(1234) == "1234n"
    assert memory_quantity(2 << 20) == "2Mi"
    assert memory_quantity(1536) == "1536"
    assert memory_quantity(3 << 10) == "3Ki"
