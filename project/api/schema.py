"""OpenAPI: document every error status an operation can answer, in the envelope.

drf-spectacular documents success bodies from the serializers; this AutoSchema
adds the failure statuses (401, 403, 404, 422, ...) with the one envelope, so
the schema says what clients really receive. Views add their own specific
statuses (409, 502) through `extend_schema(responses=...)`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema

from project.api.serializers import ErrorEnvelopeSerializer

ERROR_DESCRIPTIONS = {
    "400": "Malformed request body (not JSON): `parse_error`.",
    "401": "No or invalid credentials: `not_authenticated` / `authentication_failed`.",
    "403": "Below the role floor in the object's tenant: `permission_denied`.",
    "404": "No such object among the caller's tenants (another tenant's "
    "object answers 404 too): `not_found`.",
    "405": "Method not allowed: `method_not_allowed`.",
    "406": "Unacceptable Accept header: `not_acceptable`.",
    "413": "Body larger than the server accepts: `request_too_large`.",
    "415": "Body is not `application/json`: `unsupported_media_type`.",
    "422": "Validation failed: `validation_error` with field paths in "
    "`details.errors`; unknown fields are rejected the same way.",
    "500": "Unexpected server failure: `server_error` (details are logged, not shown).",
}


class AutoSchema(SpectacularAutoSchema):
    """Adds the envelope for every failure status an operation can answer."""

    def _error_codes(self) -> list[str]:
        codes = ["405", "406", "500"]
        public = not getattr(self.view, "authentication_classes", None) or getattr(
            self.view, "public_endpoint", False
        )
        if not public:
            codes += ["401", "403"]
        if "{" in self.path or self._is_list_view():
            codes.append("404")  # unknown id, or a page past the end
        if self.method in ("POST", "PUT", "PATCH"):
            codes += ["400", "413", "415", "422"]
        elif self.method == "GET" and self._is_list_view():
            codes.append("422")  # bad filter values
        return codes

    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)  # type: ignore[arg-type]
        if direction != "response":
            return responses
        for code in self._error_codes():
            if code in responses:
                continue
            body = self._get_response_for_code(ErrorEnvelopeSerializer, code)
            body["description"] = ERROR_DESCRIPTIONS[code]
            responses[code] = body
        return dict(sorted(responses.items()))


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer <token>` (knox tokens) in the schema."""

    target_class = "project.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token from `manage.py create_api_token`.",
        }
