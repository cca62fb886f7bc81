"""API token authentication: knox tokens, stored as digests, sent as `Bearer`."""

from __future__ import annotations

from typing import Any

from knox.auth import TokenAuthentication
from rest_framework import exceptions


class BearerTokenAuthentication(TokenAuthentication):
    """`Authorization: Bearer <token>` (REST_KNOX AUTH_HEADER_PREFIX).

    knox decodes the token as UTF-8 and looks its first characters up in the
    database, so bytes outside printable ASCII would crash it (a decode error,
    or a NUL PostgreSQL refuses). A malformed token is an authentication
    failure (401) like any wrong one.
    """

    def authenticate_credentials(self, token: bytes) -> Any:
        if not token or any(b < 0x21 or b > 0x7E for b in token):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(token)
