"""controller.shipwright.conditions: the Succeeded condition read off any status."""

from __future__ import annotations

from controller.shipwright.conditions import succeeded_condition


def test_succeeded_condition() -> None:
    ready = {"type": "Ready", "status": "True"}
    succeeded = {"type": "Succeeded", "status": "Unknown", "reason": "Running"}
    assert succeeded_condition({"conditions": [ready, succeeded]}) == succeeded
    assert succeeded_condition({"conditions": [ready]}) is None
    assert succeeded_condition({}) is None
    assert succeeded_condition(None) is None
    # A copy: changing it leaves the status as it was.
    status = {"conditions": [dict(succeeded)]}
    found = succeeded_condition(status)
    assert found is not None
    found["reason"] = "Changed"
    assert status["conditions"][0]["reason"] == "Running"
