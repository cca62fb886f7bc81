"""End-to-end smoke of the engine against the fake probe."""

from __future__ import annotations

import pytest

from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tools.models import Tool, ToolRevision


def tool(name: str, description: str = "d", read_only: bool | None = None) -> dict:
    entry = {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object"},
    }
    if read_only is not None:
        entry["annotations"] = {"readOnlyHint": read_only}
    return entry


@pytest.mark.django_db
def test_dry_run_then_apply(gateway, fake_probe):
    fake_probe.set_tools([tool("a"), tool("b", read_only=True)])
    run = refresh_gateway(gateway=gateway, trigger=RefreshRun.Trigger.API)
    assert run.status == "succeeded" and not run.applied
    assert run.report["summary"]["added"] == 2
    assert Tool.objects.count() == 0
    run = refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.API,
        options=RefreshOptions(apply=True),
    )
    assert run.applied
    b = Tool.objects.get(name="b")
    assert (b.effect, b.gated, b.review_state) == ("write", True, "pending")
    assert ToolRevision.objects.filter(tool=b).count() == 1
