"""`manage.py create_api_token USER --tenant SLUG --role ROLE` (SPEC 6)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from knox.models import AuthToken
from rest_framework.test import APIClient

from gateways.models import Membership, Tenant
from tests import factories

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, list[str]]:
    out = io.StringIO()
    call_command("create_api_token", *args, stdout=out)
    lines = out.getvalue().strip().splitlines()
    return lines[-1], lines


def test_creates_user_tenant_membership_and_prints_the_token_last():
    token, lines = run("ci-bot", "--tenant", "newco", "--role", "member")
    user = get_user_model().objects.get(username="ci-bot")
    assert not user.has_usable_password()
    assert Tenant.objects.filter(slug="newco").exists()
    assert Membership.objects.get(user=user).role == "member"
    assert token.startswith("tsk_") and " " not in token
    # Stored hashed: the token itself is nowhere in the table.
    stored = AuthToken.objects.get(user=user)
    assert token not in (stored.digest, stored.token_key)
    assert stored.token_key == token[: len(stored.token_key)]
    assert stored.expiry is not None
    response = APIClient().get("/api/gateways/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200


def test_existing_user_and_tenant_are_reused_and_the_role_set():
    tenant = factories.TenantFactory(slug="acme")
    user = factories.UserFactory(username="ann")
    factories.MembershipFactory(user=user, tenant=tenant, role="viewer")
    token, lines = run("ann", "--tenant", "acme", "--role", "admin", "--days", "0")
    assert Membership.objects.get(user=user, tenant=tenant).role == "admin"
    assert any("changed from viewer to admin" in line for line in lines)
    assert AuthToken.objects.get(user=user).expiry is None
    assert user.check_password("pw-for-tests")  # an existing password is kept
    second, _ = run("ann", "--tenant", "acme", "--role", "admin")
    assert second != token and AuthToken.objects.filter(user=user).count() == 2


@pytest.mark.parametrize(
    "args",
    [
        ("bob", "--tenant", "acme", "--role", "superhero"),
        ("bob", "--tenant", "not a slug", "--role", "viewer"),
        ("bob", "--tenant", "acme", "--role", "viewer", "--days", "-1"),
        ("bad user!", "--tenant", "acme", "--role", "viewer"),
        ("bob", "--role", "viewer"),
    ],
)
def test_bad_arguments_write_nothing(args):
    with pytest.raises((CommandError, SystemExit)):
        call_command(
            "create_api_token", *args, stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert (
        not get_user_model().objects.filter(username__in=["bob", "bad user!"]).exists()
    )
    assert not AuthToken.objects.exists()
