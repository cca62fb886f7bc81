"""Both refresh endpoints against real MCP test servers: the report, the run, every
422 rule and named error code of SPEC 6 in the envelope."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from gateways.models import Gateway
from gateways.services import gateway_create
from refresh.models import RefreshRun
from refresh.serializers import ToolRefreshReportSerializer
from tests import factories
from tests.api.conftest import World, bearer_client, error_of, field_errors
from tools.models import Tool

pytestmark = pytest.mark.django_db

REPORT_KEYS = {
    "prefix",
    "source",
    "applied",
    "complete",
    "items",
    "skipped",
    "summary",
    "note",
    "run_id",
    "gateway_id",
    "trigger",
    "duration_ms",
}
SUMMARY_KEYS = {
    "added",
    "updated",
    "unchanged",
    "returning",
    "disappeared",
    "skipped",
    "deactivated",
    "reactivated",
}
ITEM_KEYS = {
    "name",
    "change",
    "changed_fields",
    "before",
    "after",
    "effect_hint",
    "effect",
    "action",
    "referenced_by",
}


def by_id(gateway: Gateway) -> str:
    return f"/api/gateways/{gateway.pk}/tools/refresh"


BY_PREFIX = "/api/tools/refresh"


def assert_report(report: dict[str, Any], gateway: Gateway) -> None:
    assert REPORT_KEYS <= set(report), set(report)
    assert SUMMARY_KEYS <= set(report["summary"])
    for item in report["items"]:
        assert ITEM_KEYS <= set(item)
    assert report["gateway_id"] == gateway.pk and report["prefix"] == gateway.prefix
    assert report["source"] == gateway.source and report["trigger"] == "api"
    # The documented response shape describes what is really sent.
    shaped = ToolRefreshReportSerializer(data=report)
    assert shaped.is_valid(), shaped.errors


@pytest.fixture
def served(mcp_server_factory, world: World) -> tuple[Any, Gateway]:
    """A real Streamable HTTP server with 5 tools in pages of 2, registered in acme."""
    server = mcp_server_factory(tools=5, page_size=2)
    gateway = gateway_create(
        tenant=world.tenant, name="Server", prefix="srv", url=server.url
    )
    return server, gateway


def test_dry_run_answers_counts_and_writes_nothing(served, world):
    server, gateway = served
    response = world.client("member").post(by_id(gateway), {}, format="json")
    assert response.status_code == 200, response.content
    report = response.json()
    assert_report(report, gateway)
    assert report["applied"] is False and report["complete"] is True
    assert report["summary"]["added"] == 5
    assert {i["change"] for i in report["items"]} == {"added"}
    assert "Dry run" in report["note"]
    assert not Tool.objects.filter(gateway=gateway).exists()
    run = RefreshRun.objects.get(pk=report["run_id"])
    assert (run.trigger, run.status, run.applied) == ("api", "succeeded", False)
    assert run.requested_by == world.users["member"]


def test_apply_then_both_endpoints_answer_the_same_report(served, world):
    server, gateway = served
    client = world.client("member")
    applied = client.post(by_id(gateway), {"apply": True}, format="json").json()
    assert applied["applied"] is True and applied["summary"]["added"] == 5
    assert Tool.objects.filter(gateway=gateway, gated=True, effect="write").count() == 5

    server.mutate(change=0.4, seed=3)
    one = client.post(by_id(gateway), {}, format="json").json()
    other = client.post(BY_PREFIX, {"prefix": "srv"}, format="json").json()
    for report in (one, other):
        assert_report(report, gateway)
    strip = ("run_id", "duration_ms")
    assert {k: v for k, v in one.items() if k not in strip} == {
        k: v for k, v in other.items() if k not in strip
    }
    assert one["summary"]["updated"] == 2 and one["run_id"] != other["run_id"]


@pytest.mark.parametrize("transport", ["sse", "stdio"])
def test_refresh_over_sse_and_stdio(
    transport, world, mcp_server_factory, stdio_server_factory
):
    if transport == "sse":
        server = mcp_server_factory(tools=3)
        gateway = gateway_create(
            tenant=world.tenant,
            name="SSE",
            prefix="sse",
            transport="sse",
            url=server.sse_url,
        )
    else:
        server = stdio_server_factory()
        server.set_tools(
            [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(3)]
        )
        gateway = gateway_create(
            tenant=world.tenant,
            name="stdio",
            prefix="local",
            transport="stdio",
            command=server.command,
            args=server.args,
            env=server.env,
        )
    response = world.client("member").post(
        by_id(gateway), {"apply": True}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["summary"]["added"] == 3
    assert Tool.objects.filter(gateway=gateway).count() == 3


def test_incomplete_catalog_is_200_with_complete_false(mcp_server_factory, world):
    server = mcp_server_factory(tools=6, page_size=2)
    gateway = gateway_create(
        tenant=world.tenant, name="S", prefix="srv", url=server.url
    )
    client = world.client("member")
    client.post(by_id(gateway), {"apply": True}, format="json")
    server.fault("jsonrpc_error", page=2)
    response = client.post(
        by_id(gateway), {"apply": True, "deactivate_missing": True}, format="json"
    )
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["complete"] is False and report["incomplete_reason"]
    assert (
        report["summary"]["disappeared"] == 0 and report["summary"]["deactivated"] == 0
    )
    assert Tool.objects.filter(gateway=gateway, active=True).count() == 6


# -- the 422 rules of POST /api/tools/refresh ---------------------------------


def test_prefix_naming_no_imported_row_is_422(served, world):
    _, gateway = served  # registered, never applied: no imported row
    response = world.client("member").post(BY_PREFIX, {"prefix": "srv"}, format="json")
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "prefix_not_imported"
    assert error["details"]["errors"][0]["field"] == "prefix"
    assert not RefreshRun.objects.filter(gateway=gateway).exists()


def test_prefix_unknown_everywhere_is_422(world):
    response = world.client("member").post(BY_PREFIX, {"prefix": "nope"}, format="json")
    assert error_of(response)["code"] == "prefix_not_imported"


def test_prefix_whose_rows_name_two_servers_is_422(world):
    # The member belongs to two tenants that both import tools under `crm`.
    second = factories.TenantFactory(slug="acme-eu")
    factories.MembershipFactory(
        user=world.users["member"], tenant=second, role="member"
    )
    twin = factories.GatewayFactory(tenant=second, prefix="crm")
    factories.ToolFactory(gateway=twin, name="search_contacts")
    response = world.client("member").post(BY_PREFIX, {"prefix": "crm"}, format="json")
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "prefix_ambiguous"
    assert sorted(error["details"]["gateway_ids"]) == sorted(
        [world.gateway.pk, twin.pk]
    )
    assert (
        not RefreshRun.objects.exists()
        or not RefreshRun.objects.exclude(pk=world.run.pk).exists()
    )


def test_as_caller_without_probe_credential_is_422(world, mcp_server_factory):
    server = mcp_server_factory(tools=2, require_bearer="caller-secret")
    gateway = gateway_create(
        tenant=world.tenant,
        name="As caller",
        prefix="ascaller",
        url=server.url,
        auth_type="as_caller",
    )
    factories.ToolFactory(gateway=gateway, name="already_imported")
    client = world.client("member")
    for path, body in ((BY_PREFIX, {"prefix": "ascaller"}), (by_id(gateway), {})):
        response = client.post(path, body, format="json")
        assert response.status_code == 422, response.content
        assert error_of(response)["code"] == "probe_credential_required"
    # With the credential: sent as a bearer header for this run only.
    response = client.post(
        BY_PREFIX,
        {"prefix": "ascaller", "probe_credential": "caller-secret"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert any(
        seen.get("authorization") == "Bearer caller-secret"
        for seen in server.seen_auth()
    )
    gateway.refresh_from_db()
    assert gateway.credentials_encrypted == ""
    assert "caller-secret" not in response.content.decode()
    run = RefreshRun.objects.get(pk=response.json()["run_id"])
    assert "caller-secret" not in str(run.options) + str(run.report)


# -- named error codes -----------------------------------------------------------


def test_disabled_gateway_is_422_gateway_disabled(served, world):
    _, gateway = served
    Gateway.objects.filter(pk=gateway.pk).update(enabled=False)
    response = world.client("member").post(by_id(gateway), {}, format="json")
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "gateway_disabled"
    run = RefreshRun.objects.get(pk=error["details"]["run_id"])
    assert (run.status, run.trigger, run.error_code) == (
        "skipped",
        "api",
        "gateway_disabled",
    )


def test_unreachable_gateway_is_502_with_the_failed_run(world):
    gateway = factories.GatewayFactory(
        tenant=world.tenant, prefix="dead", url="http://127.0.0.1:9/mcp"
    )
    factories.ToolFactory(gateway=gateway, name="kept")
    for path, body in (
        (by_id(gateway), {"apply": True}),
        (BY_PREFIX, {"prefix": "dead"}),
    ):
        response = world.client("member").post(path, body, format="json")
        assert response.status_code == 502, response.content
        error = error_of(response)
        assert error["code"] == "gateway_unreachable"
        run = RefreshRun.objects.get(pk=error["details"]["run_id"])
        assert (run.status, run.trigger) == ("failed", "api") and run.reason
        assert error["message"] == run.reason
    # Nothing written.
    assert list(Tool.objects.filter(gateway=gateway).values_list("name", "active")) == [
        ("kept", True)
    ]


def test_server_refusing_credentials_is_502(world, mcp_server_factory):
    server = mcp_server_factory(tools=2, require_bearer="right")
    gateway = gateway_create(
        tenant=world.tenant,
        name="S",
        prefix="srv",
        url=server.url,
        auth_type="bearer",
        auth_token="wrong",
    )
    response = world.client("member").post(by_id(gateway), {}, format="json")
    assert response.status_code == 502
    error = error_of(response)
    assert error["code"] == "gateway_unreachable"
    assert error["details"]["probe_error"] == "auth_failed"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
@pytest.mark.parametrize("second", ["by_id", "by_prefix"])
def test_refresh_while_one_runs_is_409_with_the_running_run(
    second, world, mcp_server_factory
):
    """Two real concurrent requests: the second answers 409 naming the first's run."""
    server = mcp_server_factory(tools=4, page_size=2)
    gateway = gateway_create(
        tenant=world.tenant, name="S", prefix="srv", url=server.url
    )
    factories.ToolFactory(gateway=gateway, name="imported")  # the prefix names a row
    server.fault("slow", seconds=3.0, times=1)
    first: dict[str, Any] = {}

    def slow_refresh() -> None:
        try:
            response = world.client("member").post(by_id(gateway), {}, format="json")
            first["status"], first["body"] = response.status_code, response.json()
        finally:
            connection.close()

    thread = threading.Thread(target=slow_refresh)
    thread.start()
    deadline = time.monotonic() + 10
    while not RefreshRun.objects.filter(gateway=gateway, status="running").exists():
        assert time.monotonic() < deadline, "the first refresh never started"
        time.sleep(0.02)
    running = RefreshRun.objects.get(gateway=gateway, status="running")
    path, body = (
        (by_id(gateway), {}) if second == "by_id" else (BY_PREFIX, {"prefix": "srv"})
    )
    response = world.client("admin").post(path, body, format="json")
    thread.join(30)
    assert response.status_code == 409, response.content
    error = error_of(response)
    assert error["code"] == "refresh_in_progress"
    assert error["details"]["running_run_id"] == running.pk
    skipped = RefreshRun.objects.get(pk=error["details"]["run_id"])
    assert (skipped.status, skipped.error_code) == ("skipped", "refresh_in_progress")
    assert first["status"] == 200 and first["body"]["run_id"] == running.pk


