"""Gateway shapes for the API: one read shape, strict create and update inputs.

Credentials are write-only: `auth_token` / `auth_headers` go in, and only
`has_credentials` comes out. Serializers shape data; the model and
`gateways.services` hold the invariants.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from rest_framework import serializers

from gateways.models import POLICY_FIELDS, PREFIX_PATTERN, Gateway
from project.api.serializers import StrictCharField, StrictInputSerializer

# RFC 9110 token characters: what an HTTP header name may contain.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
MAX_SECRET_CHARS = 8192
MAX_HEADERS = 32
# Fields that only a stdio gateway has (and only superusers may set).
STDIO_ONLY_FIELDS = ("command", "args", "env")


def _no_control_chars(value: str) -> str:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise serializers.ValidationError(
            "Must not contain control characters (CR, LF, NUL, ...).",
            code="control_characters",
        )
    return value


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise serializers.ValidationError("Use an http:// or https:// URL.")
    if parts.username or parts.password:
        raise serializers.ValidationError(
            "Do not put credentials in the URL; use auth_token or auth_headers, "
            "which are stored encrypted.",
            code="credentials_in_url",
        )
    return value


class AuthHeadersField(serializers.DictField):
    """Header name -> value; names are HTTP tokens, values single-line."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=StrictCharField(
                max_length=MAX_SECRET_CHARS,
                trim_whitespace=False,
                validators=[_no_control_chars],
            ),
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> dict[str, str]:
        value = super().to_internal_value(data)
        errors = {
            name: ["Not a valid HTTP header name."]
            for name in value
            if not HEADER_NAME.match(name)
        }
        if errors:
            raise serializers.ValidationError(errors)
        if not value:
            raise serializers.ValidationError("Give at least one header.")
        if len(value) > MAX_HEADERS:
            raise serializers.ValidationError(f"At most {MAX_HEADERS} headers.")
        return value


