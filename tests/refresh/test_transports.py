"""Gateways over each transport, the era remembered per gateway, and credentials."""

from __future__ import annotations

import logging

import pytest

from gateways.models import Gateway
from gateways.services import gateway_create
from refresh.exceptions import GatewayUnreachable, ProbeCredentialRequired
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from tools.models import Tool

pytestmark = pytest.mark.django_db
APPLY = RefreshOptions(apply=True)


def refresh(gateway, **kw):
    return refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.API, options=APPLY, **kw
    )


def test_streamable_http_era_is_remembered(tenant, mcp_server_factory):
    server = mcp_server_factory(tools=12, page_size=5, era="legacy")
    gateway = gateway_create(tenant=tenant, name="L", prefix="legacy", url=server.url)
    run = refresh(gateway)
    gateway.refresh_from_db()
    assert run.status == "succeeded" and Tool.objects.count() == 12
    assert gateway.protocol_era == "legacy" and gateway.protocol_version.startswith(
        "20"
    )
    assert gateway.capabilities["tools"]["listChanged"] is True
    assert gateway.server_info["name"]
    assert refresh(gateway).report["summary"]["unchanged"] == 12


def test_sse_gateway(tenant, mcp_server_factory):
    server = mcp_server_factory(tools=7)
    gateway = gateway_create(
        tenant=tenant, name="S", prefix="sse", transport="sse", url=server.sse_url
    )
    assert refresh(gateway).report["summary"]["added"] == 7


def test_stdio_gateway(tenant, stdio_server_factory):
    server = stdio_server_factory(tools=9, page_size=4)
    gateway = gateway_create(
        tenant=tenant,
        name="Local",
        prefix="local",
        transport="stdio",
        command=server.command,
        args=server.args,
        env=server.env,
    )
    assert refresh(gateway).report["summary"]["added"] == 9
    server.mutate(change=0.0, add=0.0, remove=0.3)
    run = refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.API,
        options=RefreshOptions(apply=True, deactivate_missing=True),
    )
    assert run.report["summary"]["deactivated"] == 3
    assert run.report["source"].startswith(server.command)


def test_bearer_and_header_credentials_are_sent_and_never_logged(
    tenant, mcp_server_factory, caplog
):
    caplog.set_level(logging.DEBUG)
    secret = "tok-very-secret-123"
    server = mcp_server_factory(tools=3, require_bearer=secret)
    gateway = gateway_create(
        tenant=tenant,
        name="B",
        prefix="bearer",
        url=server.url,
        auth_type="bearer",
        auth_token=secret,
    )
    assert secret not in gateway.credentials_encrypted
    assert refresh(gateway).report["summary"]["added"] == 3
    wrong = gateway_create(
        tenant=tenant,
        name="W",
        prefix="wrong",
        url=server.url,
        auth_type="headers",
        auth_headers={"Authorization": "Bearer nope-wrong-value"},
    )
    with pytest.raises(GatewayUnreachable) as err:
        refresh(wrong)
    run = RefreshRun.objects.get(pk=err.value.run_id)
    assert run.error_code == "auth_failed" and "401" in run.reason
    text = caplog.text + repr(run.report) + run.reason
    assert secret not in text and "nope-wrong-value" not in text


def test_as_caller_uses_the_probe_credential_once(tenant, mcp_server_factory, caplog):
    caplog.set_level(logging.DEBUG)
    server = mcp_server_factory(tools=2, require_bearer="caller-cred-42")
    gateway = gateway_create(
        tenant=tenant, name="C", prefix="caller", url=server.url, auth_type="as_caller"
    )
    with pytest.raises(ProbeCredentialRequired):
        refresh(gateway)
    run = refresh(gateway, probe_credential="caller-cred-42")
    assert run.status == "succeeded"
    assert any(
        s["authorization"] == "Bearer caller-cred-42" for s in server.seen_auth()
    )
    gateway.refresh_from_db()
    assert gateway.credentials_encrypted == ""
    stored = repr(list(RefreshRun.objects.values()))
    assert "caller-cred-42" not in stored and "caller-cred-42" not in caplog.text
    scheduled = refresh_gateway(
        gateway=gateway, trigger=RefreshRun.Trigger.SCHEDULE, options=APPLY
    )
    assert (
        scheduled.status == "skipped"
        and scheduled.error_code == "probe_credential_required"
    )


def test_disabled_gateway_is_never_refreshed(tenant, mcp_server_factory):
    from refresh.exceptions import GatewayDisabled

    server = mcp_server_factory(tools=2)
    gateway = gateway_create(
        tenant=tenant, name="D", prefix="off", url=server.url, enabled=False
    )
    with pytest.raises(GatewayDisabled):
        refresh(gateway)
    scheduled = refresh_gateway(gateway=gateway, trigger=RefreshRun.Trigger.SCHEDULE)
    assert scheduled.status == "skipped" and "disabled" in scheduled.reason
    assert Tool.objects.count() == 0
    assert Gateway.objects.get(pk=gateway.pk).last_catalog_complete is None