# -- request validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"aply": True}, "aply", "unknown_field"),
        ({"apply": "yes please"}, "apply", "invalid"),
        ({"apply": None}, "apply", "null"),
        ({"probe_credential": ""}, "probe_credential", "blank"),
        ({"probe_credential": "x" * 101}, "probe_credential", "max_length"),
        ({"probe_credential": "a\nb"}, "probe_credential", "control_characters"),
        ({"probe_credential": 12}, "probe_credential", "invalid"),
        ({"prefix": "crm"}, "prefix", "unknown_field"),  # not on the by-id endpoint
    ],
)
def test_invalid_bodies_are_422_with_field_paths(body, field, code, world):
    response = world.client("member").post(by_id(world.gateway), body, format="json")
    assert field_errors(response) == {field: code}
    assert (
        RefreshRun.objects.filter(gateway=world.gateway).count() == 1
    )  # the fixture's


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({}, {"prefix": "required"}),
        ({"prefix": None}, {"prefix": "null"}),
        ({"prefix": "crm", "deactivate_missing": 3}, {"deactivate_missing": "invalid"}),
        ({"prefix": "c\x00rm"}, {"prefix": "null_characters_not_allowed"}),
    ],
)
def test_invalid_prefix_bodies_are_422(body, errors, world):
    response = world.client("member").post(BY_PREFIX, body, format="json")
    assert field_errors(response) == errors


