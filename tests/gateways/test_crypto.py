"""Credentials at rest: Fernet encryption with key rotation."""

from __future__ import annotations

import pytest
from django.test import override_settings

from gateways import crypto
from gateways.crypto import (
    CredentialError,
    decrypt_credentials,
    encrypt_credentials,
    generate_key,
)


def test_round_trip_and_ciphertext_hides_the_secret():
    token = encrypt_credentials({"token": "abc-secret"})
    assert "abc-secret" not in token
    assert decrypt_credentials(token) == {"token": "abc-secret"}
    assert encrypt_credentials({}) == "" and decrypt_credentials("") == {}


def test_rotation_with_more_than_one_key():
    old, new = generate_key(), generate_key()
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=old):
        stored = encrypt_credentials({"token": "t"})
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=f"{new},{old}"):
        assert decrypt_credentials(stored) == {"token": "t"}
        rotated = crypto.rotate_token(stored)
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=new):
        assert decrypt_credentials(rotated) == {"token": "t"}
        with pytest.raises(CredentialError):
            decrypt_credentials(stored)


@pytest.mark.django_db
def test_rotate_all_gateways(tenant):
    from gateways.services import gateway_create, gateway_rotate_credentials

    old, new = generate_key(), generate_key()
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=old):
        gateway = gateway_create(
            tenant=tenant,
            name="g",
            prefix="g",
            url="http://127.0.0.1:9/mcp",
            auth_type="bearer",
            auth_token="s3",
        )
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=f"{new},{old}"):
        assert gateway_rotate_credentials() == 1
    gateway.refresh_from_db()
    with override_settings(TOOLSYNC_ENCRYPTION_KEY=new):
        assert decrypt_credentials(gateway.credentials_encrypted) == {"token": "s3"}
