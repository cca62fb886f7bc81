"""`manage.py create_api_token USER --tenant SLUG --role ROLE` (SPEC 6)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug
from django.db import transaction
from knox.models import AuthToken

from gateways.models import Membership, Role
from gateways.services import membership_set, tenant_get_or_create


class Command(BaseCommand):
    help = (
        "Create an API token for USER with ROLE in tenant SLUG, creating the user, "
        "tenant and membership when missing. The token is printed as the last "
        "line; only its digest is stored, so it cannot be shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", metavar="USER")
        parser.add_argument("--tenant", required=True, metavar="SLUG")
        parser.add_argument(
            "--role", required=True, choices=[r.value for r in Role], metavar="ROLE"
        )
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="days until the token expires (0 = never); default "
            "TOOLSYNC_API_TOKEN_TTL_DAYS",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        username, slug, role = opts["username"], opts["tenant"], opts["role"]
        days = opts["days"]
        if days is None:
            days = settings.TOOLSYNC_API_TOKEN_TTL_DAYS
        if days < 0:
            raise CommandError("--days must be 0 (never expires) or more")
        try:
            validate_slug(slug)
        except ValidationError:
            raise CommandError(
                f"--tenant {slug!r} is not a slug (letters, digits, - and _)"
            ) from None
        User = get_user_model()
        username_field = User._meta.get_field(User.USERNAME_FIELD)
        try:
            username_field.run_validators(username)
        except ValidationError as exc:
            raise CommandError(f"USER {username!r}: {' '.join(exc.messages)}") from None
        with transaction.atomic():
            user, user_created = User.objects.get_or_create(
                **{User.USERNAME_FIELD: username}
            )
            if user_created:
                # API-only: no password until an admin sets one.
                user.set_unusable_password()
                user.save(update_fields=["password"])
            tenant = tenant_get_or_create(slug=slug)
            previous = (
                Membership.objects.filter(user=user, tenant=tenant)
                .values_list("role", flat=True)
                .first()
            )
            membership_set(user=user, tenant=tenant, role=role)
            _, token = AuthToken.objects.create(
                user=user, expiry=timedelta(days=days) if days else None
            )
        if user_created:
            self.stdout.write(f"created user {username}")
        if previous is None:
            self.stdout.write(f"{username} is now {role} in tenant {tenant.slug}")
        elif previous != role:
            self.stdout.write(
                f"{username}'s role in tenant {tenant.slug} changed from "
                f"{previous} to {role}"
            )
        expiry = f"expires in {days} days" if days else "never expires"
        self.stdout.write(
            f"API token for {username} ({expiry}); send it as "
            "'Authorization: Bearer <token>'. It is shown only once:"
        )
        self.stdout.write(token)