class GatewaySerializer(serializers.ModelSerializer):
    """A gateway as it reads back (never its credentials or stdio env values)."""

    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    has_credentials = serializers.SerializerMethodField()
    env_keys = serializers.SerializerMethodField()

    class Meta:
        model = Gateway
        fields = [
            "id",
            "tenant",
            "name",
            "prefix",
            "transport",
            "url",
            "command",
            "args",
            "env_keys",
            "auth_type",
            "has_credentials",
            "enabled",
            "health",
            "health_reason",
            "last_health_check_at",
            "last_refresh_at",
            "last_refresh_status",
            "last_catalog_complete",
            *POLICY_FIELDS,
            "next_refresh_at",
            "protocol_version",
            "protocol_era",
            "capabilities",
            "server_info",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_has_credentials(self, obj: Gateway) -> bool:
        return bool(obj.credentials_encrypted)

    def get_env_keys(self, obj: Gateway) -> list[str]:
        return sorted((obj.env or {}).keys())


class _GatewayInputFields(StrictInputSerializer):
    """Fields shared by create and update."""

    name = serializers.CharField(max_length=200, validators=[_no_control_chars])
    transport = serializers.ChoiceField(choices=Gateway.Transport.choices)
    url = serializers.URLField(max_length=2000, validators=[_http_url])
    command = serializers.CharField(
        max_length=500,
        validators=[_no_control_chars],
        help_text="stdio only; superusers only.",
    )
    args = serializers.ListField(
        child=serializers.CharField(max_length=2000, validators=[_no_control_chars]),
        max_length=100,
        help_text="stdio only; superusers only.",
    )
    env = serializers.DictField(
        child=serializers.CharField(max_length=MAX_SECRET_CHARS, allow_blank=True),
        write_only=True,
        help_text="stdio environment; write-only (values may be secrets); superusers only.",
    )
    auth_type = serializers.ChoiceField(choices=Gateway.AuthType.choices)
    auth_token = StrictCharField(
        max_length=MAX_SECRET_CHARS,
        write_only=True,
        trim_whitespace=False,
        validators=[_no_control_chars],
        help_text="Bearer secret for `auth_type=bearer`; write-only, stored encrypted.",
    )
    auth_headers = AuthHeadersField(
        write_only=True,
        help_text="Headers for `auth_type=headers`; write-only, stored encrypted.",
    )
    enabled = serializers.BooleanField()
    refresh_interval = serializers.IntegerField(
        min_value=1,
        max_value=31 * 24 * 3600,
        allow_null=True,
        help_text="Seconds between scheduled refreshes; null means the global default.",
    )
    auto_apply = serializers.BooleanField()
    deactivate_missing = serializers.BooleanField()
    reactivate_returning = serializers.BooleanField()
    apply_effect = serializers.BooleanField()
    include_prompts = serializers.BooleanField()
    include_resources = serializers.BooleanField()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        auth_type = attrs.get("auth_type")
        if auth_type is None and self.instance is not None:
            auth_type = self.instance.auth_type
        auth_type = auth_type or Gateway.AuthType.NONE
        if "auth_token" in attrs and auth_type != Gateway.AuthType.BEARER:
            raise serializers.ValidationError(
                {"auth_token": ["Only a bearer gateway takes auth_token."]}
            )
        if "auth_headers" in attrs and auth_type != Gateway.AuthType.HEADERS:
            raise serializers.ValidationError(
                {"auth_headers": ["Only a headers gateway takes auth_headers."]}
            )
        transport = attrs.get("transport") or (
            self.instance.transport
            if self.instance is not None
            else Gateway.Transport.STREAMABLE_HTTP
        )
        if transport == Gateway.Transport.STDIO:
            if attrs.get("url"):
                raise serializers.ValidationError(
                    {"url": ["A stdio gateway takes command and args, not a URL."]}
                )
        else:
            wrong = {
                name: ["Only a stdio gateway takes this field."]
                for name in STDIO_ONLY_FIELDS
                if attrs.get(name)
            }
            if wrong:
                raise serializers.ValidationError(wrong)
        switching = "auth_type" in attrs and (
            self.instance is None or attrs["auth_type"] != self.instance.auth_type
        )
        if switching or self.instance is None:
            if auth_type == Gateway.AuthType.BEARER and not attrs.get("auth_token"):
                raise serializers.ValidationError(
                    {"auth_token": ["A bearer gateway needs auth_token."]}
                )
            if auth_type == Gateway.AuthType.HEADERS and not attrs.get("auth_headers"):
                raise serializers.ValidationError(
                    {"auth_headers": ["A headers gateway needs auth_headers."]}
                )
        return attrs


class GatewayCreateSerializer(_GatewayInputFields):
    """`POST /api/gateways/`."""

    tenant = serializers.SlugField(
        max_length=64,
        required=False,
        help_text="Tenant slug; may be left out when the caller administers one tenant only.",
    )
    prefix = serializers.RegexField(
        PREFIX_PATTERN,
        max_length=64,
        help_text="Unique per tenant; tools read as `<prefix><separator><name>`. "
        "Fixed once created.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        defaults = {
            "transport": Gateway.Transport.STREAMABLE_HTTP,
            "auth_type": Gateway.AuthType.NONE,
            "enabled": True,
            "refresh_interval": None,
            "auto_apply": True,
            "deactivate_missing": False,
            "reactivate_returning": False,
            "apply_effect": False,
            "include_prompts": False,
            "include_resources": False,
        }
        for name, field in self.fields.items():
            if name in defaults:
                field.required = False
                field.default = defaults[name]
            elif name in (
                "url",
                "command",
                "args",
                "env",
                "auth_token",
                "auth_headers",
            ):
                field.required = False
        self.fields["url"].allow_blank = True  # type: ignore[attr-defined]


class GatewayUpdateSerializer(_GatewayInputFields):
    """`PATCH /api/gateways/{id}/`: any subset; tenant and prefix are fixed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("partial", True)
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.required = False
