"""`manage.py rotate_credentials`: re-encrypt stored gateway credentials with the first key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from gateways.crypto import CredentialError
from gateways.services import gateway_rotate_credentials


class Command(BaseCommand):
    help = (
        "Re-encrypt every gateway's credentials with the first key of "
        "TOOLSYNC_ENCRYPTION_KEY. Rotation: put the new key first "
        "(TOOLSYNC_ENCRYPTION_KEY=new,old), run this, then drop the old key."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            count = gateway_rotate_credentials()
        except CredentialError as exc:
            raise CommandError(
                f"{exc}; nothing was changed (add the old key after the new one)"
            ) from None
        self.stdout.write(f"re-encrypted the credentials of {count} gateway(s)")