def test_body_that_is_not_an_object_is_422(world):
    response = world.client("member").post(by_id(world.gateway), [1, 2], format="json")
    assert field_errors(response) == {"non_field_errors": "invalid"}


def test_malformed_json_is_400_and_wrong_media_type_415(world):
    client = world.client("member")
    response = client.generic(
        "POST", by_id(world.gateway), b"{not json", content_type="application/json"
    )
    assert response.status_code == 400 and error_of(response)["code"] == "parse_error"
    response = client.generic(
        "POST", by_id(world.gateway), b"apply=1", content_type="text/plain"
    )
    assert response.status_code == 415
    assert error_of(response)["code"] == "unsupported_media_type"


def test_bearer_token_of_a_removed_user_or_garbage_is_401(world):
    client = bearer_client(world.users["member"])
    world.users["member"].delete()
    assert client.post(by_id(world.gateway), {}, format="json").status_code == 401
    for garbage in ("tsk_\x00\x01", "not-a-token", "Bearer", "tsk_" + "a" * 200):
        anonymous = bearer_client(None)
        anonymous.credentials(HTTP_AUTHORIZATION=f"Bearer {garbage}")
        response = anonymous.get("/api/gateways/")
        assert response.status_code == 401, garbage
        assert error_of(response)["code"] == "authentication_failed"
