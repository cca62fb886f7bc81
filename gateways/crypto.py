"""Encryption of gateway credentials at rest (Fernet, with key rotation).

`TOOLSYNC_ENCRYPTION_KEY` holds one or more comma-separated Fernet keys: the
first encrypts, every key decrypts, so a new key can be put in front and old
tokens re-encrypted with `rotate_credentials` at leisure.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import lru_cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class CredentialError(Exception):
    """Stored credentials could not be decrypted (wrong or missing key)."""


@lru_cache(maxsize=4)
def _fernet(key_setting: str, secret_key: str) -> MultiFernet:
    raw_keys = [k.strip() for k in key_setting.split(",") if k.strip()]
    if not raw_keys:
        # Development only (settings refuse an empty key with DEBUG off): a key
        # derived from SECRET_KEY, stable across restarts.
        derived = base64.urlsafe_b64encode(hashlib.sha256(secret_key.encode()).digest())
        raw_keys = [derived.decode()]
    try:
        return MultiFernet([Fernet(k) for k in raw_keys])
    except ValueError as exc:
        raise ImproperlyConfigured(
            "TOOLSYNC_ENCRYPTION_KEY must be comma-separated Fernet keys"
        ) from exc


def _cipher() -> MultiFernet:
    return _fernet(settings.TOOLSYNC_ENCRYPTION_KEY, settings.SECRET_KEY)


def encrypt_credentials(credentials: dict[str, Any]) -> str:
    """Encrypt a credentials mapping; an empty mapping stores as empty text."""
    if not credentials:
        return ""
    return _cipher().encrypt(json.dumps(credentials, sort_keys=True).encode()).decode()


def decrypt_credentials(token: str) -> dict[str, Any]:
    """Decrypt what `encrypt_credentials` produced."""
    if not token:
        return {}
    try:
        return json.loads(_cipher().decrypt(token.encode()))
    except InvalidToken as exc:
        raise CredentialError(
            "stored credentials cannot be decrypted with the configured keys"
        ) from exc


def rotate_token(token: str) -> str:
    """Re-encrypt a token with the primary key."""
    if not token:
        return token
    try:
        return _cipher().rotate(token.encode()).decode()
    except InvalidToken as exc:
        raise CredentialError(
            "stored credentials cannot be decrypted with the configured keys"
        ) from exc


def generate_key() -> str:
    return Fernet.generate_key().decode()
