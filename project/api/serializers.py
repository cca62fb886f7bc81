"""Serializer bases shared by every input of the API, and the envelope's schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers


class StrictInputMixin:
    """Reject fields the serializer does not accept (422 with their paths).

    A typo such as `aply: true` must not silently become a dry run, and a
    read-only or server-owned field must not look accepted when it was ignored.
    """

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            writable = {
                name
                for name, field in self.fields.items()  # type: ignore[attr-defined]
                if not field.read_only
            }
            unknown = sorted(str(k) for k in data if k not in writable)
            if unknown:
                raise serializers.ValidationError(
                    {
                        key: [
                            serializers.ErrorDetail(
                                "Unknown field: this endpoint does not accept it.",
                                code="unknown_field",
                            )
                        ]
                        for key in unknown
                    }
                )
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictInputSerializer(StrictInputMixin, serializers.Serializer):
    """A plain input serializer that rejects unknown fields."""


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text.

    For secrets and identifiers: `{"probe_credential": 12}` is a client bug,
    not the credential "12".
    """

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class ValidationErrorItemSerializer(serializers.Serializer):
    field = serializers.CharField(
        allow_null=True,
        help_text="Dotted path of the field, e.g. `auth_headers.X-Key`.",
    )
    code = serializers.CharField()
    message = serializers.CharField()


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="Stable machine-readable code, e.g. `validation_error`, "
        "`not_found`, `refresh_in_progress`, `gateway_unreachable`."
    )
    message = serializers.CharField(help_text="One human-readable sentence.")
    details = serializers.DictField(
        help_text="Structured context: `errors` (a list of field errors) for "
        "validation failures; `run_id` / `running_run_id` for refresh failures.",
    )


class ErrorEnvelopeSerializer(serializers.Serializer):
    """`{"error": {"code", "message", "details"}}`: the body of every failure."""

    error = ErrorBodySerializer()
