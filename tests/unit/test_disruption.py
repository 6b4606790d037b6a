"""Disruption budgets: the eviction's charge and the controller's arithmetic."""

from __future__ import annotations

import pytest

from apiserver_min.api import status as st
from apiserver_min.controllers.disruption import scaled_value
from apiserver_min.registry.eviction import budget_selector, charge
from apiserver_min.registry.policy import int_or_percent_errors


def _pdb(allowed, generation=1, observed=1, **status):
    return {
        "metadata": {"name": "b", "generation": generation},
        "status": {"observedGeneration": observed, "disruptionsAllowed": allowed, **status},
    }


def test_charge_lowers_allowed_and_records_the_pod():
    out = charge(_pdb(2, desiredHealthy=1, currentHealthy=3), "p", "2026-01-01T00:00:00Z")
    assert out["status"]["disruptionsAllowed"] == 1
    assert out["status"]["disruptedPods"] == {"p": "2026-01-01T00:00:00Z"}
    last = charge(_pdb(1), "p", "2026-01-01T00:00:00Z")
    cond = last["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("DisruptionAllowed", "False", "InsufficientPods")


def test_charge_refusals():
    with pytest.raises(st.ApiError) as exc:
        charge(_pdb(0, desiredHealthy=2, currentHealthy=2), "p", "t")
    assert exc.value.code == 429
    assert (
        exc.value.details["causes"][0]["message"] == "The disruption budget b needs 2 healthy pods and has 2 currently"
    )
    with pytest.raises(st.ApiError) as exc:
        charge(_pdb(3, generation=2, observed=1), "p", "t")
    assert exc.value.code == 429 and "still being processed" in exc.value.details["causes"][0]["message"]
    with pytest.raises(st.ApiError) as exc:
        charge(_pdb(-1), "p", "t")
    assert exc.value.code == 403


def test_selector_semantics_of_policy_v1():
    assert budget_selector({"spec": {"selector": {}}}).matches({"any": "thing"})
    assert not budget_selector({"spec": {}}).matches({"any": "thing"})
    assert budget_selector({"spec": {"selector": {"matchLabels": {"a": "b"}}}}).matches({"a": "b"})


def test_scaled_values_round_up():
    assert scaled_value(2, 10) == 2
    assert scaled_value("25%", 10) == 3
    assert scaled_value("25%", 10, round_up=False) == 2
    assert scaled_value("100%", 3) == 3


def test_int_or_percent():
    assert int_or_percent_errors(0, "f") == []
    assert int_or_percent_errors("50%", "f") == []
    assert int_or_percent_errors(-1, "f")[0].detail == "must be greater than or equal to 0"
    assert "numeric string followed by an ending '%'" in int_or_percent_errors("5", "f")[0].detail
    assert int_or_percent_errors("101%", "f")[0].detail == "must not be greater than 100%"
