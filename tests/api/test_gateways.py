"""Gateways over the API: register, read back (never a secret), change, delete."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from gateways.crypto import decrypt_credentials, generate_key
from gateways.models import Gateway
from tests import factories
from tests.api.conftest import World, error_of, field_errors

pytestmark = pytest.mark.django_db

LIST = "/api/gateways/"

READ_FIELDS = {
    "id",
    "tenant",
    "name",
    "prefix",
    "transport",
    "url",
    "auth_type",
    "has_credentials",
    "enabled",
    "health",
    "last_refresh_at",
    "last_refresh_status",
    "refresh_interval",
    "protocol_version",
    "capabilities",
    "auto_apply",
    "deactivate_missing",
    "reactivate_returning",
    "apply_effect",
    "include_prompts",
    "include_resources",
}


def create(world: World, role: str = "admin", **body: Any) -> Any:
    body = {
        "tenant": "acme",
        "name": "Billing",
        "prefix": "billing",
        "url": "http://127.0.0.1:9/mcp",
        **body,
    }
    return world.client(role).post(LIST, body, format="json")


def test_register_with_a_bearer_token_reads_back_without_it(world):
    response = create(world, auth_type="bearer", auth_token="tok-s3cret-value")
    assert response.status_code == 201, response.content
    body = response.json()
    assert READ_FIELDS <= set(body)
    assert body["has_credentials"] is True and body["auth_type"] == "bearer"
    assert body["health"] == "unknown" and body["refresh_interval"] is None
    assert body["auto_apply"] is True and body["deactivate_missing"] is False
    assert "tok-s3cret-value" not in response.content.decode()
    assert "auth_token" not in body and "credentials_encrypted" not in body
    stored = Gateway.objects.get(pk=body["id"])
    # Encrypted at rest: the column holds a Fernet token, not the secret.
    assert "tok-s3cret-value" not in stored.credentials_encrypted
    assert decrypt_credentials(stored.credentials_encrypted) == {
        "token": "tok-s3cret-value"
    }
    read = world.client("viewer").get(f"{LIST}{body['id']}/")
    assert read.json() == body


def test_register_with_headers_and_policy(world):
    response = create(
        world,
        auth_type="headers",
        auth_headers={"X-Api-Key": "hdr-s3cret", "X-Org": "acme"},
        refresh_interval=60,
        deactivate_missing=True,
        auto_apply=False,
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (
        body["refresh_interval"],
        body["deactivate_missing"],
        body["auto_apply"],
    ) == (
        60,
        True,
        False,
    )
    assert "hdr-s3cret" not in response.content.decode()
    stored = Gateway.objects.get(pk=body["id"])
    assert decrypt_credentials(stored.credentials_encrypted)["headers"] == {
        "X-Api-Key": "hdr-s3cret",
        "X-Org": "acme",
    }


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"prefix": "bad prefix"}, {"prefix": "invalid"}),
        ({"prefix": "crm"}, {"prefix": "unique"}),  # acme already has crm
        ({"url": "ftp://example.com/mcp"}, {"url": "invalid"}),
        ({"url": "http://user:pw@example.com/mcp"}, {"url": "credentials_in_url"}),
        ({"url": ""}, {"url": "invalid"}),
        ({"transport": "carrier-pigeon"}, {"transport": "invalid_choice"}),
        ({"auth_type": "bearer"}, {"auth_token": "invalid"}),
        ({"auth_token": "t"}, {"auth_token": "invalid"}),
        ({"auth_type": "headers", "auth_headers": {}}, {"auth_headers": "invalid"}),
        (
            {"auth_type": "headers", "auth_headers": {"Bad Name": "v"}},
            {"auth_headers.Bad Name": "invalid"},
        ),
        (
            {"auth_type": "headers", "auth_headers": {"X-Key": "a\r\nInjected: 1"}},
            {"auth_headers.X-Key": "control_characters"},
        ),
        ({"auth_type": "bearer", "auth_token": 42}, {"auth_token": "invalid"}),
        ({"refresh_interval": 0}, {"refresh_interval": "min_value"}),
        ({"name": "x" * 201}, {"name": "max_length"}),
        ({"command": "/bin/sh"}, {"command": "invalid"}),
        ({"credentials_encrypted": "x"}, {"credentials_encrypted": "unknown_field"}),
        ({"health": "healthy"}, {"health": "unknown_field"}),
        ({"tenant": "rival"}, {"tenant": "invalid"}),  # not the caller's: unknown
    ],
)
def test_invalid_registrations_are_422_and_write_nothing(world, body, errors):
    before = Gateway.objects.count()
    assert field_errors(create(world, **body)) == errors
    assert Gateway.objects.count() == before


def test_tenant_may_be_left_out_only_when_it_is_unambiguous(world):
    response = world.client("admin").post(
        LIST,
        {"name": "X", "prefix": "x", "url": "http://127.0.0.1:9/mcp"},
        format="json",
    )
    assert response.status_code == 201 and response.json()["tenant"] == "acme"
    factories.MembershipFactory(
        user=world.users["admin"],
        tenant=factories.TenantFactory(slug="two"),
        role="admin",
    )
    response = world.client("admin").post(
        LIST,
        {"name": "Y", "prefix": "y", "url": "http://127.0.0.1:9/mcp"},
        format="json",
    )
    assert field_errors(response) == {"tenant": "invalid"}


def test_stdio_gateways_are_for_superusers_only(world):
    stdio = {
        "transport": "stdio",
        "command": "/usr/bin/env",
        "args": ["true"],
        "url": "",
    }
    response = create(world, **stdio)
    assert response.status_code == 403
    assert "superusers" in error_of(response)["message"]
    world.users["admin"].is_superuser = True
    world.users["admin"].save()
    response = create(world, **stdio)
    assert response.status_code == 201, response.content
    assert response.json()["command"] == "/usr/bin/env"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_two_racing_registrations_of_one_prefix_give_one_gateway(world):
    barrier = threading.Barrier(4)
    statuses: list[int] = []

    def register() -> None:
        try:
            barrier.wait()
            statuses.append(create(world, prefix="raced").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=register) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [201, 422, 422, 422]
    assert Gateway.objects.filter(prefix="raced").count() == 1


def test_patch_changes_policy_and_rotates_the_secret(world):
    gateway_id = create(world, auth_type="bearer", auth_token="old-secret").json()["id"]
    client = world.client("admin")
    url = f"{LIST}{gateway_id}/"
    response = client.patch(
        url, {"auth_token": "new-secret", "enabled": False}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["enabled"] is False
    assert "new-secret" not in response.content.decode()
    stored = Gateway.objects.get(pk=gateway_id)
    assert decrypt_credentials(stored.credentials_encrypted) == {"token": "new-secret"}
    response = client.patch(url, {"auth_type": "none"}, format="json")
    assert response.json()["has_credentials"] is False
    assert Gateway.objects.get(pk=gateway_id).credentials_encrypted == ""


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"prefix": "other"}, {"prefix": "unknown_field"}),  # fixed once created
        ({"tenant": "rival"}, {"tenant": "unknown_field"}),
        ({"auth_type": "bearer"}, {"auth_token": "invalid"}),
        ({"enabled": "sometimes"}, {"enabled": "invalid"}),
        ({"url": "not a url"}, {"url": "invalid"}),
    ],
)
def test_invalid_patches_are_422_and_change_nothing(world, body, errors):
    url = f"{LIST}{world.gateway.pk}/"
    before = world.client("admin").get(url).json()
    assert field_errors(world.client("admin").patch(url, body, format="json")) == errors
    assert world.client("admin").get(url).json() == before


def test_delete_refuses_a_gateway_with_catalog_history(world):
    response = world.client("admin").delete(f"{LIST}{world.gateway.pk}/")
    assert response.status_code == 409
    assert error_of(response)["code"] == "gateway_has_catalog"
    assert Gateway.objects.filter(pk=world.gateway.pk).exists()
    assert world.client("admin").delete(f"{LIST}{world.spare.pk}/").status_code == 204
    assert not Gateway.objects.filter(pk=world.spare.pk).exists()


def test_list_filters_and_paginates(world):
    client = world.client("viewer")
    body = client.get(LIST).json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert [g["prefix"] for g in body["results"]] == ["crm", "spare"]
    assert client.get(LIST, {"prefix": "spare"}).json()["count"] == 1
    Gateway.objects.filter(pk=world.spare.pk).update(enabled=False)
    assert [
        g["prefix"] for g in client.get(LIST, {"enabled": "false"}).json()["results"]
    ] == ["spare"]
    page = client.get(LIST, {"page_size": 1}).json()
    assert page["count"] == 2 and len(page["results"]) == 1 and page["next"]
    assert field_errors(client.get(LIST, {"health": "bogus"})) == {
        "health": "invalid_choice"
    }
    assert client.get(LIST, {"page": 99}).status_code == 404


def test_key_rotation_keeps_refreshes_working(world, mcp_server_factory):
    """Credentials written under one key, read under `new,old`, re-encrypted, then `new` alone."""
    server = mcp_server_factory(tools=2, require_bearer="rotating-secret")
    old, new = generate_key(), generate_key()
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=old):
        gateway_id = create(
            world, url=server.url, auth_type="bearer", auth_token="rotating-secret"
        ).json()["id"]
    refresh = f"{LIST}{gateway_id}/tools/refresh"
    client = world.client("member")
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=f"{new},{old}"):
        assert client.post(refresh, {}, format="json").status_code == 200
        call_command("rotate_credentials", stdout=open("/dev/null", "w"))  # noqa: SIM115
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=new):
        response = client.post(refresh, {}, format="json")
        assert response.status_code == 200, response.content
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=generate_key()):
        # A key that never encrypted it: a clear failure, no secret, run recorded.
        client.raise_request_exception = False  # a real 500, reported as one
        response = client.post(refresh, {}, format="json")
        assert response.status_code == 500
        error = error_of(response)
        assert "cannot be decrypted" in error["message"]
        assert error["details"]["run_id"]
